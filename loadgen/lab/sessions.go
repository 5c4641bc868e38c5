package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// budgetFactor is the pre-registered rule for the verdict's step budget: budgetFactor times the
// calibration run's P95 step latency, so that about one baseline step in twenty-odd is slow
// enough to approach it and the budget tracks the service instead of a figure picked for it.
const budgetFactor = 2

// sessionRate and sessionConfig are the session load of latency-injection: synthetic shopping
// sessions of at most 4 steps with 300 ms of thinking, arriving Poisson.
const sessionRate = 3.0

var sessionConfig = shape.SessionConfig{Think: 300 * time.Millisecond, MaxSteps: 4}

// calibShareSessions is the calibration's share of the experiment's load time; the two arms
// split the rest.
const calibShareSessions = 4

// stepBudget is the verdict's step budget derived from the calibration run's step latencies:
// budgetFactor x their P95, rounded to the millisecond.
func stepBudget(calibrationP95 time.Duration) time.Duration {
	return (budgetFactor * calibrationP95).Round(time.Millisecond)
}

// sessionArm is one arm of latency-injection and what its users did.
type sessionArm struct {
	name   string
	faults *[]FaultRule
	ss     *report.Sessions
	steps  int64 // steps sent (the load the arm's users made)
}

// runLatencyInjection calibrates the step budget on baseline sessions, then replays sessions
// with and without the article's relative delay; a step over the budget ends its session in
// the generator, so an interrupted user sends no further step and the load drops.
func runLatencyInjection(ctx context.Context, e *env) (*Result, error) {
	calibDur := e.dur / calibShareSessions
	per := (e.dur - calibDur) / 2
	base := e.base()
	base.Coupling = ptr("fanout")
	calib, _, err := e.runSessions(ctx, "calibration (baseline, no budget)", base, 49, calibDur, 0)
	if err != nil {
		return nil, err
	}
	p95 := pct(calib.Bench, report.MetricE2EL, 95)
	if p95.Value <= 0 {
		return nil, fmt.Errorf("calibration: no step latencies")
	}
	budget := stepBudget(p95.Value)
	e.logf("  step budget %v = %d x calibration step P95 %v", budget, budgetFactor, p95.Value.Round(time.Millisecond))
	arms := []*sessionArm{
		{name: "baseline", faults: noFaults()},
		{name: "relative delay on retrieve", faults: faults(FaultRule{Name: "relative-retrieve", Stage: "retrieve", Percent: 100, Relative: &RelativeDelay{}})},
	}
	variants := []Variant{*calib}
	rows := []Row{{"step budget (2 x calibration step P95)", "not stated", fmt.Sprintf("%v (calibration P95 %s)", budget, fmtPct(p95))}}
	for i, a := range arms {
		s := clone(base)
		s.Faults = a.faults
		v, steps, err := e.runSessions(ctx, a.name, s, uint64(50+i), per, budget)
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
	out, why := sessionVerdict(b, f, budget)
	return &Result{
		Setup: fmt.Sprintf("synthetic shopping sessions (<= %d steps, think %v) arriving Poisson %.0f/s; a calibration run of baseline sessions (%v) fixes the step budget; in each arm (%v) a step that fails or runs over the budget ends its session: the generator sends none of its later steps; rule max(100ms, baseline x 1.8 + U(0,200ms)) on every retrieve",
			sessionConfig.MaxSteps, sessionConfig.Think, sessionRate, calibDur.Round(time.Second), per.Round(time.Second)),
		Variants: variants,
		Document: map[string]any{"first_screen_completion": []float64{0.982, 0.837}, "session_interruption": []float64{0.011, 0.124}},
		Rows:     rows, Verdict: Verdict{out, why},
	}, nil
}

// runSessions replays the experiment's sessions for d under settings s, ending a session at a
// step over limit (none when 0), and returns the variant and how many steps were sent.
func (e *env) runSessions(ctx context.Context, name string, s *Settings, seed uint64, d, limit time.Duration) (*Variant, int64, error) {
	p, err := shape.Poisson(sessionRate, e.o.Seed+seed)
	if err != nil {
		return nil, 0, err
	}
	sess, err := shape.SyntheticSessions(sessionConfig, e.o.Seed+50)
	if err != nil {
		return nil, 0, err
	}
	v, res, err := e.run(ctx, name, s, load{workload: shape.Sessions(p, sess), shape: fmt.Sprintf("sessions(poisson %.0f/s)", sessionRate),
		rate: sessionRate, duration: d, maxTokens: 24, stepLimit: limit})
	if err != nil {
		return nil, 0, err
	}
	var sent int64
	for i := range res.Records {
		if r := &res.Records[i]; !r.NotSent && !r.Warmup {
			sent++
		}
	}
	return v, sent, nil
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
func sessionVerdict(b, f *report.Sessions, budget time.Duration) (string, string) {
	bi, bn := float64(b.Interrupted), float64(b.Completed+b.Interrupted)
	fi, fn := float64(f.Interrupted), float64(f.Completed+f.Interrupted)
	_, lo0, hi0 := binomialCI(bi, bn)
	_, lo1, hi1 := binomialCI(fi, fn)
	out := NotReproduced
	switch {
	case lo1 > hi0:
		out = Reproduced
	case hi1 < lo0:
		out = Opposite
	}
	why := fmt.Sprintf("at a %v step budget (%d x the calibration's step P95) interruption went %s -> %s (article 1.1%% -> 12.4%%) and first-screen completion %s -> %s (article 98.2%% -> 83.7%%)",
		budget, budgetFactor, fmtRate(bi, bn), fmtRate(fi, fn),
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
