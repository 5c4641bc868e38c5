// Package openai is the OpenAI-compatible wire format of the ragtail service: the chat request and
// its validation, streamed and non-streamed responses, the error body with the status each rag
// error maps to, and SSE framing. It imports rag alone, so the HTTP API, the simulated engine and
// the fault injector share one encoding of the protocol. (The official openai-go SDK, which the
// LLM client uses, is a different package; import this one as wire where both are needed.)
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/ragtail/ragtail/rag"
)

// The OpenAI chat-completions wire format, shared by the RAG API (rag/httpapi) and the simulated
// engine's own server (rag/llmsim) so that both speak exactly the same dialect.

// ChatRequest is the body of POST /v1/chat/completions. Fields ragtail does not use are accepted
// and ignored, as OpenAI-compatible servers do.
type ChatRequest struct {
	Model               string         `json:"model"`
	Messages            []ChatMessage  `json:"messages"`
	Stream              bool           `json:"stream,omitempty"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	Temperature         *float64       `json:"temperature,omitempty"`
	TopP                *float64       `json:"top_p,omitempty"`
	N                   *int           `json:"n,omitempty"`
	Seed                *int64         `json:"seed,omitempty"`
	User                string         `json:"user,omitempty"`
	RAG                 *RAGOptions    `json:"rag,omitempty"`
	// Priority is vLLM's request priority extension: lower runs first under the engine's
	// priority scheduling policy, 0 by default, at most MaxPriority either way.
	Priority *int `json:"priority,omitempty"`
	// Tools are the functions the model may call; ToolChoice is "auto", "none", "required" or an
	// object naming one function.
	Tools             []ToolSpec      `json:"tools,omitempty"`
	ToolChoice        json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
}

// ToolSpec is one tool of a request: OpenAI's {"type":"function","function":{...}}.
type ToolSpec struct {
	Type     string       `json:"type"`
	Function FunctionSpec `json:"function"`
}

// FunctionSpec describes a function a model may call.
type FunctionSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ToolCall is one tool call of an assistant message, or a piece of one in a streamed delta
// (Index set, and ID, Type and the function's name only on a call's first piece).
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function a tool call calls and its arguments, JSON text.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// StreamOptions is OpenAI's stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// RAGOptions is ragtail's optional per-request "rag" object.
type RAGOptions struct {
	Coupling string `json:"coupling,omitempty"`
	TopK     int    `json:"top_k,omitempty"`
	// Mode is "agentic" for a tool-calling retrieval loop of at most MaxSteps model calls;
	// "" (or "single") for single-shot retrieval.
	Mode     string `json:"mode,omitempty"`
	MaxSteps int    `json:"max_steps,omitempty"`
	// ParallelToolCalls lets an agentic request's model ask for several searches in one call,
	// which run at once.
	ParallelToolCalls bool `json:"parallel_tool_calls,omitempty"`
}

// ChatMessage is one message on the wire. Content is either a string or an array of content
// parts; only text parts are supported.
type ChatMessage struct {
	Role       string      `json:"role"`
	Content    TextContent `json:"content"`
	Name       string      `json:"name,omitempty"`
	ToolCalls  []ToolCall  `json:"tool_calls,omitempty"`   // an assistant message's calls
	ToolCallID string      `json:"tool_call_id,omitempty"` // the call a tool message answers
}

// TextContent is message content that decodes from a JSON string, null, or an array of
// {"type":"text","text":...} parts (joined), and encodes as a string.
type TextContent string

// UnmarshalJSON implements json.Unmarshaler.
func (c *TextContent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*c = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = TextContent(s)
		return nil
	case len(b) > 0 && b[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var sb strings.Builder
		for i, p := range parts {
			if p.Type != "text" {
				return fmt.Errorf("content part %d has type %q: only text parts are supported", i, Truncate(p.Type, maxEchoLen))
			}
			sb.WriteString(p.Text)
		}
		*c = TextContent(sb.String())
		return nil
	}
	return errors.New("content must be a string or an array of text parts")
}

// ChatChunk is one streamed chunk (object "chat.completion.chunk").
type ChatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint,omitempty"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *WireUsage    `json:"usage,omitempty"`
	// ServerTiming repeats the Server-Timing value on the last chunk of a stream, for clients
	// that cannot read HTTP trailers. OpenAI clients ignore it.
	ServerTiming string `json:"server_timing,omitempty"`
}

// ChunkChoice is one choice of a chunk.
type ChunkChoice struct {
	Index        int        `json:"index"`
	Delta        ChunkDelta `json:"delta"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

// ChunkDelta is the delta of a chunk choice. A reasoning model's thinking comes before the
// answer under both names in use: reasoning_content (DeepSeek's and vLLM's original field) and
// reasoning (vLLM's name since late 2025), with the same text.
type ChunkDelta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	Reasoning        string     `json:"reasoning,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// ChatCompletion is a non-streamed response (object "chat.completion").
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
	Choices           []ChatChoice `json:"choices"`
	Usage             WireUsage    `json:"usage"`
}

// ChatChoice is one choice of a non-streamed response.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      ResponseMessage `json:"message"`
	Logprobs     any             `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// ResponseMessage is the assistant message of a non-streamed response; the reasoning fields
// are as in ChunkDelta.
type ResponseMessage struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	Reasoning        string     `json:"reasoning,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// MarshalJSON encodes m with "content": null when it has tool calls and no text, as OpenAI
// sends an assistant message that only calls tools.
func (m ResponseMessage) MarshalJSON() ([]byte, error) {
	type plain ResponseMessage // without this method
	if m.Content != "" || len(m.ToolCalls) == 0 {
		return json.Marshal(plain(m))
	}
	return json.Marshal(struct {
		plain
		Content *string `json:"content"`
	}{plain: plain(m)})
}

// WireUsage is OpenAI's usage object.
type WireUsage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// PromptTokensDetails is OpenAI's usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"` // prompt tokens found in the prefix cache
}

// CompletionTokensDetails is OpenAI's usage.completion_tokens_details.
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"` // completion tokens spent on reasoning
}

// UsageOf converts u to OpenAI's usage object. The details objects are present only when their
// count is not zero, so servers without a prefix cache or reasoning send what they always sent.
func UsageOf(u rag.Usage) WireUsage {
	w := WireUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	if u.CachedTokens > 0 {
		w.PromptTokensDetails = &PromptTokensDetails{CachedTokens: u.CachedTokens}
	}
	if u.ReasoningTokens > 0 {
		w.CompletionTokensDetails = &CompletionTokensDetails{ReasoningTokens: u.ReasoningTokens}
	}
	return w
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string      `json:"object"`
	Data   []ModelCard `json:"data"`
}

// ModelCard describes one served model.
type ModelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ErrorBody is OpenAI's error JSON: {"error":{"message","type","param","code"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inner object of ErrorBody.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// HTTPError is an error with the HTTP status, OpenAI error type and code it should be reported with.
type HTTPError struct {
	Status  int
	Type    string // invalid_request_error, not_found_error, server_error, ...
	Code    string // model_not_found, context_length_exceeded, ...
	Param   string
	Message string
	Err     error // the underlying error, for errors.Is
}

func (e *HTTPError) Error() string { return e.Message }

// Unwrap returns the underlying error.
func (e *HTTPError) Unwrap() error { return e.Err }

// ToHTTPError maps an error to the status and OpenAI error it should be reported with. A stage
// carried by the error is named in the message.
func ToHTTPError(err error) *HTTPError {
	var he *HTTPError
	if errors.As(err, &he) {
		return he
	}
	e := &HTTPError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error(), Err: err}
	switch {
	case errors.Is(err, rag.ErrUnknownModel):
		e.Status, e.Type, e.Code, e.Param = http.StatusNotFound, "invalid_request_error", "model_not_found", "model"
	case errors.Is(err, rag.ErrInvalidRequest):
		e.Status, e.Type = http.StatusBadRequest, "invalid_request_error"
	case errors.Is(err, rag.ErrNotFound):
		e.Status, e.Type, e.Code = http.StatusNotFound, "not_found_error", "not_found"
	case errors.Is(err, rag.ErrOverloaded):
		e.Status, e.Type, e.Code = http.StatusServiceUnavailable, "server_error", "overloaded"
	case errors.Is(err, rag.ErrUnavailable):
		e.Status, e.Type, e.Code = http.StatusServiceUnavailable, "server_error", "backend_unavailable"
	case errors.Is(err, rag.ErrTimeout):
		e.Status, e.Type, e.Code = http.StatusGatewayTimeout, "server_error", "timeout"
	}
	return e
}

// MaxErrorMessage bounds the message of an error response: a message may quote what the client
// sent (a 900 KB field came back whole), and nothing a client needs to read is longer.
const MaxErrorMessage = 1024

// maxEchoLen bounds one value of the client's quoted in an error message.
const maxEchoLen = 64

// Body returns the OpenAI error JSON for e, its message cut at MaxErrorMessage bytes.
func (e *HTTPError) Body() ErrorBody {
	b := ErrorBody{Error: ErrorDetail{Message: Truncate(e.Message, MaxErrorMessage), Type: e.Type}}
	if e.Param != "" {
		p := e.Param
		b.Error.Param = &p
	}
	if e.Code != "" {
		b.Error.Code = e.Code
	}
	return b
}

// WriteError writes err as OpenAI error JSON with the status ToHTTPError gives it.
func WriteError(w http.ResponseWriter, err error) {
	he := ToHTTPError(err)
	if he.Status == http.StatusServiceUnavailable && errors.Is(err, rag.ErrOverloaded) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	WriteJSON(w, he.Status, he.Body())
}

// WriteJSON writes v as a JSON response with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":{"message":"encoding response failed","type":"server_error"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// SSE writes a server-sent event stream in the form OpenAI uses: "data: {json}\n\n" per event,
// comments as ": text\n\n", and "data: [DONE]\n\n" at the end. Each write is flushed. It is not
// safe for concurrent use.
type SSE struct {
	w       io.Writer
	flusher http.Flusher
	buf     bytes.Buffer
}

// NewSSE returns an SSE writer on w, flushing after every event when w is an http.Flusher.
func NewSSE(w io.Writer) *SSE {
	s := &SSE{w: w}
	s.flusher, _ = w.(http.Flusher)
	return s
}

// SetHeaders sets the response headers of an event stream.
func (s *SSE) SetHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
}

// Data writes one data event holding v encoded as JSON.
func (s *SSE) Data(v any) error {
	return s.Event("", v)
}

// Event writes one event named name (an "event:" line, as the Anthropic Messages and OpenAI
// Responses streams name theirs) holding v encoded as JSON; an empty name writes a plain data
// event. name must be one line.
func (s *SSE) Event(name string, v any) error {
	s.buf.Reset()
	if name != "" {
		s.buf.WriteString("event: ")
		s.buf.WriteString(name)
		s.buf.WriteByte('\n')
	}
	s.buf.WriteString("data: ")
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode appends '\n'
		return err
	}
	s.buf.WriteByte('\n')
	return s.flush()
}

// Comment writes an SSE comment line, which clients ignore; ragtail uses comments to report
// retrieval progress before the first token without breaking OpenAI clients.
func (s *SSE) Comment(text string) error {
	s.buf.Reset()
	for line := range strings.SplitSeq(text, "\n") {
		s.buf.WriteString(": ")
		s.buf.WriteString(line)
		s.buf.WriteByte('\n')
	}
	s.buf.WriteByte('\n')
	return s.flush()
}

// Done writes the terminating "data: [DONE]" event.
func (s *SSE) Done() error {
	s.buf.Reset()
	s.buf.WriteString("data: [DONE]\n\n")
	return s.flush()
}

func (s *SSE) flush() error {
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}
