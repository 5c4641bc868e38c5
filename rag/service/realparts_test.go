package service

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ragtail/ragtail/internal/testpeer"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/llmsim"
)

func chatBody(model string, maxTokens int) string {
	return `{"model":"` + model + `","max_tokens":` + strconv.Itoa(maxTokens) + `,"messages":[{"role":"user","content":"what does a bloom filter guard?"}]}`
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsString()
		}
	}
	return ""
}

// underFetch reports whether some span with db.system.name system descends from a rag.fetch
// span in spans.
func underFetch(spans []sdktrace.ReadOnlySpan, system string) bool {
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
	}
	for _, s := range spans {
		if attr(s, "db.system.name") != system {
			continue
		}
		for p := s; p != nil; p = byID[p.Parent().SpanID().String()] {
			if p.Name() == "rag.fetch" {
				return true
			}
		}
	}
	return false
}

// TestPostgresAndRedis: chunks ingested into a real PostgreSQL are served through a real Redis
// cache (spans of both under rag.fetch); with Redis killed requests still succeed from the
// store; with PostgreSQL killed chat answers 503 naming fetch, /healthz stays ok and /readyz
// names the doc store; both recover when they come back.
func TestPostgresAndRedis(t *testing.T) {
	pg, rd := testpeer.StartPostgres(t), testpeer.StartRedis(t)
	ctx := context.Background()
	in := DefaultIngestConfig()
	in.CorpusDocs, in.Backends.DocStore = 20, pg.DSN
	sum, err := Ingest(ctx, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.DocStoreChunks != sum.Chunks || sum.Chunks == 0 {
		t.Fatalf("ingest: %d chunks in the doc store, %d ingested", sum.DocStoreChunks, sum.Chunks)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	cfg := DefaultConfig()
	cfg.Profile, cfg.CorpusDocs = "tiny", 20
	none := latency.Law{}
	cfg.ShardLatency, cfg.EmbedLatency, cfg.FetchLatency = []latency.Law{none}, none, none
	cfg.Backends.DocStore, cfg.Backends.Cache = pg.DSN, rd.URL
	svc, err := New(ctx, cfg, WithTelemetry(Telemetry{TracerProvider: tp}))
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(svc.API)
	t.Cleanup(func() { api.Close(); _ = svc.Close() })

	chunks := corpus.Builtin(corpus.Options{Seed: cfg.Seed, Docs: 20})
	doc := api.URL + "/v1/documents/" + url.PathEscape(chunks[3].ID)
	for range 2 {
		if resp, body := request(t, http.MethodGet, doc, ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, chunks[3].Title) {
			t.Fatalf("GET %s: %d %s", doc, resp.StatusCode, body)
		}
	}
	st := svc.Docs.Stats()
	if st.Backend.Kind != "postgresql" || st.Backend.Lookups != 1 || st.CacheKind != "redis" || st.Hits < 1 {
		t.Errorf("after two reads of one document: %+v; want one PostgreSQL lookup and a Redis hit", st)
	}
	if resp, body := request(t, http.MethodPost, api.URL+"/v1/chat/completions", chatBody(svc.Model, 4)); resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	spans := rec.Ended()
	if !underFetch(spans, "postgresql") || !underFetch(spans, "redis") {
		t.Errorf("no postgresql and redis client spans under rag.fetch among %d spans", len(spans))
	}

	rd.Kill()
	for i := range 5 {
		if resp, body := request(t, http.MethodPost, api.URL+"/v1/chat/completions", chatBody(svc.Model, 4)); resp.StatusCode != http.StatusOK {
			t.Fatalf("chat %d with Redis dead: %d %s", i, resp.StatusCode, body)
		}
	}
	if st := svc.Docs.Stats(); st.CacheErrors == 0 {
		t.Errorf("Redis dead: no cache errors counted: %+v", st)
	}

	pg.Kill()
	resp, body := request(t, http.MethodPost, api.URL+"/v1/chat/completions", chatBody(svc.Model, 4))
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "fetch") {
		t.Errorf("chat with PostgreSQL dead: %d %s; want 503 naming fetch", resp.StatusCode, body)
	}
	if strings.Contains(body, pg.Addr) {
		t.Errorf("the error shows the store's address: %s", body)
	}
	if resp, _ := request(t, http.MethodGet, api.URL+"/healthz", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz with PostgreSQL dead: %d", resp.StatusCode)
	}
	if resp, body := request(t, http.MethodGet, api.URL+"/readyz", ""); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "doc store") {
		t.Errorf("/readyz with PostgreSQL dead: %d %s; want 503 naming the doc store", resp.StatusCode, body)
	}

	pg.Restart()
	rd.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, _ := request(t, http.MethodPost, api.URL+"/v1/chat/completions", chatBody(svc.Model, 4))
		ready, _ := request(t, http.MethodGet, api.URL+"/readyz", "")
		if resp.StatusCode == http.StatusOK && ready.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery 20 s after PostgreSQL and Redis came back: chat %d, readyz %d", resp.StatusCode, ready.StatusCode)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// generateMS returns the median and the shortest generate-stage duration of n one-token
// answers, from Server-Timing.
func generateMS(tb testing.TB, api, model string, n int) (median, shortest float64) {
	tb.Helper()
	var durs []float64
	for range n {
		resp, body := request(tb, http.MethodPost, api+"/v1/chat/completions", chatBody(model, 1))
		if resp.StatusCode != http.StatusOK {
			tb.Fatalf("chat: %d %s", resp.StatusCode, body)
		}
		for part := range strings.SplitSeq(resp.Header.Get("Server-Timing"), ",") {
			name, dur, _ := strings.Cut(strings.TrimSpace(part), ";dur=")
			if name == "generate" {
				d, err := strconv.ParseFloat(dur, 64)
				if err != nil {
					tb.Fatal(err)
				}
				durs = append(durs, d)
			}
		}
	}
	if len(durs) != n {
		tb.Fatalf("%d generate timings of %d answers", len(durs), n)
	}
	slices.Sort(durs)
	return durs[n/2], durs[0]
}

// TestLinkLatencyOnTheLLM: a 20 ms latency link in front of an OpenAI-compatible LLM raises the
// generate stage of a one-token answer (its time to first token) by at least one round trip
// and by less than four; taking the toxic off at run time through /admin/config restores it.
func TestLinkLatencyOnTheLLM(t *testing.T) {
	prof, err := llmsim.ProfileByName("tiny")
	if err != nil {
		t.Fatal(err)
	}
	engine, err := llmsim.New(prof)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	llm := httptest.NewServer(llmsim.NewHandler(engine))
	t.Cleanup(llm.Close)

	build := func(specs map[string]link.Spec) (*Service, *httptest.Server, *httptest.Server) {
		cfg := DefaultConfig()
		cfg.CorpusDocs = 20
		none := latency.Law{}
		cfg.ShardLatency, cfg.EmbedLatency, cfg.FetchLatency = []latency.Law{none}, none, none
		cfg.Backends.LLM.URL, cfg.Backends.LLM.Models = llm.URL+"/v1", []string{prof.Model}
		cfg.Links = specs
		svc, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		api, admin := httptest.NewServer(svc.API), httptest.NewServer(svc.Admin)
		t.Cleanup(func() { api.Close(); admin.Close(); _ = svc.Close() })
		return svc, api, admin
	}
	const n = 31
	svc, api, _ := build(nil)
	base, fastest := generateMS(t, api.URL, svc.Model, n)

	spec, err := link.Parse("latency:20ms")
	if err != nil {
		t.Fatal(err)
	}
	svc, api, admin := build(map[string]link.Spec{"llm": spec})
	linked, _ := generateMS(t, api.URL, svc.Model, n)
	// Every answer through the link waits its own work plus the round trip, and no answer's
	// work is shorter than the fastest direct one: so the linked median is at least a round
	// trip above that (a difference of two medians would put the sampling noise of both into
	// the lower bound). The upper bound compares medians: less than four round trips.
	if d := linked - fastest; d < 20 {
		t.Errorf("generate median %.1f ms through a 20 ms link, fastest %.1f ms without: +%.1f ms, want at least one round trip (20 ms)", linked, fastest, d)
	}
	if d := linked - base; d >= 80 {
		t.Errorf("generate median %.1f ms through a 20 ms link, %.1f ms without: +%.1f ms, want less than four round trips (80 ms)", linked, base, d)
	}
	cfg := putConfig(t, admin.URL, `{"links":{"llm":"none"}}`)
	if !cfg.Links["llm"].IsZero() {
		t.Errorf("links after the PUT: %v", cfg.Links)
	}
	restored, _ := generateMS(t, api.URL, svc.Model, n)
	if restored-base >= 10 {
		t.Errorf("generate median %.1f ms after the link's toxic was removed, %.1f ms before it was added", restored, base)
	}
	var stats RuntimeStats
	_, body := request(t, http.MethodGet, admin.URL+"/admin/stats", "")
	if err := json.Unmarshal([]byte(body), &stats); err != nil || len(stats.Links) != 1 || stats.Links[0].Name != "llm" {
		t.Errorf("/admin/stats links: %v %s", err, body)
	}
	t.Logf("generate stage median of %d one-token answers: %.1f ms direct, %.1f ms through latency:20ms, %.1f ms with the toxic removed", n, base, linked, restored)
}
