package main

import (
	"context"
	"io"

	"github.com/ragtail/ragtail/internal/loadgen/bench"
)

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o bench.SweepOptions
	fs := newFlagSet("sweep", "[flags]", `Runs a ladder of load points against an OpenAI-compatible endpoint, each a bench run of
--point-duration, and reports the latency curve, its knee and the highest request rate that
meets an SLO.

The ladder is of request rates (--rates 1,2,4,8, or --rate-start/--rate-step/--rate-max), open
loop with the arrivals of --shape, or of closed-loop users (--concurrencies 1,2,4,8). The knee is
found two ways: the article's rule (the first point where P99 E2EL grows by more than
--knee-threshold ms per extra req/s) and the point farthest below the chord of the curve. With
--slo (e.g. p95_e2el:2000, the article's "P95 <= 2 s") the highest rate meeting it is bracketed
by the ladder and refined by bisection, each probe another run of --point-duration.

--dashboard 127.0.0.1:5665 serves a live page of the sweep while it runs (the point under way,
throughput, latency percentiles, errors, the server's gauges), ending on the report.

Example:
  ragtail sweep --url http://127.0.0.1:8000/v1/chat/completions --rates 2,4,8,16,32 \
    --point-duration 30s --slo p95_e2el:2000 --json sweep.json --html sweep.html`)
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	o.FlagsParsed(fs)
	return bench.Sweep(ctx, o, stdout, stderr)
}
