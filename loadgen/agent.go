package loadgen

import (
	"math/rand/v2"
	"time"
)

// Agent makes Run drive a live tool loop, as an agent does: when a chat step's response
// calls tools, the item goes on with a further step, due a tool latency (drawn from
// ToolLatency) after that response ended, which sends the step's messages, the assistant
// message with its tool calls, and one "tool" message per call answering its id. The loop ends
// with a response that calls no tool (the final answer), a failed step, or after MaxSteps
// steps, the last of which is then marked AgentCut. Every step is a record of the item's
// session (lone requests get one, "agent-N") with its step index, its tool calls and the tool
// wait before it.
type Agent struct {
	// ToolLatency draws the time the tools take before each further step; nil waits none.
	ToolLatency Sampler
	// MaxSteps bounds the steps of one loop, the first included; 0 selects
	// DefaultAgentMaxSteps.
	MaxSteps int
	// ToolResult returns the content of the tool message answering call; nil sends "".
	ToolResult func(call ToolCall) string
	// ToolResultTokens is the estimate of one tool message's tokens, added to a further step's
	// prompt estimate (Request.PromptTokens) for servers that report no usage.
	ToolResultTokens int
	// Seed seeds the tool latencies: item n draws from its own stream, so a run's waits do not
	// depend on the order in which concurrent items reach them.
	Seed uint64
}

// Sampler draws a duration (shape.Law is one).
type Sampler interface {
	Sample(r *rand.Rand) time.Duration
}

// DefaultAgentMaxSteps is Agent.MaxSteps when it is 0.
const DefaultAgentMaxSteps = 10

// agentLoop is the state of one item's tool loop.
type agentLoop struct {
	agent *Agent
	rng   *rand.Rand
	steps int // steps of the item sent so far
}

// newAgentLoop returns the loop of the n-th item; nil without an Agent.
func newAgentLoop(a *Agent, n int64) *agentLoop {
	if a == nil {
		return nil
	}
	// The stream is a hash of n: PCG states that differ by a small count give correlated
	// first draws.
	return &agentLoop{agent: a, rng: rand.New(rand.NewPCG(a.Seed, splitMix(uint64(n))))}
}

// maxSteps is the loop's bound on steps.
func (l *agentLoop) maxSteps() int {
	if l.agent.MaxSteps > 0 {
		return l.agent.MaxSteps
	}
	return DefaultAgentMaxSteps
}

// keep returns req, or a copy of it that keeps its answer and tool calls (KeepAnswer), which
// a further step needs.
func (l *agentLoop) keep(req *Request) *Request {
	if l == nil || req.KeepAnswer || !isChat(req) {
		return req
	}
	out := *req
	out.KeepAnswer = true
	return &out
}

// next returns the step that answers the tool calls rec measured for req, and the tool
// latency to wait before it; ok is false when rec called no tool or the loop is at its bound
// (rec is then marked AgentCut). It drops the answer and calls from rec.
func (l *agentLoop) next(req *Request, rec *Record) (step *Request, wait time.Duration, ok bool) {
	calls := rec.Calls
	rec.Calls = nil
	if l == nil || !isChat(req) || !rec.OK() || len(calls) == 0 {
		return nil, 0, false
	}
	if l.steps >= l.maxSteps() {
		rec.AgentCut = true
		return nil, 0, false
	}
	msgs := make([]Message, 0, len(req.Messages)+1+len(calls))
	msgs = append(msgs, req.Messages...)
	msgs = append(msgs, Message{Role: "assistant", Content: rec.Answer, ToolCalls: calls})
	for _, c := range calls {
		content := ""
		if l.agent.ToolResult != nil {
			content = l.agent.ToolResult(c)
		}
		msgs = append(msgs, Message{Role: "tool", ToolCallID: c.ID, Content: content})
	}
	out := *req
	out.Messages, out.KeepAnswer, out.Continues = msgs, true, false
	out.PromptTokens = rec.PromptTokens + rec.OutputTokens + len(calls)*l.agent.ToolResultTokens
	if rec.PromptTokens == 0 {
		out.PromptTokens += req.PromptTokens
	}
	if l.agent.ToolLatency != nil {
		wait = max(l.agent.ToolLatency.Sample(l.rng), 0)
	}
	return &out, wait, true
}

// splitMix is SplitMix64's finaliser: a well-spread hash of x.
func splitMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
