package llmsim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestUnloadedE2EIsAnIdleEngine: a request alone in an idle engine, in virtual time, takes
// exactly Profile.UnloadedE2E (chunked or whole prefill, the prefix cache's tokens left out),
// its modelled latency is its latency, and its slowdown is 1.
func TestUnloadedE2EIsAnIdleEngine(t *testing.T) {
	t.Parallel()
	noChunks := profile(t, "tiny")
	noChunks.ChunkedPrefill, noChunks.MaxNumBatchedTokens = false, noChunks.MaxModelLen
	prefix := profile(t, "tiny")
	prefix.PrefixCaching = true
	tests := []struct {
		name           string
		prof           llmsim.Profile
		prompt, output int
		again          bool // send the same prompt a second time and measure that one
	}{
		{name: "default profile, one prefill step", prof: profile(t, llmsim.DefaultProfile), prompt: 1833, output: 64},
		{name: "tiny, prefill in three chunks", prof: profile(t, "tiny"), prompt: 1200, output: 16},
		{name: "tiny, one output token", prof: profile(t, "tiny"), prompt: 40, output: 1},
		{name: "whole prefill without chunking", prof: noChunks, prompt: 1200, output: 16},
		{name: "prefix cache hit", prof: prefix, prompt: 300, output: 8, again: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, tt.prof, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
			st := submit(t, e, "first", tt.prompt, tt.output)
			stepAll(t, e)
			if tt.again {
				drain(t, st)
				st = submit(t, e, "again", tt.prompt, tt.output)
				stepAll(t, e)
			}
			tl := st.Timeline()
			want := tt.prof.UnloadedE2E(tt.prompt, tl.CachedTokens, tt.output)
			if tt.again && tl.CachedTokens == 0 {
				t.Fatal("the second request found nothing in the prefix cache")
			}
			if !tl.Done || tl.PromptTokens != tt.prompt || tl.E2E() != want || tl.ModelledE2E != want {
				t.Fatalf("timeline %+v: E2E %v, modelled %v; want both %v (prompt %d)", tl, tl.E2E(), tl.ModelledE2E, want, tt.prompt)
			}
			if s := tl.Slowdown(tt.prof); s != 1 {
				t.Errorf("slowdown %v alone in the engine; want 1", s)
			}
		})
	}
}

// TestSlowdownGrowsWithTheBatch: requests that share the engine slow each other down; their
// modelled latency is still their latency in virtual time, and the slowdown grows with the
// number sent at once.
func TestSlowdownGrowsWithTheBatch(t *testing.T) {
	t.Parallel()
	p := profile(t, llmsim.DefaultProfile)
	last := 1.0
	for _, n := range []int{2, 8, 32} {
		e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
		var streams []*llmsim.Stream
		for i := range n {
			streams = append(streams, submit(t, e, fmt.Sprint(i), 1800, 64))
		}
		stepAll(t, e)
		var sum float64
		for _, st := range streams {
			tl := st.Timeline()
			if tl.ModelledE2E != tl.E2E() {
				t.Fatalf("%d at once: modelled %v, E2E %v; want them equal in virtual time", n, tl.ModelledE2E, tl.E2E())
			}
			sum += tl.Slowdown(p)
		}
		mean := sum / float64(n)
		if mean <= last {
			t.Errorf("%d requests at once: mean slowdown %.2f, not above the %.2f of fewer", n, mean, last)
		}
		t.Logf("%2d requests of 1800 + 64 tokens at once: mean slowdown %.2f", n, mean)
		last = mean
	}
}

// TestModelledE2EInRealTime: in real time a request alone in an idle engine is charged the
// cost model's time exactly, however late the host's timers woke the engine, while its wall
// clock latency is at least that.
func TestModelledE2EInRealTime(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	e := newEngine(t, p)
	st, err := e.Submit(context.Background(), rag.GenRequest{Model: p.Model, Messages: userPrompt(t, 100), MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	drain(t, st)
	tl := st.Timeline()
	want := p.UnloadedE2E(100, 0, 20)
	if tl.ModelledE2E != want || tl.E2E() < want {
		t.Fatalf("modelled %v, wall clock %v; want modelled %v and wall clock at least that", tl.ModelledE2E, tl.E2E(), want)
	}
	if s := tl.Slowdown(p); s != 1 {
		t.Errorf("slowdown %v; want 1", s)
	}
	t.Logf("modelled %v; the host's timers added %v", tl.ModelledE2E, tl.E2E()-tl.ModelledE2E)
}

// TestUnloadedE2EFormula checks UnloadedE2E against the step-time formula by hand, and that it
// is 0 where there is no request to time.
func TestUnloadedE2EFormula(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny") // 1 ms a step, 1 us a prefill token, 50 us a decode, 10 ns a cached token, 512 tokens a step
	// Prefill 1100 tokens in 3 chunks: 3 ms + 1100 us; 3 decodes over contexts of 1101..1103
	// tokens: 3 x 1.05 ms + 3306 x 10 ns.
	want := 3*time.Millisecond + 1100*time.Microsecond + 3*1050*time.Microsecond + 3306*10*time.Nanosecond
	if got := p.UnloadedE2E(1100, 0, 4); got != want {
		t.Errorf("UnloadedE2E(1100, 0, 4) = %v; want %v", got, want)
	}
	for _, c := range [][3]int{{0, 0, 4}, {10, 0, 0}} {
		if got := p.UnloadedE2E(c[0], c[1], c[2]); got != 0 {
			t.Errorf("UnloadedE2E%v = %v; want 0", c, got)
		}
	}
}
