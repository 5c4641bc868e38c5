package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/stats"
)

type sweepOptions struct {
	load          loadOptions
	rates         string
	rateStart     float64
	rateStep      float64
	rateMax       float64
	concurrencies string
	concurrency   int
	pointDuration time.Duration
	pointPrompts  int
	slo           string
	kneeThreshold float64
	bisect        bool
	tolerance     float64
	pause         time.Duration
	jsonOut       string
	htmlOut       string
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o sweepOptions
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
	o.load.register(fs)
	fs.StringVar(&o.rates, "rates", "", "request rates of the ladder, comma-separated (req/s)")
	fs.Float64Var(&o.rateStart, "rate-start", 0, "first rate of an arithmetic ladder")
	fs.Float64Var(&o.rateStep, "rate-step", 0, "step of an arithmetic ladder")
	fs.Float64Var(&o.rateMax, "rate-max", 0, "last rate of an arithmetic ladder (inclusive)")
	fs.StringVar(&o.concurrencies, "concurrencies", "", "closed-loop users of the ladder, comma-separated, instead of rates")
	fs.IntVar(&o.concurrency, "concurrency", 0, "with rates: cap on requests in flight (0: none)")
	fs.DurationVar(&o.pointDuration, "point-duration", 30*time.Second, "how long each point (and probe) sends")
	fs.IntVar(&o.pointPrompts, "num-prompts", 0, "stop a point after this many requests, too (0: no limit)")
	fs.StringVar(&o.slo, "slo", "", "percentile SLO for max_rps_under_slo: pP_METRIC:MS (p95_e2el:2000) or METRIC:pP:MS")
	fs.Float64Var(&o.kneeThreshold, "knee-threshold", stats.DefaultKneeSlope, "knee: P99 E2EL growth in ms per extra req/s (the article's 120)")
	fs.BoolVar(&o.bisect, "bisect", true, "with --slo and rates: refine the max rate by bisection between the ladder's points")
	fs.Float64Var(&o.tolerance, "rps-tolerance", 0, "bisection stops when the bracket is this narrow, in req/s (default 5% of its low end)")
	fs.DurationVar(&o.pause, "pause", 2*time.Second, "idle time between points, for the server to settle")
	fs.StringVar(&o.jsonOut, "json", "", "write the ragtail.sweep/v1 JSON to this file ('-' for stdout)")
	fs.StringVar(&o.htmlOut, "html", "", "write a self-contained HTML report with the sweep curve to this file")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	o.load.set = flagsSet(fs)
	rates, users, err := o.ladder()
	if err != nil {
		return err
	}
	var slo *report.PercentileSLO
	if o.slo != "" {
		s, err := parseSweepSLO(o.slo)
		if err != nil {
			return fmt.Errorf("--slo: %w", err)
		}
		slo = &s
	}
	if o.pointDuration <= 0 {
		return errors.New("--point-duration must be positive")
	}
	if err := o.load.validate(); err != nil {
		return err
	}
	ropts, err := o.load.reportOptions()
	if err != nil {
		return err
	}
	c, err := o.load.newClient(ctx)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	if err := o.load.preflight(ctx, c); err != nil {
		return err
	}

	runCtx, stop, release := interrupts(ctx, stderr, o.load.drainTimeout)
	defer release()
	s := &sweeper{o: &o, c: c, ropts: ropts, stderr: stderr, slo: slo, stop: stop}
	ctx = runCtx
	var benches []*report.Bench
	interrupted := false
	points := max(len(rates), len(users))
	for i := range points {
		rate, n := math.Inf(1), o.concurrency
		if len(rates) > 0 {
			rate = rates[i]
		} else {
			n = users[i]
		}
		b, err := s.point(ctx, rate, n, fmt.Sprintf("point %d/%d", i+1, points))
		if errors.Is(err, errInterrupted) {
			interrupted = true
			break
		}
		if err != nil {
			return err
		}
		benches = append(benches, b)
		if b.Config.Interrupted {
			interrupted = true
			break
		}
		if i == 0 && checkErrorRate(b, o.load.maxErrorRate) != nil {
			fmt.Fprintln(stderr, "the first point failed too often: the sweep stops here")
			break
		}
		if err := s.rest(ctx); err != nil {
			interrupted = true
			break
		}
	}

	sopts := report.SweepOptions{KneeThreshold: o.kneeThreshold, SLO: slo}
	if slo != nil && len(rates) > 0 && o.bisect && !interrupted {
		maxRPS, probes, err := s.bisect(ctx, benches)
		switch {
		case errors.Is(err, stats.ErrSLONeverMet):
			fmt.Fprintf(stderr, "the SLO %s is not met even at %g req/s: no max rate\n", slo, benches[0].Config.RequestRate)
		case errors.Is(err, stats.ErrSLOAlwaysMet):
			fmt.Fprintf(stderr, "the SLO %s still held at the highest rate tried: the max rate is at least that\n", slo)
		case err != nil && (ctx.Err() != nil || errors.Is(err, errInterrupted)):
			interrupted = true
		case err != nil:
			return err
		}
		if maxRPS != nil {
			sopts.MaxRPS = maxRPS
		}
		sopts.Probes = probes
	}
	sw := report.SummarizeSweep(benches, sopts)
	if err := writeOutputs(stdout, sw, o.jsonOut, o.htmlOut); err != nil {
		return err
	}
	if err := sweepErrorRate(benches, o.load.maxErrorRate); err != nil {
		return err
	}
	if interrupted {
		return errors.New("interrupted: the results above cover the points that ran")
	}
	return nil
}

// errInterrupted ends a sweep that a first Ctrl-C stopped.
var errInterrupted = errors.New("interrupted")

// sweepErrorRate fails when more than max of the sweep's measured requests failed, over all its
// points (overload failures at the top of a ladder are data, a broken target fails them all).
func sweepErrorRate(benches []*report.Bench, maxRate float64) error {
	total := &report.Bench{}
	errs := map[string]*report.ErrorCount{}
	for _, b := range benches {
		total.Completed += b.Completed
		total.Failed += b.Failed
		for _, e := range b.Errors {
			if errs[e.Kind] == nil {
				errs[e.Kind] = &report.ErrorCount{Kind: e.Kind, Example: e.Example}
			}
			errs[e.Kind].Count += e.Count
		}
	}
	for _, e := range errs {
		if len(total.Errors) == 0 || e.Count > total.Errors[0].Count {
			total.Errors = []report.ErrorCount{*e}
		}
	}
	return checkErrorRate(total, maxRate)
}

// ladder returns the rates or the user counts of the ladder.
func (o *sweepOptions) ladder() (rates []float64, users []int, err error) {
	arith := o.rateStart > 0 || o.rateStep > 0 || o.rateMax > 0
	given := 0
	for _, b := range []bool{o.rates != "", arith, o.concurrencies != ""} {
		if b {
			given++
		}
	}
	if given != 1 {
		return nil, nil, errors.New("give one ladder: --rates, --rate-start/--rate-step/--rate-max, or --concurrencies")
	}
	switch {
	case o.rates != "":
		for f := range strings.SplitSeq(o.rates, ",") {
			r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || !(r > 0) || math.IsInf(r, 0) {
				return nil, nil, fmt.Errorf("--rates: %q is not a positive rate", f)
			}
			rates = append(rates, r)
		}
	case arith:
		if !(o.rateStart > 0) || !(o.rateStep > 0) || o.rateMax < o.rateStart {
			return nil, nil, errors.New("--rate-start and --rate-step must be positive and --rate-max at least --rate-start")
		}
		for i := 0; ; i++ {
			r := o.rateStart + float64(i)*o.rateStep
			if r > o.rateMax*(1+1e-9) {
				break
			}
			rates = append(rates, r)
			if len(rates) > 1000 {
				return nil, nil, errors.New("the ladder has over 1000 points")
			}
		}
	default:
		for f := range strings.SplitSeq(o.concurrencies, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nil, nil, fmt.Errorf("--concurrencies: %q is not a positive count", f)
			}
			users = append(users, n)
		}
	}
	for i := 1; i < len(rates); i++ {
		if rates[i] <= rates[i-1] {
			return nil, nil, errors.New("the ladder's rates must increase")
		}
	}
	for i := 1; i < len(users); i++ {
		if users[i] <= users[i-1] {
			return nil, nil, errors.New("the ladder's concurrencies must increase")
		}
	}
	return rates, users, nil
}

// sweepSLORE matches the pP_METRIC:MS spelling of an SLO (p95_e2el:2000).
var sweepSLORE = regexp.MustCompile(`^[pP]([0-9.]+)_([a-z0-9_]+):([0-9.eE+-]+)$`)

// parseSweepSLO parses an SLO as p95_e2el:2000 or as report.ParsePercentileSLO does.
func parseSweepSLO(s string) (report.PercentileSLO, error) {
	s = strings.TrimSpace(s)
	if m := sweepSLORE.FindStringSubmatch(s); m != nil {
		return report.ParsePercentileSLO(m[2] + ":p" + m[1] + ":" + m[3])
	}
	return report.ParsePercentileSLO(s)
}

// sweeper runs the points and probes of a sweep.
type sweeper struct {
	o      *sweepOptions
	c      *client.Client
	ropts  report.Options
	stderr io.Writer
	slo    *report.PercentileSLO
	stop   <-chan struct{} // closed by a first Ctrl-C: the point drains and the sweep ends
}

// point runs one point of the sweep and summarises it.
func (s *sweeper) point(ctx context.Context, rate float64, concurrency int, label string) (*report.Bench, error) {
	p, err := s.o.load.plan(rate, concurrency)
	if err != nil {
		return nil, err
	}
	desc := fmt.Sprintf("%g req/s", rate)
	if p.closedLoop {
		desc = fmt.Sprintf("%d users", concurrency)
	}
	progress := newProgressPrinter(s.stderr, s.o.load.quiet)
	fmt.Fprintf(s.stderr, "%s: %s for %s\n", label, desc, s.o.pointDuration)
	select {
	case <-s.stop:
		return nil, errInterrupted
	default:
	}
	_, b, err := measure(ctx, loadgen.Config{
		Workload: p.workload, Client: s.c, Concurrency: concurrency, ClosedLoop: p.closedLoop,
		NumItems: s.o.pointPrompts, Duration: s.o.pointDuration, DrainTimeout: s.o.load.drain(),
		Warmup: s.o.load.warmup, WarmupDuration: s.o.load.warmupDuration, Stop: s.stop,
		Progress: progress.print, ProgressInterval: progress.interval,
		Info: s.o.load.runInfo(p, concurrency, s.o.pointPrompts),
	}, s.ropts, nil)
	if err != nil {
		return nil, err
	}
	line := fmt.Sprintf("  achieved %.2f req/s, %d done, %d failed", b.RequestThroughput, b.Completed, b.Failed)
	if h := b.Histograms[report.MetricE2EL]; h != nil && h.Count() > 0 {
		line += fmt.Sprintf(", e2el p50 %.0f ms, p99 %.0f ms", msf(h.Quantile(0.5)), msf(h.Quantile(0.99)))
	}
	if s.slo != nil {
		met, v := s.slo.Met(b)
		line += fmt.Sprintf(", %s = %.0f ms: ", s.slo, msf(v))
		if met {
			line += "meets the SLO"
		} else {
			line += "misses the SLO"
		}
	}
	fmt.Fprintln(s.stderr, line)
	return b, nil
}

// rest waits between points.
func (s *sweeper) rest(ctx context.Context) error {
	if s.o.pause <= 0 {
		return nil
	}
	t := time.NewTimer(s.o.pause)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return errInterrupted
	}
}

// bisect brackets the max rate meeting the SLO with the ladder and refines it by probing. It
// returns the achieved rate of the best probe (or rung) that met the SLO.
func (s *sweeper) bisect(ctx context.Context, ladder []*report.Bench) (*float64, []stats.Probe, error) {
	byRate := map[float64]*report.Bench{}
	lo, hi := 0.0, 0.0
	for _, b := range ladder {
		byRate[b.Config.RequestRate] = b
	}
	for _, b := range ladder {
		met, _ := s.slo.Met(b)
		if !met {
			hi = b.Config.RequestRate
			break
		}
		lo = b.Config.RequestRate
	}
	if lo == 0 {
		return nil, nil, fmt.Errorf("bisect: %w", stats.ErrSLONeverMet)
	}
	if hi == 0 {
		hi = 2 * lo // every rung met it: BisectMaxRate doubles from here
	}
	tol := s.o.tolerance
	if !(tol > 0) {
		tol = 0.05 * lo
	}
	n := 0
	rate, probes, err := stats.BisectMaxRate(ctx, lo, hi, tol, func(ctx context.Context, rate float64) (bool, error) {
		if b, ok := byRate[rate]; ok {
			met, _ := s.slo.Met(b)
			return met, nil
		}
		if err := s.rest(ctx); err != nil {
			return false, err
		}
		n++
		b, err := s.point(ctx, rate, s.o.concurrency, fmt.Sprintf("probe %d", n))
		if err != nil {
			return false, err
		}
		if b.Config.Interrupted {
			return false, errInterrupted
		}
		byRate[rate] = b
		met, _ := s.slo.Met(b)
		return met, nil
	})
	if b, ok := byRate[rate]; ok && rate > 0 {
		v := b.RequestThroughput
		return &v, probes, err
	}
	return nil, probes, err
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
