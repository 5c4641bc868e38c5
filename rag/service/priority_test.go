package service

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// llm.scheduling_policy changes the running engine's policy, survives an engine switch, and a
// bad value is refused naming the field.
func TestRuntimeSchedulingPolicy(t *testing.T) {
	t.Parallel()
	svc, api, _ := testService(t)
	rt := svc.Runtime
	if got := rt.Config().LLM.SchedulingPolicy; got != "fcfs" {
		t.Fatalf("initial scheduling_policy %q, want fcfs", got)
	}
	if _, err := rt.Apply(context.Background(), []byte(`{"llm":{"scheduling_policy":"lifo"}}`)); !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), "llm.scheduling_policy") {
		t.Fatalf("scheduling_policy lifo: %v; want an invalid-request error naming llm.scheduling_policy", err)
	}
	for _, body := range []string{`{"llm":{"scheduling_policy":"priority"}}`, `{"llm":{"kv_alloc":"contiguous"}}`} {
		if _, err := rt.Apply(context.Background(), []byte(body)); err != nil {
			t.Fatalf("Apply(%s): %v", body, err)
		}
		if got, eng := rt.Config().LLM.SchedulingPolicy, rt.engine.Current().SchedulingPolicy(); got != "priority" || eng != llmsim.PolicyPriority {
			t.Fatalf("after %s: config %q, engine %q; want priority", body, got, eng)
		}
	}
	for _, tc := range []struct {
		priority string
		status   int
	}{{"-5", http.StatusOK}, {"2000000", http.StatusBadRequest}, {`"urgent"`, http.StatusBadRequest}} {
		resp, err := http.Post(api.URL+"/v1/chat/completions", "application/json", strings.NewReader(
			`{"model":"ragtail-tiny","max_tokens":2,"priority":`+tc.priority+`,"messages":[{"role":"user","content":"what is a block?"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("priority %s: status %d, want %d", tc.priority, resp.StatusCode, tc.status)
		}
	}
}

// llm.tool_calls changes the running engine's law of searches, survives an engine switch, and a
// bad law is refused naming the field.
func TestRuntimeToolCalls(t *testing.T) {
	t.Parallel()
	svc, _, _ := testService(t)
	rt := svc.Runtime
	if got := rt.Config().LLM.ToolCalls; got != llmsim.DefaultToolCallLaw.String() {
		t.Fatalf("initial tool_calls %q, want the default %q", got, llmsim.DefaultToolCallLaw)
	}
	if _, err := rt.Apply(context.Background(), []byte(`{"llm":{"tool_calls":"fixed:99"}}`)); !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), "llm.tool_calls") {
		t.Fatalf("tool_calls fixed:99: %v; want an invalid-request error naming llm.tool_calls", err)
	}
	for _, body := range []string{`{"llm":{"tool_calls":"fixed:4"}}`, `{"llm":{"kv_alloc":"contiguous"}}`} {
		if _, err := rt.Apply(context.Background(), []byte(body)); err != nil {
			t.Fatalf("Apply(%s): %v", body, err)
		}
		if got, n := rt.Config().LLM.ToolCalls, rt.engine.Current().ToolCalls().Calls(1, "any question"); got != "fixed:4" || n != 4 {
			t.Fatalf("after %s: config %q, engine asks %d searches; want fixed:4 and 4", body, got, n)
		}
	}
}
