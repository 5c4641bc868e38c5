package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/ragtail/ragtail/internal/loadgen/bench"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/telemetry"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o bench.Options
	fs := newFlagSet("bench", "[flags]", `Drives an OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp, OpenAI, ragtail serve or llm-sim)
with an open-loop load and reports TTFT, TPOT, ITL, E2EL, service_e2el and send lag, each
percentile with its 95% confidence interval, goodput, per-stage server timings, a tail analysis
(Hill index; exponential, lognormal and Pareto fits) and the slowest requests by trace id.

Latency is measured from each request's intended send time, so a server that stalls cannot hide
its queueing (no coordinated omission). With --request-rate the arrivals follow --shape and are
sent on time up to a cap on requests in flight (--concurrency, by default 1024 or fewer under
the open-file limit; the wait for a slot counts as latency). Without a rate, --concurrency N
runs a closed loop of N users (vLLM's default behaviour). The run stops after --num-prompts
requests or --duration; Ctrl-C stops it early and still writes everything measured.

--dashboard 127.0.0.1:5665 serves a live page of the run while it goes (throughput, latency
percentiles over the last 10 s, requests in flight, errors, the server's gauges), ending on the
report; it closes once a page has loaded the report or --dashboard-linger has passed.

Example (the article's command, against ragtail llm-sim):
  ragtail bench --url http://127.0.0.1:8000/v1/chat/completions \
    --model meta-llama/Meta-Llama-3-8B-Instruct --concurrency 32 --num-prompts 200 \
    --max-tokens 512 --temperature 0.7 --json r.json`)
	o.RegisterFlags(fs)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the generator itself to this file (go tool pprof reads it), to see\nwhere its own time goes")
	otlp := fs.String("otlp", "", "export one client span per request (service ragtail-bench, warmup included) to this OTLP receiver,\ne.g. http://127.0.0.1:4318 (gRPC on port 4317); default: $OTEL_EXPORTER_OTLP_ENDPOINT if set")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	spans, err := telemetry.StartClientTracing(ctx, *otlp, os.Getenv, stderr)
	if err != nil {
		return err
	}
	defer spans.Shutdown(stderr)
	o.ClientOptions = append(o.ClientOptions, client.WithTracerProvider(spans.Provider()))
	o.FlagsParsed(fs)
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop(stderr)
	}
	return bench.Run(ctx, o, stdout, stderr)
}

// startCPUProfile profiles the process's CPU into path until stop is called.
func startCPUProfile(path string) (stop func(stderr io.Writer), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func(stderr io.Writer) {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "ragtail: --cpuprofile %s: %v\n", path, err)
		}
	}, nil
}
