package lab

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// The agent of agent-amplification: agentSteps model calls, the first agentSteps-1 of which
// each ask one search (the engine's law is fixed at agentSteps-1 searches a question and the
// request's max_steps at agentSteps), then the answer.
const agentSteps = 5

// Loads of agent-amplification. The single-shot arm offers about 400 requests to place its P99;
// the agent arm about 580, which the rule's power calculation asks for, at a rate the tiny
// engine keeps up with (at 10/s its queue grew over the arm); each remedy about 110, enough for
// a P95 interval (they are measured, not judged).
const (
	singleShotRate = 20.0
	agentRate      = 8.0
	agentTopK      = 1  // the chunk a search returns: five steps' context stays in the tiny profile's 2,048 tokens
	agentMaxTokens = 64 // a tool call needs about 20 tokens, two parallel ones about 45; the answer is cut at 64
	bootstrapDraws = 2000
)

// agentShares split the experiment's load time (134 s by default, the sum, in seconds): single
// shot, agent, then the remedies: hedged, deadline, parallel tool calls.
var agentShares = [5]int{20, 72, 14, 14, 14}

// parallelSteps are the model calls of the parallel-tool-calls remedy: two searches a call
// (ceil of the agentSteps-1 searches over 2), then the answer.
const parallelSteps = (agentSteps-1+1)/2 + 1

var agentRule = Rule{
	Compared: fmt.Sprintf("share of %d-step agent requests (%d searches, then the answer) with at least one step beyond its position's own P99 T_k (server time, Server-Timing's stepN entries), "+
		"against the 1 in 100 of a single shot beyond its P99, and against the share independent steps predict from the per-step shares q_k, 1 - prod(1 - q_k) (about 1 - 0.99^%d = 4.9%%)",
		agentSteps, agentSteps-1, agentSteps),
	Interval: "Wilson 95% interval of the agent share; percentile bootstrap 95% interval of the prediction (2000 resamples of the agent requests, fixed seed). " +
		"Sample size: about 580 agent requests (8/s for 72 s), so that at the predicted 4.9%, or at 3% if slow steps cluster in the same requests, the share's lower end lies above 1% " +
		"with probability above 0.95 (at least 11 of 580 when the mean is 17 to 28); each step's P99 needs at least 300 (an order-statistic interval)",
	Threshold: "the agent share's interval lies entirely above 1%, and overlaps the prediction's interval",
}

// agentSample is what agent-amplification reads from one arm: per request, its steps' server
// times (agent arms) or its server time (single shot), in ms.
type agentSample struct {
	steps    [][]float64 // agent requests with all agentSteps steps
	totals   []float64   // server time of each request, ms
	retrieve []float64   // single shot: each request's retrieve stage, ms
	partial  int         // successful agent requests with another number of steps
	firstErr string      // the first failure's error, for a message
}

// readAgentSample reads the successful measured records of res: the single shots', or the
// agents' with steps steps.
func readAgentSample(res *loadgen.Result, agent bool, steps int) agentSample {
	var s agentSample
	for i := range res.Records {
		r := &res.Records[i]
		if !r.OK() && s.firstErr == "" {
			s.firstErr = r.ErrKind + ": " + r.Err
		}
		if !r.OK() || r.Warmup || len(r.ServerTiming) == 0 {
			continue
		}
		if !agent {
			var sum float64
			for _, ms := range r.ServerTiming {
				sum += ms
			}
			s.totals = append(s.totals, sum)
			if ms, ok := r.ServerTiming["retrieve"]; ok {
				s.retrieve = append(s.retrieve, ms)
			}
			continue
		}
		times := make([]float64, 0, steps)
		for k := 1; ; k++ {
			ms, ok := r.ServerTiming["step"+strconv.Itoa(k)]
			if !ok {
				break
			}
			times = append(times, ms)
		}
		if len(times) != steps {
			s.partial++
			continue
		}
		var sum float64
		for _, ms := range times {
			sum += ms
		}
		s.steps = append(s.steps, times)
		s.totals = append(s.totals, sum)
	}
	return s
}

// beyond counts the agent requests with a step slower than t, and per step position the requests
// whose step k is.
func beyond(steps [][]float64, t [agentSteps]float64) (slowReqs int, perStep [agentSteps]int) {
	for _, st := range steps {
		slow := false
		for k, ms := range st {
			if ms > t[k] {
				perStep[k]++
				slow = true
			}
		}
		if slow {
			slowReqs++
		}
	}
	return slowReqs, perStep
}

// predictedShare is 1 - prod(1 - q_k) from per-step counts out of n.
func predictedShare(perStep [agentSteps]int, n int) float64 {
	all := 1.0
	for _, c := range perStep {
		all *= 1 - float64(c)/float64(n)
	}
	return 1 - all
}

// predictionCI is the percentile bootstrap 95% interval of predictedShare over resamples of the
// agent requests, with a fixed seed.
func predictionCI(steps [][]float64, t [agentSteps]float64, seed uint64) (lo, hi float64) {
	rng := rand.New(rand.NewPCG(seed, 0x6167656e74))
	n := len(steps)
	draws := make([]float64, bootstrapDraws)
	pick := make([][]float64, n)
	for d := range draws {
		for i := range pick {
			pick[i] = steps[rng.IntN(n)]
		}
		_, per := beyond(pick, t)
		draws[d] = predictedShare(per, n)
	}
	slices.Sort(draws)
	return draws[int(0.025*float64(bootstrapDraws))], draws[int(math.Ceil(0.975*float64(bootstrapDraws)))-1]
}

// durationsMS converts ms to sorted durations.
func durationsMS(ms []float64) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, v := range ms {
		out[i] = time.Duration(v * float64(time.Millisecond))
	}
	slices.Sort(out)
	return out
}

// runAgentAmplification runs single-shot requests, then agentSteps-step agents on the same
// world, then the agents with three remedies: hedged shard searches, a retrieval deadline, and
// parallel tool calls (the model asks two searches a call, which the service runs at once).
// Every arm searches the shards in parallel (fanout), so the deadline arm differs from the
// agent arm by its deadline alone.
func runAgentAmplification(ctx context.Context, e *env) (*Result, error) {
	if !e.simulated {
		return &Result{Setup: "needs the service's simulated engine (its tool-call law is set through /admin/config)",
			Verdict: Verdict{NotRun, "the service generates with a real LLM: the number of searches a question needs is the model's, not the experiment's"}}, nil
	}
	cur, err := e.getConfig(ctx)
	if err != nil {
		return nil, err
	}
	var shardP95 time.Duration
	if len(cur.ShardLatency) > 0 {
		if law, err := shape.ParseLaw(cur.ShardLatency[0]); err == nil {
			shardP95 = law.Quantile(0.95).Round(100 * time.Microsecond)
		}
	}
	if shardP95 <= 0 {
		return nil, fmt.Errorf("the service's shard latency %q has no P95 to hedge at", cur.ShardLatency)
	}
	total := 0
	for _, sh := range agentShares {
		total += sh
	}
	part := func(i int) time.Duration { return e.dur * time.Duration(agentShares[i]) / time.Duration(total) }
	base := e.base()
	base.TopK, base.Coupling, base.HedgeAfter = ptr(agentTopK), ptr("fanout"), ptr("0s")
	base.Cache = &CacheSettings{Enabled: ptr(false), Size: ptr(1)}
	base.LLM.ToolCalls = ptr("fixed:" + strconv.Itoa(agentSteps-1))
	agentBody := map[string]any{"rag": map[string]any{"mode": "agentic", "max_steps": agentSteps}}
	parallelBody := map[string]any{"rag": map[string]any{"mode": "agentic", "max_steps": agentSteps, "parallel_tool_calls": true}}

	// arm runs one arm; body nil sends single shots, else agents of steps model calls.
	arm := func(name string, s *Settings, rate float64, seed uint64, d time.Duration, body map[string]any, steps int) (*Variant, agentSample, error) {
		w, err := e.poisson(rate, seed, 8)
		if err != nil {
			return nil, agentSample{}, err
		}
		l := load{workload: w, shape: fmt.Sprintf("poisson(rate=%g)", rate), rate: rate, duration: d, maxTokens: agentMaxTokens}
		if body != nil {
			l.body, l.outputLimit = body, agentSteps*client.OutputTokenLimit(agentMaxTokens)
		}
		v, res, err := e.run(ctx, name, s, l)
		if err != nil {
			return nil, agentSample{}, err
		}
		return v, readAgentSample(res, body != nil, steps), nil
	}
	single, ss, err := arm("single shot", base, singleShotRate, 70, part(0), nil, 0)
	if err != nil {
		return nil, err
	}
	if len(ss.totals) < 300 {
		return nil, fmt.Errorf("only %d single-shot server times: too few for a P99 (lengthen --duration)", len(ss.totals))
	}
	t, tLo, tHi, _ := stats.QuantileCI(durationsMS(ss.totals), 0.99, 0.95)
	tMS := float64(t) / float64(time.Millisecond)
	singleBeyond := 0
	for _, v := range ss.totals {
		if v > tMS {
			singleBeyond++
		}
	}
	agent, as, err := arm(fmt.Sprintf("agent, %d steps", agentSteps), base, agentRate, 71, part(1), agentBody, agentSteps)
	if err != nil {
		return nil, err
	}
	n := len(as.steps)
	if n < 300 {
		return nil, fmt.Errorf("only %d agent requests with %d steps (%d with another count; first failure: %.200s): too few for each step's P99", n, agentSteps, as.partial, as.firstErr)
	}
	// Each step's own P99, T_k: a step beyond it is the one-in-a-hundred event of its position.
	var stepT [agentSteps]float64
	stepP99 := make([]report.PercentileStat, agentSteps)
	for k := range agentSteps {
		col := make([]float64, n)
		for i, st := range as.steps {
			col[i] = st[k]
		}
		v, lo, hi, ok := stats.QuantileCI(durationsMS(col), 0.99, 0.95)
		stepT[k], stepP99[k] = float64(v)/float64(time.Millisecond), report.PercentileStat{P: 99, Value: v, Lo: lo, Hi: hi, HasCI: ok}
	}
	anySlow, perStep := beyond(as.steps, stepT)
	pred := predictedShare(perStep, n)
	pLo, pHi := predictionCI(as.steps, stepT, e.o.Seed+72)

	// Remedies on the same agent load. The hedge goes out at the shard search's P95, read from
	// the service's latency law; the deadline is async coupling waiting for every shard (as
	// fanout does) at most the single-shot retrieve stage's P95.
	retrieveP95, _, _, ok := stats.QuantileCI(durationsMS(ss.retrieve), 0.95, 0.95)
	if !ok {
		return nil, fmt.Errorf("only %d single-shot retrieve timings: too few for a P95", len(ss.retrieve))
	}
	retrieveP95 = retrieveP95.Round(100 * time.Microsecond)
	hedged := clone(base)
	hedged.HedgeAfter = durStr(shardP95)
	hv, hs, err := arm(fmt.Sprintf("agent, hedged at %v", shardP95), hedged, agentRate, 73, part(2), agentBody, agentSteps)
	if err != nil {
		return nil, err
	}
	deadline := clone(base)
	deadline.Coupling, deadline.AsyncQuorum, deadline.AsyncDeadline = ptr("async"), cur.Shards, durStr(retrieveP95)
	dv, ds, err := arm(fmt.Sprintf("agent, retrieval deadline %v", retrieveP95), deadline, agentRate, 74, part(3), agentBody, agentSteps)
	if err != nil {
		return nil, err
	}
	pv, ps, err := arm("agent, parallel tool calls", base, agentRate, 75, part(4), parallelBody, parallelSteps)
	if err != nil {
		return nil, err
	}

	naive := 1 - math.Pow(0.99, agentSteps)
	rows := []Row{
		{"single-shot P99 server time", "—", fmt.Sprintf("%s ms [%s, %s] (%d requests)", msStr(t), msStr(tLo), msStr(tHi), len(ss.totals))},
		{"single-shot requests beyond their P99", "1 in 100", fmtRate(float64(singleBeyond), float64(len(ss.totals)))},
	}
	for k := range agentSteps {
		what := "search"
		if k == agentSteps-1 {
			what = "answer"
		}
		rows = append(rows, Row{fmt.Sprintf("agent step %d (%s): P99 T_%d; share beyond it", k+1, what, k+1), "—",
			fmtPct(stepP99[k]) + "; " + fmtRate(float64(perStep[k]), float64(n))})
	}
	rows = append(rows,
		Row{"agent requests with a step beyond its P99", fmt.Sprintf("about 1 in 20: 1 - 0.99^%d = %.1f%%", agentSteps, 100*naive), fmtRate(float64(anySlow), float64(n))},
		Row{"predicted by independent steps, 1 - prod(1 - q_k)", "—", fmt.Sprintf("%.1f%% [%.1f, %.1f] (bootstrap)", 100*pred, 100*pLo, 100*pHi)},
		Row{"agent server time P95; P99 (single shot: P99 above)", "—", agentTail(as)},
		Row{fmt.Sprintf("hedged at the shard P95 (%v): share beyond T_k; P95; P99", shardP95), "—", remedyRow(hs, stepT)},
		Row{fmt.Sprintf("retrieval deadline (%v, async): share beyond T_k; P95; P99", retrieveP95), "—", remedyRow(ds, stepT)},
		Row{fmt.Sprintf("parallel tool calls (two searches a call, run at once: %d model calls): P95; P99", parallelSteps), "—", agentTail(ps)},
	)
	if ps.partial > 0 {
		rows = append(rows, Row{fmt.Sprintf("parallel arm: requests with another step count than %d", parallelSteps), "—", strconv.Itoa(ps.partial)})
	}
	if as.partial > 0 {
		rows = append(rows, Row{"agent requests left out (another step count)", "—", strconv.Itoa(as.partial)})
	}
	_, aLo, aHi := binomialCI(float64(anySlow), float64(n))
	out, why := agentVerdict(aLo, aHi, pLo, pHi)
	return &Result{
		Setup: fmt.Sprintf("single-shot requests (Poisson %g/s, %v) against %d-step agents (Poisson %g/s, %v): the engine's law asks %d searches a question, max_steps %d, "+
			"top_k %d, %d answer tokens, fanout coupling over the service's shards, cache off; remedies on the same agent load for %v each: hedged shard searches, async coupling with a retrieval deadline, and parallel tool calls",
			singleShotRate, part(0).Round(time.Second), agentSteps, agentRate, part(1).Round(time.Second), agentSteps-1, agentSteps, agentTopK, agentMaxTokens, part(2).Round(time.Second)),
		Variants: []Variant{*single, *agent, *hv, *dv, *pv},
		Document: map[string]any{"steps": agentSteps, "independent_steps_share": naive},
		Rows:     rows, Verdict: Verdict{out, why},
	}, nil
}

// agentTail formats the P95 and P99 of an agent arm's server times, with their intervals.
func agentTail(a agentSample) string {
	sorted := durationsMS(a.totals)
	out := ""
	for i, q := range []float64{0.95, 0.99} {
		v, lo, hi, ok := stats.QuantileCI(sorted, q, 0.95)
		if i > 0 {
			out += "; "
		}
		out += fmtPct(report.PercentileStat{P: 100 * q, Value: v, Lo: lo, Hi: hi, HasCI: ok})
	}
	return fmt.Sprintf("%s (%d requests)", out, len(a.totals))
}

// remedyRow formats a remedy arm: its share of requests with a step beyond the agent arm's
// per-step P99s t, then its tail.
func remedyRow(a agentSample, t [agentSteps]float64) string {
	slow, _ := beyond(a.steps, t)
	return fmtRate(float64(slow), float64(len(a.steps))) + "; " + agentTail(a)
}

// agentVerdict applies agentRule to the agent share's interval [aLo, aHi] and the prediction's
// [pLo, pHi].
func agentVerdict(aLo, aHi, pLo, pHi float64) (string, string) {
	pct := func(lo, hi float64) string { return fmt.Sprintf("[%.1f%%, %.1f%%]", 100*lo, 100*hi) }
	amplified := aLo > 0.01
	agrees := aLo <= pHi && pLo <= aHi
	switch {
	case amplified && agrees:
		return Reproduced, fmt.Sprintf("agent requests meet a step beyond its P99 more often than a single shot meets its own (1 in 100): %s, as independent steps predict %s",
			pct(aLo, aHi), pct(pLo, pHi))
	case amplified && aHi < pLo:
		return NotReproduced, fmt.Sprintf("agent requests meet a slow step more often than 1 in 100 (%s), but less often than independent steps predict %s: slow steps cluster in the same requests",
			pct(aLo, aHi), pct(pLo, pHi))
	case amplified:
		return NotReproduced, fmt.Sprintf("agent requests meet a slow step more often than 1 in 100 (%s), and more often than independent steps predict %s",
			pct(aLo, aHi), pct(pLo, pHi))
	case aHi < 0.01:
		return Opposite, fmt.Sprintf("agent requests meet a step beyond its P99 less often than 1 in 100: %s", pct(aLo, aHi))
	default:
		return NotReproduced, fmt.Sprintf("the agent share %s does not lie above 1%% at this sample size (prediction %s)", pct(aLo, aHi), pct(pLo, pHi))
	}
}
