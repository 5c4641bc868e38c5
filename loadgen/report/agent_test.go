package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// agentResult is a run of four agent conversations: a answers after two rounds of tool calls
// (3 steps, 1.9 s), b is cut at the step bound (2 steps), c fails at its second step, d answers
// at once (1 step, 0.4 s).
func agentResult() *loadgen.Result {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	step := func(session string, k, intended, end, calls, wait int) loadgen.Record {
		return loadgen.Record{Session: session, Step: k, Intended: ms(intended), Sent: ms(intended), FirstToken: ms(intended + 50),
			End: ms(end), Status: 200, ToolCalls: calls, ToolWait: ms(wait), OutputTokens: 5}
	}
	recs := []loadgen.Record{
		step("a", 0, 0, 500, 1, 0), step("a", 1, 600, 1100, 2, 100), step("a", 2, 1300, 1900, 0, 200),
		step("b", 0, 100, 400, 1, 0), step("b", 1, 500, 900, 1, 100),
		step("c", 0, 200, 600, 1, 0), step("c", 1, 700, 800, 0, 100),
		step("d", 0, 300, 700, 0, 0),
	}
	recs[4].AgentCut = true
	recs[6].Status, recs[6].ErrKind, recs[6].Err = 500, loadgen.ErrKindHTTP5xx, "HTTP 500"
	for i := range recs {
		recs[i].Index = i
	}
	return &loadgen.Result{Start: time.Unix(1e9, 0), Duration: ms(2000), Records: recs}
}

func TestAgentsSummary(t *testing.T) {
	t.Parallel()
	slos, err := stats.ParseGoodput("ttft:1000,agent:1000")
	if err != nil {
		t.Fatal(err)
	}
	b := Summarize(agentResult(), Options{Agent: true, Goodput: slos})
	a := b.Agents
	if a == nil {
		t.Fatal("no agents")
	}
	if a.Conversations != 4 || a.Answered != 2 || a.Cut != 1 || a.Failed != 1 {
		t.Fatalf("conversations %d, answered %d, cut %d, failed %d; want 4, 2, 1, 1", a.Conversations, a.Answered, a.Cut, a.Failed)
	}
	if got := a.MeanSteps(); got != 2 { // (3+2+2+1)/4
		t.Errorf("mean steps %v, want 2", got)
	}
	if a.StepsQuantile(0.25) != 1 || a.StepsQuantile(0.5) != 2 || a.StepsQuantile(0.99) != 3 {
		t.Errorf("steps P25 %d, P50 %d, P99 %d; want 1, 2, 3", a.StepsQuantile(0.25), a.StepsQuantile(0.5), a.StepsQuantile(0.99))
	}
	if a.ToolCalls != 6 || a.ToolWaits != 4 || a.MeanToolWait() != 125*time.Millisecond {
		t.Errorf("tool calls %d, waits %d, mean wait %v; want 6, 4, 125ms", a.ToolCalls, a.ToolWaits, a.MeanToolWait())
	}
	// Agent latencies 1.9 s (a) and 0.4 s (d): the histogram holds them within its 0.1%.
	if n, lo, hi := a.Latency.Count(), a.Latency.Min(), a.Latency.Max(); n != 2 ||
		lo < 399*time.Millisecond || lo > 401*time.Millisecond || hi < 1898*time.Millisecond || hi > 1902*time.Millisecond {
		t.Errorf("agent latencies: %d from %v to %v; want 2, 400ms and 1.9s", n, lo, hi)
	}
	if a.Good != 1 || a.GoodputRate == nil || *a.GoodputRate != 1/b.Duration.Seconds() {
		t.Errorf("good %d, goodput %v over %v; want 1 conversation", a.Good, a.GoodputRate, b.Duration)
	}
	// The agent SLO bounds conversations only: every completed request meets the TTFT SLO.
	if b.GoodRequests != b.Completed {
		t.Errorf("good requests %d of %d completed", b.GoodRequests, b.Completed)
	}

	var buf bytes.Buffer
	if err := WriteJSON(&buf, b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"agent": {`, `"conversations": 4`, `"cut_at_max_steps": 1`, `"p99_agent_ms"`, `"goodput_conversations": 1`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("JSON has no %s", key)
		}
	}
	f, err := Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Bench.Agents
	if r == nil || r.Conversations != 4 || r.Answered != 2 || r.Good != 1 || r.MeanSteps() != 2 || !r.Latency.Equal(a.Latency) {
		t.Fatalf("read back %+v", r)
	}
	m, err := Merge(b, f.Bench)
	if err != nil {
		t.Fatal(err)
	}
	if m.Agents.Conversations != 8 || m.Agents.Latency.Count() != 4 || m.Agents.StepsQuantile(0.5) != 2 {
		t.Errorf("merged %+v", m.Agents)
	}
	var text bytes.Buffer
	if err := WriteText(&text, b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Agents", "4: 2 answered, 1 cut at the step bound, 1 failed", "Agent goodput (conv/s)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report has no %q:\n%s", want, text.String())
		}
	}
}

func TestAgentsHTML(t *testing.T) {
	t.Parallel()
	b := Summarize(agentResult(), Options{Agent: true})
	var buf bytes.Buffer
	if err := WriteHTML(&buf, b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Agents: tool loops", "2 / 1 / 1", "mean agent latency"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("HTML has no %q", want)
		}
	}
}

// TestAgentsUserTurnsAreNoToolWaits counts as tool waits only the steps that answer tool calls:
// a user's next turn of a multi-turn conversation follows an answer, after a think time.
func TestAgentsUserTurnsAreNoToolWaits(t *testing.T) {
	t.Parallel()
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	recs := []loadgen.Record{
		{Session: "m", Step: 0, Intended: 0, Sent: 0, End: ms(100), Status: 200, ToolCalls: 1},
		{Session: "m", Step: 1, Intended: ms(130), Sent: ms(130), End: ms(200), Status: 200, ToolWait: ms(30)},
		{Session: "m", Step: 2, Intended: ms(1200), Sent: ms(1200), End: ms(1300), Status: 200},
	}
	a := Summarize(&loadgen.Result{Records: recs, Duration: ms(1300)}, Options{Agent: true}).Agents
	if a.ToolWaits != 1 || a.MeanToolWait() != ms(30) || a.Answered != 1 || a.Latency.Count() != 1 {
		t.Errorf("tool waits %d, mean %v, answered %d; want 1, 30ms, 1", a.ToolWaits, a.MeanToolWait(), a.Answered)
	}
}
