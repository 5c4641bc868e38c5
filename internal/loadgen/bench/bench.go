// Package bench drives the load of ragtail's bench and sweep commands from their configuration
// (the commands' flags as structs, read into typed values as the command line is parsed): it
// plans the workload (datasets, arrival shapes, sessions, warmup, multi-host segments), runs it
// with Ctrl-C handling and progress, writes the result files, and bisects a sweep's highest
// rate under an SLO. It speaks HTTP only, through loadgen/client.
package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
)

// Options configure a bench run (the bench command's flags).
type Options struct {
	Load
	Concurrency  int     // cap on requests in flight with a rate, closed-loop users without one
	NumPrompts   int     // requests (or sessions) to send; 0 with a Duration: no limit
	RequestRate  float64 // +Inf: none
	Duration     time.Duration
	JSONOut      string             // ragtail.bench/v1 JSON file, "-" for stdout
	HTMLOut      string             // self-contained HTML report
	SaveDetailed string             // JSONL of every record
	Segment      *loadgen.SegmentOf // the share of a multi-host run this host sends; nil: all
	StartAt      time.Time          // when the run starts, on every host of a multi-host run; zero: now
	FailOn       []report.Threshold // thresholds on the result's keys; a breach is a *report.GateError
	// Cancel abandons a seeded share of the requests mid-way, as users closing a tab do.
	Cancel loadgen.Cancellations
	// ServerMetrics is the scrape of the target's Prometheus endpoint during the run.
	ServerMetrics ServerMetricsOptions
	// ClientOptions are added to the client's own (for example a tracer provider).
	ClientOptions []client.Option
	// Hold searches the highest rate that meets an SLO and holds it (--hold-slo).
	Hold HoldOptions
}

// Run runs the bench o describes: progress and notes go to stderr, the result files to the
// paths o names, and the text report (or the JSON, for --json -) to stdout. A run is these
// steps, in order, each a function called once:
//
//  1. validate: the limits and combinations no flag checks alone.
//  2. Dashboard.start: with --dashboard, the live view's address bound and served.
//  3. connect: the HTTP client, and the server's model when none was given.
//  4. plan: the workload at the rate and concurrency (the files it needs read once).
//  5. schedule: this host's share and start of a multi-host run, and the schedule's hash.
//  6. preflight: the workload's first request sent once, then the server's clock sampled.
//  7. scraper: the scrape of the target's Prometheus metrics, when it has any.
//  8. loadConfig: the load loadgen.Run sends, starting now or at --start-at.
//  9. openDetailed: the per-request file of --save-detailed, written as the run goes.
//  10. execute: the load under Ctrl-C handling (the first drains it, a second aborts it),
//     summarised as the records come.
//  11. writeResults: the result files, then the report on stdout.
//  12. finish: with --dashboard, the live view ends on the report and lingers for a page to
//     load it (--dashboard-linger).
//  13. verdict: the thresholds of --fail-on checked, and an error when the run was interrupted
//     or failed too often, else a *report.GateError when a threshold was breached.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	live, err := o.Load.Dashboard.start(ctx, "bench "+o.Load.URL, stderr)
	if err != nil {
		return err
	}
	defer live.close()
	c, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	p, err := o.Load.plan(o.RequestRate, o.Concurrency)
	if err != nil {
		return err
	}
	sched, err := o.schedule(p, stderr)
	if err != nil {
		return err
	}
	if err := o.preflight(ctx, c, p); err != nil {
		return err
	}
	scraper, err := o.ServerMetrics.scraper(ctx, o.Load.URL, stderr)
	if err != nil {
		return err
	}
	cfg, err := o.loadConfig(c, p, sched, stderr)
	if err != nil {
		return err
	}
	hold, err := o.holdLoad(&cfg, stderr)
	if err != nil {
		return err
	}
	detailed, err := openDetailed(o.SaveDetailed, stdout, cfg)
	if err != nil {
		return err
	}
	defer detailed.abort()
	live.title(fmt.Sprintf("bench %s: %s", o.Load.URL, describeStop(cfg, o.NumPrompts)))
	res, b, err := o.execute(ctx, cfg, scraper, detailed, live, hold, stderr)
	if err != nil {
		return err
	}
	if err := o.writeResults(c, b, detailed, stdout, stderr); err != nil {
		return err
	}
	live.finish(ctx, b, stderr)
	return o.verdict(res, b, stderr)
}

// validate checks the flags of a bench run that no flag checks alone.
func (o *Options) validate() error {
	if err := o.validateHold(); err != nil {
		return err
	}
	switch {
	case o.Concurrency < 0:
		return errors.New("--concurrency must not be negative")
	case o.NumPrompts < 0:
		return errors.New("--num-prompts must not be negative")
	case o.Duration < 0:
		return errors.New("--duration must not be negative")
	case o.NumPrompts == 0 && o.Duration == 0 && o.Hold.SLO == nil:
		return errors.New("give --num-prompts or --duration: the run would never end")
	case math.IsInf(o.RequestRate, 1) && o.Concurrency == 0 && o.NumPrompts == 0 &&
		!o.Load.Shape.profiled() && !o.Load.Shape.Article:
		return errors.New("an infinite rate without --concurrency sends every request at once: give --num-prompts, a --request-rate or --concurrency")
	case o.Load.MaxTokens < 1:
		return errors.New("--max-tokens must be positive")
	case o.Load.Slice < 0 || (o.Load.Slice > 0 && o.Load.Slice < 100*time.Millisecond):
		return errors.New("--slice: give a width of 100ms or more (0: no slices)")
	case o.Cancel.Fraction > 0 && !o.Load.Stream && (o.Cancel.After.Tokens > 0 || o.Cancel.After.AfterFirstToken):
		return fmt.Errorf("--cancel after=%s waits for streamed tokens: stream (--stream) or cancel after a time from the send (after=200ms)", o.Cancel.After)
	}
	if err := loadgen.CheckConcurrency(o.Concurrency, math.IsInf(o.RequestRate, 1)); err != nil {
		return fmt.Errorf("--concurrency: %w", err)
	}
	if err := o.ServerMetrics.validate(); err != nil {
		return err
	}
	if err := report.CheckThresholds(o.FailOn, o.Load.reportOptions()); err != nil {
		return fmt.Errorf("--fail-on %w", err)
	}
	return o.Load.validate()
}

// connect builds the run's HTTP client, with as many connections as requests in flight at
// most: the cap, or the closed loop's users.
func (o *Options) connect(ctx context.Context) (*client.Client, error) {
	conns := o.Concurrency
	if conns == 0 {
		conns = loadgen.DefaultMaxInFlight()
	}
	return o.Load.NewClient(ctx, append([]client.Option{client.WithMaxConns(conns)}, o.ClientOptions...)...)
}

// schedule is where a run's load goes in time and among hosts.
type schedule struct {
	segment *loadgen.SegmentOf // this host's share; nil: all of it
	start   time.Time          // the run's start on the monotonic clock; zero: once ready
	hash    string             // the schedule's: hosts that build the same schedule get the same
}

// schedule reads --segment and --start-at, warning when several hosts would send the same
// schedule, and hashes the schedule of p.
func (o *Options) schedule(p plan, stderr io.Writer) (schedule, error) {
	s := schedule{segment: o.Segment}
	if !o.StartAt.IsZero() {
		var err error
		if s.start, err = startInstant(o.StartAt); err != nil {
			return s, err
		}
	}
	switch {
	case o.Segment == nil && (!o.StartAt.IsZero() || os.Getenv("JOB_COMPLETION_INDEX") != ""):
		fmt.Fprintln(stderr, "warning: every host started together without --segment sends the same seeded schedule, so their\n"+
			"arrivals come in synchronised bursts; give each host --segment i/n (or its own --seed)")
	case o.Segment != nil && p.closedLoop:
		return s, errors.New("--segment shares out a schedule of arrivals: give a --request-rate (a closed loop has none)")
	case o.Segment != nil && o.Load.Warmup > 0:
		return s, errors.New("--segment: use --warmup-duration, the same stretch on every host, rather than --warmup")
	}
	var err error
	s.hash, err = o.Load.scheduleHash(p, o.NumPrompts, o.Duration)
	return s, err
}

// startInstant is the instant of the wall-clock time at on the monotonic clock; an instant in
// the past is an error.
func startInstant(at time.Time) (time.Time, error) {
	now := time.Now()
	wait := at.Sub(now)
	if wait < 0 {
		return now, fmt.Errorf("--start-at %s is %s in the past", at.Format(time.RFC3339Nano), (-wait).Round(time.Millisecond))
	}
	return now.Add(wait), nil
}

// scheduleHash identifies the schedule of p with the given limits: the first items of its
// workload (their intended times, sessions and requests) and the limits. Hosts that build the
// same schedule get the same hash, whatever their URL.
func (o *Load) scheduleHash(p plan, numPrompts int, d time.Duration) (string, error) {
	w, err := p.workload()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "ragtail schedule v1\n%s\nprompts %d duration %d warmup %d %d\n", p.desc, numPrompts, d, o.Warmup, o.WarmupDuration)
	enc := json.NewEncoder(h)
	for range 1000 {
		item, ok := w.Next()
		if !ok {
			break
		}
		if err := enc.Encode(item); err != nil {
			return "", fmt.Errorf("schedule hash: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// clockProbes is how many model-list requests sample the server's clock before a run.
const clockProbes = 8

// preflight sends the first request of p's workload once (Load.preflight), then samples the
// server's clock: the model list answers at once, so the samples are tight; a server without
// one leaves the estimate to the run's own responses.
func (o *Options) preflight(ctx context.Context, c *client.Client, p plan) error {
	if err := o.Load.preflight(ctx, c, p); err != nil {
		return err
	}
	if !o.Load.isKeyLookups() {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = c.ProbeClock(pctx, clockProbes)
		cancel()
	}
	return nil
}

// loadConfig is the load loadgen.Run sends: the workload of p (this host's share of it) from
// the schedule's start, or from now when it has none (after the preflight, whose wait is no
// request's send lag), with its progress on stderr.
func (o *Options) loadConfig(c *client.Client, p plan, sched schedule, stderr io.Writer) (loadgen.Config, error) {
	w, err := p.workload()
	if err != nil {
		return loadgen.Config{}, err
	}
	// Chosen over the whole schedule, before a segment takes its share, so that every host
	// abandons the requests a single host would.
	w = loadgen.WithCancellations(w, o.Cancel, o.Load.Seed)
	start := sched.start
	if start.IsZero() {
		start = time.Now()
	}
	progress := newProgressPrinter(stderr, o.Load.Quiet)
	cfg := loadgen.Config{
		Workload: w, Client: c, Concurrency: o.Concurrency, ClosedLoop: p.closedLoop,
		NumItems: o.NumPrompts, Duration: o.Duration, DrainTimeout: o.Load.drain(),
		Warmup: o.Load.Warmup, WarmupDuration: o.Load.WarmupDuration, Start: start,
		Progress: progress.print, ProgressInterval: progress.interval,
		Info: o.Load.runInfo(p, o.Concurrency, o.NumPrompts).WithSchedule(sched.hash, sched.segment).
			WithHTTPClient(c.HTTPClient()).WithCancel(o.Cancel),
		SessionStepLimit: sessionPatience(o.Load.reportOptions()),
		Agent:            o.Load.Agent.agent(o.Load.Seed),
	}
	if sched.segment != nil {
		// The share ends where the whole schedule would: the segment counts the prompts.
		cfg.Workload, cfg.NumItems = loadgen.Segment(w, *sched.segment, o.NumPrompts, o.Load.WarmupDuration), 0
	}
	return cfg, nil
}

// detailedOutput is the file of --save-detailed: every record, written as the run goes. Its
// methods do nothing on a nil detailedOutput (no --save-detailed).
type detailedOutput struct {
	w    *report.DetailedWriter
	file *outputFile
}

// openDetailed opens the file of --save-detailed for the run of cfg; nil when path is "".
func openDetailed(path string, stdout io.Writer, cfg loadgen.Config) (*detailedOutput, error) {
	if path == "" {
		return nil, nil
	}
	f, err := createOutput(path, stdout)
	if err != nil {
		return nil, err
	}
	return &detailedOutput{w: report.NewDetailedWriter(f, cfg.Start, cfg.Info), file: f}, nil
}

// writer is the writer of the records; nil for none.
func (d *detailedOutput) writer() *report.DetailedWriter {
	if d == nil {
		return nil
	}
	return d.w
}

// commit puts the file in place.
func (d *detailedOutput) commit() error {
	if d == nil {
		return nil
	}
	if err := d.w.Close(); err != nil {
		return fmt.Errorf("--save-detailed: %w", err)
	}
	return d.file.commit()
}

// abort removes the file unless it was committed.
func (d *detailedOutput) abort() {
	if d != nil {
		d.file.abort()
	}
}

// execute says on stderr what the run does, then runs cfg's load under Ctrl-C handling with the
// scrape of the server's metrics, summarised as the records come (each also to detailed).
func (o *Options) execute(ctx context.Context, cfg loadgen.Config, scraper *metricsScrape, detailed *detailedOutput, live *liveView, hold *holdController, stderr io.Writer) (*loadgen.Result, *report.Bench, error) {
	fmt.Fprintf(stderr, "ragtail bench: %s, %s\n", o.Load.URL, describeStop(cfg, o.NumPrompts))
	if seg := cfg.Info.Segment; seg != nil {
		fmt.Fprintf(stderr, "segment %s of schedule %s\n", seg, cfg.Info.ScheduleHash)
	}
	if wait := time.Until(cfg.Start); wait > 10*time.Millisecond {
		fmt.Fprintf(stderr, "waiting %s for --start-at %s\n", wait.Round(time.Millisecond), o.StartAt.Format(time.RFC3339Nano))
	}
	runCtx, stop, release := interrupts(ctx, stderr, o.Load.DrainTimeout)
	defer release()
	cfg.Stop = stop
	scraper.start(runCtx, cfg.Start)
	live.gauges(scraper)
	res, b, err := measure(runCtx, cfg, o.Load.reportOptions(), detailed.writer(), live, hold)
	if scraper != nil && b != nil && b.Cancellations != nil && b.Cancellations.Done > 0 {
		// A server notices that a client went a moment later: the last scrape is taken one
		// interval after the last cancellation at the earliest, so that it shows whether the
		// server freed the work.
		settle(runCtx, time.Until(b.Start.Add(b.Cancellations.LastAt+o.ServerMetrics.Interval)))
	}
	scraper.stop(runCtx, b, stderr)
	return res, b, err
}

// settle waits d, or until ctx is done.
func settle(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// describeStop says what the run of cfg will do, for the line printed before it starts.
func describeStop(cfg loadgen.Config, numPrompts int) string {
	var parts []string
	if cfg.Info.Shape != "" {
		parts = append(parts, cfg.Info.Shape)
	}
	switch {
	case cfg.ClosedLoop:
		parts = append(parts, fmt.Sprintf("closed loop of %d users", cfg.Concurrency))
	case cfg.Concurrency > 0:
		parts = append(parts, fmt.Sprintf("at most %d in flight", cfg.Concurrency))
	}
	if numPrompts > 0 {
		parts = append(parts, fmt.Sprintf("%d requests", numPrompts))
	}
	if cfg.Duration > 0 {
		parts = append(parts, "for "+cfg.Duration.String())
	}
	return strings.Join(parts, ", ")
}

// measure runs cfg and summarises it as the records come: the run keeps none of them, so its
// memory does not grow with its length. Each record also goes to detailed, when given, and to
// the live view, with the run's progress. With hold (--hold-slo), its controller runs beside the
// run and sees every record first; the summary then covers the held stretch, and its hold_slo
// section the search.
func measure(ctx context.Context, cfg loadgen.Config, ropts report.Options, detailed *report.DetailedWriter, live *liveView, hold *holdController) (*loadgen.Result, *report.Bench, error) {
	s := report.NewSummarizer(ropts)
	cfg.Stream = func(recs []loadgen.Record) {
		if hold != nil {
			hold.observe(recs)
		}
		if detailed != nil {
			detailed.Write(recs...)
		}
		s.Add(recs...)
	}
	live.watch(&cfg)
	var controller sync.WaitGroup
	runDone := make(chan struct{})
	if hold != nil {
		controller.Go(func() { hold.run(ctx, runDone) })
	}
	res, err := loadgen.Run(ctx, cfg)
	close(runDone)
	controller.Wait()
	if err != nil {
		return nil, nil, err
	}
	if hold == nil {
		return res, s.Bench(res), nil
	}
	if from, ok := hold.heldFrom(); ok {
		res.MeasuredFrom = from
	}
	b := s.Bench(res)
	b.HoldSLO = hold.report(cfg.Info.RequestRate)
	if r := b.HoldSLO.HeldRPS; r != nil && b.HoldSLO.HeldMet != nil {
		b.Config.RequestRate = *r
		b.Config.Shape = fmt.Sprintf("%s, held at %.4g req/s", b.Config.Shape, *r)
	}
	return res, b, nil
}

// writeResults writes the files first (when stdout is a closed pipe, | tee and Ctrl-C,
// printing may fail or end the process, and the results must be on disk by then), with the
// server's clock offset when the responses gave one, then the report to stdout.
func (o *Options) writeResults(c *client.Client, b *report.Bench, detailed *detailedOutput, stdout, stderr io.Writer) error {
	if err := detailed.commit(); err != nil {
		return err
	}
	off, hasClock := c.ClockOffset()
	if hasClock {
		b.Clock = &report.Clock{Offset: off.Offset, Uncertainty: off.Uncertainty, Samples: off.Samples,
			Method: report.ClockMethod}
	}
	if err := WriteOutputs(stdout, b, o.JSONOut, o.HTMLOut); err != nil {
		return err
	}
	if hasClock {
		fmt.Fprintf(stderr, "server clock: %+.3f ms from ours (+- %.3f ms, best of %d responses)\n",
			float64(off.Offset)/1e6, float64(off.Uncertainty)/1e6, off.Samples)
	}
	return nil
}

// verdict notes on stderr when requests waited for the default cap on requests in flight and
// writes there the thresholds of --fail-on checked; it fails a run that was interrupted or whose
// requests failed more than --max-error-rate allows, and then one that breached a threshold (a
// *report.GateError).
func (o *Options) verdict(res *loadgen.Result, b *report.Bench, stderr io.Writer) error {
	noteCap(stderr, res)
	var gate error
	if len(o.FailOn) > 0 {
		checked, err := report.CheckBench(b, o.FailOn)
		if err != nil {
			return fmt.Errorf("--fail-on: %w", err)
		}
		gate = report.WriteThresholds(stderr, checked)
	}
	if res.Config.Interrupted {
		return errors.New("interrupted: the results above cover what completed")
	}
	if err := checkErrorRate(b, o.Load.MaxErrorRate); err != nil {
		return err
	}
	return gate
}

// noteCap says when requests waited for the open loop's default cap on requests in flight: the
// target fell behind, and their wait is in their send lag.
func noteCap(stderr io.Writer, res *loadgen.Result) {
	if res.SlotWaits > 0 && res.Config.InFlightCap > 0 {
		fmt.Fprintf(stderr, "note: %d requests found all %d slots of the default cap on requests in flight taken and waited\n"+
			"(their wait is in their send lag); --concurrency sets another cap\n", res.SlotWaits, res.Config.InFlightCap)
	}
}

// checkErrorRate fails when more than max of the measured requests failed.
func checkErrorRate(b *report.Bench, maxRate float64) error {
	n := b.Completed + b.Failed
	if n == 0 || float64(b.Failed) <= maxRate*float64(n) {
		return nil
	}
	msg := fmt.Sprintf("%d of %d requests failed (%.1f%%), more than --max-error-rate %g allows", b.Failed, n,
		100*float64(b.Failed)/float64(n), maxRate)
	if len(b.Errors) > 0 {
		e := b.Errors[0]
		msg += fmt.Sprintf("; most were %s (%d): %s", e.Kind, e.Count, e.Example)
	}
	return errors.New(msg)
}
