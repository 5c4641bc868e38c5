package pipeline_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// toolGenerator is a model that searches searches times before it answers: offered tools, it
// calls search (in two streamed pieces) while the conversation holds fewer tool answers than
// that, unless tool_choice is none; then it answers in text.
type toolGenerator struct {
	searches int
	// callFinish is the finish reason of a calling turn: "" for tool_calls; "stop" as OpenAI
	// ends a turn whose tool_choice named the function; "length" for a call the budget cut.
	callFinish string
	// parallel makes two calls in one turn when the request allows parallel tool calls and two
	// or more searches are still to come.
	parallel bool

	mu   sync.Mutex
	reqs []rag.GenRequest
}

func (g *toolGenerator) Models() []string { return []string{"model-a"} }

func (g *toolGenerator) Generate(_ context.Context, req rag.GenRequest) (rag.TokenStream, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	g.mu.Unlock()
	answered := 0
	for _, m := range req.Messages {
		if m.Role == "tool" {
			answered++
		}
	}
	var deltas []rag.Delta
	if len(req.Tools) > 0 && req.ToolChoice != "none" && answered < g.searches {
		n := 1
		if g.parallel && req.ParallelToolCalls && g.searches-answered >= 2 {
			n = 2
		}
		for i := range n {
			id := fmt.Sprintf("call_%d", answered+i)
			deltas = append(deltas,
				rag.Delta{Tokens: 1, ToolCalls: []rag.ToolCallDelta{{Index: i, ID: id, Name: "search"}}},
				rag.Delta{Tokens: 4, ToolCalls: []rag.ToolCallDelta{{Index: i, Arguments: fmt.Sprintf(`{"query":"hop %d"}`, answered+i+1)}}})
		}
		deltas = append(deltas, rag.Delta{FinishReason: cmp.Or(g.callFinish, "tool_calls"), Usage: &rag.Usage{PromptTokens: 100, CompletionTokens: 5}})
	} else {
		deltas = []rag.Delta{{Text: "The answer", Tokens: 2}, {Text: ".", Tokens: 1, FinishReason: "stop", Usage: &rag.Usage{PromptTokens: 300, CompletionTokens: 3}}}
	}
	return &scriptStream{deltas: deltas}, nil
}

type scriptStream struct{ deltas []rag.Delta }

func (s *scriptStream) Recv() (rag.Delta, error) {
	if len(s.deltas) == 0 {
		return rag.Delta{}, io.EOF
	}
	d := s.deltas[0]
	s.deltas = s.deltas[1:]
	return d, nil
}

func (s *scriptStream) Close() error { return nil }

func agenticQuery(maxSteps int) rag.Query {
	q := query(rag.CouplingFanout, 2)
	q.Mode, q.MaxSteps = rag.ModeAgentic, maxSteps
	return q
}

// TestAgenticRun: a model that searches twice makes three model calls; the trace has the agent
// span over three chat spans and two execute_tool spans, each with the retrieval stages under
// it, in order on one clock; the client gets a progress event per search and the answer's text
// only; Server-Timing sums the stages and has one entry per step.
func TestAgenticRun(t *testing.T) {
	t.Parallel()
	tp, sr := traced(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b := zeroLatency(2)
	gen := &toolGenerator{searches: 2}
	p, err := pipeline.New(b.emb, b.ret, b.docs, gen, pipeline.Config{}, pipeline.WithTracerProvider(tp), pipeline.WithMeterProvider(mp),
		pipeline.WithAdmitter(&fakeAdmitter{}))
	if err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{tb: t}
	res, err := p.Run(context.Background(), agenticQuery(0), sink)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 3 || len(res.Steps[0].Searches) != 1 || res.Steps[0].Searches[0] != "hop 1" || res.Steps[1].Searches[0] != "hop 2" || len(res.Steps[2].Searches) != 0 {
		t.Fatalf("steps %+v", res.Steps)
	}
	if res.FinishReason != "stop" || res.Usage.PromptTokens != 500 || res.Usage.CompletionTokens != 13 {
		t.Errorf("finish %q, usage %+v: want stop and the three calls' sums (500, 13)", res.FinishReason, res.Usage)
	}
	if got := sink.text(); got != "The answer." {
		t.Errorf("client got %q, want the answer alone", got)
	}
	var steps []int
	for _, ev := range sink.progressEvents() {
		steps = append(steps, ev.Step)
	}
	if !slices.Equal(steps, []int{1, 2}) {
		t.Errorf("progress events of steps %v, want one per search [1 2]", steps)
	}
	// The model saw its own calls and the tools' answers, each answering its call.
	last := gen.reqs[len(gen.reqs)-1]
	var ids []string
	for _, m := range last.Messages {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) == 1:
			ids = append(ids, m.ToolCalls[0].ID)
		case m.Role == "tool":
			ids = append(ids, m.ToolCallID)
			if !strings.HasPrefix(m.Content, "[1] ") {
				t.Errorf("tool answer %q, want numbered passages", m.Content)
			}
		}
	}
	if !slices.Equal(ids, []string{"call_0", "call_0", "call_1", "call_1"}) {
		t.Errorf("calls and answers %v", ids)
	}
	if len(gen.reqs[0].Tools) != 1 || gen.reqs[0].Tools[0].Name != "search" || gen.reqs[0].ToolChoice != "auto" {
		t.Errorf("first call's tools %+v, choice %q", gen.reqs[0].Tools, gen.reqs[0].ToolChoice)
	}

	st := res.ServerTiming()
	for _, want := range []string{`step1;desc="search";dur=`, `step2;desc="search";dur=`, `step3;desc="answer";dur=`, "generate;dur=", "embed;dur="} {
		if !strings.Contains(st, want) {
			t.Errorf("Server-Timing %q lacks %s", st, want)
		}
	}
	if strings.Count(st, "generate;") != 1 {
		t.Errorf("Server-Timing %q names generate more than once", st)
	}

	spans := waitSpans(t, sr, 1+1+1+3+2*(2+1+2+1)+1)
	root := one(t, spans, rag.SpanPipeline)
	agent := one(t, spans, rag.SpanAgent)
	if agent.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Error("invoke_agent is not a child of rag.pipeline")
	}
	chats := byName(spans, "chat model-a")
	tools := byName(spans, "execute_tool search")
	if len(chats) != 3 || len(tools) != 2 {
		t.Fatalf("%d chat and %d execute_tool spans, want 3 and 2", len(chats), len(tools))
	}
	var seq []sdktrace.ReadOnlySpan
	for _, s := range append(chats, tools...) {
		if s.Parent().SpanID() != agent.SpanContext().SpanID() {
			t.Errorf("%s is not a child of invoke_agent", s.Name())
		}
		seq = append(seq, s)
	}
	slices.SortFunc(seq, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	for i, want := range []string{"chat", "execute_tool", "chat", "execute_tool", "chat"} {
		if !strings.HasPrefix(seq[i].Name(), want) {
			t.Fatalf("span %d by start is %s, want %s", i, seq[i].Name(), want)
		}
		if i > 0 && seq[i].StartTime().Before(seq[i-1].EndTime()) {
			t.Errorf("%s starts before %s ends", seq[i].Name(), seq[i-1].Name())
		}
	}
	for _, tool := range tools {
		var children []string
		for _, s := range spans {
			if s.Parent().SpanID() == tool.SpanContext().SpanID() {
				children = append(children, s.Name())
			}
		}
		slices.Sort(children)
		if !slices.Equal(children, []string{"embeddings unknown", rag.SpanFetch, "retrieval test"}) {
			t.Errorf("execute_tool's children %v, want the retrieval stages", children)
		}
	}
	if v, _ := spanAttr(agent, rag.AttrAgentSteps); v.AsInt64() != 3 {
		t.Errorf("invoke_agent rag.agent.steps = %v, want 3", v.AsInt64())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					counts[m.Name] += dp.Sum
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					counts[m.Name] += int64(dp.Count)
				}
			}
		}
	}
	if counts["rag.agent.inference_calls"] != 3 || counts["rag.agent.tool_calls"] != 2 || counts["rag.tool.duration"] != 2 || counts["rag.agent.duration"] != 1 {
		t.Errorf("agent metrics %v", counts)
	}
}

// TestAgenticStepLimit: at the step limit the model is called with tool_choice none and must
// answer, whatever it would have searched.
func TestAgenticStepLimit(t *testing.T) {
	t.Parallel()
	b := zeroLatency(2)
	gen := &toolGenerator{searches: 10}
	p, err := pipeline.New(b.emb, b.ret, b.docs, gen, pipeline.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run(context.Background(), agenticQuery(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(gen.reqs) != 3 || gen.reqs[2].ToolChoice != "none" || gen.reqs[1].ToolChoice != "auto" || res.FinishReason != "stop" || len(res.Steps) != 3 {
		t.Errorf("%d calls, last choice %q, finish %q, %d steps", len(gen.reqs), gen.reqs[len(gen.reqs)-1].ToolChoice, res.FinishReason, len(res.Steps))
	}
}

// TestClientToolsRefused: the RAG service brings its own tool; a client's are refused.
func TestClientToolsRefused(t *testing.T) {
	t.Parallel()
	b := zeroLatency(2)
	p := b.pipeline(t, pipeline.Config{})
	q := query(rag.CouplingSync, 2)
	q.Tools = []rag.Tool{{Name: "weather"}}
	if _, err := p.Run(context.Background(), q, nil); err == nil || !strings.Contains(err.Error(), "own search tool") {
		t.Errorf("err = %v, want the client's tools refused", err)
	}
}

// TestAgenticCallTurnEndings: a calling turn that ends with stop still runs its calls; one the
// token budget cut short (finish length) is not run, and the next call must answer.
func TestAgenticCallTurnEndings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		finish          string
		calls, searches int
		lastChoice      string
	}{
		{finish: "stop", calls: 3, searches: 2, lastChoice: "auto"},
		{finish: "length", calls: 2, searches: 0, lastChoice: "none"},
	} {
		t.Run(tc.finish, func(t *testing.T) {
			t.Parallel()
			tp, sr := traced(t)
			b := zeroLatency(2)
			gen := &toolGenerator{searches: 2, callFinish: tc.finish}
			p, err := pipeline.New(b.emb, b.ret, b.docs, gen, pipeline.Config{}, pipeline.WithTracerProvider(tp))
			if err != nil {
				t.Fatal(err)
			}
			sink := &recordingSink{tb: t}
			res, err := p.Run(context.Background(), agenticQuery(0), sink)
			if err != nil {
				t.Fatal(err)
			}
			searches := 0
			for _, s := range res.Steps {
				searches += len(s.Searches)
			}
			if len(gen.reqs) != tc.calls || searches != tc.searches || gen.reqs[len(gen.reqs)-1].ToolChoice != tc.lastChoice || sink.text() != "The answer." {
				t.Errorf("%d calls, %d searches, last choice %q, answer %q; want %d, %d, %q and the answer",
					len(gen.reqs), searches, gen.reqs[len(gen.reqs)-1].ToolChoice, sink.text(), tc.calls, tc.searches, tc.lastChoice)
			}
			// Every model call, calling or answering, has its time to first chunk.
			for _, s := range waitSpans(t, sr, tc.calls+1) {
				if strings.HasPrefix(s.Name(), "chat ") {
					if v, ok := spanAttr(s, "gen_ai.response.time_to_first_chunk"); !ok || v.AsFloat64() < 0 {
						t.Errorf("chat span without gen_ai.response.time_to_first_chunk")
					}
				}
			}
		})
	}
}

// TestAgenticParallelSearches: with parallel_tool_calls the model asks two searches a call, and
// the pipeline runs them at once, each under its own execute_tool span from the same instant;
// four searches take three model calls, and Server-Timing sums the four retrieve stages.
// TestAgenticParallelSearchFails: when one of a step's parallel searches fails, the others are
// cancelled (the run fails with the first error and need not wait for them): of two calls, the
// first to reach the retriever takes 5 s and the second fails at once.
func TestAgenticParallelSearchFails(t *testing.T) {
	t.Parallel()
	done := checkNoLeak(t)
	defer done()
	errSearch := errors.New("search down")
	b := zeroLatency(1)
	b.ret.delayOf = func(call int32, _ int) time.Duration {
		if call == 1 {
			return 5 * time.Second
		}
		return 0
	}
	b.ret.errOf = func(call int32, _ int) error {
		if call == 2 {
			return errSearch
		}
		return nil
	}
	gen := &toolGenerator{searches: 2, parallel: true}
	p, err := pipeline.New(b.emb, b.ret, b.docs, gen, pipeline.Config{}, pipeline.WithAdmitter(&fakeAdmitter{}))
	if err != nil {
		t.Fatal(err)
	}
	q := agenticQuery(0)
	q.Coupling, q.ParallelToolCalls = rag.CouplingSync, true
	start := time.Now()
	_, err = p.Run(context.Background(), q, &recordingSink{tb: t})
	if took := time.Since(start); took >= 2*time.Second {
		t.Errorf("the run took %v: the failed search did not cancel its 5 s sibling", took)
	}
	if !errors.Is(err, errSearch) || rag.StageOf(err) != rag.StageRetrieve {
		t.Errorf("err = %v, want the failed search's at retrieve", err)
	}
	if n := b.ret.cancelled.Load(); n != 1 {
		t.Errorf("%d searches cancelled, want the slow sibling", n)
	}
}

func TestAgenticParallelSearches(t *testing.T) {
	t.Parallel()
	tp, sr := traced(t)
	b := zeroLatency(1)
	b.ret.delays = []time.Duration{30 * time.Millisecond}
	gen := &toolGenerator{searches: 4, parallel: true}
	p, err := pipeline.New(b.emb, b.ret, b.docs, gen, pipeline.Config{}, pipeline.WithTracerProvider(tp), pipeline.WithAdmitter(&fakeAdmitter{}))
	if err != nil {
		t.Fatal(err)
	}
	q := agenticQuery(0)
	q.Coupling, q.ParallelToolCalls = rag.CouplingSync, true
	res, err := p.Run(context.Background(), q, &recordingSink{tb: t})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 3 || len(res.Steps[0].Searches) != 2 || len(res.Steps[1].Searches) != 2 || !gen.reqs[0].ParallelToolCalls {
		t.Fatalf("steps %+v, first request's parallel_tool_calls %v", res.Steps, gen.reqs[0].ParallelToolCalls)
	}
	if n := b.ret.maxRun.Load(); n != 2 {
		t.Errorf("at most %d searches ran at once, want the step's 2", n)
	}
	// Two 30 ms searches at once take about 30 ms, not 60.
	if d := res.Steps[0].Duration; d >= 55*time.Millisecond {
		t.Errorf("a step of two parallel 30 ms searches took %v", d)
	}
	retrieves := 0
	for _, tm := range res.Timings {
		if tm.Stage == rag.StageRetrieve {
			retrieves++
		}
	}
	if retrieves != 4 {
		t.Errorf("%d retrieve timings, want the 4 searches'", retrieves)
	}
	// Server-Timing counts the retrieve stage's wall time: its runs lie within the two search
	// steps, so it cannot exceed them (the sum of the four would, by about 60 ms).
	st := res.ServerTiming()
	_, after, _ := strings.Cut(st, "retrieve;dur=")
	retrieveMS, err := strconv.ParseFloat(strings.SplitN(after, ",", 2)[0], 64)
	if err != nil {
		t.Fatalf("Server-Timing %q: %v", st, err)
	}
	if steps := res.Steps[0].Duration + res.Steps[1].Duration; retrieveMS > steps.Seconds()*1000 {
		t.Errorf("Server-Timing %q: retrieve %.3f ms is longer than the two search steps' %v", st, retrieveMS, steps)
	}
	var tools []sdktrace.ReadOnlySpan
	for _, s := range waitSpans(t, sr, 1) {
		if s.Name() == "execute_tool search" {
			tools = append(tools, s)
		}
	}
	if len(tools) != 4 {
		t.Fatalf("%d execute_tool spans, want 4", len(tools))
	}
	slices.SortFunc(tools, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	if !tools[0].StartTime().Equal(tools[1].StartTime()) || !tools[2].StartTime().Equal(tools[3].StartTime()) || tools[2].StartTime().Before(tools[1].EndTime()) {
		t.Errorf("execute_tool spans do not pair up from one instant per step: %v %v %v %v",
			tools[0].StartTime(), tools[1].StartTime(), tools[2].StartTime(), tools[3].StartTime())
	}
}
