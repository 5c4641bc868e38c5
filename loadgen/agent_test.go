package loadgen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// toolServer plays a model that searches before it answers: a request whose conversation holds
// fewer than rounds rounds of tool calls answered gets tool calls (one or two, with random ids) streamed in
// pieces; the next one gets the final answer. Every request after the first of a conversation
// must carry, after the messages of the request before it, the assistant message with exactly
// the tool calls the server issued and one tool message per call answering its id, in order;
// any other request fails with 400 and the test with it.
type toolServer struct {
	tb     testing.TB
	rounds int
	mu     sync.Mutex
	rng    *rand.Rand
	issued map[string][]loadgen.ToolCall // by the id of the first call: what the server sent
	asked  map[string][]loadgen.Message  // by the id of the first call: the messages it answered
	checks int                           // tool answers checked
}

func newToolServer(tb testing.TB, rounds int) *toolServer {
	return &toolServer{tb: tb, rounds: rounds, rng: rand.New(rand.NewPCG(7, 11)),
		issued: map[string][]loadgen.ToolCall{}, asked: map[string][]loadgen.Message{}}
}

func (s *toolServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []loadgen.Message `json:"messages"`
		Tools    []map[string]any  `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.check(body.Messages); err != nil {
		s.tb.Errorf("request %d: %v", len(body.Messages), err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	answered := 0 // rounds of tool calls answered
	for _, m := range body.Messages {
		if len(m.ToolCalls) > 0 {
			answered++
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if answered >= s.rounds || len(body.Tools) == 0 {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"the answer\"}}]}\n\n")
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		return
	}
	s.mu.Lock()
	calls := make([]loadgen.ToolCall, 1+s.rng.IntN(2))
	for i := range calls {
		calls[i] = loadgen.ToolCall{ID: fmt.Sprintf("call_%016x", s.rng.Uint64()), Type: "function",
			Function: loadgen.FunctionCall{Name: "search", Arguments: fmt.Sprintf(`{"query":"q%d"}`, s.rng.IntN(1000))}}
	}
	s.issued[calls[0].ID] = calls
	s.asked[calls[0].ID] = body.Messages
	s.mu.Unlock()
	for i, c := range calls { // id and name first, then the arguments in two fragments
		head, _ := json.Marshal(map[string]any{"index": i, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Function.Name, "arguments": ""}})
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[%s]}}]}\n\n", head)
		half := len(c.Function.Arguments) / 2
		for _, frag := range []string{c.Function.Arguments[:half], c.Function.Arguments[half:]} {
			q, _ := json.Marshal(frag)
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":%s}}]}}]}\n\n", i, q)
		}
	}
	fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n")
}

// check verifies the tool exchange a request ends with, if any.
func (s *toolServer) check(msgs []loadgen.Message) error {
	last := len(msgs) - 1
	if last < 0 || msgs[last].Role != "tool" {
		return nil
	}
	first := last
	for first > 0 && msgs[first-1].Role == "tool" {
		first--
	}
	tools := msgs[first : last+1]
	if first == 0 || msgs[first-1].Role != "assistant" {
		return fmt.Errorf("tool messages do not follow an assistant message")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	issued, ok := s.issued[tools[0].ToolCallID]
	if !ok {
		return fmt.Errorf("the first tool message answers %q, an id the server never issued", tools[0].ToolCallID)
	}
	if got := msgs[first-1].ToolCalls; !reflect.DeepEqual(got, issued) {
		return fmt.Errorf("the assistant message carries tool calls %+v, the server issued %+v", got, issued)
	}
	if len(tools) != len(issued) {
		return fmt.Errorf("%d tool messages answer %d calls", len(tools), len(issued))
	}
	for i, m := range tools {
		if m.ToolCallID != issued[i].ID {
			return fmt.Errorf("tool message %d answers %q, want %q", i, m.ToolCallID, issued[i].ID)
		}
		if !strings.Contains(m.Content, issued[i].Function.Arguments) {
			return fmt.Errorf("tool message %d holds %q, not the result for %s", i, m.Content, issued[i].Function.Arguments)
		}
	}
	if asked := s.asked[issued[0].ID]; !reflect.DeepEqual(msgs[:first-1], asked) {
		return fmt.Errorf("the messages before the tool exchange differ from those the calls answered")
	}
	s.checks++
	return nil
}

// TestAgentAnswersTheIssuedToolCalls runs conversations against a server that calls tools
// with random ids for three rounds: every step answers exactly the calls the server issued
// (the server fails the request otherwise), each conversation's records are its steps 0..3 with
// a tool wait drawn from the law before each later step, and its agent latency (last end minus
// first intended) is the sum of its steps' latencies and tool waits.
func TestAgentAnswersTheIssuedToolCalls(t *testing.T) {
	t.Parallel()
	const rounds, conversations = 3, 4
	srv := newToolServer(t, rounds)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	law, err := shape.ParseLaw("uniform:5ms,15ms")
	if err != nil {
		t.Fatal(err)
	}
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "search"}}}
	n := 0
	work := workloadFunc(func() (loadgen.Item, bool) {
		n++
		return loadgen.Item{At: time.Duration(n) * time.Millisecond, Request: loadgen.Request{
			Messages: []loadgen.Message{{Role: "user", Content: fmt.Sprintf("question %d", n)}}, Extra: map[string]any{"tools": tools}}}, true
	})
	agent := &loadgen.Agent{ToolLatency: law, Seed: 1, ToolResult: func(c loadgen.ToolCall) string {
		return "results for " + c.Function.Arguments
	}}
	res := mustRun(t, loadgen.Config{Workload: work, Client: newClient(t, ts.URL), NumItems: conversations, Agent: agent})
	if len(res.Records) != conversations*(rounds+1) || srv.checks != conversations*rounds {
		t.Fatalf("%d records, %d tool exchanges checked; want %d and %d", len(res.Records), srv.checks, conversations*(rounds+1), conversations*rounds)
	}
	bySession := map[string][]loadgen.Record{}
	for _, r := range res.Records {
		bySession[r.Session] = append(bySession[r.Session], r)
	}
	if len(bySession) != conversations {
		t.Fatalf("%d sessions, want %d", len(bySession), conversations)
	}
	for id, steps := range bySession {
		var sum time.Duration
		for k, r := range steps {
			switch {
			case r.Step != k:
				t.Errorf("%s: record %d is step %d", id, k, r.Step)
			case k < rounds && r.ToolCalls == 0, k == rounds && r.ToolCalls != 0:
				t.Errorf("%s step %d: %d tool calls", id, k, r.ToolCalls)
			case k > 0 && (r.ToolWait < 5*time.Millisecond || r.ToolWait > 15*time.Millisecond):
				t.Errorf("%s step %d: tool wait %v outside the law's uniform:5ms,15ms", id, k, r.ToolWait)
			case k > 0 && r.Intended != steps[k-1].End+r.ToolWait:
				t.Errorf("%s step %d: intended at %v, want the previous end %v plus the tool wait %v", id, k, r.Intended, steps[k-1].End, r.ToolWait)
			case r.AgentCut:
				t.Errorf("%s step %d: cut", id, k)
			}
			sum += r.E2EL() + r.ToolWait
		}
		if agentLatency := steps[len(steps)-1].End - steps[0].Intended; agentLatency != sum {
			t.Errorf("%s: agent latency %v, want the steps' latencies and tool waits %v", id, agentLatency, sum)
		}
	}
}

// TestAgentMaxSteps cuts a loop that would go on past its bound: the last step sent called
// tools and is marked AgentCut.
func TestAgentMaxSteps(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(newToolServer(t, 100))
	defer ts.Close()
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "search"}}}
	work := workloadFunc(func() (loadgen.Item, bool) {
		return loadgen.Item{Request: loadgen.Request{Messages: []loadgen.Message{{Role: "user", Content: "q"}}, Extra: map[string]any{"tools": tools}}}, true
	})
	agent := &loadgen.Agent{MaxSteps: 3, ToolResult: func(c loadgen.ToolCall) string { return c.Function.Arguments }}
	res := mustRun(t, loadgen.Config{Workload: work, Client: newClient(t, ts.URL), NumItems: 1, Agent: agent})
	if len(res.Records) != 3 {
		t.Fatalf("%d records, want 3 steps", len(res.Records))
	}
	for k, r := range res.Records {
		if r.Step != k || r.AgentCut != (k == 2) || r.Session != "agent-0" {
			t.Errorf("record %d: step %d, cut %v, session %q", k, r.Step, r.AgentCut, r.Session)
		}
	}
}

// toolCaller is a Doer whose model calls one tool on the question and answers once the call
// is answered.
type toolCaller struct{}

func (toolCaller) Do(_ context.Context, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	rec.Sent = time.Since(origin)
	if last := req.Messages[len(req.Messages)-1]; last.Role != "tool" {
		rec.ToolCalls = 1
		if req.KeepAnswer {
			rec.Calls = []loadgen.ToolCall{{ID: "call_" + last.Content, Type: "function", Function: loadgen.FunctionCall{Name: "search"}}}
		}
	}
	rec.Status, rec.End = 200, time.Since(origin)
}

// TestAgentToolWaitsFollowTheLaw checks the tool waits of many conversations, each drawn from
// its own seeded stream, against the law's quantiles: the share of waits at or below the
// analytic quantile q is binomial(n, q)/n, within 4.5 standard errors of q. The same seed
// draws the same waits.
func TestAgentToolWaitsFollowTheLaw(t *testing.T) {
	t.Parallel()
	const n = 400
	law, err := shape.ParseLaw("lognormal:1ms,0.6")
	if err != nil {
		t.Fatal(err)
	}
	waits := func() []time.Duration {
		i := 0
		work := workloadFunc(func() (loadgen.Item, bool) {
			i++
			return loadgen.Item{Request: loadgen.Request{Messages: []loadgen.Message{{Role: "user", Content: strconv.Itoa(i)}}}}, true
		})
		res := mustRun(t, loadgen.Config{Workload: work, Client: toolCaller{}, NumItems: n, Agent: &loadgen.Agent{ToolLatency: law, Seed: 42}})
		out := map[string]time.Duration{}
		for _, r := range res.Records {
			if r.Step == 1 {
				out[r.Session] = r.ToolWait
			}
		}
		if len(out) != n {
			t.Fatalf("%d tool waits, want %d", len(out), n)
		}
		sorted := make([]time.Duration, 0, n)
		for k := range n {
			sorted = append(sorted, out["agent-"+strconv.Itoa(k)])
		}
		return sorted
	}
	got := waits()
	for _, q := range []float64{0.1, 0.5, 0.9} {
		at, below := law.Quantile(q), 0
		for _, w := range got {
			if w <= at {
				below++
			}
		}
		share, se := float64(below)/n, math.Sqrt(q*(1-q)/n)
		if math.Abs(share-q) > 4.5*se {
			t.Errorf("%.3f of the waits at or below the law's P%g %v, want %g ± %.3f", share, 100*q, at, q, 4.5*se)
		}
	}
	if again := waits(); !reflect.DeepEqual(again, got) {
		t.Error("the same seed drew other waits")
	}
}
