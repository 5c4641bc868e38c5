package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ragtail/ragtail/loadgen/lab"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/service"
)

type demoOptions struct {
	service  serviceOptions
	rate     float64
	duration time.Duration
	maxToks  int
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var o demoOptions
	fs := newFlagSet("demo", "[flags]", `Starts the RAG service in-process on free loopback ports, with the embedded default (hash
embedder, doc store with cache, simulated LLM engine) and its index shards on an in-process
Qdrant-protocol server behind a network link, each shard search answering with a heavy-tailed
latency. Drives it with ragtail's load generator in each coupling mode (sync, fanout, async) at
once, prints TTFT and end-to-end latency percentiles per mode with 95% confidence intervals, and
ends with the sync-async gap at P50 and P95 and whether the intervals overlap. Latency is
measured from each request's intended send time, so a slow server cannot hide its queueing.
--coupling drives that mode alone, at the whole rate. --shard-latency and --link qdrant=TOXICS
change the world. Needs nothing else running.`)
	o.service.register(fs)
	// The demo's world has its own shard latencies unless the flag is given: say so in --help.
	if f := fs.Lookup("shard-latency"); f != nil {
		f.DefValue = demoShardLatency + " per shard, the last " + demoReplicaLatency
	}
	fs.Float64Var(&o.rate, "request-rate", 4.5, "requests per second over all modes (Poisson arrivals, a third of them per mode)")
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long to send")
	fs.IntVar(&o.maxToks, "max-tokens", 24, "max_tokens of each request")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	run := lab.DemoConfig{Rate: o.rate, Duration: o.duration, MaxTokens: o.maxToks, Seed: o.service.cfg.Seed, Progress: stdout}
	if flagGiven(fs, "coupling") {
		// The service's default coupling would be overridden by every request's own: the demo
		// drives that mode alone instead.
		c, err := rag.ParseCoupling(o.service.cfg.Coupling)
		if err != nil {
			return fmt.Errorf("--coupling: %w", err)
		}
		run.Couplings = []string{string(c)}
	}
	if err := run.Validate(); err != nil {
		return err
	}
	logger := newLogger(stderr, o.service.logLevel)
	cfg := o.service.config(false)
	world, err := startDemoWorld(ctx, &cfg, &o.service)
	if err != nil {
		return err
	}
	defer world.Close()
	svc, err := buildService(ctx, cfg, telemetryOptions{}, logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, svc.Close()) }()

	ln, err := listen(ctx, "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := service.NewServer(svc.API, service.DefaultTimeouts, logger)
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, srv.Shutdown(sctx))
	}()
	base := "http://" + ln.Addr().String()
	if err := waitReady(ctx, base); err != nil {
		return err
	}
	run.URL, run.Model, run.Questions = base+"/v1/chat/completions", svc.Model, svc.Questions
	fmt.Fprintf(stdout, "ragtail demo: service on %s (%s, %d shards, model %s)\n", ln.Addr(), svc.Profile, svc.Shards, svc.Model)
	fmt.Fprintf(stdout, "world: %s\n", world)
	if len(run.Couplings) == 1 {
		fmt.Fprintf(stdout, "load: Poisson %.1f req/s, all in coupling mode %s (--coupling), max_tokens %d, streaming\n", o.rate, run.Couplings[0], o.maxToks)
	} else {
		fmt.Fprintf(stdout, "load: Poisson %.1f req/s, a third per mode (sync, fanout, async) at the same time, max_tokens %d, streaming\n", o.rate, o.maxToks)
	}
	fmt.Fprintf(stdout, "running %s ...\n", o.duration)
	res, err := lab.RunDemo(ctx, run)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := lab.WriteDemo(stdout, res); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return nil
}
