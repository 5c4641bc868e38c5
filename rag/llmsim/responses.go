package llmsim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

// The OpenAI Responses API (POST /v1/responses), served by the same engine as chat
// completions. Nothing is stored: previous_response_id and conversation are refused. The
// simulated model answers in text here: function tools are accepted and count in the prompt,
// as do function_call and function_call_output items, but they are not called.

// responsesRequest is the body of POST /v1/responses. Fields the engine does not use
// (reasoning, text, metadata, store, user, ...) are accepted and ignored.
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              responsesInput    `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Stream             bool              `json:"stream"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	PreviousResponseID string            `json:"previous_response_id"`
	Conversation       json.RawMessage   `json:"conversation"`
	Background         bool              `json:"background"`
	Tools              []json.RawMessage `json:"tools"`
}

// responsesItem is one input item: a message (with or without "type": "message"), a
// function_call, a function_call_output, or a reasoning item carried back.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responsesInput is the input: a string (one user message) or a list of items.
type responsesInput []responsesItem

// UnmarshalJSON implements json.Unmarshaler.
func (in *responsesInput) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		text, _ := json.Marshal(s)
		*in = responsesInput{{Type: "message", Role: "user", Content: text}}
		return nil
	}
	var items []responsesItem
	if err := json.Unmarshal(b, &items); err != nil {
		return errors.New("input must be a string or an array of input items")
	}
	*in = items
	return nil
}

// inputText returns the text of content: a string, or text parts (input_text, output_text)
// joined; other parts are errors naming param.
func inputText(content json.RawMessage, param string) (string, error) {
	content = bytes.TrimSpace(content)
	if len(content) == 0 || bytes.Equal(content, []byte("null")) {
		return "", nil
	}
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(content, &parts); err != nil {
		return "", invalidParam(param, param+" must be a string or an array of content parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "input_text" && p.Type != "output_text" {
			return "", invalidParam(fmt.Sprintf("%s[%d].type", param, i), fmt.Sprintf("%s[%d] has type %.32q: only input_text and output_text parts are supported", param, i, p.Type))
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// genRequest validates r against lim and converts it: instructions become a system message,
// message items messages, function_call items an assistant message's tool calls and
// function_call_output items tool messages; function tools are offered with tool_choice none,
// so that they count in the prompt but the model answers in text.
func (r *responsesRequest) genRequest(lim openai.Limits) (rag.GenRequest, error) {
	var g rag.GenRequest
	switch {
	case strings.TrimSpace(r.Model) == "":
		return g, invalidParam("model", "model is required")
	case len(r.Model) > openai.MaxModelLen:
		return g, invalidParam("model", fmt.Sprintf("model name is %d bytes long; at most %d are accepted", len(r.Model), openai.MaxModelLen))
	case r.PreviousResponseID != "":
		return g, invalidParam("previous_response_id", "previous_response_id is not supported: llm-sim stores no responses; send the whole conversation in input")
	case len(bytes.TrimSpace(r.Conversation)) > 0 && !bytes.Equal(bytes.TrimSpace(r.Conversation), []byte("null")):
		return g, invalidParam("conversation", "conversation is not supported: llm-sim stores no conversations; send the whole conversation in input")
	case r.Background:
		return g, invalidParam("background", "background responses are not supported: llm-sim stores no responses")
	case len(r.Input) == 0:
		return g, invalidParam("input", "input is required: a string or a non-empty array of input items")
	case lim.MaxMessages > 0 && len(r.Input) > lim.MaxMessages:
		return g, invalidParam("input", fmt.Sprintf("too many input items: %d, at most %d", len(r.Input), lim.MaxMessages))
	case len(r.Tools) > openai.MaxTools:
		return g, invalidParam("tools", fmt.Sprintf("too many tools: %d, at most %d", len(r.Tools), openai.MaxTools))
	}
	g = rag.GenRequest{Model: r.Model, MaxTokens: lim.DefaultMaxTokens, Temperature: 1}
	if r.MaxOutputTokens != nil {
		g.MaxTokens = *r.MaxOutputTokens
	}
	if g.MaxTokens < 1 || (lim.MaxTokensCap > 0 && g.MaxTokens > lim.MaxTokensCap) {
		return g, invalidParam("max_output_tokens", fmt.Sprintf("max_output_tokens must be between 1 and %d, got %d", lim.MaxTokensCap, g.MaxTokens))
	}
	if t := r.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > 2 {
			return g, invalidParam("temperature", fmt.Sprintf("temperature must be between 0 and 2, got %v", *t))
		}
		g.Temperature = *t
	}
	if p := r.TopP; p != nil && (math.IsNaN(*p) || *p < 0 || *p > 1) {
		return g, invalidParam("top_p", fmt.Sprintf("top_p must be between 0 and 1, got %v", *p))
	}
	if r.Instructions != nil && *r.Instructions != "" {
		g.Messages = append(g.Messages, rag.Message{Role: "system", Content: *r.Instructions})
	}
	for i, it := range r.Input {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			switch it.Role {
			case "user", "system", "developer", "assistant":
			default:
				return g, invalidParam(param+".role", fmt.Sprintf("%s.role %.32q is not user, system, developer or assistant", param, it.Role))
			}
			text, err := inputText(it.Content, param+".content")
			if err != nil {
				return g, err
			}
			g.Messages = append(g.Messages, rag.Message{Role: it.Role, Content: text})
		case "function_call":
			call := rag.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
			if n := len(g.Messages); n > 0 && g.Messages[n-1].Role == "assistant" {
				g.Messages[n-1].ToolCalls = append(g.Messages[n-1].ToolCalls, call)
			} else {
				g.Messages = append(g.Messages, rag.Message{Role: "assistant", ToolCalls: []rag.ToolCall{call}})
			}
		case "function_call_output":
			text, err := inputText(it.Output, param+".output")
			if err != nil {
				return g, err
			}
			g.Messages = append(g.Messages, rag.Message{Role: "tool", ToolCallID: it.CallID, Content: text})
		case "reasoning":
			// A previous turn's reasoning, carried back: not part of the prompt.
		default:
			return g, invalidParam(param+".type", fmt.Sprintf("%s has type %.48q: the simulated model reads message, function_call and function_call_output items", param, it.Type))
		}
	}
	for i, raw := range r.Tools {
		var t struct {
			Type, Name, Description string
			Parameters              json.RawMessage
		}
		if json.Unmarshal(raw, &t) != nil || t.Type != "function" || t.Name == "" || len(t.Name) > maxToolNameLen {
			return g, invalidParam(fmt.Sprintf("tools[%d]", i), fmt.Sprintf("tools[%d]: only function tools with a name of 1 to %d bytes are supported", i, maxToolNameLen))
		}
		g.Tools = append(g.Tools, rag.Tool{Name: t.Name, Description: t.Description, Parameters: string(t.Parameters)})
	}
	g.ToolChoice = "none"
	return g, nil
}

// responseUsage is the usage object of a response.
type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

func responseUsageOf(u rag.Usage) *responseUsage {
	return &responseUsage{
		InputTokens: u.PromptTokens, InputTokensDetails: map[string]int{"cached_tokens": u.CachedTokens},
		OutputTokens: u.CompletionTokens, OutputTokensDetails: map[string]int{"reasoning_tokens": u.ReasoningTokens},
		TotalTokens: u.PromptTokens + u.CompletionTokens,
	}
}

// responseObject is a response, as the non-streamed answer and the lifecycle events carry it.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Error              any               `json:"error"`
	IncompleteDetails  map[string]string `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    int               `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []map[string]any  `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               map[string]any    `json:"text"`
	ToolChoice         string            `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *responseUsage    `json:"usage"`
	Metadata           map[string]string `json:"metadata"`
}

func newResponseObject(r *responsesRequest, g rag.GenRequest) responseObject {
	topP := 1.0
	if r.TopP != nil {
		topP = *r.TopP
	}
	tools := r.Tools
	if tools == nil {
		tools = []json.RawMessage{}
	}
	return responseObject{
		ID: "resp_" + randomHex(24), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Instructions: r.Instructions, MaxOutputTokens: g.MaxTokens, Model: r.Model, Output: []map[string]any{},
		Temperature: g.Temperature, Text: map[string]any{"format": map[string]string{"type": "text"}},
		ToolChoice: "none", Tools: tools, TopP: topP, Truncation: "disabled", Metadata: map[string]string{},
	}
}

// finish sets the response's final status, from finish, and its usage: an answer that ran to
// max_output_tokens is incomplete, as OpenAI reports it.
func (o *responseObject) finish(finish string, u rag.Usage) {
	o.Status = "completed"
	if finish == "length" {
		o.Status = "incomplete"
		o.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
	}
	o.Usage = responseUsageOf(u)
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func reasoningItem(id, text string) map[string]any {
	return map[string]any{"type": "reasoning", "id": id, "summary": []any{},
		"content": []any{map[string]any{"type": "reasoning_text", "text": text}}}
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func messageItem(id, status string, content []any) map[string]any {
	return map[string]any{"type": "message", "id": id, "status": status, "role": "assistant", "content": content}
}

func (h *handler) responses(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	if err := openai.DecodeJSON(http.MaxBytesReader(w, r.Body, openai.MaxBodyBytes), &req, "model and input"); err != nil {
		openai.WriteError(w, err)
		return
	}
	gen, err := req.genRequest(h.limits)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	resp := newResponseObject(&req, gen)
	gen.ID = resp.ID
	st, err := h.e.Submit(r.Context(), gen)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	defer func() { _ = st.Close() }()
	if req.Stream {
		streamResponse(r.Context(), w, resp, st)
		return
	}
	out, err := collect(st)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	resp.finish(out.finishReason, out.usage)
	if out.reasoning != "" {
		resp.Output = append(resp.Output, reasoningItem("rs_"+randomHex(24), out.reasoning))
	}
	resp.Output = append(resp.Output, messageItem("msg_"+randomHex(24), resp.Status, []any{outputText(out.text)}))
	openai.WriteJSON(w, http.StatusOK, resp)
}

// responseStream writes one response as the Responses API's event stream.
type responseStream struct {
	sse  *openai.SSE
	seq  int
	resp *responseObject
	item struct { // the output item being written; id "" when none is open
		id, kind string
		text     strings.Builder
	}
}

func (s *responseStream) event(name string, v map[string]any) error {
	v["type"] = name
	v["sequence_number"] = s.seq
	s.seq++
	return s.sse.Event(name, v)
}

func (s *responseStream) index() int { return len(s.resp.Output) }

// open starts an output item of kind ("reasoning" or "message") and its one content part.
func (s *responseStream) open(kind string) error {
	if err := s.closeItem(); err != nil {
		return err
	}
	s.item.kind = kind
	s.item.text.Reset()
	var item, part map[string]any
	if kind == "reasoning" {
		s.item.id = "rs_" + randomHex(24)
		item = map[string]any{"type": "reasoning", "id": s.item.id, "summary": []any{}, "content": []any{}}
		part = map[string]any{"type": "reasoning_text", "text": ""}
	} else {
		s.item.id = "msg_" + randomHex(24)
		item = messageItem(s.item.id, "in_progress", []any{})
		part = map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
	}
	if err := s.event("response.output_item.added", map[string]any{"output_index": s.index(), "item": item}); err != nil {
		return err
	}
	return s.event("response.content_part.added", map[string]any{"item_id": s.item.id, "output_index": s.index(), "content_index": 0, "part": part})
}

func (s *responseStream) delta(kind, text string) error {
	if s.item.kind != kind || s.item.id == "" {
		if err := s.open(kind); err != nil {
			return err
		}
	}
	s.item.text.WriteString(text)
	ev := map[string]any{"item_id": s.item.id, "output_index": s.index(), "content_index": 0, "delta": text}
	name := "response.reasoning_text.delta"
	if kind == "message" {
		name = "response.output_text.delta"
		ev["logprobs"] = []any{}
	}
	return s.event(name, ev)
}

// closeItem ends the open output item: its text's done event, its part's and its own, and adds
// it to the response's output.
func (s *responseStream) closeItem() error {
	if s.item.id == "" {
		return nil
	}
	text := s.item.text.String()
	var item, part map[string]any
	doneName := "response.reasoning_text.done"
	done := map[string]any{"item_id": s.item.id, "output_index": s.index(), "content_index": 0, "text": text}
	if s.item.kind == "reasoning" {
		item = reasoningItem(s.item.id, text)
		part = map[string]any{"type": "reasoning_text", "text": text}
	} else {
		doneName = "response.output_text.done"
		done["logprobs"] = []any{}
		part = outputText(text)
		status := s.resp.Status
		if status == "in_progress" {
			status = "incomplete" // the stream failed before the answer ended
		}
		item = messageItem(s.item.id, status, []any{part})
	}
	if err := s.event(doneName, done); err != nil {
		return err
	}
	if err := s.event("response.content_part.done", map[string]any{"item_id": s.item.id, "output_index": s.index(), "content_index": 0, "part": part}); err != nil {
		return err
	}
	if err := s.event("response.output_item.done", map[string]any{"output_index": s.index(), "item": item}); err != nil {
		return err
	}
	s.resp.Output = append(s.resp.Output, item)
	s.item.id, s.item.kind = "", ""
	return nil
}

// streamResponse relays st as the Responses API's event stream: response.created and
// response.in_progress at once; for the reasoning, if any, a reasoning item
// (response.output_item.added, response.content_part.added, response.reasoning_text.delta...,
// response.reasoning_text.done, response.content_part.done, response.output_item.done); for
// the answer the same with a message item and response.output_text.delta and .done; then
// response.completed with the usage. As vLLM, the stream ends with response.completed even
// when the answer ran to max_output_tokens; the response's status then says incomplete, with
// incomplete_details.reason max_output_tokens. A failure after the first event is an error
// event.
func streamResponse(ctx context.Context, w http.ResponseWriter, resp responseObject, st *Stream) {
	s := &responseStream{sse: openai.NewSSE(w), resp: &resp}
	s.sse.SetHeaders(w.Header())
	if s.event("response.created", map[string]any{"response": resp}) != nil ||
		s.event("response.in_progress", map[string]any{"response": resp}) != nil {
		return
	}
	for {
		d, err := st.RecvOutput()
		if err != nil {
			if ctx.Err() == nil {
				he := openai.ToHTTPError(err)
				_ = s.event("error", map[string]any{"code": he.Code, "message": openai.Truncate(he.Message, openai.MaxErrorMessage), "param": nil})
			}
			return
		}
		if d.Reasoning != "" {
			if s.delta("reasoning", d.Reasoning) != nil {
				return
			}
		}
		if d.Text != "" {
			if s.delta("message", d.Text) != nil {
				return
			}
		}
		if d.FinishReason == "" {
			continue
		}
		resp.finish(d.FinishReason, *d.Usage)
		if s.item.kind != "message" { // an answer with no text token still has its message
			if s.open("message") != nil {
				return
			}
		}
		if s.closeItem() != nil {
			return
		}
		_ = s.event("response.completed", map[string]any{"response": resp})
		return
	}
}
