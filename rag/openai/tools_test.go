package openai_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

// Tool-call pieces go out one chunk each, as vLLM streams them: the first with index, id, type
// and name and empty arguments, the next ones with index and arguments only.
func TestChatStreamToolCalls(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	cs := openai.NewChatStream(rec, "chatcmpl-1", "m", false)
	if err := cs.ToolCalls([]rag.ToolCallDelta{{Index: 0, ID: "chatcmpl-tool-1", Name: "search"}, {Index: 0, Arguments: `{"query": "kv"}`}}); err != nil {
		t.Fatal(err)
	}
	var calls []string
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					ToolCalls json.RawMessage `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(d), &chunk); err != nil {
			t.Fatal(err)
		}
		if c := chunk.Choices[0].Delta.ToolCalls; c != nil {
			calls = append(calls, string(c))
		}
	}
	want := []string{
		`[{"index":0,"id":"chatcmpl-tool-1","type":"function","function":{"name":"search","arguments":""}}]`,
		`[{"index":0,"function":{"arguments":"{\"query\": \"kv\"}"}}]`,
	}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("tool_calls chunks:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
}

// An assistant message that only calls tools has "content": null, as OpenAI sends it; one with
// text keeps its text.
func TestResponseMessageContentNull(t *testing.T) {
	t.Parallel()
	calls := openai.WireToolCalls([]rag.ToolCall{{ID: "c1", Name: "search", Arguments: "{}"}})
	for _, tc := range []struct {
		name string
		msg  openai.ResponseMessage
		want string
	}{
		{name: "calls only", msg: openai.ResponseMessage{Role: "assistant", ToolCalls: calls},
			want: `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{}"}}],"content":null}`},
		{name: "text and calls", msg: openai.ResponseMessage{Role: "assistant", Content: "Let me look.", ToolCalls: calls},
			want: `{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{}"}}]}`},
		{name: "text", msg: openai.ResponseMessage{Role: "assistant", Content: ""}, want: `{"role":"assistant","content":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tc.msg)
			if err != nil || string(b) != tc.want {
				t.Errorf("Marshal = %s, %v; want %s", b, err, tc.want)
			}
		})
	}
}

// Named events, as the Anthropic Messages and OpenAI Responses streams send them.
func TestSSEEvent(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	sse := openai.NewSSE(rec)
	if err := sse.Event("message_stop", map[string]string{"type": "message_stop"}); err != nil {
		t.Fatal(err)
	}
	if err := sse.Data(map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	want := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\ndata: {\"n\":1}\n\n"
	if rec.Body.String() != want {
		t.Errorf("stream %q, want %q", rec.Body.String(), want)
	}
}
