package report

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// exponentialRun is an open-loop run of n requests at 50 req/s whose TTFT is shift plus an
// exponential of mean 100 ms, followed by 10 chunks 10 ms apart; failures of them fail.
func exponentialRun(seed uint64, n int, shift time.Duration, failures float64) *loadgen.Result {
	r := rand.New(rand.NewPCG(seed, 7))
	res := &loadgen.Result{Start: testStart, Config: loadgen.RunInfo{RequestRate: 50, Seed: seed}}
	for i := range n {
		intended := time.Duration(i) * 20 * time.Millisecond
		rec := loadgen.Record{Index: i, Intended: intended, Sent: intended}
		if r.Float64() < failures {
			rec.Status, rec.End = 503, intended+time.Millisecond
		} else {
			ttft := shift + time.Duration(r.ExpFloat64()*100*float64(time.Millisecond))
			rec.Status, rec.FirstToken, rec.OutputTokens = 200, intended+ttft, 10
			for c := range 10 {
				rec.Chunks = append(rec.Chunks, loadgen.Chunk{At: rec.FirstToken + time.Duration(c)*10*time.Millisecond, Tokens: 1})
			}
			rec.End = rec.FirstToken + 90*time.Millisecond
		}
		res.Records = append(res.Records, rec)
		res.Duration = max(res.Duration, rec.End)
	}
	return res
}

func regressed(rs []Regression) []string {
	var keys []string
	for _, r := range rs {
		if r.Regressed {
			keys = append(keys, r.Key)
		}
	}
	return keys
}

func TestRegressionsFindAShift(t *testing.T) {
	t.Parallel()
	base := Summarize(exponentialRun(1, 600, 0, 0), Options{})
	slower := Summarize(exponentialRun(2, 600, 50*time.Millisecond, 0), Options{})
	rs := Regressions(base, slower, DefaultRegressionTolerance)
	got := strings.Join(regressed(rs), ",")
	// A 50 ms shift moves the median (69 ms) by 72%, the P90 (230 ms) by 22%: far beyond the
	// intervals of 600 samples. The tail (P99.9) has no interval; TPOT and ITL do not move.
	for _, want := range []string{"p50_ttft_ms", "p90_ttft_ms", "p50_e2el_ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("regressed %s; want %s among them", got, want)
		}
	}
	for _, not := range []string{"tpot", "itl", "throughput", "error_rate", "p99.9"} {
		if strings.Contains(got, not) {
			t.Errorf("regressed %s; want no %s", got, not)
		}
	}
	if back := regressed(Regressions(slower, base, DefaultRegressionTolerance)); len(back) != 0 {
		t.Errorf("the faster run regressed %v", back)
	}
	var out bytes.Buffer
	n, checked := WriteRegressions(&out, "base.json", "new.json", rs, DefaultRegressionTolerance)
	var gate *GateError
	if err := RegressionError(n, checked); !errors.As(err, &gate) || gate.Failed != n || n == 0 || checked <= n {
		t.Fatalf("%d of %d regressed: %v, want a GateError", n, checked, err)
	}
	if !strings.Contains(out.String(), "REGRESSED  p50_ttft_ms") || !strings.Contains(out.String(), "n/a        p99.9_ttft_ms") {
		t.Errorf("output:\n%s", out.String())
	}
	if err := RegressionError(0, checked); err != nil {
		t.Errorf("none regressed: %v", err)
	}
}

// TestRegressionsFalseAlarms runs pairs of runs of one distribution: non-overlap of two 95%
// intervals of like widths happens with probability 2(1 - Phi(1.96 sqrt 2)) = 0.0056 for one
// figure. Over 200 pairs at tolerance 0, P50 TTFT flags ~1.1 pairs: more than 6 has Poisson
// probability under 0.001.
func TestRegressionsFalseAlarms(t *testing.T) {
	t.Parallel()
	alarms := 0
	for i := range uint64(200) {
		a := Summarize(exponentialRun(2*i+1, 400, 0, 0), Options{Metrics: []string{MetricTTFT}})
		b := Summarize(exponentialRun(2*i+2, 400, 0, 0), Options{Metrics: []string{MetricTTFT}})
		for _, r := range Regressions(a, b, 0) {
			if r.Key == "p50_ttft_ms" && r.Regressed {
				alarms++
			}
		}
	}
	t.Logf("%d false alarms of 200", alarms)
	if alarms > 6 {
		t.Errorf("%d false alarms of 200, want about 1", alarms)
	}
}

func TestErrorRateInterval(t *testing.T) {
	t.Parallel()
	// Wilson's interval of 30 failures in 600, by hand: center (p + z²/2n)/(1 + z²/n) = 0.052863,
	// half-width z/(1 + z²/n)·sqrt(p(1-p)/n + z²/4n²) = 0.017617: [0.035246, 0.070480].
	e := errorRateEstimate(&Bench{Completed: 570, Failed: 30})
	if math.Abs(e.Lo-0.035246) > 2e-6 || math.Abs(e.Hi-0.070480) > 2e-6 || e.Value != 0.05 {
		t.Errorf("Wilson interval of 30/600 = %+v", e)
	}
	base := Summarize(exponentialRun(1, 600, 0, 0), Options{})
	failing := Summarize(exponentialRun(2, 600, 0, 0.05), Options{})
	if got := regressed(Regressions(base, failing, DefaultRegressionTolerance)); !contains(got, "error_rate") {
		t.Errorf("5%% failures against none: regressed %v", got)
	}
	few := Summarize(exponentialRun(2, 600, 0, 0.003), Options{})
	if got := regressed(Regressions(base, few, DefaultRegressionTolerance)); contains(got, "error_rate") {
		t.Errorf("0.3%% failures against none: regressed %v", got)
	}
}

func TestThroughputInterval(t *testing.T) {
	t.Parallel()
	// 400 completions: 1.96/sqrt(400) = 9.8% either way.
	e := throughputEstimate(&Bench{Completed: 400, Duration: 10 * time.Second}, 40)
	if math.Abs(e.Lo-36.08) > 1e-3 || math.Abs(e.Hi-43.92) > 1e-3 {
		t.Errorf("throughput interval %+v, want [36.08, 43.92]", e)
	}
}
