package main

import (
	"context"
	"io"
	"time"

	"github.com/ragtail/ragtail/loadgen/bench"
	"github.com/ragtail/ragtail/loadgen/stats"
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

Example:
  ragtail sweep --url http://127.0.0.1:8000/v1/chat/completions --rates 2,4,8,16,32 \
    --point-duration 30s --slo p95_e2el:2000 --json sweep.json --html sweep.html`)
	registerLoad(fs, &o.Load)
	fs.StringVar(&o.Rates, "rates", "", "request rates of the ladder, comma-separated (req/s)")
	fs.Float64Var(&o.RateStart, "rate-start", 0, "first rate of an arithmetic ladder")
	fs.Float64Var(&o.RateStep, "rate-step", 0, "step of an arithmetic ladder")
	fs.Float64Var(&o.RateMax, "rate-max", 0, "last rate of an arithmetic ladder (inclusive)")
	fs.StringVar(&o.Concurrencies, "concurrencies", "", "closed-loop users of the ladder, comma-separated, instead of rates")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "with rates: cap on requests in flight (0: the default, 1024 or fewer under the open-file limit)")
	fs.DurationVar(&o.PointDuration, "point-duration", 30*time.Second, "how long each point (and probe) sends")
	fs.IntVar(&o.PointPrompts, "num-prompts", 0, "stop a point after this many requests, too (0: no limit)")
	fs.StringVar(&o.SLO, "slo", "", "percentile SLO for max_rps_under_slo: pP_METRIC:MS (p95_e2el:2000) or METRIC:pP:MS")
	fs.Float64Var(&o.KneeThreshold, "knee-threshold", stats.DefaultKneeSlope, "knee: P99 E2EL growth in ms per extra req/s (the article's 120)")
	fs.BoolVar(&o.Bisect, "bisect", true, "with --slo and rates: refine the max rate by bisection between the ladder's points")
	fs.Float64Var(&o.Tolerance, "rps-tolerance", 0, "bisection stops when the bracket is this narrow, in req/s (default 5% of its low end)")
	fs.DurationVar(&o.Pause, "pause", 2*time.Second, "idle time between points, for the server to settle")
	fs.StringVar(&o.JSONOut, "json", "", "write the ragtail.sweep/v1 JSON to this file ('-' for stdout)")
	fs.StringVar(&o.HTMLOut, "html", "", "write a self-contained HTML report with the sweep curve to this file")
	fs.StringVar(&o.Segment, "segment", "", "multi-host sweeps: send share i/n (i from 0 to n-1) of every point's seeded schedule;\n"+
		"ragtail report merges the n sweep files point by point (needs --rates and --bisect=false)")
	fs.StringVar(&o.StartAt, "start-at", "", "start the first point at this wall-clock time (RFC 3339 or Unix seconds) and each next one\n"+
		"--warmup-duration + --point-duration + --drain-timeout + --pause + 1s later, so that several hosts run each point together")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	set := flagsSet(fs)
	o.SendTemperature, o.OverrideMaxTokens = set["temperature"], set["max-tokens"]
	return bench.Sweep(ctx, o, stdout, stderr)
}
