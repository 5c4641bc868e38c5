package openai_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

func TestChatStreamEvents(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	cs := openai.NewChatStream(rec, "chatcmpl-1", "m", true)
	for _, tok := range []string{" Hello", " world"} {
		if err := cs.Content(tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.Finish("stop", rag.Usage{PromptTokens: 3, CompletionTokens: 2}, "generate;dur=1.000"); err != nil {
		t.Fatal(err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var datas []string
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			datas = append(datas, d)
		} else if sc.Text() != "" {
			t.Errorf("unexpected line %q", sc.Text())
		}
	}
	want := []string{
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":" Hello"},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"server_timing":"generate;dur=1.000"}`,
		`[DONE]`,
	}
	if len(datas) != len(want) {
		t.Fatalf("%d events, want %d:\n%s", len(datas), len(want), strings.Join(datas, "\n"))
	}
	for i := range want[:len(want)-1] {
		var got map[string]any
		if err := json.Unmarshal([]byte(datas[i]), &got); err != nil {
			t.Fatal(err)
		}
		got["created"] = 0.0 // the clock differs
		var exp map[string]any
		_ = json.Unmarshal([]byte(want[i]), &exp)
		gb, _ := json.Marshal(got)
		eb, _ := json.Marshal(exp)
		if string(gb) != string(eb) {
			t.Errorf("event %d:\n got %s\nwant %s", i, gb, eb)
		}
	}
	if datas[len(datas)-1] != "[DONE]" {
		t.Errorf("last event %q", datas[len(datas)-1])
	}
}

func TestChatStreamFail(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	cs := openai.NewChatStream(rec, "chatcmpl-1", "m", false)
	_ = cs.Content("x")
	if err := cs.Fail(rag.AtStage(rag.StageGenerate, rag.ErrUnavailable)); err != nil {
		t.Fatal(err)
	}
	body := rec.Body.String()
	if !strings.Contains(body, `data: {"error":{"message":"generate: backend unavailable","type":"server_error","param":null,"code":"backend_unavailable"}}`) ||
		!strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("body:\n%s", body)
	}
}

// discardWriter is a ResponseWriter that drops what is written, for the encoding benchmark.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

// BenchmarkSSEContentChunk measures encoding and flushing one content chunk, the per-token cost of
// streaming to a client.
func BenchmarkSSEContentChunk(b *testing.B) {
	cs := openai.NewChatStream(&discardWriter{h: http.Header{}}, openai.NewCompletionID(), "meta-llama/Meta-Llama-3-8B-Instruct", true)
	_ = cs.Start()
	b.ReportAllocs()
	for b.Loop() {
		if err := cs.Content(" token"); err != nil {
			b.Fatal(err)
		}
	}
}
