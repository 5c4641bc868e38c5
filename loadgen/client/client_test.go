package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// streamOf builds an OpenAI-style event stream: a role chunk, one chunk per content piece, a
// finish chunk, a usage chunk and [DONE].
func streamOf(pieces []string, usage string) string {
	var b strings.Builder
	b.WriteString("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
	for _, p := range pieces {
		fmt.Fprintf(&b, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", p)
	}
	b.WriteString("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	if usage != "" {
		b.WriteString("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[]," + usage + "}\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// newTestClient returns a client of srv's chat endpoint.
func newTestClient(tb testing.TB, srv *httptest.Server, opts ...Option) *Client {
	tb.Helper()
	c, err := New(srv.URL+"/v1/chat/completions", append([]Option{WithModel("m")}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.CloseIdleConnections)
	return c
}

func do(tb testing.TB, c *Client, req loadgen.Request) loadgen.Record {
	tb.Helper()
	var rec loadgen.Record
	c.Do(context.Background(), &req, time.Now(), &rec)
	return rec
}

var question = loadgen.Request{Messages: []loadgen.Message{{Role: "user", Content: "why?"}}, PromptTokens: 3}

func TestDoStreams(t *testing.T) {
	t.Parallel()
	usage := `"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18},"server_timing":"embed;dur=1.5, generate;dur=40"`
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantKind   string
		wantErr    string
		wantChunks int
		wantOut    int
		fromUsage  bool
		wantTiming map[string]float64
	}{
		{
			name: "openai stream with usage and server timing",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, streamOf([]string{"a", "b", "c"}, usage))
			},
			wantChunks: 3, wantOut: 7, fromUsage: true,
			wantTiming: map[string]float64{"embed": 1.5, "generate": 40},
		},
		{
			name: "crlf, comments and progress before the first token",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				s := ": rag {\"stage\":\"retrieve\",\"shard\":0}\n\n" + streamOf([]string{"x", "y"}, "")
				io.WriteString(w, strings.ReplaceAll(s, "\n", "\r\n"))
			},
			wantChunks: 2, wantOut: 2,
		},
		{
			name: "several tokens per chunk with continuous usage",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, `data: {"choices":[{"delta":{"role":"assistant"}}],"usage":{"prompt_tokens":5,"completion_tokens":0}}`+"\n\n")
				io.WriteString(w, `data: {"choices":[{"delta":{"content":"ab"}}],"usage":{"prompt_tokens":5,"completion_tokens":3}}`+"\n\n")
				io.WriteString(w, `data: {"choices":[{"delta":{"content":"cd"}}],"usage":{"prompt_tokens":5,"completion_tokens":4}}`+"\n\n")
				io.WriteString(w, `data: {"choices":[{"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":4}}`+"\n\n")
				io.WriteString(w, "data: [DONE]\n\n")
			},
			wantChunks: 2, wantOut: 4, fromUsage: true,
		},
		{
			name: "reasoning content counts as tokens",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}`+"\n\n")
				io.WriteString(w, `data: {"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
			},
			wantChunks: 2, wantOut: 2,
		},
		{
			name: "multi-line data",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"a\"}}]}\n\n")
				io.WriteString(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
			},
			wantChunks: 1, wantOut: 1,
		},
		{
			name: "error event after tokens",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n")
				io.WriteString(w, `data: {"error":{"message":"engine died","type":"server_error"}}`+"\n\ndata: [DONE]\n\n")
			},
			wantKind: loadgen.ErrKindStream, wantErr: "engine died", wantChunks: 1,
		},
		{
			name: "vllm error object",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `data: {"object":"error","message":"out of memory","code":500}`+"\n\n")
			},
			wantKind: loadgen.ErrKindStream, wantErr: "out of memory",
		},
		{
			name: "event: error",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "event: error\ndata: overloaded\n\n")
			},
			wantKind: loadgen.ErrKindStream, wantErr: "overloaded",
		},
		{
			name: "cut before the finish",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n")
			},
			wantKind: loadgen.ErrKindStream, wantErr: "without [DONE]", wantChunks: 1, wantOut: 1,
		},
		{
			name: "cut after the finish",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `data: {"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}`+"\n\n")
			},
			wantChunks: 1, wantOut: 1,
		},
		{
			name: "not json",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "data: <html>\n\n")
			},
			wantKind: loadgen.ErrKindProtocol, wantErr: "not JSON",
		},
		{
			name: "openai error json with 429",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, `{"error":{"message":"rate limited","type":"rate_limit_error"}}`)
			},
			wantKind: loadgen.ErrKindHTTP4xx, wantErr: "HTTP 429: rate limited",
		},
		{
			name: "html 502 from a proxy",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusBadGateway)
				io.WriteString(w, "<html>\n<body>Bad   Gateway</body></html>")
			},
			wantKind: loadgen.ErrKindHTTP5xx, wantErr: "HTTP 502: <html> <body>Bad Gateway</body></html>",
		},
		{
			name: "fastapi detail",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusUnprocessableEntity)
				io.WriteString(w, `{"detail":"field required"}`)
			},
			wantKind: loadgen.ErrKindHTTP4xx, wantErr: "field required",
		},
		{
			name: "server ignores stream and answers json",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":9}}`)
			},
			wantOut: 9, fromUsage: true,
		},
		{
			name: "gzip stream",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				io.WriteString(zw, streamOf([]string{"a", "b"}, usage))
				zw.Close()
			},
			wantChunks: 2, wantOut: 7, fromUsage: true, wantTiming: map[string]float64{"embed": 1.5, "generate": 40},
		},
		{
			name: "server timing as header and trailer",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", "Server-Timing")
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, streamOf([]string{"a"}, ""))
				w.Header().Set("Server-Timing", `retrieve;dur=12.5;desc="4 shards, top 5", stream;dur=0.4`)
			},
			wantChunks: 1, wantOut: 1, wantTiming: map[string]float64{"retrieve": 12.5, "stream": 0.4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			rec := do(t, newTestClient(t, srv), question)
			if rec.ErrKind != tt.wantKind || !strings.Contains(rec.Err, tt.wantErr) {
				t.Errorf("error = %q (%q), want %q containing %q", rec.ErrKind, rec.Err, tt.wantKind, tt.wantErr)
			}
			if len(rec.Chunks) != tt.wantChunks {
				t.Errorf("chunks = %d, want %d", len(rec.Chunks), tt.wantChunks)
			}
			if tt.wantKind == "" && (rec.OutputTokens != tt.wantOut || rec.TokensFromUsage != tt.fromUsage) {
				t.Errorf("output tokens = %d (from usage %v), want %d (%v)", rec.OutputTokens, rec.TokensFromUsage, tt.wantOut, tt.fromUsage)
			}
			if tt.wantTiming != nil && !mapsEqual(rec.ServerTiming, tt.wantTiming) {
				t.Errorf("server timing = %v, want %v", rec.ServerTiming, tt.wantTiming)
			}
			checkOrder(t, &rec)
		})
	}
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || math.Abs(w-v) > 1e-9 {
			return false
		}
	}
	return true
}

// checkOrder asserts the record's times are in causal order.
func checkOrder(tb testing.TB, rec *loadgen.Record) {
	tb.Helper()
	if rec.Sent <= 0 || rec.End < rec.Sent {
		tb.Errorf("sent %v, end %v", rec.Sent, rec.End)
	}
	if rec.Status != 0 && (rec.FirstByte < rec.Sent || rec.FirstByte > rec.End) {
		tb.Errorf("first byte %v outside [%v, %v]", rec.FirstByte, rec.Sent, rec.End)
	}
	if rec.FirstToken != 0 && (rec.FirstToken < rec.FirstByte || rec.FirstToken > rec.End) {
		tb.Errorf("first token %v outside [%v, %v]", rec.FirstToken, rec.FirstByte, rec.End)
	}
	for i, c := range rec.Chunks {
		if (i > 0 && c.At < rec.Chunks[i-1].At) || c.At > rec.End || c.Tokens < 1 {
			tb.Errorf("chunk %d = %+v", i, c)
		}
	}
}

func TestDoRequestBody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []map[string]any
	var headers []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		bodies, headers = append(bodies, body), append(headers, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("traceparent", "00-"+strings.Repeat("ab", 16)+"-"+strings.Repeat("cd", 8)+"-01")
		io.WriteString(w, streamOf([]string{"a"}, ""))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, WithMaxTokens(64), WithTemperature(0.7), WithAPIKey("sk-test"), WithHeader("X-User-ID", "u1"),
		WithBody(map[string]any{"rag": map[string]any{"coupling": "async"}, "max_tokens": 5}))
	rec := do(t, c, loadgen.Request{Messages: question.Messages, MaxTokens: 9, Extra: map[string]any{"top_p": 0.5}})
	if rec.ErrKind != "" {
		t.Fatal(rec.Err)
	}
	if rec.TraceID != strings.Repeat("ab", 16) {
		t.Errorf("trace id %q is not the server's", rec.TraceID)
	}
	_ = do(t, c, question)
	b, h := bodies[0], headers[0]
	if b["model"] != "m" || b["stream"] != true || b["temperature"] != 0.7 || b["top_p"] != 0.5 {
		t.Errorf("body %v", b)
	}
	if b["max_tokens"] != 5.0 { // the client's extra fields win over the standard ones
		t.Errorf("max_tokens = %v, want the WithBody value 5", b["max_tokens"])
	}
	if rag, _ := b["rag"].(map[string]any); rag["coupling"] != "async" {
		t.Errorf("rag = %v", b["rag"])
	}
	if so, _ := b["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options = %v", b["stream_options"])
	}
	if h.Get("Authorization") != "Bearer sk-test" || h.Get("X-User-ID") != "u1" {
		t.Errorf("headers %v", h)
	}
	tp1, tp2 := headers[0].Get("traceparent"), headers[1].Get("traceparent")
	id1, ok1 := parseTraceparent(tp1)
	id2, ok2 := parseTraceparent(tp2)
	if !ok1 || !ok2 || id1 == id2 || len(tp1) != 55 {
		t.Errorf("traceparents %q and %q: want two valid ones with different trace ids", tp1, tp2)
	}
}

func TestDoCompletionsEndpoint(t *testing.T) {
	t.Parallel()
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		io.WriteString(w, `data: {"choices":[{"text":"x","finish_reason":"length"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/v1/completions", WithStream(true))
	if err != nil {
		t.Fatal(err)
	}
	rec := do(t, c, loadgen.Request{Messages: []loadgen.Message{{Role: "system", Content: "ctx"}, {Role: "user", Content: "q"}}})
	if rec.ErrKind != "" || len(rec.Chunks) != 1 {
		t.Fatalf("record %+v", rec)
	}
	if got["prompt"] != "ctx\n\nq" || got["messages"] != nil {
		t.Errorf("body %v: want the messages joined into prompt", got)
	}
}

func TestDoNonStreamed(t *testing.T) {
	t.Parallel()
	var stream any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		stream = body["stream"]
		w.Header().Set("Server-Timing", "generate;dur=3")
		io.WriteString(w, `{"choices":[{"message":{"content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}`)
	}))
	defer srv.Close()
	rec := do(t, newTestClient(t, srv, WithStream(false)), question)
	if rec.ErrKind != "" || rec.OutputTokens != 2 || rec.PromptTokens != 4 || rec.FirstToken != 0 || rec.ServerTiming["generate"] != 3 {
		t.Fatalf("record %+v", rec)
	}
	if stream != false {
		t.Errorf("stream = %v, want false", stream)
	}
}

// TestDoReasoningThenAnswer checks TTFO against TTFT on a stream that reasons first, and that
// the answer's text (without the reasoning) is kept only when asked for.
func TestDoReasoningThenAnswer(t *testing.T) {
	t.Parallel()
	const pause = 30 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for _, piece := range []string{"let me", " think"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"reasoning_content\":%q}}]}\n\n", piece)
			fl.Flush()
		}
		time.Sleep(pause) // the server's own pause between its reasoning and its answer
		for _, piece := range []string{"forty", "-two \"exactly\""} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", piece)
		}
		io.WriteString(w, `data: {"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":2}}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	c := newTestClient(t, srv)
	for _, keep := range []bool{false, true} {
		req := question
		req.KeepAnswer = keep
		rec := do(t, c, req)
		if rec.ErrKind != "" || !rec.Reasoned || rec.ReasoningTokens != 2 || len(rec.Chunks) != 4 {
			t.Fatalf("record %+v", rec)
		}
		ttft, _ := rec.TTFT()
		ttfo, ok := rec.TTFO()
		if !ok || ttfo-ttft < pause {
			t.Errorf("TTFO %v - TTFT %v below the server's %v pause between reasoning and answer", ttfo, ttft, pause)
		}
		want := ""
		if keep {
			want = `forty-two "exactly"`
		}
		if rec.Answer != want {
			t.Errorf("keep %v: answer %q, want %q", keep, rec.Answer, want)
		}
	}
	plain := do(t, c, loadgen.Request{Messages: question.Messages})
	if plain.FirstOutput == 0 {
		t.Fatal("no first output")
	}

	// Non-streamed: the message's content is the answer; a reasoning_content beside it marks
	// the record.
	whole := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"choices":[{"message":{"reasoning_content":"hmm","content":"caf\u00e9"},"finish_reason":"stop"}]}`)
	}))
	defer whole.Close()
	req := question
	req.KeepAnswer = true
	rec := do(t, newTestClient(t, whole, WithStream(false)), req)
	if rec.ErrKind != "" || rec.Answer != "café" || !rec.Reasoned {
		t.Errorf("non-streamed record %+v", rec)
	}
}

func TestDoKeyLookup(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.EscapedPath() != "/v1/documents/doc-00001%230" {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"message":"document does not exist"}}`)
			return
		}
		w.Header().Set("Server-Timing", "fetch;dur=0.25")
		io.WriteString(w, `{"id":"doc-00001#0"}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv)
	rec := do(t, c, loadgen.Request{Path: "/v1/documents/doc-00001%230", Key: "doc-00001#0"})
	if !rec.OK() || rec.ServerTiming["fetch"] != 0.25 {
		t.Errorf("lookup %+v", rec)
	}
	rec = do(t, c, loadgen.Request{Path: "/v1/documents/missing", Key: "missing"})
	if rec.ErrKind != loadgen.ErrKindHTTP4xx || rec.Status != 404 || !strings.Contains(rec.Err, "does not exist") {
		t.Errorf("missing key %+v", rec)
	}
}

func TestDoFailures(t *testing.T) {
	t.Parallel()
	t.Run("connect", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		c, err := New("http://" + addr + "/v1/chat/completions")
		if err != nil {
			t.Fatal(err)
		}
		if rec := do(t, c, question); rec.ErrKind != loadgen.ErrKindConnect || rec.Status != 0 {
			t.Errorf("record %+v", rec)
		}
	})
	t.Run("timeout mid-stream", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		rec := do(t, newTestClient(t, srv, WithTimeout(500*time.Millisecond)), question)
		if rec.ErrKind != loadgen.ErrKindTimeout || len(rec.Chunks) != 1 {
			t.Errorf("record %+v", rec)
		}
		// origin is taken just before Do, where the timeout starts.
		if rec.End < 500*time.Millisecond || rec.End > 3*time.Second {
			t.Errorf("timed out after %v, want about 500ms", rec.End)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // the server notices a gone client only after the body
			<-r.Context().Done()
		}))
		defer srv.Close()
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(50*time.Millisecond, cancel)
		defer stop.Stop()
		var rec loadgen.Record
		newTestClient(t, srv).Do(ctx, &question, time.Now(), &rec)
		if rec.ErrKind != loadgen.ErrKindCanceled {
			t.Errorf("record %+v", rec)
		}
	})
	t.Run("connection closed without a response", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		defer srv.Close()
		rec := do(t, newTestClient(t, srv), question)
		if rec.ErrKind != loadgen.ErrKindProtocol && rec.ErrKind != loadgen.ErrKindConnect {
			t.Errorf("record %+v", rec)
		}
	})
}

func TestClockOffset(t *testing.T) {
	t.Parallel()
	const skew = 5 * time.Second
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Ragtail-Time", fmt.Sprint(time.Now().Add(skew).UnixNano()))
		io.WriteString(w, streamOf([]string{"a"}, ""))
	}))
	defer srv.Close()
	c := newTestClient(t, srv)
	if _, ok := c.ClockOffset(); ok {
		t.Fatal("an estimate before any response")
	}
	for range 5 {
		do(t, c, question)
	}
	est, ok := c.ClockOffset()
	if !ok || est.Samples != 5 {
		t.Fatalf("estimate %+v, %v", est, ok)
	}
	// The server stamped its time between our send and first byte, so the true skew lies
	// within the estimate's uncertainty (plus a microsecond of rounding).
	if d := (est.Offset - skew).Abs(); d > est.Uncertainty+time.Microsecond {
		t.Errorf("offset %v, want %v within %v", est.Offset, skew, est.Uncertainty)
	}
	without := newTestClient(t, httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, streamOf(nil, ""))
	})))
	do(t, without, question)
	if _, ok := without.ClockOffset(); ok {
		t.Error("an estimate from a server that sends no clock")
	}
}

// TestProbeClock: the model-list probes give samples whose round trip is not held up by the
// chat answer, so the estimate tightens to them, and the true skew stays within it.
func TestProbeClock(t *testing.T) {
	t.Parallel()
	const skew, pipeline = -3 * time.Second, 200 * time.Millisecond
	var probes int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			mu.Lock()
			probes++
			mu.Unlock()
			w.Header().Set("X-Ragtail-Time", fmt.Sprint(time.Now().Add(skew).UnixNano()))
			io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
			return
		}
		time.Sleep(pipeline) // the headers of a chat answer wait for the pipeline
		w.Header().Set("X-Ragtail-Time", fmt.Sprint(time.Now().Add(skew).UnixNano()))
		io.WriteString(w, streamOf([]string{"a"}, ""))
	}))
	defer srv.Close()
	c := newTestClient(t, srv)
	do(t, c, question)
	loose, ok := c.ClockOffset()
	if !ok || loose.Uncertainty < pipeline/2 {
		t.Fatalf("estimate from a chat answer %+v, %v: want an uncertainty of at least %v", loose, ok, pipeline/2)
	}
	if err := c.ProbeClock(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	est, _ := c.ClockOffset()
	if probes != 8 || est.Samples != 9 {
		t.Fatalf("%d probes, estimate %+v", probes, est)
	}
	if est.Uncertainty >= loose.Uncertainty {
		t.Errorf("uncertainty %v after the probes, %v before", est.Uncertainty, loose.Uncertainty)
	}
	if d := (est.Offset - skew).Abs(); d > est.Uncertainty+time.Microsecond {
		t.Errorf("offset %v, want %v within %v", est.Offset, skew, est.Uncertainty)
	}
	noList := httptest.NewServer(http.NotFoundHandler())
	defer noList.Close()
	dead := newTestClient(t, noList)
	if err := dead.ProbeClock(context.Background(), 2); err == nil {
		t.Error("a probe of a server without a model list succeeded")
	}
}

func TestParseServerTime(t *testing.T) {
	t.Parallel()
	ref := time.Date(2025, 11, 29, 12, 0, 0, 123456789, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{fmt.Sprint(ref.UnixNano()), ref, true},
		{fmt.Sprint(ref.UnixMicro()), ref.Truncate(time.Microsecond), true},
		{fmt.Sprint(ref.UnixMilli()), ref.Truncate(time.Millisecond), true},
		{fmt.Sprint(ref.Unix()), ref.Truncate(time.Second), true},
		{"1764417600.5", time.Unix(1764417600, 5e8), true},
		{ref.Format(time.RFC3339Nano), ref, true},
		{"", time.Time{}, false},
		{"soon", time.Time{}, false},
		{"-5", time.Time{}, false},
		{"1e400", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := ParseServerTime(tt.in)
			if ok != tt.ok || (ok && !got.Equal(tt.want)) {
				t.Errorf("ParseServerTime(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseServerTiming(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []string
		want map[string]float64
	}{
		{"ragtail", []string{"admission;dur=0.012, embed;dur=0.300, retrieve;dur=12.100"}, map[string]float64{"admission": 0.012, "embed": 0.3, "retrieve": 12.1}},
		{"quoted desc with comma", []string{`db;desc="a, b;c";dur=5, app;dur=1`}, map[string]float64{"db": 5, "app": 1}},
		{"no dur", []string{"miss, cache;desc=hit"}, map[string]float64{"miss": 0, "cache": 0}},
		{"two headers add up", []string{"a;dur=1", "a;dur=2"}, map[string]float64{"a": 3}},
		{"case and spaces", []string{" total ; DUR = 7.5 "}, map[string]float64{"total": 7.5}},
		{"garbage skipped", []string{`;dur=1, "x";dur=2, ok;dur=abc`}, map[string]float64{"ok": 0}},
		{"empty", []string{""}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseServerTiming(tt.in...); !mapsEqual(got, tt.want) {
				t.Errorf("ParseServerTiming(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// TestStreamTimingAccuracy checks that chunk arrival times are the times the server wrote them:
// a server sends its first token after a fixed TTFT and the rest at a fixed gap, scheduled
// against absolute times and stamping each write on the same monotonic clock. The client's
// timestamps may only trail the server's by the loopback delivery and a goroutine wake-up.
//
// It does not run in parallel with the package's other tests, whose load would only add noise.
func TestStreamTimingAccuracy(t *testing.T) {
	const (
		ttft   = 40 * time.Millisecond
		gap    = 10 * time.Millisecond
		tokens = 20
	)
	origin := time.Now()
	var mu sync.Mutex
	var written []time.Duration
	var arrived time.Duration
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		mu.Lock()
		arrived = start.Sub(origin)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range tokens {
			due := start.Add(ttft + time.Duration(i)*gap)
			timer := time.NewTimer(time.Until(due))
			<-timer.C
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			fl.Flush()
			mu.Lock()
			written = append(written, time.Since(origin))
			mu.Unlock()
		}
		io.WriteString(w, `data: {"choices":[{"delta":{},"finish_reason":"length"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	c := newTestClient(t, srv)
	var rec loadgen.Record
	called := time.Since(origin)
	c.Do(context.Background(), &question, origin, &rec)
	if rec.ErrKind != "" || len(rec.Chunks) != tokens {
		t.Fatalf("record %+v", rec)
	}
	var skew []time.Duration
	for i, ch := range rec.Chunks {
		skew = append(skew, ch.At-written[i])
	}
	slices.Sort(skew)
	// Flush returns after the write syscall, so the client may read the bytes before the server
	// stamps them: a skew slightly below zero is possible. Either side's goroutine can be
	// descheduled on a loaded machine, so single chunks may be off by more; the median may not.
	if med := skew[len(skew)/2]; med.Abs() > time.Millisecond {
		t.Errorf("median client-server skew %v, want within 1ms (all: %v)", med, skew)
	}
	// The request reached the handler after Do was called, and not long after it was written.
	// The send is stamped when the write has returned (the WroteRequest hook, or h1's own stamp),
	// and the server may read the bytes before that: the handler can start just before it.
	if arrived < called {
		t.Errorf("handler started %v before Do was called", called-arrived)
	}
	if d := arrived - rec.Sent; d > 50*time.Millisecond {
		t.Errorf("handler started %v after the recorded send", d)
	}
	// The server's timer fires at or after the TTFT, so the measured TTFT (from the send) cannot
	// be shorter, less what the send's stamp trailed the handler's start by, when it did.
	if serverTTFT := written[0] - arrived; serverTTFT < ttft {
		t.Errorf("server wrote the first token %v after the request arrived, before the %v TTFT", serverTTFT, ttft)
	}
	if got, late := rec.FirstToken-rec.Sent, max(0, rec.Sent-arrived); got < ttft-late {
		t.Errorf("TTFT from send %v is below the server's %v (less %v)", got, ttft, late)
	}
	itls := rec.ITLs()
	slices.Sort(itls)
	if med := itls[len(itls)/2]; (med - gap).Abs() > time.Millisecond {
		t.Errorf("median ITL %v, want %v within 1ms", med, gap)
	}
}

// FuzzReadStream feeds arbitrary bodies to the stream reader: it must not panic, and whatever
// it records must be in causal order.
func FuzzReadStream(f *testing.F) {
	f.Add([]byte(streamOf([]string{"a", "b"}, `"usage":{"prompt_tokens":1,"completion_tokens":2}`)))
	f.Add([]byte("data: {\"error\":\"x\"}\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"completion_tokens\":5}}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":{\"completion_tokens\":3}}\n\n"))
	f.Add([]byte("event: error\ndata: {}\n\n"))
	c, err := New("http://127.0.0.1:1/v1/chat/completions")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		origin := time.Now()
		rec := loadgen.Record{Sent: 1, FirstByte: 1}
		c.readStream(context.Background(), bytes.NewReader(body), &question, origin, &rec)
		if rec.OutputTokens < 0 || rec.PromptTokens < 0 {
			t.Fatalf("negative tokens: %+v", rec)
		}
		for i, ch := range rec.Chunks {
			if ch.Tokens < 1 || (i > 0 && ch.At < rec.Chunks[i-1].At) {
				t.Fatalf("chunk %d = %+v", i, ch)
			}
		}
		if rec.FirstOutput != 0 && rec.FirstOutput < rec.FirstToken || rec.Answer != "" {
			t.Fatalf("first output %v before first token %v, or an answer kept unasked", rec.FirstOutput, rec.FirstToken)
		}
		if rec.ErrKind == "" && !rec.TokensFromUsage {
			sum := 0
			for _, ch := range rec.Chunks {
				sum += ch.Tokens
			}
			if sum != rec.OutputTokens {
				t.Fatalf("counted %d tokens, recorded %d", sum, rec.OutputTokens)
			}
		}
	})
}

// BenchmarkSSEParse measures reading a 256-token OpenAI stream: event splitting, JSON decoding
// and bookkeeping, per token.
func BenchmarkSSEParse(b *testing.B) {
	pieces := make([]string, 256)
	for i := range pieces {
		pieces[i] = fmt.Sprintf(" word%d", i)
	}
	stream := []byte(streamOf(pieces, `"usage":{"prompt_tokens":100,"completion_tokens":256}`))
	c, err := New("http://127.0.0.1:1/v1/chat/completions")
	if err != nil {
		b.Fatal(err)
	}
	origin := time.Now()
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	r := bytes.NewReader(stream)
	for b.Loop() {
		r.Reset(stream)
		rec := loadgen.Record{Chunks: make([]loadgen.Chunk, 0, 256)}
		c.readStream(context.Background(), r, &question, origin, &rec)
		if rec.ErrKind != "" || len(rec.Chunks) != 256 {
			b.Fatal(rec.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/token")
}

func TestParseTraceparent(t *testing.T) {
	t.Parallel()
	id := "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		in     string
		want   string
		wantOK bool
	}{
		{"00-" + id + "-00f067aa0ba902b7-01", id, true},
		{" 00-" + strings.ToUpper(id) + "-00f067aa0ba902b7-00 ", id, true},
		{"01-" + id + "-00f067aa0ba902b7-01-future", id, true},
		{"00-" + id + "-00f067aa0ba902b7-01-extra", "", false},
		{"ff-" + id + "-00f067aa0ba902b7-01", "", false},
		{"00-" + strings.Repeat("0", 32) + "-00f067aa0ba902b7-01", "", false},
		{"00-" + id + "-0000000000000000-01", "", false},
		{"00-" + id[:31] + "x-00f067aa0ba902b7-01", "", false},
		{"00_" + id + "-00f067aa0ba902b7-01", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := parseTraceparent(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseTraceparent(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
	for range 100 {
		tid, h := newTraceparent()
		if got, ok := parseTraceparent(h); !ok || got != tid {
			t.Fatalf("newTraceparent gave %q, which parses as %q, %v", h, got, ok)
		}
	}
}

func TestResolveURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want, models string }{
		{"http://h:8000", "http://h:8000/v1/chat/completions", "/v1/models"},
		{"http://h:8000/", "http://h:8000/v1/chat/completions", "/v1/models"},
		{"http://h:8000/v1", "http://h:8000/v1/chat/completions", "/v1/models"},
		{"http://h:8000/v1/", "http://h:8000/v1/chat/completions", "/v1/models"},
		{"https://h/openai/v1", "https://h/openai/v1/chat/completions", "/openai/v1/models"},
		{"http://h:8000/v1/chat/completions", "http://h:8000/v1/chat/completions", "/v1/models"},
		{"http://h:8000/v1/chat/completions/", "http://h:8000/v1/chat/completions", "/v1/models"},
		{"http://h:8000/v1/completions", "http://h:8000/v1/completions", "/v1/models"},
		{"http://h:8000/v1/embeddings", "http://h:8000/v1/embeddings", "/v1/models"},
	}
	for _, tt := range tests {
		u, err := ResolveURL(tt.in)
		if err != nil || u.String() != tt.want {
			t.Errorf("ResolveURL(%q) = %v, %v; want %s", tt.in, u, err, tt.want)
			continue
		}
		// Models asks beside the endpoint, as OpenAI clients do.
		var asked string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked = r.URL.Path
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		}))
		c, err := New(srv.URL + u.Path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Models(context.Background()); err != nil || asked != tt.models {
			t.Errorf("%s: models asked at %q (%v), want %s", tt.in, asked, err, tt.models)
		}
		srv.Close()
	}
	for _, bad := range []string{"127.0.0.1:8000", "ftp://h/v1", "http:///v1"} {
		if _, err := ResolveURL(bad); err == nil {
			t.Errorf("ResolveURL(%q): no error", bad)
		}
	}
}

func TestPreflight(t *testing.T) {
	t.Parallel()
	long := "The model `nope` does not exist. Valid models: " + strings.Repeat("model-with-a-long-name, ", 40) + "last"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body.Model != "good" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": long, "type": "invalid_request_error"}})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, streamOf([]string{"a", "b"}, `"usage":{"prompt_tokens":1,"completion_tokens":2}`))
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	deadURL := closed.URL
	closed.Close()
	req := &loadgen.Request{Messages: []loadgen.Message{{Role: "user", Content: "hi"}}}

	tests := []struct {
		name, url, model string
		want             []string // in the error; none: no error
		kind             string
	}{
		{"ok", srv.URL + "/v1", "good", nil, ""},
		{"wrong model: the whole message", srv.URL + "/v1", "nope", []string{"HTTP 404", long}, loadgen.ErrKindHTTP4xx},
		{"nothing listening", deadURL, "good", []string{"connection refused", "is the server running"}, loadgen.ErrKindConnect},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.url, WithModel(tt.model))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Preflight(context.Background(), req)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("preflight: %v", err)
				}
				return
			}
			var pe *PreflightError
			if !errors.As(err, &pe) || pe.Kind != tt.kind {
				t.Fatalf("preflight: %v, want a %s PreflightError", err, tt.kind)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

// TestDoLargerThanBuffers sends a request body and receives a header line, an event and a
// plain body each several times larger than the transport's read and write buffers (4 KB) and
// the SSE reader's (8 KB): the buffers bound the memory a connection holds, not the size of
// what passes through it.
func TestDoLargerThanBuffers(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 16<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []loadgen.Message `json:"messages"`
		}
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, big)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Messages) != 1 || body.Messages[0].Content != big {
			http.Error(w, "request body not received whole", http.StatusBadRequest)
			return
		}
		w.Header().Set("Server-Timing", "app;dur=12.5, pad;desc=\""+strings.Repeat("p", 6<<10)+"\"")
		_, _ = io.WriteString(w, streamOf([]string{big, "b"}, `"usage":{"prompt_tokens":1,"completion_tokens":2}`))
	}))
	defer srv.Close()
	c := newTestClient(t, srv)
	rec := do(t, c, loadgen.Request{Messages: []loadgen.Message{{Role: "user", Content: big}}, KeepAnswer: true})
	if rec.ErrKind != "" || rec.Status != http.StatusOK {
		t.Fatalf("status %d, %s: %s", rec.Status, rec.ErrKind, rec.Err)
	}
	if len(rec.Chunks) != 2 || rec.Answer != big+"b" {
		t.Errorf("%d chunks, an answer of %d bytes; want 2 and %d", len(rec.Chunks), len(rec.Answer), len(big)+1)
	}
	if rec.ServerTiming["app"] != 12.5 {
		t.Errorf("server timing %v: want app 12.5 from a %d-byte header line", rec.ServerTiming, 6<<10)
	}
	rec = do(t, c, loadgen.Request{Path: "/k"})
	if rec.ErrKind != "" || rec.Status != http.StatusOK {
		t.Fatalf("GET: status %d, %s: %s", rec.Status, rec.ErrKind, rec.Err)
	}
}
