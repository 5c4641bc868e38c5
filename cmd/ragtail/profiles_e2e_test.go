package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/telemetry/profile"
)

// TestProfilesExplainSlowestTrace runs ragtail serve with the profiler under open-loop load, its
// retrieval made CPU-heavy by a large hash-embedding dimension, takes the slowest request's trace
// from /debug/traces?slowest=1 and checks what /debug/profiles says about it: a wall-clock view
// whose per-stage shares match the trace's stage durations, and a CPU view holding samples of the
// CPU-heavy stage.
//
// Tolerance: each stage is one labelled run of the request's goroutines, and the sampler weights
// a snapshot by the interval since the previous one, so a stage's wall time is off by at most the
// longest interval between snapshots at each of its two ends. Its share of the trace's stage time
// D is then within 2·Δmax/D, Δmax the longest interval in the wall windows the query merged
// (max_interval_seconds: 20 ms at 50 Hz on an idle machine, more when snapshots are dear or the
// CPU is saturated and the sampler waits for it).
//
// It is not parallel: the Go runtime has one CPU profiler per process, and the serve it starts
// must own it.
func TestProfilesExplainSlowestTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service under load for about ten seconds")
	}
	// The default engine profile generates for seconds, so the slowest trace is long against
	// the sampler's resolution; large embeddings make each retrieval compute (smaller under the
	// race detector, which makes the dot products ten times dearer).
	dim := "16384"
	if raceEnabled {
		dim = "2048"
	}
	addr, cancel, done := startServe(t, "--corpus-docs", "300", "--dim", dim,
		"--profile-wall-rate", "50")
	t.Cleanup(func() {
		cancel()
		select {
		case <-done: // the profiler is stopped before parallel tests start their own serves
		case <-time.After(30 * time.Second):
		}
	})
	admin := adminAddrOf(t, addr)

	// Open loop: 2 requests a second for 4 s, each its own client goroutine.
	const (
		rate     = 2.0
		duration = 4 * time.Second
	)
	client := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	var failures sync.Map
	start := time.Now()
	for i := 0; time.Duration(float64(i)/rate*float64(time.Second)) < duration; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		wg.Go(func() {
			body := `{"model":"meta-llama/Meta-Llama-3-8B-Instruct","max_tokens":48,"messages":[{"role":"user","content":"How do shard fan-out and caches shape tail latency?"}]}`
			resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				failures.Store(i, err.Error())
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failures.Store(i, resp.Status)
			}
		})
	}
	wg.Wait()
	failures.Range(func(k, v any) bool {
		t.Errorf("request %v: %v", k, v)
		return true
	})

	var slowest struct {
		Traces []struct {
			TraceID       string             `json:"trace_id"`
			StartUnixNano int64              `json:"start_unix_nano"`
			DurationMS    float64            `json:"duration_ms"`
			Stages        map[string]float64 `json:"stages"`
		} `json:"traces"`
	}
	profGetJSON(t, "http://"+admin+"/debug/traces?slowest=1", &slowest)
	if len(slowest.Traces) != 1 {
		t.Fatalf("slowest traces: %d, want 1", len(slowest.Traces))
	}
	tr := slowest.Traces[0]
	from := time.Unix(0, tr.StartUnixNano)
	until := from.Add(time.Duration(tr.DurationMS * float64(time.Millisecond)))
	q := url.Values{"trace_id": {tr.TraceID}, "from": {fmt.Sprint(from.UnixNano())}, "until": {fmt.Sprint(until.UnixNano())}}
	t.Logf("slowest trace %s: %.1f ms, stages %v", tr.TraceID, tr.DurationMS, tr.Stages)

	// The CPU window holding the trace's end closes within two store windows of it.
	var views profile.Views
	deadline := time.Now().Add(10 * time.Second)
	for {
		profGetJSON(t, "http://"+admin+"/debug/profiles?"+q.Encode(), &views)
		if views.Samples > 0 && views.Until >= until.Format(time.RFC3339Nano) || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if views.Wall == nil || views.Wall.Samples == 0 {
		t.Fatalf("no wall-clock view for the slowest trace: %+v", views.Wall)
	}

	t.Run("wall-clock shares match the trace's stages", func(t *testing.T) {
		var list struct {
			Wall *profile.WallStats `json:"wall_sampler"`
		}
		profGetJSON(t, "http://"+admin+"/debug/profiles", &list)
		if list.Wall == nil {
			t.Fatal("no wall sampler stats on /debug/profiles")
		}
		var traceTotal, wallTotal float64
		for _, ms := range tr.Stages {
			traceTotal += ms / 1e3
		}
		wallSeconds := map[string]float64{}
		for _, st := range views.Wall.Stages {
			if st.Stage == "" {
				continue // the request's goroutines outside any stage (the connection's reader)
			}
			if _, ok := tr.Stages[st.Stage]; !ok {
				t.Errorf("wall view has stage %q, which the trace does not", st.Stage)
			}
			wallSeconds[st.Stage] = st.Seconds
			wallTotal += st.Seconds
		}
		tol := 2 * views.Wall.MaxIntervalSec / traceTotal
		t.Logf("wall sampler: %.1f Hz effective of %.0f, %.0f us a snapshot, %.2f%% of a core; longest interval %.0f ms in the trace's windows (%.0f ms since start); share tolerance ±%.3f",
			list.Wall.EffectiveRateHz, list.Wall.RateHz, list.Wall.MeanCostSec*1e6, list.Wall.CoreShare*100,
			views.Wall.MaxIntervalSec*1e3, list.Wall.MaxIntervalSec*1e3, tol)
		for stage, ms := range tr.Stages {
			want := ms / 1e3 / traceTotal
			got := wallSeconds[stage] / wallTotal
			t.Logf("%-9s trace %7.1f ms (share %.3f)  wall %7.1f ms (share %.3f)", stage, ms, want, wallSeconds[stage]*1e3, got)
			if math.Abs(got-want) > tol {
				t.Errorf("stage %s: wall share %.3f, trace share %.3f, want within ±%.3f", stage, got, want, tol)
			}
		}
	})

	t.Run("cpu view holds the CPU-heavy stage", func(t *testing.T) {
		// One retrieval computes for milliseconds, a few CPU samples at 100 Hz: the slowest
		// trace's own CPU view may hold none, so the check is on the stage over the whole load.
		t.Logf("slowest trace's cpu view: %d samples, stages %+v %s", views.Samples, views.Stages, views.Empty)
		q := url.Values{"view": {"cpu"}, "stage": {"retrieve"}, "from": {fmt.Sprint(start.UnixNano())}, "top": {"10"}}
		var cpu profile.Summary
		profGetJSON(t, "http://"+admin+"/debug/profiles?"+q.Encode(), &cpu)
		t.Logf("cpu view of stage retrieve under load: %d samples, top %+v", cpu.Samples, cpu.Functions)
		// The planted dot products are the project's busiest function (functions come by self
		// value; the runtime's and, under the race detector, its instrumentation's may rank
		// above).
		var top string
		for _, f := range cpu.Functions {
			if strings.HasPrefix(f.Name, "github.com/ragtail/ragtail/") {
				top = f.Name
				break
			}
		}
		if cpu.Samples == 0 || !strings.HasSuffix(top, "rag/retrieve.dot") {
			t.Errorf("cpu view of retrieve: %d samples, busiest ragtail function %q; want rag/retrieve.dot, the planted dot products", cpu.Samples, top)
		}
	})
}

func profGetJSON(tb testing.TB, u string, into any) {
	tb.Helper()
	resp, err := http.Get(u)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		tb.Fatalf("GET %s: %s %s", u, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		tb.Fatalf("GET %s: %v", u, err)
	}
}
