package bench

import (
	"flag"
	"fmt"
	"strings"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// AgentOptions are the flags of an agent's live tool loop (--tool-latency, --tools,
// --agent-max-steps, --tool-result-tokens): when a response calls tools, the generator waits
// a tool latency, answers each call with a tool message and sends the next step.
type AgentOptions struct {
	ToolLatency shape.Law
	// Tools names the tools offered in every request ("search"); empty offers none (a dataset's
	// entries may bring their own).
	Tools            string
	MaxSteps         int
	ToolResultTokens int
	// On is set when a flag of the loop was given.
	On bool
}

// agentTools are the tools --tools may offer, by name, as OpenAI's "tools" array holds them.
var agentTools = map[string]map[string]any{
	"search": {"type": "function", "function": map[string]any{
		"name":        "search",
		"description": "Search the knowledge base for passages relevant to a query.",
		"parameters": map[string]any{"type": "object", "required": []string{"query"},
			"properties": map[string]any{"query": map[string]any{"type": "string", "description": "what to search for"}}},
	}},
}

// registerFlags registers the loop's flags on fs.
func (a *AgentOptions) registerFlags(fs *flag.FlagSet) {
	fs.Var(&a.ToolLatency, "tool-latency", "agents: run the live tool loop, waiting a tool latency drawn from this `law` before answering a response's\n"+
		"tool calls: "+shape.LawUsage+" (e.g. lognormal:80ms,0.6)")
	fs.StringVar(&a.Tools, "tools", "", "agents: offer these `tools` in every request and run the live tool loop; search (a function taking a\nquery, answered with --tool-result-tokens of synthetic passages)")
	fs.IntVar(&a.MaxSteps, "agent-max-steps", loadgen.DefaultAgentMaxSteps, "agents: requests of one conversation at most, the first included; a loop cut there is counted")
	fs.IntVar(&a.ToolResultTokens, "tool-result-tokens", 256, "agents: tokens (words) of the synthetic result of each tool call")
}

// flagsParsed notes whether a flag of the loop was given.
func (a *AgentOptions) flagsParsed(set map[string]bool) {
	a.On = set["tool-latency"] || set["tools"] || set["agent-max-steps"] || set["tool-result-tokens"]
}

// validate checks the loop's flags.
func (a *AgentOptions) validate() error {
	switch {
	case a.MaxSteps < 1 || a.MaxSteps > 1000:
		return fmt.Errorf("--agent-max-steps %d: want 1 to 1000", a.MaxSteps)
	case a.ToolResultTokens < 0 || a.ToolResultTokens > shape.MaxToolResultTokens:
		return fmt.Errorf("--tool-result-tokens %d: want 0 to %d", a.ToolResultTokens, shape.MaxToolResultTokens)
	}
	for _, name := range a.toolNames() {
		if agentTools[name] == nil {
			return fmt.Errorf("--tools %q: unknown tool %q (want search)", a.Tools, name)
		}
	}
	return nil
}

func (a *AgentOptions) toolNames() []string {
	var out []string
	for _, f := range strings.Split(a.Tools, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// agent is the loadgen.Agent of the options, nil when the loop is off; seed seeds the tool
// latencies.
func (a *AgentOptions) agent(seed uint64) *loadgen.Agent {
	if !a.On {
		return nil
	}
	n := a.ToolResultTokens
	return &loadgen.Agent{ToolLatency: a.ToolLatency, MaxSteps: a.MaxSteps, Seed: seed, ToolResultTokens: n,
		ToolResult: func(c loadgen.ToolCall) string { return shape.ToolResult(c.Function.Arguments, n) }}
}

// body adds the tools offered to the extra body fields; it refuses a "tools" given twice.
func (a *AgentOptions) body(extra map[string]any) (map[string]any, error) {
	names := a.toolNames()
	if len(names) == 0 {
		return extra, nil
	}
	if _, ok := extra["tools"]; ok {
		return nil, fmt.Errorf("--tools %s and --extra-body's \"tools\": give the tools once", a.Tools)
	}
	out := make(map[string]any, len(extra)+1)
	for k, v := range extra {
		out[k] = v
	}
	tools := make([]any, len(names))
	for i, name := range names {
		tools[i] = agentTools[name]
	}
	out["tools"] = tools
	return out, nil
}
