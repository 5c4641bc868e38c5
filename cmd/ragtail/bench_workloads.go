package main

import (
	"flag"

	"github.com/ragtail/ragtail/loadgen/bench"
)

// registerTrace registers the flags of a trace replay (--dataset mooncake:FILE, azure:FILE or
// burstgpt:FILE).
func registerTrace(fs *flag.FlagSet, t *bench.TraceOptions) {
	fs.Float64Var(&t.Speedup, "trace-speedup", 1, "trace datasets: divide the trace's gaps by this (2: twice as fast)")
	fs.DurationVar(&t.Start, "trace-start", 0, "trace datasets: skip the requests of this first stretch of trace time")
	fs.DurationVar(&t.Length, "trace-length", 0, "trace datasets: replay this much trace time from --trace-start (0: to the end)")
}
