package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/shape"
)

// traceOptions are the flags of a trace replay (--dataset mooncake:FILE, azure:FILE or
// burstgpt:FILE).
type traceOptions struct {
	speedup       float64
	start, length time.Duration

	file string               // the trace file read into reqs
	reqs []shape.TraceRequest // read once: bench plans the workload several times
}

func (t *traceOptions) register(fs *flag.FlagSet) {
	fs.Float64Var(&t.speedup, "trace-speedup", 1, "trace datasets: divide the trace's gaps by this (2: twice as fast)")
	fs.DurationVar(&t.start, "trace-start", 0, "trace datasets: skip the requests of this first stretch of trace time")
	fs.DurationVar(&t.length, "trace-length", 0, "trace datasets: replay this much trace time from --trace-start (0: to the end)")
}

// traceDataset splits a --dataset of the form FORMAT:FILE naming a trace format.
func traceDataset(dataset string) (shape.TraceFormat, string, bool) {
	name, file, ok := strings.Cut(dataset, ":")
	if !ok {
		return "", "", false
	}
	f, err := shape.ParseTraceFormat(name)
	if err != nil {
		return "", "", false
	}
	return f, file, true
}

// tracePlan builds the workload of a trace dataset; ok is false when --dataset is not one.
// A trace brings its own send times, so the arrival process and a rate do not apply: a finite
// rate (--request-rate, or a sweep's ladder) is an error.
func (o *loadOptions) tracePlan(rate float64) (p plan, ok bool, err error) {
	format, file, ok := traceDataset(o.dataset)
	if !ok {
		return p, false, nil
	}
	if !math.IsInf(rate, 1) {
		return p, true, fmt.Errorf("--dataset %s: a trace is sent on its own timestamps: pace it with --trace-speedup, not a request rate (%g req/s)", o.dataset, rate)
	}
	if o.sessions != "" {
		return p, true, fmt.Errorf("--dataset %s: a trace replays its own requests: it does not combine with --sessions", o.dataset)
	}
	if o.trace.file != file {
		f, err := os.Open(file)
		if err != nil {
			return p, true, fmt.Errorf("--dataset: %w", err)
		}
		reqs, err := shape.ReadTrace(f, format)
		_ = f.Close() // read only
		if err != nil {
			return p, true, fmt.Errorf("--dataset %s: %w", o.dataset, err)
		}
		o.trace.file, o.trace.reqs = file, reqs
	}
	w, err := shape.Trace(o.trace.reqs, shape.TraceWindow{Start: o.trace.start, Length: o.trace.length, Speedup: o.trace.speedup}, o.seed)
	if err != nil {
		return p, true, fmt.Errorf("--dataset %s: %w", o.dataset, err)
	}
	p.workload = w
	p.desc = fmt.Sprintf("%s trace %s replayed at %gx", format, filepath.Base(file), o.trace.speedup)
	if o.trace.start > 0 || o.trace.length > 0 {
		p.desc += fmt.Sprintf(" from %v", o.trace.start)
		if o.trace.length > 0 {
			p.desc += fmt.Sprintf(" for %v", o.trace.length)
		}
	}
	return p, true, nil
}
