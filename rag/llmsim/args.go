package llmsim

import (
	"fmt"

	"github.com/ragtail/ragtail/rag"
)

// EngineArgs are vLLM's engine arguments that reshape a profile, under the names of vLLM's
// flags (`ragtail llm-sim --max-num-seqs ...`). A zero or nil field keeps the profile's
// setting.
type EngineArgs struct {
	// MaxNumSeqs caps the sequences running at once (--max-num-seqs).
	MaxNumSeqs int
	// MaxModelLen is the longest prompt + completion accepted (--max-model-len).
	MaxModelLen int
	// MaxNumBatchedTokens is the token budget of one step (--max-num-batched-tokens). Left
	// unset with chunked prefill off, it becomes at least MaxModelLen, as vLLM sets it.
	MaxNumBatchedTokens int
	// BlockSize is the number of tokens per KV-cache block (--block-size); the number of blocks
	// is derived again from the memory left for the cache.
	BlockSize int
	// NumGPUBlocksOverride sets the number of KV-cache blocks, whatever the memory says
	// (--num-gpu-blocks-override).
	NumGPUBlocksOverride int
	// GPUMemoryUtilization is the share of device memory the engine may use, 0 to 1
	// (--gpu-memory-utilization); the KV cache gets what weights and activations leave of it.
	GPUMemoryUtilization float64
	// ChunkedPrefill splits long prompts over steps (--enable-chunked-prefill).
	ChunkedPrefill *bool
	// PrefixCaching keeps prompt blocks for later requests (--enable-prefix-caching).
	PrefixCaching *bool
}

// Apply returns p reshaped by the arguments, validated. Its errors wrap rag.ErrInvalidRequest
// and name the flag at fault.
func (a EngineArgs) Apply(p Profile) (Profile, error) {
	bad := func(format string, args ...any) (Profile, error) {
		return Profile{}, fmt.Errorf("%w: %s", rag.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	for _, f := range []struct {
		flag  string
		value int
	}{
		{"--max-num-seqs", a.MaxNumSeqs}, {"--max-model-len", a.MaxModelLen},
		{"--max-num-batched-tokens", a.MaxNumBatchedTokens}, {"--block-size", a.BlockSize},
		{"--num-gpu-blocks-override", a.NumGPUBlocksOverride},
	} {
		if f.value < 0 {
			return bad("%s must be positive, got %d", f.flag, f.value)
		}
	}
	if u := a.GPUMemoryUtilization; u < 0 || u > 1 {
		return bad("--gpu-memory-utilization must be between 0 and 1, got %v", u)
	}
	if a.BlockSize > 0 {
		p.BlockSize = a.BlockSize
	}
	switch {
	case a.NumGPUBlocksOverride > 0:
		p.NumBlocks = a.NumGPUBlocksOverride
	case a.BlockSize > 0 || a.GPUMemoryUtilization > 0:
		util := a.GPUMemoryUtilization
		if util == 0 {
			util = GPUMemoryUtilization
		}
		if p.BlockBytes() <= 0 || p.GPUMemoryBytes <= 0 {
			return bad("profile %q has no memory model to size the KV cache from: set --num-gpu-blocks-override", p.Name)
		}
		p.NumBlocks = p.BlocksForMemory(util)
		if p.NumBlocks < 1 {
			return bad("--gpu-memory-utilization %v leaves no memory for the KV cache: %.0f%% of %d MiB is less than the %d MiB of weights and %d MiB of activations",
				util, 100*util, p.GPUMemoryBytes>>20, p.WeightBytes>>20, p.ActivationBytes>>20)
		}
	}
	if a.MaxNumSeqs > 0 {
		p.MaxNumSeqs = a.MaxNumSeqs
	}
	if a.MaxModelLen > 0 {
		p.MaxModelLen = a.MaxModelLen
	}
	if a.ChunkedPrefill != nil {
		p.ChunkedPrefill = *a.ChunkedPrefill
	}
	if a.PrefixCaching != nil {
		p.PrefixCaching = *a.PrefixCaching
	}
	switch {
	case a.MaxNumBatchedTokens > 0:
		p.MaxNumBatchedTokens = a.MaxNumBatchedTokens
	case !p.ChunkedPrefill:
		p.MaxNumBatchedTokens = max(p.MaxNumBatchedTokens, p.MaxModelLen)
	}
	if p.MaxModelLen > p.CapacityTokens() {
		// vLLM refuses to start in this case with the same advice.
		return bad("--max-model-len %d is larger than the %d tokens the KV cache can hold (%d blocks of %d): "+
			"lower --max-model-len, or raise --gpu-memory-utilization or --num-gpu-blocks-override",
			p.MaxModelLen, p.CapacityTokens(), p.NumBlocks, p.BlockSize)
	}
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}
