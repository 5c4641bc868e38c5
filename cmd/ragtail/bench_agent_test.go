package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestBenchAgentAgainstLLMSim runs bench's live tool loop against llm-sim, whose model searches
// twice (one call per step, or both at once when it may call in parallel) before it answers:
// llm-sim refuses a tool message without the id of its call, so every completed step answered
// the calls it was given. The records show each conversation's steps 0..k, every step but the
// last calling tools and every later one sent a tool wait after the step before it, and the
// agent latency (first intended send to final answer) is the steps' latencies plus the tool
// waits; the JSON's agent section counts the conversations and their latencies.
func TestBenchAgentAgainstLLMSim(t *testing.T) {
	t.Parallel()
	const conversations, searches = 6, 2
	law, err := llmsim.ParseToolCallLaw("fixed:2")
	if err != nil {
		t.Fatal(err)
	}
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithToolCalls(law))
	dir := t.TempDir()
	out, detailed := filepath.Join(dir, "r.json"), filepath.Join(dir, "requests.jsonl")
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--quiet", "--dataset", "short",
		"--num-prompts", "6", "--concurrency", "2", "--max-tokens", "16", "--tools", "search", "--tool-latency", "lognormal:10ms,0.5,50ms",
		"--tool-result-tokens", "64", "--goodput", "agent:60000", "--json", out, "--save-detailed", detailed}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	type rec struct {
		Session    string  `json:"session"`
		Step       int     `json:"step"`
		OK         bool    `json:"ok"`
		ToolCalls  int     `json:"tool_calls"`
		ToolWaitNS int64   `json:"tool_wait_ns"`
		IntendedNS int64   `json:"intended_ns"`
		EndNS      int64   `json:"end_ns"`
		E2ELMS     float64 `json:"e2el_ms"`
		TTFTMS     float64 `json:"ttft_ms"`
	}
	f, err := os.Open(detailed)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	steps := map[string][]rec{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r rec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Session != "" {
			steps[r.Session] = append(steps[r.Session], r)
		}
	}
	if len(steps) != conversations {
		t.Fatalf("%d conversations in the records, want %d", len(steps), conversations)
	}
	var agentSum float64
	for id, ss := range steps {
		calls := 0
		var sum float64
		for k, r := range ss {
			last := k == len(ss)-1
			switch {
			case r.Step != k || !r.OK:
				t.Errorf("%s: record %d is step %d, ok %v", id, k, r.Step, r.OK)
			case !last && r.ToolCalls == 0, last && r.ToolCalls != 0:
				t.Errorf("%s step %d of %d: %d tool calls", id, k, len(ss), r.ToolCalls)
			case k > 0 && r.IntendedNS != ss[k-1].EndNS+r.ToolWaitNS:
				t.Errorf("%s step %d: intended at %d ns, want the previous end %d plus the tool wait %d", id, k, r.IntendedNS, ss[k-1].EndNS, r.ToolWaitNS)
			case r.TTFTMS <= 0:
				t.Errorf("%s step %d: no TTFT", id, k)
			}
			calls += r.ToolCalls
			sum += float64(r.EndNS-r.IntendedNS) + float64(r.ToolWaitNS)
		}
		if calls != searches {
			t.Errorf("%s: %d tool calls, want the %d searches llm-sim's law asks", id, calls, searches)
		}
		agent := float64(ss[len(ss)-1].EndNS - ss[0].IntendedNS)
		if agent < sum {
			t.Errorf("%s: agent latency %.0f ns below its steps' latencies and tool waits %.0f ns", id, agent, sum)
		}
		agentSum += agent
	}
	r := readJSON(t, out)
	a, _ := r["agent"].(map[string]any)
	if a["conversations"] != float64(conversations) || a["answered"] != float64(conversations) || a["n_agent_latency"] != float64(conversations) ||
		a["goodput_conversations"] != float64(conversations) {
		t.Fatalf("agent section %v", a)
	}
	if mean, _ := a["mean_agent_ms"].(float64); math.Abs(mean-agentSum/conversations/1e6) > 0.01*mean {
		t.Errorf("mean agent latency %v ms, the records give %v ms", mean, agentSum/conversations/1e6)
	}
	if _, ok := a["p99_agent_ms"]; !ok {
		t.Errorf("no p99_agent_ms in %v", a)
	}
	if turns, _ := r["turns"].([]any); len(turns) < 2 {
		t.Errorf("turns %v: want TTFT by step", r["turns"])
	}
	if !strings.Contains(stdout.String(), "Agents") || !strings.Contains(stdout.String(), "agent latency") {
		t.Errorf("text report has no agents section:\n%s", stdout.String())
	}
}

// TestBenchToolFlagsErrors checks that bad agent flags stop bench before anything starts,
// naming the flag.
func TestBenchToolFlagsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tool-latency", "lognormal:80ms"}, "tool-latency"},
		{[]string{"--tools", "browse"}, "--tools"},
		{[]string{"--tools", "search", "--agent-max-steps", "0"}, "--agent-max-steps"},
		{[]string{"--tools", "search", "--extra-body", `{"tools":[]}`}, "--tools"},
		{[]string{"--goodput", "agent:500"}, "--tools or --tool-latency"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"bench", "--url", "http://127.0.0.1:1/v1/chat/completions", "--model", "m", "--quiet"}, tc.args...), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), tc.want) {
			t.Errorf("%v: error %v, stderr %s; want one naming %s", tc.args, err, stderr.String(), tc.want)
		}
	}
}
