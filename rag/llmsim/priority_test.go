package llmsim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

func submitPriority(tb testing.TB, e *llmsim.Engine, id string, priority, promptTokens, maxTokens int) *llmsim.Stream {
	tb.Helper()
	st, err := e.Submit(context.Background(), rag.GenRequest{
		ID: id, Model: e.Profile().Model, Messages: userPrompt(tb, promptTokens), MaxTokens: maxTokens, Temperature: 1, Priority: priority,
	})
	if err != nil {
		tb.Fatalf("submit %s: %v", id, err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

func mustStep(tb testing.TB, e *llmsim.Engine) llmsim.StepInfo {
	tb.Helper()
	info, err := e.Step()
	if err != nil {
		tb.Fatal(err)
	}
	return info
}

// A flood of low-priority requests fills the batch and the queue; a high-priority request
// arriving after them waits behind the whole queue under fcfs and is admitted at the next free
// slot under priority, so its TTFT falls from several group service times to at most one.
func TestPriorityJumpsQueue(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	const groups, prompt, maxTokens = 4, 37, 32
	service := p.StepTime(p.MaxNumSeqs*prompt, 0, 0) + decodeTime(p, p.MaxNumSeqs, prompt, maxTokens)
	ttft := map[llmsim.SchedulingPolicy]int64{}
	for _, policy := range []llmsim.SchedulingPolicy{llmsim.PolicyFCFS, llmsim.PolicyPriority} {
		e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused(), llmsim.WithSchedulingPolicy(policy))
		var low []*llmsim.Stream
		for i := range groups * p.MaxNumSeqs {
			low = append(low, submitPriority(t, e, fmt.Sprint("low-", i), 10, prompt, maxTokens))
		}
		if info := mustStep(t, e); info.Admitted != p.MaxNumSeqs {
			t.Fatalf("%s: first step admitted %d, want a full batch of %d", policy, info.Admitted, p.MaxNumSeqs)
		}
		high := submitPriority(t, e, "high", 0, prompt, maxTokens)
		stepAll(t, e)
		drain(t, high)
		for _, s := range low {
			drain(t, s)
		}
		tl := high.Timeline()
		ttft[policy] = int64(tl.TTFT())
		switch policy {
		case llmsim.PolicyFCFS:
			// Behind groups-1 queued groups: scheduled only once they all ran.
			if tl.TTFT() < time.Duration(groups-1)*service {
				t.Errorf("fcfs: high-priority TTFT %v, want at least %v (behind %d groups of %v)", tl.TTFT(), time.Duration(groups-1)*service, groups-1, service)
			}
			for i := 1; i < len(low); i++ {
				if a, b := low[i-1].Timeline().Scheduled, low[i].Timeline().Scheduled; a > b {
					t.Fatalf("fcfs: low-%d scheduled at %v after low-%d at %v", i-1, a, i, b)
				}
			}
		case llmsim.PolicyPriority:
			if tl.TTFT() > service {
				t.Errorf("priority: high-priority TTFT %v, want at most one group's service time %v", tl.TTFT(), service)
			}
		}
	}
	if ttft[llmsim.PolicyPriority]*2 > ttft[llmsim.PolicyFCFS] {
		t.Errorf("high-priority TTFT: priority %v, fcfs %v: want priority below half of fcfs",
			time.Duration(ttft[llmsim.PolicyPriority]), time.Duration(ttft[llmsim.PolicyFCFS]))
	}
}

// When KV blocks run out, fcfs preempts the most recently admitted sequence; priority preempts
// the one with the highest priority value, the latest arrival among equals, so a high-priority
// request admitted last runs through untouched.
func TestPriorityPreemptsLowest(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	p.NumBlocks, p.MaxNumSeqs, p.MaxModelLen = 48, 16, 512
	const lows, prompt, maxTokens = 15, 30, 300
	for _, tc := range []struct {
		policy        llmsim.SchedulingPolicy
		highPreempted bool
	}{
		{llmsim.PolicyFCFS, true},
		{llmsim.PolicyPriority, false},
	} {
		e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused(), llmsim.WithSchedulingPolicy(tc.policy))
		var low []*llmsim.Stream
		for i := range lows {
			low = append(low, submitPriority(t, e, fmt.Sprint("low-", i), 0, prompt, maxTokens))
		}
		mustStep(t, e)
		high := submitPriority(t, e, "high", -1, prompt, maxTokens)
		stepAll(t, e)
		if r := drain(t, high); r.tokens != maxTokens {
			t.Errorf("%s: high produced %d tokens, want %d", tc.policy, r.tokens, maxTokens)
		}
		for _, s := range low {
			drain(t, s)
		}
		st := e.Stats()
		if st.Preemptions == 0 {
			t.Fatalf("%s: no preemption although the KV cache is too small for the outputs", tc.policy)
		}
		if got := high.Timeline().Preemptions > 0; got != tc.highPreempted {
			t.Errorf("%s: high-priority request preempted %d times, want preempted=%v", tc.policy, high.Timeline().Preemptions, tc.highPreempted)
		}
		if tc.policy == llmsim.PolicyPriority {
			if low[0].Timeline().Preemptions != 0 || low[lows-1].Timeline().Preemptions == 0 {
				t.Errorf("priority: preemptions of the first and last low arrivals %d and %d; want 0 and at least 1 (latest arrival among equals goes first)",
					low[0].Timeline().Preemptions, low[lows-1].Timeline().Preemptions)
			}
			if hf, lf := high.Timeline().Finished, low[lows-1].Timeline().Finished; hf >= lf {
				t.Errorf("priority: high finished at %v, not before the last low at %v", hf, lf)
			}
		}
		if st.BlocksUsed != 0 || st.Running != 0 || st.Waiting != 0 || st.Finished != lows+1 {
			t.Errorf("%s: after the run: %+v", tc.policy, st)
		}
	}
}

func TestPriorityBoundsAndPolicy(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	if got := e.SchedulingPolicy(); got != llmsim.PolicyFCFS {
		t.Errorf("default policy %q, want fcfs", got)
	}
	for _, prio := range []int{llmsim.MaxPriority + 1, -llmsim.MaxPriority - 1} {
		_, err := e.Submit(context.Background(), rag.GenRequest{Messages: userPrompt(t, 10), MaxTokens: 4, Priority: prio})
		if !errors.Is(err, rag.ErrInvalidRequest) {
			t.Errorf("priority %d: error %v, want one wrapping rag.ErrInvalidRequest", prio, err)
		}
	}
	for _, tc := range []struct {
		in   string
		want llmsim.SchedulingPolicy
		ok   bool
	}{{"", llmsim.PolicyFCFS, true}, {"fcfs", llmsim.PolicyFCFS, true}, {"priority", llmsim.PolicyPriority, true}, {"lifo", "", false}} {
		got, err := llmsim.ParseSchedulingPolicy(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSchedulingPolicy(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if err := e.SetSchedulingPolicy("lifo"); err == nil {
		t.Error("SetSchedulingPolicy(lifo) accepted")
	}
	if _, err := llmsim.New(p, llmsim.WithSchedulingPolicy("lifo")); err == nil {
		t.Error("New accepted policy lifo")
	}
	// Switching to priority at run time reorders the queue already waiting.
	p.MaxNumSeqs = 1
	e1 := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	c := submitPriority(t, e1, "c", 5, 10, 4)
	d := submitPriority(t, e1, "d", 1, 10, 4)
	if err := e1.SetSchedulingPolicy(llmsim.PolicyPriority); err != nil {
		t.Fatal(err)
	}
	stepAll(t, e1)
	drain(t, c)
	drain(t, d)
	if cs, ds := c.Timeline().Scheduled, d.Timeline().Scheduled; ds >= cs {
		t.Errorf("after switching to priority: d (priority 1) scheduled at %v, c (priority 5) at %v; want d first", ds, cs)
	}
}

func TestHandlerPriority(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithSchedulingPolicy(llmsim.PolicyPriority))
	srv := newServer(t, e)
	for _, tc := range []struct {
		priority string
		status   int
	}{{"-3", http.StatusOK}, {"0", http.StatusOK}, {`"high"`, http.StatusBadRequest}, {"1.5", http.StatusBadRequest}, {"2000000", http.StatusBadRequest}} {
		t.Run(tc.priority, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"ragtail-tiny","max_tokens":4,"priority":%s,"messages":[{"role":"user","content":"hi"}]}`, tc.priority)
			resp := post(t, t.Context(), srv.URL+"/v1/chat/completions", body)
			defer resp.Body.Close()
			var errBody struct {
				Error struct {
					Param string `json:"param"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&errBody); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || (tc.status != http.StatusOK && errBody.Error.Param != "priority") {
				t.Errorf("status %d, error param %q; want %d about priority", resp.StatusCode, errBody.Error.Param, tc.status)
			}
		})
	}
}
