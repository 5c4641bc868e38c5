package llmsim_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// BenchmarkEngineTokens measures how fast the engine simulates with many sequences in flight:
// waves of 256 requests (200 prompt tokens, 128 output tokens each) are submitted to the
// llama3-8b-a100 profile in virtual time while it is paused, then run and read by one
// goroutine per request; one op is one request. It reports output tokens simulated per
// wall-clock second (the cost of the simulator) and per simulated second (the modelled
// server's throughput at that batch size).
func BenchmarkEngineTokens(b *testing.B) {
	const wave, prompt, maxTokens = 256, 200, 128
	e := newEngine(b, profile(b, "llama3-8b-a100"), llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	msgs := userPrompt(b, prompt)
	before := e.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += wave {
		var wg sync.WaitGroup
		for i := range min(wave, b.N-done) {
			st, err := e.Submit(b.Context(), rag.GenRequest{ID: fmt.Sprint(done + i), Messages: msgs, MaxTokens: maxTokens, Temperature: 1})
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				defer st.Close()
				if r, err := read(st); err != nil || r.tokens != maxTokens {
					b.Errorf("request %d: %d tokens, %v", done+i, r.tokens, err)
				}
			})
		}
		e.Resume()
		wg.Wait()
		e.Pause()
	}
	b.StopTimer()
	after := e.Stats()
	tokens := float64(after.GenerationTokens - before.GenerationTokens)
	b.ReportMetric(tokens/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(tokens/(after.Now-before.Now).Seconds(), "sim-tokens/sim-s")
}

// BenchmarkPrefixCache runs the same workload as BenchmarkEngineTokens with prompts that share
// a 1,000-token system prompt, with prefix caching off and on, to show what hashing prompts and
// sharing blocks cost the simulator (tokens/s) and what the cache saves the modelled server
// (sim-tokens/sim-s, and the hit ratio).
func BenchmarkPrefixCache(b *testing.B) {
	const wave, maxTokens = 256, 64
	system := strings.TrimSpace(strings.Repeat("context ", 1000))
	for _, caching := range []bool{false, true} {
		b.Run(fmt.Sprintf("caching=%v", caching), func(b *testing.B) {
			p := profile(b, "llama3-8b-a100")
			p.PrefixCaching = caching
			e := newEngine(b, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
			before := e.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += wave {
				var wg sync.WaitGroup
				for i := range min(wave, b.N-done) {
					msgs := []rag.Message{{Role: "system", Content: system}, {Role: "user", Content: fmt.Sprintf("question %d", done+i)}}
					st, err := e.Submit(b.Context(), rag.GenRequest{ID: fmt.Sprint(done + i), Messages: msgs, MaxTokens: maxTokens, Temperature: 1})
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() {
						defer st.Close()
						if r, err := read(st); err != nil || r.tokens != maxTokens {
							b.Errorf("request %d: %d tokens, %v", done+i, r.tokens, err)
						}
					})
				}
				e.Resume()
				wg.Wait()
				e.Pause()
			}
			b.StopTimer()
			after := e.Stats()
			tokens := float64(after.GenerationTokens - before.GenerationTokens)
			b.ReportMetric(tokens/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(tokens/(after.Now-before.Now).Seconds(), "sim-tokens/sim-s")
			if after.PrefixCacheQueries > 0 {
				b.ReportMetric(float64(after.PrefixCacheHits)/float64(after.PrefixCacheQueries), "hit-ratio")
			}
		})
	}
}

// BenchmarkSubmit measures queueing one 2,000-token request (and closing it), with prefix
// caching off and on: the difference is the cost of hashing the prompt into its block chain.
func BenchmarkSubmit(b *testing.B) {
	for _, caching := range []bool{false, true} {
		b.Run(fmt.Sprintf("caching=%v", caching), func(b *testing.B) {
			p := profile(b, "llama3-8b-a100")
			p.PrefixCaching = caching
			e := newEngine(b, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
			msgs := userPrompt(b, 2000)
			b.ReportAllocs()
			for b.Loop() {
				st, err := e.Submit(b.Context(), rag.GenRequest{Messages: msgs, MaxTokens: 1})
				if err != nil {
					b.Fatal(err)
				}
				_ = st.Close()
			}
		})
	}
}
