package bench

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ragtail/ragtail/internal/loadgen/scrape"
	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// RegisterFlags registers on fs the flags that bench and sweep share, filling o. After fs has
// parsed a command line, call FlagsParsed (of Options or SweepOptions) for the fields that
// depend on which flags were given.
func (o *Load) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.URL, "url", "http://127.0.0.1:8000/v1/chat/completions", "OpenAI-compatible endpoint: a /v1/chat/completions (or legacy /v1/completions) URL, or a base URL\n(http://host:8000/v1 or http://host:8000) that gets the chat-completions route appended; a /v1/embeddings\nURL embeds the dataset's prompts instead (see --embed-batch); a /v1/messages URL speaks Anthropic's Messages API\nand a /v1/responses URL OpenAI's Responses API, each timed from its own stream events")
	fs.StringVar(&o.Model, "model", "", "model name sent with each request (default: the first model of GET /v1/models)")
	fs.StringVar(&o.APIKey, "api-key", "", "bearer token, or x-api-key for a /v1/messages --url (default: $OPENAI_API_KEY, or $ANTHROPIC_API_KEY for /v1/messages)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 256, "max_tokens of each request (a dataset's own output lengths are used unless this is given)")
	fs.Float64Var(&o.Temperature, "temperature", 0, "sampling temperature (default: not sent, the server's default)")
	fs.BoolVar(&o.Stream, "stream", true, "stream responses (SSE); without streaming only E2EL is measured")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "limit on each request, connecting included (0: none)")
	fs.Var(jsonObjectValue{&o.ExtraBody}, "extra-body", "`JSON` object of extra body fields, e.g. '{\"rag\":{\"coupling\":\"async\"}}' or '{\"ignore_eos\":true}'")
	fs.Var(&o.Headers, "header", "extra request header \"Name: value\" (repeatable)")
	o.HTTPClient = client.HTTPClientH1
	fs.Var(choiceValue{&o.HTTPClient, client.HTTPClients}, "http-client", "HTTP `client` of http:// targets: h1 (a lean HTTP/1.1 transport, no goroutines per connection) or\nnet/http (Go's standard transport); https:// and proxied targets always use net/http")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of arrivals and prompts: the same seed sends the same load")

	o.Shape = mustParse(ParseShape, "poisson")
	fs.Var(shapeValue{&o.Shape}, "shape", "arrival `process`: poisson, gamma (with --burstiness), constant, ramp:FROM,TO,DURATION,\nstep:RATE@DURATION,..., or article (Zipf popularity, rank-grown context, Poisson bursts)")
	fs.Float64Var(&o.Burstiness, "burstiness", 1, "gamma shape of the gaps (vLLM's): 1 is Poisson, < 1 burstier, > 1 more regular; ramp and step use it too (0: even spacing)")
	o.Dataset = mustParse(ParseDataset, "mixed")
	fs.Var(datasetValue{&o.Dataset}, "dataset", "`prompts`: short, medium, long, mixed, N or MIN-MAX tokens (synthetic); a ShareGPT JSON or\nOpenAI-messages JSONL file; keys[:FILE] for GET /v1/documents/{id} lookups (see --key-*); or a trace\nreplayed on its timestamps: mooncake:FILE (JSONL), azure:FILE or burstgpt:FILE (CSV), see --trace-*")
	o.Trace.RegisterFlags(fs)
	fs.StringVar(&o.Sessions, "sessions", "", "replay user sessions: a JSONL file (session, step, think_ms, start_ms, request) or 'synthetic'\n(search -> product -> cart paths); sessions start at the arrival process unless the file gives start_ms")
	fs.DurationVar(&o.Think, "think", time.Second, "median think time between steps of synthetic sessions; with --multi-turn, the pause after each answer\nbefore a conversation's next turn")
	fs.BoolVar(&o.MultiTurn, "multi-turn", false, "replay the --dataset file's conversations turn by turn as sessions (ShareGPT: every human turn, not\nonly the first), and with --sessions FILE make each chat step continue the conversation: every turn\nis sent with the server's actual answers to the turns before it, never the dataset's recorded replies")
	o.registerArticle(fs)
	o.registerKeys(fs)
	o.Agent.registerFlags(fs)

	fs.IntVar(&o.EmbedBatch, "embed-batch", 1, "with an /embeddings --url (http://host:8080/v1/embeddings): the dataset's prompts embedded in each request")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", loadgen.DefaultDrainTimeout, "once sending stops (at the end, or at a first Ctrl-C), how long to wait for requests in flight\nbefore cancelling them (0: no limit); a second Ctrl-C cancels them at once")
	fs.IntVar(&o.Warmup, "warmup", 0, "send this many requests (or sessions) first, recorded in --save-detailed but in no statistic\n(vLLM's --num-warmups); --num-prompts counts after them")
	fs.DurationVar(&o.WarmupDuration, "warmup-duration", 0, "send the arrivals of this first stretch as warmup (in no statistic); --duration counts after it")
	fs.Float64Var(&o.MaxErrorRate, "max-error-rate", 0.5, "exit non-zero when more than this fraction of the measured requests failed (1: never)")
	fs.Float64Var(&o.Pricing.USDPerGPUHour, "gpu-cost-per-hour", 0, "what one of the target's GPUs costs an hour, in USD: the result then gives the run's cost,\nper request and per million input and output tokens (with --gpus)")
	fs.IntVar(&o.Pricing.GPUs, "gpus", 1, "how many GPUs serve the target, for --gpu-cost-per-hour")
	fs.Var(goodputValue{&o.Goodput}, "goodput", "request `SLOs` for goodput in ms, e.g. ttft:300,e2el:2000 (metrics ttft, ttfo, tpot, itl, e2el; agent:MS\nbounds an agent's latency, first request to final answer, with --tools or --tool-latency)")
	o.PercentileMetrics = slices.Clone(report.AllMetrics)
	fs.Var(metricsValue{&o.PercentileMetrics}, "percentile-metrics", "`metrics` in the report: ttft,ttfo,tpot,itl,e2el,service_e2el,send_lag or all\n(ttfo, the first answer token after any reasoning, shows when the server reasoned)")
	o.Percentiles = slices.Clone(report.DefaultPercentiles)
	fs.Var(percentilesValue{&o.Percentiles}, "metric-percentiles", "`percentiles` reported, each with its 95% interval")
	fs.DurationVar(&o.SessionPatience, "session-patience", 0, "sessions: a step slower than this interrupts its session (default: the goodput e2el SLO)")
	fs.BoolVar(&o.Quiet, "quiet", false, "no progress line")
}

// registerArticle registers the flags of the article shape, defaulting to shape.DefaultArticle.
func (o *Load) registerArticle(fs *flag.FlagSet) {
	def := shape.DefaultArticle()
	o.Article = def
	a := &o.Article
	fs.IntVar(&a.Ranks, "zipf-ranks", def.Ranks, "article shape: popularity ranks N")
	fs.Float64Var(&a.Alpha, "zipf-alpha", def.Alpha, "article shape and key lookups: Zipf exponent of popularity")
	fs.IntVar(&a.BaseTokens, "context-base", def.BaseTokens, "article shape: context tokens at rank 0")
	fs.IntVar(&a.RankTokens, "context-per-rank", def.RankTokens, "article shape: extra context tokens at rank N (512 + 1024 x rank/N)")
	fs.Float64Var(&a.BurstLambda, "burst-lambda", def.BurstLambda, "article shape: mean Poisson burst size (the article uses 2.5 to 3)")
	fs.DurationVar(&a.Gap, "burst-gap", def.Gap, "article shape: gap before a burst of b shrinks it to gap/(b+1) (--request-rate rescales it)")
	fs.IntVar(&a.MaxPromptTokens, "max-prompt-tokens", def.MaxPromptTokens, "article shape: cap on a request's context tokens (-1: none)")
}

// registerKeys registers the flags of key lookups (--dataset keys[:FILE]).
func (o *Load) registerKeys(fs *flag.FlagSet) {
	k := &o.Keys
	fs.StringVar(&k.Pattern, "key-pattern", shape.DefaultKeyPattern, "key lookups: fmt pattern of the keys (ragtail's built-in corpus: chunk 0 of each document)")
	fs.IntVar(&k.Count, "key-count", shape.DefaultKeyCount, "key lookups: keys made from --key-pattern (ragtail serve's --corpus-docs)")
	fs.IntVar(&k.Hot, "hot-keys", 0, "key lookups: size of the hot set drawn by Zipf popularity (0: every key)")
	fs.Float64Var(&k.Cold, "cold-keys", 0, "key lookups: fraction of lookups for keys outside the hot set (never cached)")
	fs.Float64Var(&k.Invalid, "invalid-keys", 0, "key lookups: fraction of lookups for keys that do not exist (cache penetration)")
}

// RegisterFlags registers the flags of a trace replay (--dataset mooncake:FILE, azure:FILE or
// burstgpt:FILE).
func (t *TraceOptions) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&t.Speedup, "trace-speedup", 1, "trace datasets: divide the trace's gaps by this (2: twice as fast), from 0.001 to 1e6")
	fs.DurationVar(&t.Start, "trace-start", 0, "trace datasets: skip the requests of this first stretch of trace time")
	fs.DurationVar(&t.Length, "trace-length", 0, "trace datasets: replay this much trace time from --trace-start (0: to the end)")
}

// flagsParsed sets the fields of o that depend on whether a flag was given at all.
func (o *Load) flagsParsed(set map[string]bool) {
	o.SendTemperature, o.OverrideMaxTokens = set["temperature"], set["max-tokens"]
	o.Agent.flagsParsed(set)
}

// RegisterFlags registers bench's flags on fs (the shared ones of Load included), filling o.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	o.Load.RegisterFlags(fs)
	o.RequestRate = math.Inf(1)
	fs.IntVar(&o.Concurrency, "concurrency", 0, "requests in flight at most (with a rate), or closed-loop users (without one); 0 with a rate:\nthe default cap, 1024 or fewer under the open-file limit (requests beyond it wait for a slot,\nand the wait counts as send lag)")
	fs.IntVar(&o.Concurrency, "max-concurrency", 0, "alias of --concurrency (vLLM's name)")
	fs.IntVar(&o.NumPrompts, "num-prompts", 1000, "requests (or sessions) to send; with --duration, 0 means no limit")
	fs.Var(rateValue{&o.RequestRate}, "request-rate", "`rate` in requests per second, or inf (inf: a closed loop with --concurrency, else all at once)")
	fs.DurationVar(&o.Duration, "duration", 0, "stop sending after this long (0: no limit)")
	fs.StringVar(&o.JSONOut, "json", "", "write the ragtail.bench/v1 JSON to this file ('-' for stdout)")
	fs.StringVar(&o.HTMLOut, "html", "", "write a self-contained HTML report to this file")
	fs.StringVar(&o.SaveDetailed, "save-detailed", "", "write every request's record as JSONL to this file, as the run goes")
	fs.Var(segmentValue{&o.Segment}, "segment", "multi-host runs: send share `i/n` (i from 0 to n-1, e.g. $JOB_COMPLETION_INDEX/4) of the seeded\nschedule that every host builds alike; ragtail report merges the n result files into the whole run")
	fs.Var(wallTimeValue{&o.StartAt}, "start-at", "start the run at this wall-clock `time` (RFC 3339 or Unix seconds), so that several hosts start together")
	fs.Var(thresholdsValue{&o.FailOn}, "fail-on", "`thresholds` on numeric keys of the result JSON, comma-separated KEY<N, KEY<=N, KEY>N or KEY>=N,\n"+
		"e.g. 'p95_ttft_ms<500,error_rate<0.01,goodput>20': the results are written, a line per threshold\n"+
		"says what was measured, and a breach exits with status 99 (other failures exit 1)")
	fs.Var(cancelValue{&o.Cancel}, "cancel", "abandon requests mid-stream as users closing a tab do: `fraction=F,after=POINT`, POINT one of ttft+DURATION\n"+
		"(after the first token), tokens:N (after N output tokens) or DURATION (after the send), e.g.\n"+
		"'fraction=0.1,after=ttft+200ms'; the choice of requests is seeded (--seed), not timed. They count apart\n"+
		"(cancelled), in no latency but TTFT nor in goodput, and with --server-metrics the report says whether\n"+
		"the server aborted them and freed their work")
	fs.DurationVar(&o.Slice, "slice", 0, "summarise each slice of this width (e.g. 10s) on its own: requests, TTFT and E2EL percentiles with\n"+
		"their intervals, throughput and failures by intended send time, in the JSON (slices), the text and the HTML")
	o.ServerMetrics.registerFlags(fs, "the run")
	o.Load.Dashboard.registerFlags(fs, "the run")
	o.Hold.registerFlags(fs)
}

// registerFlags registers the --server-metrics flags on fs; during names what is scraped.
func (o *ServerMetricsOptions) registerFlags(fs *flag.FlagSet, during string) {
	fs.StringVar(&o.URL, "server-metrics", "", "scrape this Prometheus endpoint during "+during+" and keep the vllm:*, rag_*, gen_ai_server_* and DCGM_*\nseries in the JSON (server_metrics); default: the target origin's /metrics when it answers; off: none")
	fs.DurationVar(&o.Interval, "server-metrics-interval", scrape.DefaultInterval, "time between scrapes of --server-metrics")
	fs.StringVar(&o.Token, "server-metrics-token", "", "bearer token for --server-metrics (default: $"+EnvAdminToken+", the admin token ragtail serve's\nadmin listener asks for when it is not on loopback); never written to the results")
}

// FlagsParsed completes o after fs (on which RegisterFlags registered o's flags) has parsed a
// command line: a temperature or max-tokens given is sent, and a --duration given without
// --num-prompts lifts the request limit.
func (o *Options) FlagsParsed(fs *flag.FlagSet) {
	set := given(fs)
	o.Load.flagsParsed(set)
	if set["duration"] && !set["num-prompts"] {
		o.NumPrompts = 0
	}
	o.Hold.flagsParsed(set)
	if o.Hold.SLO != nil {
		o.NumPrompts = 0 // the search and the hold end the run
	}
}

// RegisterFlags registers sweep's flags on fs (the shared ones of Load included), filling o.
func (o *SweepOptions) RegisterFlags(fs *flag.FlagSet) {
	o.Load.RegisterFlags(fs)
	fs.Var(ratesValue{&o.Rates}, "rates", "request `rates` of the ladder, comma-separated (req/s)")
	fs.Float64Var(&o.RateStart, "rate-start", 0, "first rate of an arithmetic ladder")
	fs.Float64Var(&o.RateStep, "rate-step", 0, "step of an arithmetic ladder")
	fs.Float64Var(&o.RateMax, "rate-max", 0, "last rate of an arithmetic ladder (inclusive)")
	fs.Var(usersValue{&o.Concurrencies}, "concurrencies", "closed-loop `users` of the ladder, comma-separated, instead of rates")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "with rates: cap on requests in flight (0: the default, 1024 or fewer under the open-file limit)")
	fs.DurationVar(&o.PointDuration, "point-duration", 30*time.Second, "how long each point (and probe) sends")
	fs.IntVar(&o.PointPrompts, "num-prompts", 0, "stop a point after this many requests, too (0: no limit)")
	fs.Var(sloValue{&o.SLO}, "slo", "percentile `SLO` for max_rps_under_slo: pP_METRIC:MS (p95_e2el:2000) or METRIC:pP:MS")
	fs.Float64Var(&o.KneeThreshold, "knee-threshold", stats.DefaultKneeSlope, "knee: P99 E2EL growth in ms per extra req/s (the article's 120)")
	fs.BoolVar(&o.Bisect, "bisect", true, "with --slo: refine the max rate (with --rates) or the most users (with --concurrencies) that\nmeet it by bisection between the ladder's points")
	fs.Float64Var(&o.Tolerance, "rps-tolerance", 0, "bisection stops when the bracket is this narrow, in req/s (default 5% of its low end)")
	fs.DurationVar(&o.Pause, "pause", 2*time.Second, "idle time between points, for the server to settle")
	fs.StringVar(&o.JSONOut, "json", "", "write the ragtail.sweep/v1 JSON to this file ('-' for stdout)")
	fs.StringVar(&o.HTMLOut, "html", "", "write a self-contained HTML report with the sweep curve to this file")
	fs.Var(segmentValue{&o.Segment}, "segment", "multi-host sweeps: send share `i/n` (i from 0 to n-1) of every point's seeded schedule;\n"+
		"ragtail report merges the n sweep files point by point (needs --rates and --bisect=false)")
	fs.Var(wallTimeValue{&o.StartAt}, "start-at", "start the first point at this wall-clock `time` (RFC 3339 or Unix seconds) and each next one\n"+
		"--warmup-duration + --point-duration + --drain-timeout + --pause + 1s later, so that several hosts run each point together")
	o.ServerMetrics.registerFlags(fs, "each point")
	o.Load.Dashboard.registerFlags(fs, "the sweep (its points one after another)")
}

// FlagsParsed completes o after fs (on which RegisterFlags registered o's flags) has parsed a
// command line: a temperature or max-tokens given is sent.
func (o *SweepOptions) FlagsParsed(fs *flag.FlagSet) { o.Load.flagsParsed(given(fs)) }

// given returns the names of the flags given on fs's command line.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// mustParse parses a flag's default, which cannot fail.
func mustParse[T any](parse func(string) (T, error), s string) T {
	v, err := parse(s)
	if err != nil {
		panic(fmt.Sprintf("default %q: %v", s, err))
	}
	return v
}
