package llmsim_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/pipeline"
)

func TestParseToolCallLaw(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string // want: the law's String, or the error's text
		max            int
		wantErr        bool
	}{
		{name: "fixed", in: "fixed:3", want: "fixed:3", max: 3},
		{name: "fixed zero", in: "fixed:0", want: "fixed:0", max: 0},
		{name: "none", in: "none", want: "fixed:0", max: 0},
		{name: "uniform", in: "uniform:1,4", want: "uniform:1,4", max: 4},
		{name: "uniform of one value", in: "uniform:2,2", want: "uniform:2,2", max: 2},
		{name: "geometric with max", in: "geometric:0.5,max=5", want: "geometric:0.5,max=5", max: 5},
		{name: "geometric without max", in: "geometric:0.25", want: "geometric:0.25,max=32", max: 32},
		{name: "geometric certain", in: "geometric:1", want: "geometric:1,max=32", max: 32},
		{name: "spaces", in: " uniform: 0 , 2 ", want: "uniform:0,2", max: 2},
		{name: "unknown kind", in: "poisson:2", want: "want fixed:N, uniform:A,B, geometric:P[,max=M] or none", wantErr: true},
		{name: "empty", in: "", want: "want fixed:N", wantErr: true},
		{name: "fixed too many", in: "fixed:33", want: "N from 0 to 32", wantErr: true},
		{name: "fixed negative", in: "fixed:-1", want: "N from 0 to 32", wantErr: true},
		{name: "fixed two numbers", in: "fixed:1,2", want: "N from 0 to 32", wantErr: true},
		{name: "uniform reversed", in: "uniform:3,1", want: "0 <= A <= B <= 32", wantErr: true},
		{name: "uniform one bound", in: "uniform:3", want: "want uniform:A,B", wantErr: true},
		{name: "geometric zero", in: "geometric:0", want: "0 < P <= 1", wantErr: true},
		{name: "geometric above one", in: "geometric:1.5", want: "0 < P <= 1", wantErr: true},
		{name: "geometric NaN", in: "geometric:NaN", want: "0 < P <= 1", wantErr: true},
		{name: "geometric max zero", in: "geometric:0.5,max=0", want: "max=M with M from 1 to 32", wantErr: true},
		{name: "geometric bad option", in: "geometric:0.5,cap=3", want: "max=M with M from 1 to 32", wantErr: true},
		{name: "none with arguments", in: "none:1", want: "none takes no arguments", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			law, err := llmsim.ParseToolCallLaw(tc.in)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, rag.ErrInvalidRequest) {
					t.Fatalf("ParseToolCallLaw(%q) = %v, %v; want an invalid-request error containing %q", tc.in, law, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseToolCallLaw(%q): %v", tc.in, err)
			}
			if law.String() != tc.want || law.Max() != tc.max {
				t.Errorf("ParseToolCallLaw(%q) = %q (max %d), want %q (max %d)", tc.in, law, law.Max(), tc.want, tc.max)
			}
			again, err := llmsim.ParseToolCallLaw(law.String())
			if err != nil || again != law {
				t.Errorf("String does not parse back: %q -> %v, %v", law, again, err)
			}
		})
	}
}

// The number of calls is a function of the seed and the question, and over many questions it
// follows the law: each count's share is within 4.5 standard errors of its probability, and
// the probabilities of each law sum to 1.
func TestToolCallLawDistribution(t *testing.T) {
	t.Parallel()
	const questions = 20000
	for _, spec := range []string{"geometric:0.5,max=5", "geometric:0.3,max=32", "uniform:0,3", "fixed:2"} {
		t.Run(spec, func(t *testing.T) {
			t.Parallel()
			law, err := llmsim.ParseToolCallLaw(spec)
			if err != nil {
				t.Fatal(err)
			}
			counts := make([]int, law.Max()+1)
			differ := 0
			for i := range questions {
				q := fmt.Sprintf("question number %d about the kv cache?", i)
				k := law.Calls(7, q)
				if k < 0 || k > law.Max() {
					t.Fatalf("Calls(%q) = %d, outside 0..%d", q, k, law.Max())
				}
				if again := law.Calls(7, "  "+q+"\n"); again != k {
					t.Fatalf("Calls(%q) = %d, then %d for the same question", q, k, again)
				}
				if law.Calls(8, q) != k {
					differ++
				}
				counts[k]++
			}
			sum := 0.0
			for k, n := range counts {
				p := law.Prob(k)
				sum += p
				share := float64(n) / questions
				se := math.Sqrt(p * (1 - p) / questions)
				if math.Abs(share-p) > 4.5*se+1e-12 {
					t.Errorf("%d calls: share %.4f, probability %.4f (standard error %.4f)", k, share, p, se)
				}
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("probabilities sum to %v", sum)
			}
			if law.Max() > 0 && spec != "fixed:2" && differ == 0 {
				t.Error("another seed gives every question the same count: the seed is not used")
			}
		})
	}
}

// toolStep is what one model call of a tool loop delivered through the engine's Go API.
type toolStep struct {
	calls  []rag.ToolCall
	deltas []rag.Delta
	text   string
	last   rag.Delta
	steps  int // engine steps the call took
	tokens int // sum of Delta.Tokens
}

// callModel runs msgs with tools on a paused virtual-time engine and collects its stream, the
// tool calls assembled with rag.AppendToolCalls as the pipeline assembles them.
func callModel(tb testing.TB, e *llmsim.Engine, req rag.GenRequest, opts ...llmsim.RequestOption) toolStep {
	tb.Helper()
	st, err := e.Submit(context.Background(), req, opts...)
	if err != nil {
		tb.Fatalf("submit: %v", err)
	}
	defer st.Close()
	var s toolStep
	s.steps = len(stepAll(tb, e))
	var text strings.Builder
	for {
		d, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("recv: %v", err)
		}
		s.deltas = append(s.deltas, d)
		s.calls = rag.AppendToolCalls(s.calls, d.ToolCalls)
		s.tokens += d.Tokens
		text.WriteString(d.Text)
		s.last = d
	}
	s.text = text.String()
	return s
}

func queryArg(tb testing.TB, c rag.ToolCall) string {
	tb.Helper()
	var args struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
		tb.Fatalf("arguments %q are not JSON: %v", c.Arguments, err)
	}
	return args.Query
}

// The agentic pipeline's loop through the engine's Go API: with the search tool the model calls
// it as many times as the law says for the question, one call per model call, then answers in
// text. Each call streams as OpenAI does (a first piece with index, id and name, then argument
// pieces), its tokens take decode steps and count as completion tokens, its arguments quote the
// question, and each next prompt, which extends the previous one, finds the previous prompt's
// full blocks in the prefix cache.
func TestEngineToolLoop(t *testing.T) {
	t.Parallel()
	const question = "How does paged attention keep the KV cache from fragmenting?"
	law, _ := llmsim.ParseToolCallLaw("uniform:2,4")
	p := prefixCaching(t, "tiny")
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused(), llmsim.WithSeed(3), llmsim.WithToolCalls(law))
	want := law.Calls(3, question)
	msgs := []rag.Message{{Role: "system", Content: pipeline.DefaultAgentPrompt}, {Role: "user", Content: question}}
	tools := []rag.Tool{pipeline.SearchTool}
	prevPrompt := 0
	ids := map[string]bool{}
	for hop := 1; ; hop++ {
		if hop > want+1 {
			t.Fatalf("still calling tools after %d calls, the law says %d", hop-1, want)
		}
		s := callModel(t, e, rag.GenRequest{ID: fmt.Sprint("step-", hop), Messages: msgs, MaxTokens: 64, Temperature: 1, Tools: tools, ToolChoice: "auto"})
		u := s.last.Usage
		if u == nil {
			t.Fatalf("hop %d: no usage on the last delta", hop)
		}
		if s.tokens != u.CompletionTokens || s.steps != u.CompletionTokens {
			t.Errorf("hop %d: deltas carry %d tokens and the engine ran %d steps, usage says %d completion tokens", hop, s.tokens, s.steps, u.CompletionTokens)
		}
		if hop > 1 {
			// The previous prompt's full blocks, all but its last partial block, are cached.
			if wantCached := prevPrompt / p.BlockSize * p.BlockSize; u.CachedTokens != wantCached || wantCached == 0 {
				t.Errorf("hop %d: %d cached tokens, want the previous prompt's %d tokens of full blocks", hop, u.CachedTokens, wantCached)
			}
		}
		prevPrompt = u.PromptTokens
		if hop > want {
			if len(s.calls) != 0 || s.last.FinishReason != "length" || s.text == "" || u.CompletionTokens != 64 {
				t.Fatalf("hop %d, after %d searches: calls %v, finish %q, %d tokens of text %q; want a text answer of 64 tokens",
					hop, want, s.calls, s.last.FinishReason, u.CompletionTokens, s.text)
			}
			return
		}
		if len(s.calls) != 1 || s.last.FinishReason != "tool_calls" || s.text != "" {
			t.Fatalf("hop %d of %d: calls %+v, finish %q, text %q; want one tool call", hop, want, s.calls, s.last.FinishReason, s.text)
		}
		first := s.deltas[0].ToolCalls
		if len(first) == 0 || first[0].ID == "" || first[0].Name != "search" || first[0].Arguments != "" {
			t.Errorf("hop %d: first delta's pieces %+v, want the call's id and name with no arguments", hop, first)
		}
		for _, d := range s.deltas[1:] {
			for _, c := range d.ToolCalls {
				if c.ID != "" || c.Name != "" || c.Arguments == "" {
					t.Errorf("hop %d: later piece %+v, want arguments only", hop, c)
				}
			}
		}
		c := s.calls[0]
		if !strings.HasPrefix(c.ID, "chatcmpl-tool-") || ids[c.ID] {
			t.Errorf("hop %d: call id %q, want a fresh chatcmpl-tool- id", hop, c.ID)
		}
		ids[c.ID] = true
		wantQuery := question
		if hop > 1 {
			wantQuery = fmt.Sprintf("%s (hop %d)", question, hop)
		}
		if got := queryArg(t, c); got != wantQuery {
			t.Errorf("hop %d: query %q, want %q", hop, got, wantQuery)
		}
		if wantTokens := rag.CountTokens(c.Name) + rag.CountTokens(c.Arguments); u.CompletionTokens != wantTokens {
			t.Errorf("hop %d: %d completion tokens, want the name's and arguments' %d", hop, u.CompletionTokens, wantTokens)
		}
		msgs = append(msgs, rag.Message{Role: "assistant", ToolCalls: s.calls},
			rag.Message{Role: "tool", ToolCallID: c.ID, Content: "[1] Paged attention\nBlocks of the KV cache are allocated on demand, like pages."})
	}
}

// tool_choice, parallel calls, a named tool, tools whose parameters are not the search tool's,
// and a max_tokens that cuts a call short.
func TestEngineToolChoices(t *testing.T) {
	t.Parallel()
	const question = "Why do long prompts delay other requests?"
	weather := rag.Tool{Name: "get_current_weather", Parameters: `{"type":"object","properties":{"city":{"type":"string"},` +
		`"days":{"type":"integer"},"metric":{"type":["boolean","null"]},"note":{"type":"string"}},"required":["city","days","metric"]}`}
	answered := func(n int) []rag.Message {
		msgs := []rag.Message{{Role: "user", Content: question}}
		for i := range n {
			id := fmt.Sprint("call-", i)
			msgs = append(msgs, rag.Message{Role: "assistant", ToolCalls: []rag.ToolCall{{ID: id, Name: "search", Arguments: "{}"}}},
				rag.Message{Role: "tool", ToolCallID: id, Content: "nothing"})
		}
		return msgs
	}
	for _, tc := range []struct {
		name      string
		law       string
		msgs      []rag.Message
		tools     []rag.Tool
		choice    string
		maxTokens int
		opts      []llmsim.RequestOption
		parallel  bool     // rag.GenRequest.ParallelToolCalls
		wantCalls []string // the calls' names, then their arguments
		wantArgs  []string
		finish    string
		wantErr   string
	}{
		{name: "no tools", law: "fixed:2", msgs: answered(0), finish: "length"},
		{name: "tool_choice none", law: "fixed:2", msgs: answered(0), tools: []rag.Tool{pipeline.SearchTool}, choice: "none", finish: "length"},
		{name: "law says none", law: "none", msgs: answered(0), tools: []rag.Tool{pipeline.SearchTool}, finish: "length"},
		{name: "law satisfied", law: "fixed:2", msgs: answered(2), tools: []rag.Tool{pipeline.SearchTool}, finish: "length"},
		{name: "required beyond the law", law: "fixed:2", msgs: answered(2), tools: []rag.Tool{pipeline.SearchTool}, choice: "required",
			wantCalls: []string{"search"}, wantArgs: []string{`{"query": "` + question + ` (hop 3)"}`}, finish: "tool_calls"},
		{name: "parallel: two at once", law: "fixed:3", msgs: answered(0), tools: []rag.Tool{pipeline.SearchTool},
			opts: []llmsim.RequestOption{llmsim.WithRequestParallelToolCalls(true)}, wantCalls: []string{"search", "search"},
			wantArgs: []string{`{"query": "` + question + `"}`, `{"query": "` + question + ` (hop 2)"}`}, finish: "tool_calls"},
		{name: "parallel: from the request", law: "fixed:3", msgs: answered(0), tools: []rag.Tool{pipeline.SearchTool}, parallel: true,
			wantCalls: []string{"search", "search"},
			wantArgs:  []string{`{"query": "` + question + `"}`, `{"query": "` + question + ` (hop 2)"}`}, finish: "tool_calls"},
		{name: "parallel: one left", law: "fixed:3", msgs: answered(2), tools: []rag.Tool{pipeline.SearchTool},
			opts: []llmsim.RequestOption{llmsim.WithRequestParallelToolCalls(true)}, wantCalls: []string{"search"},
			wantArgs: []string{`{"query": "` + question + ` (hop 3)"}`}, finish: "tool_calls"},
		{name: "first tool's required fields", law: "fixed:1", msgs: answered(0), tools: []rag.Tool{weather, pipeline.SearchTool},
			wantCalls: []string{"get_current_weather"}, wantArgs: []string{`{"city": "` + question + `", "days": 1, "metric": true}`}, finish: "tool_calls"},
		{name: "named tool", law: "none", msgs: answered(0), tools: []rag.Tool{weather, pipeline.SearchTool},
			opts: []llmsim.RequestOption{llmsim.WithRequestTool("search")}, wantCalls: []string{"search"},
			wantArgs: []string{`{"query": "` + question + `"}`}, finish: "tool_calls"},
		{name: "named tool not offered", law: "fixed:1", msgs: answered(0), tools: []rag.Tool{pipeline.SearchTool},
			opts: []llmsim.RequestOption{llmsim.WithRequestTool("lookup")}, wantErr: `names the function "lookup"`},
		{name: "max_tokens cuts the call", law: "fixed:1", msgs: answered(0), tools: []rag.Tool{pipeline.SearchTool}, maxTokens: 4,
			wantCalls: []string{"search"}, wantArgs: []string{`{"query`}, finish: "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			law, err := llmsim.ParseToolCallLaw(tc.law)
			if err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused(), llmsim.WithToolCalls(law))
			maxTokens := cmp.Or(tc.maxTokens, 48)
			req := rag.GenRequest{Messages: tc.msgs, MaxTokens: maxTokens, Temperature: 1, Tools: tc.tools, ToolChoice: tc.choice, ParallelToolCalls: tc.parallel}
			if tc.wantErr != "" {
				_, err := e.Submit(context.Background(), req, tc.opts...)
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, rag.ErrInvalidRequest) {
					t.Fatalf("submit: %v, want an invalid-request error containing %q", err, tc.wantErr)
				}
				return
			}
			s := callModel(t, e, req, tc.opts...)
			if s.last.FinishReason != tc.finish {
				t.Errorf("finish reason %q, want %q", s.last.FinishReason, tc.finish)
			}
			if len(s.calls) != len(tc.wantCalls) {
				t.Fatalf("calls %+v, want %d calls of %v", s.calls, len(tc.wantCalls), tc.wantCalls)
			}
			tokens := 0
			for i, c := range s.calls {
				if c.Name != tc.wantCalls[i] || c.Arguments != tc.wantArgs[i] || !strings.HasPrefix(c.ID, "chatcmpl-tool-") {
					t.Errorf("call %d: %+v, want %s(%s)", i, c, tc.wantCalls[i], tc.wantArgs[i])
				}
				tokens += rag.CountTokens(c.Name) + rag.CountTokens(c.Arguments)
			}
			switch {
			case len(s.calls) == 0 && (s.text == "" || s.last.Usage.CompletionTokens != maxTokens):
				t.Errorf("text answer of %d tokens %q, want %d tokens", s.last.Usage.CompletionTokens, s.text, maxTokens)
			case len(s.calls) > 0 && s.last.Usage.CompletionTokens != tokens:
				t.Errorf("%d completion tokens, want the calls' %d", s.last.Usage.CompletionTokens, tokens)
			}
		})
	}
}

// A reasoning model thinks first, then calls the tool: the reasoning comes apart (RecvOutput),
// and both count in the completion tokens.
func TestEngineReasonsBeforeToolCall(t *testing.T) {
	t.Parallel()
	law, _ := llmsim.ParseToolCallLaw("fixed:1")
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused(), llmsim.WithToolCalls(law))
	st, err := e.Submit(context.Background(), rag.GenRequest{Messages: []rag.Message{{Role: "user", Content: "what is a KV block?"}},
		MaxTokens: 64, Tools: []rag.Tool{pipeline.SearchTool}}, llmsim.WithRequestReasoning(5))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var reasoning, callTokens int
	var calls []rag.ToolCall
	var last llmsim.Output
	for {
		// One token per step: read each step's token before the next step.
		if info, err := e.Step(); err != nil || info.Seqs == 0 {
			break
		}
		o, err := st.RecvOutput()
		if err != nil {
			t.Fatal(err)
		}
		if o.Tokens+o.ReasoningTokens != 1 {
			t.Fatalf("a step delivered %+v, want one token", o)
		}
		if len(o.ToolCalls) > 0 && reasoning < 5 {
			t.Errorf("tool-call pieces after %d reasoning tokens, want them after all 5", reasoning)
		}
		reasoning += o.ReasoningTokens
		callTokens += o.Tokens
		calls = rag.AppendToolCalls(calls, o.ToolCalls)
		last = o
	}
	if len(calls) != 1 || last.FinishReason != "tool_calls" {
		t.Fatalf("calls %+v, finish %q", calls, last.FinishReason)
	}
	if u := last.Usage; u.ReasoningTokens != 5 || u.CompletionTokens != 5+callTokens || reasoning != 5 {
		t.Errorf("usage %+v with %d reasoning and %d call tokens delivered", u, reasoning, callTokens)
	}
}
