package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// loadOptions are the flags bench and sweep share: the target, what each request sends, and the
// shape of the load.
type loadOptions struct {
	url, model, apiKey string
	maxTokens          int
	temperature        float64
	stream             bool
	timeout            time.Duration
	extraBody          string
	headers            headerList
	seed               uint64

	shape      string
	burstiness float64
	dataset    string
	sessions   string
	think      time.Duration

	article shape.ArticleConfig
	keys    keyOptions

	drainTimeout     time.Duration
	warmup           int
	warmupDuration   time.Duration
	maxErrorRate     float64
	goodput          string
	percentileMetric string
	percentiles      string
	stepLimit        time.Duration
	quiet            bool

	set map[string]bool // flags given on the command line
}

type keyOptions struct {
	pattern       string
	count, hot    int
	cold, invalid float64
}

func (o *loadOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "url", "http://127.0.0.1:8000/v1/chat/completions", "OpenAI-compatible endpoint: a /v1/chat/completions (or legacy /v1/completions) URL, or a base URL\n(http://host:8000/v1 or http://host:8000) that gets the chat-completions route appended")
	fs.StringVar(&o.model, "model", "", "model name sent with each request (default: the first model of GET /v1/models)")
	fs.StringVar(&o.apiKey, "api-key", "", "bearer token (default: $OPENAI_API_KEY)")
	fs.IntVar(&o.maxTokens, "max-tokens", 256, "max_tokens of each request (a dataset's own output lengths are used unless this is given)")
	fs.Float64Var(&o.temperature, "temperature", 0, "sampling temperature (default: not sent, the server's default)")
	fs.BoolVar(&o.stream, "stream", true, "stream responses (SSE); without streaming only E2EL is measured")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "limit on each request, connecting included (0: none)")
	fs.StringVar(&o.extraBody, "extra-body", "", `JSON object of extra body fields, e.g. '{"rag":{"coupling":"async"}}' or '{"ignore_eos":true}'`)
	fs.Var(&o.headers, "header", "extra request header \"Name: value\" (repeatable)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of arrivals and prompts: the same seed sends the same load")

	fs.StringVar(&o.shape, "shape", "poisson", "arrival process: poisson, gamma (with --burstiness), constant, ramp:FROM,TO,DURATION,\nstep:RATE@DURATION,..., or article (Zipf popularity, rank-grown context, Poisson bursts)")
	fs.Float64Var(&o.burstiness, "burstiness", 1, "gamma shape of the gaps (vLLM's): 1 is Poisson, < 1 burstier, > 1 more regular; ramp and step use it too (0: even spacing)")
	fs.StringVar(&o.dataset, "dataset", "mixed", "prompts: short, medium, long, mixed, N or MIN-MAX tokens (synthetic); a ShareGPT JSON or\nOpenAI-messages JSONL file; or keys[:FILE] for GET /v1/documents/{id} lookups (see --key-*)")
	fs.StringVar(&o.sessions, "sessions", "", "replay user sessions: a JSONL file (session, step, think_ms, start_ms, request) or 'synthetic'\n(search -> product -> cart paths); sessions start at the arrival process unless the file gives start_ms")
	fs.DurationVar(&o.think, "think", time.Second, "median think time between steps of synthetic sessions")

	def := shape.DefaultArticle()
	o.article = def
	fs.IntVar(&o.article.Ranks, "zipf-ranks", def.Ranks, "article shape: popularity ranks N")
	fs.Float64Var(&o.article.Alpha, "zipf-alpha", def.Alpha, "article shape and key lookups: Zipf exponent of popularity")
	fs.IntVar(&o.article.BaseTokens, "context-base", def.BaseTokens, "article shape: context tokens at rank 0")
	fs.IntVar(&o.article.RankTokens, "context-per-rank", def.RankTokens, "article shape: extra context tokens at rank N (512 + 1024 x rank/N)")
	fs.Float64Var(&o.article.BurstLambda, "burst-lambda", def.BurstLambda, "article shape: mean Poisson burst size (the article uses 2.5 to 3)")
	fs.DurationVar(&o.article.Gap, "burst-gap", def.Gap, "article shape: gap before a burst of b shrinks it to gap/(b+1) (--request-rate rescales it)")
	fs.IntVar(&o.article.MaxPromptTokens, "max-prompt-tokens", def.MaxPromptTokens, "article shape: cap on a request's context tokens (-1: none)")

	fs.StringVar(&o.keys.pattern, "key-pattern", shape.DefaultKeyPattern, "key lookups: fmt pattern of the keys (ragtail's built-in corpus: chunk 0 of each document)")
	fs.IntVar(&o.keys.count, "key-count", shape.DefaultKeyCount, "key lookups: keys made from --key-pattern (ragtail serve's --corpus-docs)")
	fs.IntVar(&o.keys.hot, "hot-keys", 0, "key lookups: size of the hot set drawn by Zipf popularity (0: every key)")
	fs.Float64Var(&o.keys.cold, "cold-keys", 0, "key lookups: fraction of lookups for keys outside the hot set (never cached)")
	fs.Float64Var(&o.keys.invalid, "invalid-keys", 0, "key lookups: fraction of lookups for keys that do not exist (cache penetration)")

	fs.DurationVar(&o.drainTimeout, "drain-timeout", loadgen.DefaultDrainTimeout, "once sending stops (at the end, or at a first Ctrl-C), how long to wait for requests in flight\nbefore cancelling them (0: no limit); a second Ctrl-C cancels them at once")
	fs.IntVar(&o.warmup, "warmup", 0, "send this many requests (or sessions) first, recorded in --save-detailed but in no statistic\n(vLLM's --num-warmups); --num-prompts counts after them")
	fs.DurationVar(&o.warmupDuration, "warmup-duration", 0, "send the arrivals of this first stretch as warmup (in no statistic); --duration counts after it")
	fs.Float64Var(&o.maxErrorRate, "max-error-rate", 0.5, "exit non-zero when more than this fraction of the measured requests failed (1: never)")
	fs.StringVar(&o.goodput, "goodput", "", "request SLOs for goodput in ms, e.g. ttft:300,e2el:2000 (metrics ttft, tpot, itl, e2el)")
	fs.StringVar(&o.percentileMetric, "percentile-metrics", "all", "metrics in the report: ttft,tpot,itl,e2el,service_e2el,send_lag or all")
	fs.StringVar(&o.percentiles, "metric-percentiles", "50,90,95,99,99.9", "percentiles reported, each with its 95% interval")
	fs.DurationVar(&o.stepLimit, "session-patience", 0, "sessions: a step slower than this interrupts its session (default: the goodput e2el SLO)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress line")
}

// headerList is a repeatable "Name: value" flag.
type headerList [][2]string

func (h *headerList) String() string {
	var parts []string
	for _, kv := range *h {
		parts = append(parts, kv[0]+": "+kv[1])
	}
	return strings.Join(parts, ", ")
}

func (h *headerList) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("header %q: want \"Name: value\"", s)
	}
	*h = append(*h, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	return nil
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

// newClient builds the HTTP client of o, asking the server for its model when none was given.
func (o *loadOptions) newClient(ctx context.Context, extra ...client.Option) (*client.Client, error) {
	opts := []client.Option{client.WithStream(o.stream), client.WithTimeout(o.timeout)}
	key := o.apiKey
	if key == "" {
		key = os.Getenv("OPENAI_API_KEY")
	}
	if key != "" {
		opts = append(opts, client.WithAPIKey(key))
	}
	// The default applies to requests that bring no output length of their own (a dataset's or
	// a session step's), and to all of them when --max-tokens is given (see maxTokensOverride).
	opts = append(opts, client.WithMaxTokens(o.maxTokens))
	if o.set["temperature"] {
		opts = append(opts, client.WithTemperature(o.temperature))
	}
	if o.extraBody != "" {
		var body map[string]any
		if err := json.Unmarshal([]byte(o.extraBody), &body); err != nil {
			return nil, fmt.Errorf("--extra-body: want a JSON object: %w", err)
		}
		opts = append(opts, client.WithBody(body))
	}
	for _, kv := range o.headers {
		opts = append(opts, client.WithHeader(kv[0], kv[1]))
	}
	c, err := client.New(o.url, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	o.url = c.URL()
	if o.model == "" && !o.isKeyLookups() {
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		models, err := c.Models(lctx)
		cancel()
		var ue *url.Error
		switch {
		case errors.As(err, &ue) && !errors.Is(err, context.Canceled):
			return nil, fmt.Errorf("cannot reach %s: %w (is the server running, and is --url right?)", o.url, ue.Err)
		case err != nil:
			return nil, fmt.Errorf("%w; pass --model", err)
		}
		if len(models) == 0 {
			return nil, errors.New("the server lists no models; pass --model")
		}
		o.model = models[0]
	}
	if o.model != "" {
		c, err = client.New(o.url, append(append(opts, client.WithModel(o.model)), extra...)...)
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// preflight sends the first request of the workload once, before the run: a dead URL, a
// wrong model or a bad key stops here with the server's whole message.
func (o *loadOptions) preflight(ctx context.Context, c *client.Client) error {
	p, err := o.plan(math.Inf(1), 1)
	if err != nil {
		return err
	}
	item, ok := p.workload.Next()
	if !ok {
		return errors.New("the workload has no request")
	}
	pctx, cancel := context.WithTimeout(ctx, max(o.timeout, 0)+time.Minute)
	defer cancel()
	err = c.Preflight(pctx, &item.Request)
	var pe *client.PreflightError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errors.New("interrupted during the preflight request")
	case o.isKeyLookups() && errors.As(err, &pe) && pe.Status == http.StatusNotFound:
		return nil // a key that does not exist is an answer (--invalid-keys asks for some)
	}
	return err
}

// measure runs cfg and summarises it as the records come: the run keeps none of them, so its
// memory does not grow with its length. Each record also goes to detailed, when given.
func measure(ctx context.Context, cfg loadgen.Config, ropts report.Options, detailed *report.DetailedWriter) (*loadgen.Result, *report.Bench, error) {
	s := report.NewSummarizer(ropts)
	cfg.Stream = func(recs []loadgen.Record) {
		if detailed != nil {
			detailed.Write(recs...)
		}
		s.Add(recs...)
	}
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return res, s.Bench(res), nil
}

// checkErrorRate fails when more than max of the measured requests failed.
func checkErrorRate(b *report.Bench, maxRate float64) error {
	n := b.Completed + b.Failed
	if n == 0 || float64(b.Failed) <= maxRate*float64(n) {
		return nil
	}
	msg := fmt.Sprintf("%d of %d requests failed (%.1f%%), more than --max-error-rate %g allows", b.Failed, n,
		100*float64(b.Failed)/float64(n), maxRate)
	if len(b.Errors) > 0 {
		e := b.Errors[0]
		msg += fmt.Sprintf("; most were %s (%d): %s", e.Kind, e.Count, e.Example)
	}
	return errors.New(msg)
}

// interrupts maps the first Ctrl-C (SIGINT or SIGTERM, or ctx done) to a graceful stop and the
// second to an abort. Run the load under runCtx with Stop set to stop; release ends the watch.
func interrupts(ctx context.Context, stderr io.Writer, drain time.Duration) (runCtx context.Context, stop <-chan struct{}, release func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	return watchInterrupts(ctx, sigs, func() { signal.Stop(sigs) }, stderr, drain)
}

func watchInterrupts(ctx context.Context, sigs <-chan os.Signal, unwatch func(), stderr io.Writer, drain time.Duration) (context.Context, <-chan struct{}, func()) {
	runCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	stopC := make(chan struct{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		stopped := false
		stopNow := func() {
			if !stopped {
				stopped = true
				close(stopC)
				limit := "as long as they take"
				if drain > 0 {
					limit = "up to " + drain.String()
				}
				fmt.Fprintf(stderr, "\nstopping: no more requests; waiting %s for those in flight (Ctrl-C again to abort)\n", limit)
			}
		}
		ctxDone := ctx.Done()
		n := 0
		for {
			select {
			case <-done:
				return
			case <-ctxDone:
				ctxDone = nil
				stopNow()
			case <-sigs:
				if n++; n == 1 {
					stopNow()
					continue
				}
				fmt.Fprintln(stderr, "aborting: cancelling the requests in flight")
				abort()
				return
			}
		}
	})
	return runCtx, stopC, func() {
		close(done)
		wg.Wait()
		unwatch()
		abort()
	}
}

func (o *loadOptions) isKeyLookups() bool {
	return o.dataset == "keys" || strings.HasPrefix(o.dataset, "keys:")
}

// source builds the prompt source of --dataset.
func (o *loadOptions) source() (shape.Source, error) {
	d := o.dataset
	switch {
	case o.isKeyLookups():
		cfg := shape.KeyConfig{Pattern: o.keys.pattern, Count: o.keys.count, Hot: o.keys.hot, Alpha: o.article.Alpha,
			ColdFraction: o.keys.cold, InvalidFraction: o.keys.invalid}
		if file, ok := strings.CutPrefix(d, "keys:"); ok {
			f, err := os.Open(file)
			if err != nil {
				return nil, fmt.Errorf("--dataset: %w", err)
			}
			defer func() { _ = f.Close() }() // read only
			if cfg.Keys, err = shape.ReadKeys(f); err != nil {
				return nil, fmt.Errorf("--dataset %s: %w", file, err)
			}
		}
		src, err := shape.Keys(cfg, o.seed)
		if err != nil {
			return nil, fmt.Errorf("--dataset keys: %w", err)
		}
		return src, nil
	case strings.HasPrefix(d, "synthetic:"):
		return o.synthetic(strings.TrimPrefix(d, "synthetic:"))
	}
	if _, err := os.Stat(d); err != nil {
		if lengths, perr := shape.ParseLengths(d); perr == nil {
			return shape.Synthetic(lengths, o.seed)
		}
		return nil, fmt.Errorf("--dataset %q: neither a file nor short, medium, long, mixed, N, MIN-MAX or keys[:FILE]", d)
	}
	f, err := os.Open(d)
	if err != nil {
		return nil, fmt.Errorf("--dataset: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	prompts, err := shape.ReadDataset(f)
	if err != nil {
		return nil, fmt.Errorf("--dataset %s: %w", d, err)
	}
	src, err := shape.Prompts(prompts, o.seed)
	if err != nil {
		return nil, fmt.Errorf("--dataset %s: %w", d, err)
	}
	return src, nil
}

func (o *loadOptions) synthetic(spec string) (shape.Source, error) {
	lengths, err := shape.ParseLengths(spec)
	if err != nil {
		return nil, fmt.Errorf("--dataset: %w", err)
	}
	return shape.Synthetic(lengths, o.seed)
}

// maxTokensOverride drops the output lengths a dataset or a session brings, so that a
// --max-tokens given on the command line applies to every request.
type maxTokensOverride struct{ loadgen.Workload }

func (m maxTokensOverride) Next() (loadgen.Item, bool) {
	item, ok := m.Workload.Next()
	item.Request.MaxTokens = 0
	if len(item.Then) > 0 {
		then := make([]loadgen.Step, len(item.Then))
		copy(then, item.Then)
		for i := range then {
			then[i].Request.MaxTokens = 0
		}
		item.Then = then
	}
	return item, ok
}

// plan is a workload and how to describe it.
type plan struct {
	workload   loadgen.Workload
	desc       string  // RunInfo.Shape
	rate       float64 // RunInfo.RequestRate
	burstiness float64
	closedLoop bool
}

// plan builds the workload of o at the given rate (+Inf for none) and concurrency.
func (o *loadOptions) plan(rate float64, concurrency int) (plan, error) {
	p, err := o.planWorkload(rate, concurrency)
	if err == nil && o.set["max-tokens"] {
		p.workload = maxTokensOverride{p.workload}
	}
	return p, err
}

func (o *loadOptions) planWorkload(rate float64, concurrency int) (plan, error) {
	inf := math.IsInf(rate, 1)
	name, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(o.shape)), ":")
	profiled := name == "ramp" || name == "step" || name == "steps"
	p := plan{rate: rate}

	if name == "article" {
		if o.sessions != "" {
			return p, errors.New("--shape article makes its own prompts: it does not combine with --sessions")
		}
		cfg := o.article
		if !inf {
			cfg = cfg.WithRate(rate)
		}
		w, err := shape.Article(cfg, o.seed)
		if err != nil {
			return p, fmt.Errorf("--shape article: %w", err)
		}
		p.workload, p.desc, p.rate = w, cfg.String(), cfg.MeanRate()
		return p, nil
	}

	// Closed loop: the rate is infinite, users are given, and the shape does not set a rate.
	p.closedLoop = inf && concurrency > 0 && !profiled
	var proc shape.Process
	switch {
	case p.closedLoop:
		// The report says "closed loop of N users" from the rate and the concurrency; the
		// shape only names what else there is (sessions).
		proc = shape.Infinite()
	default:
		var err error
		proc, err = shape.ParseProcess(o.shape, rate, o.burstiness, o.seed)
		if err != nil {
			return p, fmt.Errorf("--shape: %w", err)
		}
		p.desc = proc.String()
		if name == "gamma" || profiled {
			p.burstiness = o.burstiness
		}
		if profiled {
			p.rate = 0
		}
	}

	if o.sessions != "" {
		var src shape.SessionSource
		if o.sessions == "synthetic" {
			cfg := shape.SessionConfig{Think: o.think}
			if o.isKeyLookups() {
				keys, err := o.source()
				if err != nil {
					return p, err
				}
				cfg.Products = keys
			}
			var err error
			if src, err = shape.SyntheticSessions(cfg, o.seed); err != nil {
				return p, fmt.Errorf("--sessions: %w", err)
			}
			p.desc = strings.TrimPrefix(p.desc+", synthetic sessions", ", ")
		} else {
			f, err := os.Open(o.sessions)
			if err != nil {
				return p, fmt.Errorf("--sessions: %w", err)
			}
			sessions, err := shape.ReadSessions(f)
			_ = f.Close()
			if err != nil {
				return p, fmt.Errorf("--sessions %s: %w", o.sessions, err)
			}
			if sessions[0].HasStart {
				p.desc = "sessions replayed at their start times"
				p.closedLoop = false
				proc = nil
			} else {
				p.desc = strings.TrimPrefix(p.desc+", sessions from "+filepath.Base(o.sessions), ", ")
			}
			src = shape.Replay(sessions)
		}
		p.workload = shape.Sessions(proc, src)
		return p, nil
	}

	src, err := o.source()
	if err != nil {
		return p, err
	}
	p.workload = shape.Open(proc, src)
	return p, nil
}

// drain is the drain timeout for loadgen.Config: --drain-timeout 0 waits as long as it takes.
func (o *loadOptions) drain() time.Duration {
	if o.drainTimeout == 0 {
		return -1
	}
	return o.drainTimeout
}

// reportOptions builds the report options of o.
func (o *loadOptions) reportOptions() (report.Options, error) {
	var ro report.Options
	var err error
	if ro.Goodput, err = stats.ParseGoodput(o.goodput); err != nil {
		return ro, fmt.Errorf("--goodput: %w", err)
	}
	if ro.Metrics, err = report.ParseMetrics(o.percentileMetric); err != nil {
		return ro, fmt.Errorf("--percentile-metrics: %w", err)
	}
	if ro.Percentiles, err = report.ParsePercentiles(o.percentiles); err != nil {
		return ro, fmt.Errorf("--metric-percentiles: %w", err)
	}
	ro.SessionStepLimit = o.stepLimit
	return ro, nil
}

type benchOptions struct {
	load         loadOptions
	concurrency  int
	numPrompts   int
	requestRate  float64
	duration     time.Duration
	jsonOut      string
	htmlOut      string
	saveDetailed string
	segment      string
	startAt      string
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := benchOptions{requestRate: math.Inf(1)}
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
	o.load.register(fs)
	fs.IntVar(&o.concurrency, "concurrency", 0, "requests in flight at most (with a rate), or closed-loop users (without one); 0: no cap")
	fs.IntVar(&o.concurrency, "max-concurrency", 0, "alias of --concurrency (vLLM's name)")
	fs.IntVar(&o.numPrompts, "num-prompts", 1000, "requests (or sessions) to send; with --duration, 0 means no limit")
	fs.Var(rateValue{&o.requestRate}, "request-rate", "requests per second, or inf (default inf: a closed loop with --concurrency, else all at once)")
	fs.DurationVar(&o.duration, "duration", 0, "stop sending after this long (0: no limit)")
	fs.StringVar(&o.jsonOut, "json", "", "write the ragtail.bench/v1 JSON to this file ('-' for stdout)")
	fs.StringVar(&o.htmlOut, "html", "", "write a self-contained HTML report to this file")
	fs.StringVar(&o.saveDetailed, "save-detailed", "", "write every request's record as JSONL to this file, as the run goes")
	fs.StringVar(&o.segment, "segment", "", "multi-host runs: send share i/n (i from 0 to n-1, e.g. $JOB_COMPLETION_INDEX/4) of the seeded\nschedule that every host builds alike; ragtail report merges the n result files into the whole run")
	fs.StringVar(&o.startAt, "start-at", "", "start the run at this wall-clock time (RFC 3339 or Unix seconds), so that several hosts start together")
	otlp := fs.String("otlp", "", "export one client span per request (service ragtail-bench, warmup included) to this OTLP receiver,\ne.g. http://127.0.0.1:4318 (gRPC on port 4317); default: $OTEL_EXPORTER_OTLP_ENDPOINT if set")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	o.load.set = flagsSet(fs)
	if o.load.set["duration"] && !o.load.set["num-prompts"] {
		o.numPrompts = 0
	}
	if err := o.validate(); err != nil {
		return err
	}
	ropts, err := o.load.reportOptions()
	if err != nil {
		return err
	}
	spans, err := startBenchTracing(ctx, *otlp, os.Getenv, stderr)
	if err != nil {
		return err
	}
	defer spans.Shutdown(stderr)
	c, err := o.load.newClient(ctx, client.WithTracerProvider(spans.Provider()))
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	p, err := o.load.plan(o.requestRate, o.concurrency)
	if err != nil {
		return err
	}
	seg, start, err := o.multiHost(p, stderr)
	if err != nil {
		return err
	}
	hash, err := o.load.scheduleHash(o.requestRate, o.concurrency, o.numPrompts, o.duration)
	if err != nil {
		return err
	}
	if err := o.load.preflight(ctx, c); err != nil {
		return err
	}

	progress := newProgressPrinter(stderr, o.load.quiet)
	cfg := loadgen.Config{
		Workload: p.workload, Client: c, Concurrency: o.concurrency, ClosedLoop: p.closedLoop,
		NumItems: o.numPrompts, Duration: o.duration, DrainTimeout: o.load.drain(),
		Warmup: o.load.warmup, WarmupDuration: o.load.warmupDuration, Start: start,
		Progress: progress.print, ProgressInterval: progress.interval,
		Info: o.load.runInfo(p, o.concurrency, o.numPrompts),
	}
	cfg.Info.ScheduleHash = hash
	if seg != nil {
		// The share ends where the whole schedule would: the segment counts the prompts.
		cfg.Workload, cfg.NumItems = loadgen.Segment(p.workload, *seg, o.numPrompts, o.load.warmupDuration), 0
		cfg.Info.Segment = seg
	}
	var detailed *report.DetailedWriter
	var detailedFile *outputFile
	if o.saveDetailed != "" {
		if detailedFile, err = createOutput(o.saveDetailed, stdout); err != nil {
			return err
		}
		defer detailedFile.abort()
		detailed = report.NewDetailedWriter(detailedFile, cfg.Start, cfg.Info)
	}
	fmt.Fprintf(stderr, "ragtail bench: %s, %s\n", o.load.url, describeStop(p, o.numPrompts, o.duration, o.concurrency))
	if seg != nil {
		fmt.Fprintf(stderr, "segment %s of schedule %s\n", seg, hash)
	}
	if wait := time.Until(start); wait > 10*time.Millisecond {
		fmt.Fprintf(stderr, "waiting %s for --start-at %s\n", wait.Round(time.Millisecond), o.startAt)
	}
	runCtx, stop, release := interrupts(ctx, stderr, o.load.drainTimeout)
	cfg.Stop = stop
	res, bench, err := measure(runCtx, cfg, ropts, detailed)
	release()
	if err != nil {
		return err
	}
	// The files first: when stdout is a closed pipe (| tee and Ctrl-C), printing may fail or
	// end the process, and the results must be on disk by then.
	if detailed != nil {
		if err := detailed.Close(); err != nil {
			return fmt.Errorf("--save-detailed: %w", err)
		}
		if err := detailedFile.commit(); err != nil {
			return err
		}
	}
	if err := writeOutputs(stdout, bench, o.jsonOut, o.htmlOut); err != nil {
		return err
	}
	if off, ok := c.ClockOffset(); ok {
		fmt.Fprintf(stderr, "server clock: %+.3f ms from ours (+- %.3f ms, best of %d responses)\n",
			float64(off.Offset)/1e6, float64(off.Uncertainty)/1e6, off.Samples)
	}
	if res.Config.Interrupted {
		return errors.New("interrupted: the results above cover what completed")
	}
	return checkErrorRate(bench, o.load.maxErrorRate)
}

// runInfo describes a run of plan p for the reports.
func (o *loadOptions) runInfo(p plan, concurrency, numPrompts int) loadgen.RunInfo {
	return loadgen.RunInfo{URL: o.url, Model: o.model, Shape: p.desc, RequestRate: p.rate, Burstiness: p.burstiness,
		Concurrency: concurrency, NumPrompts: numPrompts, MaxTokens: o.maxTokens, Seed: o.seed}
}

// multiHost reads --segment and --start-at, and warns when several hosts would send the same
// schedule.
func (o *benchOptions) multiHost(p plan, stderr io.Writer) (*loadgen.SegmentOf, time.Time, error) {
	start := time.Now()
	if o.startAt != "" {
		at, err := parseWallTime(o.startAt)
		if err != nil {
			return nil, start, fmt.Errorf("--start-at: %w", err)
		}
		wait := time.Until(at)
		if wait < 0 {
			return nil, start, fmt.Errorf("--start-at %s is %s in the past", o.startAt, (-wait).Round(time.Millisecond))
		}
		start = start.Add(wait) // on the monotonic clock, from now
	}
	if o.segment == "" {
		if o.startAt != "" || os.Getenv("JOB_COMPLETION_INDEX") != "" {
			fmt.Fprintln(stderr, "warning: every host started together without --segment sends the same seeded schedule, so their\n"+
				"arrivals come in synchronised bursts; give each host --segment i/n (or its own --seed)")
		}
		return nil, start, nil
	}
	seg, err := loadgen.ParseSegment(o.segment)
	if err != nil {
		return nil, start, fmt.Errorf("--segment: %w", err)
	}
	switch {
	case p.closedLoop:
		return nil, start, errors.New("--segment shares out a schedule of arrivals: give a --request-rate (a closed loop has none)")
	case o.load.warmup > 0:
		return nil, start, errors.New("--segment: use --warmup-duration, the same stretch on every host, rather than --warmup")
	}
	return &seg, start, nil
}

// parseWallTime reads an RFC 3339 time or Unix seconds.
func parseWallTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && f < 1e11 {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)), nil
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-05-01T12:00:00Z) or Unix seconds", s)
}

// scheduleHash identifies the schedule the flags make: the first items of its workload (their
// intended times, sessions and requests) and its limits. Hosts that build the same schedule
// get the same hash, whatever their URL.
func (o *loadOptions) scheduleHash(rate float64, concurrency, numPrompts int, d time.Duration) (string, error) {
	p, err := o.plan(rate, concurrency)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "ragtail schedule v1\n%s\nprompts %d duration %d warmup %d %d\n", p.desc, numPrompts, d, o.warmup, o.warmupDuration)
	enc := json.NewEncoder(h)
	for range 1000 {
		item, ok := p.workload.Next()
		if !ok {
			break
		}
		if err := enc.Encode(item); err != nil {
			return "", fmt.Errorf("schedule hash: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

func (o *benchOptions) validate() error {
	switch {
	case o.concurrency < 0:
		return errors.New("--concurrency must not be negative")
	case o.numPrompts < 0:
		return errors.New("--num-prompts must not be negative")
	case o.duration < 0:
		return errors.New("--duration must not be negative")
	case o.numPrompts == 0 && o.duration == 0:
		return errors.New("give --num-prompts or --duration: the run would never end")
	case math.IsInf(o.requestRate, 1) && o.concurrency == 0 && o.numPrompts == 0 &&
		!strings.HasPrefix(o.load.shape, "ramp") && !strings.HasPrefix(o.load.shape, "step") && o.load.shape != "article":
		return errors.New("an infinite rate without --concurrency sends every request at once: give --num-prompts, a --request-rate or --concurrency")
	case o.load.maxTokens < 1:
		return errors.New("--max-tokens must be positive")
	}
	return o.load.validate()
}

// validate checks the flags bench and sweep share.
func (o *loadOptions) validate() error {
	switch {
	case o.warmup < 0:
		return errors.New("--warmup must not be negative")
	case o.warmupDuration < 0:
		return errors.New("--warmup-duration must not be negative")
	case !(o.maxErrorRate >= 0 && o.maxErrorRate <= 1):
		return errors.New("--max-error-rate must be between 0 and 1")
	}
	return nil
}

// describeStop says what a run will do, for the line printed before it starts.
func describeStop(p plan, n int, d time.Duration, concurrency int) string {
	var parts []string
	if p.desc != "" {
		parts = append(parts, p.desc)
	}
	switch {
	case p.closedLoop:
		parts = append(parts, fmt.Sprintf("closed loop of %d users", concurrency))
	case concurrency > 0:
		parts = append(parts, fmt.Sprintf("at most %d in flight", concurrency))
	}
	if n > 0 {
		parts = append(parts, fmt.Sprintf("%d requests", n))
	}
	if d > 0 {
		parts = append(parts, "for "+d.String())
	}
	return strings.Join(parts, ", ")
}

// writeOutputs writes the JSON and HTML files asked for, then prints the text report (or the
// JSON, for --json -): files first, so that a closed stdout cannot lose them.
func writeOutputs(stdout io.Writer, v report.Document, jsonOut, htmlOut string) error {
	if jsonOut != "" && jsonOut != "-" {
		if err := writeOutput(jsonOut, stdout, func(w io.Writer) error { return report.WriteJSON(w, v) }); err != nil {
			return err
		}
	}
	if htmlOut != "" {
		if err := writeOutput(htmlOut, stdout, func(w io.Writer) error { return report.WriteHTML(w, v) }); err != nil {
			return err
		}
	}
	if jsonOut == "-" {
		return report.WriteJSON(stdout, v)
	}
	switch x := v.(type) {
	case *report.Bench:
		return report.WriteText(stdout, x)
	case *report.Sweep:
		return report.WriteSweepText(stdout, x)
	}
	return nil
}

// progressPrinter shows a run's progress: one line rewritten in place on a terminal, a plain
// line every few seconds otherwise.
type progressPrinter struct {
	w        io.Writer
	tty      bool
	quiet    bool
	interval time.Duration
	mu       sync.Mutex
	width    int
}

func newProgressPrinter(w io.Writer, quiet bool) *progressPrinter {
	p := &progressPrinter{w: w, tty: isTerminal(w), quiet: quiet, interval: 5 * time.Second}
	if p.tty {
		p.interval = 250 * time.Millisecond
	}
	return p
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progressPrinter) print(pr loadgen.Progress) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	line := progressLine(pr)
	switch {
	case p.tty && pr.Final:
		fmt.Fprintf(p.w, "\r%-*s\n", p.width, line)
	case p.tty:
		fmt.Fprintf(p.w, "\r%-*s", p.width, line)
		p.width = max(p.width, len(line))
	case !pr.Final:
		fmt.Fprintln(p.w, line)
	}
}

func progressLine(pr loadgen.Progress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%7.1fs  sent %d  done %d  failed %d  in flight %d", pr.Elapsed.Seconds(), pr.Sent, pr.Done, pr.Failed, pr.InFlight)
	if pr.Queued > 0 {
		fmt.Fprintf(&b, "  queued %d", pr.Queued)
	}
	fmt.Fprintf(&b, "  %.1f req/s", pr.Rate)
	if pr.P99E2EL > 0 {
		fmt.Fprintf(&b, "  p99 e2el %s ms", strconv.FormatFloat(float64(pr.P99E2EL)/1e6, 'f', 1, 64))
	}
	return b.String()
}
