package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// jsonGoldenDocs are documents that reach every optional key, null and omission of the
// ragtail.bench/v1, ragtail.sweep/v1 and ragtail.requests/v1 encodings.
func jsonGoldenDocs(tb testing.TB) []struct {
	name string
	v    any
} {
	tb.Helper()
	everything := withServerMetrics(withClock(Summarize(syntheticResult(9, 120), goldenOptions(tb))))
	everything.Warmup = 7
	everything.CachedTokens, everything.ReasoningTokens = 1234, 56
	everything.Config.RequestRate = math.Inf(1)
	everything.Config.Concurrency = 8
	everything.Config.Segment = &loadgen.SegmentOf{Index: 1, Count: 3}
	everything.Config.ScheduleHash = "0123456789abcdef"
	everything.Config.Interrupted = true
	everything.Config.Model = "org/<model>&co" // written as is, not HTML-escaped
	temperature := 0.7
	everything.Config = everything.Config.WithRequests("testdata/sharegpt.json", true, &temperature).
		WithProvenance("v1.2.3", []string{"ragtail", "bench", "--api-key", "sk-secret", "--dataset", "testdata/sharegpt.json"})
	everything.Sources = []string{"a.json", "b.json"}
	everything.Errors = append(everything.Errors, ErrorCount{Kind: "no_example", Count: 1})

	merged, err := Merge(Summarize(syntheticResult(3, 200), goldenOptions(tb)), Summarize(syntheticResult(4, 150), goldenOptions(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	metrics, err := ParseMetrics("ttft,e2el")
	if err != nil {
		tb.Fatal(err)
	}
	plain := Summarize(syntheticResult(11, 80), Options{Metrics: metrics, Percentiles: []float64{50, 99}})
	// A session that never completed nor was interrupted: its rates are NaN, written null.
	plain.Sessions = &Sessions{Count: 2, Truncated: 2}

	slo, err := ParsePercentileSLO("e2el:p95:2000")
	if err != nil {
		tb.Fatal(err)
	}
	maxRPS := 63.5
	var benches []*Bench
	for _, p := range testSweep(tb).Points {
		benches = append(benches, p.Bench)
	}
	bisected := SummarizeSweep(benches, SweepOptions{SLO: &slo, MaxRPS: &maxRPS,
		Probes: []stats.Probe{{Rate: 60, Meets: true}, {Rate: 70}}})
	var conc []*Bench
	for _, c := range []int{1, 2, 4} {
		res := hockeyResult(2, float64(10*c), 200, 1e9, 0)
		res.Config.RequestRate, res.Config.Concurrency = math.Inf(1), c
		conc = append(conc, Summarize(res, Options{}))
	}
	return []struct {
		name string
		v    any
	}{
		{"bench", Summarize(syntheticResult(5, 300), goldenOptions(tb))},
		{"empty-bench", Summarize(&loadgen.Result{Start: testStart}, Options{})},
		{"everything-bench", everything},
		{"merged-bench", merged},
		{"plain-bench", plain},
		{"sweep", testSweep(tb)},
		{"bisected-sweep", bisected},
		{"concurrency-sweep", SummarizeSweep(conc, SweepOptions{})},
	}
}

// TestJSONEncodingGolden pins the bytes of every encoding: keys, their order, number
// formatting, nulls and omissions.
func TestJSONEncodingGolden(t *testing.T) {
	for _, d := range jsonGoldenDocs(t) {
		t.Run(d.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteJSON(&buf, d.v); err != nil {
				t.Fatal(err)
			}
			golden(t, "json/"+d.name+".json", buf.Bytes())
			// What is written reads back to the same document.
			f, err := Decode(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			var v any = f.Bench
			if f.Sweep != nil {
				v = f.Sweep
			}
			var again bytes.Buffer
			if err := WriteJSON(&again, v); err != nil {
				t.Fatal(err)
			}
			// p99_error_pct is recomputed from P99s rounded to the microsecond, so its last
			// digit may move; every other line must be the same.
			got, want := strings.Split(again.String(), "\n"), strings.Split(buf.String(), "\n")
			if len(got) != len(want) {
				t.Fatalf("read back: %d lines, wrote %d", len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] && !strings.Contains(want[i], `"p99_error_pct"`) {
					t.Fatalf("line %d read back as %s, written %s", i+1, got[i], want[i])
				}
			}
		})
	}
	t.Run("requests", func(t *testing.T) {
		res := syntheticResult(4, 40)
		res.Duration = 3*time.Second + 250*time.Millisecond
		var buf bytes.Buffer
		if err := WriteDetailedJSONL(&buf, res); err != nil {
			t.Fatal(err)
		}
		golden(t, "json/requests.jsonl", buf.Bytes())
	})
}
