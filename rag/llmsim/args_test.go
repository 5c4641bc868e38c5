package llmsim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

func boolPtr(b bool) *bool { return &b }

// apply reshapes the tiny profile by args and starts a paused virtual-time engine on it.
func applyArgs(tb testing.TB, args llmsim.EngineArgs) *llmsim.Engine {
	tb.Helper()
	p, err := args.Apply(profile(tb, "tiny"))
	if err != nil {
		tb.Fatalf("apply %+v: %v", args, err)
	}
	return newEngine(tb, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
}

// Each engine argument changes what the engine does, checked against the tiny profile's own
// behaviour (its defaults are in the "default" column of each case).
func TestEngineArgsChangeTheEngine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args llmsim.EngineArgs
		// observe runs a workload and returns what the argument should change.
		observe func(t *testing.T, e *llmsim.Engine) string
		def     string // what the tiny profile does without the argument
		want    string
	}{
		{
			name: "max-num-seqs", args: llmsim.EngineArgs{MaxNumSeqs: 2},
			observe: func(t *testing.T, e *llmsim.Engine) string {
				for i := range 4 {
					submit(t, e, fmt.Sprint(i), 20, 4)
				}
				step(t, e)
				st := e.Stats()
				return fmt.Sprintf("running %d waiting %d", st.Running, st.Waiting)
			},
			def: "running 4 waiting 0", want: "running 2 waiting 2",
		},
		{
			name: "max-model-len", args: llmsim.EngineArgs{MaxModelLen: 512},
			observe: func(t *testing.T, e *llmsim.Engine) string {
				_, err := e.Submit(context.Background(), rag.GenRequest{Messages: userPrompt(t, 600), MaxTokens: 10})
				return fmt.Sprintf("rejected %v", errors.Is(err, rag.ErrInvalidRequest))
			},
			def: "rejected false", want: "rejected true",
		},
		{
			name: "max-num-batched-tokens", args: llmsim.EngineArgs{MaxNumBatchedTokens: 128},
			observe: func(t *testing.T, e *llmsim.Engine) string {
				submit(t, e, "long", 300, 2)
				return fmt.Sprint(prefillChunks(t, e))
			},
			def: "[300]", want: "[128 128 44]",
		},
		{
			name: "block-size", args: llmsim.EngineArgs{BlockSize: 32},
			observe: func(t *testing.T, e *llmsim.Engine) string {
				submit(t, e, "a", 100, 4)
				step(t, e)
				st := e.Stats()
				return fmt.Sprintf("%d of %d blocks", st.BlocksUsed, st.BlocksTotal)
			},
			// The same 256 MiB of KV cache in blocks twice as big.
			def: "7 of 256 blocks", want: "4 of 128 blocks",
		},
		{
			name: "num-gpu-blocks-override", args: llmsim.EngineArgs{NumGPUBlocksOverride: 130},
			observe: func(t *testing.T, e *llmsim.Engine) string {
				// 8 sequences growing to 500 tokens need 8 x 32 blocks: all 256, more than 130.
				for i := range 8 {
					submit(t, e, fmt.Sprint(i), 20, 480)
				}
				stepAll(t, e)
				st := e.Stats()
				return fmt.Sprintf("%d blocks, preempted %v", st.BlocksTotal, st.Preemptions > 0)
			},
			def: "256 blocks, preempted false", want: "130 blocks, preempted true",
		},
		{
			name: "gpu-memory-utilization", args: llmsim.EngineArgs{GPUMemoryUtilization: 0.8},
			observe: func(t *testing.T, e *llmsim.Engine) string {
				for i := range 8 {
					submit(t, e, fmt.Sprint(i), 20, 480)
				}
				stepAll(t, e)
				st := e.Stats()
				return fmt.Sprintf("%d blocks, preempted %v", st.BlocksTotal, st.Preemptions > 0)
			},
			// 800 MiB - 500 MiB of weights - 144 MiB of activations = 156 blocks of 1 MiB.
			def: "256 blocks, preempted false", want: "156 blocks, preempted true",
		},
		{
			name: "enable-chunked-prefill false", args: llmsim.EngineArgs{ChunkedPrefill: boolPtr(false)},
			observe: func(t *testing.T, e *llmsim.Engine) string {
				submit(t, e, "long", 1200, 2)
				return fmt.Sprint(prefillChunks(t, e))
			},
			def: "[512 512 176]", want: "[1200]",
		},
		{
			name: "enable-prefix-caching", args: llmsim.EngineArgs{PrefixCaching: boolPtr(true)},
			observe: func(t *testing.T, e *llmsim.Engine) string {
				msgs := userPrompt(t, 100)
				runAlone(t, e, "once", msgs, 2)
				r, _ := runAlone(t, e, "twice", msgs, 2)
				return fmt.Sprintf("cached %d", r.last.Usage.CachedTokens)
			},
			def: "cached 0", want: "cached 96",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.observe(t, applyArgs(t, llmsim.EngineArgs{})); got != tt.def {
				t.Fatalf("without the argument: %s, want %s", got, tt.def)
			}
			if got := tt.observe(t, applyArgs(t, tt.args)); got != tt.want {
				t.Errorf("with %+v: %s, want %s", tt.args, got, tt.want)
			}
		})
	}
}

func step(tb testing.TB, e *llmsim.Engine) llmsim.StepInfo {
	tb.Helper()
	info, err := e.Step()
	if err != nil {
		tb.Fatal(err)
	}
	return info
}

// prefillChunks runs the engine and returns the prompt tokens prefilled in each step that
// prefilled some.
func prefillChunks(tb testing.TB, e *llmsim.Engine) []int {
	tb.Helper()
	var chunks []int
	for _, s := range stepAll(tb, e) {
		if s.PrefillTokens > 0 {
			chunks = append(chunks, s.PrefillTokens)
		}
	}
	return chunks
}

func TestEngineArgsRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args llmsim.EngineArgs
		want []string
	}{
		{name: "negative", args: llmsim.EngineArgs{MaxNumSeqs: -1}, want: []string{"--max-num-seqs"}},
		{name: "utilization above 1", args: llmsim.EngineArgs{GPUMemoryUtilization: 1.5}, want: []string{"--gpu-memory-utilization", "between 0 and 1"}},
		{name: "no memory for the cache", args: llmsim.EngineArgs{GPUMemoryUtilization: 0.5},
			want: []string{"leaves no memory", "500 MiB of weights"}},
		{name: "cache smaller than the context", args: llmsim.EngineArgs{GPUMemoryUtilization: 0.7},
			want: []string{"--max-model-len 2048", "896 tokens", "--gpu-memory-utilization"}},
		{name: "budget below a whole prompt without chunking",
			args: llmsim.EngineArgs{ChunkedPrefill: boolPtr(false), MaxNumBatchedTokens: 1024}, want: []string{"without chunked prefill"}},
		{name: "budget below the sequences", args: llmsim.EngineArgs{MaxNumSeqs: 600}, want: []string{"below max num seqs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.args.Apply(profile(t, "tiny"))
			if !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("Apply: %v, want ErrInvalidRequest", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// Without chunked prefill and without a budget of its own, the budget grows to a whole
// context, as vLLM sets it; and the AWQ profile resizes its cache from its own memory.
func TestEngineArgsDefaults(t *testing.T) {
	t.Parallel()
	p, err := llmsim.EngineArgs{ChunkedPrefill: boolPtr(false)}.Apply(profile(t, "llama3-8b-a100"))
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxNumBatchedTokens != p.MaxModelLen {
		t.Errorf("max num batched tokens %d without chunked prefill, want max model len %d", p.MaxNumBatchedTokens, p.MaxModelLen)
	}
	same, err := llmsim.EngineArgs{GPUMemoryUtilization: llmsim.GPUMemoryUtilization}.Apply(profile(t, "llama3-8b-awq-a100"))
	if err != nil {
		t.Fatal(err)
	}
	if want := profile(t, "llama3-8b-awq-a100"); same != want {
		t.Errorf("the default utilization given explicitly changed the profile:\n%+v\n%+v", same, want)
	}
}
