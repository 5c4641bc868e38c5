package llmsim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strings"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

// The Anthropic Messages API (POST /v1/messages), served by the same engine as chat
// completions: the request becomes a rag.GenRequest, and the stream's deltas become Anthropic's
// events. The simulated model answers in text here: tools are accepted and count in the prompt,
// but are not called.

// messagesRequest is the body of POST /v1/messages. Fields the engine does not use
// (stop_sequences, metadata, top_k, service_tier, ...) are accepted and ignored.
type messagesRequest struct {
	Model       string             `json:"model"`
	MaxTokens   *int               `json:"max_tokens"`
	Messages    []anthropicMessage `json:"messages"`
	System      anthropicContent   `json:"system"`
	Stream      bool               `json:"stream"`
	Temperature *float64           `json:"temperature"`
	TopP        *float64           `json:"top_p"`
	Tools       []anthropicTool    `json:"tools"`
	Thinking    *struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"thinking"`
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content anthropicContent `json:"content"`
}

type anthropicTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// anthropicBlock is one content block of a request: text, a tool_use of an assistant turn, a
// tool_result of a user turn, or a thinking block an assistant turn carries back.
type anthropicBlock struct {
	Type      string           `json:"type"`
	Text      string           `json:"text,omitempty"`
	ID        string           `json:"id,omitempty"`
	Name      string           `json:"name,omitempty"`
	Input     json.RawMessage  `json:"input,omitempty"`
	ToolUseID string           `json:"tool_use_id,omitempty"`
	Content   anthropicContent `json:"content,omitempty"`
}

// anthropicContent is message content: a string (one text block) or an array of blocks.
type anthropicContent []anthropicBlock

// UnmarshalJSON implements json.Unmarshaler.
func (c *anthropicContent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*c = nil
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = anthropicContent{{Type: "text", Text: s}}
		return nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(b, &blocks); err != nil {
		return errors.New("content must be a string or an array of content blocks")
	}
	*c = blocks
	return nil
}

// text joins the text of the text blocks of c; other blocks are errors naming param.
func (c anthropicContent) text(param string) (string, error) {
	var b strings.Builder
	for i, blk := range c {
		if blk.Type != "text" {
			return "", invalidParam(fmt.Sprintf("%s[%d].type", param, i), fmt.Sprintf("%s[%d] has type %.32q: only text blocks are supported here", param, i, blk.Type))
		}
		b.WriteString(blk.Text)
	}
	return b.String(), nil
}

func invalidParam(param, msg string) *openai.HTTPError {
	return &openai.HTTPError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: msg, Err: rag.ErrInvalidRequest}
}

// maxToolNameLen bounds a tool's name, as Anthropic does.
const maxToolNameLen = 128

// genRequest validates r against lim and converts it: system becomes a system message,
// tool_use blocks an assistant message's tool calls, tool_result blocks tool messages; tools
// are offered with tool_choice none, so that they count in the prompt but the model answers in
// text. It also returns the request options (the thinking budget).
func (r *messagesRequest) genRequest(lim openai.Limits) (rag.GenRequest, []RequestOption, error) {
	var g rag.GenRequest
	switch {
	case strings.TrimSpace(r.Model) == "":
		return g, nil, invalidParam("model", "model is required")
	case len(r.Model) > openai.MaxModelLen:
		return g, nil, invalidParam("model", fmt.Sprintf("model name is %d bytes long; at most %d are accepted", len(r.Model), openai.MaxModelLen))
	case r.MaxTokens == nil:
		return g, nil, invalidParam("max_tokens", "max_tokens is required")
	case *r.MaxTokens < 1 || (lim.MaxTokensCap > 0 && *r.MaxTokens > lim.MaxTokensCap):
		return g, nil, invalidParam("max_tokens", fmt.Sprintf("max_tokens must be between 1 and %d, got %d", lim.MaxTokensCap, *r.MaxTokens))
	case len(r.Messages) == 0:
		return g, nil, invalidParam("messages", "messages must be a non-empty array")
	case lim.MaxMessages > 0 && len(r.Messages) > lim.MaxMessages:
		return g, nil, invalidParam("messages", fmt.Sprintf("too many messages: %d, at most %d", len(r.Messages), lim.MaxMessages))
	case len(r.Tools) > openai.MaxTools:
		return g, nil, invalidParam("tools", fmt.Sprintf("too many tools: %d, at most %d", len(r.Tools), openai.MaxTools))
	}
	if t := r.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 1) {
		return g, nil, invalidParam("temperature", fmt.Sprintf("temperature must be between 0 and 1, got %v", *t))
	}
	if p := r.TopP; p != nil && (math.IsNaN(*p) || *p < 0 || *p > 1) {
		return g, nil, invalidParam("top_p", fmt.Sprintf("top_p must be between 0 and 1, got %v", *p))
	}
	g = rag.GenRequest{Model: r.Model, MaxTokens: *r.MaxTokens, Temperature: 1}
	if r.Temperature != nil {
		g.Temperature = *r.Temperature
	}
	if len(r.System) > 0 {
		system, err := r.System.text("system")
		if err != nil {
			return g, nil, err
		}
		g.Messages = append(g.Messages, rag.Message{Role: "system", Content: system})
	}
	for i, m := range r.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return g, nil, invalidParam(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf("messages[%d].role %.32q is not user or assistant", i, m.Role))
		}
		msg := rag.Message{Role: m.Role}
		var text strings.Builder
		for j, blk := range m.Content {
			param := fmt.Sprintf("messages[%d].content[%d]", i, j)
			switch {
			case blk.Type == "text":
				text.WriteString(blk.Text)
			case blk.Type == "tool_use" && m.Role == "assistant":
				msg.ToolCalls = append(msg.ToolCalls, rag.ToolCall{ID: blk.ID, Name: blk.Name, Arguments: string(blk.Input)})
			case blk.Type == "tool_result" && m.Role == "user":
				result, err := blk.Content.text(param + ".content")
				if err != nil {
					return g, nil, err
				}
				g.Messages = append(g.Messages, rag.Message{Role: "tool", ToolCallID: blk.ToolUseID, Content: result})
			case (blk.Type == "thinking" || blk.Type == "redacted_thinking") && m.Role == "assistant":
				// A previous turn's thinking, sent back: not part of the prompt, as Anthropic drops it.
			default:
				return g, nil, invalidParam(param+".type", fmt.Sprintf("%s has type %.32q in a %s message: the simulated model reads text, tool_use (assistant) and tool_result (user) blocks",
					param, blk.Type, m.Role))
			}
		}
		msg.Content = text.String()
		if msg.Content != "" || len(msg.ToolCalls) > 0 || len(m.Content) == 0 {
			g.Messages = append(g.Messages, msg)
		}
	}
	for i, t := range r.Tools {
		if t.Type != "" && t.Type != "custom" {
			return g, nil, invalidParam(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("tools[%d].type %.48q: only custom tools are supported", i, t.Type))
		}
		if t.Name == "" || len(t.Name) > maxToolNameLen {
			return g, nil, invalidParam(fmt.Sprintf("tools[%d].name", i), fmt.Sprintf("tools[%d].name must be 1 to %d bytes", i, maxToolNameLen))
		}
		g.Tools = append(g.Tools, rag.Tool{Name: t.Name, Description: t.Description, Parameters: string(t.InputSchema)})
	}
	g.ToolChoice = "none"
	var opts []RequestOption
	if th := r.Thinking; th != nil {
		switch th.Type {
		case "enabled":
			if th.BudgetTokens < 1 || th.BudgetTokens >= *r.MaxTokens {
				return g, nil, invalidParam("thinking.budget_tokens", fmt.Sprintf("thinking.budget_tokens must be at least 1 and less than max_tokens (%d), got %d", *r.MaxTokens, th.BudgetTokens))
			}
			opts = append(opts, WithRequestReasoning(th.BudgetTokens))
		case "disabled":
			opts = append(opts, WithRequestReasoning(0))
		}
	}
	return g, opts, nil
}

// anthropicUsage is the usage object of a message. input_tokens leaves out the prompt tokens
// read from the prefix cache, which cache_read_input_tokens counts, as Anthropic counts them.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

func anthropicUsageOf(prompt, cached, output int) anthropicUsage {
	return anthropicUsage{InputTokens: prompt - cached, CacheReadInputTokens: cached, OutputTokens: output}
}

// anthropicResponse is a message, whole (non-streamed) or as message_start carries it.
type anthropicResponse struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []map[string]any `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

// stopReason maps a finish reason to Anthropic's stop_reason.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls":
		return "tool_use"
	}
	return "end_turn"
}

// thinkingSignature is the opaque signature a thinking block ends with.
func thinkingSignature(thinking string) string {
	h := fnv.New128a()
	_, _ = h.Write([]byte(thinking))
	return hex.EncodeToString(h.Sum(nil))
}

// newMessageID returns a fresh message id, "msg_" and 24 hex digits.
func newMessageID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "msg_" + hex.EncodeToString(b[:])
}

// writeAnthropicError writes err as Anthropic's error JSON,
// {"type":"error","error":{"type","message"}}, with the status ToHTTPError gives it (529 for an
// overloaded engine, as Anthropic reports overload).
func writeAnthropicError(w http.ResponseWriter, err error) {
	he := openai.ToHTTPError(err)
	status := he.Status
	if errors.Is(err, rag.ErrOverloaded) {
		status = 529
	}
	openai.WriteJSON(w, status, anthropicErrorBody(status, he.Message))
}

func anthropicErrorBody(status int, message string) map[string]any {
	kind := "api_error"
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusUnprocessableEntity:
		kind = "invalid_request_error"
	case http.StatusNotFound:
		kind = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		kind = "request_too_large"
	case http.StatusTooManyRequests:
		kind = "rate_limit_error"
	case http.StatusGatewayTimeout:
		kind = "timeout_error"
	case 529:
		kind = "overloaded_error"
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": openai.Truncate(message, openai.MaxErrorMessage)}}
}

func (h *handler) messages(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if err := openai.DecodeJSON(http.MaxBytesReader(w, r.Body, openai.MaxBodyBytes), &req, "model, max_tokens and messages"); err != nil {
		writeAnthropicError(w, err)
		return
	}
	gen, opts, err := req.genRequest(h.limits)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	id := newMessageID()
	gen.ID = id
	st, err := h.e.Submit(r.Context(), gen, opts...)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	defer func() { _ = st.Close() }()
	if req.Stream {
		streamMessage(r.Context(), w, anthropicResponse{ID: id, Type: "message", Role: "assistant", Model: req.Model, Content: []map[string]any{}}, st)
		return
	}
	out, err := collect(st)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	msg := anthropicResponse{ID: id, Type: "message", Role: "assistant", Model: req.Model, Content: []map[string]any{},
		Usage: anthropicUsageOf(out.usage.PromptTokens, out.usage.CachedTokens, out.usage.CompletionTokens)}
	if out.reasoning != "" {
		msg.Content = append(msg.Content, map[string]any{"type": "thinking", "thinking": out.reasoning, "signature": thinkingSignature(out.reasoning)})
	}
	if out.text != "" || out.reasoning == "" {
		msg.Content = append(msg.Content, map[string]any{"type": "text", "text": out.text})
	}
	stop := stopReason(out.finishReason)
	msg.StopReason = &stop
	openai.WriteJSON(w, http.StatusOK, msg)
}

// messageStream writes one message as Anthropic's event stream.
type messageStream struct {
	sse     *openai.SSE
	blocks  int    // content blocks started
	open    string // the type of the block being written, "" when none is open
	pinged  bool
	thought strings.Builder // the open thinking block's text, for its signature
}

func (m *messageStream) event(name string, v map[string]any) error {
	v["type"] = name
	return m.sse.Event(name, v)
}

// block makes sure a block of kind ("thinking" or "text") is open, closing another one first.
func (m *messageStream) block(kind string) error {
	if m.open == kind {
		return nil
	}
	if err := m.closeBlock(); err != nil {
		return err
	}
	start := map[string]any{"type": kind, kind: ""}
	if kind == "thinking" {
		start["signature"] = ""
	}
	if err := m.event("content_block_start", map[string]any{"index": m.blocks, "content_block": start}); err != nil {
		return err
	}
	m.open = kind
	m.blocks++
	if !m.pinged {
		m.pinged = true
		return m.event("ping", map[string]any{})
	}
	return nil
}

// closeBlock ends the open block, a thinking block with its signature.
func (m *messageStream) closeBlock() error {
	if m.open == "" {
		return nil
	}
	index := m.blocks - 1
	if m.open == "thinking" {
		sig := map[string]any{"type": "signature_delta", "signature": thinkingSignature(m.thought.String())}
		if err := m.event("content_block_delta", map[string]any{"index": index, "delta": sig}); err != nil {
			return err
		}
	}
	m.open = ""
	return m.event("content_block_stop", map[string]any{"index": index})
}

func (m *messageStream) delta(kind, field, text string) error {
	if err := m.block(kind); err != nil {
		return err
	}
	if kind == "thinking" {
		m.thought.WriteString(text)
	}
	return m.event("content_block_delta", map[string]any{"index": m.blocks - 1, "delta": map[string]any{"type": field, kind: text}})
}

// streamMessage relays st as Anthropic's event stream: message_start, then for each content
// block content_block_start (a ping after the first), its deltas (thinking_delta and a
// signature_delta for the reasoning, text_delta for the answer) and content_block_stop, then
// message_delta with the stop reason and usage, and message_stop. The response headers go out
// at once; message_start waits for the first token, when the prompt has been processed and the
// prefix cache's share of it is known for its usage. A failure after the headers is an error
// event.
func streamMessage(ctx context.Context, w http.ResponseWriter, msg anthropicResponse, st *Stream) {
	m := &messageStream{sse: openai.NewSSE(w)}
	m.sse.SetHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	started := false
	output := 0
	for {
		d, err := st.RecvOutput()
		if err != nil {
			if ctx.Err() == nil {
				he := openai.ToHTTPError(err)
				_ = m.sse.Event("error", anthropicErrorBody(he.Status, he.Message))
			}
			return
		}
		output += d.Tokens + d.ReasoningTokens
		if !started {
			started = true
			tl := st.Timeline()
			msg.Usage = anthropicUsageOf(tl.PromptTokens, tl.CachedTokens, output)
			if err := m.event("message_start", map[string]any{"message": msg}); err != nil {
				return
			}
		}
		if d.Reasoning != "" {
			if err := m.delta("thinking", "thinking_delta", d.Reasoning); err != nil {
				return
			}
		}
		if d.Text != "" {
			if err := m.delta("text", "text_delta", d.Text); err != nil {
				return
			}
		}
		if d.FinishReason == "" {
			continue
		}
		if err := m.closeBlock(); err != nil {
			return
		}
		u := anthropicUsageOf(d.Usage.PromptTokens, d.Usage.CachedTokens, d.Usage.CompletionTokens)
		if err := m.event("message_delta", map[string]any{
			"delta": map[string]any{"stop_reason": stopReason(d.FinishReason), "stop_sequence": nil},
			"usage": u,
		}); err != nil {
			return
		}
		_ = m.event("message_stop", map[string]any{})
		return
	}
}
