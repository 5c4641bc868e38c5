package llmsim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// words returns n copies of word separated by spaces: n tokens of rag.CountTokens when word
// has at most six letters.
func words(word string, n int) string { return strings.TrimSpace(strings.Repeat(word+" ", n)) }

// chatPrompt is a system message of systemTokens words and a user message of userTokens
// words of question; in the engine's chat template the two share their first
// 1 + 4 + systemTokens + 3 tokens whenever the system message is the same and the questions
// start with different words.
func chatPrompt(systemTokens int, question string, userTokens int) []rag.Message {
	return []rag.Message{
		{Role: "system", Content: words("why", systemTokens)},
		{Role: "user", Content: words(question, userTokens)},
	}
}

// submitMsgs queues one request of msgs.
func submitMsgs(tb testing.TB, e *llmsim.Engine, id string, msgs []rag.Message, maxTokens int, opts ...llmsim.RequestOption) *llmsim.Stream {
	tb.Helper()
	st, err := e.Submit(context.Background(), rag.GenRequest{ID: id, Messages: msgs, MaxTokens: maxTokens, Temperature: 1}, opts...)
	if err != nil {
		tb.Fatalf("submit %s: %v", id, err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

// runAlone runs msgs alone on a paused virtual-time engine and returns what it delivered and
// its timeline.
func runAlone(tb testing.TB, e *llmsim.Engine, id string, msgs []rag.Message, maxTokens int) (result, llmsim.Timeline) {
	tb.Helper()
	st := submitMsgs(tb, e, id, msgs, maxTokens)
	stepAll(tb, e)
	return drain(tb, st), st.Timeline()
}

func prefixCaching(tb testing.TB, name string) llmsim.Profile {
	tb.Helper()
	p := profile(tb, name)
	p.PrefixCaching = true
	return p
}

// Two requests share a system prompt of 200 tokens: with the chat framing their first 208
// tokens, 13 blocks of 16, are equal. The second finds those blocks cached, prefills only the
// rest, and its TTFT is lower by exactly the prefill of 208 tokens.
func TestPrefixCacheSkipsSharedPrefill(t *testing.T) {
	t.Parallel()
	const system, user, maxTokens = 200, 20, 8
	const shared = 1 + 4 + system + 3 // begin of text, system turn, user header
	first, second := chatPrompt(system, "alpha", user), chatPrompt(system, "bravo", user)
	prompt := rag.PromptTokens(second)

	for _, tt := range []struct {
		name    string
		caching bool
		cached  int
	}{
		{name: "prefix caching", caching: true, cached: shared / 16 * 16},
		{name: "no prefix caching", caching: false, cached: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := profile(t, "tiny")
			p.PrefixCaching = tt.caching
			e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
			a, _ := runAlone(t, e, "first", first, maxTokens)
			if a.last.Usage.CachedTokens != 0 {
				t.Errorf("first request: %d cached tokens on a cold cache", a.last.Usage.CachedTokens)
			}
			b, tl := runAlone(t, e, "second", second, maxTokens)
			if got := b.last.Usage.CachedTokens; got != tt.cached {
				t.Errorf("second request: %d cached tokens, want %d (the shared full blocks)", got, tt.cached)
			}
			if want := p.StepTime(prompt-tt.cached, 0, 0); tl.TTFT() != want {
				t.Errorf("second request: TTFT %v, want %v (the prefill of the %d uncached tokens)", tl.TTFT(), want, prompt-tt.cached)
			}
			st := e.Stats()
			wantQueries, wantHits := int64(rag.PromptTokens(first)+prompt), int64(tt.cached)
			if !tt.caching {
				wantQueries = 0
			}
			if st.PrefixCacheQueries != wantQueries || st.PrefixCacheHits != wantHits {
				t.Errorf("prefix cache queries %d hits %d, want %d and %d", st.PrefixCacheQueries, st.PrefixCacheHits, wantQueries, wantHits)
			}
			if st.PromptTokens != wantQueries && tt.caching {
				t.Errorf("prompt tokens %d, want %d: cached tokens still count as prompt tokens", st.PromptTokens, wantQueries)
			}
		})
	}
	// The saving is the prefill of the shared blocks, nothing else.
	p := profile(t, "tiny")
	if saving := p.StepTime(prompt, 0, 0) - p.StepTime(prompt-shared/16*16, 0, 0); saving != time.Duration(shared/16*16)*p.PrefillPerToken {
		t.Errorf("saving %v, want %v", saving, time.Duration(shared/16*16)*p.PrefillPerToken)
	}
}

// A prompt sent twice is cached but for the block holding its last token, which must be
// computed again to give the first output token.
func TestPrefixCacheRecomputesLastToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		prompt int
		cached int
	}{
		{name: "prompt ends mid-block", prompt: 100, cached: 96},
		{name: "prompt ends on a block boundary", prompt: 96, cached: 80},
		{name: "shorter than a block", prompt: 12, cached: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, prefixCaching(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused())
			msgs := userPrompt(t, tt.prompt)
			runAlone(t, e, "once", msgs, 4)
			r, tl := runAlone(t, e, "twice", msgs, 4)
			if r.last.Usage.CachedTokens != tt.cached {
				t.Errorf("cached tokens %d, want %d", r.last.Usage.CachedTokens, tt.cached)
			}
			if want := e.Profile().StepTime(tt.prompt-tt.cached, 0, 0); tl.TTFT() != want {
				t.Errorf("TTFT %v, want %v", tl.TTFT(), want)
			}
		})
	}
}

// Requests admitted in the same step already share the blocks the first of them computes, as
// in vLLM, so the KV cache holds the shared prefix once.
func TestPrefixCacheSharesBlocksWithinAStep(t *testing.T) {
	t.Parallel()
	p := prefixCaching(t, "tiny")
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	const system, user = 200, 20
	const sharedBlocks = (1 + 4 + system + 3) / 16
	questions := []string{"alpha", "bravo", "charly", "delta"}
	var streams []*llmsim.Stream
	for _, q := range questions {
		streams = append(streams, submitMsgs(t, e, q, chatPrompt(system, q, user), 64))
	}
	info, err := e.Step()
	if err != nil {
		t.Fatal(err)
	}
	prompt := rag.PromptTokens(chatPrompt(system, "alpha", user))
	blocksEach := (prompt + 15) / 16
	if want := blocksEach + (len(questions)-1)*(blocksEach-sharedBlocks); e.Stats().BlocksUsed != want {
		t.Errorf("blocks used %d after admitting %d requests, want %d (the %d shared blocks once)",
			e.Stats().BlocksUsed, len(questions), want, sharedBlocks)
	}
	if want := len(questions)*prompt - (len(questions)-1)*sharedBlocks*16; info.PrefillTokens != want || info.CachedTokens != (len(questions)-1)*sharedBlocks*16 {
		t.Errorf("first step prefilled %d tokens and found %d cached, want %d and %d", info.PrefillTokens, info.CachedTokens,
			want, (len(questions)-1)*sharedBlocks*16)
	}
	stepAll(t, e)
	for i, st := range streams {
		r := drain(t, st)
		if want := min(i, 1) * sharedBlocks * 16; r.last.Usage.CachedTokens != want {
			t.Errorf("%s: %d cached tokens, want %d", questions[i], r.last.Usage.CachedTokens, want)
		}
	}
	if st := e.Stats(); st.BlocksUsed != 0 || st.BlocksCachedIdle != st.BlocksCached || st.BlocksCached != sharedBlocks+len(questions)*(prompt/16-sharedBlocks) {
		t.Errorf("after the run: %d blocks used, %d cached, %d idle", st.BlocksUsed, st.BlocksCached, st.BlocksCachedIdle)
	}
}

// Under memory pressure the blocks released longest ago are evicted first, and of one
// request's blocks the end of its prompt before its start.
func TestPrefixCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	p := prefixCaching(t, "tiny")
	p.NumBlocks, p.MaxModelLen = 64, 1024
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	prompt := func(word string, tokens int) []rag.Message {
		return []rag.Message{{Role: "user", Content: words(word, tokens-5)}}
	}
	x, y, z := prompt("xray", 320), prompt("yank", 320), prompt("zulu", 640) // 20, 20 and 40 blocks

	runAlone(t, e, "x", x, 1)
	runAlone(t, e, "y", y, 1)
	if st := e.Stats(); st.BlocksCached != 40 || st.BlocksCachedIdle != 40 || st.BlocksUsed != 0 {
		t.Fatalf("after x and y: %d cached, %d idle, %d used; want 40, 40, 0", st.BlocksCached, st.BlocksCachedIdle, st.BlocksUsed)
	}
	// z needs 40 blocks: the 24 free ones and 16 evicted, all from x (released before y),
	// starting from x's last block.
	runAlone(t, e, "z", z, 1)
	if st := e.Stats(); st.BlocksCached != 64 {
		t.Fatalf("after z: %d blocks cached, want 4 of x + 20 of y + 40 of z", st.BlocksCached)
	}
	// y is intact: 19 blocks hit (the 20th holds its last token). Its one new block evicts the
	// next least recently used, x's 4th block.
	if r, _ := runAlone(t, e, "y again", y, 1); r.last.Usage.CachedTokens != 19*16 {
		t.Errorf("y again: %d cached tokens, want %d (y was used after x, so x went first)", r.last.Usage.CachedTokens, 19*16)
	}
	// Of x only its first 3 blocks are left.
	if r, _ := runAlone(t, e, "x again", x, 1); r.last.Usage.CachedTokens != 3*16 {
		t.Errorf("x again: %d cached tokens, want %d (x's tail evicted before its head)", r.last.Usage.CachedTokens, 3*16)
	}
	st := e.Stats()
	if want := int64(320 + 320 + 640 + 320 + 320); st.PrefixCacheQueries != want || st.PrefixCacheHits != 19*16+3*16 {
		t.Errorf("prefix cache queries %d hits %d, want %d and %d", st.PrefixCacheQueries, st.PrefixCacheHits, want, 19*16+3*16)
	}
}

// A preempted sequence that finds its own prompt blocks again on re-admission prefills less,
// and that lookup is counted apart from the hit rate.
func TestPrefixCachePreemptedLookupsCountedApart(t *testing.T) {
	t.Parallel()
	p := prefixCaching(t, "tiny")
	p.NumBlocks, p.MaxNumSeqs, p.MaxModelLen = 48, 16, 512
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	const requests, prompt, maxTokens = 16, 30, 300
	var streams []*llmsim.Stream
	for i := range requests {
		streams = append(streams, submitMsgs(t, e, "r", []rag.Message{{Role: "user", Content: words(string(rune('a'+i))+"x", prompt-5)}}, maxTokens))
	}
	stepAll(t, e)
	for _, s := range streams {
		if r := drain(t, s); r.tokens != maxTokens || r.last.Usage.CachedTokens != 0 {
			t.Errorf("%d tokens, %d cached; want %d and 0 (no two prompts alike)", r.tokens, r.last.Usage.CachedTokens, maxTokens)
		}
	}
	st := e.Stats()
	if st.Preemptions == 0 {
		t.Fatal("no preemption")
	}
	if st.PrefixCacheQueries != requests*prompt || st.PrefixCacheHits != 0 {
		t.Errorf("queries %d hits %d, want %d and 0: re-admissions are not counted there", st.PrefixCacheQueries, st.PrefixCacheHits, requests*prompt)
	}
	if st.PreemptedPrefixCacheQueries == 0 {
		t.Error("no lookup of a preempted sequence counted")
	}
}

// In real time, with requests sharing prefixes, preempted for lack of blocks and cancelled
// mid-stream, every block comes back: shared blocks are released once by each holder.
func TestPrefixCacheBookkeepingUnderAbortsAndPreemption(t *testing.T) {
	t.Parallel()
	p := prefixCaching(t, "tiny")
	p.NumBlocks, p.MaxModelLen = 96, 1024
	e := newEngine(t, p)
	const requests = 40
	errc := make(chan error, requests)
	for i := range requests {
		go func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			msgs := chatPrompt(100+50*(i%4), fmt.Sprintf("q%d", i), 10)
			st, err := e.Submit(ctx, rag.GenRequest{ID: fmt.Sprint(i), Messages: msgs, MaxTokens: 200, Temperature: 1})
			if err != nil {
				errc <- err
				return
			}
			defer st.Close()
			if i%3 == 0 { // leave after the first delta
				_, err := st.Recv()
				errc <- err
				return
			}
			_, err = read(st)
			errc <- err
		}()
	}
	for range requests {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	testwait.For(t, "every block released", func() bool {
		st := e.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.BlocksUsed == 0
	})
	st := e.Stats()
	if st.BlocksCachedIdle != st.BlocksCached || st.BlocksCached > p.NumBlocks {
		t.Errorf("after the run: %d cached blocks, %d idle, of %d", st.BlocksCached, st.BlocksCachedIdle, p.NumBlocks)
	}
	if st.PrefixCacheHits == 0 || st.Preemptions == 0 || st.Aborted == 0 {
		t.Errorf("the run did not exercise hits (%d), preemption (%d) and aborts (%d)", st.PrefixCacheHits, st.Preemptions, st.Aborted)
	}
	t.Logf("hits %d of %d queried tokens, %d preemptions, %d aborted", st.PrefixCacheHits, st.PrefixCacheQueries, st.Preemptions, st.Aborted)
}
