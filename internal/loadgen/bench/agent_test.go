package bench

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/loadgen"
)

// parseAgent parses args with bench's flags and returns the loop's options.
func parseAgent(tb testing.TB, args ...string) (*Options, error) {
	tb.Helper()
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.FlagsParsed(fs)
	return &o, nil
}

func TestAgentFlags(t *testing.T) {
	t.Parallel()
	o, err := parseAgent(t)
	if err != nil || o.Agent.On || o.Agent.agent(1) != nil || o.reportOptions().Agent {
		t.Fatalf("without the flags the loop is on: %+v, %v", o.Agent, err)
	}
	o, err = parseAgent(t, "--tools", "search", "--tool-latency", "lognormal:80ms,0.6", "--agent-max-steps", "4",
		"--tool-result-tokens", "8", "--extra-body", `{"top_k":3}`, "--seed", "9")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	a := o.Agent.agent(o.Seed)
	if a == nil || a.MaxSteps != 4 || a.Seed != 9 || a.ToolLatency == nil || !o.reportOptions().Agent {
		t.Fatalf("agent %+v", a)
	}
	result := a.ToolResult(loadgen.ToolCall{Function: loadgen.FunctionCall{Arguments: `{"query":"p99"}`}})
	if words := strings.Fields(strings.TrimPrefix(result, `results for {"query":"p99"}: `)); len(words) != 8 {
		t.Errorf("tool result %q: %d words, want 8", result, len(words))
	}
	body, err := o.Agent.body(o.ExtraBody)
	if err != nil {
		t.Fatal(err)
	}
	tools, _ := body["tools"].([]any)
	if body["top_k"] != 3.0 || len(tools) != 1 || tools[0].(map[string]any)["function"].(map[string]any)["name"] != "search" {
		t.Errorf("body %v", body)
	}
	if _, ok := o.ExtraBody["tools"]; ok {
		t.Error("--extra-body's own map was written into")
	}
	if _, err := parseAgent(t, "--tool-latency", "lognormal:80ms"); err == nil || !strings.Contains(err.Error(), "-tool-latency") {
		t.Errorf("a bad law: %v", err)
	}
}
