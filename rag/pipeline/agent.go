package pipeline

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// SearchTool is the tool an agentic request's model is given: a search of the knowledge base,
// answered by the pipeline's own retrieval (embed, retrieve in the request's coupling, fetch).
var SearchTool = rag.Tool{
	Name:        "search",
	Description: "Search the knowledge base. Returns the passages that best match the query, numbered.",
	Parameters:  `{"type":"object","properties":{"query":{"type":"string","description":"what to search for"}},"required":["query"]}`,
}

// DefaultAgentPrompt opens an agentic request's conversation: the model searches as often as it
// needs, then answers from what it found.
const DefaultAgentPrompt = "Answer the user's question. Search the knowledge base with the search tool as often as you need, then answer from the passages you found and cite them like [1]."

// AgentStep is one model call of an agentic request and the searches it asked for.
type AgentStep struct {
	Start    time.Time
	Duration time.Duration // from the model call's start to the end of its searches
	// Searches are the search calls the step made; none for the step that answered.
	Searches []string
}

// executeAgentic answers the request with a tool-calling loop: the model is called with the
// search tool; each call of it runs retrieval under an execute_tool span and goes back to the
// model as a tool message; the loop ends at an answer, or at the step limit, whose call is made
// with tool_choice none so that the model must answer.
func (r *run) executeAgentic(res *Result, gen *generation) error {
	if err := r.admit(); err != nil {
		return err
	}
	agent := r.beginAgent()
	msgs := append([]rag.Message{{Role: "system", Content: DefaultAgentPrompt}}, r.req.Messages...)
	maxSteps := r.req.MaxSteps
	if maxSteps == 0 {
		maxSteps = rag.DefaultMaxSteps
	}
	var (
		err    error
		forced bool // the next call must answer: the step limit, or a call cut short
	)
	for step := 1; ; step++ {
		choice := "auto"
		if step >= maxSteps || forced {
			choice = "none"
		}
		stepStart := r.p.now()
		*gen = generation{}
		if err = r.generateWith(msgs, []rag.Tool{SearchTool}, choice, res, gen); err != nil {
			break
		}
		res.Usage = sumUsage(res.Usage, gen.usage)
		if len(gen.calls) > 0 && res.FinishReason == "length" && choice != "none" {
			// The token budget cut the call short: its arguments are not whole, so the next
			// call answers with what the conversation has.
			res.Steps = append(res.Steps, AgentStep{Start: stepStart, Duration: r.p.now().Sub(stepStart)})
			forced = true
			continue
		}
		// A calling turn may end with tool_calls or, as OpenAI's does when tool_choice names a
		// function, with stop: the calls decide.
		if len(gen.calls) == 0 || choice == "none" {
			res.Steps = append(res.Steps, AgentStep{Start: stepStart, Duration: r.p.now().Sub(stepStart)})
			break
		}
		msgs = append(msgs, rag.Message{Role: "assistant", Content: gen.answer.String(), ToolCalls: gen.calls})
		searches := make([]string, len(gen.calls))
		for i, call := range gen.calls {
			searches[i] = searchQuery(call, r.req.Question())
			if err = r.progressStep(step, searches[i]); err != nil {
				break
			}
		}
		if err == nil {
			var passages []string
			if passages, err = r.runTools(agent, gen.calls, searches); err == nil {
				for i, call := range gen.calls {
					msgs = append(msgs, rag.Message{Role: "tool", ToolCallID: call.ID, Content: passages[i]})
				}
			}
		}
		res.Steps = append(res.Steps, AgentStep{Start: stepStart, Duration: r.p.now().Sub(stepStart), Searches: searches})
		if err != nil {
			break
		}
	}
	r.endAgent(agent, res, err)
	return err
}

// runTools runs a model call's search calls: one in the run's goroutine, several at once, each
// in a fork of the run (its own stage timings and instant, the run's contexts, spans and sink),
// joined into the run when all have ended. It returns each call's passages, or the first error:
// the first search to fail cancels the others (through the run's context, as a failed shard of
// a fanout does), since the run fails with it and need not wait for them.
func (r *run) runTools(agent *span, calls []rag.ToolCall, queries []string) ([]string, error) {
	out := make([]string, len(calls))
	if len(calls) == 1 {
		var err error
		out[0], err = r.runTool(agent, calls[0], queries[0])
		return out, err
	}
	forks := make([]*run, len(calls))
	errs := make([]error, len(calls))
	var (
		wg    sync.WaitGroup
		first atomic.Int32
	)
	first.Store(-1)
	for i := range calls {
		forks[i] = r.fork()
		wg.Go(func() {
			out[i], errs[i] = forks[i].runTool(agent, calls[i], queries[i])
			if errs[i] != nil && first.CompareAndSwap(-1, int32(i)) {
				r.cancel(errSiblingFailed)
			}
		})
	}
	wg.Wait()
	r.join(forks)
	if i := first.Load(); i >= 0 {
		return out, errs[i]
	}
	return out, nil
}

// fork returns a run for one of a step's parallel searches. It begins at the run's next instant
// and shares the run's request, contexts, spans and sink; its stage timings, instant and fault
// total are its own until join.
func (r *run) fork() *run {
	f := &run{p: r.p, req: r.req, parent: r.parent, ctx: r.ctx, cancel: r.cancel, sink: r.sink,
		start: r.start, root: r.root, rootCtx: r.rootCtx, mark: r.nextInstant()}
	r.forks = append(r.forks, f)
	return f
}

// join adds the forks' stage timings and injected faults to the run's; the run's next stage
// begins where the last fork ended.
func (r *run) join(forks []*run) {
	var faults time.Duration
	for _, f := range forks {
		r.timings = append(r.timings, f.timings...)
		faults += f.faultDelay
		if f.mark.After(r.mark) {
			r.mark = f.mark
		}
	}
	if faults > 0 {
		r.faultDelay += faults
		r.root.SetAttributes(rag.AttrFaultInjectedMS.Float64(ms(r.faultDelay)))
	}
}

// runTool runs one search call under its execute_tool span: the retrieval stages, with their
// spans under it, and returns the passages found, numbered, as the tool's answer.
func (r *run) runTool(agent *span, call rag.ToolCall, query string) (string, error) {
	tool := r.beginTool(agent, call)
	prev := r.under
	r.under = tool.ctx
	defer func() { r.under = prev }()
	vec, err := r.embed(query)
	if err != nil {
		r.endTool(tool, err)
		return "", err
	}
	ret, err := r.retrieve(query, vec)
	if err != nil {
		r.endTool(tool, err)
		return "", err
	}
	f, err := r.fetch(ret.hits)
	r.endTool(tool, err)
	if err != nil {
		return "", err
	}
	return passagesText(f.chunks), nil
}

// searchQuery returns the query a search call asks for: its arguments' "query", or the user's
// question when the model sent none a search can use.
func searchQuery(call rag.ToolCall, question string) string {
	var args struct {
		Query string `json:"query"`
	}
	if json.Unmarshal([]byte(call.Arguments), &args) != nil || strings.TrimSpace(args.Query) == "" {
		return question
	}
	return bound(args.Query, maxSearchQuery)
}

// maxSearchQuery bounds the query a model may ask the search tool for, in bytes.
const maxSearchQuery = 2048

// passagesText numbers the chunks found, as the single-shot prompt does.
func passagesText(chunks []rag.Chunk) string {
	if len(chunks) == 0 {
		return "No passage matches."
	}
	var b strings.Builder
	for i, c := range chunks {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("[" + strconv.Itoa(i+1) + "] " + c.Title + "\n" + c.Text)
	}
	return b.String()
}

// progressStep tells the client that the model asked for a search at step.
func (r *run) progressStep(step int, query string) error {
	if !r.sink.active() {
		return nil
	}
	ev := Progress{Stage: rag.StageRetrieve, Shard: -1, Step: step, Elapsed: r.elapsed(),
		Message: fmt.Sprintf("step %d: searching for %q", step, bound(query, 120))}
	if err := r.sink.progress(ev); err != nil {
		return r.sinkFailed(err)
	}
	return nil
}

func sumUsage(a, b rag.Usage) rag.Usage {
	return rag.Usage{PromptTokens: a.PromptTokens + b.PromptTokens, CompletionTokens: a.CompletionTokens + b.CompletionTokens,
		CachedTokens: a.CachedTokens + b.CachedTokens, ReasoningTokens: a.ReasoningTokens + b.ReasoningTokens}
}
