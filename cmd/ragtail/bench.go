package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/bench"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// registerLoad registers the flags bench and sweep share, filling o.
func registerLoad(fs *flag.FlagSet, o *bench.Load) {
	fs.StringVar(&o.URL, "url", "http://127.0.0.1:8000/v1/chat/completions", "OpenAI-compatible endpoint: a /v1/chat/completions (or legacy /v1/completions) URL, or a base URL\n(http://host:8000/v1 or http://host:8000) that gets the chat-completions route appended")
	fs.StringVar(&o.Model, "model", "", "model name sent with each request (default: the first model of GET /v1/models)")
	fs.StringVar(&o.APIKey, "api-key", "", "bearer token (default: $OPENAI_API_KEY)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 256, "max_tokens of each request (a dataset's own output lengths are used unless this is given)")
	fs.Float64Var(&o.Temperature, "temperature", 0, "sampling temperature (default: not sent, the server's default)")
	fs.BoolVar(&o.Stream, "stream", true, "stream responses (SSE); without streaming only E2EL is measured")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "limit on each request, connecting included (0: none)")
	fs.StringVar(&o.ExtraBody, "extra-body", "", `JSON object of extra body fields, e.g. '{"rag":{"coupling":"async"}}' or '{"ignore_eos":true}'`)
	fs.Var(&o.Headers, "header", "extra request header \"Name: value\" (repeatable)")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of arrivals and prompts: the same seed sends the same load")

	fs.StringVar(&o.Shape, "shape", "poisson", "arrival process: poisson, gamma (with --burstiness), constant, ramp:FROM,TO,DURATION,\nstep:RATE@DURATION,..., or article (Zipf popularity, rank-grown context, Poisson bursts)")
	fs.Float64Var(&o.Burstiness, "burstiness", 1, "gamma shape of the gaps (vLLM's): 1 is Poisson, < 1 burstier, > 1 more regular; ramp and step use it too (0: even spacing)")
	fs.StringVar(&o.Dataset, "dataset", "mixed", "prompts: short, medium, long, mixed, N or MIN-MAX tokens (synthetic); a ShareGPT JSON or\nOpenAI-messages JSONL file; keys[:FILE] for GET /v1/documents/{id} lookups (see --key-*); or a trace\nreplayed on its timestamps: mooncake:FILE (JSONL), azure:FILE or burstgpt:FILE (CSV), see --trace-*")
	registerTrace(fs, &o.Trace)
	fs.StringVar(&o.Sessions, "sessions", "", "replay user sessions: a JSONL file (session, step, think_ms, start_ms, request) or 'synthetic'\n(search -> product -> cart paths); sessions start at the arrival process unless the file gives start_ms")
	fs.DurationVar(&o.Think, "think", time.Second, "median think time between steps of synthetic sessions")

	def := shape.DefaultArticle()
	o.Article = def
	fs.IntVar(&o.Article.Ranks, "zipf-ranks", def.Ranks, "article shape: popularity ranks N")
	fs.Float64Var(&o.Article.Alpha, "zipf-alpha", def.Alpha, "article shape and key lookups: Zipf exponent of popularity")
	fs.IntVar(&o.Article.BaseTokens, "context-base", def.BaseTokens, "article shape: context tokens at rank 0")
	fs.IntVar(&o.Article.RankTokens, "context-per-rank", def.RankTokens, "article shape: extra context tokens at rank N (512 + 1024 x rank/N)")
	fs.Float64Var(&o.Article.BurstLambda, "burst-lambda", def.BurstLambda, "article shape: mean Poisson burst size (the article uses 2.5 to 3)")
	fs.DurationVar(&o.Article.Gap, "burst-gap", def.Gap, "article shape: gap before a burst of b shrinks it to gap/(b+1) (--request-rate rescales it)")
	fs.IntVar(&o.Article.MaxPromptTokens, "max-prompt-tokens", def.MaxPromptTokens, "article shape: cap on a request's context tokens (-1: none)")

	fs.StringVar(&o.Keys.Pattern, "key-pattern", shape.DefaultKeyPattern, "key lookups: fmt pattern of the keys (ragtail's built-in corpus: chunk 0 of each document)")
	fs.IntVar(&o.Keys.Count, "key-count", shape.DefaultKeyCount, "key lookups: keys made from --key-pattern (ragtail serve's --corpus-docs)")
	fs.IntVar(&o.Keys.Hot, "hot-keys", 0, "key lookups: size of the hot set drawn by Zipf popularity (0: every key)")
	fs.Float64Var(&o.Keys.Cold, "cold-keys", 0, "key lookups: fraction of lookups for keys outside the hot set (never cached)")
	fs.Float64Var(&o.Keys.Invalid, "invalid-keys", 0, "key lookups: fraction of lookups for keys that do not exist (cache penetration)")

	fs.DurationVar(&o.DrainTimeout, "drain-timeout", loadgen.DefaultDrainTimeout, "once sending stops (at the end, or at a first Ctrl-C), how long to wait for requests in flight\nbefore cancelling them (0: no limit); a second Ctrl-C cancels them at once")
	fs.IntVar(&o.Warmup, "warmup", 0, "send this many requests (or sessions) first, recorded in --save-detailed but in no statistic\n(vLLM's --num-warmups); --num-prompts counts after them")
	fs.DurationVar(&o.WarmupDuration, "warmup-duration", 0, "send the arrivals of this first stretch as warmup (in no statistic); --duration counts after it")
	fs.Float64Var(&o.MaxErrorRate, "max-error-rate", 0.5, "exit non-zero when more than this fraction of the measured requests failed (1: never)")
	fs.StringVar(&o.Goodput, "goodput", "", "request SLOs for goodput in ms, e.g. ttft:300,e2el:2000 (metrics ttft, tpot, itl, e2el)")
	fs.StringVar(&o.PercentileMetrics, "percentile-metrics", "all", "metrics in the report: ttft,tpot,itl,e2el,service_e2el,send_lag or all")
	fs.StringVar(&o.Percentiles, "metric-percentiles", "50,90,95,99,99.9", "percentiles reported, each with its 95% interval")
	fs.DurationVar(&o.SessionPatience, "session-patience", 0, "sessions: a step slower than this interrupts its session (default: the goodput e2el SLO)")
	fs.BoolVar(&o.Quiet, "quiet", false, "no progress line")
}

// rateValue is a request rate flag that accepts "inf".
type rateValue struct{ v *float64 }

func (r rateValue) String() string {
	if r.v == nil {
		return ""
	}
	if math.IsInf(*r.v, 1) {
		return "inf"
	}
	return strconv.FormatFloat(*r.v, 'g', -1, 64)
}

func (r rateValue) Set(s string) error {
	if strings.EqualFold(s, "inf") {
		*r.v = math.Inf(1)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return fmt.Errorf("want a positive number of requests per second or inf")
	}
	*r.v = f
	return nil
}

// flagsSet returns the names of the flags given on the command line.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.Options{RequestRate: math.Inf(1)}
	fs := newFlagSet("bench", "[flags]", `Drives an OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp, OpenAI, ragtail serve or llm-sim)
with an open-loop load and reports TTFT, TPOT, ITL, E2EL, service_e2el and send lag, each
percentile with its 95% confidence interval, goodput, per-stage server timings, a tail analysis
(Hill index; exponential, lognormal and Pareto fits) and the slowest requests by trace id.

Latency is measured from each request's intended send time, so a server that stalls cannot hide
its queueing (no coordinated omission). With --request-rate the arrivals follow --shape and are
sent on time however many are in flight (--concurrency caps them; the wait for a slot counts as
latency). Without a rate, --concurrency N runs a closed loop of N users (vLLM's default
behaviour). The run stops after --num-prompts requests or --duration; Ctrl-C stops it early and
still writes everything measured.

Example (the article's command, against ragtail llm-sim):
  ragtail bench --url http://127.0.0.1:8000/v1/chat/completions \
    --model meta-llama/Meta-Llama-3-8B-Instruct --concurrency 32 --num-prompts 200 \
    --max-tokens 512 --temperature 0.7 --json r.json`)
	registerLoad(fs, &o.Load)
	fs.IntVar(&o.Concurrency, "concurrency", 0, "requests in flight at most (with a rate), or closed-loop users (without one); 0: no cap")
	fs.IntVar(&o.Concurrency, "max-concurrency", 0, "alias of --concurrency (vLLM's name)")
	fs.IntVar(&o.NumPrompts, "num-prompts", 1000, "requests (or sessions) to send; with --duration, 0 means no limit")
	fs.Var(rateValue{&o.RequestRate}, "request-rate", "requests per second, or inf (default inf: a closed loop with --concurrency, else all at once)")
	fs.DurationVar(&o.Duration, "duration", 0, "stop sending after this long (0: no limit)")
	fs.StringVar(&o.JSONOut, "json", "", "write the ragtail.bench/v1 JSON to this file ('-' for stdout)")
	fs.StringVar(&o.HTMLOut, "html", "", "write a self-contained HTML report to this file")
	fs.StringVar(&o.SaveDetailed, "save-detailed", "", "write every request's record as JSONL to this file, as the run goes")
	fs.StringVar(&o.Segment, "segment", "", "multi-host runs: send share i/n (i from 0 to n-1, e.g. $JOB_COMPLETION_INDEX/4) of the seeded\nschedule that every host builds alike; ragtail report merges the n result files into the whole run")
	fs.StringVar(&o.StartAt, "start-at", "", "start the run at this wall-clock time (RFC 3339 or Unix seconds), so that several hosts start together")
	otlp := fs.String("otlp", "", "export one client span per request (service ragtail-bench, warmup included) to this OTLP receiver,\ne.g. http://127.0.0.1:4318 (gRPC on port 4317); default: $OTEL_EXPORTER_OTLP_ENDPOINT if set")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	spans, err := startBenchTracing(ctx, *otlp, os.Getenv, stderr)
	if err != nil {
		return err
	}
	defer spans.Shutdown(stderr)
	o.ClientOptions = append(o.ClientOptions, client.WithTracerProvider(spans.Provider()))
	set := flagsSet(fs)
	o.SendTemperature, o.OverrideMaxTokens = set["temperature"], set["max-tokens"]
	if set["duration"] && !set["num-prompts"] {
		o.NumPrompts = 0
	}
	return bench.Run(ctx, o, stdout, stderr)
}
