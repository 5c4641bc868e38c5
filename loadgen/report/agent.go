package report

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// What a bench reports about agents (loadgen.Agent, bench's --tool-latency and --tools): each
// conversation is a session whose steps are requests, every step after the first sent a tool
// latency after the step before it ended. A step's latencies (its TTFT in "turns", by step
// index) run from its own intended send time; the agent latency of a conversation runs from
// its first request's intended send time to the end of its final answer, tool waits included.

// MaxAgentSteps bounds the rows of Agents.Steps: conversations of more steps share the last.
const MaxAgentSteps = 1000

// Agents summarises the conversations of an agent's tool loop. A conversation is answered when
// every step completed and the last one called no tool, cut when its last step still called
// tools at the loop's step bound (loadgen.Record.AgentCut), and failed otherwise (a step
// failed, or the run stopped before the answer).
type Agents struct {
	Conversations int64
	Answered      int64
	Cut           int64
	Failed        int64
	// Steps[k] counts the conversations of k steps sent (Steps[0] is unused); the last row
	// also holds the longer ones.
	Steps     []int64
	ToolCalls int64         // tool calls the responses made, over every step
	ToolWaits int64         // steps sent after a tool wait (answering the step before)
	ToolWait  time.Duration // the tool waits, summed
	// Latency holds the agent latencies of the answered conversations; the fields after it
	// derive from it.
	Latency *stats.Histogram
	// Good counts the answered conversations within SLO (the goodput's agent key); SLO is 0
	// without one.
	Good int64
	SLO  time.Duration

	Mean        time.Duration
	Percentiles []PercentileStat
	GoodputRate *float64 // Good per second of the bench's duration; nil without an SLO
}

func newAgents(slo time.Duration) *Agents {
	return &Agents{Latency: stats.NewHistogram(), SLO: slo, Steps: make([]int64, 2)}
}

// add counts one conversation, its steps in step order (warmup ones are not given).
func (a *Agents) add(steps []*loadgen.Record) {
	a.Conversations++
	sent := 0
	ok := true
	for i, r := range steps {
		if r.NotSent {
			ok = false
			continue
		}
		sent++
		a.ToolCalls += int64(r.ToolCalls)
		if i > 0 && steps[i-1].ToolCalls > 0 { // a step answering tool calls, not a user's next turn
			a.ToolWaits++
			a.ToolWait += r.ToolWait
		}
		ok = ok && r.OK()
	}
	k := min(sent, MaxAgentSteps)
	for len(a.Steps) <= k {
		a.Steps = append(a.Steps, 0)
	}
	a.Steps[k]++
	last := steps[len(steps)-1]
	switch {
	case ok && last.AgentCut:
		a.Cut++
	case ok && last.ToolCalls == 0:
		a.Answered++
		lat := last.End - steps[0].Intended
		a.Latency.Record(lat)
		if a.SLO > 0 && lat <= a.SLO {
			a.Good++
		}
	default:
		a.Failed++
	}
}

// MeanSteps is the mean number of steps sent per conversation; NaN without conversations.
func (a *Agents) MeanSteps() float64 {
	var n, sum int64
	for k, c := range a.Steps {
		n += c
		sum += int64(k) * c
	}
	return ratio(sum, n)
}

// StepsQuantile is the q-quantile (nearest rank) of the steps per conversation; 0 without
// conversations.
func (a *Agents) StepsQuantile(q float64) int {
	var n int64
	for _, c := range a.Steps {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank, seen := stats.NearestRank(n, q), int64(0)
	for k, c := range a.Steps {
		if seen += c; seen >= rank {
			return k
		}
	}
	return len(a.Steps) - 1
}

// MeanToolWait is the mean tool wait before a step; 0 without one.
func (a *Agents) MeanToolWait() time.Duration {
	if a.ToolWaits == 0 {
		return 0
	}
	return a.ToolWait / time.Duration(a.ToolWaits)
}

// finish derives the latency figures and the goodput over a bench of duration d.
func (a *Agents) finish(ps []float64, confidence float64, d time.Duration) {
	a.Mean = a.Latency.Mean()
	a.Percentiles = percentiles(a.Latency, ps, confidence)
	a.GoodputRate = nil
	if a.SLO > 0 {
		g := 0.0
		if d > 0 {
			g = float64(a.Good) / d.Seconds()
		}
		a.GoodputRate = &g
	}
}

// merge adds o's conversations to a.
func (a *Agents) merge(o *Agents) {
	a.Conversations += o.Conversations
	a.Answered += o.Answered
	a.Cut += o.Cut
	a.Failed += o.Failed
	for len(a.Steps) < len(o.Steps) {
		a.Steps = append(a.Steps, 0)
	}
	for k, c := range o.Steps {
		a.Steps[k] += c
	}
	a.ToolCalls += o.ToolCalls
	a.ToolWaits += o.ToolWaits
	a.ToolWait += o.ToolWait
	a.Latency.Merge(o.Latency)
	a.Good += o.Good
}

// agentJSON is the "agent" object: the conversations' counts, steps per conversation, tool
// calls and waits, the agent latency's mean and percentiles with their intervals, the goodput
// on the agent SLO, and the histograms the figures come from.
type agentJSON struct {
	agentHead
	percentiles percentileKeys
	agentTail
}

type agentHead struct {
	Conversations    count            `json:"conversations"`
	Answered         count            `json:"answered"`
	CutAtMaxSteps    count            `json:"cut_at_max_steps"`
	Failed           count            `json:"failed"`
	MeanSteps        derived[number]  `json:"mean_steps"`
	P50Steps         derived[count]   `json:"p50_steps"`
	P90Steps         derived[count]   `json:"p90_steps"`
	P99Steps         derived[count]   `json:"p99_steps"`
	ToolCalls        count            `json:"tool_calls"`
	ToolWaits        count            `json:"tool_waits"`
	TotalToolWaitMS  millis           `json:"total_tool_wait_ms"`
	MeanToolWaitMS   derived[millis]  `json:"mean_tool_wait_ms"`
	NAgentLatency    derived[count]   `json:"n_agent_latency"`
	MeanAgentMS      *derived[millis] `json:"mean_agent_ms"`
	SLOMS            *millis          `json:"slo_ms"`
	GoodConversation *count           `json:"goodput_conversations,omitempty"`
	Goodput          *derived[number] `json:"goodput,omitempty"` // good conversations per second
}

type agentTail struct {
	Steps     []agentStepsJSON `json:"steps"`
	Histogram json.RawMessage  `json:"histogram"`
}

// agentStepsJSON is a row of the steps per conversation: conversations of Steps steps (and
// more, on the last row when it is MaxAgentSteps).
type agentStepsJSON struct {
	Steps         count `json:"steps"`
	Conversations count `json:"conversations"`
}

// MarshalJSON writes the counts, the percentiles, then the rows and the histogram.
func (a agentJSON) MarshalJSON() ([]byte, error) {
	return members{a.agentHead, a.percentiles, a.agentTail}.MarshalJSON()
}

// UnmarshalJSON reads the counts, the rows and the histogram; the rest derives from them.
func (a *agentJSON) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &a.agentHead); err != nil {
		return err
	}
	return json.Unmarshal(b, &a.agentTail)
}

// agentObject is the "agent" object of a; nil without one.
func (b *Bench) agentObject() (*agentJSON, error) {
	a := b.Agents
	if a == nil {
		return nil, nil
	}
	out := &agentJSON{agentHead: agentHead{
		Conversations: count(a.Conversations), Answered: count(a.Answered), CutAtMaxSteps: count(a.Cut), Failed: count(a.Failed),
		MeanSteps: derived[number]{number(sig(a.MeanSteps()))},
		P50Steps:  derived[count]{count(a.StepsQuantile(0.5))}, P90Steps: derived[count]{count(a.StepsQuantile(0.9))},
		P99Steps:  derived[count]{count(a.StepsQuantile(0.99))},
		ToolCalls: count(a.ToolCalls), ToolWaits: count(a.ToolWaits), TotalToolWaitMS: millis(a.ToolWait),
		MeanToolWaitMS: derived[millis]{millis(a.MeanToolWait())},
		NAgentLatency:  derived[count]{count(a.Latency.Count())},
		SLOMS:          msWhen(a.SLO > 0, a.SLO),
	}}
	if a.Latency.Count() > 0 {
		out.MeanAgentMS = &derived[millis]{millis(a.Mean)}
	}
	if a.GoodputRate != nil {
		out.GoodConversation = ptr(count(a.Good))
		out.Goodput = &derived[number]{number(sig(*a.GoodputRate))}
	}
	out.percentiles = percentileKeys{metric: "agent", ps: b.Percentiles, stats: a.Percentiles}
	for k := 1; k < len(a.Steps); k++ {
		if a.Steps[k] > 0 {
			out.Steps = append(out.Steps, agentStepsJSON{Steps: count(k), Conversations: count(a.Steps[k])})
		}
	}
	raw, err := a.Latency.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("agent.histogram: %w", err)
	}
	out.Histogram = raw
	return out, nil
}

// readAgents reads the "agent" object of a file into b.
func (b *Bench) readAgents(c *checker, f *agentJSON) {
	if f == nil {
		return
	}
	a := newAgents(0)
	a.Conversations, a.Answered, a.Cut, a.Failed = int64(f.Conversations), int64(f.Answered), int64(f.CutAtMaxSteps), int64(f.Failed)
	a.ToolCalls, a.ToolWaits, a.ToolWait = int64(f.ToolCalls), int64(f.ToolWaits), time.Duration(f.TotalToolWaitMS)
	if f.SLOMS != nil {
		a.SLO = time.Duration(*f.SLOMS)
	}
	if f.GoodConversation != nil {
		a.Good = int64(*f.GoodConversation)
	}
	for i, row := range f.Steps {
		if row.Steps < 1 || row.Steps > MaxAgentSteps {
			c.fail(fmt.Sprintf("agent.steps[%d].steps", i), "%d, want 1 to %d", row.Steps, MaxAgentSteps)
			return
		}
		for int64(len(a.Steps)) <= int64(row.Steps) {
			a.Steps = append(a.Steps, 0)
		}
		a.Steps[row.Steps] += int64(row.Conversations)
	}
	if len(f.Histogram) > 0 {
		if err := a.Latency.UnmarshalJSON(f.Histogram); err != nil {
			c.fail("agent.histogram", "%v", err)
			return
		}
	}
	b.Agents = a
}
