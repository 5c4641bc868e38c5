package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ragtail/ragtail/rag"
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
embedder, sharded in-memory index, doc store with cache, simulated LLM engine), then drives an
open-loop Poisson load against it in each coupling mode (sync, fanout, async) and prints TTFT and
end-to-end latency percentiles per mode. Latency is measured from each request's intended send
time, so a slow server cannot hide its queueing. Needs nothing else running.`)
	o.service.register(fs)
	fs.Float64Var(&o.rate, "request-rate", 5, "requests per second over all modes (Poisson arrivals; modes take turns)")
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
	logger := newLogger(stderr, o.service.logLevel)
	svc, err := buildService(ctx, o.service, logger)
	if err != nil {
		return err
	}
	defer svc.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: svc.API, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	fmt.Fprintf(stdout, "ragtail demo: service on %s (%s, %d shards, %d chunks, model %s)\n",
		ln.Addr(), svc.Profile, svc.Shards, svc.Chunks, svc.Model)
	fmt.Fprintf(stdout, "load: Poisson %.1f req/s, modes in turn (sync, fanout, async), max_tokens %d, streaming\n", o.rate, o.maxToks)

	fmt.Fprintf(stdout, "running %s ...\n", o.duration)
	results := driveDemo(ctx, url, svc.Model, svc.Questions, o, stdout)
	fmt.Fprintln(stdout)
	printDemo(stdout, results)
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return nil
}

// demoResult holds the latencies of one mode, measured from the intended send times.
type demoResult struct {
	ttft, e2e []time.Duration
	failed    int
	errs      map[string]int
}

// driveDemo sends Poisson arrivals for o.duration, giving the modes to arrivals in turn so that
// all three see the same engine load at the same time, and waits for every request to finish.
func driveDemo(ctx context.Context, url, model string, questions []string, o demoOptions, progress io.Writer) map[rag.Coupling]*demoResult {
	rng := rand.New(rand.NewPCG(o.service.seed, 0x5eed))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	results := make(map[rag.Coupling]*demoResult, len(rag.Couplings))
	for _, c := range rag.Couplings {
		results[c] = &demoResult{errs: map[string]int{}}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	next := time.Duration(0)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	sent := 0
	for i := 0; ; i++ {
		next += time.Duration(rng.ExpFloat64() / o.rate * float64(time.Second))
		if next >= o.duration {
			break
		}
		intended := start.Add(next)
		if err := rag.Sleep(ctx, time.Until(intended)); err != nil {
			break
		}
		select {
		case <-tick.C:
			mu.Lock()
			done := 0
			for _, r := range results {
				done += len(r.e2e) + r.failed
			}
			mu.Unlock()
			fmt.Fprintf(progress, "  %3.0fs: %d sent, %d done\n", time.Since(start).Seconds(), sent, done)
		default:
		}
		c := rag.Couplings[i%len(rag.Couplings)]
		q := questions[rng.IntN(len(questions))]
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttft, e2e, err := demoRequest(ctx, client, url, model, c, q, o.maxToks, intended)
			mu.Lock()
			defer mu.Unlock()
			r := results[c]
			if err != nil {
				r.failed++
				r.errs[err.Error()]++
				return
			}
			r.ttft = append(r.ttft, ttft)
			r.e2e = append(r.e2e, e2e)
		}()
	}
	wg.Wait()
	return results
}

// demoRequest sends one streamed request and returns its TTFT and E2E latency from intended.
func demoRequest(ctx context.Context, client *http.Client, url, model string, c rag.Coupling, question string, maxTokens int, intended time.Time) (ttft, e2e time.Duration, err error) {
	body, _ := json.Marshal(map[string]any{
		"model": model, "stream": true, "max_tokens": maxTokens,
		"stream_options": map[string]bool{"include_usage": true},
		"messages":       []map[string]string{{"role": "user", "content": question}},
		"rag":            map[string]any{"coupling": c},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			return 0, 0, fmt.Errorf("bad chunk: %w", err)
		}
		if chunk.Error != nil {
			return 0, 0, fmt.Errorf("stream error: %s", chunk.Error.Message)
		}
		if ttft == 0 && len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			ttft = time.Since(intended)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !done {
		return 0, 0, errors.New("stream ended without [DONE]")
	}
	return ttft, time.Since(intended), nil
}

func printDemo(w io.Writer, results map[rag.Coupling]*demoResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tn\tTTFT p50\tp90\tp95\tp99\tE2E p50\tp90\tp95\tp99\t")
	for _, c := range rag.Couplings {
		r, ok := results[c]
		if !ok || len(r.e2e) == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c, len(r.e2e),
			pct(r.ttft, 0.5), pct(r.ttft, 0.9), pct(r.ttft, 0.95), pct(r.ttft, 0.99),
			pct(r.e2e, 0.5), pct(r.e2e, 0.9), pct(r.e2e, 0.95), pct(r.e2e, 0.99))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nms from each request's intended send time. A percentile is shown only when at least %d\n"+
		"samples lie beyond it (fewer say little about the tail); run longer (--duration) for p99.\n", minTail)
	for _, c := range rag.Couplings {
		if r, ok := results[c]; ok && r.failed > 0 {
			fmt.Fprintf(w, "%s: %d failed:", c, r.failed)
			for msg, n := range r.errs {
				fmt.Fprintf(w, " %q x%d", msg, n)
			}
			fmt.Fprintln(w)
		}
	}
}

// quantile returns the nearest-rank q-quantile of xs (which it sorts).
func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// minTail is how many samples must lie above a percentile for the demo to print it: the
// q-quantile of n samples rests on about n(1-q) of them.
const minTail = 3

// pct formats the q-quantile of xs in ms, or "-" when too few samples lie beyond it.
func pct(xs []time.Duration, q float64) string {
	if float64(len(xs))*(1-q) < minTail {
		return "-"
	}
	return ms(quantile(xs, q))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
