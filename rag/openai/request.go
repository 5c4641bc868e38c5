package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/ragtail/ragtail/rag"
)

// MaxBodyBytes is the largest request body the API accepts (1 MiB).
const MaxBodyBytes = 1 << 20

// MaxModelLen is the longest model name accepted, in bytes. Real model names are far shorter
// (Hugging Face caps repository ids at 96 characters); a longer one is refused before it can
// reach a span, a log line or an error body.
const MaxModelLen = 256

// Limits bound what a chat request may ask for.
type Limits struct {
	MaxTokensCap     int // largest max_tokens accepted
	DefaultMaxTokens int // used when the request sets none
	MaxMessages      int // most messages in one request
}

// DefaultLimits are the limits the service uses unless configured otherwise.
var DefaultLimits = Limits{MaxTokensCap: 4096, DefaultMaxTokens: 256, MaxMessages: 256}

// DecodeChatRequest reads and decodes a chat-completions body. Unknown fields are ignored, as
// OpenAI-compatible servers do; anything after the JSON object is an error. A body longer than
// MaxBodyBytes must be cut off by the caller (http.MaxBytesReader); the resulting error is
// reported as a 413 HTTPError.
func DecodeChatRequest(r io.Reader) (*ChatRequest, error) {
	var req ChatRequest
	if err := DecodeJSON(r, &req, "model and messages"); err != nil {
		return nil, err
	}
	return &req, nil
}

// DecodeJSON reads one JSON object from r into v, with the errors of DecodeChatRequest (what
// names the fields an empty body lacks, as in "model and messages"). A body longer than
// MaxBodyBytes must be cut off by the caller (http.MaxBytesReader).
func DecodeJSON(r io.Reader, v any, what string) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &HTTPError{Status: 413, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes), Err: rag.ErrInvalidRequest}
		}
		if errors.Is(err, io.EOF) {
			return invalid("", "request body is empty: send a JSON object with "+what)
		}
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) && te.Field != "" {
			field := Truncate(te.Field, maxEchoLen)
			return invalid(field, fmt.Sprintf("%s has the wrong type: want %s, got %s", field, te.Type, Truncate(te.Value, maxEchoLen)))
		}
		return invalid("", "request body is not valid JSON: "+Truncate(err.Error(), 4*maxEchoLen))
	}
	if dec.More() {
		return invalid("", "request body has data after the JSON object")
	}
	return nil
}

// MaxTools bounds the tools of one request, as OpenAI does.
const MaxTools = 128

// tools validates the request's tools and tool_choice into q.
func (r *ChatRequest) tools(q *rag.Query) error {
	if len(r.Tools) > MaxTools {
		return invalid("tools", fmt.Sprintf("too many tools: %d, at most %d", len(r.Tools), MaxTools))
	}
	for i, t := range r.Tools {
		if t.Type != "function" {
			return invalid(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("tools[%d].type %.32q: only function tools are supported", i, t.Type))
		}
		if !validFunctionName(t.Function.Name) {
			return invalid(fmt.Sprintf("tools[%d].function.name", i), fmt.Sprintf("tools[%d].function.name %.64q: want 1 to 64 letters, digits, _ or -", i, t.Function.Name))
		}
		q.Tools = append(q.Tools, rag.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: string(t.Function.Parameters)})
	}
	if len(r.ToolChoice) == 0 || string(r.ToolChoice) == "null" {
		return nil
	}
	var choice string
	if err := json.Unmarshal(r.ToolChoice, &choice); err == nil {
		switch choice {
		case "auto", "none", "required":
			q.ToolChoice = choice
			return nil
		}
		return invalid("tool_choice", fmt.Sprintf("tool_choice %.32q: want auto, none, required or a function", choice))
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(r.ToolChoice, &named); err != nil || named.Type != "function" || !validFunctionName(named.Function.Name) {
		return invalid("tool_choice", `tool_choice must be "auto", "none", "required" or {"type":"function","function":{"name":...}}`)
	}
	q.ToolChoice = "required" // one named function: ragtail's tools are one function a request
	return nil
}

// validFunctionName reports whether name is a function name OpenAI accepts: 1 to 64 letters,
// digits, underscores and dashes.
func validFunctionName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// MaxPriority bounds the absolute value of a request's priority field.
const MaxPriority = 1 << 20

func invalid(param, msg string) *HTTPError {
	return &HTTPError{Status: 400, Type: "invalid_request_error", Param: param, Message: msg, Err: rag.ErrInvalidRequest}
}

// Query validates the request against lim and converts it into a Query. It checks everything but
// the model name, which only the generator knows.
func (r *ChatRequest) Query(lim Limits) (rag.Query, error) {
	var q rag.Query
	if strings.TrimSpace(r.Model) == "" {
		return q, invalid("model", "model is required")
	}
	if len(r.Model) > MaxModelLen {
		return q, invalid("model", fmt.Sprintf("model name is %d bytes long; at most %d are accepted (see GET /v1/models for the served names)", len(r.Model), MaxModelLen))
	}
	if len(r.Messages) == 0 {
		return q, invalid("messages", "messages must be a non-empty array")
	}
	if lim.MaxMessages > 0 && len(r.Messages) > lim.MaxMessages {
		return q, invalid("messages", fmt.Sprintf("too many messages: %d, at most %d", len(r.Messages), lim.MaxMessages))
	}
	hasUser := false
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "developer", "assistant":
		case "tool":
			if m.ToolCallID == "" {
				return q, invalid(fmt.Sprintf("messages[%d].tool_call_id", i), fmt.Sprintf("messages[%d] has role tool but no tool_call_id naming the call it answers", i))
			}
		case "user":
			hasUser = true
		default:
			return q, invalid(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf("messages[%d].role %.32q is not one of system, developer, user, assistant, tool", i, m.Role))
		}
		msg := rag.Message{Role: m.Role, Content: string(m.Content), ToolCallID: m.ToolCallID}
		if len(m.ToolCalls) > 0 && m.Role != "assistant" {
			return q, invalid(fmt.Sprintf("messages[%d].tool_calls", i), fmt.Sprintf("messages[%d] has tool_calls but role %.32q: only assistant messages call tools", i, m.Role))
		}
		for j, c := range m.ToolCalls {
			if c.Function.Name == "" {
				return q, invalid(fmt.Sprintf("messages[%d].tool_calls[%d].function.name", i, j), "a tool call needs the name of the function it calls")
			}
			msg.ToolCalls = append(msg.ToolCalls, rag.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		q.Messages = append(q.Messages, msg)
	}
	if err := r.tools(&q); err != nil {
		return q, err
	}
	if !hasUser {
		return q, invalid("messages", "messages must contain at least one user message")
	}
	q.MaxTokens = lim.DefaultMaxTokens
	if r.MaxCompletionTokens != nil {
		q.MaxTokens = *r.MaxCompletionTokens
	} else if r.MaxTokens != nil {
		q.MaxTokens = *r.MaxTokens
	}
	if q.MaxTokens < 1 || (lim.MaxTokensCap > 0 && q.MaxTokens > lim.MaxTokensCap) {
		return q, invalid("max_tokens", fmt.Sprintf("max_tokens must be between 1 and %d, got %d", lim.MaxTokensCap, q.MaxTokens))
	}
	q.Temperature = 1
	if r.Temperature != nil {
		t := *r.Temperature
		if math.IsNaN(t) || t < 0 || t > 2 {
			return q, invalid("temperature", fmt.Sprintf("temperature must be between 0 and 2, got %v", t))
		}
		q.Temperature = t
	}
	if r.TopP != nil {
		if p := *r.TopP; math.IsNaN(p) || p < 0 || p > 1 {
			return q, invalid("top_p", fmt.Sprintf("top_p must be between 0 and 1, got %v", p))
		}
	}
	if r.N != nil && *r.N != 1 {
		return q, invalid("n", "only n=1 is supported")
	}
	if r.Priority != nil {
		if p := *r.Priority; p < -MaxPriority || p > MaxPriority {
			return q, invalid("priority", fmt.Sprintf("priority must be between %d and %d, got %d", -MaxPriority, MaxPriority, p))
		}
		q.Priority = *r.Priority
	}
	q.Model = r.Model
	if r.RAG != nil {
		mode, err := rag.ParseMode(r.RAG.Mode)
		if err != nil {
			return q, invalid("rag.mode", err.Error())
		}
		q.Mode = mode
		if r.RAG.MaxSteps < 0 || r.RAG.MaxSteps > rag.MaxMaxSteps {
			return q, invalid("rag.max_steps", fmt.Sprintf("rag.max_steps must be between 1 and %d, got %d", rag.MaxMaxSteps, r.RAG.MaxSteps))
		}
		if r.RAG.MaxSteps > 0 && mode != rag.ModeAgentic {
			return q, invalid("rag.max_steps", `rag.max_steps applies to "mode": "agentic" only`)
		}
		q.MaxSteps = r.RAG.MaxSteps
		if r.RAG.ParallelToolCalls && mode != rag.ModeAgentic {
			return q, invalid("rag.parallel_tool_calls", `rag.parallel_tool_calls applies to "mode": "agentic" only`)
		}
		q.ParallelToolCalls = r.RAG.ParallelToolCalls
		if r.RAG.Coupling != "" {
			if len(r.RAG.Coupling) > 16 {
				return q, invalid("rag.coupling", "rag.coupling must be sync, fanout or async")
			}
			c, err := rag.ParseCoupling(r.RAG.Coupling)
			if err != nil {
				return q, invalid("rag.coupling", err.Error())
			}
			q.Coupling = c
		}
		if r.RAG.TopK < 0 || r.RAG.TopK > 100 {
			return q, invalid("rag.top_k", fmt.Sprintf("rag.top_k must be between 1 and 100, got %d", r.RAG.TopK))
		}
		q.TopK = r.RAG.TopK
	}
	return q, nil
}
