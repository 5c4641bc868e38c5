package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
)

// The priority experiment's world: a closed loop of priorityFloodUsers low-priority users keeps
// the simulated engine's batch full and its queue long whatever the engine's speed, while a
// Poisson stream of high-priority requests arrives beside it. Both send max_tokens
// priorityMaxTokens to the tiny engine (8 running sequences).
const (
	priorityFloodUsers = 64
	priorityHighRate   = 30.0 // high-priority requests per second
	priorityMaxTokens  = 32
	priorityLow        = 10 // the flood's priority value (lower runs first)
	priorityHigh       = 0  // the high-priority stream's
)

// The sizes of the priority experiment's runs: the pilot of each policy as a share of the load
// time, the least time of an arm, and how far past its share of the load time an arm may run for
// the rule's n. The floor expects 450 high-priority requests, so an arm reaches the 368 of a P99
// interval with over 99.9% probability.
const (
	priorityPilotShare = 12
	priorityFloor      = 15 * time.Second
	priorityStretch    = 2
)

// priorityRule is the pre-registered verdict rule of the priority experiment.
var priorityRule = Rule{
	Compared: fmt.Sprintf("TTFT P99 of a high-priority Poisson stream (priority %d, %g req/s) beside a closed-loop flood of %d low-priority users (priority %d), the engine's fcfs scheduling policy against its priority policy", priorityHigh, priorityHighRate, priorityFloodUsers, priorityLow),
	Interval: fmt.Sprintf("order-statistic 95%% interval of each P99, each arm holding at least n high-priority requests, n computed before the arms from a pilot of each policy "+
		"(flood and stream together, 1/%d of the load time each): the least n from which, taking each pilot's empirical TTFT distribution for its arm's, the fcfs interval lies above the priority one "+
		"with at least %.0f%% probability by %s, so at least the %d a P99 interval needs; the arms then run n x %.1f / %g req/s each (at least %v, at most %d times their share of the load time)",
		priorityPilotShare, 100*verdictPower, separationRuleText("P99", "priority arm's", "fcfs arm's"), minP99Samples, sampleMargin, priorityHighRate, priorityFloor, priorityStretch),
	Threshold: "the fcfs interval lies entirely above the priority one; with fewer than n high-priority requests in either arm, or no n, the outcome is underpowered",
}

// priorityArm is one run: the flood and the high stream under one scheduling policy.
type priorityArm struct {
	policy      string
	high, flood *Variant
	highTTFT    []time.Duration // sorted TTFTs of the completed high-priority requests
	preemptions float64
}

// runPriority runs the flood and the high-priority stream together, once per scheduling
// policy, and compares the high stream's TTFT P99.
func runPriority(ctx context.Context, e *env) (*Result, error) {
	if !e.simulated {
		return &Result{Setup: "needs the simulated engine",
			Rows:    []Row{{"high-priority TTFT P99", "priority scheduling keeps it low under a flood", "not measured"}},
			Verdict: Verdict{NotRun, "generation goes to a real LLM: the scheduling policy is set on the simulated engine"}}, nil
	}
	pilotDur := e.dur / priorityPilotShare
	share := (e.dur - 2*pilotDur) / 2
	if share < time.Second {
		return nil, fmt.Errorf("--duration %v leaves less than 1 s per arm after the pilots", e.dur)
	}
	var pilots []priorityArm
	for i, policy := range []string{"fcfs", "priority"} {
		a, err := e.priorityArm(ctx, "pilot: "+policy, policy, uint64(84+2*i), pilotDur)
		if err != nil {
			return nil, err
		}
		pilots = append(pilots, a)
	}
	need, powered := pilotSeparation(pilots[1].highTTFT, pilots[0].highTTFT, 0.99).samplesNeeded(0.99)
	per := armDuration(need, powered, priorityHighRate, priorityFloor, priorityStretch*share)
	e.logf("  pilots: high-priority TTFT P99 %v under fcfs over %d, %v under priority over %d -> %d high-priority requests per arm, %v each",
		quantileOf(pilots[0].highTTFT, 0.99), len(pilots[0].highTTFT), quantileOf(pilots[1].highTTFT, 0.99), len(pilots[1].highTTFT), need, per)
	var arms []priorityArm
	for i, policy := range []string{"fcfs", "priority"} {
		a, err := e.priorityArm(ctx, policy, policy, uint64(80+2*i), per)
		if err != nil {
			return nil, err
		}
		arms = append(arms, a)
	}
	fcfs, prio := arms[0], arms[1]
	worse, better := pct(fcfs.high.Bench, report.MetricTTFT, 99), pct(prio.high.Bench, report.MetricTTFT, 99)
	rows := []Row{
		{"pilots: high-priority TTFT P99 fcfs / priority", "", pilotsNote(pilots[0].highTTFT, pilots[1].highTTFT, 0.99, pilotDur)},
		{"sample size: high-priority requests per arm for the P99 intervals to separate with 90% probability (from the pilots)", "", sizeNote(need, powered, per, priorityHighRate, "high-priority requests per arm")},
	}
	var variants []Variant
	for _, a := range pilots {
		variants = append(variants, *a.high, *a.flood)
	}
	for _, a := range arms {
		rows = append(rows,
			Row{a.policy + ": high-priority TTFT P99", priorityClaim(a.policy), fmtPct(pct(a.high.Bench, report.MetricTTFT, 99)) + failedNote(a.high.Bench)},
			Row{a.policy + ": high-priority TTFT P50", "", fmtPct(pct(a.high.Bench, report.MetricTTFT, 50))},
			Row{a.policy + ": low-priority (flood) TTFT P50", "the flood pays for the priority", fmtPct(pct(a.flood.Bench, report.MetricTTFT, 50)) + failedNote(a.flood.Bench)},
			Row{a.policy + ": flood throughput / engine preemptions", "", fmt.Sprintf("%.1f req/s / %.0f", throughput(a.flood.Bench), a.preemptions)})
		variants = append(variants, *a.high, *a.flood)
	}
	out := compare(worse, better)
	why := fmt.Sprintf("high-priority TTFT P99 %s (fcfs) vs %s (priority)", fmtPct(worse), fmtPct(better))
	switch got := min(len(fcfs.highTTFT), len(prio.highTTFT)); {
	case !powered || int64(got) < need:
		out, why = Underpowered, underpowered(need, powered, got, "high-priority requests per arm", "an arm")+why
	case out == Reproduced:
		why += ": the fcfs interval lies entirely above the priority one"
	case out == Opposite:
		why += ": the priority interval lies above the fcfs one"
	default:
		why += ": the intervals overlap or one is missing (too few samples: lengthen --duration)"
	}
	return &Result{
		Setup: fmt.Sprintf("tiny engine (8 running sequences), fanout coupling, max_tokens %d; per arm %v (%d high-priority requests by the rule, +%.0f%%, after pilots of %v per policy): a closed loop of %d users at priority %d and a Poisson stream of %g req/s at priority %d, together; arms: llm.scheduling_policy fcfs, then priority",
			priorityMaxTokens, per, need, 100*(sampleMargin-1), pilotDur.Round(100*time.Millisecond), priorityFloodUsers, priorityLow, priorityHighRate, priorityHigh),
		Variants: variants,
		Document: map[string]any{"claim": "high-priority work pre-empts low-priority work; low-weight streams delaying high-weight ones make the tail worse"},
		Rows:     rows,
		Verdict:  Verdict{out, why},
	}, nil
}

func priorityClaim(policy string) string {
	if policy == "fcfs" {
		return "waits behind the flood"
	}
	return "jumps the flood's queue"
}

// throughput is the completed requests per second of b.
func throughput(b *report.Bench) float64 {
	if s := b.Duration.Seconds(); s > 0 {
		return float64(b.Completed) / s
	}
	return 0
}

// priorityArm sets the scheduling policy and runs the flood and the high stream at once, as
// variants whose names start with name.
func (e *env) priorityArm(ctx context.Context, name, policy string, seed uint64, dur time.Duration) (priorityArm, error) {
	a := priorityArm{policy: policy}
	s := e.base()
	s.Coupling, s.TopK = ptr("fanout"), ptr(1)
	s.LLM.SchedulingPolicy = ptr(policy)
	before, err := e.statsAfterPut(ctx, s)
	if err != nil {
		return a, err
	}
	floodW, err := e.poisson(1, seed, 8) // a closed loop ignores the arrival times
	if err != nil {
		return a, err
	}
	highW, err := e.poisson(priorityHighRate, seed+1, 8)
	if err != nil {
		return a, err
	}
	type done struct {
		v   *Variant
		err error
	}
	floodDone := make(chan done, 1)
	go func() {
		v, _, err := e.run(ctx, name+" flood", nil, load{workload: floodW, shape: fmt.Sprintf("closed(users=%d)", priorityFloodUsers),
			concurrency: priorityFloodUsers, closed: true, duration: dur, maxTokens: priorityMaxTokens, body: map[string]any{"priority": priorityLow}})
		floodDone <- done{v, err}
	}()
	high, highRes, highErr := e.run(ctx, name+" high", nil, load{workload: highW, shape: fmt.Sprintf("poisson(rate=%g)", priorityHighRate),
		rate: priorityHighRate, duration: dur, maxTokens: priorityMaxTokens, body: map[string]any{"priority": priorityHigh}})
	fd := <-floodDone
	if highErr != nil {
		return a, highErr
	}
	if fd.err != nil {
		return a, fd.err
	}
	after, err := e.stats(ctx)
	if err != nil {
		return a, err
	}
	high.Settings, fd.v.Settings = s, s
	if before.Engine != nil && after.Engine != nil {
		a.preemptions = after.Engine.Preemptions - before.Engine.Preemptions
		fd.v.Counters = map[string]float64{"preemptions": a.preemptions}
	}
	a.high, a.flood, a.highTTFT = high, fd.v, latenciesOf(highRes.Records, ttftOf)
	return a, nil
}
