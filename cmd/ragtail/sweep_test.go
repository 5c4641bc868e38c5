package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestSweepFindsKneeAndMaxRPS is in the Makefile's TIMING_TESTS, and not parallel: where the
// SLO breaks is timed, and under the race detector beside other packages' tests even 40 req/s
// can miss it.
func TestSweepFindsKneeAndMaxRPS(t *testing.T) {
	// llm-sim's tiny engine (8 sequences, ~1 ms steps) completes about 230 requests of 16
	// tokens a second: at 40 and 120 req/s it keeps up (P95 E2EL tens of ms); at 400 req/s its
	// queue grows for the whole point and P95 E2EL reaches about a second. So the ladder brackets
	// the max rate under P95 <= 300 ms between 120 and 400, bisection narrows it to 70 req/s, and
	// the P99 curve bends at 120 (a slope far above 2 ms per req/s after it, below before).
	srv := startLLMSim(t, tinyProfile(t))
	dir := t.TempDir()
	out, html := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.html")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"sweep", "--url", srv.URL + "/v1/chat/completions", "--rates", "40,120,400",
		"--point-duration", "1s", "--pause", "100ms", "--max-tokens", "16", "--dataset", "short", "--slo", "p95_e2el:300",
		"--rps-tolerance", "70", "--knee-threshold", "2", "--quiet", "--json", out, "--html", html}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	if r["schema"] != "ragtail.sweep/v1" || r["axis"] != "rate" {
		t.Errorf("schema %v, axis %v", r["schema"], r["axis"])
	}
	points, _ := r["points"].([]any)
	if len(points) != 3 {
		t.Fatalf("%d points", len(points))
	}
	knee, _ := r["knee"].(map[string]any)
	if knee == nil || knee["rate"] == nil || knee["p99_e2el_ms"] == nil || knee["method"] == nil {
		t.Errorf("knee %v", r["knee"])
	}
	// Where the SLO breaks depends on how fast this machine runs the engine, so the test checks
	// what the sweep concludes against its own probes: some rate met the SLO, the max RPS (the
	// rate achieved at the fastest probe meeting it) is positive, at most that probe's offered
	// rate and below the slowest rate that missed, and a bracket was bisected.
	maxRPS, _ := r["max_rps_under_slo"].(float64)
	probes, _ := r["probes"].([]any)
	met, missed := 0.0, math.Inf(1)
	for _, raw := range probes {
		p, _ := raw.(map[string]any)
		rate, _ := p["rate"].(float64)
		if p["meets"] == true {
			met = max(met, rate)
		} else {
			missed = min(missed, rate)
		}
	}
	t.Logf("max_rps_under_slo %v req/s; fastest offered rate meeting the SLO %v, slowest missing it %v; %d probes", r["max_rps_under_slo"], met, missed, len(probes))
	if met == 0 || maxRPS <= 0 || maxRPS > met*1.05 || maxRPS >= missed {
		t.Errorf("max_rps_under_slo %v, probes %v: want a positive rate, at most the fastest offered rate meeting the SLO and below the slowest missing it", r["max_rps_under_slo"], probes)
	}
	if !math.IsInf(missed, 1) && len(probes) < 3 {
		t.Errorf("probes %v: want the bracket and at least one bisection", probes)
	}
	if !strings.Contains(stdout.String(), "Max RPS under") {
		t.Errorf("text report:\n%s", stdout.String())
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("html: %v", err)
	}
}

func TestSweepUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no ladder", nil, "give one ladder"},
		{"two ladders", []string{"--rates", "1,2", "--concurrencies", "1,2"}, "give one ladder"},
		{"decreasing", []string{"--rates", "4,2"}, "for flag -rates: the ladder's rates must increase"},
		{"bad rate", []string{"--rates", "1,x"}, "for flag -rates: \"x\" is not a positive rate"},
		{"arithmetic", []string{"--rate-start", "5", "--rate-step", "0", "--rate-max", "9"}, "--rate-step"},
		{"bad slo", []string{"--rates", "1", "--slo", "fast"}, "for flag -slo: slo \"fast\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), append([]string{"sweep", "--url", "http://127.0.0.1:1/v1/chat/completions"}, tt.args...), io.Discard, &stderr)
			if err == nil || (!strings.Contains(err.Error(), tt.msg) && !strings.Contains(stderr.String(), tt.msg)) {
				t.Errorf("err = %v, stderr %q: want %q", err, stderr.String(), tt.msg)
			}
		})
	}
}

// TestSweepConcurrencyLadder is in the Makefile's TIMING_TESTS, and not parallel: it compares
// two throughputs measured over 300 ms, which a loaded machine can invert.
func TestSweepConcurrencyLadder(t *testing.T) {
	srv := startLLMSim(t, tinyProfile(t))
	out := filepath.Join(t.TempDir(), "users.json")
	err := run(context.Background(), []string{"sweep", "--url", srv.URL + "/v1/chat/completions", "--concurrencies", "1,4",
		"--point-duration", "300ms", "--pause", "0s", "--max-tokens", "8", "--dataset", "short", "--quiet", "--json", out}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := readJSON(t, out)
	points, _ := r["points"].([]any)
	if r["axis"] != "concurrency" || len(points) != 2 {
		t.Fatalf("axis %v, %d points", r["axis"], len(points))
	}
	a, b := points[0].(map[string]any), points[1].(map[string]any)
	// Four users of an engine that batches eight sequences finish more requests a second than one.
	t.Logf("achieved %.1f req/s with 1 user, %.1f with 4", a["achieved_rps"], b["achieved_rps"])
	if a["achieved_rps"].(float64) >= b["achieved_rps"].(float64) {
		t.Errorf("achieved %v with 1 user, %v with 4", a["achieved_rps"], b["achieved_rps"])
	}
}

// TestSweepScrapesEachPoint: against llm-sim, a sweep scrapes the target's /metrics by default,
// each point on its own: every point has its server_metrics, and the engine's token counter
// grew within each point by no more than that point's output tokens and by all of them at its
// end (the points run one after another).
func TestSweepScrapesEachPoint(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t))
	out := filepath.Join(t.TempDir(), "sweep.json")
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"sweep", "--url", srv.URL + "/v1/chat/completions", "--rates", "20,60",
		"--point-duration", "500ms", "--pause", "100ms", "--max-tokens", "8", "--dataset", "short",
		"--server-metrics-interval", "50ms", "--quiet", "--json", out}, io.Discard, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	sweepPoints, _ := readJSON(t, out)["points"].([]any)
	if len(sweepPoints) != 2 {
		t.Fatalf("%d points", len(sweepPoints))
	}
	var before float64 // the counter's value at the end of the previous point
	for i, p := range sweepPoints {
		pt := p.(map[string]any)
		gen := scrapedSeries(t, pt)["vllm:generation_tokens_total"]
		if len(gen) != 1 {
			t.Fatalf("point %d: generation tokens series %v", i, gen)
		}
		pts := points(gen[0])
		if len(pts) < 2 {
			t.Fatalf("point %d: %d points of the counter", i, len(pts))
		}
		first, last := pts[0][1], pts[len(pts)-1][1]
		outTokens := pt["total_output_tokens"].(float64)
		if first < before || last-first > outTokens || last-before < outTokens {
			t.Errorf("point %d: counter %g -> %g after %g, want the point's %g output tokens", i, first, last, before, outTokens)
		}
		before = last
	}
	if n := strings.Count(stderr.String(), "  server metrics: "); n != 2 {
		t.Errorf("%d server-metrics lines, want one per point:\n%s", n, stderr.String())
	}
}

// TestSweepBisectsUsers: against a server of known capacity, a concurrency sweep with an SLO
// bisects the most users that meet it. The server holds 8 requests at once for about 210 ms
// each (llm-sim's tiny engine behind a semaphore and a 200 ms pause), so a closed loop of N
// users waits ceil(N/8) rounds: 16 users take about 420 ms a request, and from 17 one request in
// eight takes a third round, about 630 ms, which puts P95 over the 525 ms SLO. The ladder 4, 32
// brackets it and the bisection ends at 16, with the interval of the max (from every point's
// P95 interval) around it. A timing test (make test-timing): the margins are 100 ms a side.
func TestSweepBisectsUsers(t *testing.T) {
	t.Parallel()
	engine, err := llmsim.New(tinyProfile(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	sim := llmsim.NewHandler(engine)
	slots := make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			sim.ServeHTTP(w, r)
			return
		}
		slots <- struct{}{}
		defer func() { <-slots }()
		time.Sleep(200 * time.Millisecond)
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	out := filepath.Join(t.TempDir(), "users.json")
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"sweep", "--url", srv.URL + "/v1/chat/completions", "--concurrencies", "4,32",
		"--point-duration", "3s", "--pause", "0s", "--max-tokens", "4", "--dataset", "short", "--slo", "p95_e2el:525",
		"--quiet", "--json", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	maxUsers, _ := r["max_users_under_slo"].(float64)
	probes, _ := r["probes"].([]any)
	met, missed := 0.0, math.Inf(1)
	for _, raw := range probes {
		p, _ := raw.(map[string]any)
		users, _ := p["users"].(float64)
		if p["meets"] == true {
			met = max(met, users)
		} else {
			missed = min(missed, users)
		}
	}
	if maxUsers != 16 || met != 16 || missed != 17 {
		t.Errorf("max_users_under_slo %v, probes %v: want 16, met at 16 and missed at 17", r["max_users_under_slo"], probes)
	}
	iv, _ := r["max_under_slo_interval"].(map[string]any)
	lo, _ := iv["lo"].(float64)
	hi, _ := iv["hi"].(float64)
	if iv == nil || lo > 16 || lo < 4 || hi <= 16 || hi > 32 {
		t.Errorf("max_under_slo_interval %v: want lo in [4, 16] and hi in (16, 32]", r["max_under_slo_interval"])
	}
	if !strings.Contains(stdout.String(), "Max users under e2el:p95:525") || !strings.Contains(stdout.String(), "16 users (bisection") {
		t.Errorf("text report:\n%s", stdout.String())
	}
}
