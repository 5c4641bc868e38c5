package report

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// TestFitP99BeyondHistogramRange checks that a bench whose fitted tail model extrapolates a P99
// far beyond the histogram's range (a heavy tail's Pareto fit) reads back: the writer writes
// such figures, so the reader must take them.
func TestFitP99BeyondHistogramRange(t *testing.T) {
	res := &loadgen.Result{}
	for i := 1; i <= 400; i++ {
		d := time.Duration(i*i) * time.Millisecond
		res.Records = append(res.Records, loadgen.Record{Index: i - 1, Intended: 0, Sent: 0, FirstByte: d / 2, FirstToken: d / 2, End: d, Status: 200})
	}
	b, err := json.Marshal(Summarize(res, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	tail, _ := doc["tail"].(map[string]any)
	e2el, _ := tail["e2el"].(map[string]any)
	fits, _ := e2el["fits"].([]any)
	if len(fits) == 0 {
		t.Fatalf("no tail fits in %s", b)
	}
	const far = 4.69e9 // ms: 54 days, beyond the histogram's highest trackable value
	fits[0].(map[string]any)["p99_ms"] = far
	b, err = json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var back Bench
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("a fit's P99 of %g ms does not read back: %v", far, err)
	}
	var got time.Duration
	for _, mt := range back.Tails {
		if mt.Metric == MetricE2EL && len(mt.Fits) > 0 {
			got = mt.Fits[0].P99
		}
	}
	if want := time.Duration(far * float64(time.Millisecond)); got < want-time.Millisecond || got > want+time.Millisecond {
		t.Errorf("fit P99 read back as %v, want %v", got, want)
	}
}
