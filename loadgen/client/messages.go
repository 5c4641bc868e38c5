package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// anthropicUsage is the usage of a message. input_tokens leaves out the prompt tokens read from
// or written to the prompt cache, which the cache members count.
type anthropicUsage struct {
	InputTokens              *int `json:"input_tokens"`
	CacheCreationInputTokens int  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int  `json:"cache_read_input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
}

// prompt records the usage's prompt tokens (input, cache reads and cache writes) in rec.
func (u *anthropicUsage) prompt(rec *loadgen.Record) {
	if u.InputTokens == nil {
		return
	}
	rec.PromptTokens = max(*u.InputTokens, 0) + max(u.CacheReadInputTokens, 0) + max(u.CacheCreationInputTokens, 0)
	rec.CachedTokens = max(u.CacheReadInputTokens, 0)
}

// anthropicEvent is what a benchmark reads from one event of a Messages stream.
type anthropicEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message *struct {
		Model string          `json:"model"`
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
	ContentBlock *struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta *struct {
		anthropicDeltaBody
		StopReason json.RawMessage `json:"stop_reason"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// anthropicDelta is a content_block_delta event.
type anthropicDelta struct {
	Type  string             `json:"type"`
	Index int                `json:"index"`
	Delta anthropicDeltaBody `json:"delta"`
}

type anthropicDeltaBody struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Thinking    string `json:"thinking"`
	PartialJSON string `json:"partial_json"`
}

// handle records a delta: text and thinking are tokens, a tool's input too and a piece of its
// call; signatures and citations are not.
func (d *anthropicDelta) handle(s *eventStream, offset time.Duration) error {
	switch d.Delta.Type {
	case "text_delta":
		if d.Delta.Text != "" {
			return s.content(offset, true, false, d.Delta.Text)
		}
	case "thinking_delta":
		if d.Delta.Thinking != "" {
			return s.content(offset, false, true, "")
		}
	case "input_json_delta":
		if d.Delta.PartialJSON != "" {
			if err := s.toolCall(d.Index, "", "", d.Delta.PartialJSON); err != nil {
				return err
			}
			return s.content(offset, false, false, "")
		}
	}
	return nil
}

// readMessagesStream reads a Messages stream. The first token is the first content_block_delta
// carrying text (text_delta), thinking (thinking_delta) or a tool call's input
// (input_json_delta); the first answer token the first text_delta. Each of those deltas is a
// chunk of one token. Output tokens are message_delta's usage.output_tokens (thinking
// included, as Anthropic counts them), else the number of deltas; prompt tokens are
// message_start's usage: input_tokens plus the cache's reads and writes, the reads being the
// cached tokens. The stream must end with message_stop (or at least reach message_delta's
// stop_reason); an error event fails the request with its message.
func (c *Client) readMessagesStream(ctx context.Context, body io.Reader, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	var (
		ev anthropicEvent
		d  anthropicDelta
	)
	c.readEvents(ctx, body, req, origin, rec, "message_stop", func(s *eventStream, event, data []byte, offset time.Duration) error {
		if string(event) == "content_block_delta" { // most events: a lighter decode
			// An event this does not decode (a field of another type) takes the general path.
			d = anthropicDelta{}
			if json.Unmarshal(data, &d) == nil && (d.Type == "" || d.Type == "content_block_delta") {
				return d.handle(s, offset)
			}
		}
		ev = anthropicEvent{}
		if err := decodeEvent(event, data, &ev); err != nil {
			return err
		}
		switch eventType(event, ev.Type) {
		case "message_start":
			if m := ev.Message; m != nil {
				if m.Usage != nil {
					m.Usage.prompt(rec)
				}
				if c.cfg.tracing != nil && m.Model != "" {
					rec.ResponseModel = truncateTo(m.Model, maxAttrText)
				}
			}
		case "content_block_start":
			if b := ev.ContentBlock; b != nil && b.Type == "tool_use" {
				return s.toolCall(ev.Index, b.ID, b.Name, "")
			}
		case "content_block_delta":
			if ev.Delta != nil {
				return (&anthropicDelta{Index: ev.Index, Delta: ev.Delta.anthropicDeltaBody}).handle(s, offset)
			}
		case "message_delta":
			if u := ev.Usage; u != nil {
				u.prompt(rec) // newer servers repeat the input counts here
				if u.OutputTokens != nil {
					if err := s.outputTokens(max(*u.OutputTokens, 0)); err != nil {
						return err
					}
				}
			}
			if d := ev.Delta; d != nil && jsonString(d.StopReason) != "" {
				s.finished = true
			}
		case "message_stop":
			s.finished = true
		case "error":
			return errorEvent(anthropicErrorText(ev.Error, data))
		}
		return nil
	})
}

// anthropicErrorText is the message of an Anthropic error: error.message, else the raw error,
// else the event's data.
func anthropicErrorText(raw json.RawMessage, data []byte) string {
	if msg := rawMessage(raw); msg != "" && string(raw) != "null" {
		return msg
	}
	return string(data)
}

// anthropicMessage is what a benchmark reads from a whole (non-streamed) message.
type anthropicMessage struct {
	Type    string `json:"type"`
	Model   string `json:"model"`
	Content []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		Thinking string          `json:"thinking"`
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Input    json.RawMessage `json:"input"`
	} `json:"content"`
	Usage *anthropicUsage `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// readMessage reads a non-streamed message: its usage, its answer text and tool calls.
func (c *Client) readMessage(ctx context.Context, body io.Reader, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	rec.End = time.Since(origin)
	if err != nil {
		fail(rec, classifyRead(ctx, err), fmt.Errorf("read body: %w", err))
		return
	}
	var m anthropicMessage
	if err := json.Unmarshal(b, &m); err != nil {
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("response is not JSON: %s", truncate(string(b))))
		return
	}
	if m.Type == "error" || len(m.Error) > 0 && string(m.Error) != "null" {
		fail(rec, loadgen.ErrKindStream, fmt.Errorf("error response: %s", truncate(anthropicErrorText(m.Error, b))))
		return
	}
	if m.Type != "message" {
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("response is not a message: %s", truncate(string(b))))
		return
	}
	s := &eventStream{rec: rec, keep: req.KeepAnswer, maxTokens: c.maxTokensOf(req)}
	s.limit = c.outputLimitOf(s.maxTokens)
	if u := m.Usage; u != nil {
		u.prompt(rec)
		if u.OutputTokens != nil {
			if err := s.outputTokens(max(*u.OutputTokens, 0)); err != nil {
				fail(rec, loadgen.ErrKindOverlong, err)
				return
			}
			rec.TokensFromUsage = true
		}
	}
	for i, blk := range m.Content {
		switch blk.Type {
		case "text":
			if s.keep {
				s.answer = appendLimited(s.answer, []byte(blk.Text), maxAnswerBytes)
			}
		case "thinking", "redacted_thinking":
			rec.Reasoned = true
		case "tool_use":
			if err := s.toolCall(i, blk.ID, blk.Name, string(blk.Input)); err != nil {
				failStream(rec, err)
				return
			}
		}
	}
	s.endUnary(c, m.Model)
}
