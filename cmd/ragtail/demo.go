package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/service"
)

type demoOptions struct {
	service  serviceOptions
	rate     float64
	duration time.Duration
	maxToks  int
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demoOptions
	fs := newFlagSet("demo", "[flags]", `Starts the RAG service in-process on free loopback ports, with the embedded default (hash
embedder, sharded in-memory index, doc store with cache, simulated LLM engine), then drives it
with ragtail's load generator in each coupling mode (sync, fanout, async) at once and prints
TTFT and end-to-end latency percentiles per mode, each with its 95% confidence interval.
Latency is measured from each request's intended send time, so a slow server cannot hide its
queueing. Needs nothing else running.`)
	o.service.register(fs)
	fs.Float64Var(&o.rate, "request-rate", 5, "requests per second over all modes (Poisson arrivals, a third of them per mode)")
	fs.DurationVar(&o.duration, "duration", 40*time.Second, "how long to send")
	fs.IntVar(&o.maxToks, "max-tokens", 48, "max_tokens of each request")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if o.rate <= 0 || math.IsInf(o.rate, 0) || math.IsNaN(o.rate) || o.rate > 10000 {
		return fmt.Errorf("--request-rate must be between 0 and 10000, got %v", o.rate)
	}
	if o.duration <= 0 {
		return errors.New("--duration must be positive")
	}
	if o.maxToks < 1 {
		return errors.New("--max-tokens must be positive")
	}
	logger := newLogger(stderr, o.service.logLevel)
	svc, err := buildService(ctx, o.service.config(false), telemetryOptions{}, logger)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Close() }()

	ln, err := listen(ctx, "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := service.NewServer(svc.API, service.DefaultTimeouts, logger)
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	fmt.Fprintf(stdout, "ragtail demo: service on %s (%s, %d shards, %d chunks, model %s)\n",
		ln.Addr(), svc.Profile, svc.Shards, svc.Chunks, svc.Model)
	fmt.Fprintf(stdout, "load: Poisson %.1f req/s, a third per mode (sync, fanout, async) at the same time, max_tokens %d, streaming\n", o.rate, o.maxToks)
	fmt.Fprintf(stdout, "running %s ...\n", o.duration)

	results, err := driveDemo(ctx, url, svc.Model, svc.Questions, o, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	printDemo(stdout, results)
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return nil
}

// demoResult is one coupling mode's run.
type demoResult struct {
	mode  rag.Coupling
	bench *report.Bench
}

// driveDemo runs one open-loop Poisson stream per coupling mode, all at once: three Poisson
// streams of a third of the rate add up to one of the full rate, and every mode meets the same
// engine load at the same time. Each request asks for its mode in the "rag" body object.
func driveDemo(ctx context.Context, url, model string, questions []string, o demoOptions, progress io.Writer) ([]demoResult, error) {
	prompts := make([]shape.Prompt, len(questions))
	for i, q := range questions {
		prompts[i] = shape.Prompt{Messages: []loadgen.Message{{Role: "user", Content: q}}}
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		latest  = make([]loadgen.Progress, len(rag.Couplings))
		results = make([]demoResult, len(rag.Couplings))
		errs    = make([]error, len(rag.Couplings))
	)
	for i, mode := range rag.Couplings {
		seed := o.service.cfg.Seed + uint64(i)*0x9e37
		c, err := client.New(url, client.WithModel(model), client.WithMaxTokens(o.maxToks),
			client.WithBody(map[string]any{"rag": map[string]any{"coupling": string(mode)}}))
		if err != nil {
			return nil, err
		}
		defer c.CloseIdleConnections()
		arrivals, err := shape.Poisson(o.rate/float64(len(rag.Couplings)), seed)
		if err != nil {
			return nil, err
		}
		src, err := shape.Prompts(prompts, seed)
		if err != nil {
			return nil, err
		}
		cfg := loadgen.Config{
			Workload: shape.Open(arrivals, src), Client: c, Duration: o.duration,
			ProgressInterval: 5 * time.Second,
			Progress: func(p loadgen.Progress) {
				mu.Lock()
				defer mu.Unlock()
				latest[i] = p
				if i != 0 || p.Final {
					return
				}
				var sent, done int
				for _, q := range latest {
					sent, done = sent+q.Sent, done+q.Done
				}
				fmt.Fprintf(progress, "  %3.0fs: %d sent, %d done\n", p.Elapsed.Seconds(), sent, done)
			},
			Info: loadgen.RunInfo{URL: url, Model: model, Shape: arrivals.String() + ", coupling " + string(mode),
				RequestRate: o.rate / float64(len(rag.Couplings)), MaxTokens: o.maxToks, Seed: seed},
		}
		wg.Go(func() {
			res, err := loadgen.Run(ctx, cfg)
			if err != nil {
				errs[i] = err
				return
			}
			results[i] = demoResult{mode: mode, bench: report.Summarize(res, report.Options{
				Metrics: []string{report.MetricTTFT, report.MetricE2EL}, Percentiles: demoPercentiles})}
		})
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// demoPercentiles are the percentiles the demo prints.
var demoPercentiles = []float64{50, 90, 95, 99}

func printDemo(w io.Writer, results []demoResult) {
	for _, m := range []struct{ metric, title string }{
		{report.MetricTTFT, "TTFT"},
		{report.MetricE2EL, "E2E latency"},
	} {
		fmt.Fprintf(w, "%s, ms from each request's intended send time [95%% interval]\n", m.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		head := "mode\tn"
		for _, p := range demoPercentiles {
			head += fmt.Sprintf("\tp%g", p)
		}
		fmt.Fprintln(tw, head+"\t")
		for _, r := range results {
			if r.bench == nil {
				continue
			}
			s, _ := r.bench.Metric(m.metric)
			row := fmt.Sprintf("%s\t%d", r.mode, s.Count)
			for _, p := range demoPercentiles {
				row += "\t" + demoCell(s, p)
			}
			fmt.Fprintln(tw, row+"\t")
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "A percentile is shown only when there are enough samples for its 95% interval (about 300\n"+
		"for p99); run longer (--duration) or faster (--request-rate) for the tail.")
	for _, r := range results {
		if r.bench == nil || r.bench.Failed == 0 {
			continue
		}
		var parts []string
		for _, e := range r.bench.Errors {
			parts = append(parts, fmt.Sprintf("%s x%d (%q)", e.Kind, e.Count, e.Example))
		}
		fmt.Fprintf(w, "%s: %d failed: %s\n", r.mode, r.bench.Failed, strings.Join(parts, ", "))
	}
}

// demoCell formats the p-th percentile of s with its interval, or "-" when the samples do not
// support an interval (too few lie beyond the percentile to say anything about the tail).
func demoCell(s report.MetricStats, p float64) string {
	i := slices.IndexFunc(s.Percentiles, func(ps report.PercentileStat) bool { return ps.P == p })
	if i < 0 || !s.Percentiles[i].HasCI {
		return "-"
	}
	ps := s.Percentiles[i]
	return fmt.Sprintf("%.1f [%.1f, %.1f]", msf(ps.Value), msf(ps.Lo), msf(ps.Hi))
}
