package llmsim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/openai"
)

// Requests beyond MaxNumSeqs wait in the queue until a running group finishes, so TTFT rises
// in steps of one group's service time.
func TestQueueingRaisesTTFTStepwise(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	const groups, prompt, maxTokens = 3, 37, 16
	if p.MaxNumSeqs*prompt > p.MaxNumBatchedTokens {
		t.Fatalf("test needs a group's prompts (%d tokens) to fit one step's budget %d", p.MaxNumSeqs*prompt, p.MaxNumBatchedTokens)
	}
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	var streams []*llmsim.Stream
	for i := range groups * p.MaxNumSeqs {
		streams = append(streams, submit(t, e, fmt.Sprintf("r%02d", i), prompt, maxTokens))
	}
	first, err := e.Step()
	if err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Running != p.MaxNumSeqs || st.Waiting != (groups-1)*p.MaxNumSeqs || first.Admitted != p.MaxNumSeqs {
		t.Fatalf("after the first step: running %d, waiting %d, admitted %d; want %d, %d, %d",
			st.Running, st.Waiting, first.Admitted, p.MaxNumSeqs, (groups-1)*p.MaxNumSeqs, p.MaxNumSeqs)
	}
	stepAll(t, e)

	// A group is prefilled in one step and then decodes maxTokens-1 steps together.
	prefill := p.StepTime(p.MaxNumSeqs*prompt, 0, 0)
	service := prefill + decodeTime(p, p.MaxNumSeqs, prompt, maxTokens)
	for i, st := range streams {
		r := drain(t, st)
		if r.tokens != maxTokens {
			t.Errorf("%d: %d tokens, want %d", i, r.tokens, maxTokens)
		}
		tl := st.Timeline()
		g := time.Duration(i / p.MaxNumSeqs)
		if want := g * service; tl.Scheduled != want {
			t.Errorf("request %d (group %d): scheduled at %v, want %v (after %d groups of %v)", i, g, tl.Scheduled, want, g, service)
		}
		if want := g*service + prefill; tl.TTFT() != want {
			t.Errorf("request %d (group %d): TTFT %v, want %v", i, g, tl.TTFT(), want)
		}
		if want := (g + 1) * service; tl.Finished != want {
			t.Errorf("request %d (group %d): finished at %v, want %v", i, g, tl.Finished, want)
		}
	}
	if st := e.Stats(); st.MaxRunning != p.MaxNumSeqs || st.Finished != int64(len(streams)) || st.BlocksUsed != 0 {
		t.Errorf("stats after the run: max running %d (want %d), finished %d (want %d), blocks used %d (want 0)",
			st.MaxRunning, p.MaxNumSeqs, st.Finished, len(streams), st.BlocksUsed)
	}
}

// A decode step costs StepOverhead + DecodePerSeq per sequence + AttentionPerKVToken per token
// of context, so TPOT grows with the batch exactly as the formula says.
func TestTPOTGrowsWithBatchSize(t *testing.T) {
	t.Parallel()
	p := profile(t, "llama3-8b-a100")
	const prompt, maxTokens = 40, 64
	var prev time.Duration
	for _, batch := range []int{1, 8, 32} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
			var streams []*llmsim.Stream
			for i := range batch {
				streams = append(streams, submit(t, e, fmt.Sprintf("b%d-%d", batch, i), prompt, maxTokens))
			}
			steps := stepAll(t, e)
			if len(steps) != maxTokens {
				t.Fatalf("%d steps, want 1 prefill + %d decodes", len(steps), maxTokens-1)
			}
			if last := steps[len(steps)-1]; last.DecodeSeqs != batch {
				t.Fatalf("last step decoded %d sequences, want %d", last.DecodeSeqs, batch)
			}
			want := decodeTime(p, batch, prompt, maxTokens) / (maxTokens - 1)
			for _, st := range streams {
				drain(t, st)
				if got := st.Timeline().TPOT(); got != want {
					t.Errorf("TPOT %v, want %v from the step-time formula", got, want)
				}
			}
			if want <= prev {
				t.Errorf("TPOT %v with batch %d is not above %v with the smaller batch", want, batch, prev)
			}
			prev = want
		})
	}
}

func TestChunkedPrefill(t *testing.T) {
	t.Parallel()
	base := profile(t, "tiny")
	const prompt = 1200 // more than two steps' budget of 512
	tests := []struct {
		name    string
		chunked bool
		budget  int
		steps   []int // prefill tokens per step until the first token
	}{
		{name: "chunked", chunked: true, budget: 512, steps: []int{512, 512, 176}},
		{name: "whole prompt in one step", chunked: false, budget: base.MaxModelLen, steps: []int{1200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base
			p.ChunkedPrefill, p.MaxNumBatchedTokens = tt.chunked, tt.budget
			e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
			st := submit(t, e, "long", prompt, 4)
			steps := stepAll(t, e)
			var ttft time.Duration
			for i, n := range tt.steps {
				if steps[i].PrefillTokens != n {
					t.Errorf("step %d prefilled %d tokens, want %d", i, steps[i].PrefillTokens, n)
				}
				ttft += p.StepTime(n, 0, 0)
			}
			drain(t, st)
			if got := st.Timeline().TTFT(); got != ttft {
				t.Errorf("TTFT %v, want %v", got, ttft)
			}
		})
	}
}

// With chunked prefill, a prompt arriving while others decode shares their steps: decodes take
// one token of the budget each and the prompt the rest, so the decoders' next step is longer.
func TestPrefillMixesWithDecodes(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	submit(t, e, "early", 21, 8)
	if _, err := e.Step(); err != nil { // prefill of "early"
		t.Fatal(err)
	}
	submit(t, e, "late", 1000, 2)
	info, err := e.Step()
	if err != nil {
		t.Fatal(err)
	}
	want := llmsim.StepInfo{Start: info.Start, Duration: p.StepTime(p.MaxNumBatchedTokens-1, 1, 22),
		Seqs: 2, DecodeSeqs: 1, KVTokens: 22, PrefillTokens: p.MaxNumBatchedTokens - 1, Admitted: 1}
	if info != want {
		t.Errorf("mixed step %+v, want %+v", info, want)
	}
}

// Contiguous allocation reserves prompt + max_tokens up front, so the same KV capacity runs
// fewer sequences at once and holds blocks nobody uses yet.
func TestContiguousAdmitsFewerThanPaged(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	p.NumBlocks, p.MaxNumSeqs, p.MaxNumBatchedTokens, p.MaxModelLen = 64, 32, 2048, 1024
	const requests, prompt, maxTokens = 32, 21, 139
	pagedBlocks := (prompt + p.BlockSize - 1) / p.BlockSize                  // blocks to start
	contiguousBlocks := (prompt + maxTokens + p.BlockSize - 1) / p.BlockSize // blocks reserved
	tests := []struct {
		alloc       llmsim.AllocMode
		admitted    int // in the first step
		unusedAtOne int // BlocksReservedUnused after the first step
	}{
		{alloc: llmsim.AllocPaged, admitted: min(requests, p.NumBlocks/pagedBlocks)},
		{alloc: llmsim.AllocContiguous, admitted: p.NumBlocks / contiguousBlocks,
			unusedAtOne: p.NumBlocks / contiguousBlocks * (contiguousBlocks - (prompt+1+p.BlockSize-1)/p.BlockSize)},
	}
	finishedAt := map[llmsim.AllocMode]time.Duration{}
	for _, tt := range tests {
		e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused(), llmsim.WithAlloc(tt.alloc))
		var streams []*llmsim.Stream
		for i := range requests {
			streams = append(streams, submit(t, e, fmt.Sprint(i), prompt, maxTokens))
		}
		if _, err := e.Step(); err != nil {
			t.Fatal(err)
		}
		st := e.Stats()
		if st.Running != tt.admitted || st.BlocksReservedUnused != tt.unusedAtOne {
			t.Errorf("%s: after one step running %d, reserved unused %d; want %d, %d",
				tt.alloc, st.Running, st.BlocksReservedUnused, tt.admitted, tt.unusedAtOne)
		}
		// Each running sequence fills prompt+1 positions and holds its blocks whole.
		held := (prompt + 1 + p.BlockSize - 1) / p.BlockSize
		if tt.alloc == llmsim.AllocContiguous {
			held = contiguousBlocks
		}
		if want := tt.admitted * (prompt + 1); st.KVTokensRequested != want {
			t.Errorf("%s: KV tokens requested %d, want %d", tt.alloc, st.KVTokensRequested, want)
		}
		if want := tt.admitted * held * p.BlockSize; st.KVTokensAllocated != want {
			t.Errorf("%s: KV tokens allocated %d, want %d", tt.alloc, st.KVTokensAllocated, want)
		}
		stepAll(t, e)
		for _, s := range streams {
			if r := drain(t, s); r.tokens != maxTokens {
				t.Errorf("%s: %d tokens, want %d", tt.alloc, r.tokens, maxTokens)
			}
		}
		st = e.Stats()
		if st.MaxRunning != tt.admitted {
			t.Errorf("%s: peak running %d, want %d", tt.alloc, st.MaxRunning, tt.admitted)
		}
		if tt.alloc == llmsim.AllocContiguous && st.Preemptions != 0 {
			t.Errorf("contiguous allocation preempted %d times", st.Preemptions)
		}
		finishedAt[tt.alloc] = st.Now
		t.Logf("%s: peak running %d, preemptions %d, makespan %v", tt.alloc, st.MaxRunning, st.Preemptions, st.Now)
	}
	// Bigger batches share the weight read of each step among more sequences; here that gain
	// outweighs the recomputation that paged preemption costs.
	if finishedAt[llmsim.AllocPaged] >= finishedAt[llmsim.AllocContiguous] {
		t.Errorf("paged run took %v, contiguous %v: want paged faster", finishedAt[llmsim.AllocPaged], finishedAt[llmsim.AllocContiguous])
	}
}

// Under paged allocation, long outputs outgrow the KV cache: the most recently admitted
// sequences are preempted, recomputed later, and still produce exactly the tokens they would
// have produced without preemption.
func TestPreemptionWhenBlocksRunOut(t *testing.T) {
	t.Parallel()
	small := profile(t, "tiny")
	small.NumBlocks, small.MaxNumSeqs, small.MaxModelLen = 48, 16, 512
	big := small
	big.NumBlocks = 16 * 32 // every sequence fits at its full length
	const requests, prompt, maxTokens = 16, 30, 300

	run := func(p llmsim.Profile) ([]result, []llmsim.Timeline, llmsim.Stats) {
		e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
		var streams []*llmsim.Stream
		for i := range requests {
			streams = append(streams, submit(t, e, fmt.Sprint("req-", i), prompt, maxTokens))
		}
		stepAll(t, e)
		var results []result
		var timelines []llmsim.Timeline
		for _, s := range streams {
			results = append(results, drain(t, s))
			timelines = append(timelines, s.Timeline())
		}
		return results, timelines, e.Stats()
	}
	want, _, bigStats := run(big)
	if bigStats.Preemptions != 0 {
		t.Fatalf("reference run preempted %d times", bigStats.Preemptions)
	}
	got, timelines, st := run(small)
	if st.Preemptions == 0 {
		t.Fatal("no preemption although the KV cache is too small for the outputs")
	}
	for i := range got {
		u := got[i].last.Usage
		if got[i].last.FinishReason != "length" || u == nil || u.CompletionTokens != maxTokens || got[i].tokens != maxTokens {
			t.Errorf("req-%d: finish %q usage %+v tokens %d; want length, %d tokens", i, got[i].last.FinishReason, u, got[i].tokens, maxTokens)
		}
		if got[i].text != want[i].text {
			t.Errorf("req-%d: text after preemption differs from the unpreempted run", i)
		}
		if timelines[i].Admissions != timelines[i].Preemptions+1 {
			t.Errorf("req-%d: %d admissions for %d preemptions", i, timelines[i].Admissions, timelines[i].Preemptions)
		}
	}
	if timelines[0].Preemptions != 0 || timelines[requests-1].Preemptions == 0 {
		t.Errorf("preemptions of the first and last admitted: %d and %d; want 0 and at least 1 (last admitted goes first)",
			timelines[0].Preemptions, timelines[requests-1].Preemptions)
	}
	if st.BlocksUsed != 0 || st.Running != 0 || st.Waiting != 0 || st.Finished != requests {
		t.Errorf("after the run: %+v", st)
	}
	if st.PromptTokens != requests*prompt {
		t.Errorf("prompt tokens %d, want %d (recomputation is not counted again)", st.PromptTokens, requests*prompt)
	}
}

// Closing a stream or cancelling its context frees its KV blocks at once, in real time too.
func TestDisconnectFreesBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		stop    func(cancel context.CancelFunc, st *llmsim.Stream)
		wantErr error
	}{
		{name: "cancel context", stop: func(cancel context.CancelFunc, _ *llmsim.Stream) { cancel() }, wantErr: context.Canceled},
		{name: "close stream", stop: func(_ context.CancelFunc, st *llmsim.Stream) { _ = st.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := profile(t, "tiny")
			e := newEngine(t, p)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := e.Submit(ctx, rag.GenRequest{Messages: userPrompt(t, 100), MaxTokens: 1500})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			if used := e.Stats().BlocksUsed; used == 0 {
				t.Fatal("no blocks held by a running sequence")
			}
			tt.stop(cancel, st)
			testwait.For(t, "blocks freed", func() bool { s := e.Stats(); return s.BlocksUsed == 0 && s.Running == 0 })
			if _, err := st.Recv(); err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("recv after stop: %v, want an error (%v)", err, tt.wantErr)
			}
			if s := e.Stats(); s.Aborted != 1 || s.Finished != 0 {
				t.Errorf("aborted %d finished %d, want 1 and 0", s.Aborted, s.Finished)
			}
		})
	}
}

func TestCloseWhileWaitingLeavesQueue(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	a := submit(t, e, "a", 20, 4)
	b := submit(t, e, "b", 20, 4)
	_ = a.Close()
	if s := e.Stats(); s.Waiting != 1 {
		t.Fatalf("waiting %d after closing one of two queued, want 1", s.Waiting)
	}
	stepAll(t, e)
	if r := drain(t, b); r.tokens != 4 {
		t.Errorf("b: %d tokens, want 4", r.tokens)
	}
}

// In real time each step sleeps its modelled duration, so a request alone on the engine takes
// at least the sum of its steps.
func TestRealTimeLowerBound(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	const prompt, maxTokens = 37, 20
	e := newEngine(t, p)
	start := time.Now()
	st := submit(t, e, "alone", prompt, maxTokens)
	r := drain(t, st)
	wall := time.Since(start)
	want := p.StepTime(prompt, 0, 0) + decodeTime(p, 1, prompt, maxTokens)
	if r.tokens != maxTokens {
		t.Fatalf("%d tokens, want %d", r.tokens, maxTokens)
	}
	if busy := e.Stats().BusyTime; busy != want {
		t.Errorf("busy time %v, want %v", busy, want)
	}
	if wall < want {
		t.Errorf("wall-clock %v is below the sum of the step times %v", wall, want)
	}
	if e2e := st.Timeline().E2E(); e2e < want {
		t.Errorf("engine-clock E2E %v is below the sum of the step times %v", e2e, want)
	}
}

func TestEngineClose(t *testing.T) {
	t.Parallel()
	e, err := llmsim.New(profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	if err != nil {
		t.Fatal(err)
	}
	st := submit(t, e, "pending", 20, 10)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := st.Recv(); !errors.Is(err, llmsim.ErrClosed) || !errors.Is(err, rag.ErrUnavailable) {
		t.Errorf("recv after close: %v, want ErrClosed matching rag.ErrUnavailable", err)
	}
	if _, err := e.Generate(context.Background(), rag.GenRequest{Messages: userPrompt(t, 10), MaxTokens: 1}); !errors.Is(err, llmsim.ErrClosed) {
		t.Errorf("generate after close: %v, want ErrClosed", err)
	}
	if _, err := e.Step(); !errors.Is(err, llmsim.ErrClosed) {
		t.Errorf("step after close: %v, want ErrClosed", err)
	}
	if s := e.Stats(); s.BlocksUsed != 0 || s.Running+s.Waiting != 0 {
		t.Errorf("after close: %+v", s)
	}
}

func TestGenerateRejects(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithModelNames("alias-a"))
	tests := []struct {
		name     string
		req      rag.GenRequest
		want     error
		wantText []string
	}{
		{name: "unknown model", req: rag.GenRequest{Model: "gpt-9", Messages: userPrompt(t, 10), MaxTokens: 4},
			want: rag.ErrUnknownModel, wantText: []string{"gpt-9", p.Model, "alias-a"}},
		{name: "context too long", req: rag.GenRequest{Messages: userPrompt(t, 2000), MaxTokens: 100},
			want: rag.ErrInvalidRequest, wantText: []string{"2048", "2100", "2000 in the messages", "100 in the completion"}},
		{name: "prompt fills the context", req: rag.GenRequest{Messages: userPrompt(t, p.MaxModelLen)},
			want: rag.ErrInvalidRequest, wantText: []string{"maximum context length"}},
		{name: "negative max tokens", req: rag.GenRequest{Messages: userPrompt(t, 10), MaxTokens: -1},
			want: rag.ErrInvalidRequest, wantText: []string{"max_tokens"}},
		{name: "no messages", req: rag.GenRequest{MaxTokens: 1}, want: rag.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Generate(context.Background(), tt.req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	if he := openai.ToHTTPError(errOf(e.Generate(context.Background(), tests[1].req))); he.Status != 400 || he.Code != "context_length_exceeded" {
		t.Errorf("context error maps to %d %q, want 400 context_length_exceeded", he.Status, he.Code)
	}
}

func errOf(_ rag.TokenStream, err error) error { return err }

func TestGenerateAccepts(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithModelNames("alias-a"))
	tests := []struct {
		name       string
		req        rag.GenRequest
		wantTokens int
	}{
		{name: "served model", req: rag.GenRequest{Model: p.Model, Messages: userPrompt(t, 10), MaxTokens: 3}, wantTokens: 3},
		{name: "alias", req: rag.GenRequest{Model: "alias-a", Messages: userPrompt(t, 10), MaxTokens: 2}, wantTokens: 2},
		{name: "empty model means the served one", req: rag.GenRequest{Messages: userPrompt(t, 10), MaxTokens: 1}, wantTokens: 1},
		{name: "no max tokens fills the context", req: rag.GenRequest{Messages: userPrompt(t, p.MaxModelLen-5)}, wantTokens: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := e.Generate(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			r := drain(t, st)
			if r.tokens != tt.wantTokens || r.last.Usage.CompletionTokens != tt.wantTokens {
				t.Errorf("%d tokens, usage %+v; want %d", r.tokens, r.last.Usage, tt.wantTokens)
			}
			if r.last.Usage.PromptTokens != rag.PromptTokens(tt.req.Messages) {
				t.Errorf("prompt tokens %d, want %d", r.last.Usage.PromptTokens, rag.PromptTokens(tt.req.Messages))
			}
		})
	}
}

// The answer is made of the context's words, counts as many tokens as the engine reports, and
// is the same for the same greedy request.
func TestOutputText(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
	context := "Paged attention stores keys and values in fixed-size blocks, so fragmentation stays small."
	question := "How does vLLM store its KV cache?"
	gen := func(id string, temperature float64) result {
		st, err := e.Generate(t.Context(), rag.GenRequest{ID: id, Temperature: temperature, MaxTokens: 60,
			Messages: []rag.Message{{Role: "system", Content: context}, {Role: "user", Content: question}}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		return drain(t, st)
	}
	a := gen("a", 0)
	allowed := map[string]bool{}
	for _, w := range rag.Words(context) {
		allowed[w] = true
	}
	for _, w := range strings.Fields(a.text) {
		if !allowed[w] {
			t.Errorf("word %q is not from the context", w)
		}
	}
	if n := rag.CountTokens(a.text); n != a.tokens || n != 60 {
		t.Errorf("rag.CountTokens(answer) = %d, engine reported %d, want 60: %q", n, a.tokens, a.text)
	}
	if b := gen("b", 0); b.text != a.text {
		t.Errorf("greedy answers differ:\n%q\n%q", a.text, b.text)
	}
	if c, d := gen("c", 0.7), gen("d", 0.7); c.text == d.text {
		t.Errorf("sampled answers of two requests are identical: %q", c.text)
	}
}

// A reader that falls behind gets the queued tokens coalesced into one delta.
func TestRecvCoalesces(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	st := submit(t, e, "slow reader", 20, 12)
	stepAll(t, e)
	d, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if d.Tokens != 12 || d.FinishReason != "length" || d.Usage == nil || d.Usage.CompletionTokens != 12 {
		t.Errorf("first delta %+v, want all 12 tokens with the finish reason", d)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("recv after the last delta: %v, want io.EOF", err)
	}
}

func TestStepNeedsPausedVirtualEngine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []llmsim.Option
	}{
		{name: "real time", opts: []llmsim.Option{llmsim.WithStartPaused()}},
		{name: "running", opts: []llmsim.Option{llmsim.WithVirtualTime()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, profile(t, "tiny"), tt.opts...)
			if _, err := e.Step(); err == nil {
				t.Error("Step succeeded")
			}
		})
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	st := submit(t, e, "x", 20, 5)
	if s := e.Stats(); s.Steps != 0 || s.Waiting != 1 {
		t.Fatalf("paused engine stepped: %+v", s)
	}
	e.Resume()
	drain(t, st)
	e.Pause()
	st2 := submit(t, e, "y", 20, 5)
	steps := e.Stats().Steps
	stepAll(t, e)
	drain(t, st2)
	if got := e.Stats().Steps - steps; got != 5 {
		t.Errorf("%d steps for 5 tokens while paused and stepped, want 5", got)
	}
}

func TestProfiles(t *testing.T) {
	t.Parallel()
	for _, p := range llmsim.Profiles() {
		if err := p.Validate(); err != nil {
			t.Errorf("built-in profile %s: %v", p.Name, err)
		}
		if got, err := llmsim.ProfileByName(p.Name); err != nil || got != p {
			t.Errorf("ProfileByName(%q) = %+v, %v", p.Name, got, err)
		}
	}
	_, err := llmsim.ProfileByName("h100-dream")
	if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), "llama3-8b-a100") || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("unknown profile error %v: want ErrInvalidRequest listing the names", err)
	}
	if _, err := llmsim.ProfileByName(llmsim.DefaultProfile); err != nil {
		t.Errorf("default profile: %v", err)
	}
}

func TestProfileValidate(t *testing.T) {
	t.Parallel()
	tiny := profile(t, "tiny")
	tests := []struct {
		name   string
		modify func(*llmsim.Profile)
		want   string
	}{
		{name: "no model", modify: func(p *llmsim.Profile) { p.Model = "" }, want: "model"},
		{name: "zero block size", modify: func(p *llmsim.Profile) { p.BlockSize = 0 }, want: "block size"},
		{name: "no blocks", modify: func(p *llmsim.Profile) { p.NumBlocks = 0 }, want: "num blocks"},
		{name: "no sequences", modify: func(p *llmsim.Profile) { p.MaxNumSeqs = 0 }, want: "max num seqs"},
		{name: "context beyond the cache", modify: func(p *llmsim.Profile) { p.MaxModelLen = p.CapacityTokens() + 1 }, want: "exceeds the KV cache"},
		{name: "budget below sequences", modify: func(p *llmsim.Profile) { p.MaxNumBatchedTokens = p.MaxNumSeqs - 1 }, want: "below max num seqs"},
		{name: "unchunked budget below context", modify: func(p *llmsim.Profile) { p.ChunkedPrefill = false }, want: "without chunked prefill"},
		{name: "no step overhead", modify: func(p *llmsim.Profile) { p.StepOverhead = 0 }, want: "step overhead"},
		{name: "negative cost", modify: func(p *llmsim.Profile) { p.DecodePerSeq = -1 }, want: "negative"},
		{name: "unknown alloc", modify: func(p *llmsim.Profile) { p.Alloc = "buddy" }, want: "buddy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tiny
			tt.modify(&p)
			_, err := llmsim.New(p)
			if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want ErrInvalidRequest mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := llmsim.ParseAllocMode(" Contiguous "); err != nil {
		t.Errorf("ParseAllocMode: %v", err)
	}
}

func TestStepTimeFormula(t *testing.T) {
	t.Parallel()
	p := llmsim.Profile{StepOverhead: 10 * time.Millisecond, PrefillPerToken: time.Microsecond,
		DecodePerSeq: 100 * time.Microsecond, AttentionPerKVToken: 10 * time.Nanosecond}
	tests := []struct {
		name                       string
		prefill, decodes, kvTokens int
		want                       time.Duration
	}{
		{name: "idle floor", want: 10 * time.Millisecond},
		{name: "prefill only", prefill: 2000, want: 12 * time.Millisecond},
		{name: "decode batch", decodes: 10, kvTokens: 100_000, want: 12 * time.Millisecond},
		{name: "mixed", prefill: 1000, decodes: 20, kvTokens: 50_000, want: 13500 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.StepTime(tt.prefill, tt.decodes, tt.kvTokens); got != tt.want {
				t.Errorf("StepTime = %v, want %v", got, tt.want)
			}
		})
	}
}
