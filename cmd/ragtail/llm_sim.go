package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/service"
)

func runLLMSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o llmsim.ServerConfig
	fs := newFlagSet("llm-sim", "[flags]", `Runs the simulated inference engine alone as an OpenAI-compatible server, the way vLLM's
server looks to a client: POST /v1/chat/completions (streaming with stream_options.include_usage,
or not), POST /v1/messages (Anthropic's Messages API) and POST /v1/responses (OpenAI's Responses
API), both streaming with their own events or not, GET /v1/models, GET /health, and GET /metrics
with vLLM's metric names (vllm:num_requests_running, vllm:num_requests_waiting,
vllm:gpu_cache_usage_perc, vllm:request_success_total, vllm:prefix_cache_queries_total,
vllm:prefix_cache_hits_total, ...) and the simulated GPU memory in use as dcgm-exporter's
DCGM_FI_DEV_FB_USED (MiB: weights + activations + KV blocks held). The three APIs share one
engine: one batch, one KV cache, one prefix cache, one set of metrics.

A chat request with tools gets tool calls, streamed as vLLM streams them, while its question (the
last user message) needs more searches than the conversation holds tool messages after it; how
many it needs is drawn from --tool-calls, --seed and the question, so a question always needs
the same number. tool_choice "required" (or a named function) forces a call, "none" a text
answer; parallel_tool_calls true lets two calls out at once. The tool definitions and the tool
calls and results of the conversation are prompt tokens, so each step of a tool loop finds the
previous one's prompt in the prefix cache (--enable-prefix-caching). docs/llmsim.md has the
details.

The engine is a real scheduler, not a sleep: continuous batching up to max-num-seqs, a waiting
queue, prefill cost proportional to the prompt tokens not found in the prefix cache, decode steps
that slow with batch size and context, a KV cache of blocks (paged or contiguous), and preemption
when blocks run out. Its flags are vLLM's engine arguments: the profile gives their defaults and
the GPU's memory, from which the number of KV blocks follows.`)
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := o.FlagsParsed(fs); err != nil {
		return err
	}
	logger := newLogger(stderr, o.LogLevel)
	engine, err := o.NewEngine(logger)
	if err != nil {
		return err
	}
	defer func() { _ = engine.Close() }()
	ln, err := listen(ctx, o.Addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", o.Addr, err)
	}
	srv := service.NewServer(llmsim.NewHandler(engine), service.DefaultTimeouts, logger)
	prof := engine.Profile()
	logger.Info("llm-sim serving", "addr", ln.Addr().String(), "profile", prof.Name, "model", prof.Model,
		"max_num_seqs", prof.MaxNumSeqs, "max_model_len", prof.MaxModelLen, "max_num_batched_tokens", prof.MaxNumBatchedTokens,
		"block_size", prof.BlockSize, "num_gpu_blocks", prof.NumBlocks, "chunked_prefill", prof.ChunkedPrefill,
		"prefix_caching", prof.PrefixCaching, "reasoning_tokens", o.ReasoningTokens, "scheduling_policy", engine.SchedulingPolicy(),
		"tool_calls", engine.ToolCalls().String(), "description", prof.Description)
	fmt.Fprintf(stdout, "llm-sim serving %q (profile %s) on http://%s/v1\n", prof.Model, prof.Name, ln.Addr())
	return service.Serve(ctx, []*http.Server{srv}, []net.Listener{ln}, o.ShutdownGrace, logger)
}
