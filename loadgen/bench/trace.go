package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/ragtail/ragtail/loadgen/shape"
)

// TraceOptions pace a trace replay (Dataset mooncake:FILE, azure:FILE or burstgpt:FILE).
type TraceOptions struct {
	Speedup       float64       // the trace's gaps are divided by this (2: twice as fast)
	Start, Length time.Duration // the window of trace time replayed (Length 0: to the end)

	file string               // the trace file read into reqs
	reqs []shape.TraceRequest // read once: bench plans the workload several times
}

// tracePlan builds the workload of a trace dataset; ok is false when --dataset is not one.
// A trace brings its own send times, so the arrival process and a rate do not apply: a finite
// rate (--request-rate, or a sweep's ladder) is an error.
func (o *Load) tracePlan(rate float64) (p plan, ok bool, err error) {
	format, file := o.Dataset.Trace, o.Dataset.File
	if format == "" {
		return p, false, nil
	}
	if !math.IsInf(rate, 1) {
		return p, true, fmt.Errorf("--dataset %s: a trace is sent on its own timestamps: pace it with --trace-speedup, not a request rate (%g req/s)", o.Dataset, rate)
	}
	if o.Sessions != "" {
		return p, true, fmt.Errorf("--dataset %s: a trace replays its own requests: it does not combine with --sessions", o.Dataset)
	}
	t := &o.Trace
	if t.file != file {
		f, err := os.Open(file)
		if err != nil {
			return p, true, fmt.Errorf("--dataset: %w", err)
		}
		reqs, err := shape.ReadTrace(f, format)
		_ = f.Close() // read only
		if err != nil {
			return p, true, fmt.Errorf("--dataset %s: %w", o.Dataset, err)
		}
		t.file, t.reqs = file, reqs
	}
	w, err := shape.Trace(t.reqs, shape.TraceWindow{Start: t.Start, Length: t.Length, Speedup: t.Speedup}, o.Seed)
	if err != nil {
		return p, true, fmt.Errorf("--dataset %s: %w", o.Dataset, err)
	}
	p.workload = w
	p.desc = fmt.Sprintf("%s trace %s replayed at %gx", format, filepath.Base(file), t.Speedup)
	if t.Start > 0 || t.Length > 0 {
		p.desc += fmt.Sprintf(" from %v", t.Start)
		if t.Length > 0 {
			p.desc += fmt.Sprintf(" for %v", t.Length)
		}
	}
	return p, true, nil
}
