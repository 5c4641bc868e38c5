package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/service"
)

func runLLMSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		addr, profile, alloc, logLevel string
		seed                           uint64
		grace                          time.Duration
	)
	fs := newFlagSet("llm-sim", "[flags]", `Runs the simulated inference engine alone as an OpenAI-compatible server, the way vLLM's
server looks to a client: POST /v1/chat/completions (streaming with stream_options.include_usage,
or not), GET /v1/models, GET /health, and GET /metrics with vLLM's metric names
(vllm:num_requests_running, vllm:num_requests_waiting, vllm:gpu_cache_usage_perc, ...).

The engine is a real scheduler, not a sleep: continuous batching up to max-num-seqs, a waiting
queue, prefill cost proportional to prompt tokens, decode steps that slow with batch size and
context, a KV cache of 16-token blocks (paged or contiguous), and preemption when blocks run out.`)
	fs.StringVar(&addr, "addr", ":8000", "listen address")
	fs.StringVar(&profile, "profile", llmsim.DefaultProfile, "engine profile: "+profileNames())
	fs.StringVar(&alloc, "kv-alloc", "", "KV-cache allocation: paged or contiguous (default: the profile's)")
	fs.Uint64Var(&seed, "seed", 1, "seed of the generated text")
	fs.DurationVar(&grace, "shutdown-grace", 30*time.Second, "how long running requests may take to finish on shutdown")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	logger := newLogger(stderr, logLevel)
	prof, err := llmsim.ProfileByName(profile)
	if err != nil {
		return err
	}
	opts := []llmsim.Option{llmsim.WithSeed(seed), llmsim.WithLogger(logger)}
	if alloc != "" {
		mode, err := llmsim.ParseAllocMode(alloc)
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
	ln, err := listen(ctx, addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", addr, err)
	}
	srv := service.NewServer(llmsim.NewHandler(engine), service.DefaultTimeouts, logger)
	logger.Info("llm-sim serving", "addr", ln.Addr().String(), "profile", prof.Name, "model", prof.Model)
	fmt.Fprintf(stdout, "llm-sim serving %q (profile %s) on http://%s/v1\n", prof.Model, prof.Name, ln.Addr())
	return service.Serve(ctx, []*http.Server{srv}, []net.Listener{ln}, grace, logger)
}
