package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// agentQuestion needs 3 searches under llm-sim's default tool-call law and seed 1 (checked by
// the tests), so an agentic request makes 4 model calls, within the default max_steps of 5.
// The tests retrieve 2 chunks a search (--top-k 2): with the default 5, the fourth call's
// prompt (3 searches of 5 chunks) exceeds the tiny profile's 2048-token context.
const agentQuestion = "What makes tail latency grow with fan-out?"

// agentSpan is a span of the waterfall of /debug/traces.
type agentSpan struct {
	Name          string  `json:"name"`
	SpanID        string  `json:"span_id"`
	Parent        string  `json:"parent_span_id"`
	StartOffsetMS float64 `json:"start_offset_ms"`
	DurationMS    float64 `json:"duration_ms"`
}

// askAgent sends an agentic request to the service at addr and returns its trace id.
func askAgent(t *testing.T, addr, model string) string {
	t.Helper()
	body := `{"model":"` + model + `","max_tokens":64,"messages":[{"role":"user","content":"` + agentQuestion + `"}],"rag":{"mode":"agentic"}}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var c struct {
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 || len(c.Choices) != 1 || c.Choices[0].Message.Content == "" {
		t.Fatalf("status %d, body %s", resp.StatusCode, b)
	}
	tc, ok := httpapi.ParseTraceParent(resp.Header.Get("traceparent"))
	if !ok {
		t.Fatalf("no traceparent in %v", resp.Header)
	}
	return tc.TraceID
}

// agentWaterfall fetches the trace's waterfall from /debug/traces, waiting for it to be kept.
func agentWaterfall(t *testing.T, admin, traceID string) []agentSpan {
	t.Helper()
	var tv struct {
		Waterfall []agentSpan `json:"waterfall"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get("http://" + admin + "/debug/traces?trace_id=" + traceID)
		if err == nil {
			if r.StatusCode == 200 {
				err = json.NewDecoder(r.Body).Decode(&tv)
			}
			r.Body.Close()
			if err == nil && len(tv.Waterfall) > 0 {
				return tv.Waterfall
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not in /debug/traces: %v", traceID, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkAgentTrace checks the agent's spans: one invoke_agent span, under it searches+1 chat
// spans and searches execute_tool search spans, alternating on the trace's clock (each starts
// after the previous one ended), chat first and last, and the retrieval spans under each tool
// span.
func checkAgentTrace(t *testing.T, spans []agentSpan, searches int) {
	t.Helper()
	var agent *agentSpan
	for i := range spans {
		if spans[i].Name == "invoke_agent" {
			if agent != nil {
				t.Fatal("two invoke_agent spans")
			}
			agent = &spans[i]
		}
	}
	if agent == nil {
		t.Fatalf("no invoke_agent span in %s", spanNames(spans))
	}
	var steps []agentSpan
	retrievalUnder := map[string]int{}
	byID := map[string]agentSpan{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	for _, s := range spans {
		if s.Parent == agent.SpanID && (strings.HasPrefix(s.Name, "chat ") || s.Name == "execute_tool search") {
			steps = append(steps, s)
		}
		if strings.HasPrefix(s.Name, "retrieval ") && byID[s.Parent].Name == "execute_tool search" {
			retrievalUnder[s.Parent]++
		}
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i].StartOffsetMS < steps[j].StartOffsetMS })
	var want []string
	for range searches {
		want = append(want, "chat", "execute_tool search")
	}
	want = append(want, "chat")
	var got []string
	for _, s := range steps {
		got = append(got, strings.Split(s.Name, " {")[0])
		if strings.HasPrefix(s.Name, "chat ") {
			got[len(got)-1] = "chat"
		}
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("agent steps %q\nwant %q\nall spans: %s", got, want, spanNames(spans))
	}
	const slackMS = 0.01 // offsets are rounded to microseconds
	for i, s := range steps {
		if s.StartOffsetMS < agent.StartOffsetMS-slackMS || s.StartOffsetMS+s.DurationMS > agent.StartOffsetMS+agent.DurationMS+slackMS {
			t.Errorf("step %d (%s) at %.3f+%.3f ms lies outside invoke_agent's %.3f+%.3f ms", i, s.Name, s.StartOffsetMS, s.DurationMS, agent.StartOffsetMS, agent.DurationMS)
		}
		if i > 0 {
			if prev := steps[i-1]; s.StartOffsetMS < prev.StartOffsetMS+prev.DurationMS-slackMS {
				t.Errorf("step %d (%s) starts at %.3f ms, before step %d (%s) ended at %.3f ms", i, s.Name, s.StartOffsetMS, i-1, prev.Name, prev.StartOffsetMS+prev.DurationMS)
			}
		}
		if s.Name == "execute_tool search" && retrievalUnder[s.SpanID] != 1 {
			t.Errorf("step %d: %d retrieval spans under execute_tool search, want 1", i, retrievalUnder[s.SpanID])
		}
	}
}

func spanNames(spans []agentSpan) string {
	var names []string
	for _, s := range spans {
		names = append(names, fmt.Sprintf("%s@%.3f", s.Name, s.StartOffsetMS))
	}
	return strings.Join(names, ", ")
}

// `ragtail serve` on its embedded simulated engine, an agentic request: the engine's law asks 3
// searches of the question, so the trace shows invoke_agent over 4 chat spans and 3 execute_tool
// search spans, alternating on one clock.
func TestServeAgenticOnSimulatedEngine(t *testing.T) {
	t.Parallel()
	if n := llmsim.DefaultToolCallLaw.Calls(1, agentQuestion); n != 3 {
		t.Fatalf("the question needs %d searches under the default law and seed 1; the test expects 3", n)
	}
	addr, _, _ := startServe(t, "--profile", "tiny", "--top-k", "2", "--corpus-docs", "30", "--profiling=false")
	checkAgentTrace(t, agentWaterfall(t, adminAddrOf(t, addr), askAgent(t, addr, "ragtail-tiny")), 3)
}

// The same with the engine behind HTTP: `serve --llm-url` to an llm-sim server, through the
// OpenAI client. llm-sim sees 4 chat requests, each after the first answering with tool
// messages the tool calls it issued, and finds the previous prompts in its prefix cache.
func TestServeAgenticOverHTTP(t *testing.T) {
	t.Parallel()
	prof, _ := llmsim.ProfileByName("tiny")
	prof.PrefixCaching = true
	engine, err := llmsim.New(prof, llmsim.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	handler := llmsim.NewHandler(engine)
	var mu sync.Mutex
	var bodies [][]byte
	sim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, b)
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		handler.ServeHTTP(w, r)
	}))
	defer sim.Close()

	addr, _, _ := startServe(t, "--top-k", "2", "--corpus-docs", "30", "--profiling=false", "--llm-url", sim.URL+"/v1", "--llm-model", prof.Model)
	checkAgentTrace(t, agentWaterfall(t, adminAddrOf(t, addr), askAgent(t, addr, prof.Model)), 3)

	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 4 {
		t.Fatalf("llm-sim saw %d chat requests, want 4", len(bodies))
	}
	for i, b := range bodies {
		var req struct {
			Messages []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
				ToolCalls  []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"messages"`
			Tools []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(b, &req); err != nil || len(req.Tools) != 1 {
			t.Fatalf("request %d: %v, %d tools: %s", i, err, len(req.Tools), b)
		}
		issued, answered := map[string]bool{}, 0
		for _, m := range req.Messages {
			for _, c := range m.ToolCalls {
				issued[c.ID] = true
			}
			if m.Role == "tool" {
				if !issued[m.ToolCallID] {
					t.Errorf("request %d: a tool message answers %q, which no assistant message called", i, m.ToolCallID)
				}
				answered++
			}
		}
		if answered != i {
			t.Errorf("request %d has %d tool messages, want %d", i, answered, i)
		}
	}
	if st := engine.Stats(); st.PrefixCacheHits == 0 || st.Stopped != 3 {
		t.Errorf("engine stats: %d prefix-cache hits, %d tool-call answers; want hits and 3", st.PrefixCacheHits, st.Stopped)
	}
}
