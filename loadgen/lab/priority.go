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

// priorityRule is the pre-registered verdict rule of the priority experiment.
var priorityRule = Rule{
	Compared:  fmt.Sprintf("TTFT P99 of a high-priority Poisson stream (priority %d, %g req/s) beside a closed-loop flood of %d low-priority users (priority %d), the engine's fcfs scheduling policy against its priority policy", priorityHigh, priorityHighRate, priorityFloodUsers, priorityLow),
	Interval:  "order-statistic 95% interval of each P99",
	Threshold: "the fcfs interval lies entirely above the priority one",
}

// priorityArm is one run: the flood and the high stream under one scheduling policy.
type priorityArm struct {
	policy      string
	high, flood *Variant
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
	per := e.dur / 2
	if per < time.Second {
		return nil, fmt.Errorf("--duration %v leaves less than 1 s per arm", e.dur)
	}
	var arms []priorityArm
	for i, policy := range []string{"fcfs", "priority"} {
		a, err := e.priorityArm(ctx, policy, uint64(80+2*i), per)
		if err != nil {
			return nil, err
		}
		arms = append(arms, a)
	}
	fcfs, prio := arms[0], arms[1]
	worse, better := pct(fcfs.high.Bench, report.MetricTTFT, 99), pct(prio.high.Bench, report.MetricTTFT, 99)
	var rows []Row
	var variants []Variant
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
	switch out {
	case Reproduced:
		why += ": the fcfs interval lies entirely above the priority one"
	case Opposite:
		why += ": the priority interval lies above the fcfs one"
	default:
		why += ": the intervals overlap or one is missing (too few samples: lengthen --duration)"
	}
	return &Result{
		Setup: fmt.Sprintf("tiny engine (8 running sequences), fanout coupling, max_tokens %d; per arm %v: a closed loop of %d users at priority %d and a Poisson stream of %g req/s at priority %d, together; arms: llm.scheduling_policy fcfs, then priority",
			priorityMaxTokens, per.Round(time.Second), priorityFloodUsers, priorityLow, priorityHighRate, priorityHigh),
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

// priorityArm sets the scheduling policy and runs the flood and the high stream at once.
func (e *env) priorityArm(ctx context.Context, policy string, seed uint64, dur time.Duration) (priorityArm, error) {
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
		v, _, err := e.run(ctx, policy+" flood", nil, load{workload: floodW, shape: fmt.Sprintf("closed(users=%d)", priorityFloodUsers),
			concurrency: priorityFloodUsers, closed: true, duration: dur, maxTokens: priorityMaxTokens, body: map[string]any{"priority": priorityLow}})
		floodDone <- done{v, err}
	}()
	high, _, highErr := e.run(ctx, policy+" high", nil, load{workload: highW, shape: fmt.Sprintf("poisson(rate=%g)", priorityHighRate),
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
	a.high, a.flood = high, fd.v
	return a, nil
}
