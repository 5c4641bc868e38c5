package telemetry_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/telemetry"
	"github.com/ragtail/ragtail/telemetry/profile"
)

// stack is the RAG service on the embedded backends, wired to telemetry the way cmd/ragtail
// wires it: API and admin listeners on httptest servers.
type stack struct {
	tel       *telemetry.Telemetry
	pipeline  *pipeline.Pipeline
	api       *httptest.Server
	admin     *httptest.Server
	model     string
	questions []string
}

type stackOptions struct {
	embedLatency latency.Law
	embedder     func(*embed.Hash) pipeline.Embedder // wraps the hash embedder, if set
	profiler     *profile.Profiler
	shards       int
}

// lookups adapts the doc store to pipeline.CacheReporter, as cmd/ragtail does.
type lookups struct{ *docstore.Store }

func (l lookups) LookupResult(ctx context.Context, id string) (rag.Chunk, rag.CacheResult, error) {
	return l.Lookup(ctx, id)
}

func newStack(tb testing.TB, cfg telemetry.Config, o stackOptions) *stack {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tel, err := telemetry.Setup(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	})
	if o.shards == 0 {
		o.shards = 4
	}
	chunks := corpus.Builtin(corpus.Options{Seed: 1, Docs: 30})
	hash, err := embed.NewHash(embed.WithLatency(o.embedLatency, 0), embed.WithSeed(1))
	if err != nil {
		tb.Fatal(err)
	}
	idx, err := retrieve.NewMemory(hash.Dimension(), o.shards, retrieve.WithSeed(1))
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range chunks {
		if err := idx.Add(c.ID, hash.Vector(c.Title+"\n"+c.Text)); err != nil {
			tb.Fatal(err)
		}
	}
	docs := docstore.New(chunks, docstore.WithSeed(1), docstore.WithFetchLatency(latency.Law{}))
	tb.Cleanup(func() { _ = docs.Close() })
	prof, err := llmsim.ProfileByName("tiny")
	if err != nil {
		tb.Fatal(err)
	}
	engine, err := llmsim.New(prof)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = engine.Close() })
	if err := tel.Registry.Register(engine.Collector()); err != nil {
		tb.Fatal(err)
	}
	pool, err := admission.NewPool(admission.DefaultConfig(), admission.WithClock(tel.Now))
	if err != nil {
		tb.Fatal(err)
	}
	tp := o.profiler.WrapTracerProvider(tel.TracerProvider)
	var emb pipeline.Embedder = hash
	if o.embedder != nil {
		emb = o.embedder(hash)
	}
	p, err := pipeline.New(emb, idx, lookups{docs}, engine, pipeline.Config{TopK: 3}, pipeline.WithAdmitter(pool),
		pipeline.WithClock(tel.Now), pipeline.WithTracerProvider(tp), pipeline.WithMeterProvider(tel.MeterProvider),
		pipeline.WithContentCapture(tel.CaptureContent), pipeline.WithGenAILatest(tel.GenAILatest))
	if err != nil {
		tb.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	api := httptest.NewServer(httpapi.New(p, httpapi.WithDocuments(docs), httpapi.WithLogger(quiet), httpapi.WithClock(tel.Now),
		httpapi.WithTracerProvider(tp), httpapi.WithMeterProvider(tel.MeterProvider), httpapi.WithPropagator(tel.Propagator)))
	tb.Cleanup(api.Close)
	admin := httptest.NewServer(httpapi.NewAdmin(tel.Registry, httpapi.WithTraces(tel.Ring.Handler()),
		httpapi.WithProfiles(profile.Handler(o.profiler.Store())), httpapi.WithCPUProfile(profile.CPUProfileHandler())))
	tb.Cleanup(admin.Close)
	return &stack{tel: tel, pipeline: p, api: api, admin: admin, model: prof.Model, questions: corpus.Questions(chunks, 50, 1)}
}

// answer is what the test client saw of one streamed request.
type answer struct {
	traceID      string
	serverTiming string
	status       int
	complete     bool // the stream ended with [DONE]
	err          error
}

// ask sends one streamed chat completion and reads it to the end.
func (s *stack) ask(ctx context.Context, question string, maxTokens int) answer {
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, s.model, maxTokens, question)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.api.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if tc, ok := httpapi.ParseTraceParent(resp.Header.Get("traceparent")); ok {
		a.traceID = tc.TraceID
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			a.complete = true
		}
	}
	a.err = sc.Err()
	a.serverTiming = resp.Trailer.Get("Server-Timing")
	return a
}

// load sends n requests from workers goroutines and returns the answers.
func (s *stack) load(tb testing.TB, n, workers, maxTokens int) []answer {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := make([]answer, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				out[i] = s.ask(ctx, s.questions[i%len(s.questions)], maxTokens)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// waitTraces waits until the ring has completed n traces: a server span ends just after the
// client has read the last byte.
func (s *stack) waitTraces(tb testing.TB, n uint64) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.tel.Ring.Stats().Traces < n {
		if time.Now().After(deadline) {
			tb.Fatalf("ring completed %d traces, want %d", s.tel.Ring.Stats().Traces, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func get(tb testing.TB, url string, header ...string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// parseServerTiming parses a Server-Timing value into stage -> milliseconds.
func parseServerTiming(tb testing.TB, h string) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for entry := range strings.SplitSeq(h, ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(entry), ";dur=")
		v, err := strconv.ParseFloat(dur, 64)
		if !ok || err != nil {
			tb.Fatalf("Server-Timing entry %q", entry)
		}
		out[name] = v
	}
	return out
}

func isTraceID(s string) bool {
	_, err := trace.TraceIDFromHex(s)
	return err == nil
}
