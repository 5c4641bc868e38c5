package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// HoldOptions configure bench --hold-slo: a run that searches the highest offered rate meeting
// a percentile SLO, in windows judged one after another while the load goes on, then holds that
// rate and judges the held stretch as a whole.
type HoldOptions struct {
	SLO       *HoldObjective // nil: no search
	Window    time.Duration  // each rate of the search is judged over this stretch
	HoldFor   time.Duration  // the found rate is held this long
	Growth    float64        // factor of the rate between windows until the first miss (or meet)
	Tolerance float64        // req/s: the bisection stops at this bracket width; 0: 5% of its low end
	// conflicts are the flags given that a search sets itself (--num-prompts, --duration, ...);
	// orphans the --hold-* flags given without --hold-slo.
	conflicts, orphans []string
}

// registerFlags registers the --hold-* flags on fs.
func (h *HoldOptions) registerFlags(fs *flag.FlagSet) {
	fs.Var(holdSLOValue{&h.SLO}, "hold-slo", "find the SLO's edge in one run: `SLO` as a --fail-on threshold on a percentile of ttft, ttfo or e2el\n"+
		"(p95_ttft_ms<=2000; sweep's p95_ttft:2000 also reads). Open loop only (a closed loop's users are not\n"+
		"searched): from --request-rate, each --hold-window of Poisson arrivals (gamma or constant with --shape) is\n"+
		"judged on the requests intended in it, a failed one or one still running past the limit counting as over;\n"+
		"the rate grows by --hold-growth until a window misses (shrinks until one meets), is bisected between the\n"+
		"highest rate met and the lowest missed down to --hold-tolerance, and the highest met is held for --hold-for\n"+
		"and judged as a whole. Between windows, while a window's last requests finish, the rate is the highest\n"+
		"met divided by --hold-growth. The result's figures cover the held stretch; hold_slo in the JSON has\n"+
		"every window, the held rate and the bracket [highest met, lowest missed)")
	fs.DurationVar(&h.Window, "hold-window", 10*time.Second, "--hold-slo: how long each rate of the search is sent and judged")
	fs.DurationVar(&h.HoldFor, "hold-for", time.Minute, "--hold-slo: how long the rate found is held")
	fs.Float64Var(&h.Growth, "hold-growth", 2, "--hold-slo: the rate is multiplied by this after a met window (divided after a missed one) until\nthe search has a rate met and one missed")
	fs.Float64Var(&h.Tolerance, "hold-tolerance", 0, "--hold-slo: bisection stops when the bracket is this narrow, in req/s (default 5% of its low end)")
}

// flagsParsed notes the flags given that a search would override, or the --hold-* flags given
// without a search.
func (h *HoldOptions) flagsParsed(set map[string]bool) {
	if h.SLO == nil {
		for _, f := range []string{"hold-window", "hold-for", "hold-growth", "hold-tolerance"} {
			if set[f] {
				h.orphans = append(h.orphans, "--"+f)
			}
		}
		return
	}
	for _, f := range []string{"num-prompts", "duration", "warmup", "warmup-duration", "segment"} {
		if set[f] {
			h.conflicts = append(h.conflicts, "--"+f)
		}
	}
}

// validateHold checks a --hold-slo run's flags: an open loop of lone requests at a first rate;
// and that no --hold-* flag was given without --hold-slo.
func (o *Options) validateHold() error {
	h, l := &o.Hold, &o.Load
	if h.SLO == nil {
		if len(h.orphans) > 0 {
			return fmt.Errorf("%s applies to a search: give --hold-slo too", strings.Join(h.orphans, ", "))
		}
		return nil
	}
	switch {
	case len(h.conflicts) > 0:
		return fmt.Errorf("--hold-slo sets the run's length and has no warmup (its first windows warm the target): drop %s",
			strings.Join(h.conflicts, ", "))
	case math.IsInf(o.RequestRate, 1) || !(o.RequestRate > 0):
		return errors.New("--hold-slo searches an open loop's rate: give the first rate to try with --request-rate (closed-loop users are not searched)")
	case h.Window < 100*time.Millisecond:
		return errors.New("--hold-window: give 100ms or more")
	case h.HoldFor <= 0:
		return errors.New("--hold-for must be positive")
	case !(h.Growth > 1) || math.IsInf(h.Growth, 0):
		return errors.New("--hold-growth must be a number above 1")
	case !(h.Tolerance >= 0) || math.IsInf(h.Tolerance, 0):
		return errors.New("--hold-tolerance must be 0 (5% of the bracket's low end) or a positive rate")
	case l.Sessions != "" || l.MultiTurn || l.Dataset.Trace != "" || l.Shape.Article || l.Shape.profiled() || l.Agent.On:
		return errors.New("--hold-slo paces lone requests: drop --sessions, --multi-turn, trace datasets, --shape article, ramp or step, and the tool loop")
	case o.Cancel.Fraction > 0:
		return errors.New("--hold-slo judges every request against the SLO: drop --cancel")
	case !l.Stream && h.SLO.Metric != report.MetricE2EL:
		return fmt.Errorf("--hold-slo %s needs streamed responses (--stream) for %s; without streaming only e2el is measured", h.SLO, h.SLO.Metric)
	}
	return nil
}

// HoldObjective is the SLO of --hold-slo: a percentile of a latency measured from the intended
// send time (ttft, ttfo or e2el) under a limit, so that a request still running after the
// limit has surely missed it.
type HoldObjective struct {
	report.Threshold         // KEY OP LIMIT as --fail-on reads it: p95_ttft_ms<=2000
	Metric           string  // ttft, ttfo or e2el
	Percentile       float64 // in percent
}

// holdMetrics are the metrics a hold can bound: each measured from the intended send time.
var holdMetrics = []string{report.MetricTTFT, report.MetricTTFO, report.MetricE2EL}

// ParseHoldObjective reads --hold-slo: a --fail-on threshold on a percentile key with < or <=
// (p95_ttft_ms<=2000), or sweep's --slo spelling (p95_ttft:2000, ttft:p95:2000), which means <=.
func ParseHoldObjective(s string) (*HoldObjective, error) {
	var t report.Threshold
	if strings.ContainsAny(s, "<>") {
		ts, err := report.ParseThresholds(s)
		if err != nil {
			return nil, err
		}
		if len(ts) != 1 {
			return nil, fmt.Errorf("%q: give one SLO", s)
		}
		t = ts[0]
	} else {
		slo, err := ParseSLO(s)
		if err != nil {
			return nil, fmt.Errorf("%q: want KEY<=MS as --fail-on reads it, e.g. p95_ttft_ms<=2000: %w", s, err)
		}
		t = report.Threshold{Key: "p" + formatPercent(slo.Percentile) + "_" + slo.Metric + "_ms", Op: "<=", Limit: msf(slo.Limit)}
	}
	metric, p, ok := t.PercentileOf()
	switch {
	case !ok || !slices.Contains(holdMetrics, metric):
		return nil, fmt.Errorf("%s: want a percentile of %s, e.g. p95_ttft_ms<=2000", t, strings.Join(holdMetrics, ", "))
	case t.Op != "<" && t.Op != "<=":
		return nil, fmt.Errorf("%s: an SLO bounds a latency from above: use < or <=", t)
	case !(t.Limit > 0) || t.Limit > float64(stats.HistogramHighest/time.Millisecond):
		return nil, fmt.Errorf("%s: want a positive limit in milliseconds up to one hour", t)
	}
	return &HoldObjective{Threshold: t, Metric: metric, Percentile: p}, nil
}

// formatPercent formats a percentile as the JSON keys do: 95, 99.9.
func formatPercent(p float64) string { return fmt.Sprint(p) }

// limit is the SLO's limit.
func (h *HoldObjective) limit() time.Duration {
	return time.Duration(math.Round(h.Limit * float64(time.Millisecond)))
}

// value is the SLO's metric of a successful record, and whether it has one.
func (h *HoldObjective) value(r *loadgen.Record) (time.Duration, bool) {
	switch h.Metric {
	case report.MetricTTFT:
		return r.TTFT()
	case report.MetricTTFO:
		return r.TTFO()
	}
	return r.E2EL(), true
}

// holdSLOValue is the --hold-slo flag.
type holdSLOValue struct{ p **HoldObjective }

func (v holdSLOValue) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return (*v.p).String()
}

func (v holdSLOValue) Set(s string) error {
	h, err := ParseHoldObjective(s)
	if err != nil {
		return err
	}
	*v.p = h
	return nil
}

// maxSearchSteps bounds how many times the search grows (or shrinks) the rate before it has a
// bracket: 2^16 times the first rate with the default growth.
const maxSearchSteps = 16

// rateSearch is the search of --hold-slo as a pure sequence: the rate to try next, and the
// verdict of each window at it. It grows the rate by growth while windows meet the SLO (shrinks
// it while they miss), then bisects between the highest rate met and the lowest missed until
// they are at most the tolerance apart. It reads no clock.
type rateSearch struct {
	growth, tol float64
	next        float64 // the rate to try
	lo, hi      float64 // highest met and lowest missed; 0 until seen
	steps       int     // grows or shrinks before a bracket
	outcome     string  // "" while searching
}

func newRateSearch(start, growth, tol float64) *rateSearch {
	return &rateSearch{growth: growth, tol: tol, next: start}
}

// done reports whether the search has ended, and how (a report.Hold* outcome).
func (s *rateSearch) done() bool { return s.outcome != "" }

// tolerance is the bracket width at which the search stops.
func (s *rateSearch) tolerance() float64 {
	if s.tol > 0 {
		return s.tol
	}
	return 0.05 * s.lo
}

// settleRate is the rate sent after a window at s.next ends, while its last requests finish:
// the highest rate met so far (s.next before any was) divided by the growth. A window that
// overloaded the target leaves a backlog that a rate near the edge would never drain; a rate
// well below it drains the backlog and keeps the target under load, so that the next window
// starts from neither a queue nor an idle server.
func (s *rateSearch) settleRate() float64 {
	if s.lo > 0 {
		return s.lo / s.growth
	}
	return s.next / s.growth
}

// observe takes the verdict of the window at s.next and chooses the next rate, or ends.
func (s *rateSearch) observe(met bool) {
	r := s.next
	if met {
		s.lo = r
	} else {
		s.hi = r
	}
	switch {
	case s.hi == 0 || s.lo == 0:
		if s.steps == maxSearchSteps {
			s.outcome = report.HoldAlwaysMet
			if s.lo == 0 {
				s.outcome = report.HoldNeverMet
			}
			return
		}
		s.steps++
		if met {
			s.next = r * s.growth
		} else {
			s.next = r / s.growth
		}
	case s.hi-s.lo <= s.tolerance():
		s.outcome = report.HoldHeld
	default:
		s.next = s.lo + (s.hi-s.lo)/2
	}
}

// holdWindow is a window being filled: the arrivals handed out in [from, to) and the records
// of the requests intended there.
type holdWindow struct {
	phase     string
	rate      float64
	from, to  time.Duration
	sent      int  // arrivals handed out in the window
	allSent   bool // an arrival at or past to was handed out, or the process ended
	received  int  // records
	failed    int
	values    []time.Duration // of the successful requests
	judged    bool
	result    report.HoldWindow
	deadline  time.Duration // run offset after which unfinished requests count as over the limit
	completed chan struct{} // closed when every request of the window has its record
}

func (w *holdWindow) contains(at time.Duration) bool { return at >= w.from && at < w.to }

// over is the value of a request that failed or is unfinished: above every limit.
const over = time.Duration(math.MaxInt64)

// judge judges the window on slo from its records, the requests without one counting as over
// the limit, and keeps the verdict in w.result.
func (w *holdWindow) judge(slo *HoldObjective) report.HoldWindow {
	unfinished := max(w.sent-w.received, 0)
	vals := slices.Clone(w.values)
	for range w.failed + unfinished {
		vals = append(vals, over)
	}
	slices.Sort(vals)
	r := report.HoldWindow{Phase: w.phase, StartS: w.from.Seconds(), EndS: w.to.Seconds(), RateRPS: w.rate,
		Requests: len(vals), Failed: w.failed, Unfinished: unfinished}
	ms := func(d time.Duration) *float64 {
		if d == over {
			return nil
		}
		v := msf(d)
		return &v
	}
	if len(vals) > 0 { // a window without requests meets nothing
		est, lo, hi, ok := stats.QuantileCI(vals, slo.Percentile/100, 0.95)
		r.ValueMS, r.Met = ms(est), est != over && slo.Holds(msf(est))
		if ok {
			r.LoMS, r.HiMS, r.HasCI = ms(lo), ms(hi), true
		}
	}
	w.judged, w.result = true, r
	return r
}

// holdController runs the search and the hold of --hold-slo beside loadgen.Run: it switches the
// arrivals' rate at each window, attributes every record to the window its intended send time
// lies in, and judges each window once its requests have ended (or, past its deadline, counts
// the ones still running as over the limit). Its methods are safe for concurrent use: Run's
// goroutines call arrived and observe while run chooses the rates.
type holdController struct {
	o        *HoldOptions
	arrivals *shape.Adjustable
	search   *rateSearch
	start    time.Time // the run's offset 0
	stderr   io.Writer
	grace    time.Duration // how long after a window's end its requests may still run

	mu          sync.Mutex
	windows     []*holdWindow
	lastArrival time.Duration
	arrivedAny  bool
	ended       bool          // the process ended
	holdFrom    time.Duration // the held stretch's start; -1 before it
	outcome     string
}

// newHoldController is the controller of o's search starting at rate, with arrivals of the
// given burstiness (0: evenly spaced) and seed; drain bounds the wait for a window's last
// requests when the SLO bounds a time to first token (0 or less: no bound).
func newHoldController(o *HoldOptions, rate, burstiness float64, seed uint64, drain time.Duration, stderr io.Writer) (*holdController, error) {
	a, err := shape.NewAdjustable(rate, burstiness, seed)
	if err != nil {
		return nil, fmt.Errorf("--hold-slo: %w", err)
	}
	return &holdController{o: o, arrivals: a, search: newRateSearch(rate, o.Growth, o.Tolerance), stderr: stderr,
		grace: holdGrace(o.SLO, drain), holdFrom: -1}, nil
}

// holdGrace is how long after a window's end its requests are waited for. A request still
// running past the E2EL limit has missed an E2EL SLO whatever it does next (a second more lets
// the ones that end at the limit report it); but a record comes only at a request's end, and a
// request still streaming may have had its first token in time, so for TTFT and TTFO the
// window waits for its requests as the run's drain does, up to drain.
func holdGrace(slo *HoldObjective, drain time.Duration) time.Duration {
	grace := slo.limit() + time.Second
	switch {
	case slo.Metric == report.MetricE2EL:
		return grace
	case drain <= 0:
		return 100 * 365 * 24 * time.Hour
	}
	return max(grace, drain)
}

// process is the arrival process the run paces by: the adjustable one, each arrival noted.
func (h *holdController) process() shape.Process { return holdArrivals{h} }

type holdArrivals struct{ h *holdController }

func (a holdArrivals) Next() (time.Duration, bool) {
	at, ok := a.h.arrivals.Next()
	a.h.arrived(at, ok)
	return at, ok
}

func (a holdArrivals) String() string { return a.h.arrivals.String() + " (--hold-slo)" }

// arrived counts an arrival handed out into its window; ok false: the process ended.
func (h *holdController) arrived(at time.Duration, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !ok {
		h.ended = true
	} else {
		h.lastArrival, h.arrivedAny = at, true
	}
	for _, w := range h.windows {
		switch {
		case w.judged:
		case !ok || at >= w.to:
			w.allSent = true
			h.checkComplete(w)
		case w.contains(at):
			w.sent++
		}
	}
}

// checkComplete closes w.completed once every request of w has its record.
func (h *holdController) checkComplete(w *holdWindow) {
	if w.allSent && w.received >= w.sent {
		select {
		case <-w.completed:
		default:
			close(w.completed)
		}
	}
}

// observe attributes records (as loadgen.Config.Stream hands them over) to their windows by
// intended send time, and marks as warmup, in no statistic of the result, every record
// intended before the held stretch.
func (h *holdController) observe(recs []loadgen.Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		if h.holdFrom < 0 || r.Intended < h.holdFrom {
			r.Warmup = true
		}
		w := h.windowAt(r.Intended)
		if w == nil || w.judged {
			continue
		}
		w.received++
		switch v, ok := h.o.SLO.value(r); {
		case !r.OK():
			w.failed++
		case ok:
			w.values = append(w.values, v)
		default:
			w.failed++ // a success without the metric (no token streamed) cannot meet a TTFT bound
		}
		h.checkComplete(w)
	}
}

// windowAt is the window that holds intended offset at; nil for none (between windows).
func (h *holdController) windowAt(at time.Duration) *holdWindow {
	for i := len(h.windows) - 1; i >= 0; i-- {
		if w := h.windows[i]; w.contains(at) {
			return w
		}
	}
	return nil
}

// begin starts a window of phase at rate for d from now (or from the last arrival handed out,
// if later), after which the arrivals go on at next (0: they end).
func (h *holdController) begin(phase string, rate float64, d time.Duration, next float64) (*holdWindow, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	from, err := h.arrivals.Switch(time.Since(h.start), shape.RateStep{Rate: rate}, shape.RateStep{After: d, Rate: next})
	if err != nil {
		return nil, err
	}
	w := &holdWindow{phase: phase, rate: rate, from: from, to: from + d, deadline: from + d + h.grace, completed: make(chan struct{})}
	if h.arrivedAny && h.lastArrival == from {
		w.from++ // that arrival was drawn at the rate before
	}
	if h.ended {
		w.allSent = true
	}
	if phase == report.HoldPhaseHold {
		h.holdFrom = w.from
	}
	h.windows = append(h.windows, w)
	return w, nil
}

// await waits until w can be judged: every request has its record, or its deadline passed. It
// reports false when the run ended first or ctx is done.
func (h *holdController) await(ctx context.Context, w *holdWindow, runDone <-chan struct{}) bool {
	t := time.NewTimer(time.Until(h.start.Add(w.deadline)))
	defer t.Stop()
	select {
	case <-w.completed:
		return true
	case <-t.C:
		return true
	case <-runDone:
		return false
	case <-ctx.Done():
		return false
	}
}

// judge judges w, says so on stderr and returns whether it met the SLO.
func (h *holdController) judge(w *holdWindow) bool {
	h.mu.Lock()
	r := w.judge(h.o.SLO)
	h.mu.Unlock()
	fmt.Fprintf(h.stderr, "hold-slo %s %.1fs-%.1fs at %.3g req/s: %d requests, p%g %s %s ms: %s\n", r.Phase, r.StartS, r.EndS,
		r.RateRPS, r.Requests, h.o.SLO.Percentile, h.o.SLO.Metric, r.ValueText(), r.VerdictText())
	return r.Met
}

// run is the controller's loop, from the run's start until its end: the search's windows one
// after another, then the hold; at the end the arrivals stop. runDone is closed when the run
// ended, which interrupts the search.
func (h *holdController) run(ctx context.Context, runDone <-chan struct{}) {
	defer func() {
		_, _ = h.arrivals.Switch(time.Since(h.start), shape.RateStep{Rate: 0})
	}()
	s := h.search
	for !s.done() {
		w, err := h.begin(report.HoldPhaseSearch, s.next, h.o.Window, s.settleRate())
		if err != nil || !h.await(ctx, w, runDone) {
			h.setOutcome(report.HoldInterrupted)
			return
		}
		s.observe(h.judge(w))
	}
	if s.lo == 0 {
		h.setOutcome(report.HoldNeverMet)
		return
	}
	w, err := h.begin(report.HoldPhaseHold, s.lo, h.o.HoldFor, 0)
	if err != nil || !h.await(ctx, w, runDone) {
		h.setOutcome(report.HoldInterrupted)
		return
	}
	if !h.judge(w) {
		fmt.Fprintf(h.stderr, "hold-slo: the held stretch missed the SLO: %.4g req/s met it in a window of %s but not for %s, a\n"+
			"queue building slower than a window shows; a longer --hold-window finds a rate that holds\n", s.lo, h.o.Window, h.o.HoldFor)
	}
	h.setOutcome(s.outcome)
}

func (h *holdController) setOutcome(o string) {
	h.mu.Lock()
	h.outcome = o
	h.mu.Unlock()
}

// heldFrom is the held stretch's start, and whether there was one.
func (h *holdController) heldFrom() (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holdFrom, h.holdFrom >= 0
}

// report is the hold_slo section: the settings, every judged window and the verdict.
func (h *holdController) report(startRate float64) *report.HoldSLO {
	h.mu.Lock()
	defer h.mu.Unlock()
	slo := h.o.SLO
	out := &report.HoldSLO{SLO: slo.String(), Metric: slo.Metric, Percentile: slo.Percentile, Op: slo.Op, LimitMS: slo.Limit,
		WindowS: h.o.Window.Seconds(), HoldForS: h.o.HoldFor.Seconds(), Growth: h.o.Growth, ToleranceRPS: h.search.tolerance(),
		StartRPS: startRate, Outcome: h.outcome, Windows: []report.HoldWindow{}}
	if out.Outcome == "" {
		out.Outcome = report.HoldInterrupted
	}
	for _, w := range h.windows {
		if w.judged {
			out.Windows = append(out.Windows, w.result)
		}
	}
	s := h.search
	if s.lo > 0 {
		out.HeldRPS, out.IntervalLoRPS = ptrTo(s.lo), ptrTo(s.lo)
	}
	if s.hi > 0 {
		out.IntervalHiRPS = ptrTo(s.hi)
	}
	if n := len(out.Windows); n > 0 && out.Windows[n-1].Phase == report.HoldPhaseHold {
		out.HeldMet = ptrTo(out.Windows[n-1].Met)
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// holdLoad makes cfg the load of a --hold-slo run (nil without one): lone requests of the
// dataset on the controller's adjustable arrivals, which the controller ends.
func (o *Options) holdLoad(cfg *loadgen.Config, stderr io.Writer) (*holdController, error) {
	if o.Hold.SLO == nil {
		return nil, nil
	}
	burstiness := 1.0 // poisson
	switch o.Load.Shape.Process.Name {
	case shape.ProcessConstant:
		burstiness = 0
	case shape.ProcessGamma:
		burstiness = o.Load.Burstiness
	}
	h, err := newHoldController(&o.Hold, o.RequestRate, burstiness, o.Load.Seed, o.Load.DrainTimeout, stderr)
	if err != nil {
		return nil, err
	}
	src, err := o.Load.sources()
	if err != nil {
		return nil, err
	}
	w, err := src.workload(func() (shape.Process, error) { return h.process(), nil })
	if err != nil {
		return nil, err
	}
	if o.Load.OverrideMaxTokens {
		w = maxTokensOverride{w}
	}
	h.start = cfg.Start
	cfg.Workload, cfg.NumItems, cfg.Duration = w, 0, 0
	cfg.Info.Shape = h.process().String()
	fmt.Fprintf(stderr, "hold-slo: %s from %g req/s in windows of %s, then held for %s\n", o.Hold.SLO, o.RequestRate, o.Hold.Window, o.Hold.HoldFor)
	return h, nil
}
