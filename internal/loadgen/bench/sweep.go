package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// SweepOptions configure a sweep (the sweep command's flags).
type SweepOptions struct {
	Load
	Rates                        []float64 // request rates, increasing
	RateStart, RateStep, RateMax float64
	Concurrencies                []int // closed-loop users, increasing
	Concurrency                  int   // with rates: cap on requests in flight
	PointDuration                time.Duration
	PointPrompts                 int
	SLO                          *report.PercentileSLO // of max_rps_under_slo; nil: none
	KneeThreshold                float64               // ms per extra req/s
	Bisect                       bool
	Tolerance                    float64 // req/s; 0: 5% of the bracket's low end
	Pause                        time.Duration
	JSONOut, HTMLOut             string
	// Segment (i/n) sends share i of every point's schedule, for a sweep that several hosts
	// run together (nil: all of it); StartAt is the instant the first point starts on every
	// host (zero: now), and point k starts pointPeriod later than point k-1.
	Segment *loadgen.SegmentOf
	StartAt time.Time
	// ServerMetrics is the scrape of the target's Prometheus endpoint during each point; each
	// point's result has its own server_metrics.
	ServerMetrics ServerMetricsOptions
}

// pointSlack is the time a point's period leaves beyond its sending, drain and pause, for
// summarising it and planning the next.
const pointSlack = time.Second

// pointPeriod is the time from one point's start to the next's when hosts send a sweep
// together: the point's warmup and sending, its drain, the pause and pointSlack, so that
// every host starts every point on one instant however its drain went.
func (o *SweepOptions) pointPeriod() time.Duration {
	return o.Load.WarmupDuration + o.PointDuration + o.Load.DrainTimeout + o.Pause + pointSlack
}

// multiHost reads --segment and --start-at: the share of each point this host sends (nil for
// all of it) and the start of the first point (zero: each point starts when the last ended).
func (o *SweepOptions) multiHost(users []int, stderr io.Writer) (*loadgen.SegmentOf, time.Time, error) {
	var start time.Time
	if !o.StartAt.IsZero() {
		var err error
		if start, err = startInstant(o.StartAt); err != nil {
			return nil, start, err
		}
	}
	if o.Segment == nil {
		if !o.StartAt.IsZero() {
			fmt.Fprintln(stderr, "warning: every host started together without --segment sends the same seeded schedules, so their\n"+
				"arrivals come in synchronised bursts; give each host --segment i/n (or its own --seed)")
		}
		return nil, start, nil
	}
	switch {
	case len(users) > 0:
		return nil, start, errors.New("--segment shares out schedules of arrivals: give --rates (a ladder of users has none)")
	case o.SLO != nil && o.Bisect:
		return nil, start, errors.New("--segment: a bisection's probes follow each host's own results; pass --bisect=false, merge the\n" +
			"segments with ragtail report, and read max_rps_under_slo off the merged ladder")
	case o.Load.Warmup > 0:
		return nil, start, errors.New("--segment: use --warmup-duration, the same stretch on every host, rather than --warmup")
	case o.Load.DrainTimeout <= 0:
		return nil, start, errors.New("--segment needs a bounded --drain-timeout: every host starts each point on one instant, a drain later")
	case start.IsZero():
		start = time.Now()
		fmt.Fprintln(stderr, "warning: --segment without --start-at: this host's points start when it started; give every host one --start-at")
	}
	return o.Segment, start, nil
}

// Sweep runs the sweep o describes: progress and notes go to stderr, the result files to the
// paths o names, and the text report to stdout. A sweep is these steps, in order, each a
// function called once:
//
//  1. validate: the ladder (rates or users), and the flags a bench checks too.
//  2. multiHost: this host's share of each point and the first point's start, for a sweep
//     that several hosts send together.
//  3. Dashboard.start: with --dashboard, the live view's address bound and served.
//  4. NewClient: the HTTP client, and the server's model when none was given.
//  5. preflight: the first point's first request sent once.
//  6. scraper: the scrape of the target's Prometheus metrics, when it has any.
//  7. runLadder: the ladder's points, each a bench run of --point-duration, under Ctrl-C
//     handling (the first stops the sweep after the point's drain, a second aborts it).
//  8. findMax: with an SLO, the bisection of the highest rate (or the most
//     users of a closed loop) that meets it, and the interval of that load from every point
//     and probe (report.BracketSLO).
//  9. writeResults: the result files and the report (the dashboard ends on it and lingers),
//     then an error for a sweep that was interrupted or whose requests failed too often.
func Sweep(ctx context.Context, o SweepOptions, stdout, stderr io.Writer) error {
	rates, users, err := o.validate()
	if err != nil {
		return err
	}
	seg, start, err := o.multiHost(users, stderr)
	if err != nil {
		return err
	}
	live, err := o.Load.Dashboard.start(ctx, "sweep "+o.Load.URL, stderr)
	if err != nil {
		return err
	}
	defer live.close()
	c, err := o.Load.NewClient(ctx)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	if err := o.preflight(ctx, c, rates, users); err != nil {
		return err
	}
	ms, err := o.ServerMetrics.scraper(ctx, o.Load.URL, stderr)
	if err != nil {
		return err
	}
	runCtx, stop, release := interrupts(ctx, stderr, o.Load.DrainTimeout)
	defer release()
	s := &sweeper{o: &o, c: c, ropts: o.Load.reportOptions(), stderr: stderr, stop: stop, seg: seg, start: start, scrape: ms, live: live}
	benches, interrupted, err := s.runLadder(runCtx, rates, users)
	if err != nil {
		return err
	}
	sopts := report.SweepOptions{KneeThreshold: o.KneeThreshold, SLO: o.SLO}
	if o.SLO != nil && o.Bisect && !interrupted {
		if interrupted, err = s.findMax(runCtx, benches, &sopts, len(rates) > 0); err != nil {
			return err
		}
	}
	return o.writeResults(ctx, stdout, stderr, benches, sopts, interrupted, live)
}

// validate checks the flags of a sweep and returns its ladder: the rates, or the users.
func (o *SweepOptions) validate() (rates []float64, users []int, err error) {
	if rates, users, err = o.ladder(); err != nil {
		return nil, nil, err
	}
	if o.PointDuration <= 0 {
		return nil, nil, errors.New("--point-duration must be positive")
	}
	if err := o.Load.validate(); err != nil {
		return nil, nil, err
	}
	return rates, users, o.ServerMetrics.validate()
}

// pointLoad is the rate (+Inf for none) and the concurrency of point i of the ladder.
func (o *SweepOptions) pointLoad(rates []float64, users []int, i int) (float64, int) {
	if len(rates) > 0 {
		return rates[i], o.Concurrency
	}
	return math.Inf(1), users[i]
}

// preflight sends the first request of the first point's workload once, before the sweep.
func (o *SweepOptions) preflight(ctx context.Context, c *client.Client, rates []float64, users []int) error {
	p, err := o.Load.plan(o.pointLoad(rates, users, 0))
	if err != nil {
		return err
	}
	return o.Load.preflight(ctx, c, p)
}

// runLadder runs the ladder's points in turn, resting between them, until the last, one that
// Ctrl-C interrupted, or a first that failed too often. It returns the points' results and
// whether Ctrl-C stopped the sweep.
func (s *sweeper) runLadder(ctx context.Context, rates []float64, users []int) ([]*report.Bench, bool, error) {
	var benches []*report.Bench
	points := max(len(rates), len(users))
	for i := range points {
		rate, n := s.o.pointLoad(rates, users, i)
		s.k = i
		b, err := s.point(ctx, rate, n, fmt.Sprintf("point %d/%d", i+1, points))
		switch {
		case errors.Is(err, errInterrupted):
			return benches, true, nil
		case err != nil:
			return nil, false, err
		}
		benches = append(benches, b)
		if b.Config.Interrupted {
			return benches, true, nil
		}
		if i == 0 && checkErrorRate(b, s.o.Load.MaxErrorRate) != nil {
			fmt.Fprintln(s.stderr, "the first point failed too often: the sweep stops here")
			return benches, false, nil
		}
		if err := s.rest(ctx); err != nil {
			return benches, true, nil
		}
	}
	return benches, false, nil
}

// findMax bisects the highest rate (with rates) or the most users of the closed loop that
// meet the SLO from the ladder's results, into sopts, with the interval of that load from every
// point and probe. It says on stderr when the SLO was never met or always, and reports whether
// Ctrl-C stopped it.
func (s *sweeper) findMax(ctx context.Context, benches []*report.Bench, sopts *report.SweepOptions, rates bool) (interrupted bool, err error) {
	slo := s.o.SLO
	axis, first, what := report.AxisConcurrency, fmt.Sprintf("%d users", benches[0].Config.Concurrency), "the most users"
	if rates {
		axis, first, what = report.AxisRate, fmt.Sprintf("%g req/s", benches[0].Config.RequestRate), "the highest rate"
		sopts.MaxRPS, sopts.Probes, err = s.bisect(ctx, benches)
	} else {
		sopts.MaxUsers, sopts.Probes, err = s.bisectUsers(ctx, benches)
	}
	iv := report.BracketSLO(*slo, axis, append(slices.Clone(benches), s.probed...))
	sopts.Interval = &iv
	switch {
	case errors.Is(err, stats.ErrSLONeverMet):
		fmt.Fprintf(s.stderr, "the SLO %s is not met even at %s: no max\n", slo, first)
	case errors.Is(err, stats.ErrSLOAlwaysMet):
		fmt.Fprintf(s.stderr, "the SLO %s still held at %s tried: the max is at least that\n", slo, what)
	case err != nil && (ctx.Err() != nil || errors.Is(err, errInterrupted)):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

// writeResults writes the sweep of benches summarised with sopts, its files first and then the
// report on stdout, ends the live view on it, and fails a sweep whose requests failed too
// often or that was interrupted.
func (o *SweepOptions) writeResults(ctx context.Context, stdout, stderr io.Writer, benches []*report.Bench, sopts report.SweepOptions, interrupted bool, live *liveView) error {
	doc := report.SummarizeSweep(benches, sopts)
	if err := WriteOutputs(stdout, doc, o.JSONOut, o.HTMLOut); err != nil {
		return err
	}
	live.finish(ctx, doc, stderr)
	if err := sweepErrorRate(benches, o.Load.MaxErrorRate); err != nil {
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
func (o *SweepOptions) ladder() (rates []float64, users []int, err error) {
	arith := o.RateStart > 0 || o.RateStep > 0 || o.RateMax > 0
	given := 0
	for _, b := range []bool{len(o.Rates) > 0, arith, len(o.Concurrencies) > 0} {
		if b {
			given++
		}
	}
	if given != 1 {
		return nil, nil, errors.New("give one ladder: --rates, --rate-start/--rate-step/--rate-max, or --concurrencies")
	}
	switch {
	case len(o.Rates) > 0 && !increasing(o.Rates):
		return nil, nil, errors.New("the ladder's rates must increase")
	case len(o.Rates) > 0:
		return o.Rates, nil, nil
	case len(o.Concurrencies) > 0 && !increasing(o.Concurrencies):
		return nil, nil, errors.New("the ladder's concurrencies must increase")
	case len(o.Concurrencies) > 0:
		return nil, o.Concurrencies, nil
	}
	if !(o.RateStart > 0) || !(o.RateStep > 0) || o.RateMax < o.RateStart {
		return nil, nil, errors.New("--rate-start and --rate-step must be positive and --rate-max at least --rate-start")
	}
	for i := 0; ; i++ {
		r := o.RateStart + float64(i)*o.RateStep
		if r > o.RateMax*(1+1e-9) {
			return rates, nil, nil
		}
		rates = append(rates, r)
		if len(rates) > 1000 {
			return nil, nil, errors.New("the ladder has over 1000 points")
		}
	}
}

// sweepSLORE matches the pP_METRIC:MS spelling of an SLO (p95_e2el:2000).
var sweepSLORE = regexp.MustCompile(`^[pP]([0-9.]+)_([a-z0-9_]+):([0-9.eE+-]+)$`)

// ParseSLO parses an SLO as p95_e2el:2000 or as report.ParsePercentileSLO does.
func ParseSLO(s string) (report.PercentileSLO, error) {
	s = strings.TrimSpace(s)
	if m := sweepSLORE.FindStringSubmatch(s); m != nil {
		return report.ParsePercentileSLO(m[2] + ":p" + m[1] + ":" + m[3])
	}
	return report.ParsePercentileSLO(s)
}

// sweeper runs the points and probes of a sweep.
type sweeper struct {
	o      *SweepOptions
	c      *client.Client
	ropts  report.Options
	stderr io.Writer
	stop   <-chan struct{} // closed by a first Ctrl-C: the point drains and the sweep ends
	seg    *loadgen.SegmentOf
	start  time.Time       // of the first point, when hosts send the sweep together; else zero
	k      int             // the ladder's point being run
	scrape *metricsScrape  // of the server's metrics, for the next point; nil for none
	probed []*report.Bench // the bisection's probes, in order
	live   *liveView       // the dashboard; nil for none
}

// pointStart is when point k starts: zero (as soon as it can) for a sweep of one host. A point
// whose instant has passed (the period was too short for this host) starts at once, with a
// warning: its requests would otherwise all be late.
func (s *sweeper) pointStart() time.Time {
	if s.start.IsZero() {
		return time.Time{}
	}
	at := s.start.Add(time.Duration(s.k) * s.o.pointPeriod())
	if late := -time.Until(at); late > 0 {
		fmt.Fprintf(s.stderr, "warning: point %d starts %s after its instant (--start-at plus %d periods of %s) on this host;\n"+
			"its segments on the other hosts are not aligned with it\n", s.k+1, late.Round(time.Millisecond), s.k, s.o.pointPeriod())
		return time.Time{}
	}
	return at
}

// point runs one point of the sweep and summarises it.
func (s *sweeper) point(ctx context.Context, rate float64, concurrency int, label string) (*report.Bench, error) {
	p, err := s.o.Load.plan(rate, concurrency)
	if err != nil {
		return nil, err
	}
	desc := fmt.Sprintf("%g req/s", rate)
	if p.closedLoop {
		desc = fmt.Sprintf("%d users", concurrency)
	}
	fmt.Fprintf(s.stderr, "%s: %s for %s\n", label, desc, s.o.PointDuration)
	s.live.phase(label + ": " + desc)
	select {
	case <-s.stop:
		return nil, errInterrupted
	default:
	}
	cfg, err := s.pointConfig(p, concurrency)
	if err != nil {
		return nil, err
	}
	ms, err := s.nextScrape()
	if err != nil {
		return nil, err
	}
	if ms != nil {
		at := cfg.Start
		if at.IsZero() {
			at = time.Now()
		}
		ms.start(ctx, at)
	}
	s.live.gauges(ms)
	res, b, err := measure(ctx, cfg, s.ropts, nil, s.live, nil)
	s.live.gauges(nil) // between points the server's gauges go unread
	if err != nil {
		ms.stop(ctx, nil, io.Discard)
		return nil, err
	}
	ms.stop(ctx, b, indent{s.stderr})
	noteCap(s.stderr, res)
	fmt.Fprintln(s.stderr, s.pointLine(b))
	return b, nil
}

// pointConfig is the load of a point of plan p: this host's share of it, from the point's
// start.
func (s *sweeper) pointConfig(p plan, concurrency int) (loadgen.Config, error) {
	w, err := p.workload()
	if err != nil {
		return loadgen.Config{}, err
	}
	progress := newProgressPrinter(s.stderr, s.o.Load.Quiet)
	cfg := loadgen.Config{
		Workload: w, Client: s.c, Concurrency: concurrency, ClosedLoop: p.closedLoop,
		NumItems: s.o.PointPrompts, Duration: s.o.PointDuration, DrainTimeout: s.o.Load.drain(),
		Warmup: s.o.Load.Warmup, WarmupDuration: s.o.Load.WarmupDuration, Stop: s.stop, Start: s.pointStart(),
		Progress: progress.print, ProgressInterval: progress.interval,
		Info:  s.o.Load.runInfo(p, concurrency, s.o.PointPrompts).WithHTTPClient(s.c.HTTPClient()),
		Agent: s.o.Load.Agent.agent(s.o.Load.Seed),
	}
	if s.seg != nil {
		hash, err := s.o.Load.scheduleHash(p, s.o.PointPrompts, s.o.PointDuration)
		if err != nil {
			return cfg, err
		}
		cfg.Info = cfg.Info.WithSchedule(hash, s.seg)
		// The share ends where the whole schedule would: the segment counts the prompts.
		cfg.Workload, cfg.NumItems = loadgen.Segment(w, *s.seg, s.o.PointPrompts, s.o.Load.WarmupDuration), 0
		fmt.Fprintf(s.stderr, "  segment %s of schedule %s\n", s.seg, hash)
	}
	return cfg, nil
}

// nextScrape is the scrape of the server's metrics for this point (nil for none); the next
// point (or probe) scrapes with a fresh one, since a Scraper runs once.
func (s *sweeper) nextScrape() (*metricsScrape, error) {
	ms := s.scrape
	if ms == nil {
		return nil, nil
	}
	var err error
	s.scrape, err = ms.again()
	return ms, err
}

// pointLine sums up a point's result, and whether it met the SLO.
func (s *sweeper) pointLine(b *report.Bench) string {
	line := fmt.Sprintf("  achieved %.2f req/s, %d done, %d failed", b.RequestThroughput, b.Completed, b.Failed)
	if h := b.Histograms[report.MetricE2EL]; h != nil && h.Count() > 0 {
		line += fmt.Sprintf(", e2el p50 %.0f ms, p99 %.0f ms", msf(h.Quantile(0.5)), msf(h.Quantile(0.99)))
	}
	if slo := s.o.SLO; slo != nil {
		met, v := slo.Met(b)
		verdict := "misses the SLO"
		if met {
			verdict = "meets the SLO"
		}
		line += fmt.Sprintf(", %s = %.0f ms: %s", slo, msf(v), verdict)
	}
	return line
}

// rest waits between points (hosts that send a sweep together wait for each point's start
// instead).
func (s *sweeper) rest(ctx context.Context) error {
	if s.o.Pause <= 0 || !s.start.IsZero() {
		return nil
	}
	t := time.NewTimer(s.o.Pause)
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
	lo, hi, byRate, ok := ladderBracket(*s.o.SLO, ladder, func(b *report.Bench) float64 { return b.Config.RequestRate })
	if !ok {
		return nil, nil, fmt.Errorf("bisect: %w", stats.ErrSLONeverMet)
	}
	tol := s.o.Tolerance
	if !(tol > 0) {
		tol = 0.05 * lo
	}
	rate, probes, err := stats.BisectMaxRate(ctx, lo, hi, tol, func(ctx context.Context, rate float64) (bool, error) {
		return probeAt(ctx, s, byRate, rate, rate, s.o.Concurrency)
	})
	if b, ok := byRate[rate]; ok && rate > 0 {
		v := b.RequestThroughput
		return &v, probes, err
	}
	return nil, probes, err
}

// bisectUsers brackets the most users meeting the SLO with the ladder and refines it by
// probing, one user at a time at the end.
func (s *sweeper) bisectUsers(ctx context.Context, ladder []*report.Bench) (*int, []stats.Probe, error) {
	lo, hi, byUsers, ok := ladderBracket(*s.o.SLO, ladder, func(b *report.Bench) int { return b.Config.Concurrency })
	if !ok {
		return nil, nil, fmt.Errorf("bisect: %w", stats.ErrSLONeverMet)
	}
	users, probes, err := stats.BisectMaxUsers(ctx, lo, hi, func(ctx context.Context, users int) (bool, error) {
		return probeAt(ctx, s, byUsers, users, math.Inf(1), users)
	})
	if users > 0 {
		return &users, probes, err
	}
	return nil, probes, err
}

// ladderBracket is the bracket the ladder gives a bisection on the load of its points: the last
// point meeting the SLO before the first that does not (twice it when every point met it), and
// the points by load. ok is false when the first point already missed.
func ladderBracket[T int | float64](slo report.PercentileSLO, ladder []*report.Bench, load func(*report.Bench) T) (lo, hi T, byLoad map[T]*report.Bench, ok bool) {
	byLoad = map[T]*report.Bench{}
	for _, b := range ladder {
		byLoad[load(b)] = b
	}
	for _, b := range ladder {
		if met, _ := slo.Met(b); !met {
			hi = load(b)
			break
		}
		lo = load(b)
	}
	if lo == 0 {
		return 0, 0, byLoad, false
	}
	if hi == 0 {
		hi = 2 * lo // every rung met it: the bisection doubles from here
	}
	return lo, hi, byLoad, true
}

// probeAt is one probe of a bisection at load: the point already run there, if any, else a new
// point at rate with users (after the rest between points), kept in byLoad and s.probed. It
// reports whether the SLO held.
func probeAt[T int | float64](ctx context.Context, s *sweeper, byLoad map[T]*report.Bench, load T, rate float64, users int) (bool, error) {
	if b, ok := byLoad[load]; ok {
		met, _ := s.o.SLO.Met(b)
		return met, nil
	}
	if err := s.rest(ctx); err != nil {
		return false, err
	}
	s.k++ // a probe takes the next period after the ladder's
	b, err := s.point(ctx, rate, users, fmt.Sprintf("probe %d", len(s.probed)+1))
	if err != nil {
		return false, err
	}
	if b.Config.Interrupted {
		return false, errInterrupted
	}
	byLoad[load] = b
	s.probed = append(s.probed, b)
	met, _ := s.o.SLO.Met(b)
	return met, nil
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
