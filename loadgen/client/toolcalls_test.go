package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

// TestDoToolCalls checks that the tool calls of a response come together from their streamed
// pieces (by index: id and name first, then the argument fragments, two calls interleaved) and
// from a whole message, that they are kept only when asked for, and that the calls' chunks
// count as the first token.
func TestDoToolCalls(t *testing.T) {
	t.Parallel()
	const streamed = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"search","arguments":""}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"fetch","arguments":"{\"id\":"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\":"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"tail \\\"latency\\\"\"}"}},{"index":1,"function":{"arguments":"7}"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

`
	const whole = `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"call_a","type":"function","function":{"name":"search","arguments":"{\"query\":\"tail \\\"latency\\\"\"}"}},` +
		`{"id":"call_b","type":"function","function":{"name":"fetch","arguments":"{\"id\":7}"}}]},"finish_reason":"tool_calls"}]}`
	want := []loadgen.ToolCall{
		{ID: "call_a", Type: "function", Function: loadgen.FunctionCall{Name: "search", Arguments: `{"query":"tail \"latency\""}`}},
		{ID: "call_b", Type: "function", Function: loadgen.FunctionCall{Name: "fetch", Arguments: `{"id":7}`}},
	}
	for _, tc := range []struct {
		name   string
		stream bool
		body   string
	}{{"stream", true, streamed}, {"message", false, whole}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.stream {
					w.Header().Set("Content-Type", "text/event-stream")
				}
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c := newTestClient(t, srv, WithStream(tc.stream))
			for _, keep := range []bool{false, true} {
				req := question
				req.KeepAnswer = keep
				rec := do(t, c, req)
				if rec.ErrKind != "" || rec.ToolCalls != 2 {
					t.Fatalf("keep %v: record %+v", keep, rec)
				}
				if tc.stream && (rec.FirstToken == 0 || len(rec.Chunks) != 4) {
					t.Errorf("first token %v, %d chunks; want the 4 chunks of calls", rec.FirstToken, len(rec.Chunks))
				}
				switch {
				case !keep && rec.Calls != nil:
					t.Errorf("calls kept without KeepAnswer: %+v", rec.Calls)
				case keep && !reflect.DeepEqual(rec.Calls, want):
					t.Errorf("calls\n%+v\nwant\n%+v", rec.Calls, want)
				}
			}
		})
	}
}

// TestDoToolCallsBounded checks that a response making more calls than MaxToolCalls fails as a
// protocol error instead of growing without bound.
func TestDoToolCallsBounded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range MaxToolCalls + 1 {
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{
				"tool_calls": []any{map[string]any{"index": i, "id": "c", "function": map[string]any{"name": "f", "arguments": "{}"}}}}}}})
			io.WriteString(w, "data: "+string(b)+"\n\n")
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	rec := do(t, newTestClient(t, srv), question)
	if rec.ErrKind != loadgen.ErrKindProtocol || !strings.Contains(rec.Err, "tool calls") {
		t.Fatalf("record %+v, want a protocol error naming the tool calls", rec)
	}
}

// TestReplayToolMessages replays an OpenAI-messages JSONL line whose conversation holds an
// assistant message with tool calls and the tool messages answering them: the client sends
// the messages (and the entry's tools) as the file has them.
func TestReplayToolMessages(t *testing.T) {
	t.Parallel()
	const messages = `[{"role":"system","content":"use the search tool"},{"role":"user","content":"what is P99?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"search","arguments":"{\"query\":\"P99\"}"}},` +
		`{"id":"call_2","type":"function","function":{"name":"search","arguments":"{\"query\":\"tail\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"P99 is the 99th percentile"},` +
		`{"role":"tool","tool_call_id":"call_2","name":"search","content":"tails are heavy"}]`
	const tools = `[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}]`
	prompts, err := dataset.ReadDataset(strings.NewReader(`{"messages":` + messages + `,"tools":` + tools + "}\n"))
	if err != nil || len(prompts) != 1 {
		t.Fatalf("read: %v, %d prompts", err, len(prompts))
	}
	var got struct {
		Messages json.RawMessage `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer srv.Close()
	rec := do(t, newTestClient(t, srv, WithStream(false)), loadgen.Request{Messages: prompts[0].Messages, Extra: prompts[0].Extra})
	if rec.ErrKind != "" {
		t.Fatalf("record %+v", rec)
	}
	for _, c := range []struct{ name, sent, file string }{{"messages", string(got.Messages), messages}, {"tools", string(got.Tools), tools}} {
		var sent, file any
		if json.Unmarshal([]byte(c.sent), &sent) != nil || json.Unmarshal([]byte(c.file), &file) != nil || !reflect.DeepEqual(sent, file) {
			t.Errorf("%s sent\n%s\nthe file has\n%s", c.name, c.sent, c.file)
		}
	}
}

// FuzzToolCalls feeds arbitrary streams to a request that keeps its tool calls: it must not
// panic, and what it keeps is bounded, counted, and answerable (every call has an id).
func FuzzToolCalls(f *testing.F) {
	f.Add([]byte(`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"search","arguments":"{\"q\":"}}]}}]}` +
		"\n\n" + `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}},{"index":1,"id":"b"}]}}]}` + "\n\ndata: [DONE]\n\n"))
	f.Add([]byte(`data: {"choices":[{"delta":{"tool_calls":[{"index":-1}]}}]}` + "\n\n"))
	f.Add([]byte(`data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"x"}}]}}]}` + "\n\ndata: [DONE]\n\n"))
	c, err := New("http://127.0.0.1:1/v1/chat/completions")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := question
		req.KeepAnswer = true
		var rec loadgen.Record
		c.readStream(context.Background(), strings.NewReader(string(body)), &req, time.Now(), &rec)
		if rec.ToolCalls < 0 || rec.ToolCalls > MaxToolCalls || len(rec.Calls) > rec.ToolCalls {
			t.Fatalf("%d tool calls, %d kept", rec.ToolCalls, len(rec.Calls))
		}
		for i, call := range rec.Calls {
			if call.ID == "" || len(call.ID) > maxToolIDBytes+3 || len(call.Function.Name) > maxToolIDBytes+3 {
				t.Fatalf("call %d kept: %+v", i, call)
			}
		}
	})
}

// TestDoToolCallWithoutID fails a kept response whose call has no id, which no tool message
// could answer; counting the calls alone does not need ids.
func TestDoToolCallWithoutID(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"search","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	c := newTestClient(t, srv)
	if rec := do(t, c, question); rec.ErrKind != "" || rec.ToolCalls != 1 {
		t.Errorf("counting: %+v", rec)
	}
	req := question
	req.KeepAnswer = true
	if rec := do(t, c, req); rec.ErrKind != loadgen.ErrKindProtocol || rec.Calls != nil || !strings.Contains(rec.Err, "no id") {
		t.Errorf("keeping: %+v, want a protocol error", rec)
	}
}
