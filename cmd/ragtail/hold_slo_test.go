package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// startSlottedLLMSim serves llm-sim's tiny engine behind slots chat completions that each take
// service longer: a server of known capacity, slots/service requests a second, whatever the
// speed of the machine (the engine's own few milliseconds aside).
func startSlottedLLMSim(tb testing.TB, slots int, service time.Duration) *httptest.Server {
	tb.Helper()
	engine, err := llmsim.New(tinyProfile(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = engine.Close() })
	sim := llmsim.NewHandler(engine)
	busy := make(chan struct{}, slots)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			sim.ServeHTTP(w, r)
			return
		}
		busy <- struct{}{}
		defer func() { <-busy }()
		time.Sleep(service)
		sim.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// TestHoldSLOAgreesWithSweep finds the edge of P95 E2EL <= 200 ms on llm-sim behind 8 slots of
// 100 ms (a capacity of about 70 req/s, the engine's few milliseconds included) twice, on two
// such servers at once: with sweep's bisection and with bench --hold-slo. The rate bench holds
// lies within sweep's max_under_slo_interval widened by the hold's own bracket, and the
// hold_slo section is in the JSON, the text report and the HTML.
//
// Near capacity a queue takes seconds to settle: a sweep point that starts from an idle server
// sees less queueing than the hold's windows, which follow one another under load, and so
// reads a higher edge. The sweep's points therefore send 4 s of warmup before their 3 s of
// measurement. It is in the Makefile's TIMING_TESTS: what it compares is timed.
func TestHoldSLOAgreesWithSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two searches of about 30 s")
	}
	const slo = "p95_e2el_ms<=200"
	dir := t.TempDir()
	sweepOut, holdOut, holdHTML := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "hold.json"), filepath.Join(dir, "hold.html")
	common := []string{"--max-tokens", "4", "--dataset", "short", "--quiet", "--seed", "3"}
	var wg sync.WaitGroup
	var sweepErr, holdErr error
	var sweepStderr, holdStdout, holdStderr bytes.Buffer
	wg.Go(func() {
		srv := startSlottedLLMSim(t, 8, 100*time.Millisecond)
		sweepErr = run(context.Background(), append([]string{"sweep", "--url", srv.URL + "/v1/chat/completions", "--rates", "40,80",
			"--point-duration", "3s", "--warmup-duration", "4s", "--pause", "500ms", "--slo", "p95_e2el:200", "--rps-tolerance", "4", "--json", sweepOut}, common...),
			&bytes.Buffer{}, &sweepStderr)
	})
	wg.Go(func() {
		srv := startSlottedLLMSim(t, 8, 100*time.Millisecond)
		holdErr = run(context.Background(), append([]string{"bench", "--url", srv.URL + "/v1/chat/completions", "--request-rate", "20",
			"--hold-slo", slo, "--hold-window", "3s", "--hold-for", "5s", "--hold-tolerance", "4", "--json", holdOut, "--html", holdHTML}, common...),
			&holdStdout, &holdStderr)
	})
	wg.Wait()
	if sweepErr != nil {
		t.Fatalf("sweep: %v\n%s", sweepErr, sweepStderr.String())
	}
	if holdErr != nil {
		t.Fatalf("bench --hold-slo: %v\n%s", holdErr, holdStderr.String())
	}
	t.Logf("sweep:\n%s\nbench --hold-slo:\n%s", sweepStderr.String(), holdStderr.String())

	sw := readJSON(t, sweepOut)
	iv, _ := sw["max_under_slo_interval"].(map[string]any)
	swLo, hasLo := iv["lo"].(float64)
	swHi, hasHi := iv["hi"].(float64)
	if !hasLo || !hasHi {
		t.Fatalf("sweep's max_under_slo_interval %v: want both ends", sw["max_under_slo_interval"])
	}
	r := readJSON(t, holdOut)
	h, _ := r["hold_slo"].(map[string]any)
	held, _ := h["held_rps"].(float64)
	lo, _ := h["interval_lo_rps"].(float64)
	hi, _ := h["interval_hi_rps"].(float64)
	if h == nil || h["slo"] != slo || held == 0 || hi <= lo || h["held_met"] == nil {
		t.Fatalf("hold_slo %v: want the SLO, a held rate, its bracket and the held stretch's verdict", h)
	}
	t.Logf("sweep max_rps_under_slo %v, interval [%.2f, %.2f]; held %.2f req/s, bracket [%.2f, %.2f), held stretch met: %v",
		sw["max_rps_under_slo"], swLo, swHi, held, lo, hi, h["held_met"])
	if width := hi - lo; held < swLo-width || held > swHi+width {
		t.Errorf("held %.2f req/s: want it within sweep's interval [%.2f, %.2f] widened by the hold's bracket (%.2f)", held, swLo, swHi, width)
	}
	if !strings.Contains(holdStdout.String(), "SLO edge (--hold-slo "+slo+")") || !strings.Contains(holdStdout.String(), "Held rate (req/s)") {
		t.Errorf("text report without the hold:\n%s", holdStdout.String())
	}
	if b, err := os.ReadFile(holdHTML); err != nil || !bytes.Contains(b, []byte("SLO edge")) || !bytes.Contains(b, []byte("Offered rate by window")) {
		t.Errorf("html without the hold (%v)", err)
	}
}
