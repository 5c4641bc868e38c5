package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// TraceOptions pace a trace replay (Dataset mooncake:FILE, azure:FILE or burstgpt:FILE).
type TraceOptions struct {
	Speedup       float64       // the trace's gaps are divided by this (2: twice as fast)
	Start, Length time.Duration // the window of trace time replayed (Length 0: to the end)

	file string                 // the trace file read into reqs
	reqs []dataset.TraceRequest // read once: bench plans the workload several times
}

// tracePlan is the plan of a trace dataset (--dataset mooncake:FILE, azure:FILE or
// burstgpt:FILE). A trace brings its own send times, so the arrival process and a rate do not
// apply: a finite rate (--request-rate, or a sweep's ladder) is an error.
func (o *Load) tracePlan(rate float64) (plan, error) {
	d := o.Dataset
	if !math.IsInf(rate, 1) {
		return plan{}, fmt.Errorf("--dataset %s: a trace is sent on its own timestamps: pace it with --trace-speedup, not a request rate (%g req/s)", d, rate)
	}
	t := &o.Trace
	if t.file != d.File {
		f, err := os.Open(d.File)
		if err != nil {
			return plan{}, fmt.Errorf("--dataset: %w", err)
		}
		reqs, err := dataset.ReadTrace(f, d.Trace)
		_ = f.Close() // read only
		if err != nil {
			return plan{}, fmt.Errorf("--dataset %s: %w", d, err)
		}
		t.file, t.reqs = d.File, reqs
	}
	reqs, window, seed := t.reqs, shape.TraceWindow{Start: t.Start, Length: t.Length, Speedup: t.Speedup}, o.Seed
	p := plan{desc: fmt.Sprintf("%s trace %s replayed at %gx", d.Trace, filepath.Base(d.File), t.Speedup)}
	if t.Start > 0 || t.Length > 0 {
		p.desc += fmt.Sprintf(" from %v", t.Start)
		if t.Length > 0 {
			p.desc += fmt.Sprintf(" for %v", t.Length)
		}
	}
	p.build = func() (loadgen.Workload, error) {
		w, err := shape.Trace(reqs, window, seed)
		if err != nil {
			return nil, fmt.Errorf("--dataset %s: %w", d, err)
		}
		return w, nil
	}
	return p, nil
}
