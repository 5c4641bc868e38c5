package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// The recorded streams in testdata are llm-sim's real output (profile tiny, three reasoning
// tokens, max_tokens 8): three reasoning deltas, then five answer deltas, and a usage of 8
// output tokens.

// replay serves a recorded event stream, pausing pause before the first event for which
// slow reports true, and records the request it got.
func replay(t *testing.T, path string, slow func(event string) bool, pause time.Duration) (*httptest.Server, *http.Request, *[]byte) {
	t.Helper()
	stream, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got http.Request
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = *r.Clone(context.Background())
		body, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		paused := false
		for ev := range strings.SplitSeq(strings.TrimSpace(string(stream)), "\n\n") {
			if !paused && slow(ev) {
				paused = true
				time.Sleep(pause)
			}
			_, _ = io.WriteString(w, ev+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &got, &body
}

var briefQuestion = loadgen.Request{Messages: []loadgen.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "What is a KV cache?"}}, MaxTokens: 8}

func TestMessagesStreamRecorded(t *testing.T) {
	const pause = 30 * time.Millisecond
	srv, got, body := replay(t, "testdata/llmsim-messages.sse", func(ev string) bool { return strings.Contains(ev, `"text_delta"`) }, pause)
	c, err := New(srv.URL+"/v1/messages", WithModel("ragtail-tiny"), WithAPIKey("sk-test"))
	if err != nil {
		t.Fatal(err)
	}
	if c.API() != APIMessages {
		t.Fatalf("API() = %q", c.API())
	}
	req := briefQuestion
	req.KeepAnswer = true
	var rec loadgen.Record
	c.Do(context.Background(), &req, time.Now(), &rec)
	if !rec.OK() {
		t.Fatalf("failed: %s %s", rec.ErrKind, rec.Err)
	}
	if got.Header.Get("X-Api-Key") != "sk-test" || got.Header.Get("Authorization") != "" || got.Header.Get("Anthropic-Version") != "2023-06-01" {
		t.Errorf("headers %v: want x-api-key and anthropic-version, no bearer token", got.Header)
	}
	var sent map[string]any
	if err := json.Unmarshal(*body, &sent); err != nil {
		t.Fatal(err)
	}
	msgs, _ := sent["messages"].([]any)
	if sent["system"] != "Be brief." || sent["max_tokens"] != 8.0 || sent["stream"] != true || sent["model"] != "ragtail-tiny" || len(msgs) != 1 {
		t.Errorf("body %s: want system split out, max_tokens 8, stream, one user message", *body)
	}
	if rec.OutputTokens != 8 || !rec.TokensFromUsage || rec.PromptTokens != 18 || len(rec.Chunks) != 8 || !rec.Reasoned {
		t.Errorf("output %d (usage %v), prompt %d, %d chunks, reasoned %v: want 8 from the usage, 18, 8 deltas, reasoned",
			rec.OutputTokens, rec.TokensFromUsage, rec.PromptTokens, len(rec.Chunks), rec.Reasoned)
	}
	// The first token is the first thinking delta; the answer's first token came after the pause.
	if rec.FirstToken <= 0 || rec.FirstOutput-rec.FirstToken < pause*2/3 || rec.FirstOutput != rec.Chunks[3].At || rec.End < rec.FirstOutput {
		t.Errorf("first token %v, first output %v (chunk 3 at %v), end %v", rec.FirstToken, rec.FirstOutput, rec.Chunks[3].At, rec.End)
	}
	if rec.Answer != "brief Be Be brief Be" {
		t.Errorf("answer %q", rec.Answer)
	}
}

func TestResponsesStreamRecorded(t *testing.T) {
	const pause = 30 * time.Millisecond
	srv, got, body := replay(t, "testdata/llmsim-responses.sse", func(ev string) bool { return strings.Contains(ev, "response.output_text.delta") }, pause)
	c, err := New(srv.URL+"/v1/responses", WithModel("ragtail-tiny"), WithAPIKey("sk-test"), WithTemperature(0.5))
	if err != nil {
		t.Fatal(err)
	}
	if c.API() != APIResponses {
		t.Fatalf("API() = %q", c.API())
	}
	req := briefQuestion
	req.KeepAnswer = true
	var rec loadgen.Record
	c.Do(context.Background(), &req, time.Now(), &rec)
	if !rec.OK() {
		t.Fatalf("failed: %s %s", rec.ErrKind, rec.Err)
	}
	if got.Header.Get("Authorization") != "Bearer sk-test" {
		t.Errorf("Authorization %q", got.Header.Get("Authorization"))
	}
	var sent map[string]any
	if err := json.Unmarshal(*body, &sent); err != nil {
		t.Fatal(err)
	}
	input, _ := sent["input"].([]any)
	if sent["max_output_tokens"] != 8.0 || sent["stream"] != true || sent["temperature"] != 0.5 || len(input) != 2 || sent["max_tokens"] != nil {
		t.Errorf("body %s: want max_output_tokens 8, stream, temperature, two input messages", *body)
	}
	if rec.OutputTokens != 8 || !rec.TokensFromUsage || rec.PromptTokens != 18 || rec.ReasoningTokens != 3 || len(rec.Chunks) != 8 || !rec.Reasoned {
		t.Errorf("output %d (usage %v), prompt %d, reasoning %d, %d chunks, reasoned %v", rec.OutputTokens, rec.TokensFromUsage,
			rec.PromptTokens, rec.ReasoningTokens, len(rec.Chunks), rec.Reasoned)
	}
	if rec.FirstToken <= 0 || rec.FirstOutput-rec.FirstToken < pause*2/3 || rec.FirstOutput != rec.Chunks[3].At {
		t.Errorf("first token %v, first output %v (chunk 3 at %v)", rec.FirstToken, rec.FirstOutput, rec.Chunks[3].At)
	}
	if len(rec.Answer) == 0 || strings.Count(rec.Answer, " ")+1 != 5 {
		t.Errorf("answer %q: want the five answer words", rec.Answer)
	}
}

// readAPI reads stream as the given endpoint's response.
func readAPI(t *testing.T, path, stream string, req *loadgen.Request) loadgen.Record {
	t.Helper()
	c, err := New("http://127.0.0.1:1" + path)
	if err != nil {
		t.Fatal(err)
	}
	rec := loadgen.Record{Status: http.StatusOK}
	origin := time.Now()
	if c.api == apiMessages {
		c.readMessagesStream(context.Background(), strings.NewReader(stream), req, origin, &rec)
	} else {
		c.readResponsesStream(context.Background(), strings.NewReader(stream), req, origin, &rec)
	}
	return rec
}

func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		name, data, _ := strings.Cut(e, " ")
		b.WriteString("event: " + name + "\ndata: " + data + "\n\n")
	}
	return b.String()
}

func TestMessagesStreamEdgeCases(t *testing.T) {
	start := `message_start {"type":"message_start","message":{"model":"m","usage":{"input_tokens":5,"cache_read_input_tokens":7,"output_tokens":1}}}`
	text := func(s string) string {
		return `content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + s + `"}}`
	}
	think := `content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}`
	end := `message_delta {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}`
	stop := `message_stop {"type":"message_stop"}`
	keep := &loadgen.Request{MaxTokens: 100, KeepAnswer: true}
	plain := &loadgen.Request{MaxTokens: 100}

	t.Run("interleaved thinking", func(t *testing.T) {
		rec := readAPI(t, "/v1/messages", sse(start, think, text("a"), think, text("b"), end, stop), keep)
		if !rec.OK() || len(rec.Chunks) != 4 || rec.FirstToken != rec.Chunks[0].At || rec.FirstOutput != rec.Chunks[1].At ||
			rec.Answer != "ab" || rec.OutputTokens != 9 || rec.PromptTokens != 12 || rec.CachedTokens != 7 {
			t.Errorf("%+v", rec)
		}
	})
	t.Run("no usage counts deltas", func(t *testing.T) {
		rec := readAPI(t, "/v1/messages", sse(text("a"), text("b"), text("c"), stop), plain)
		if !rec.OK() || rec.OutputTokens != 3 || rec.TokensFromUsage {
			t.Errorf("%+v", rec)
		}
	})
	t.Run("error event", func(t *testing.T) {
		rec := readAPI(t, "/v1/messages", sse(start, text("a"), `error {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), plain)
		if rec.ErrKind != loadgen.ErrKindStream || !strings.Contains(rec.Err, "Overloaded") {
			t.Errorf("%s: %s", rec.ErrKind, rec.Err)
		}
	})
	t.Run("error event with a long message is bounded", func(t *testing.T) {
		rec := readAPI(t, "/v1/messages", sse(`error {"type":"error","error":{"message":"`+strings.Repeat("x", 5000)+`"}}`), plain)
		if rec.ErrKind != loadgen.ErrKindStream || len(rec.Err) > maxErrText+40 {
			t.Errorf("%s: %d bytes", rec.ErrKind, len(rec.Err))
		}
	})
	t.Run("cut before message_stop", func(t *testing.T) {
		rec := readAPI(t, "/v1/messages", sse(start, text("a")), plain)
		if rec.ErrKind != loadgen.ErrKindStream || !strings.Contains(rec.Err, "message_stop") {
			t.Errorf("%s: %s", rec.ErrKind, rec.Err)
		}
	})
	t.Run("not JSON", func(t *testing.T) {
		rec := readAPI(t, "/v1/messages", "event: content_block_delta\ndata: {oops\n\n", plain)
		if rec.ErrKind != loadgen.ErrKindProtocol {
			t.Errorf("%s: %s", rec.ErrKind, rec.Err)
		}
	})
	t.Run("usage over the limit", func(t *testing.T) {
		rec := readAPI(t, "/v1/messages", sse(text("a"), `message_delta {"type":"message_delta","usage":{"output_tokens":100000}}`), &loadgen.Request{MaxTokens: 10})
		if rec.ErrKind != loadgen.ErrKindOverlong {
			t.Errorf("%s: %s", rec.ErrKind, rec.Err)
		}
	})
	t.Run("tool use", func(t *testing.T) {
		rec := readAPI(t, "/v1/messages", sse(start,
			`content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"search","input":{}}}`,
			`content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\":"}}`,
			`content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"kv\"}"}}`,
			`message_delta {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":4}}`, stop), keep)
		if !rec.OK() || rec.ToolCalls != 1 || len(rec.Calls) != 1 || rec.FirstOutput != 0 || rec.FirstToken == 0 {
			t.Fatalf("%+v", rec)
		}
		if c := rec.Calls[0]; c.ID != "toolu_1" || c.Function.Name != "search" || c.Function.Arguments != `{"q":"kv"}` {
			t.Errorf("call %+v", c)
		}
	})
}

func TestResponsesStreamEdgeCases(t *testing.T) {
	text := func(s string) string {
		return `response.output_text.delta {"type":"response.output_text.delta","output_index":1,"delta":"` + s + `"}`
	}
	think := `response.reasoning_text.delta {"type":"response.reasoning_text.delta","output_index":0,"delta":"hm"}`
	done := `response.completed {"type":"response.completed","response":{"object":"response","status":"completed","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":4},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":2}}}}`
	plain := &loadgen.Request{MaxTokens: 100}

	t.Run("interleaved reasoning", func(t *testing.T) {
		rec := readAPI(t, "/v1/responses", sse(think, text("a"), think, text("b"), done), &loadgen.Request{KeepAnswer: true})
		if !rec.OK() || len(rec.Chunks) != 4 || rec.FirstOutput != rec.Chunks[1].At || rec.Answer != "ab" ||
			rec.OutputTokens != 9 || rec.PromptTokens != 12 || rec.CachedTokens != 4 || rec.ReasoningTokens != 2 {
			t.Errorf("%+v", rec)
		}
	})
	t.Run("incomplete ends the stream", func(t *testing.T) {
		rec := readAPI(t, "/v1/responses", sse(text("a"), `response.incomplete {"type":"response.incomplete","response":{"status":"incomplete","usage":{"input_tokens":3,"output_tokens":1}}}`), plain)
		if !rec.OK() || rec.OutputTokens != 1 || !rec.TokensFromUsage {
			t.Errorf("%+v", rec)
		}
	})
	t.Run("no usage counts deltas", func(t *testing.T) {
		rec := readAPI(t, "/v1/responses", sse(text("a"), text("b"), `response.completed {"type":"response.completed","response":{"status":"completed"}}`), plain)
		if !rec.OK() || rec.OutputTokens != 2 || rec.TokensFromUsage {
			t.Errorf("%+v", rec)
		}
	})
	t.Run("error event", func(t *testing.T) {
		rec := readAPI(t, "/v1/responses", sse(text("a"), `error {"type":"error","code":"server_error","message":"engine stopped","param":null}`), plain)
		if rec.ErrKind != loadgen.ErrKindStream || !strings.Contains(rec.Err, "engine stopped") {
			t.Errorf("%s: %s", rec.ErrKind, rec.Err)
		}
	})
	t.Run("response.failed", func(t *testing.T) {
		rec := readAPI(t, "/v1/responses", sse(text("a"), `response.failed {"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}`), plain)
		if rec.ErrKind != loadgen.ErrKindStream || !strings.Contains(rec.Err, "boom") {
			t.Errorf("%s: %s", rec.ErrKind, rec.Err)
		}
	})
	t.Run("a delta not a string is no token", func(t *testing.T) {
		rec := readAPI(t, "/v1/responses", sse(`response.output_text.delta {"type":"response.output_text.delta","delta":{"x":1}}`, text("a"), done), plain)
		if !rec.OK() || len(rec.Chunks) != 1 {
			t.Errorf("%+v", rec)
		}
	})
	t.Run("cut before response.completed", func(t *testing.T) {
		rec := readAPI(t, "/v1/responses", sse(text("a")), plain)
		if rec.ErrKind != loadgen.ErrKindStream || !strings.Contains(rec.Err, "response.completed") {
			t.Errorf("%s: %s", rec.ErrKind, rec.Err)
		}
	})
	t.Run("endless deltas are cut", func(t *testing.T) {
		events := make([]string, 200)
		for i := range events {
			events[i] = text("a")
		}
		rec := readAPI(t, "/v1/responses", sse(events...), &loadgen.Request{MaxTokens: 10})
		if rec.ErrKind != loadgen.ErrKindOverlong || len(rec.Chunks) > OutputTokenLimit(10) {
			t.Errorf("%s: %s, %d chunks", rec.ErrKind, rec.Err, len(rec.Chunks))
		}
	})
	t.Run("function call", func(t *testing.T) {
		rec := readAPI(t, "/v1/responses", sse(
			`response.output_item.added {"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"search","arguments":""}}`,
			`response.function_call_arguments.delta {"type":"response.function_call_arguments.delta","output_index":0,"delta":"{\"q\":1}"}`,
			done), &loadgen.Request{KeepAnswer: true})
		if !rec.OK() || len(rec.Calls) != 1 || rec.Calls[0].ID != "call_1" || rec.Calls[0].Function.Arguments != `{"q":1}` || rec.FirstOutput != 0 {
			t.Errorf("%+v", rec)
		}
	})
}

func TestAPIRequestBodies(t *testing.T) {
	conv := &loadgen.Request{MaxTokens: 16, Messages: []loadgen.Message{
		{Role: "system", Content: "S"},
		{Role: "user", Content: "U"},
		{Role: "assistant", ToolCalls: []loadgen.ToolCall{{ID: "c1", Type: "function", Function: loadgen.FunctionCall{Name: "f", Arguments: `{"x":1}`}},
			{ID: "c2", Type: "function", Function: loadgen.FunctionCall{Name: "g", Arguments: `not json`}}}},
		{Role: "tool", ToolCallID: "c1", Content: "r1"},
		{Role: "tool", ToolCallID: "c2", Content: "r2"},
	}}
	encode := func(path string, req *loadgen.Request) (string, error) {
		c, err := New("http://127.0.0.1:1"+path, WithModel("m"), WithBody(map[string]any{"top_p": 0.9}))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		err = c.encodeBody(req, &buf)
		return strings.TrimSpace(buf.String()), err
	}
	got, err := encode("/v1/messages", conv)
	want := `{"max_tokens":16,"messages":[{"role":"user","content":"U"},{"role":"assistant","content":[{"id":"c1","input":{"x":1},"name":"f","type":"tool_use"},{"id":"c2","input":{},"name":"g","type":"tool_use"}]},{"role":"user","content":[{"content":"r1","tool_use_id":"c1","type":"tool_result"},{"content":"r2","tool_use_id":"c2","type":"tool_result"}]}],"model":"m","stream":true,"system":"S","top_p":0.9}`
	if err != nil || got != want {
		t.Errorf("messages body (%v)\n got %s\nwant %s", err, got, want)
	}
	got, err = encode("/v1/responses", conv)
	want = `{"input":[{"content":"S","role":"system"},{"content":"U","role":"user"},{"arguments":"{\"x\":1}","call_id":"c1","name":"f","type":"function_call"},{"arguments":"not json","call_id":"c2","name":"g","type":"function_call"},{"call_id":"c1","output":"r1","type":"function_call_output"},{"call_id":"c2","output":"r2","type":"function_call_output"}],"max_output_tokens":16,"model":"m","store":false,"stream":true,"top_p":0.9}`
	if err != nil || got != want {
		t.Errorf("responses body (%v)\n got %s\nwant %s", err, got, want)
	}
	if _, err := encode("/v1/messages", &loadgen.Request{Messages: conv.Messages[:2]}); err == nil || !strings.Contains(err.Error(), "max_tokens") {
		t.Errorf("a Messages request without max_tokens: %v", err)
	}
}

func TestAPIURLs(t *testing.T) {
	for _, tt := range []struct{ url, api, models string }{
		{"http://h:1/v1/messages", APIMessages, "http://h:1/v1/models"},
		{"http://h:1/v1/responses/", APIResponses, "http://h:1/v1/models"},
		{"http://h:1/v1", APIChatCompletions, "http://h:1/v1/models"},
		{"http://h:1/v1/completions", APICompletions, "http://h:1/v1/models"},
		{"http://h:1/v1/embeddings", APIEmbeddings, "http://h:1/v1/models"},
	} {
		c, err := New(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := c.modelsURL(); c.API() != tt.api || m != tt.models {
			t.Errorf("%s: API %q, models %q; want %q, %q", tt.url, c.API(), m, tt.api, tt.models)
		}
	}
}

func TestAPINonStreamed(t *testing.T) {
	for _, tt := range []struct{ path, body string }{
		{"/v1/messages", `{"id":"msg_1","type":"message","role":"assistant","model":"ragtail-tiny","content":[{"signature":"c5","thinking":"a KV cache","type":"thinking"},{"text":"cache What is a KV","type":"text"}],"stop_reason":"max_tokens","usage":{"input_tokens":11,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":8}}`},
		{"/v1/responses", `{"id":"resp_1","object":"response","status":"incomplete","error":null,"model":"ragtail-tiny","output":[{"content":[{"text":"What is a","type":"reasoning_text"}],"id":"rs_1","summary":[],"type":"reasoning"},{"content":[{"annotations":[],"text":"cache What is a KV","type":"output_text"}],"id":"msg_1","role":"assistant","type":"message"}],"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":0},"output_tokens":8,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":19}}`},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, tt.body)
		}))
		c, err := New(srv.URL+tt.path, WithStream(false))
		if err != nil {
			t.Fatal(err)
		}
		req := briefQuestion
		req.KeepAnswer = true
		var rec loadgen.Record
		c.Do(context.Background(), &req, time.Now(), &rec)
		srv.Close()
		if !rec.OK() || rec.OutputTokens != 8 || rec.PromptTokens != 11 || !rec.Reasoned || rec.Answer != "cache What is a KV" || rec.FirstToken != 0 {
			t.Errorf("%s: %+v", tt.path, rec)
		}
	}
}

// fuzzAPIStream checks what any body read as a stream of the given endpoint records: no panic,
// chunks in order and within the token limit, bounded errors, and a count of deltas when the
// server reported no usage.
func fuzzAPIStream(f *testing.F, path string, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	c, err := New("http://127.0.0.1:1" + path)
	if err != nil {
		f.Fatal(err)
	}
	req := &loadgen.Request{MaxTokens: 8}
	f.Fuzz(func(t *testing.T, body []byte) {
		var rec loadgen.Record
		if c.api == apiMessages {
			c.readMessagesStream(context.Background(), bytes.NewReader(body), req, time.Now(), &rec)
		} else {
			c.readResponsesStream(context.Background(), bytes.NewReader(body), req, time.Now(), &rec)
		}
		if rec.OutputTokens < 0 || rec.PromptTokens < 0 || len(rec.Chunks) > OutputTokenLimit(8) || len(rec.Err) > maxErrText+40 {
			t.Fatalf("%d output, %d prompt tokens, %d chunks, error of %d bytes", rec.OutputTokens, rec.PromptTokens, len(rec.Chunks), len(rec.Err))
		}
		for i, ch := range rec.Chunks {
			if ch.Tokens != 1 || (i > 0 && ch.At < rec.Chunks[i-1].At) {
				t.Fatalf("chunk %d = %+v", i, ch)
			}
		}
		if rec.FirstOutput != 0 && rec.FirstOutput < rec.FirstToken {
			t.Fatalf("first output %v before first token %v", rec.FirstOutput, rec.FirstToken)
		}
		if rec.ErrKind == "" && !rec.TokensFromUsage && rec.OutputTokens != len(rec.Chunks) {
			t.Fatalf("counted %d deltas, recorded %d tokens", len(rec.Chunks), rec.OutputTokens)
		}
	})
}

func readSeed(f *testing.F, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	return string(b)
}

func FuzzMessagesStream(f *testing.F) {
	fuzzAPIStream(f, "/v1/messages", readSeed(f, "testdata/llmsim-messages.sse"),
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"message\":\"x\"}}\n\n",
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-3}}\n\ndata: {\"type\":\"message_stop\"}\n\n")
}

func FuzzResponsesStream(f *testing.F) {
	fuzzAPIStream(f, "/v1/responses", readSeed(f, "testdata/llmsim-responses.sse"),
		"event: error\ndata: not json\n\n",
		"data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\ndata: {\"type\":\"response.completed\",\"response\":{}}\n\n")
}

func TestAPIErrorStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(529)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL + "/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	var rec loadgen.Record
	c.Do(context.Background(), &briefQuestion, time.Now(), &rec)
	if rec.ErrKind != loadgen.ErrKindHTTP5xx || rec.Err != "HTTP 529: Overloaded" {
		t.Errorf("%s: %q", rec.ErrKind, rec.Err)
	}
}

// BenchmarkMessagesParse measures reading a 256-token Messages stream as llm-sim sends it, per
// token.
func BenchmarkMessagesParse(b *testing.B) {
	events := []string{`message_start {"message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":18,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}},"type":"message_start"}`,
		`content_block_start {"content_block":{"text":"","type":"text"},"index":0,"type":"content_block_start"}`}
	for i := range 256 {
		events = append(events, fmt.Sprintf(`content_block_delta {"delta":{"text":" word%d","type":"text_delta"},"index":0,"type":"content_block_delta"}`, i))
	}
	events = append(events, `content_block_stop {"index":0,"type":"content_block_stop"}`,
		`message_delta {"delta":{"stop_reason":"max_tokens","stop_sequence":null},"type":"message_delta","usage":{"input_tokens":18,"output_tokens":256}}`,
		`message_stop {"type":"message_stop"}`)
	benchmarkAPIParse(b, "/v1/messages", sse(events...))
}

// BenchmarkResponsesParse measures reading a 256-token Responses stream as llm-sim sends it,
// per token.
func BenchmarkResponsesParse(b *testing.B) {
	resp := `{"id":"resp_1","object":"response","status":"in_progress","model":"m","output":[],"usage":null}`
	events := []string{`response.created {"type":"response.created","sequence_number":0,"response":` + resp + `}`,
		`response.output_item.added {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_1","status":"in_progress","role":"assistant","content":[]}}`}
	for i := range 256 {
		events = append(events, fmt.Sprintf(`response.output_text.delta {"content_index":0,"delta":" word%d","item_id":"msg_1","logprobs":[],"output_index":0,"sequence_number":%d,"type":"response.output_text.delta"}`, i, i+2))
	}
	events = append(events, `response.completed {"type":"response.completed","sequence_number":300,"response":{"object":"response","status":"incomplete","usage":{"input_tokens":18,"input_tokens_details":{"cached_tokens":0},"output_tokens":256,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":274}}}`)
	benchmarkAPIParse(b, "/v1/responses", sse(events...))
}

func benchmarkAPIParse(b *testing.B, path, stream string) {
	c, err := New("http://127.0.0.1:1" + path)
	if err != nil {
		b.Fatal(err)
	}
	req := &loadgen.Request{MaxTokens: 256}
	origin := time.Now()
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	r := strings.NewReader(stream)
	for b.Loop() {
		r.Reset(stream)
		rec := loadgen.Record{Status: http.StatusOK, Chunks: make([]loadgen.Chunk, 0, 256)}
		if c.api == apiMessages {
			c.readMessagesStream(context.Background(), r, req, origin, &rec)
		} else {
			c.readResponsesStream(context.Background(), r, req, origin, &rec)
		}
		if !rec.OK() || len(rec.Chunks) != 256 || rec.OutputTokens != 256 {
			b.Fatalf("%s, %d chunks", rec.Err, len(rec.Chunks))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/token")
}
