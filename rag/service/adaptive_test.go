package service

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// phaseResult is what the requests that arrived during one phase of a simulated run got.
type phaseResult struct {
	admitted []time.Duration // end-to-end latencies of the admitted requests
	shed     int
}

// simulateDefaultWorld runs the default admission pool in front of the default simulated engine
// (llama3-8b-a100) in virtual time: Poisson arrivals of RAG-sized requests (1600-2100 prompt
// tokens, 64 output tokens) at each phase's rate for its duration, each admitted request
// reporting its modelled and unloaded latency to the pool when it finishes, as the service
// wires them. The pool has no queue, so that every arrival is decided at once. It returns each
// phase's outcome and the pool's limit at the end of each phase.
func simulateDefaultWorld(tb testing.TB, adaptive admission.Adaptive, seed uint64, rates []float64, phase time.Duration) ([]phaseResult, []int) {
	tb.Helper()
	prof, err := llmsim.ProfileByName(llmsim.DefaultProfile)
	if err != nil {
		tb.Fatal(err)
	}
	engine, err := llmsim.New(prof, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	if err != nil {
		tb.Fatal(err)
	}
	defer engine.Close()
	// Simulated time is the engine's clock plus the idle gaps it skipped.
	var idle time.Duration
	now := func() time.Duration { return engine.Now() + idle }
	start := time.Unix(1000, 0)
	cfg := admission.DefaultConfig()
	cfg.QueueCapacity = 0
	cfg.Adaptive = adaptive
	pool, err := admission.NewPool(cfg, admission.WithClock(func() time.Time { return start.Add(now()) }))
	if err != nil {
		tb.Fatal(err)
	}
	type running struct {
		st      *llmsim.Stream
		release func()
		arrived time.Duration
		phase   int
	}
	var (
		inFlight []running
		results  = make([]phaseResult, len(rates))
		limits   = make([]int, len(rates))
		rng      = rand.New(rand.NewPCG(seed, 1))
		prompt   = strings.Repeat("why ", 2200)
	)
	finish := func() {
		inFlight = slices.DeleteFunc(inFlight, func(r running) bool {
			tl := r.st.Timeline()
			if !tl.Done {
				return false
			}
			r.release()
			pool.Observe(tl.ModelledE2E, prof.UnloadedE2E(tl.PromptTokens, tl.CachedTokens, tl.OutputTokens))
			results[r.phase].admitted = append(results[r.phase].admitted, now()-r.arrived)
			_ = r.st.Close()
			return true
		})
	}
	// runUntil steps the engine until simulated time t, or until it idles (then jumps to t).
	runUntil := func(t time.Duration) {
		for now() < t {
			info, err := engine.Step()
			if err != nil {
				tb.Fatal(err)
			}
			if info.Seqs == 0 {
				idle += t - now()
				return
			}
			finish()
		}
	}
	var next time.Duration
	for i, rate := range rates {
		end := time.Duration(i+1) * phase
		for {
			next += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			if next >= end {
				next = end
				break
			}
			runUntil(next)
			release, err := pool.Acquire(context.Background())
			if err != nil {
				results[i].shed++
				continue
			}
			words := 1595 + rng.IntN(500) // 1600-2100 prompt tokens with the chat framing
			st, err := engine.Submit(context.Background(), rag.GenRequest{Model: prof.Model, MaxTokens: 64,
				Messages: []rag.Message{{Role: "user", Content: prompt[:4*words]}}})
			if err != nil {
				tb.Fatal(err)
			}
			inFlight = append(inFlight, running{st: st, release: release, arrived: now(), phase: i})
		}
		runUntil(end)
		limits[i] = pool.Stats().Limit
	}
	for len(inFlight) > 0 {
		runUntil(now() + time.Second)
	}
	return results, limits
}

// p95 is the nearest-rank 95th percentile of ds.
func p95(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[(95*len(s)+99)/100-1]
}

// TestAdaptiveLimitSimulated is the default world at its capacity (3 req/s of 64-token
// answers), then ten times that, then its capacity again, for a minute each, in virtual time,
// with three seeds. With the adaptive limit, admitted requests at 10x are served within twice
// the P95 at capacity (the acceptance figure), most arrivals are shed, the limit ends the
// overload near the concurrency the engine serves within the tolerance (about 14), and back at
// capacity requests are served as before (a few shed where a burst meets the limit). Without it, every request is admitted and waits
// behind all the others: a P95 more than five times that at capacity.
func TestAdaptiveLimitSimulated(t *testing.T) {
	t.Parallel()
	rates := []float64{3, 30, 3}
	for _, seed := range []uint64{35, 36, 37} {
		res, limits := simulateDefaultWorld(t, admission.DefaultConfig().Adaptive, seed, rates, time.Minute)
		for i, r := range res {
			t.Logf("seed %d, %2g req/s: %d admitted, P95 %v; %d shed; limit %d at the end", seed, rates[i], len(r.admitted), p95(r.admitted).Round(time.Millisecond), r.shed, limits[i])
		}
		base, over, after := res[0], res[1], res[2]
		if p, b := p95(over.admitted), p95(base.admitted); p > 2*b {
			t.Errorf("seed %d: at 10x admitted requests' P95 is %v, more than 2x the %v at capacity", seed, p, b)
		}
		if frac := float64(over.shed) / float64(over.shed+len(over.admitted)); frac < 0.8 {
			t.Errorf("seed %d: at 10x %.2f of arrivals were shed; want most of them", seed, frac)
		}
		if limits[1] < 8 || limits[1] > 20 {
			t.Errorf("seed %d: the limit ended the overload at %d; want it near the 14 requests the engine serves within 4x", seed, limits[1])
		}
		// The pool here has no queue, so a burst beyond the limit is shed at once; the
		// service's queue lets it wait up to the queue target instead.
		if p, b := p95(after.admitted), p95(base.admitted); p > b*3/2 || after.shed > len(after.admitted)/10 {
			t.Errorf("seed %d: back at capacity: P95 %v (%v before the overload), %d of %d shed: want it served as before",
				seed, p, b, after.shed, after.shed+len(after.admitted))
		}
	}

	res, _ := simulateDefaultWorld(t, admission.Adaptive{}, 35, rates[:2], time.Minute)
	t.Logf("without the limit: P95 %v at capacity, %v at 10x (%d shed)", p95(res[0].admitted).Round(time.Millisecond), p95(res[1].admitted).Round(time.Millisecond), res[1].shed)
	if p, b := p95(res[1].admitted), p95(res[0].admitted); p < 5*b {
		t.Errorf("without the limit the P95 at 10x is %v, %v at capacity: the run does not show the overload the limit is for", p, b)
	}
}

// TestAdaptiveLimitWired: the service reports every finished generation of its simulated
// engine to the admission pool, whose limit shows in /admin/config and /admin/stats; the limit
// can be switched off and tuned at run time, within bounds, and a PUT cannot set the limit
// itself.
func TestAdaptiveLimitWired(t *testing.T) {
	t.Parallel()
	svc, api, admin := testService(t)
	if cfg := svc.Runtime.Config().Admission.Adaptive; !cfg.Enabled || cfg.Tolerance != admission.DefaultTolerance ||
		cfg.MinLimit != admission.DefaultMinLimit || cfg.Limit != admission.InitialLimit {
		t.Fatalf("adaptive config at start: %+v", cfg)
	}
	// One request at a time: each runs alone in the engine, at its unloaded latency.
	testwait.For(t, "a window of requests reported to the limit", func() bool {
		resp, body := request(t, http.MethodPost, api.URL+"/v1/chat/completions", chatBody(svc.Model, 4))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d %s", resp.StatusCode, body)
		}
		return svc.Pool.Stats().Slowdown > 0
	})
	if s := svc.Pool.Stats().Slowdown; s < 1 || s > 1.5 {
		t.Errorf("requests alone in the engine ran at %.2fx their unloaded latency; want about 1", s)
	}
	var stats RuntimeStats
	if _, body := request(t, http.MethodGet, admin.URL+"/admin/stats", ""); json.Unmarshal([]byte(body), &stats) != nil || stats.Admission.Limit != admission.InitialLimit {
		t.Errorf("/admin/stats admission: %s", body)
	}

	cfg := putConfig(t, admin.URL, `{"admission":{"adaptive":{"tolerance":2.5,"min_limit":2,"limit":3}}}`)
	if a := cfg.Admission.Adaptive; !a.Enabled || a.Tolerance != 2.5 || a.MinLimit != 2 || a.Limit != admission.InitialLimit {
		t.Errorf("after tuning: %+v; want tolerance 2.5, min_limit 2 and the limit untouched", a)
	}
	cfg = putConfig(t, admin.URL, `{"admission":{"adaptive":{"enabled":false}}}`)
	if a := cfg.Admission.Adaptive; a.Enabled || a.Limit != cfg.Admission.Workers {
		t.Errorf("switched off: %+v; want the %d workers as the limit", a, cfg.Admission.Workers)
	}
	for _, tt := range []struct{ body, wantErr string }{
		{`{"admission":{"adaptive":{"tolerance":1.2}}}`, "tolerance must be between 1.5 and 100"},
		{`{"admission":{"adaptive":{"min_limit":-1}}}`, "min_limit must be between 1"},
		{`{"admission":{"adaptive":{"enabled":"yes"}}}`, "config body"},
	} {
		resp, body := request(t, http.MethodPut, admin.URL+"/admin/config", tt.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tt.wantErr) {
			t.Errorf("PUT %s: %d %s; want 400 containing %q", tt.body, resp.StatusCode, body, tt.wantErr)
		}
	}
}

// TestAdaptiveLimitOffWithRealLLM: a real LLM server reports no latency to the pool, so the
// limit is off in front of it and cannot be switched on.
func TestAdaptiveLimitOffWithRealLLM(t *testing.T) {
	t.Parallel()
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
	cfg := DefaultConfig()
	cfg.CorpusDocs = 20
	none := latency.Law{}
	cfg.ShardLatency, cfg.EmbedLatency, cfg.FetchLatency = []latency.Law{none}, none, none
	cfg.Backends.LLM.URL, cfg.Backends.LLM.Models = llm.URL+"/v1", []string{prof.Model}
	svc, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	if a := svc.Runtime.Config().Admission.Adaptive; a.Enabled || a.Limit != cfg.Admission.Workers {
		t.Fatalf("adaptive config with a real LLM: %+v; want it off, the %d workers the limit", a, cfg.Admission.Workers)
	}
	_, err = svc.Runtime.Apply(context.Background(), []byte(`{"admission":{"adaptive":{"enabled":true}}}`))
	if err == nil || !strings.Contains(err.Error(), "real LLM") {
		t.Fatalf("switching the limit on in front of a real LLM: %v; want a refusal", err)
	}
}
