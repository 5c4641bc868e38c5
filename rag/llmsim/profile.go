package llmsim

import (
	"fmt"
	"math"
	"sort"
	"strconv"
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
	// once, which a decode step cannot avoid whatever its batch size, plus the engine's own
	// per-step cost (kernel launches, sampling, scheduling: StepFloor in the Llama profiles).
	StepOverhead time.Duration
	// DecodePerSeq is the extra cost of each decoding sequence in a step (its share of the
	// matrix multiplications).
	DecodePerSeq time.Duration
	// PrefillPerToken is the cost of each prompt token prefilled in a step (compute-bound).
	PrefillPerToken time.Duration
	// AttentionPerKVToken is the cost of reading one cached token's keys and values during a
	// decode step, so long contexts slow decoding down.
	AttentionPerKVToken time.Duration

	// TDPWatts is the device's board power limit (its datasheet's TDP) and IdleWatts what it
	// draws with nothing to run. The simulated power is IdleWatts between steps and, during a
	// step, IdleWatts plus (TDPWatts - IdleWatts) times the share of the step the GPU works:
	// all of it but HostStepTime (StepPower). Both 0: no power is simulated.
	TDPWatts, IdleWatts float64
	// HostStepTime is the part of StepOverhead spent off the GPU (kernel launches, sampling,
	// scheduling: StepFloor in the Llama profiles), when the GPU draws only its idle power.
	HostStepTime time.Duration
}

// StepPower is the power the simulated device draws during a step of duration d, in watts:
// idle plus the dynamic range in proportion to the share of d the GPU works.
func (p Profile) StepPower(d time.Duration) float64 {
	if d <= 0 {
		return p.IdleWatts
	}
	busy := max(d-p.HostStepTime, 0)
	return p.IdleWatts + (p.TDPWatts-p.IdleWatts)*float64(busy)/float64(d)
}

// Energy is what the simulated device has drawn, in joules, after elapsed time during which
// it ran steps lasting busy in all, steps of them: its idle power all along, and the dynamic
// range over the time the GPU worked (busy less each step's HostStepTime).
func (p Profile) Energy(elapsed, busy time.Duration, steps int64) float64 {
	gpu := max(busy-time.Duration(steps)*p.HostStepTime, 0)
	return p.IdleWatts*elapsed.Seconds() + (p.TDPWatts-p.IdleWatts)*gpu.Seconds()
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
	case math.IsNaN(p.TDPWatts) || math.IsNaN(p.IdleWatts) || p.IdleWatts < 0 || p.TDPWatts < p.IdleWatts:
		return bad("power: want 0 <= idle watts <= TDP watts, got %g and %g", p.IdleWatts, p.TDPWatts)
	case p.HostStepTime < 0 || p.HostStepTime > p.StepOverhead:
		return bad("host step time must lie within 0 and the step overhead %v, got %v", p.StepOverhead, p.HostStepTime)
	}
	if _, err := ParseAllocMode(string(p.Alloc)); err != nil {
		return bad("alloc %q: want paged or contiguous", p.Alloc)
	}
	return nil
}

// Public facts behind the Llama profiles: the model's shapes (config.json of
// meta-llama/Meta-Llama-3-8B) and the AWQ format.
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
	// GPUMemoryUtilization is vLLM's default --gpu-memory-utilization: the share of device
	// memory the engine may take for weights, activations and KV cache.
	GPUMemoryUtilization = 0.9
	// activationGiB is what vLLM's memory profiling run sets aside besides weights and KV
	// cache: peak activations of a 2048-token batch, CUDA graphs and non-torch allocations,
	// about 2.3 GiB for an 8B model (vLLM start-up logs report 1.5-3 GiB). Activations are FP16
	// whatever the weights' format, so the AWQ profiles keep the same figure.
	activationGiB = 2.3
	gib           = 1 << 30
	mib           = 1 << 20
)

// The rule that turns a datasheet into step costs. The same two efficiencies apply to every
// GPU: a datasheet peak is a ceiling no engine reaches, and one figure for all keeps the
// profiles comparable (the ratios between GPUs are the datasheets' ratios).
const (
	// hbmEfficiency is the share of the datasheet's peak memory bandwidth that large
	// sequential reads reach in practice (~80%, as memory-bandwidth benchmarks on A100 show).
	hbmEfficiency = 0.8
	// prefillMFU is the model FLOPs utilisation of prefill GEMMs on an 8B model: 50-60% is
	// typical of vLLM on A100; 55% is the middle.
	prefillMFU = 0.55
)

// gpuDatasheet holds the figures of one GPU that its profiles are derived from. Bandwidth and
// throughput are NVIDIA's datasheet peaks (dense tensor-core FP16/BF16, not the "with
// sparsity" figure the datasheets print first); memory is what CUDA reports, a little less
// than the marketing size (ECC and the driver's reserve): nvidia-smi's memory.total as commonly
// reported for each device, not read from one here.
type gpuDatasheet struct {
	key            string  // suffix of the profile names: llama3-8b-<key>
	label          string  // the GPU in a profile's description
	name           string  // the device as dcgm-exporter's modelName label reports it
	memBytesPerSec float64 // peak memory bandwidth, bytes/s
	denseFP16FLOPS float64 // dense FP16/BF16 tensor-core peak, FLOP/s
	memGiB         float64 // device memory as CUDA reports it, GiB
	tdpWatts       float64 // board power limit (TDP), W
}

// idleShare is the share of its TDP a simulated GPU draws idle. An assumption, not a
// measurement: nvidia-smi shows data-centre GPUs idling at roughly a tenth to a fifth of their
// power limit with the driver loaded and persistence mode on.
const idleShare = 0.15

// The GPUs of the built-in profiles, slowest memory first.
var llamaGPUs = []gpuDatasheet{
	// NVIDIA publishes no datasheet for the A10G, AWS's variant of the A10 (G5 instances): it
	// shares the A10's 24 GB of GDDR6 at 600 GB/s (NVIDIA A10 datasheet) but has less tensor
	// throughput: 70 TFLOPS dense FP16 against the A10's 125 (Baseten, "NVIDIA A10 vs A10G for
	// ML model inference"). 23,028 MiB as CUDA reports it with ECC on. Its power limit is 300 W
	// as nvidia-smi reports it on G5 instances (the A10's datasheet says 150 W).
	{key: "a10g", label: "A10G", name: "NVIDIA A10G", memBytesPerSec: 600e9, denseFP16FLOPS: 70e12, memGiB: 22.49, tdpWatts: 300},
	// NVIDIA L4 datasheet: 24 GB GDDR6 at 300 GB/s, FP16 tensor 242 TFLOPS with sparsity, so
	// 121 dense. 23,034 MiB as CUDA reports it with ECC on. 72 W max thermal design power.
	{key: "l4", label: "L4", name: "NVIDIA L4", memBytesPerSec: 300e9, denseFP16FLOPS: 121e12, memGiB: 22.49, tdpWatts: 72},
	// NVIDIA A100 datasheet, 80GB SXM: HBM2e at 2,039 GB/s, FP16 tensor 312 TFLOPS dense (624
	// with sparsity); 80 GB, of which CUDA reports ~79.2 GiB; max TDP 400 W.
	{key: "a100", label: "A100-80GB", name: "NVIDIA A100-SXM4-80GB", memBytesPerSec: 2.039e12, denseFP16FLOPS: 312e12, memGiB: 79.2, tdpWatts: 400},
	// NVIDIA H100 datasheet, SXM: HBM3 at 3.35 TB/s, FP16/BF16 tensor 1,979 TFLOPS with sparsity,
	// 989 dense; 80 GB, 81,559 MiB as CUDA reports it; max TDP up to 700 W.
	{key: "h100", label: "H100-SXM", name: "NVIDIA H100 80GB HBM3", memBytesPerSec: 3.35e12, denseFP16FLOPS: 989e12, memGiB: 79.65, tdpWatts: 700},
	// NVIDIA H200 datasheet, SXM: 141 GB of HBM3e at 4.8 TB/s, the H100's compute (FP16/BF16
	// tensor 1,979 TFLOPS with sparsity, 989 dense); 143,771 MiB as CUDA reports it; max TDP
	// up to 700 W.
	{key: "h200", label: "H200", name: "NVIDIA H200", memBytesPerSec: 4.8e12, denseFP16FLOPS: 989e12, memGiB: 140.4, tdpWatts: 700},
}

// llamaWeights is one format of Llama-3-8B-Instruct's weights.
type llamaWeights struct {
	infix  string // between "llama3-8b-" and the GPU key in the profile name
	model  string // the checkpoint's Hugging Face id
	format string // the format in a profile's description
	bytes  int64  // the weights' size on the device
}

// The formats of the built-in profiles.
var llamaFormats = []llamaWeights{
	{infix: "", model: "meta-llama/Meta-Llama-3-8B-Instruct", format: "FP16", bytes: int64(llama3Params * fp16Bytes)}, // 16.06 GB
	// vLLM runs AWQ checkpoints with its Marlin kernels (awq_marlin) on every GPU here: Marlin
	// needs compute capability 8.0 or more (A10G 8.6, L4 8.9, A100 8.0, H100 and H200 9.0). They
	// dequantize the 4-bit weights to FP16 in registers and multiply on the FP16 tensor cores,
	// so a token still costs 2 x 8.03 GFLOP at the GPU's FP16 rate. On Hopper, Marlin uses
	// Ampere's mma instructions rather than Hopper's wgmma, so it reaches less of the 989
	// TFLOPS than FP16 GEMMs do: where compute dominates (prefill, large batches) the Hopper
	// AWQ profiles err on the fast side.
	{infix: "awq-", model: "casperhansen/llama-3-8b-instruct-awq", format: "AWQ 4-bit (Marlin kernels)", bytes: llama3AWQWeightBytes()}, // 5.73 GB
}

// The published measurement the per-step floor is calibrated on (John Musgrave, "vLLM
// throughput-latency sweep on NVIDIA A100", https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on):
// Llama-3.1-8B-Instruct BF16 (the same shapes as Llama-3-8B) on one A100-40GB under vLLM
// 0.23.0 defaults, one request at a time, 1024-token prompts and 128 output tokens, decodes at
// about 75 tokens/s.
var floorReference = struct {
	gpu                        gpuDatasheet
	promptTokens, outputTokens int
	tokensPerSec               float64
}{
	// NVIDIA A100 datasheet, 40GB SXM: HBM2 at 1,555 GB/s, the same 312 TFLOPS dense FP16.
	gpu:          gpuDatasheet{key: "a100-40gb", label: "A100-40GB", name: "NVIDIA A100-SXM4-40GB", memBytesPerSec: 1.555e12, denseFP16FLOPS: 312e12, memGiB: 39.4},
	promptTokens: 1024, outputTokens: 128, tokensPerSec: 75,
}

// stepFloor is the fixed cost of every step besides reading the weights: kernel launches (or
// the replay of a CUDA graph), sampling, the scheduler and the input preparation of the
// engine's CPU side, which vLLM overlaps with the GPU only in part. It is calibrated once, on
// floorReference: the measured decode step (1/75 s = 13.33 ms) less what the datasheet rule
// gives for the same run without a floor (13.12 ms: the weights at 80% of 1,555 GB/s, one
// sequence's FLOPs and a context of 1,088 tokens on average) leaves 0.21 ms. The same figure
// applies to every GPU and format, on the assumption that this cost is the host's and the
// engine's, not the GPU's memory system. It is small because vLLM runs decode steps as CUDA
// graphs and (since v0.6) overlaps scheduling with the GPU; the rounding of the published
// 75 tokens/s alone moves it by about 0.1 ms.
var stepFloor = calibrateStepFloor()

// StepFloor returns the fixed per-step cost the Llama profiles charge besides the weight read,
// as part of their StepOverhead (see stepFloor in profile.go for its source).
func StepFloor() time.Duration { return stepFloor }

func calibrateStepFloor() time.Duration {
	ref := floorReference
	p := llamaProfile(ref.gpu, llamaFormats[0], 0)
	// The mean decode step of the measured run under the rule: its end-to-end latency less its
	// first token's, over the output tokens after the first.
	decode := p.UnloadedE2E(ref.promptTokens, 0, ref.outputTokens) - p.UnloadedE2E(ref.promptTokens, 0, 1)
	modelled := decode / time.Duration(ref.outputTokens-1)
	return seconds(1/ref.tokensPerSec) - modelled
}

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

// llamaProfile derives the profile of Llama-3-8B-Instruct in format w on gpu under vLLM's
// defaults, charging floor on every step. It is the one rule behind every Llama profile:
//
//	StepOverhead        = floor + weight bytes / (80% of peak bandwidth)
//	DecodePerSeq        = PrefillPerToken = 2 x 8.03 GFLOP / (55% of dense FP16 peak)
//	AttentionPerKVToken = 128 KiB of K and V / (80% of peak bandwidth)
//	NumBlocks           = BlocksForMemory(0.9) of the memory CUDA reports
//
// On the A100-80GB in FP16: 0.21 + 9.85 ms a step, 93.6 us per prefill token and per decoding
// sequence (about 10.7k prompt tokens/s), 80 ns per cached token read, 27,659 blocks (442k
// tokens). Adding the per-sequence FLOPs to the weight read, rather than overlapping the two,
// errs on the slow side at mid-size batches; attention's quadratic term in prefill is left out
// (small below 8k tokens).
func llamaProfile(gpu gpuDatasheet, w llamaWeights, floor time.Duration) Profile {
	bandwidth := gpu.memBytesPerSec * hbmEfficiency
	kvBytesPerToken := int64(llama3Layers * llama3KVHeads * llama3HeadDim * 2 * fp16Bytes) // K and V: 128 KiB
	flopsPerToken := 2 * llama3Params                                                      // one multiply-add per parameter per token
	weightRead := seconds(float64(w.bytes) / bandwidth)
	p := Profile{
		Name:  "llama3-8b-" + w.infix + gpu.key,
		Model: w.model,
		Description: fmt.Sprintf("Llama-3-8B-Instruct %s on one %s under vLLM defaults (paged KV cache, chunked prefill): "+
			"each step costs a %s floor + %s reading the weights at 80%% of %s",
			w.format, gpu.label, roundDuration(floor), roundDuration(weightRead), bandwidthString(gpu.memBytesPerSec)),
		BlockSize: 16, // vLLM's default block size
		// vLLM's default --max-num-seqs.
		MaxNumSeqs: 256,
		// The token budget vLLM has long used by default for the OpenAI server with chunked
		// prefill (recent releases raise it on GPUs of 70 GiB and more); it bounds how much
		// prefill one step mixes into the decodes.
		MaxNumBatchedTokens: 2048,
		ChunkedPrefill:      true,
		// Llama 3's native context, vLLM's default --max-model-len for it. PITFALLS.md cites 4096
		// for the knee experiment; set MaxModelLen on a copy to reproduce that configuration.
		MaxModelLen: llama3ContextLen,
		Alloc:       AllocPaged,

		GPU:             gpu.name,
		GPUMemoryBytes:  bytesOfGiB(gpu.memGiB),
		WeightBytes:     w.bytes,
		ActivationBytes: bytesOfGiB(activationGiB),
		// Each cached token's K and V: 32 layers x 8 heads x 128 dims x 2 x 2 bytes = 128 KiB;
		// the KV cache stays FP16 whatever the weights' format.
		KVBytesPerToken: kvBytesPerToken,

		// Decoding is memory-bound: every step streams all the weights once, the floor of a
		// decode step whatever the batch size, plus the engine's fixed per-step cost.
		StepOverhead: floor + weightRead,
		// Each decoding sequence adds its 2 x 8.03 GFLOP at 55% of the dense FP16 peak.
		DecodePerSeq: seconds(flopsPerToken / (gpu.denseFP16FLOPS * prefillMFU)),
		// Prefill is compute-bound: the same FLOPs per prompt token.
		PrefillPerToken: seconds(flopsPerToken / (gpu.denseFP16FLOPS * prefillMFU)),
		// Each cached token's K and V is read once per decode step.
		AttentionPerKVToken: seconds(float64(kvBytesPerToken) / bandwidth),

		// The datasheet's TDP while the GPU works, idleShare of it otherwise (and during the
		// floor, which is the host's).
		TDPWatts: gpu.tdpWatts, IdleWatts: idleShare * gpu.tdpWatts, HostStepTime: floor,
	}
	p.NumBlocks = p.BlocksForMemory(GPUMemoryUtilization)
	return p
}

// roundDuration rounds d for a description: to 10 us below 1 ms, to 0.01 ms above.
func roundDuration(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

// bandwidthString writes a bandwidth in GB/s or TB/s, as datasheets do.
func bandwidthString(bytesPerSec float64) string {
	if bytesPerSec >= 1e12 {
		return strconv.FormatFloat(bytesPerSec/1e12, 'f', -1, 64) + " TB/s"
	}
	return strconv.FormatFloat(bytesPerSec/1e9, 'f', -1, 64) + " GB/s"
}

// Profiles returns the built-in profiles, sorted by name: Llama-3-8B-Instruct in FP16 and AWQ
// on each GPU of llamaGPUs (llama3-8b-<gpu>, llama3-8b-awq-<gpu>), and tiny. The returned
// slice is a fresh copy.
func Profiles() []Profile {
	var ps []Profile
	for _, gpu := range llamaGPUs {
		for _, w := range llamaFormats {
			ps = append(ps, llamaProfile(gpu, w, stepFloor))
		}
	}

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
		// No power model: tiny is no device.
	}
	tiny.NumBlocks = tiny.BlocksForMemory(GPUMemoryUtilization)
	ps = append(ps, tiny)
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
