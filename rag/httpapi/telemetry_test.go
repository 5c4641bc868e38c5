package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	wire "github.com/ragtail/ragtail/rag/openai"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// tracedService is the API on real backends with 4 shards, traced into a span recorder.
type tracedService struct {
	srv   *httptest.Server
	spans *tracetest.SpanRecorder
	model string
}

// lookups adapts the doc store to pipeline.CacheReporter, as cmd/ragtail does.
type lookups struct{ *docstore.Store }

func (l lookups) LookupResult(ctx context.Context, id string) (rag.Chunk, rag.CacheResult, error) {
	return l.Lookup(ctx, id)
}

func newTracedService(tb testing.TB, capture bool) *tracedService {
	tb.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())), sdktrace.WithSpanProcessor(sr))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	be := newTestBackends(tb, 4)
	p, err := pipeline.New(be.emb, be.idx, lookups{be.docs}, be.engine, pipeline.Config{TopK: 3}, pipeline.WithAdmitter(be.pool),
		pipeline.WithTracerProvider(tp), pipeline.WithContentCapture(capture))
	if err != nil {
		tb.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(httpapi.New(p, httpapi.WithDocuments(be.docs), httpapi.WithLogger(quiet), httpapi.WithTracerProvider(tp)))
	tb.Cleanup(srv.Close)
	return &tracedService{srv: srv, spans: sr, model: be.model}
}

// serverSpan waits for the HTTP server span of trace id to end (it ends after the handler
// returns, which can be just after the client has read the last byte) and returns the spans
// of that trace.
func (s *tracedService) trace(tb testing.TB, id string) []sdktrace.ReadOnlySpan {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var spans []sdktrace.ReadOnlySpan
		root := false
		for _, sp := range s.spans.Ended() {
			if sp.SpanContext().TraceID().String() != id {
				continue
			}
			spans = append(spans, sp)
			root = root || sp.SpanKind() == trace.SpanKindServer
		}
		if root {
			return spans
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the server span of trace %s did not end within 5 s", id)
		}
		time.Sleep(time.Millisecond)
	}
}

func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// serverTimings parses a Server-Timing value into stage -> milliseconds.
func serverTimings(tb testing.TB, h string) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for entry := range strings.SplitSeq(h, ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(entry), ";dur=")
		if !ok {
			tb.Fatalf("Server-Timing entry %q", entry)
		}
		v, err := strconv.ParseFloat(dur, 64)
		if err != nil {
			tb.Fatalf("Server-Timing entry %q: %v", entry, err)
		}
		out[name] = v
	}
	return out
}

func TestStreamedRequestIsTracedStageByStage(t *testing.T) {
	t.Parallel()
	const question = "Why does the slowest shard set the pace?"
	for _, capture := range []bool{false, true} {
		t.Run("capture="+strconv.FormatBool(capture), func(t *testing.T) {
			t.Parallel()
			s := newTracedService(t, capture)
			const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			resp := post(t, s.srv.URL+"/v1/chat/completions",
				`{"model":"`+s.model+`","stream":true,"max_tokens":5,"temperature":0.3,
				  "messages":[{"role":"user","content":"`+question+`"}]}`, "traceparent", parent, "X-User-ID", "user-7")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			var answer strings.Builder
			for _, ev := range readSSE(t, resp.Body) {
				var c wire.ChatChunk
				if ev.data != "[DONE]" && json.Unmarshal([]byte(ev.data), &c) == nil && len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil {
					answer.WriteString(*c.Choices[0].Delta.Content)
				}
			}
			tp, ok := httpapi.ParseTraceParent(resp.Header.Get("traceparent"))
			if !ok || tp.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Fatalf("traceparent %q: want the caller's trace", resp.Header.Get("traceparent"))
			}
			spans := s.trace(t, tp.TraceID)

			get := func(name string) []sdktrace.ReadOnlySpan {
				var out []sdktrace.ReadOnlySpan
				for _, sp := range spans {
					if sp.Name() == name {
						out = append(out, sp)
					}
				}
				return out
			}
			one := func(name string) sdktrace.ReadOnlySpan {
				t.Helper()
				got := get(name)
				if len(got) != 1 {
					t.Fatalf("%d spans named %q, want 1", len(got), name)
				}
				return got[0]
			}
			server := one("POST /v1/chat/completions")
			if server.SpanKind() != trace.SpanKindServer || server.Parent().SpanID().String() != "00f067aa0ba902b7" || !server.Parent().IsRemote() {
				t.Errorf("server span kind %v parent %v: want a server span under the caller's span", server.SpanKind(), server.Parent())
			}
			if server.SpanContext().SpanID().String() != tp.SpanID {
				t.Errorf("traceparent span id %s, server span %s: the response must name the server span", tp.SpanID, server.SpanContext().SpanID())
			}
			if v, _ := attrOf(server, "http.route"); v.AsString() != "/v1/chat/completions" {
				t.Errorf("server span http.route = %q", v.AsString())
			}
			root := one(rag.SpanPipeline)
			if root.Parent().SpanID() != server.SpanContext().SpanID() {
				t.Error("rag.pipeline is not a child of the server span")
			}
			if v, _ := attrOf(root, rag.AttrUserID); v.AsString() != "user-7" {
				t.Errorf("rag.user.id = %q, want the X-User-ID header", v.AsString())
			}
			if v, _ := attrOf(root, rag.AttrRequestID); v.AsString() != resp.Header.Get("X-Request-ID") {
				t.Errorf("rag.request.id = %q, X-Request-ID %q", v.AsString(), resp.Header.Get("X-Request-ID"))
			}
			if v, _ := attrOf(root, rag.AttrChunkIDs); len(v.AsStringSlice()) != 3 {
				t.Errorf("rag.chunk.ids = %v, want 3 ids", v.AsStringSlice())
			}
			timings := serverTimings(t, resp.Trailer.Get("Server-Timing"))
			for stage, name := range map[string]string{
				"admission": rag.SpanAdmission, "embed": "embeddings ragtail-hash-384", "retrieve": "retrieval " + retrieve.DefaultCollection,
				"fetch": rag.SpanFetch, "generate": "chat " + s.model, "stream": rag.SpanStream,
			} {
				sp := one(name)
				if sp.Parent().SpanID() != root.SpanContext().SpanID() {
					t.Errorf("%s is not a child of rag.pipeline", name)
				}
				if stage == "stream" {
					continue // its span runs from first to last write; Server-Timing counts the writing only
				}
				// Server-Timing rounds to the microsecond: within half of it, and float64's error
				// on a duration of exactly half a microsecond more (276,500 ns is 0.277 ms).
				if got := float64(sp.EndTime().Sub(sp.StartTime())) / 1e6; math.Abs(got-timings[stage]) > 0.0005+1e-9 {
					t.Errorf("%s span %.4f ms, Server-Timing %s %.3f ms", name, got, stage, timings[stage])
				}
			}
			queries := get("Query " + retrieve.DefaultCollection)
			if len(queries) != 4 {
				t.Errorf("%d db spans, want one per shard (4)", len(queries))
			}
			for _, q := range queries {
				if v, _ := attrOf(q, "db.system.name"); v.AsString() != "ragtail.memory" {
					t.Errorf("db.system.name = %q", v.AsString())
				}
			}
			fetch := one(rag.SpanFetch)
			hits, _ := attrOf(fetch, rag.AttrCacheHits)
			misses, _ := attrOf(fetch, rag.AttrCacheMisses)
			if hits.AsInt64()+misses.AsInt64() != 3 {
				t.Errorf("fetch cache hits %d + misses %d, want 3 lookups", hits.AsInt64(), misses.AsInt64())
			}
			chat := one("chat " + s.model)
			for _, kv := range []attribute.KeyValue{
				attribute.String("gen_ai.operation.name", "chat"),
				attribute.String("gen_ai.request.model", s.model),
				attribute.Int("gen_ai.request.max_tokens", 5),
				attribute.Float64("gen_ai.request.temperature", 0.3),
				attribute.Int("gen_ai.usage.output_tokens", 5),
				attribute.StringSlice("gen_ai.response.finish_reasons", []string{"length"}),
			} {
				if v, ok := attrOf(chat, kv.Key); !ok || v != kv.Value {
					t.Errorf("chat %s = %v, want %v", kv.Key, v.String(), kv.Value.String())
				}
			}
			for _, sp := range spans {
				if _, ok := attrOf(sp, rag.AttrStage); !ok {
					t.Errorf("span %q has no rag.stage", sp.Name())
				}
			}

			// Prompt and answer text: nowhere unless capture is on.
			secrets := map[string]string{"question": "slowest shard set the pace", "answer": strings.TrimSpace(answer.String())}
			for _, c := range testChunks {
				secrets["chunk "+c.ID] = c.Text
			}
			leaked := map[string]bool{}
			for _, sp := range spans {
				for _, kv := range sp.Attributes() {
					for what, text := range secrets {
						if text != "" && strings.Contains(kv.Value.String(), text) {
							leaked[what] = true
						}
					}
				}
			}
			if !capture && len(leaked) > 0 {
				t.Errorf("content leaked into span attributes without capture: %v", leaked)
			}
			if capture && (!leaked["question"] || !leaked["answer"]) {
				t.Errorf("with capture on, want the question and the answer on spans; found %v", leaked)
			}
		})
	}
}

func TestClockHeader(t *testing.T) {
	t.Parallel()
	fixed := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	s := newTestService(t, httpapi.WithClock(func() time.Time { return fixed }))
	want := strconv.FormatInt(fixed.UnixNano(), 10)
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"stream", http.MethodPost, "/v1/chat/completions", `{"model":"` + s.model + `","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, http.StatusOK},
		{"bad request", http.MethodPost, "/v1/chat/completions", `{`, http.StatusBadRequest},
		{"models", http.MethodGet, "/v1/models", "", http.StatusOK},
		{"no route", http.MethodGet, "/nope", "", http.StatusNotFound},
		{"health", http.MethodGet, "/healthz", "", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, s.srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := resp.Header.Get(httpapi.ClockHeader); got != want {
				t.Errorf("%s = %q, want the service clock's %s", httpapi.ClockHeader, got, want)
			}
			if resp.Header.Get("traceparent") == "" {
				t.Error("no traceparent")
			}
		})
	}
}

func TestAdminMountsTelemetryHandlers(t *testing.T) {
	t.Parallel()
	echo := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, name+" "+r.URL.Path)
		})
	}
	admin := httptest.NewServer(httpapi.NewAdmin(prometheus.NewRegistry(),
		httpapi.WithTraces(echo("traces")), httpapi.WithProfiles(echo("profiles")), httpapi.WithPprof(echo("pprof"))))
	defer admin.Close()
	plain := httptest.NewServer(httpapi.NewAdmin(prometheus.NewRegistry()))
	defer plain.Close()
	tests := []struct {
		name, url, want string
		status          int
	}{
		{"traces", admin.URL + "/debug/traces?slowest=5", "traces /debug/traces", 200},
		{"profiles", admin.URL + "/debug/profiles", "profiles /debug/profiles", 200},
		{"pprof profile", admin.URL + "/debug/pprof/profile", "pprof /debug/pprof/profile", 200},
		{"pprof index", admin.URL + "/debug/pprof/", "pprof /debug/pprof/", 200},
		{"metrics", admin.URL + "/metrics", "", 200},
		{"no traces handler", plain.URL + "/debug/traces", "", 404},
		{"default pprof", plain.URL + "/debug/pprof/", "Types of profiles available", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
				t.Errorf("GET %s: %d %q, want %d containing %q", tt.url, resp.StatusCode, b, tt.status, tt.want)
			}
		})
	}
}

func TestTraceFromContext(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("test").Start(context.Background(), "s")
	defer span.End()
	tc, ok := httpapi.TraceFromContext(ctx)
	if !ok || tc.TraceID != span.SpanContext().TraceID().String() || tc.SpanID != span.SpanContext().SpanID().String() || !tc.Sampled {
		t.Errorf("TraceFromContext = %+v, %v", tc, ok)
	}
	if parsed, ok := httpapi.ParseTraceParent(tc.Header()); !ok || parsed != tc {
		t.Errorf("Header %q does not parse back", tc.Header())
	}
	if _, ok := httpapi.TraceFromContext(context.Background()); ok {
		t.Error("TraceFromContext found a trace in an empty context")
	}
}
