package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/service"
)

// llmSimOptions are the flags of `ragtail llm-sim`.
type llmSimOptions struct {
	addr, profile, alloc, logLevel string
	schedulingPolicy               string
	seed                           uint64
	grace                          time.Duration
	reasoningTokens                int
	engine                         llmsim.EngineArgs
}

// engineArgFlags registers vLLM's engine arguments on fs. The boolean ones come in vLLM's two
// spellings, --enable-X and --no-enable-X; they are resolved by resolveEngineArgs after parsing.
type engineArgFlags struct {
	chunked, noChunked, prefix, noPrefix bool
}

func (o *llmSimOptions) register(fs *flag.FlagSet) *engineArgFlags {
	a := &o.engine
	var b engineArgFlags
	fs.StringVar(&o.addr, "addr", ":8000", "listen address")
	fs.StringVar(&o.profile, "profile", llmsim.DefaultProfile, "engine profile: "+profileNames())
	fs.StringVar(&o.alloc, "kv-alloc", "", "KV-cache allocation: paged or contiguous (default: the profile's)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the generated text")
	fs.StringVar(&o.schedulingPolicy, "scheduling-policy", string(llmsim.PolicyFCFS),
		"fcfs or priority (vLLM's): with priority the request field \"priority\" (lower first) orders the\n"+
			"queue and the highest value is preempted first when KV blocks run out")
	fs.IntVar(&o.reasoningTokens, "reasoning-tokens", 0,
		"reasoning tokens each request streams (as reasoning_content) before its answer, out of its\n"+
			"max_tokens; a request's thinking_token_budget field overrides it")
	fs.DurationVar(&o.grace, "shutdown-grace", 30*time.Second, "how long running requests may take to finish on shutdown")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")

	// vLLM's engine arguments, with vLLM's meaning; 0 keeps the profile's value.
	fs.IntVar(&a.MaxNumSeqs, "max-num-seqs", 0,
		"maximum number of sequences in one step (the running batch); more wait in the queue\n(default: the profile's, 256 for the Llama profiles)")
	fs.IntVar(&a.MaxModelLen, "max-model-len", 0,
		"model context length: the longest prompt + completion accepted; longer requests get 400\ncontext_length_exceeded (default: the profile's, 8192 for Llama 3)")
	fs.IntVar(&a.MaxNumBatchedTokens, "max-num-batched-tokens", 0,
		"maximum number of tokens processed in one step, decodes and prefill chunks together\n(default: the profile's, 2048; without chunked prefill at least --max-model-len)")
	fs.IntVar(&a.BlockSize, "block-size", 0,
		"size of a KV-cache block in tokens; the number of blocks is derived again from the memory\nleft for the cache (default: the profile's, 16)")
	fs.IntVar(&a.NumGPUBlocksOverride, "num-gpu-blocks-override", 0,
		"number of KV-cache blocks to use instead of the number derived from memory (vLLM uses it\nto test preemption)")
	fs.Float64Var(&a.GPUMemoryUtilization, "gpu-memory-utilization", 0,
		"fraction of device memory the engine may use, 0 to 1; the KV cache gets what weights and\nactivations leave of it (default 0.9)")
	fs.BoolVar(&b.chunked, "enable-chunked-prefill", false,
		"split long prompts into chunks that share steps with the decodes (on in the built-in profiles)")
	fs.BoolVar(&b.noChunked, "no-enable-chunked-prefill", false, "prefill each prompt in one step")
	fs.BoolVar(&b.prefix, "enable-prefix-caching", false,
		"keep the KV blocks of prompts so that later requests sharing a prefix skip its prefill\n(off by default here; vLLM V1 turns it on by default)")
	fs.BoolVar(&b.noPrefix, "no-enable-prefix-caching", false, "do not cache prompt blocks")
	return &b
}

// resolve turns the boolean flag pairs into the engine arguments, refusing contradictions.
func (b *engineArgFlags) resolve(fs *flag.FlagSet, a *llmsim.EngineArgs) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, pair := range []struct {
		name    string
		on, off bool
		dst     **bool
	}{
		{"chunked-prefill", b.chunked, b.noChunked, &a.ChunkedPrefill},
		{"prefix-caching", b.prefix, b.noPrefix, &a.PrefixCaching},
	} {
		onSet, offSet := set["enable-"+pair.name], set["no-enable-"+pair.name]
		switch {
		case onSet && offSet:
			return fmt.Errorf("--enable-%s and --no-enable-%s contradict each other: give one", pair.name, pair.name)
		case onSet:
			v := pair.on
			*pair.dst = &v
		case offSet:
			v := !pair.off
			*pair.dst = &v
		}
	}
	return nil
}

func runLLMSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o llmSimOptions
	fs := newFlagSet("llm-sim", "[flags]", `Runs the simulated inference engine alone as an OpenAI-compatible server, the way vLLM's
server looks to a client: POST /v1/chat/completions (streaming with stream_options.include_usage,
or not), GET /v1/models, GET /health, and GET /metrics with vLLM's metric names
(vllm:num_requests_running, vllm:num_requests_waiting, vllm:gpu_cache_usage_perc,
vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total, ...) and the simulated GPU memory
in use as dcgm-exporter's DCGM_FI_DEV_FB_USED (MiB: weights + activations + KV blocks held).

The engine is a real scheduler, not a sleep: continuous batching up to max-num-seqs, a waiting
queue, prefill cost proportional to the prompt tokens not found in the prefix cache, decode steps
that slow with batch size and context, a KV cache of blocks (paged or contiguous), and preemption
when blocks run out. Its flags are vLLM's engine arguments: the profile gives their defaults and
the GPU's memory, from which the number of KV blocks follows.`)
	bools := o.register(fs)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := bools.resolve(fs, &o.engine); err != nil {
		return err
	}
	if o.reasoningTokens < 0 {
		return fmt.Errorf("--reasoning-tokens must be 0 or more, got %d", o.reasoningTokens)
	}
	policy, err := llmsim.ParseSchedulingPolicy(o.schedulingPolicy)
	if err != nil {
		return fmt.Errorf("--scheduling-policy: %w", err)
	}
	logger := newLogger(stderr, o.logLevel)
	prof, err := llmsim.ProfileByName(o.profile)
	if err != nil {
		return err
	}
	if prof, err = o.engine.Apply(prof); err != nil {
		return fmt.Errorf("llm-sim profile %s: %w", o.profile, err)
	}
	opts := []llmsim.Option{llmsim.WithSeed(o.seed), llmsim.WithLogger(logger), llmsim.WithReasoningTokens(o.reasoningTokens),
		llmsim.WithSchedulingPolicy(policy)}
	if o.alloc != "" {
		mode, err := llmsim.ParseAllocMode(o.alloc)
		if err != nil {
			return err
		}
		opts = append(opts, llmsim.WithAlloc(mode))
	}
	engine, err := llmsim.New(prof, opts...)
	if err != nil {
		return err
	}
	defer func() { _ = engine.Close() }()
	ln, err := listen(ctx, o.addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", o.addr, err)
	}
	srv := service.NewServer(llmsim.NewHandler(engine), service.DefaultTimeouts, logger)
	logger.Info("llm-sim serving", "addr", ln.Addr().String(), "profile", prof.Name, "model", prof.Model,
		"max_num_seqs", prof.MaxNumSeqs, "max_model_len", prof.MaxModelLen, "max_num_batched_tokens", prof.MaxNumBatchedTokens,
		"block_size", prof.BlockSize, "num_gpu_blocks", prof.NumBlocks, "chunked_prefill", prof.ChunkedPrefill,
		"prefix_caching", prof.PrefixCaching, "reasoning_tokens", o.reasoningTokens, "scheduling_policy", policy)
	fmt.Fprintf(stdout, "llm-sim serving %q (profile %s) on http://%s/v1\n", prof.Model, prof.Name, ln.Addr())
	return service.Serve(ctx, []*http.Server{srv}, []net.Listener{ln}, o.grace, logger)
}
