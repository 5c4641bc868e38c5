package openai_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

func TestChatRequestQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		wantErr string // substring of the error; "" for success
		check   func(t *testing.T, q rag.Query)
	}{
		{name: "defaults", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, check: func(t *testing.T, q rag.Query) {
			if q.MaxTokens != openai.DefaultLimits.DefaultMaxTokens || q.Temperature != 1 || q.Question() != "hi" {
				t.Errorf("query %+v", q)
			}
		}},
		{name: "content parts", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			check: func(t *testing.T, q rag.Query) {
				if q.Question() != "ab" {
					t.Errorf("question %q", q.Question())
				}
			}},
		{name: "max_completion_tokens wins", body: `{"model":"m","max_tokens":5,"max_completion_tokens":7,"messages":[{"role":"user","content":"x"}]}`,
			check: func(t *testing.T, q rag.Query) {
				if q.MaxTokens != 7 {
					t.Errorf("max tokens %d", q.MaxTokens)
				}
			}},
		{name: "rag options", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"rag":{"coupling":"Async","top_k":3}}`,
			check: func(t *testing.T, q rag.Query) {
				if q.Coupling != rag.CouplingAsync || q.TopK != 3 {
					t.Errorf("rag options %+v", q)
				}
			}},
		{name: "image part", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, wantErr: "only text parts"},
		{name: "n=2", body: `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, wantErr: "n=1"},
		{name: "negative max_tokens", body: `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`, wantErr: "max_tokens"},
		// OpenAI's ranges: top_p -5 was accepted.
		{name: "top_p -5", body: `{"model":"m","top_p":-5,"messages":[{"role":"user","content":"x"}]}`, wantErr: "top_p must be between 0 and 1, got -5"},
		{name: "top_p 1.5", body: `{"model":"m","top_p":1.5,"messages":[{"role":"user","content":"x"}]}`, wantErr: "top_p must be between 0 and 1"},
		{name: "top_p 0 and 1", body: `{"model":"m","top_p":0,"temperature":0,"messages":[{"role":"user","content":"x"}]}`},
		{name: "top_p 1", body: `{"model":"m","top_p":1,"temperature":2,"messages":[{"role":"user","content":"x"}]}`},
		{name: "agentic mode", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"rag":{"mode":"agentic","max_steps":4,"parallel_tool_calls":true}}`,
			check: func(t *testing.T, q rag.Query) {
				if q.Mode != rag.ModeAgentic || q.MaxSteps != 4 || !q.ParallelToolCalls {
					t.Errorf("mode %q, max steps %d, parallel tool calls %v", q.Mode, q.MaxSteps, q.ParallelToolCalls)
				}
			}},
		{name: "parallel_tool_calls without agentic", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"rag":{"parallel_tool_calls":true}}`,
			wantErr: `rag.parallel_tool_calls applies to "mode": "agentic" only`},
		{name: "unknown mode", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"rag":{"mode":"plan"}}`, wantErr: "want single or agentic"},
		{name: "max_steps over the bound", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"rag":{"mode":"agentic","max_steps":99}}`, wantErr: "rag.max_steps must be between 1 and 16"},
		{name: "max_steps without agentic", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"rag":{"max_steps":3}}`, wantErr: `applies to "mode": "agentic" only`},
		{name: "tools and a tool round trip", body: `{"model":"m","tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}],"tool_choice":"auto",
			"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"search","arguments":"{\"query\":\"x\"}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"found"}]}`,
			check: func(t *testing.T, q rag.Query) {
				if len(q.Tools) != 1 || q.Tools[0].Name != "search" || q.Tools[0].Parameters != `{"type":"object"}` || q.ToolChoice != "auto" {
					t.Errorf("tools %+v, choice %q", q.Tools, q.ToolChoice)
				}
				m := q.Messages
				if len(m) != 3 || len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0] != (rag.ToolCall{ID: "call_1", Name: "search", Arguments: `{"query":"x"}`}) ||
					m[2].Role != "tool" || m[2].ToolCallID != "call_1" || m[2].Content != "found" {
					t.Errorf("messages %+v", m)
				}
			}},
		{name: "named tool choice", body: `{"model":"m","tools":[{"type":"function","function":{"name":"search"}}],"tool_choice":{"type":"function","function":{"name":"search"}},"messages":[{"role":"user","content":"x"}]}`,
			check: func(t *testing.T, q rag.Query) {
				if q.ToolChoice != "required" {
					t.Errorf("tool choice %q", q.ToolChoice)
				}
			}},
		{name: "tool message without its call", body: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","content":"r"}]}`, wantErr: "no tool_call_id"},
		{name: "bad tool name", body: `{"model":"m","tools":[{"type":"function","function":{"name":"rm -rf"}}],"messages":[{"role":"user","content":"x"}]}`, wantErr: "tools[0].function.name"},
		{name: "bad tool type", body: `{"model":"m","tools":[{"type":"code_interpreter"}],"messages":[{"role":"user","content":"x"}]}`, wantErr: "only function tools"},
		{name: "bad tool choice", body: `{"model":"m","tool_choice":"sometimes","messages":[{"role":"user","content":"x"}]}`, wantErr: "tool_choice"},
		{name: "temperature 2.5", body: `{"model":"m","temperature":2.5,"messages":[{"role":"user","content":"x"}]}`, wantErr: "temperature must be between 0 and 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := openai.DecodeChatRequest(strings.NewReader(tt.body))
			if err == nil {
				var q rag.Query
				q, err = req.Query(openai.DefaultLimits)
				if err == nil && tt.check != nil {
					tt.check(t, q)
				}
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			case err != nil && !errors.Is(err, rag.ErrInvalidRequest):
				t.Errorf("error %v does not match ErrInvalidRequest", err)
			}
		})
	}
}

func TestDecodeTooLarge(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", openai.MaxBodyBytes) + `"}]}`
	r := http.MaxBytesReader(nil, nopBody(strings.NewReader(body)), openai.MaxBodyBytes)
	_, err := openai.DecodeChatRequest(r)
	if he := openai.ToHTTPError(err); he.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d for %v", he.Status, err)
	}
}

// TestErrorMessageIsBounded gives an error a message of a megabyte, as one quoting a client's
// field could be: the body written carries at most MaxErrorMessage bytes of it.
func TestErrorMessageIsBounded(t *testing.T) {
	t.Parallel()
	he := &openai.HTTPError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: strings.Repeat("é", 1<<19)}
	if m := he.Body().Error.Message; len(m) > openai.MaxErrorMessage+3 || !strings.HasSuffix(m, "...") {
		t.Errorf("message of %d bytes, ending %q", len(m), m[len(m)-8:])
	}
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

func nopBody(r *strings.Reader) nopCloser { return nopCloser{r} }

// FuzzDecodeChatRequest feeds arbitrary bodies to the decoder and validator: they must never
// panic, every error must map to a 4xx OpenAI error, and every accepted request must respect the
// limits.
func FuzzDecodeChatRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":16,"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"q"}]}],"rag":{"coupling":"async","top_k":3}}`,
		`{"model":"m","messages":[{"role":"user","content":null}],"temperature":2}`,
		`{"model":`, `[]`, `null`, ``, `{"messages":[{}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := openai.DecodeChatRequest(bytes.NewReader(body))
		if err != nil {
			if he := openai.ToHTTPError(err); he.Status < 400 || he.Status >= 500 {
				t.Fatalf("decode error %v maps to status %d", err, he.Status)
			}
			return
		}
		q, err := req.Query(openai.DefaultLimits)
		if err != nil {
			if he := openai.ToHTTPError(err); he.Status != http.StatusBadRequest {
				t.Fatalf("validation error %v maps to status %d", err, he.Status)
			}
			return
		}
		if q.MaxTokens < 1 || q.MaxTokens > openai.DefaultLimits.MaxTokensCap || len(q.Messages) == 0 || q.Model == "" {
			t.Fatalf("accepted out-of-range query %+v", q)
		}
		if q.Temperature < 0 || q.Temperature > 2 {
			t.Fatalf("accepted temperature %v", q.Temperature)
		}
	})
}
