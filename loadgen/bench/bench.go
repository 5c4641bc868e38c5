// Package bench drives the load of ragtail's bench and sweep commands from their configuration
// (the commands' flags as structs): it plans the workload (datasets, arrival shapes, sessions,
// warmup, multi-host segments), runs it with Ctrl-C handling and progress, writes the result
// files, and bisects a sweep's highest rate under an SLO. It speaks HTTP only, through
// loadgen/client.
package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
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

// Load is the part of a run's configuration that bench and sweep share (their common flags):
// the target, what each request sends, and the shape of the load. Its methods build the
// client, the workload and the report options it describes; their errors name the flags.
type Load struct {
	URL, Model, APIKey string
	MaxTokens          int
	Temperature        float64
	// SendTemperature sends Temperature (otherwise the server's default applies).
	SendTemperature bool
	// OverrideMaxTokens applies MaxTokens to every request, also to those whose dataset or
	// session step brings its own output length.
	OverrideMaxTokens bool
	Stream            bool
	Timeout           time.Duration  // per request, connecting included; 0: none
	ExtraBody         map[string]any // extra body fields
	Headers           Headers
	Seed              uint64
	// HTTPClient is the HTTP client for http:// targets: client.HTTPClientH1 or
	// client.HTTPClientNetHTTP ("" for the client's default, h1).
	HTTPClient string

	Shape      Shape   // arrival process, or the article's shaper
	Burstiness float64 // gamma shape of the gaps
	Dataset    Dataset // prompts: lengths, a file, key lookups or a trace
	Sessions   string  // a sessions JSONL file or "synthetic"
	Think      time.Duration
	// MultiTurn replays a dataset's conversations turn by turn as sessions, and makes every
	// chat step of a sessions file continue the conversation, each turn carrying the server's
	// actual answers to the turns before it.
	MultiTurn bool
	// EmbedBatch is the inputs of each request to an /embeddings URL: that many of the
	// dataset's prompts are embedded in one request (0 means 1).
	EmbedBatch int
	// Trace paces a trace dataset (Dataset mooncake:FILE, azure:FILE or burstgpt:FILE).
	Trace TraceOptions

	Article shape.ArticleConfig
	Keys    KeyOptions

	DrainTimeout      time.Duration // 0: wait as long as it takes
	Warmup            int
	WarmupDuration    time.Duration
	MaxErrorRate      float64
	Goodput           stats.SLOs // request SLOs of goodput; none: goodput is not reported
	PercentileMetrics []string   // report.AllMetrics when empty
	Percentiles       []float64  // report.DefaultPercentiles when empty
	SessionPatience   time.Duration
	Quiet             bool // no progress line
}

// KeyOptions configure key lookups (Dataset keys[:FILE]).
type KeyOptions struct {
	Pattern       string
	Count, Hot    int
	Cold, Invalid float64
}

// Headers is a repeatable "Name: value" flag.
type Headers [][2]string

// String returns the headers as "Name: value, ...".
func (h *Headers) String() string {
	var parts []string
	for _, kv := range *h {
		parts = append(parts, kv[0]+": "+kv[1])
	}
	return strings.Join(parts, ", ")
}

// Set adds a header given as "Name: value".
func (h *Headers) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("header %q: want \"Name: value\"", s)
	}
	*h = append(*h, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	return nil
}

// NewClient builds the HTTP client of o, asking the server for its model when none was given.
func (o *Load) NewClient(ctx context.Context, extra ...client.Option) (*client.Client, error) {
	opts := []client.Option{client.WithStream(o.Stream), client.WithTimeout(o.Timeout)}
	if o.HTTPClient != "" {
		opts = append(opts, client.WithHTTPClient(o.HTTPClient))
	}
	key := o.APIKey
	if key == "" {
		key = os.Getenv("OPENAI_API_KEY")
	}
	if key != "" {
		opts = append(opts, client.WithAPIKey(key))
	}
	// The default applies to requests that bring no output length of their own (a dataset's or
	// a session step's), and to all of them when --max-tokens is given (see maxTokensOverride).
	opts = append(opts, client.WithMaxTokens(o.MaxTokens))
	if o.SendTemperature {
		opts = append(opts, client.WithTemperature(o.Temperature))
	}
	if o.ExtraBody != nil {
		opts = append(opts, client.WithBody(o.ExtraBody))
	}
	for _, kv := range o.Headers {
		opts = append(opts, client.WithHeader(kv[0], kv[1]))
	}
	c, err := client.New(o.URL, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	o.URL = c.URL()
	// An embeddings endpoint's model is not the chat model GET /v1/models lists first: without
	// --model the server's own applies.
	if o.Model == "" && !o.isKeyLookups() && !c.IsEmbeddings() {
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		models, err := c.Models(lctx)
		cancel()
		var ue *url.Error
		switch {
		case errors.As(err, &ue) && !errors.Is(err, context.Canceled):
			return nil, fmt.Errorf("cannot reach %s: %w (is the server running, and is --url right?)", o.URL, ue.Err)
		case err != nil:
			return nil, fmt.Errorf("%w; pass --model", err)
		}
		if len(models) == 0 {
			return nil, errors.New("the server lists no models; pass --model")
		}
		o.Model = models[0]
	}
	if o.Model != "" {
		c, err = client.New(o.URL, append(append(opts, client.WithModel(o.Model)), extra...)...)
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Preflight sends the first request of the workload once, before the run: a dead URL, a
// wrong model or a bad key stops here with the server's whole message.
func (o *Load) Preflight(ctx context.Context, c *client.Client) error {
	p, err := o.plan(math.Inf(1), 1)
	if err != nil {
		return err
	}
	item, ok := p.workload.Next()
	if !ok {
		return errors.New("the workload has no request")
	}
	pctx, cancel := context.WithTimeout(ctx, max(o.Timeout, 0)+time.Minute)
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
	return WatchInterrupts(ctx, sigs, func() { signal.Stop(sigs) }, stderr, drain)
}

// WatchInterrupts is interrupts with the signals read from sigs; unwatch is called on release.
func WatchInterrupts(ctx context.Context, sigs <-chan os.Signal, unwatch func(), stderr io.Writer, drain time.Duration) (context.Context, <-chan struct{}, func()) {
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

// isEmbeddings reports whether the target is an embeddings endpoint (a URL ending in
// /embeddings).
func (o *Load) isEmbeddings() bool {
	u, err := client.ResolveURL(o.URL)
	return err == nil && strings.HasSuffix(u.Path, "/embeddings")
}

func (o *Load) isKeyLookups() bool { return o.Dataset.Keys }

// source builds the prompt source of --dataset.
func (o *Load) source() (shape.Source, error) {
	d := o.Dataset
	switch {
	case d.Keys:
		cfg := shape.KeyConfig{Pattern: o.Keys.Pattern, Count: o.Keys.Count, Hot: o.Keys.Hot, Alpha: o.Article.Alpha,
			ColdFraction: o.Keys.Cold, InvalidFraction: o.Keys.Invalid}
		if file := d.File; file != "" {
			f, err := os.Open(file)
			if err != nil {
				return nil, fmt.Errorf("--dataset: %w", err)
			}
			defer func() { _ = f.Close() }() // read only
			if cfg.Keys, err = shape.ReadKeys(f); err != nil {
				return nil, fmt.Errorf("--dataset %s: %w", file, err)
			}
		}
		src, err := shape.Keys(cfg, o.Seed)
		if err != nil {
			return nil, fmt.Errorf("--dataset keys: %w", err)
		}
		return src, nil
	case d.File == "":
		return shape.Synthetic(d.lengths(), o.Seed)
	}
	f, err := os.Open(d.File)
	if err != nil {
		return nil, fmt.Errorf("--dataset: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	prompts, err := shape.ReadDataset(f)
	if err != nil {
		return nil, fmt.Errorf("--dataset %s: %w", d, err)
	}
	src, err := shape.Prompts(prompts, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("--dataset %s: %w", d, err)
	}
	return src, nil
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
func (o *Load) plan(rate float64, concurrency int) (plan, error) {
	p, err := o.planWorkload(rate, concurrency)
	if err == nil && o.OverrideMaxTokens {
		p.workload = maxTokensOverride{p.workload}
	}
	return p, err
}

func (o *Load) planWorkload(rate float64, concurrency int) (plan, error) {
	inf := math.IsInf(rate, 1)
	article, profiled := o.Shape.Article, o.Shape.profiled()
	p := plan{rate: rate}
	trace := o.Dataset.Trace != ""
	if o.MultiTurn && (trace || article || o.Sessions == "synthetic" || o.isKeyLookups()) {
		return p, errors.New("--multi-turn replays conversations: give a ShareGPT or OpenAI-messages --dataset file, or --sessions FILE")
	}
	if o.isEmbeddings() && (trace || article || o.Sessions != "" || o.MultiTurn || o.isKeyLookups()) {
		return p, errors.New("an /embeddings --url embeds the --dataset's prompts (synthetic lengths or a file): it does not combine with\n" +
			"--sessions, --multi-turn, --shape article, key lookups or a trace")
	}
	if tp, ok, err := o.tracePlan(rate); ok {
		return tp, err
	}

	if article {
		if o.Sessions != "" {
			return p, errors.New("--shape article makes its own prompts: it does not combine with --sessions")
		}
		cfg := o.Article
		if !inf {
			cfg = cfg.WithRate(rate)
		}
		w, err := shape.Article(cfg, o.Seed)
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
		proc, err = o.Shape.Process.Process(rate, o.Burstiness, o.Seed)
		if err != nil {
			return p, fmt.Errorf("--shape: %w", err)
		}
		p.desc = proc.String()
		if o.Shape.Process.Name == shape.ProcessGamma || profiled {
			p.burstiness = o.Burstiness
		}
		if profiled {
			p.rate = 0
		}
	}

	if o.Sessions != "" {
		var src shape.SessionSource
		if o.Sessions == "synthetic" {
			cfg := shape.SessionConfig{Think: o.Think}
			if o.isKeyLookups() {
				keys, err := o.source()
				if err != nil {
					return p, err
				}
				cfg.Products = keys
			}
			var err error
			if src, err = shape.SyntheticSessions(cfg, o.Seed); err != nil {
				return p, fmt.Errorf("--sessions: %w", err)
			}
			p.desc = strings.TrimPrefix(p.desc+", synthetic sessions", ", ")
		} else {
			f, err := os.Open(o.Sessions)
			if err != nil {
				return p, fmt.Errorf("--sessions: %w", err)
			}
			sessions, err := shape.ReadSessions(f)
			_ = f.Close()
			if err != nil {
				return p, fmt.Errorf("--sessions %s: %w", o.Sessions, err)
			}
			if o.MultiTurn {
				shape.ContinueConversations(sessions)
			}
			if sessions[0].HasStart {
				p.desc = "sessions replayed at their start times"
				p.closedLoop = false
				proc = nil
			} else {
				p.desc = strings.TrimPrefix(p.desc+", sessions from "+filepath.Base(o.Sessions), ", ")
			}
			src = shape.Replay(sessions)
		}
		p.workload = shape.Sessions(proc, src)
		return p, nil
	}

	if o.MultiTurn {
		src, err := o.conversations()
		if err != nil {
			return p, err
		}
		p.desc = strings.TrimPrefix(p.desc+", conversations from "+filepath.Base(o.Dataset.File), ", ")
		p.workload = shape.Sessions(proc, src)
		return p, nil
	}
	src, err := o.source()
	if err != nil {
		return p, err
	}
	if o.isEmbeddings() {
		batch := max(o.EmbedBatch, 1)
		if src, err = shape.Embeddings(src, batch); err != nil {
			return p, fmt.Errorf("--embed-batch: %w", err)
		}
		p.desc = strings.TrimPrefix(fmt.Sprintf("%s, embeddings of %d inputs a request", p.desc, batch), ", ")
	}
	p.workload = shape.Open(proc, src)
	return p, nil
}

// conversations builds the multi-turn sessions of --dataset FILE --multi-turn.
func (o *Load) conversations() (shape.SessionSource, error) {
	if !o.Dataset.isPrompts() {
		return nil, fmt.Errorf("--multi-turn needs a ShareGPT or OpenAI-messages --dataset file (or --sessions FILE), not %q", o.Dataset)
	}
	f, err := os.Open(o.Dataset.File)
	if err != nil {
		return nil, fmt.Errorf("--multi-turn needs a ShareGPT or OpenAI-messages --dataset file (or --sessions FILE): %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	convs, err := shape.ReadConversations(f)
	if err != nil {
		return nil, fmt.Errorf("--dataset %s: %w", o.Dataset, err)
	}
	src, err := shape.ConversationSessions(convs, o.Think, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("--multi-turn: %w", err)
	}
	return src, nil
}

// drain is the drain timeout for loadgen.Config: --drain-timeout 0 waits as long as it takes.
func (o *Load) drain() time.Duration {
	if o.DrainTimeout == 0 {
		return -1
	}
	return o.DrainTimeout
}

// reportOptions are the report options of o.
func (o *Load) reportOptions() report.Options {
	return report.Options{Goodput: o.Goodput, Metrics: o.PercentileMetrics, Percentiles: o.Percentiles,
		SessionStepLimit: o.SessionPatience}
}

// sessionPatience is the step latency past which a replayed session's user leaves: the
// report's session step limit, or its goodput e2el SLO, as the summary counts interruptions.
func sessionPatience(ro report.Options) time.Duration {
	if ro.SessionStepLimit > 0 {
		return ro.SessionStepLimit
	}
	d, _ := ro.Goodput.Limit(stats.SLOE2EL)
	return d
}

// Options configure a bench run (the bench command's flags).
type Options struct {
	Load
	Concurrency  int     // cap on requests in flight with a rate, closed-loop users without one
	NumPrompts   int     // requests (or sessions) to send; 0 with a Duration: no limit
	RequestRate  float64 // +Inf: none
	Duration     time.Duration
	JSONOut      string // ragtail.bench/v1 JSON file, "-" for stdout
	HTMLOut      string
	SaveDetailed string             // JSONL of every record
	Segment      *loadgen.SegmentOf // the share of a multi-host run this host sends; nil: all
	StartAt      time.Time          // when the run starts, on every host of a multi-host run; zero: now
	// ServerMetrics is the scrape of the target's Prometheus endpoint during the run.
	ServerMetrics ServerMetricsOptions
	// ClientOptions are added to the client's own (for example a tracer provider).
	ClientOptions []client.Option
}

// Run runs the bench o describes: it checks o, builds the client and the workload, sends a
// preflight request, runs the load (the first Ctrl-C drains it, a second aborts it), writes
// the files o names and prints the text report (or the JSON, for --json -) to stdout.
// Progress and notes go to stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	ropts := o.Load.reportOptions()
	// As many connections as requests in flight at most: the cap, or the closed loop's users.
	conns := o.Concurrency
	if conns == 0 {
		conns = loadgen.DefaultMaxInFlight()
	}
	c, err := o.Load.NewClient(ctx, append([]client.Option{client.WithMaxConns(conns)}, o.ClientOptions...)...)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	p, err := o.Load.plan(o.RequestRate, o.Concurrency)
	if err != nil {
		return err
	}
	seg, start, err := o.multiHost(p, stderr)
	if err != nil {
		return err
	}
	hash, err := o.Load.scheduleHash(o.RequestRate, o.Concurrency, o.NumPrompts, o.Duration)
	if err != nil {
		return err
	}
	if err := o.Load.Preflight(ctx, c); err != nil {
		return err
	}
	if !o.Load.isKeyLookups() {
		// Tight clock samples (the model list answers at once); a server without one leaves
		// the estimate to the run's own responses.
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = c.ProbeClock(pctx, clockProbes)
		cancel()
	}
	scraper, err := o.ServerMetrics.scraper(ctx, o.Load.URL, stderr)
	if err != nil {
		return err
	}
	if o.StartAt.IsZero() {
		start = time.Now() // the run starts after the preflight, whose wait is no request's send lag
	}

	progress := newProgressPrinter(stderr, o.Load.Quiet)
	cfg := loadgen.Config{
		Workload: p.workload, Client: c, Concurrency: o.Concurrency, ClosedLoop: p.closedLoop,
		NumItems: o.NumPrompts, Duration: o.Duration, DrainTimeout: o.Load.drain(),
		Warmup: o.Load.Warmup, WarmupDuration: o.Load.WarmupDuration, Start: start,
		Progress: progress.print, ProgressInterval: progress.interval,
		Info:             o.Load.runInfo(p, o.Concurrency, o.NumPrompts).WithSchedule(hash, seg).WithHTTPClient(c.HTTPClient()),
		SessionStepLimit: sessionPatience(ropts),
	}
	if seg != nil {
		// The share ends where the whole schedule would: the segment counts the prompts.
		cfg.Workload, cfg.NumItems = loadgen.Segment(p.workload, *seg, o.NumPrompts, o.Load.WarmupDuration), 0
	}
	var detailed *report.DetailedWriter
	var detailedFile *outputFile
	if o.SaveDetailed != "" {
		if detailedFile, err = createOutput(o.SaveDetailed, stdout); err != nil {
			return err
		}
		defer detailedFile.abort()
		detailed = report.NewDetailedWriter(detailedFile, cfg.Start, cfg.Info)
	}
	fmt.Fprintf(stderr, "ragtail bench: %s, %s\n", o.Load.URL, describeStop(p, o.NumPrompts, o.Duration, o.Concurrency))
	if seg != nil {
		fmt.Fprintf(stderr, "segment %s of schedule %s\n", seg, hash)
	}
	if wait := time.Until(start); wait > 10*time.Millisecond {
		fmt.Fprintf(stderr, "waiting %s for --start-at %s\n", wait.Round(time.Millisecond), o.StartAt.Format(time.RFC3339Nano))
	}
	runCtx, stop, release := interrupts(ctx, stderr, o.Load.DrainTimeout)
	cfg.Stop = stop
	scraper.start(runCtx, start)
	res, bench, err := measure(runCtx, cfg, ropts, detailed)
	scraper.stop(runCtx, bench, stderr)
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
	off, hasClock := c.ClockOffset()
	if hasClock {
		bench.Clock = &report.Clock{Offset: off.Offset, Uncertainty: off.Uncertainty, Samples: off.Samples,
			Method: report.ClockMethod}
	}
	if err := WriteOutputs(stdout, bench, o.JSONOut, o.HTMLOut); err != nil {
		return err
	}
	if hasClock {
		fmt.Fprintf(stderr, "server clock: %+.3f ms from ours (+- %.3f ms, best of %d responses)\n",
			float64(off.Offset)/1e6, float64(off.Uncertainty)/1e6, off.Samples)
	}
	noteCap(stderr, res)
	if res.Config.Interrupted {
		return errors.New("interrupted: the results above cover what completed")
	}
	return checkErrorRate(bench, o.Load.MaxErrorRate)
}

// noteCap says when requests waited for the open loop's default cap on requests in flight: the
// target fell behind, and their wait is in their send lag.
func noteCap(stderr io.Writer, res *loadgen.Result) {
	if res.SlotWaits > 0 && res.Config.InFlightCap > 0 {
		fmt.Fprintf(stderr, "note: %d requests found all %d slots of the default cap on requests in flight taken and waited\n"+
			"(their wait is in their send lag); --concurrency sets another cap\n", res.SlotWaits, res.Config.InFlightCap)
	}
}

// runInfo describes a run of plan p for the reports.
func (o *Load) runInfo(p plan, concurrency, numPrompts int) loadgen.RunInfo {
	var temperature *float64
	if o.SendTemperature {
		temperature = &o.Temperature
	}
	return loadgen.NewRunInfo(o.URL, o.Model, p.desc, p.rate, o.Seed).
		WithLimits(concurrency, numPrompts, o.MaxTokens).WithBurstiness(p.burstiness).
		WithRequests(o.Dataset.String(), o.Stream, temperature).WithProvenance(loadgen.BuildVersion(), os.Args)
}

// multiHost reads --segment and --start-at, and warns when several hosts would send the same
// schedule.
func (o *Options) multiHost(p plan, stderr io.Writer) (*loadgen.SegmentOf, time.Time, error) {
	start, err := startInstant(o.StartAt)
	if err != nil {
		return nil, start, err
	}
	if o.Segment == nil {
		if !o.StartAt.IsZero() || os.Getenv("JOB_COMPLETION_INDEX") != "" {
			fmt.Fprintln(stderr, "warning: every host started together without --segment sends the same seeded schedule, so their\n"+
				"arrivals come in synchronised bursts; give each host --segment i/n (or its own --seed)")
		}
		return nil, start, nil
	}
	switch {
	case p.closedLoop:
		return nil, start, errors.New("--segment shares out a schedule of arrivals: give a --request-rate (a closed loop has none)")
	case o.Load.Warmup > 0:
		return nil, start, errors.New("--segment: use --warmup-duration, the same stretch on every host, rather than --warmup")
	}
	return o.Segment, start, nil
}

// startInstant is the instant of --start-at on the monotonic clock, now when it is zero; an
// instant in the past is an error.
func startInstant(at time.Time) (time.Time, error) {
	now := time.Now()
	if at.IsZero() {
		return now, nil
	}
	wait := at.Sub(now)
	if wait < 0 {
		return now, fmt.Errorf("--start-at %s is %s in the past", at.Format(time.RFC3339Nano), (-wait).Round(time.Millisecond))
	}
	return now.Add(wait), nil
}

// scheduleHash identifies the schedule the flags make: the first items of its workload (their
// intended times, sessions and requests) and its limits. Hosts that build the same schedule
// get the same hash, whatever their URL.
func (o *Load) scheduleHash(rate float64, concurrency, numPrompts int, d time.Duration) (string, error) {
	p, err := o.plan(rate, concurrency)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "ragtail schedule v1\n%s\nprompts %d duration %d warmup %d %d\n", p.desc, numPrompts, d, o.Warmup, o.WarmupDuration)
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

func (o *Options) validate() error {
	switch {
	case o.Concurrency < 0:
		return errors.New("--concurrency must not be negative")
	case o.NumPrompts < 0:
		return errors.New("--num-prompts must not be negative")
	case o.Duration < 0:
		return errors.New("--duration must not be negative")
	case o.NumPrompts == 0 && o.Duration == 0:
		return errors.New("give --num-prompts or --duration: the run would never end")
	case math.IsInf(o.RequestRate, 1) && o.Concurrency == 0 && o.NumPrompts == 0 &&
		!o.Load.Shape.profiled() && !o.Load.Shape.Article:
		return errors.New("an infinite rate without --concurrency sends every request at once: give --num-prompts, a --request-rate or --concurrency")
	case o.Load.MaxTokens < 1:
		return errors.New("--max-tokens must be positive")
	}
	if err := loadgen.CheckConcurrency(o.Concurrency, math.IsInf(o.RequestRate, 1)); err != nil {
		return fmt.Errorf("--concurrency: %w", err)
	}
	if err := o.ServerMetrics.validate(); err != nil {
		return err
	}
	return o.Load.validate()
}

// validate checks the flags bench and sweep share.
func (o *Load) validate() error {
	switch {
	case o.Warmup < 0:
		return errors.New("--warmup must not be negative")
	case o.WarmupDuration < 0:
		return errors.New("--warmup-duration must not be negative")
	case !(o.MaxErrorRate >= 0 && o.MaxErrorRate <= 1):
		return errors.New("--max-error-rate must be between 0 and 1")
	case o.EmbedBatch < 0 || o.EmbedBatch > shape.MaxEmbeddingBatch:
		return fmt.Errorf("--embed-batch must be between 1 and %d", shape.MaxEmbeddingBatch)
	case o.EmbedBatch > 1 && !o.isEmbeddings():
		return errors.New("--embed-batch applies to an embeddings endpoint: give an /embeddings --url (e.g. http://host:8080/v1/embeddings)")
	case o.HTTPClient != "" && !slices.Contains(client.HTTPClients, o.HTTPClient):
		return fmt.Errorf("--http-client %q: want %s", o.HTTPClient, strings.Join(client.HTTPClients, " or "))
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

// WriteOutputs writes the JSON and HTML files asked for, then prints the text report (or the
// JSON, for --json -): files first, so that a closed stdout cannot lose them.
func WriteOutputs(stdout io.Writer, v report.Document, jsonOut, htmlOut string) error {
	if jsonOut != "" && jsonOut != "-" {
		if err := WriteOutput(jsonOut, stdout, func(w io.Writer) error { return report.WriteJSON(w, v) }); err != nil {
			return err
		}
	}
	if htmlOut != "" {
		if err := WriteOutput(htmlOut, stdout, func(w io.Writer) error { return report.WriteHTML(w, v) }); err != nil {
			return err
		}
	}
	if jsonOut == "-" {
		return report.WriteJSON(stdout, v)
	}
	return writeText(stdout, v)
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

// clockProbes is how many model-list requests sample the server's clock before a run.
const clockProbes = 8
