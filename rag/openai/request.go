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
	dec := json.NewDecoder(r)
	var req ChatRequest
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &HTTPError{Status: 413, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes), Err: rag.ErrInvalidRequest}
		}
		if errors.Is(err, io.EOF) {
			return nil, invalid("", "request body is empty: send a JSON object with model and messages")
		}
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) && te.Field != "" {
			field := Truncate(te.Field, maxEchoLen)
			return nil, invalid(field, fmt.Sprintf("%s has the wrong type: want %s, got %s", field, te.Type, Truncate(te.Value, maxEchoLen)))
		}
		return nil, invalid("", "request body is not valid JSON: "+Truncate(err.Error(), 4*maxEchoLen))
	}
	if dec.More() {
		return nil, invalid("", "request body has data after the JSON object")
	}
	return &req, nil
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
		case "system", "developer", "assistant", "tool":
		case "user":
			hasUser = true
		default:
			return q, invalid(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf("messages[%d].role %.32q is not one of system, developer, user, assistant, tool", i, m.Role))
		}
		q.Messages = append(q.Messages, rag.Message{Role: m.Role, Content: string(m.Content)})
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
