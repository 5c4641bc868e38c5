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
	// PrefixCaching keeps the KV blocks of prompts for later requests that start with the same
	// tokens (vLLM --enable-prefix-caching): a full block is named by the hash of its tokens and
	// of every token before it, a request whose prompt starts with cached blocks skips their
	// prefill, and blocks no running sequence holds stay cached until they are needed, evicted
	// least recently used first.
	PrefixCaching bool

	// GPU names the simulated device, as dcgm-exporter's modelName label does.
	GPU string
	// GPUMemoryBytes is the device memory as CUDA reports it.
	GPUMemoryBytes int64
	// WeightBytes is the memory the model weights take on the device.
	WeightBytes int64
	// ActivationBytes is what the engine keeps besides weights and KV cache: peak activations,
	// CUDA graphs and non-torch allocations, as vLLM's memory profiling run measures them.
	ActivationBytes int64
	// KVBytesPerToken is the memory of one token's keys and values over all layers.
	KVBytesPerToken int64

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

// UnloadedE2E is the end-to-end latency of a request in an otherwise idle engine: its prompt
// (less the cachedTokens found in the prefix cache) prefilled in chunks of MaxNumBatchedTokens,
// the last chunk's step giving the first token, then one decode step for each further output
// token, its context growing by one token a step. It is the no-load baseline that
// Timeline.Slowdown compares a request's modelled latency with.
func (p Profile) UnloadedE2E(promptTokens, cachedTokens, outputTokens int) time.Duration {
	if promptTokens < 1 || outputTokens < 1 || p.MaxNumBatchedTokens < 1 {
		return 0
	}
	prefill := max(promptTokens-cachedTokens, 1)
	chunks := 1
	if p.ChunkedPrefill {
		chunks = (prefill + p.MaxNumBatchedTokens - 1) / p.MaxNumBatchedTokens
	}
	decodes := time.Duration(outputTokens - 1)
	// Decode step i (1 <= i < outputTokens) reads a context of promptTokens + i tokens.
	kvTokens := decodes*time.Duration(promptTokens) + decodes*(decodes+1)/2
	return time.Duration(chunks)*p.StepOverhead + time.Duration(prefill)*p.PrefillPerToken +
		decodes*(p.StepOverhead+p.DecodePerSeq) + kvTokens*p.AttentionPerKVToken
}

// CapacityTokens is the number of tokens the KV cache holds.
func (p Profile) CapacityTokens() int { return p.BlockSize * p.NumBlocks }

// BlockBytes is the memory of one KV-cache block.
func (p Profile) BlockBytes() int64 { return int64(p.BlockSize) * p.KVBytesPerToken }

// BlocksForMemory is the number of KV-cache blocks vLLM allocates when it may use the share
// utilization of the device memory: what is left after weights and activations, divided by the
// size of a block. It is 0 when the profile has no memory model.
func (p Profile) BlocksForMemory(utilization float64) int {
	if p.BlockBytes() <= 0 || p.GPUMemoryBytes <= 0 {
		return 0
	}
	budget := int64(math.Floor(float64(p.GPUMemoryBytes)*utilization)) - p.WeightBytes - p.ActivationBytes
	return int(max(budget, 0) / p.BlockBytes())
}

// MemoryUsed is the device memory in use while blocksUsed KV-cache blocks are held: weights,
// activations and those blocks. (vLLM reserves its whole KV cache at start-up, so a real GPU
// under vLLM reports a flat figure; this is the memory the run actually needed.)
func (p Profile) MemoryUsed(blocksUsed int) int64 {
	return p.WeightBytes + p.ActivationBytes + int64(blocksUsed)*p.BlockBytes()
}

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
	case p.GPUMemoryBytes < 0 || p.WeightBytes < 0 || p.ActivationBytes < 0 || p.KVBytesPerToken < 0:
		return bad("memory sizes must not be negative")
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

// Public facts behind the llama3-8b-a100 and llama3-8b-awq-a100 profiles.
const (
	llama3Params       = 8.03e9 // Meta-Llama-3-8B parameter count (model card)
	llama3Layers       = 32     // num_hidden_layers (config.json)
	llama3Hidden       = 4096   // hidden_size (config.json)
	llama3Intermediate = 14336  // intermediate_size of the MLP (config.json)
	llama3Vocab        = 128256 // vocab_size; embed_tokens and lm_head are separate matrices (config.json)
	llama3KVHeads      = 8      // num_key_value_heads: grouped-query attention (config.json)
	llama3HeadDim      = 128    // hidden_size 4096 / 32 attention heads (config.json)
	llama3ContextLen   = 8192   // max_position_embeddings (config.json)
	fp16Bytes          = 2      // bytes per FP16 value
	// AWQ as AutoAWQ writes it and vLLM loads it (quant_config: w_bit 4, q_group_size 128,
	// zero_point true): each linear layer's weights in 4 bits, one FP16 scale and one 4-bit zero
	// point per group of 128 input weights of an output column; embeddings, lm_head and norms
	// stay FP16.
	awqBits      = 4
	awqGroupSize = 128
	a100Name     = "NVIDIA A100-SXM4-80GB"
	a100MemGiB   = 79.2 // A100-80GB memory as CUDA reports it (80 GB marketing, ~79.2 GiB usable)
	// a100HBMBytesPerSec is the A100-80GB SXM's HBM2e peak bandwidth (NVIDIA A100 datasheet).
	a100HBMBytesPerSec = 2.039e12
	// a100HBMEfficiency is the share of the 2.039 TB/s HBM2e peak that large sequential reads
	// reach in practice (~80%, as memory-bandwidth benchmarks on A100 show).
	a100HBMEfficiency = 0.8
	a100FP16FLOPS     = 312e12 // dense FP16 tensor-core peak (NVIDIA A100 datasheet)
	// prefillMFU is the model FLOPs utilisation of prefill GEMMs on an 8B model: 50-60% is
	// typical of vLLM on A100; 55% is the middle.
	prefillMFU = 0.55
	// GPUMemoryUtilization is vLLM's default --gpu-memory-utilization: the share of device
	// memory the engine may take for weights, activations and KV cache.
	GPUMemoryUtilization = 0.9
	// activationGiB is what vLLM's memory profiling run sets aside besides weights and KV
	// cache: peak activations of a 2048-token batch, CUDA graphs and non-torch allocations,
	// about 2.3 GiB for an 8B model (vLLM start-up logs report 1.5-3 GiB). Activations are FP16
	// whatever the weights' format, so the AWQ profile keeps the same figure.
	activationGiB = 2.3
	gib           = 1 << 30
	mib           = 1 << 20
)

// bytesOfGiB converts GiB to bytes, rounding down.
func bytesOfGiB(x float64) int64 { return int64(x * gib) }

func seconds(x float64) time.Duration { return time.Duration(math.Round(x * float64(time.Second))) }

// llama3AWQWeightBytes is the size of Llama-3-8B's weights in AWQ 4-bit, from config.json's
// shapes: 32 layers of q, k, v, o projections (4096x4096, 4096x1024, 4096x1024, 4096x4096) and
// gate, up, down projections (3 x 4096x14336) make 6.98e9 quantized weights: 3.49 GB of 4-bit
// values, 109 MB of FP16 scales and 27 MB of 4-bit zero points (one each per 128 weights). The
// two 128256x4096 FP16 matrices (embed_tokens, lm_head) add 2.10 GB and the RMSNorm weights
// 0.5 MB: 5.73 GB in all, which is the size of the safetensors of public AWQ checkpoints of the
// model (e.g. casperhansen/llama-3-8b-instruct-awq, 5.73 GB).
func llama3AWQWeightBytes() int64 {
	const kvDim = llama3KVHeads * llama3HeadDim
	perLayer := int64(2*llama3Hidden*llama3Hidden + 2*llama3Hidden*kvDim + 3*llama3Hidden*llama3Intermediate)
	quantized := llama3Layers * perLayer
	groups := quantized / awqGroupSize
	fp16Params := int64(2*llama3Vocab*llama3Hidden + (2*llama3Layers+1)*llama3Hidden)
	return quantized*awqBits/8 + groups*fp16Bytes + groups*awqBits/8 + fp16Params*fp16Bytes
}

// Profiles returns the built-in profiles, sorted by name. The returned slice is a fresh copy.
func Profiles() []Profile {
	fp16WeightBytes := int64(llama3Params * fp16Bytes)                                     // 16.06 GB
	effectiveBandwidth := a100HBMBytesPerSec * a100HBMEfficiency                           // 1.63 TB/s
	kvBytesPerToken := int64(llama3Layers * llama3KVHeads * llama3HeadDim * 2 * fp16Bytes) // K and V: 128 KiB
	const blockSize = 16                                                                   // vLLM's default block size
	flopsPerToken := 2 * llama3Params                                                      // one multiply-add per parameter per token

	llama := Profile{
		Name:        "llama3-8b-a100",
		Model:       "meta-llama/Meta-Llama-3-8B-Instruct",
		Description: "Llama-3-8B-Instruct FP16 on one A100-80GB under vLLM defaults (paged KV cache, chunked prefill)",
		BlockSize:   blockSize,
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

		GPU:             a100Name,
		GPUMemoryBytes:  bytesOfGiB(a100MemGiB),
		WeightBytes:     fp16WeightBytes,
		ActivationBytes: bytesOfGiB(activationGiB),
		// Each cached token's K and V: 32 layers x 8 heads x 128 dims x 2 x 2 bytes = 128 KiB.
		KVBytesPerToken: kvBytesPerToken,

		// Decoding is memory-bound: every step streams all 16.06 GB of weights at 1.63 TB/s:
		// 9.85 ms, the floor of a decode step whatever the batch size.
		StepOverhead: seconds(float64(fp16WeightBytes) / effectiveBandwidth),
		// Each decoding sequence adds its 2 x 8.03 GFLOP at 55% of 312 TFLOPS: 93.6 us. (Adding
		// it to the weight read, rather than overlapping the two, errs on the slow side at
		// mid-size batches.)
		DecodePerSeq: seconds(flopsPerToken / (a100FP16FLOPS * prefillMFU)),
		// Prefill is compute-bound: 16.06 GFLOP per token at 171.6 TFLOPS effective = 93.6 us,
		// about 10.7k prompt tokens/s. Attention's quadratic term is left out (small below 8k).
		PrefillPerToken: seconds(flopsPerToken / (a100FP16FLOPS * prefillMFU)),
		// Each cached token's 128 KiB of K and V is read once per decode step at 1.63 TB/s:
		// 80 ns; 1k tokens of context cost 80 us.
		AttentionPerKVToken: seconds(float64(kvBytesPerToken) / effectiveBandwidth),
	}
	// (79.2 GiB x 0.9 - 2.3 GiB - 16.06 GB of weights) / (16 tokens x 128 KiB) = 27,659 blocks,
	// about 442k tokens of KV cache.
	llama.NumBlocks = llama.BlocksForMemory(GPUMemoryUtilization)

	// The same model and GPU with 4-bit AWQ weights. Everything that depends on the weights'
	// size follows from it; everything that depends on the arithmetic does not change:
	awq := llama
	awq.Name = "llama3-8b-awq-a100"
	awq.Model = "casperhansen/llama-3-8b-instruct-awq"
	awq.Description = "Llama-3-8B-Instruct AWQ 4-bit on one A100-80GB under vLLM defaults (Marlin kernels, FP16 KV cache)"
	awq.WeightBytes = llama3AWQWeightBytes() // 5.73 GB
	// A decode step still streams every weight once, now 5.73 GB at the same 1.63 TB/s: 3.51 ms
	// instead of 9.85 ms, the whole gain of weight-only quantization at small batches.
	awq.StepOverhead = seconds(float64(awq.WeightBytes) / effectiveBandwidth)
	// The FLOPs do not shrink: vLLM runs AWQ checkpoints on Ampere with its Marlin kernels
	// (awq_marlin), which dequantize the 4-bit weights to FP16 in registers and multiply on the
	// FP16 tensor cores, so a token still costs 2 x 8.03 GFLOP and prefill and the per-sequence
	// decode cost keep the FP16 figures (DecodePerSeq, PrefillPerToken). Marlin is built to hide
	// the dequantization behind the memory reads; where it does not (large batches), these
	// figures err on the fast side. The KV cache stays FP16, so AttentionPerKVToken is unchanged.
	// The 10.33 GB the weights no longer take go to the KV cache:
	// (79.2 GiB x 0.9 - 2.3 GiB - 5.73 GB) / 2 MiB = 32,586 blocks, about 521k tokens.
	awq.NumBlocks = awq.BlocksForMemory(GPUMemoryUtilization)

	// tiny is not derived from hardware: its numbers are round and small so that tests and CI
	// see queueing, preemption and batching within milliseconds. A step costs about 1 ms, a
	// prefill token a fiftieth of a decode slot, and the KV cache holds 4096 tokens: a
	// 1000 MiB device of which vLLM's 90% leave 900 MiB for 500 MiB of weights, 144 MiB of
	// activations and 256 blocks of 16 tokens x 64 KiB.
	tiny := Profile{
		Name:                "tiny",
		Model:               "ragtail-tiny",
		Description:         "small and fast engine for tests and CI: 8 sequences, 4096 tokens of KV cache, ~1 ms steps",
		BlockSize:           16,
		MaxNumSeqs:          8,
		MaxNumBatchedTokens: 512,
		ChunkedPrefill:      true,
		MaxModelLen:         2048,
		Alloc:               AllocPaged,
		GPU:                 "ragtail-tiny-gpu",
		GPUMemoryBytes:      1000 * mib,
		WeightBytes:         500 * mib,
		ActivationBytes:     144 * mib,
		KVBytesPerToken:     64 << 10,
		StepOverhead:        time.Millisecond,
		DecodePerSeq:        50 * time.Microsecond,
		PrefillPerToken:     time.Microsecond,
		AttentionPerKVToken: 10 * time.Nanosecond,
	}
	tiny.NumBlocks = tiny.BlocksForMemory(GPUMemoryUtilization)
	ps := []Profile{llama, awq, tiny}
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
