package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/rag/llmsim"
)

func TestExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, 0},
		{"help", flag.ErrHelp, 0},
		{"usage", errUsage, 2},
		{"a run that failed", errors.New("connection refused"), 1},
		{"a gate", fmt.Errorf("bench: %w", &report.GateError{Failed: 1, Checked: 3}), report.GateExitStatus},
	}
	for _, tt := range tests {
		if got := exitStatus(tt.err); got != tt.want {
			t.Errorf("%s: exit status %d, want %d", tt.name, got, tt.want)
		}
	}
	if report.GateExitStatus != 99 {
		t.Errorf("the gate's status is %d; docs/loadgen.md and CI scripts rely on 99", report.GateExitStatus)
	}
}

// startSlowedLLMSim serves llm-sim's tiny profile in real time with 4 ms steps, the first byte
// of every completion delayed by delay (0: none). Steps of 4 ms rather than 1 keep the
// latencies well above the scheduling noise of a machine shared with other tests.
func startSlowedLLMSim(tb testing.TB, delay time.Duration) *httptest.Server {
	tb.Helper()
	p := tinyProfile(tb)
	p.StepOverhead = 4 * time.Millisecond
	engine, err := llmsim.New(p)
	if err != nil {
		tb.Fatal(err)
	}
	h := llmsim.NewHandler(engine)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if delay > 0 && strings.HasSuffix(r.URL.Path, "/completions") {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	tb.Cleanup(func() {
		srv.Close()
		engine.Close()
	})
	return srv
}

// gateRun benches srv with 250 short requests at a constant 50 req/s (5 s), writing the JSON to
// path and the per-request file to path + "l": enough samples for the intervals of P50 to P95, and too few arrivals at once to queue.
func gateRun(tb testing.TB, srv *httptest.Server, seed int, path string, extra ...string) (stderr string, err error) {
	tb.Helper()
	var errBuf bytes.Buffer
	args := append([]string{"bench", "--url", srv.URL + "/v1/chat/completions", "--request-rate", "50", "--shape", "constant", "--num-prompts", "250",
		"--max-tokens", "8", "--dataset", "short", "--seed", fmt.Sprint(seed), "--quiet", "--json", path, "--save-detailed", path + "l"}, extra...)
	err = run(context.Background(), args, io.Discard, &errBuf)
	return errBuf.String(), err
}

func TestBenchFailOn(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	dir := t.TempDir()
	out := filepath.Join(dir, "r.json")
	args := []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--concurrency", "4", "--num-prompts", "40",
		"--max-tokens", "8", "--quiet", "--json", out, "--goodput", "e2el:60000"}

	var stderr bytes.Buffer
	err := run(context.Background(), append(args, "--fail-on", "p95_ttft_ms<60000,error_rate<0.01,goodput>0,completed>=40"), io.Discard, &stderr)
	if err != nil {
		t.Fatalf("thresholds that hold: %v\n%s", err, stderr.String())
	}
	for _, line := range []string{"thresholds (--fail-on):", "ok      p95_ttft_ms < 60000", "ok      error_rate < 0.01", "measured 0\n", "ok      completed >= 40", "measured 40\n"} {
		if !strings.Contains(stderr.String(), line) {
			t.Errorf("stderr lacks %q:\n%s", line, stderr.String())
		}
	}

	stderr.Reset()
	_ = os.Remove(out)
	err = run(context.Background(), append(args, "--fail-on", "completed>40,p50_e2el_ms<=0,error_rate<0.5"), io.Discard, &stderr)
	var gate *report.GateError
	if !errors.As(err, &gate) || gate.Failed != 2 || gate.Checked != 3 || exitStatus(err) != 99 {
		t.Fatalf("breached thresholds: %v (status %d), want a gate of 2 of 3 failed, status 99\n%s", err, exitStatus(err), stderr.String())
	}
	if r := readJSON(t, out); r["completed"] != 40.0 {
		t.Errorf("a breached gate still writes the results: completed %v", r["completed"])
	}
	for _, line := range []string{"FAILED  completed > 40", "FAILED  p50_e2el_ms <= 0", "ok      error_rate < 0.5"} {
		if !strings.Contains(stderr.String(), line) {
			t.Errorf("stderr lacks %q:\n%s", line, stderr.String())
		}
	}

	for _, tt := range []struct{ name, value, msg string }{
		{"unknown key", "p95_ttf_ms<5", `invalid value "p95_ttf_ms<5" for flag -fail-on: "p95_ttf_ms<5": unknown key "p95_ttf_ms": want one of completed`},
		{"no operator", "p95_ttft_ms=5", "for flag -fail-on"},
	} {
		stderr.Reset()
		err := run(context.Background(), append(args, "--fail-on", tt.value), io.Discard, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), tt.msg) {
			t.Errorf("%s: %v, stderr %q; want a usage error saying %q", tt.name, err, stderr.String(), tt.msg)
		}
	}
	// A key the flags leave out of the result fails before the run: no request is sent.
	_ = os.Remove(out)
	err = run(context.Background(), append(args, "--metric-percentiles", "50,99", "--fail-on", "p95_ttft_ms<5"), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--fail-on p95_ttft_ms<5: the result has no key p95_ttft_ms") || exitStatus(err) != 1 {
		t.Errorf("a key not in the result: %v", err)
	}
	if _, statErr := os.Stat(out); !os.IsNotExist(statErr) {
		t.Errorf("the run started: %v", statErr)
	}
}

// TestCompareFailOnRegression is the acceptance test of report --compare --fail-on-regression:
// three small real-time runs against llm-sim, two alike with different seeds and one whose
// completions start 50 ms late. The planted delay regresses; the seeds alone do not. A timing
// test (make test-timing, without the race detector, alone on the machine): under the race
// detector on a loaded machine two runs of one setup differ by more than their sampling error.
func TestCompareFailOnRegression(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, same, slow := filepath.Join(dir, "base.json"), filepath.Join(dir, "same.json"), filepath.Join(dir, "slow.json")
	// The runs go at once, each against its own engine, so that the load of the machine (shared
	// with the other tests) falls on all three alike.
	runs := []struct {
		srv  *httptest.Server
		seed int
		path string
	}{{startSlowedLLMSim(t, 0), 1, base}, {startSlowedLLMSim(t, 0), 2, same}, {startSlowedLLMSim(t, 50*time.Millisecond), 2, slow}}
	errs := make(chan error, len(runs))
	for _, r := range runs {
		go func() {
			stderr, err := gateRun(t, r.srv, r.seed, r.path)
			if err != nil {
				err = fmt.Errorf("%s: %w\n%s", r.path, err, stderr)
			}
			errs <- err
		}()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	// The three runs share the machine's cores at once: two runs of one setup have differed by
	// 8% in median TTFT (7.9 against 8.5 ms), beyond their within-run intervals, so the check
	// is told the machine's run-to-run noise, as the docs advise for a noisy machine. The
	// planted 50 ms is several times the base TTFT.
	tol := []string{"--fail-on-regression", "--regression-tolerance", "0.25"}
	var stdout bytes.Buffer
	err := run(context.Background(), append([]string{"report", "--compare", base, same}, tol...), &stdout, io.Discard)
	t.Logf("same setup, another seed:\n%s", stdout.String())
	if err != nil {
		t.Errorf("two runs of one setup: %v (status %d), want none", err, exitStatus(err))
	}

	stdout.Reset()
	err = run(context.Background(), append([]string{"report", "--compare", base, slow}, tol...), &stdout, io.Discard)
	t.Logf("50 ms planted:\n%s", stdout.String())
	if exitStatus(err) != report.GateExitStatus {
		t.Fatalf("a 50 ms slower first byte: %v (status %d), want status 99", err, exitStatus(err))
	}
	for _, want := range []string{"REGRESSED  p50_ttft_ms", "REGRESSED  p50_e2el_ms", base, slow} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the check does not say %q", want)
		}
	}
	// The per-request files: the same intervals from their records, and the rank tests.
	stdout.Reset()
	err = run(context.Background(), append([]string{"report", "--compare", base + "l", same + "l"}, tol...), &stdout, io.Discard)
	t.Logf("same setup, per-request files:\n%s", stdout.String())
	if err != nil || !strings.Contains(stdout.String(), "rank tests on the per-request files") {
		t.Errorf("two runs of one setup, per-request files: %v (status %d), want none", err, exitStatus(err))
	}
	stdout.Reset()
	err = run(context.Background(), append([]string{"report", "--compare", base + "l", slow + "l"}, tol...), &stdout, io.Discard)
	if exitStatus(err) != report.GateExitStatus || !strings.Contains(stdout.String(), "REGRESSED  ttft ") {
		t.Errorf("a 50 ms slower first byte, per-request files: %v (status %d)\n%s", err, exitStatus(err), stdout.String())
	}
	// Without --fail-on-regression the check is printed and the status is 0.
	if err := run(context.Background(), []string{"report", "--compare", base, slow}, io.Discard, io.Discard); err != nil {
		t.Errorf("a check without --fail-on-regression: %v", err)
	}
}
