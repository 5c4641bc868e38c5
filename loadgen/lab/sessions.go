package lab

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// budgetQuantile is the pre-registered rule for the verdict's step budget: the calibration's
// step latency at this quantile. The article states no budget, but its baseline does: 98.2% of
// first screens complete within it, so the budget is where 98.2% of the calibration's steps
// end (all steps, for the sample size: a first step is a step like the others here). A budget
// tied to a multiple of a quantile (2 x the P95 until three runs of the lab moved it 858, 899
// and 983 ms) put it near the delayed arm's own tail, where the interruption rate falls steeply
// as the budget grows and the verdict followed the calibration's sampling error.
const (
	budgetQuantile = 0.982
	budgetName     = "P98.2"
)

// sessionRate and sessionConfig are the session load of latency-injection: synthetic shopping
// sessions of at most 4 steps with 200 ms of thinking, arriving Poisson. A person thinks for
// seconds; here the think time only spaces a session's steps, and the calibration measures the
// steps at this same load, so the budget and the baseline rate follow it. The arrival rate is
// what brings the sessions the power calculation asks for into about a minute.
const sessionRate = 5.0

var sessionConfig = shape.SessionConfig{Think: 200 * time.Millisecond, MaxSteps: 4}

// The effects the arms are sized to detect: the article's rise in interruption (1.1% ->
// 12.4%) and fall in first-screen completion (98.2% -> 83.7%), in absolute points over the
// rates the calibration's sessions would have had at the step budget.
const (
	interruptionRise = 0.124 - 0.011
	firstScreenFall  = 0.982 - 0.837
	maxArmStretch    = 2.5 // an arm runs at most this many times its share of the load time
)

// calibShareSessions is the calibration's share of the experiment's load time; the two arms
// split the rest.
const calibShareSessions = 4

// faultStages are the pipeline stages a fault rule acts on (the Server-Timing names), in
// pipeline order.
var faultStages = []string{"admission", "embed", "retrieve", "fetch", "generate"}

// stepBudget is the verdict's step budget derived from the calibration's records: the
// budgetQuantile of its successful steps' latencies (nearest rank), rounded to the millisecond,
// with the order-statistic 95% interval of that quantile. ok is false without steps.
func stepBudget(recs []loadgen.Record) (budget time.Duration, q report.PercentileStat, ok bool) {
	lat := latenciesOf(recs, e2elOf)
	if len(lat) == 0 {
		return 0, report.PercentileStat{}, false
	}
	v, lo, hi, hasCI := stats.QuantileCI(lat, budgetQuantile, verdictConfidence)
	return v.Round(time.Millisecond), report.PercentileStat{P: math.Round(1000*budgetQuantile) / 10, Value: v, Lo: lo, Hi: hi, HasCI: hasCI}, true
}

// sessionCalibration is what the calibration's baseline sessions, replayed without a budget,
// say about the arms to come.
type sessionCalibration struct {
	// stage is the latency-sensitive stage: the fault-able stage with the largest mean
	// Server-Timing duration per step, where the article's relative delay adds the most.
	stage       string
	stageMeanMS map[string]float64
	steps       int // successful steps with Server-Timing behind the means
	// At the budget: sessions that would have been interrupted (a step failed or ran over it)
	// of those that ended within the run, and first steps that would have been bad.
	interrupted, sessions int
	firstBad, firstSteps  int
}

// calibrateSessions reads the calibration's records against budget.
func calibrateSessions(recs []loadgen.Record, budget time.Duration) sessionCalibration {
	c := sessionCalibration{stageMeanMS: make(map[string]float64)}
	type state struct{ bad, cut bool }
	sessions := make(map[string]*state)
	for i := range recs {
		r := &recs[i]
		if r.Warmup || r.Session == "" {
			continue
		}
		s := sessions[r.Session]
		if s == nil {
			s = &state{}
			sessions[r.Session] = s
		}
		if r.NotSent {
			s.cut = true
			continue
		}
		bad := !r.OK() || r.E2EL() > budget
		s.bad = s.bad || bad
		if r.Step == 0 {
			c.firstSteps++
			if bad {
				c.firstBad++
			}
		}
		if r.OK() && len(r.ServerTiming) > 0 {
			c.steps++
			for _, st := range faultStages {
				c.stageMeanMS[st] += r.ServerTiming[st]
			}
		}
	}
	for _, s := range sessions {
		switch {
		case s.bad:
			c.interrupted++
			c.sessions++
		case !s.cut:
			c.sessions++
		}
	}
	best := -1.0
	for _, st := range faultStages {
		if c.steps > 0 {
			c.stageMeanMS[st] /= float64(c.steps)
		}
		if m := c.stageMeanMS[st]; m > best {
			c.stage, best = st, m
		}
	}
	return c
}

// sessionsNeeded is the rule's n per arm: the least from which both the interruption rate and
// the share of bad first steps, rising from the calibration's rates by the article's effects,
// put the two arms' Wilson intervals apart with verdictPower. ok is false when no n up to
// maxPowerN does (a baseline so high the effect does not fit below 100%).
func (c sessionCalibration) sessionsNeeded() (n int64, ok bool) {
	if c.sessions == 0 || c.firstSteps == 0 {
		return 0, false
	}
	p0 := float64(c.interrupted) / float64(c.sessions)
	q0 := float64(c.firstBad) / float64(c.firstSteps)
	if p0+interruptionRise > 1 || q0+firstScreenFall > 1 {
		return 0, false
	}
	ni, ok1 := rateSamplesNeeded(p0, p0+interruptionRise, verdictConfidence, verdictPower)
	nf, ok2 := rateSamplesNeeded(q0, q0+firstScreenFall, verdictConfidence, verdictPower)
	return max(ni, nf), ok1 && ok2
}

// sessionArm is one arm of latency-injection and what its users did.
type sessionArm struct {
	name   string
	faults *[]FaultRule
	ss     *report.Sessions
	steps  int64 // steps sent (the load the arm's users made)
}

// runLatencyInjection calibrates the step budget, the stage to delay and the sessions each arm
// needs on baseline sessions, then replays sessions with and without the article's relative
// delay on that stage; a step over the budget ends its session in the generator, so an
// interrupted user sends no further step and the load drops.
func runLatencyInjection(ctx context.Context, e *env) (*Result, error) {
	calibDur := e.dur / calibShareSessions
	per := (e.dur - calibDur) / 2
	base := e.base()
	base.Coupling = ptr("fanout")
	calib, calibRecs, _, err := e.runSessions(ctx, "calibration (baseline, no budget)", base, 49, calibDur, 0)
	if err != nil {
		return nil, err
	}
	budget, bq, ok := stepBudget(calibRecs)
	if !ok || budget <= 0 {
		return nil, fmt.Errorf("calibration: no step latencies")
	}
	cal := calibrateSessions(calibRecs, budget)
	if cal.steps == 0 {
		return nil, fmt.Errorf("calibration: no step carried Server-Timing, so no stage to delay can be chosen")
	}
	need, powered := cal.sessionsNeeded()
	armDur := per
	if powered {
		armDur = armDuration(need, true, sessionRate, time.Second, time.Duration(maxArmStretch*float64(per)))
	}
	e.logf("  step budget %v = calibration step %s; delayed stage %s (mean %.1f ms a step); at the budget %d/%d sessions interrupted, %d/%d first steps bad -> %d sessions per arm, %v each",
		budget, budgetName, cal.stage, cal.stageMeanMS[cal.stage], cal.interrupted, cal.sessions, cal.firstBad, cal.firstSteps, need, armDur)
	arms := []*sessionArm{
		{name: "baseline", faults: noFaults()},
		{name: "relative delay on " + cal.stage, faults: faults(FaultRule{Name: "relative-" + cal.stage, Stage: cal.stage, Percent: 100, Relative: &RelativeDelay{}})},
	}
	variants := []Variant{*calib}
	rows := []Row{
		{"step budget (calibration step " + budgetName + ": the article's baseline first-screen completion)", "not stated (98.2% of first screens within it)",
			fmt.Sprintf("%v (%s %s; median %s, P95 %s)", budget, budgetName, fmtPct(bq), fmtPct(pct(calib.Bench, report.MetricE2EL, 50)), fmtPct(pct(calib.Bench, report.MetricE2EL, 95)))},
		{"delayed stage (largest mean Server-Timing per calibration step)", "each step, relative to its baseline", fmt.Sprintf("%s: %s", cal.stage, stageMeans(cal))},
		{"calibration at the budget: interruption / first screen bad", "1.1% / 1.8%", fmtRate(float64(cal.interrupted), float64(cal.sessions)) + " / " + fmtRate(float64(cal.firstBad), float64(cal.firstSteps))},
		{"sample size: sessions per arm for the intervals to separate by the article's effects with 90% probability", "", sampleSizeNote(need, powered, armDur)},
	}
	for i, a := range arms {
		s := clone(base)
		s.Faults = a.faults
		v, _, steps, err := e.runSessions(ctx, a.name, s, uint64(50+i), armDur, budget)
		if err != nil {
			return nil, err
		}
		if v.Bench.Sessions == nil {
			return nil, fmt.Errorf("variant %s: no sessions in the result", a.name)
		}
		a.ss, a.steps = v.Bench.Sessions, steps
		variants = append(variants, *v)
	}
	b, f := arms[0].ss, arms[1].ss
	rows = append(rows,
		Row{"first-screen completion", "98.2% -> 83.7%", fmtRate(float64(b.FirstStepsGood), float64(b.FirstSteps)) + " -> " + fmtRate(float64(f.FirstStepsGood), float64(f.FirstSteps))},
		Row{"session interruption", "1.1% -> 12.4%", fmtRate(float64(b.Interrupted), float64(b.Completed+b.Interrupted)) + " -> " + fmtRate(float64(f.Interrupted), float64(f.Completed+f.Interrupted))},
		Row{"steps sent per session (interrupted users send no more)", "the load drops", stepsPerSession(arms[0]) + " -> " + stepsPerSession(arms[1])},
		Row{"step E2EL P95", "", fmtPct(pct(variants[1].Bench, report.MetricE2EL, 95)) + " -> " + fmtPct(pct(variants[2].Bench, report.MetricE2EL, 95))})
	out, why := sessionVerdict(b, f, budget, cal.stage)
	if n := min(b.Completed+b.Interrupted, f.Completed+f.Interrupted, b.FirstSteps, f.FirstSteps); !powered || n < need {
		out, why = Underpowered, underpoweredWhy(need, powered, n)+why
	}
	return &Result{
		Setup: fmt.Sprintf("synthetic shopping sessions (<= %d steps, think %v) arriving Poisson %.0f/s; a calibration run of baseline sessions (%v) fixes the step budget, the stage to delay and the sessions each arm needs; in each arm (%v) a step that fails or runs over the budget ends its session: the generator sends none of its later steps; rule max(100ms, baseline x 1.8 + U(0,200ms)) on every %s",
			sessionConfig.MaxSteps, sessionConfig.Think, sessionRate, calibDur.Round(time.Second), armDur, cal.stage),
		Variants: variants,
		Document: map[string]any{"first_screen_completion": []float64{0.982, 0.837}, "session_interruption": []float64{0.011, 0.124}},
		Rows:     rows, Verdict: Verdict{out, why},
	}, nil
}

// stageMeans formats the calibration's mean Server-Timing per step of each fault-able stage.
func stageMeans(c sessionCalibration) string {
	var s string
	for i, st := range faultStages {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %.1f ms", st, c.stageMeanMS[st])
	}
	return fmt.Sprintf("mean per step %s (%d steps)", s, c.steps)
}

// sampleSizeNote formats the rule's n and the arms' duration.
func sampleSizeNote(need int64, powered bool, armDur time.Duration) string {
	if !powered {
		return fmt.Sprintf("none: the calibration's baseline leaves no room for the article's effects below 100%% (arms run %v)", armDur)
	}
	return fmt.Sprintf("%d (each arm runs %v at %.0f sessions/s)", need, armDur, sessionRate)
}

// underpoweredWhy opens the reason of an underpowered outcome.
func underpoweredWhy(need int64, powered bool, got int64) string {
	if !powered {
		return "underpowered: no number of sessions up to the lab's limit separates the article's effects from the calibration's baseline; "
	}
	return fmt.Sprintf("underpowered: the rule needs %d sessions per arm and an arm ended %d (run longer, or --duration): ", need, got)
}

// runSessions replays the experiment's sessions for d under settings s, ending a session at a
// step over limit (none when 0), and returns the variant, its records and how many steps were
// sent.
func (e *env) runSessions(ctx context.Context, name string, s *Settings, seed uint64, d, limit time.Duration) (*Variant, []loadgen.Record, int64, error) {
	p, err := shape.Poisson(sessionRate, e.o.Seed+seed)
	if err != nil {
		return nil, nil, 0, err
	}
	sess, err := shape.SyntheticSessions(sessionConfig, e.o.Seed+50)
	if err != nil {
		return nil, nil, 0, err
	}
	v, res, err := e.run(ctx, name, s, load{workload: shape.Sessions(p, sess), shape: fmt.Sprintf("sessions(poisson %.0f/s)", sessionRate),
		rate: sessionRate, duration: d, maxTokens: 24, stepLimit: limit})
	if err != nil {
		return nil, nil, 0, err
	}
	var sent int64
	for i := range res.Records {
		if r := &res.Records[i]; !r.NotSent && !r.Warmup {
			sent++
		}
	}
	return v, res.Records, sent, nil
}

// stepsPerSession formats the steps an arm's users sent per session.
func stepsPerSession(a *sessionArm) string {
	if a.ss.Count == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (%d steps, %d sessions)", float64(a.steps)/float64(a.ss.Count), a.steps, a.ss.Count)
}

// sessionVerdict applies the rule: the faulted arm's interruption interval lies above the
// baseline's.
func sessionVerdict(b, f *report.Sessions, budget time.Duration, stage string) (string, string) {
	bi, bn := float64(b.Interrupted), float64(b.Completed+b.Interrupted)
	fi, fn := float64(f.Interrupted), float64(f.Completed+f.Interrupted)
	_, lo0, hi0 := binomialCI(bi, bn)
	_, lo1, hi1 := binomialCI(fi, fn)
	out := NotReproduced
	switch {
	case math.IsNaN(lo0) || math.IsNaN(lo1):
	case lo1 > hi0:
		out = Reproduced
	case hi1 < lo0:
		out = Opposite
	}
	why := fmt.Sprintf("with the delay on %s at a %v step budget (the calibration's step %s) interruption went %s -> %s (article 1.1%% -> 12.4%%) and first-screen completion %s -> %s (article 98.2%% -> 83.7%%)",
		stage, budget, budgetName, fmtRate(bi, bn), fmtRate(fi, fn),
		fmtRate(float64(b.FirstStepsGood), float64(b.FirstSteps)), fmtRate(float64(f.FirstStepsGood), float64(f.FirstSteps)))
	switch out {
	case Reproduced:
		why = "the delay interrupted more sessions beyond the intervals: " + why
	case Opposite:
		why = "the delayed arm interrupted fewer sessions: " + why
	default:
		why = "the interruption intervals overlap: " + why
	}
	return out, why + "; the size depends on the budget and on the service's baseline latency, neither of which the article states"
}
