package loadgen

// conversation is what a session's chat steps said so far, for the steps that continue it
// (Request.Continues): the messages of the last chat step sent and the server's answer to it.
// The answer is kept only when a later step continues the conversation, so that sessions of
// independent requests, and lone requests, cost nothing more.
type conversation struct {
	history []Message
	tokens  int // the history's tokens: the last step's prompt and output tokens
}

// request returns what to send for step req, given the session's later steps: req itself when
// it needs nothing from the conversation, else a copy that follows the history (Continues) or
// that keeps its answer for a later step (KeepAnswer). The copy's messages are its own, so
// that the history never writes into a workload's messages.
func (c *conversation) request(req *Request, later []Step) *Request {
	if !isChat(req) {
		return req
	}
	keep := false
	for i := range later {
		if later[i].Request.Continues {
			keep = true
			break
		}
	}
	if !keep && (!req.Continues || len(c.history) == 0) {
		return req
	}
	out := *req
	out.KeepAnswer = keep
	if req.Continues && len(c.history) > 0 {
		out.Messages = make([]Message, 0, len(c.history)+len(req.Messages))
		out.Messages = append(append(out.Messages, c.history...), req.Messages...)
		out.PromptTokens = c.tokens + req.PromptTokens // the source's estimate is the new turn's
	}
	return &out
}

// answered records the answer to req, which rec measured, and drops it from rec: the history
// becomes req's messages and the answer. Requests that did not keep their answer leave the
// history as it was.
func (c *conversation) answered(req *Request, rec *Record) {
	if !req.KeepAnswer {
		return
	}
	h := make([]Message, 0, len(req.Messages)+1)
	h = append(h, req.Messages...)
	c.history = append(h, Message{Role: "assistant", Content: rec.Answer})
	c.tokens = rec.PromptTokens + rec.OutputTokens
	rec.Answer = ""
}

// isChat reports whether req is a chat completion (not a lookup or an embeddings request).
func isChat(req *Request) bool { return req.Path == "" && req.Input == nil }
