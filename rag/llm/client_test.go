package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llm"
	"github.com/ragtail/ragtail/rag/pipeline"
)

var _ pipeline.Generator = (*llm.Client)(nil)

// TestTranscripts replays what vLLM, Ollama, llama.cpp's server and OpenAI send, including
// their error events, and checks what the pipeline receives.
func TestTranscripts(t *testing.T) {
	checkGoroutines(t)
	tests := []struct {
		file         string
		wantText     string
		wantFinish   string
		wantUsage    *rag.Usage
		wantErr      error // from Recv, after wantText
		wantInErr    string
		wantRequests int
	}{
		{file: "vllm.sse", wantText: answer, wantFinish: "stop", wantUsage: &rag.Usage{PromptTokens: 412, CompletionTokens: 11}},
		{file: "vllm_no_usage.sse", wantText: answer, wantFinish: "stop"},
		{file: "ollama.sse", wantText: answer, wantFinish: "stop", wantUsage: &rag.Usage{PromptTokens: 398, CompletionTokens: 11}},
		{file: "llamacpp.sse", wantText: answer, wantFinish: "stop", wantUsage: &rag.Usage{PromptTokens: 405, CompletionTokens: 11}},
		{file: "llamacpp_timings_only.sse", wantText: answer, wantFinish: "stop", wantUsage: &rag.Usage{PromptTokens: 405, CompletionTokens: 11}},
		{file: "openai.sse", wantText: answer, wantFinish: "length", wantUsage: &rag.Usage{PromptTokens: 377, CompletionTokens: 11}},
		{file: "vllm_error.sse", wantText: "Paged attention splits the", wantErr: rag.ErrUnavailable, wantInErr: "EngineDeadError"},
		{file: "vllm_legacy_error.sse", wantText: "Paged attention splits the", wantErr: rag.ErrUnavailable, wantInErr: "EngineDeadError"},
		{file: "ollama_error.sse", wantText: "Paged attention splits the KV cache", wantErr: rag.ErrUnavailable, wantInErr: "unexpected EOF"},
		{file: "llamacpp_error.sse", wantText: "Paged attention splits", wantErr: rag.ErrUnavailable, wantInErr: "KV size"},
		{file: "truncated.sse", wantText: "Paged attention splits the KV", wantErr: rag.ErrUnavailable, wantInErr: "without a finish reason"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			srv := newLLMServer(t, replay(transcript(t, tt.file)))
			c := newClient(t, srv.URL+"/v1")
			s, err := c.Generate(context.Background(), genRequest())
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			deltas, err := drain(s)
			if got := text(deltas); got != tt.wantText {
				t.Errorf("text %q, want %q", got, tt.wantText)
			}
			for _, d := range deltas {
				if d.Text != "" && d.Tokens != 1 {
					t.Errorf("delta %q counts %d tokens, want 1 per chunk", d.Text, d.Tokens)
				}
			}
			if srv.count() != 1 {
				t.Errorf("%d requests, want 1: nothing is retried after the first token", srv.count())
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantInErr) {
					t.Errorf("Recv error %v, want %v mentioning %q", err, tt.wantErr, tt.wantInErr)
				}
				if _, again := s.Recv(); again == nil {
					t.Error("Recv after the error returned a delta")
				}
				return
			}
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			last := deltas[len(deltas)-1]
			if last.FinishReason != tt.wantFinish {
				t.Errorf("last delta finish %q, want %q", last.FinishReason, tt.wantFinish)
			}
			if (last.Usage == nil) != (tt.wantUsage == nil) || (last.Usage != nil && *last.Usage != *tt.wantUsage) {
				t.Errorf("last delta usage %+v, want %+v", last.Usage, tt.wantUsage)
			}
			for _, d := range deltas[:len(deltas)-1] {
				if d.FinishReason != "" || d.Usage != nil {
					t.Errorf("delta %+v before the last carries a finish or usage", d)
				}
			}
		})
	}
}

// TestRequestBody checks what is sent: the OpenAI request with streaming usage asked for, the
// output budget, the API key only when given.
func TestRequestBody(t *testing.T) {
	checkGoroutines(t)
	tests := []struct {
		name          string
		opts          []llm.Option
		wantBudgetKey string
		wantUsageOpt  bool
		wantAuth      string
	}{
		{name: "defaults", wantBudgetKey: "max_tokens", wantUsageOpt: true},
		{name: "reasoning model", opts: []llm.Option{llm.WithMaxCompletionTokens(), llm.WithAPIKey("sk-test")}, wantBudgetKey: "max_completion_tokens", wantUsageOpt: true, wantAuth: "Bearer sk-test"},
		{name: "old server", opts: []llm.Option{llm.WithoutUsageOption()}, wantBudgetKey: "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newLLMServer(t, replay(transcript(t, "vllm.sse")))
			c := newClient(t, srv.URL, tt.opts...) // a server root: /v1 is added
			s, err := c.Generate(context.Background(), genRequest())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := drain(s); err != nil {
				t.Fatal(err)
			}
			req := srv.request(0)
			body := req.body
			if body["model"] != "m" || body["stream"] != true || body[tt.wantBudgetKey] != float64(64) || body["temperature"] != 0.7 {
				t.Errorf("body %v: want model m, stream, %s 64, temperature 0.7", body, tt.wantBudgetKey)
			}
			msgs, _ := body["messages"].([]any)
			if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" || msgs[1].(map[string]any)["content"] != "What is paged attention?" {
				t.Errorf("messages %v", msgs)
			}
			_, hasUsageOpt := body["stream_options"]
			if hasUsageOpt != tt.wantUsageOpt {
				t.Errorf("stream_options sent: %v, want %v", hasUsageOpt, tt.wantUsageOpt)
			}
			if got := req.header.Get("Authorization"); got != tt.wantAuth {
				t.Errorf("Authorization %q, want %q", got, tt.wantAuth)
			}
		})
	}
}

// TestPriorityForwarded: a request's scheduling priority reaches the server as vLLM's
// "priority" body field, and the default 0 is not sent (servers without the extension see the
// plain OpenAI body).
func TestPriorityForwarded(t *testing.T) {
	checkGoroutines(t)
	for _, prio := range []int{0, -3, 7} {
		srv := newLLMServer(t, replay(transcript(t, "vllm.sse")))
		c := newClient(t, srv.URL)
		req := genRequest()
		req.Priority = prio
		s, err := c.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := drain(s); err != nil {
			t.Fatal(err)
		}
		got, sent := srv.request(0).body["priority"]
		switch {
		case prio == 0 && sent:
			t.Errorf("priority 0: body has priority %v, want none", got)
		case prio != 0 && got != float64(prio):
			t.Errorf("priority %d: body has priority %v (sent %v)", prio, got, sent)
		}
	}
}

// TestErrorStatuses: error answers that are not event streams, as servers and proxies send
// them, become errors a user can read, and only the transient ones are retried.
func TestErrorStatuses(t *testing.T) {
	checkGoroutines(t)
	tests := []struct {
		name         string
		answer       http.HandlerFunc
		wantErr      error
		wantInErr    string
		wantRequests int
	}{
		{name: "proxy html 502", answer: status(502, "<html><body><h1>502 Bad Gateway</h1>\n<hr>nginx</body></html>", "Content-Type", "text/html"),
			wantErr: rag.ErrUnavailable, wantInErr: "502 Bad Gateway nginx", wantRequests: 2},
		{name: "vllm unknown model", answer: status(404, `{"error":{"object":"error","message":"The model `+"`m`"+` does not exist.","type":"NotFoundError","param":null,"code":404}}`),
			wantErr: rag.ErrUnknownModel, wantInErr: "does not exist", wantRequests: 1},
		{name: "ollama unknown model", answer: status(404, `{"error":{"message":"model \"m\" not found, try pulling it first","type":"api_error","param":null,"code":null}}`),
			wantErr: rag.ErrUnknownModel, wantInErr: "try pulling it", wantRequests: 1},
		{name: "wrong path", answer: status(404, "404 page not found"), wantErr: rag.ErrUnavailable, wantInErr: "/v1", wantRequests: 1},
		{name: "vllm context too long", answer: status(400, `{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.","type":"BadRequestError","param":null,"code":400}`),
			wantErr: rag.ErrInvalidRequest, wantInErr: "maximum context length", wantRequests: 1},
		{name: "bad api key", answer: status(401, `{"error":{"message":"Incorrect API key provided: sk-...","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`),
			wantErr: rag.ErrUnavailable, wantInErr: "check the API key", wantRequests: 1},
		{name: "fastapi 500", answer: status(500, `{"detail":"Internal Server Error"}`), wantErr: rag.ErrUnavailable, wantInErr: "Internal Server Error", wantRequests: 2},
		{name: "ollama plain error", answer: status(503, `{"error":"server busy, please try again.  maximum pending requests exceeded"}`),
			wantErr: rag.ErrUnavailable, wantInErr: "maximum pending requests", wantRequests: 2},
		{name: "gateway timeout", answer: status(504, ""), wantErr: rag.ErrTimeout, wantInErr: "504", wantRequests: 2},
		{name: "retry-after past the deadline", answer: status(429, `{"error":{"message":"Rate limit reached"}}`, "Retry-After", "30"),
			wantErr: rag.ErrUnavailable, wantInErr: "Rate limit reached", wantRequests: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newLLMServer(t, tt.answer)
			c := newClient(t, srv.URL+"/v1", llm.WithFirstTokenTimeout(2*time.Second))
			_, err := c.Generate(context.Background(), genRequest())
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("Generate: %v; want %v mentioning %q", err, tt.wantErr, tt.wantInErr)
			}
			var se *llm.StatusError
			if !errors.As(err, &se) {
				t.Errorf("%v is not a *llm.StatusError", err)
			}
			if srv.count() != tt.wantRequests {
				t.Errorf("%d requests, want %d", srv.count(), tt.wantRequests)
			}
			if st := c.Stats(); st.Failures != 1 || st.Retries != uint64(tt.wantRequests-1) {
				t.Errorf("stats %+v, want 1 failure and %d retries", st, tt.wantRequests-1)
			}
		})
	}
}

// TestRetryOnlyBeforeTheFirstToken: a failure before the first token is retried once and the
// caller never sees it; a failure after it is the caller's error, never a repeated answer.
func TestRetryOnlyBeforeTheFirstToken(t *testing.T) {
	checkGoroutines(t)
	vllm := transcript(t, "vllm.sse")
	tests := []struct {
		name         string
		first        http.HandlerFunc
		wantErr      bool
		wantText     string
		wantRequests int
	}{
		{name: "overloaded, then fine", first: status(503, `{"error":"overloaded"}`), wantText: answer, wantRequests: 2},
		{name: "rate limited, then fine", first: status(429, `{"error":{"message":"slow down"}}`), wantText: answer, wantRequests: 2},
		{name: "dies after the role chunk, then fine", first: die(vllm, 1), wantText: answer, wantRequests: 2},
		{name: "error event before the first token, then fine", first: replay(transcript(t, "vllm_error_before_first_token.sse")), wantText: answer, wantRequests: 2},
		{name: "dies after two tokens", first: die(vllm, 3), wantErr: true, wantText: "Paged attention", wantRequests: 1},
		{name: "bad request", first: status(400, `{"error":{"message":"bad"}}`), wantErr: true, wantRequests: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newLLMServer(t, tt.first, replay(vllm))
			c := newClient(t, srv.URL+"/v1")
			var deltas []rag.Delta
			s, err := c.Generate(context.Background(), genRequest())
			if err == nil {
				deltas, err = drain(s)
			}
			if (err != nil) != tt.wantErr || text(deltas) != tt.wantText {
				t.Errorf("got %q, %v; want %q and error %v", text(deltas), err, tt.wantText, tt.wantErr)
			}
			if srv.count() != tt.wantRequests {
				t.Errorf("%d requests, want %d", srv.count(), tt.wantRequests)
			}
		})
	}
}

// TestLLMDown: nothing listens at the URL; Generate fails with rag.ErrUnavailable after its one
// retry.
func TestLLMDown(t *testing.T) {
	checkGoroutines(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	c := newClient(t, "http://"+addr+"/v1", llm.WithConnectTimeout(time.Second))
	_, err = c.Generate(context.Background(), genRequest())
	if !errors.Is(err, rag.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("Generate: %v; want rag.ErrUnavailable naming %s", err, addr)
	}
	if st := c.Stats(); st.Requests != 2 || st.Retries != 1 || st.Failures != 1 {
		t.Errorf("stats %+v: want two attempts and one failure", st)
	}
	if _, err := c.FetchModels(context.Background()); err != nil {
		t.Errorf("FetchModels with WithModels set must not call the server: %v", err)
	}
}

// TestStalls: a server that accepts the request and then says nothing is cut off by the
// first-token timeout, one that stops between tokens by the idle timeout; either way the
// server's handler sees the client leave.
func TestStalls(t *testing.T) {
	checkGoroutines(t)
	vllm := transcript(t, "vllm.sse")
	tests := []struct {
		name       string
		answer     http.HandlerFunc
		wantGenErr bool
		wantText   string
		wantInErr  string
		wantStats  func(llm.Stats) bool
	}{
		{name: "before the first token", answer: stall(vllm, 1), wantGenErr: true, wantInErr: "no token",
			wantStats: func(s llm.Stats) bool { return s.FirstTokenTimeouts == 1 && s.Requests == 1 }},
		{name: "between tokens", answer: stall(vllm, 3), wantText: "Paged attention", wantInErr: "silent",
			wantStats: func(s llm.Stats) bool { return s.IdleTimeouts == 1 && s.Requests == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newLLMServer(t, tt.answer)
			c := newClient(t, srv.URL+"/v1", llm.WithFirstTokenTimeout(100*time.Millisecond), llm.WithIdleTimeout(100*time.Millisecond))
			var deltas []rag.Delta
			s, err := c.Generate(context.Background(), genRequest())
			if (err != nil) != tt.wantGenErr {
				t.Fatalf("Generate: %v, want error %v", err, tt.wantGenErr)
			}
			if err == nil {
				deltas, err = drain(s)
			}
			if !errors.Is(err, rag.ErrTimeout) || !strings.Contains(err.Error(), tt.wantInErr) || text(deltas) != tt.wantText {
				t.Errorf("got %q, %v; want %q then rag.ErrTimeout mentioning %q", text(deltas), err, tt.wantText, tt.wantInErr)
			}
			if !tt.wantStats(c.Stats()) {
				t.Errorf("stats %+v", c.Stats())
			}
			srv.waitHandlers(t, 1)
		})
	}
}

// TestDiesMidStream: the server drops the connection after some tokens; Recv fails with
// rag.ErrUnavailable and nothing is retried.
func TestDiesMidStream(t *testing.T) {
	checkGoroutines(t)
	srv := newLLMServer(t, die(transcript(t, "vllm.sse"), 4))
	c := newClient(t, srv.URL+"/v1")
	s, err := c.Generate(context.Background(), genRequest())
	if err != nil {
		t.Fatal(err)
	}
	deltas, err := drain(s)
	if !errors.Is(err, rag.ErrUnavailable) || !strings.Contains(err.Error(), "after 3 tokens") || text(deltas) != "Paged attention splits" {
		t.Errorf("got %q, %v; want three tokens, then rag.ErrUnavailable", text(deltas), err)
	}
	if st := c.Stats(); st.Requests != 1 || st.Failures != 1 {
		t.Errorf("stats %+v, want one request, one failure", st)
	}
}

// TestCancelAndClose: the caller cancelling or closing the stream closes the request; the
// server sees it at once.
func TestCancelAndClose(t *testing.T) {
	checkGoroutines(t)
	tests := []struct {
		name    string
		stop    func(cancel context.CancelFunc, s rag.TokenStream)
		wantErr error
	}{
		{name: "cancel", stop: func(cancel context.CancelFunc, _ rag.TokenStream) { cancel() }, wantErr: context.Canceled},
		{name: "close", stop: func(_ context.CancelFunc, s rag.TokenStream) { _ = s.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newLLMServer(t, stall(transcript(t, "vllm.sse"), 4))
			c := newClient(t, srv.URL+"/v1")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := c.Generate(ctx, genRequest())
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, err := s.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			tt.stop(cancel, s)
			srv.waitHandlers(t, 1)
			_, err = s.Recv()
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("Recv after %s: %v, want an error matching %v", tt.name, err, tt.wantErr)
			}
			_ = s.Close()
		})
	}
}

// TestTraceContext: the caller's trace context reaches the server, with a propagator alone or
// through otelhttp's client span.
func TestTraceContext(t *testing.T) {
	checkGoroutines(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tests := []struct {
		name          string
		opts          []llm.Option
		wantHTTPSpans bool
	}{
		{name: "propagator", opts: []llm.Option{llm.WithPropagator(propagation.TraceContext{})}},
		{name: "otelhttp", opts: []llm.Option{llm.WithPropagator(propagation.TraceContext{}), llm.WithTracerProvider(tp)}, wantHTTPSpans: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec.Reset()
			srv := newLLMServer(t, replay(transcript(t, "vllm.sse")))
			c := newClient(t, srv.URL+"/v1", tt.opts...)
			ctx, span := tp.Tracer("test").Start(context.Background(), "chat m")
			s, err := c.Generate(ctx, genRequest())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := drain(s); err != nil {
				t.Fatal(err)
			}
			span.End()
			got := srv.request(0).header.Get("Traceparent")
			if !strings.Contains(got, span.SpanContext().TraceID().String()) {
				t.Errorf("traceparent %q, want trace %s", got, span.SpanContext().TraceID())
			}
			var httpSpans int
			for _, s := range rec.Ended() {
				if s.SpanKind() == trace.SpanKindClient && s.Parent().SpanID() == span.SpanContext().SpanID() {
					httpSpans++
				}
			}
			if (httpSpans > 0) != tt.wantHTTPSpans {
				t.Errorf("%d HTTP client spans under the caller's span, want some: %v", httpSpans, tt.wantHTTPSpans)
			}
		})
	}
}

func TestModels(t *testing.T) {
	checkGoroutines(t)
	srv := newLLMServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"llama3.1:8b","object":"model","created":1736000000,"owned_by":"library"},{"id":"qwen2.5:7b","object":"model","created":1736000000,"owned_by":"library"}]}`)
	})
	c, err := llm.New(srv.URL + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Models() != nil {
		t.Errorf("Models() before FetchModels = %v, want none", c.Models())
	}
	models, err := c.FetchModels(context.Background())
	if err != nil || strings.Join(models, ",") != "llama3.1:8b,qwen2.5:7b" || strings.Join(c.Models(), ",") != "llama3.1:8b,qwen2.5:7b" {
		t.Fatalf("FetchModels = %v, %v; Models() = %v", models, err, c.Models())
	}
	req := genRequest()
	req.Model = "gpt-4o"
	if _, err := c.Generate(context.Background(), req); !errors.Is(err, rag.ErrUnknownModel) || srv.count() != 1 {
		t.Errorf("Generate for an unknown model: %v after %d requests; want rag.ErrUnknownModel without a request", err, srv.count())
	}
	srv.Close()
	if _, err := c.FetchModels(context.Background()); !errors.Is(err, rag.ErrUnavailable) {
		t.Errorf("FetchModels from a stopped server: %v, want rag.ErrUnavailable", err)
	}
}

// TestWithoutStreaming: a whole completion is asked for and handed over as one delta.
func TestWithoutStreaming(t *testing.T) {
	checkGoroutines(t)
	srv := newLLMServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1736000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":11,"total_tokens":41}}`, answer)
	})
	c := newClient(t, srv.URL+"/v1", llm.WithoutStreaming())
	s, err := c.Generate(context.Background(), genRequest())
	if err != nil {
		t.Fatal(err)
	}
	deltas, err := drain(s)
	if err != nil || len(deltas) != 1 {
		t.Fatalf("deltas %+v, %v; want one", deltas, err)
	}
	d := deltas[0]
	if d.Text != answer || d.FinishReason != "stop" || d.Usage == nil || *d.Usage != (rag.Usage{PromptTokens: 30, CompletionTokens: 11}) || d.Tokens != 11 {
		t.Errorf("delta %+v", d)
	}
	if srv.request(0).body["stream"] == true {
		t.Error("stream requested without streaming")
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		url  string
		opts []llm.Option
	}{
		{name: "no scheme", url: "localhost:8000/v1"},
		{name: "ftp", url: "ftp://host/v1"},
		{name: "zero first-token timeout", url: "http://h/v1", opts: []llm.Option{llm.WithFirstTokenTimeout(0)}},
		{name: "negative retries", url: "http://h/v1", opts: []llm.Option{llm.WithRetries(-1)}},
		{name: "blank model", url: "http://h/v1", opts: []llm.Option{llm.WithModels(" ")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := llm.New(tt.url, tt.opts...); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Errorf("New: %v, want rag.ErrInvalidRequest", err)
			}
		})
	}
}

func TestBaseURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://localhost:8000", "http://localhost:8000/v1/"},
		{"http://localhost:8000/v1", "http://localhost:8000/v1/"},
		{"http://localhost:11434/v1/", "http://localhost:11434/v1/"},
		{"https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1/"},
		{"http://localhost:8080/v1/chat/completions", "http://localhost:8080/v1/"},
	}
	for _, tt := range tests {
		c, err := llm.New(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if c.BaseURL() != tt.want {
			t.Errorf("New(%q).BaseURL() = %q, want %q", tt.in, c.BaseURL(), tt.want)
		}
	}
}

// FuzzStream: whatever bytes a server streams back, Generate and Recv end (with deltas, EOF
// or an error matching a rag sentinel) without panicking.
func FuzzStream(f *testing.F) {
	for _, name := range []string{"vllm.sse", "ollama.sse", "llamacpp.sse", "openai.sse", "llamacpp_error.sse", "vllm_legacy_error.sse", "truncated.sse"} {
		f.Add(transcript(f, name))
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\nerror: oops\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		c := memoryClient(t, body, llm.WithRetries(0))
		s, err := c.Generate(context.Background(), genRequest())
		if err == nil {
			_, err = drain(s)
		}
		if err != nil && !errors.Is(err, rag.ErrUnavailable) && !errors.Is(err, rag.ErrTimeout) && !errors.Is(err, rag.ErrInvalidRequest) {
			t.Errorf("error %v matches no rag sentinel", err)
		}
	})
}

func BenchmarkStream(b *testing.B) {
	c := memoryClient(b, transcript(b, "vllm.sse"))
	b.ReportAllocs()
	for b.Loop() {
		s, err := c.Generate(context.Background(), genRequest())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := drain(s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParallelToolCallsSent: a request that allows parallel tool calls says so on the wire.
func TestParallelToolCallsSent(t *testing.T) {
	checkGoroutines(t)
	srv := newLLMServer(t, replay(transcript(t, "vllm_tool_calls.sse")))
	c := newClient(t, srv.URL)
	req := genRequest()
	req.Tools = []rag.Tool{{Name: "search"}}
	req.ParallelToolCalls = true
	s, err := c.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drain(s); err != nil {
		t.Fatal(err)
	}
	if v := srv.request(0).body["parallel_tool_calls"]; v != true {
		t.Errorf("parallel_tool_calls %v, want true", v)
	}
}

// TestToolCalls: a request with tools, an assistant message calling one and the tool's answer
// reaches the server in OpenAI's form, and a streamed tool call (vLLM's pieces) comes back as
// deltas whose pieces assemble into the call, with finish reason tool_calls and the usage.
func TestToolCalls(t *testing.T) {
	checkGoroutines(t)
	srv := newLLMServer(t, replay(transcript(t, "vllm_tool_calls.sse")))
	c := newClient(t, srv.URL)
	req := genRequest()
	req.Tools = []rag.Tool{{Name: "search", Description: "Search the corpus.", Parameters: `{"type":"object","properties":{"query":{"type":"string"}}}`}}
	req.ToolChoice = "auto"
	req.Messages = append(req.Messages,
		rag.Message{Role: "assistant", ToolCalls: []rag.ToolCall{{ID: "call_0", Name: "search", Arguments: `{"query":"blocks"}`}}},
		rag.Message{Role: "tool", ToolCallID: "call_0", Content: "[1] Blocks of 16 tokens."})
	s, err := c.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	deltas, err := drain(s)
	if err != nil {
		t.Fatal(err)
	}
	var calls []rag.ToolCall
	for _, d := range deltas {
		calls = rag.AppendToolCalls(calls, d.ToolCalls)
	}
	last := deltas[len(deltas)-1]
	if want := []rag.ToolCall{{ID: "chatcmpl-tool-4f2a", Name: "search", Arguments: `{"query": "paged attention KV cache"}`}}; !reflect.DeepEqual(calls, want) {
		t.Errorf("tool calls %+v, want %+v", calls, want)
	}
	if last.FinishReason != "tool_calls" || last.Usage == nil || last.Usage.CompletionTokens != 9 || last.Usage.CachedTokens != 16 {
		t.Errorf("last delta %+v", last)
	}

	body := srv.request(0).body
	tools, _ := body["tools"].([]any)
	if len(tools) != 1 || body["tool_choice"] != "auto" {
		t.Fatalf("tools %v, tool_choice %v", body["tools"], body["tool_choice"])
	}
	if _, ok := body["parallel_tool_calls"]; ok {
		t.Errorf("parallel_tool_calls %v sent unasked: the server's default applies", body["parallel_tool_calls"])
	}
	fn := tools[0].(map[string]any)["function"].(map[string]any)
	if fn["name"] != "search" || fn["parameters"].(map[string]any)["type"] != "object" {
		t.Errorf("tool %v", tools[0])
	}
	msgs := body["messages"].([]any)
	call := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	if call["id"] != "call_0" || call["type"] != "function" || call["function"].(map[string]any)["arguments"] != `{"query":"blocks"}` {
		t.Errorf("assistant tool call %v", call)
	}
	if tool := msgs[3].(map[string]any); tool["role"] != "tool" || tool["tool_call_id"] != "call_0" || tool["content"] != "[1] Blocks of 16 tokens." {
		t.Errorf("tool message %v", tool)
	}
}
