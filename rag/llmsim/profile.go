package llmsim

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// AllocMode is how the engine hands out KV-cache blocks to sequences.
type AllocMode string

// The KV-cache allocation modes.
const (
	// AllocPaged allocates blocks on demand, as vLLM's PagedAttention does: a sequence starts
	// with the blocks its prompt fills and gets one more each time its length crosses a block
	// boundary. When none is free, a running sequence is preempted.
	AllocPaged AllocMode = "paged"
	// AllocContiguous reserves, at admission, every block a sequence could ever need
	// (prompt + max_tokens), as engines with contiguous per-request KV buffers do. It never
	// preempts, but admits fewer sequences for the same capacity and leaves reserved blocks
	// unused until the sequence grows into them (Stats.BlocksReservedUnused).
	AllocContiguous AllocMode = "contiguous"
)

// ParseAllocMode returns the allocation mode named s ("paged" or "contiguous").
func ParseAllocMode(s string) (AllocMode, error) {
	switch m := AllocMode(strings.ToLower(strings.TrimSpace(s))); m {
	case AllocPaged, AllocContiguous:
		return m, nil
	}
	return "", fmt.Errorf("%w: allocation mode %q: want paged or contiguous", rag.ErrInvalidRequest, s)
}

// Profile describes the simulated model, GPU and engine settings. The scheduler's limits
// (BlockSize to Alloc) are vLLM's engine arguments of the same names; the four durations are
// the step-time model:
//
//	step time = StepOverhead
//	          + PrefillPerToken     x prompt tokens processed in the step
//	          + DecodePerSeq        x sequences decoding in the step
//	          + AttentionPerKVToken x sum of the context lengths of those sequences
//
// so a decode step grows with batch size and context length, and prefill costs in proportion
// to the prompt tokens it processes. A Profile is a plain value; copy and modify one to explore
// other settings, then let New validate it.
type Profile struct {
	// Name identifies the profile (ProfileByName, --profile flags, the admin API).
	Name string
	// Model is the model id the engine serves and reports.
	Model string
	// Description says in one line what is simulated.
	Description string

	// BlockSize is the number of tokens one KV-cache block holds (vLLM --block-size).
	BlockSize int
	// NumBlocks is the KV-cache capacity in blocks (vLLM's "# GPU blocks").
	NumBlocks int
	// MaxNumSeqs caps the sequences running at once (vLLM --max-num-seqs); more wait in queue.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step (vLLM --max-num-batched-tokens).
	// With chunked prefill it covers decodes (one token each) and prefill chunks; without, it
	// caps the prompt tokens prefilled in one step and must hold a whole MaxModelLen prompt.
	MaxNumBatchedTokens int
	// ChunkedPrefill splits long prompts over several steps, decodes first (vLLM
	// --enable-chunked-prefill); without it a prompt is prefilled in one step.
	ChunkedPrefill bool
	// MaxModelLen is the longest prompt + completion accepted (vLLM --max-model-len).
	MaxModelLen int
	// Alloc is the KV-cache allocation mode.
	Alloc AllocMode

	// StepOverhead is the fixed cost of every step: reading all the weights from GPU memory
	// once, which a decode step cannot avoid whatever its batch size.
	StepOverhead time.Duration
	// DecodePerSeq is the extra cost of each decoding sequence in a step (its share of the
	// matrix multiplications).
	DecodePerSeq time.Duration
	// PrefillPerToken is the cost of each prompt token prefilled in a step (compute-bound).
	PrefillPerToken time.Duration
	// AttentionPerKVToken is the cost of reading one cached token's keys and values during a
	// decode step, so long contexts slow decoding down.
	AttentionPerKVToken time.Duration
}

// StepTime returns the modelled duration of a step that prefills prefillTokens prompt tokens
// and decodes decodeSeqs sequences whose context lengths add up to kvTokens.
func (p Profile) StepTime(prefillTokens, decodeSeqs, kvTokens int) time.Duration {
	return p.StepOverhead +
		time.Duration(prefillTokens)*p.PrefillPerToken +
		time.Duration(decodeSeqs)*p.DecodePerSeq +
		time.Duration(kvTokens)*p.AttentionPerKVToken
}

// CapacityTokens is the number of tokens the KV cache holds.
func (p Profile) CapacityTokens() int { return p.BlockSize * p.NumBlocks }

// Validate reports the first setting that makes the profile unusable. Its errors wrap
// rag.ErrInvalidRequest.
func (p Profile) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: llm-sim profile %q: %s", rag.ErrInvalidRequest, p.Name, fmt.Sprintf(format, a...))
	}
	switch {
	case strings.TrimSpace(p.Model) == "":
		return bad("model is empty")
	case p.BlockSize < 1:
		return bad("block size must be positive, got %d", p.BlockSize)
	case p.NumBlocks < 1:
		return bad("num blocks must be positive, got %d", p.NumBlocks)
	case p.MaxNumSeqs < 1:
		return bad("max num seqs must be positive, got %d", p.MaxNumSeqs)
	case p.MaxModelLen < 2:
		return bad("max model len must be at least 2, got %d", p.MaxModelLen)
	case p.MaxModelLen > p.CapacityTokens():
		// vLLM refuses to start in this case too: one request could need more than the cache.
		return bad("max model len %d exceeds the KV cache (%d blocks x %d tokens = %d tokens)",
			p.MaxModelLen, p.NumBlocks, p.BlockSize, p.CapacityTokens())
	case p.MaxNumBatchedTokens < p.MaxNumSeqs:
		// Every running sequence must be able to decode one token in each step.
		return bad("max num batched tokens %d is below max num seqs %d", p.MaxNumBatchedTokens, p.MaxNumSeqs)
	case !p.ChunkedPrefill && p.MaxNumBatchedTokens < p.MaxModelLen:
		// Without chunking a prompt is prefilled in one step, so the longest must fit.
		return bad("without chunked prefill, max num batched tokens %d must be at least max model len %d",
			p.MaxNumBatchedTokens, p.MaxModelLen)
	case p.StepOverhead <= 0:
		return bad("step overhead must be positive, got %v", p.StepOverhead)
	case p.DecodePerSeq < 0 || p.PrefillPerToken < 0 || p.AttentionPerKVToken < 0:
		return bad("per-sequence and per-token costs must not be negative")
	}
	if _, err := ParseAllocMode(string(p.Alloc)); err != nil {
		return bad("alloc %q: want paged or contiguous", p.Alloc)
	}
	return nil
}

// Public facts behind the llama3-8b-a100 profile.
const (
	llama3Params       = 8.03e9 // Meta-Llama-3-8B parameter count (model card)
	llama3Layers       = 32     // num_hidden_layers (config.json)
	llama3KVHeads      = 8      // num_key_value_heads: grouped-query attention (config.json)
	llama3HeadDim      = 128    // hidden_size 4096 / 32 attention heads (config.json)
	llama3ContextLen   = 8192   // max_position_embeddings (config.json)
	fp16Bytes          = 2      // bytes per FP16 value
	a100MemGiB         = 79.2   // A100-80GB memory as CUDA reports it (80 GB marketing, ~79.2 GiB usable)
	a100HBMBytesPerSec = 2.039e12
	// a100HBMEfficiency is the share of the 2.039 TB/s HBM2e peak that large sequential reads
	// reach in practice (~80%, as memory-bandwidth benchmarks on A100 show).
	a100HBMEfficiency = 0.8
	a100FP16FLOPS     = 312e12 // dense FP16 tensor-core peak (NVIDIA A100 datasheet)
	// prefillMFU is the model FLOPs utilisation of prefill GEMMs on an 8B model: 50-60% is
	// typical of vLLM on A100; 55% is the middle.
	prefillMFU = 0.55
	// vLLM's default --gpu-memory-utilization.
	gpuMemoryUtilization = 0.9
	// activationGiB is what vLLM's memory profiling run sets aside besides weights and KV
	// cache: peak activations of a 2048-token batch, CUDA graphs and non-torch allocations,
	// about 2.3 GiB for an 8B model (vLLM start-up logs report 1.5-3 GiB).
	activationGiB = 2.3
	gib           = 1 << 30
)

func seconds(x float64) time.Duration { return time.Duration(math.Round(x * float64(time.Second))) }

// Profiles returns the built-in profiles, sorted by name. The returned slice is a fresh copy.
func Profiles() []Profile {
	weightBytes := llama3Params * fp16Bytes                                                  // 16.06 GB
	effectiveBandwidth := a100HBMBytesPerSec * a100HBMEfficiency                             // 1.63 TB/s
	kvBytesPerToken := float64(llama3Layers * llama3KVHeads * llama3HeadDim * 2 * fp16Bytes) // K and V: 128 KiB
	const blockSize = 16                                                                     // vLLM's default block size
	kvBudgetBytes := (a100MemGiB*gpuMemoryUtilization-activationGiB)*gib - weightBytes
	flopsPerToken := 2 * llama3Params // one multiply-add per parameter per token

	llama := Profile{
		Name:        "llama3-8b-a100",
		Model:       "meta-llama/Meta-Llama-3-8B-Instruct",
		Description: "Llama-3-8B-Instruct FP16 on one A100-80GB under vLLM defaults (paged KV cache, chunked prefill)",
		BlockSize:   blockSize,
		// (79.2 GiB x 0.9 - 2.3 GiB - 16.06 GB of weights) / (16 tokens x 128 KiB) = 27,659 blocks,
		// about 442k tokens of KV cache.
		NumBlocks: int(kvBudgetBytes / (blockSize * kvBytesPerToken)),
		// vLLM's default --max-num-seqs.
		MaxNumSeqs: 256,
		// The token budget vLLM has long used by default for the OpenAI server with chunked
		// prefill (recent releases raise it on GPUs of 70 GiB and more); it bounds how much
		// prefill one step mixes into the decodes: 2048 x PrefillPerToken = 192 ms.
		MaxNumBatchedTokens: 2048,
		ChunkedPrefill:      true,
		// Llama 3's native context, vLLM's default --max-model-len for it. PITFALLS.md cites 4096
		// for the knee experiment; set MaxModelLen on a copy to reproduce that configuration.
		MaxModelLen: llama3ContextLen,
		Alloc:       AllocPaged,
		// Decoding is memory-bound: every step streams all 16.06 GB of weights at 1.63 TB/s:
		// 9.85 ms, the floor of a decode step whatever the batch size.
		StepOverhead: seconds(weightBytes / effectiveBandwidth),
		// Each decoding sequence adds its 2 x 8.03 GFLOP at 55% of 312 TFLOPS: 93.6 us. (Adding
		// it to the weight read, rather than overlapping the two, errs on the slow side at
		// mid-size batches.)
		DecodePerSeq: seconds(flopsPerToken / (a100FP16FLOPS * prefillMFU)),
		// Prefill is compute-bound: 16.06 GFLOP per token at 171.6 TFLOPS effective = 93.6 us,
		// about 10.7k prompt tokens/s. Attention's quadratic term is left out (small below 8k).
		PrefillPerToken: seconds(flopsPerToken / (a100FP16FLOPS * prefillMFU)),
		// Each cached token's K and V (32 layers x 8 heads x 128 dims x 2 x 2 bytes = 128 KiB)
		// is read once per decode step at 1.63 TB/s: 80 ns; 1k tokens of context cost 80 us.
		AttentionPerKVToken: seconds(kvBytesPerToken / effectiveBandwidth),
	}

	// tiny is not derived from hardware: its numbers are round and small so that tests and CI
	// see queueing, preemption and batching within milliseconds. A step costs about 1 ms, a
	// prefill token a fiftieth of a decode slot, and the KV cache holds 4096 tokens.
	tiny := Profile{
		Name:                "tiny",
		Model:               "ragtail-tiny",
		Description:         "small and fast engine for tests and CI: 8 sequences, 4096 tokens of KV cache, ~1 ms steps",
		BlockSize:           16,
		NumBlocks:           256,
		MaxNumSeqs:          8,
		MaxNumBatchedTokens: 512,
		ChunkedPrefill:      true,
		MaxModelLen:         2048,
		Alloc:               AllocPaged,
		StepOverhead:        time.Millisecond,
		DecodePerSeq:        50 * time.Microsecond,
		PrefillPerToken:     time.Microsecond,
		AttentionPerKVToken: 10 * time.Nanosecond,
	}
	ps := []Profile{llama, tiny}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	return ps
}

// DefaultProfile is the name of the profile `ragtail serve` simulates by default.
const DefaultProfile = "llama3-8b-a100"

// ProfileByName returns the built-in profile called name. The error lists the valid names and
// wraps rag.ErrInvalidRequest.
func ProfileByName(name string) (Profile, error) {
	var names []string
	for _, p := range Profiles() {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Profile{}, fmt.Errorf("%w: unknown llm-sim profile %q: want one of %s",
		rag.ErrInvalidRequest, name, strings.Join(names, ", "))
}
