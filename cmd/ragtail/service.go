package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/service"
	"github.com/ragtail/ragtail/telemetry"
	"github.com/ragtail/ragtail/telemetry/profile"
)

// serviceOptions are the flags of the RAG service on its embedded default, shared by serve,
// demo and lab: the service's Config plus what only the command line has.
type serviceOptions struct {
	fs        *flag.FlagSet // the flags registered, to tell which were set
	cfg       service.Config
	logLevel  string
	telemetry telemetryOptions
	backends  backendOptions
}

// telemetryOptions are the telemetry flags of serve. The zero value, which demo uses, traces
// into the in-process ring and serves metrics, with no profiler and no trace file; the OTEL_*
// and PYROSCOPE_* environment variables apply either way.
type telemetryOptions struct {
	traceFile     string
	profiling     bool
	profileWindow time.Duration
	profileKeep   int
	wallRate      float64
}

func (o *telemetryOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.traceFile, "trace-file", "", "append every span as a JSON line to this file (for offline analysis)")
	fs.BoolVar(&o.profiling, "profiling", true, "run the built-in continuous profiler (profiles on /debug/profiles; pushed to\nPYROSCOPE_SERVER_ADDRESS when set)")
	fs.DurationVar(&o.profileWindow, "profile-window", profile.DefaultWindow, "length of the profile windows pushed to PYROSCOPE_SERVER_ADDRESS (the in-process store keeps\n1 s windows)")
	fs.IntVar(&o.profileKeep, "profile-keep", profile.DefaultKeep, "profile windows of each kind kept in memory")
	fs.Float64Var(&o.wallRate, "profile-wall-rate", profile.DefaultWallRate, "labelled goroutine snapshots per second for the wall-clock view (where requests waited);\nnegative turns it off")
}

func (o *serviceOptions) register(fs *flag.FlagSet) {
	o.cfg = service.DefaultConfig()
	c := &o.cfg
	fs.StringVar(&c.Profile, "profile", c.Profile, "simulated LLM engine profile: "+profileNames())
	fs.StringVar(&c.KVAlloc, "kv-alloc", "", "KV-cache allocation of the simulated engine: paged or contiguous (default: the profile's)")
	fs.Func("llm-sim-args", "vLLM engine `flags` of the embedded simulated engine, as ragtail llm-sim takes them, in one\nstring: '--enable-prefix-caching --max-num-seqs 64' (engine flags only)", func(v string) error {
		a, err := parseEngineArgs(v)
		c.EngineArgs = a
		return err
	})
	fs.IntVar(&c.Dim, "dim", c.Dim, "embedding dimension of the hash embedder")
	fs.IntVar(&c.Shards, "shards", c.Shards, "number of index shards")
	fs.Var((*lawList)(&c.ShardLatency), "shard-latency", "latency law of each shard search, one for all or one per shard separated by ';'\n(none, fixed:5ms, uniform:2ms,8ms, lognormal:MEDIAN,SIGMA[,CAP], pareto:XM,ALPHA[,CAP])")
	fs.Var(lawFlag{&c.EmbedLatency}, "embed-latency", "latency law of the embedder")
	fs.Var(lawFlag{&c.FetchLatency}, "fetch-latency", "latency law of a doc-store lookup on a cache miss")
	fs.IntVar(&c.CacheSize, "cache-size", c.CacheSize, "doc-store LRU cache entries; 0 disables the cache")
	fs.BoolVar(&c.Bloom, "bloom", c.Bloom, "guard the doc store with a Bloom filter of existing ids")
	fs.Float64Var(&c.BloomFP, "bloom-fp", c.BloomFP, "Bloom filter false-positive rate")
	fs.StringVar(&c.Coupling, "coupling", c.Coupling, "default coupling of retrieval and generation: sync, fanout or async")
	fs.IntVar(&c.TopK, "top-k", c.TopK, "default number of chunks retrieved per request")
	fs.IntVar(&c.AsyncQuorum, "async-quorum", 0, "async coupling: shards that must answer before generation starts (0: a majority)")
	fs.DurationVar(&c.AsyncDeadline, "async-deadline", c.AsyncDeadline, "async coupling: start generation after this long with whatever arrived")
	a := &c.Admission
	fs.IntVar(&a.Workers, "workers", a.Workers, "admission: requests running the pipeline at once")
	fs.IntVar(&a.QueueCapacity, "queue", a.QueueCapacity, "admission: requests that may wait for a worker (-1: unbounded)")
	fs.DurationVar(&a.QueueTimeout, "queue-timeout", a.QueueTimeout, "admission: longest wait for a worker before a 503 (0: no limit)")
	fs.Var((*policyFlag)(&a.Policy), "admission-policy", "admission: when the queue is full, reject (503) or wait")
	fs.Var((*queueTargetFlag)(&a.QueueTarget), "queue-target", "admission: shed on arrival (503 + Retry-After) a request whose wait, predicted from the measured\nservice time, exceeds this: auto (half the mean service time, at most 1s), off, or a duration")
	fs.IntVar(&c.MaxTokensCap, "max-tokens-cap", c.MaxTokensCap, "largest max_tokens a request may ask for")
	fs.IntVar(&c.CorpusDocs, "corpus-docs", 0, "documents in the built-in corpus (0: the default size)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the corpus and every latency law")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Var(&c.Faults, "fault", fault.FlagUsage)
	fs.IntVar(&c.Backends.DocStoreConcurrency, "docstore-concurrency", 0, "lookups the in-memory doc store serves at once, each for its --fetch-latency (0: unbounded)")
	fs.Var((*linkFlags)(&c.Links), "link", "network link to a real backend, repeatable: NAME=TOXICS, NAME one of qdrant, llm, embed, docstore,\ncache; TOXICS comma-separated: latency:5ms, jitter:1ms, bandwidth:1000 (KB/s), slow_close:100ms,\ntimeout:1s, reset_peer:0, limit_data:1000000, or none (a link whose toxics change at run time)")
	o.fs = fs
}

// set reports whether the flag name was given on the command line.
func (o *serviceOptions) set(name string) bool {
	found := false
	if o.fs != nil {
		o.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	}
	return found
}

// policyFlag is a flag.Value holding an admission policy.
type policyFlag admission.Policy

func (p *policyFlag) String() string { return string(*p) }

func (p *policyFlag) Set(s string) error { *p = policyFlag(s); return nil }

// queueTargetFlag is a flag.Value holding an admission queue target.
type queueTargetFlag time.Duration

func (q *queueTargetFlag) String() string { return admission.FormatQueueTarget(time.Duration(*q)) }

func (q *queueTargetFlag) Set(s string) error {
	d, err := admission.ParseQueueTarget(s)
	*q = queueTargetFlag(d)
	return err
}

// config returns the service's Config with the environment applied and, when withBackends,
// the backend flags (serve registers them; demo and lab run the embedded default).
func (o *serviceOptions) config(withBackends bool) service.Config {
	cfg := o.cfg
	if withBackends {
		concurrency := cfg.Backends.DocStoreConcurrency
		cfg.Backends = o.backends.config()
		cfg.Backends.DocStoreConcurrency = concurrency
		if cfg.Backends.DocStore != "" && !o.set("fetch-latency") {
			// A real store has its own service time; the simulated one is for the memory store.
			cfg.FetchLatency = latency.Law{}
		}
	}
	cfg.AdminToken = os.Getenv("RAGTAIL_ADMIN_TOKEN")
	return cfg
}

// telemetryShutdownGrace bounds how long shutdown waits for queued spans and metrics to be
// exported.
const telemetryShutdownGrace = 5 * time.Second

// runningService is the service with the telemetry cmd set up for it.
type runningService struct {
	*service.Service
	telemetry *telemetry.Telemetry
	stop      []func() error
}

// Close closes the service, then stops the profiler and flushes telemetry. It is idempotent.
func (s *runningService) Close() error {
	var errs []error
	if s.Service != nil {
		errs = append(errs, s.Service.Close())
	}
	for i := len(s.stop) - 1; i >= 0; i-- {
		errs = append(errs, s.stop[i]())
	}
	s.stop = nil
	return errors.Join(errs...)
}

// buildService sets up telemetry (the OTel SDK from the OTEL_* variables, the in-process trace
// ring, the continuous profiler) and builds the service on it.
func buildService(ctx context.Context, cfg service.Config, to telemetryOptions, logger *slog.Logger) (_ *runningService, err error) {
	if to.profiling && to.profileWindow < profile.MinWindow {
		return nil, fmt.Errorf("--profile-window must be at least %v, got %v", profile.MinWindow, to.profileWindow)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	telCfg, err := telemetry.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("telemetry settings: %w", err)
	}
	telCfg.ServiceVersion = version
	telCfg.TraceFile = to.traceFile
	telCfg.Logger = logger
	tel, err := telemetry.Setup(ctx, telCfg)
	if err != nil {
		return nil, err
	}
	rs := &runningService{telemetry: tel}
	rs.stop = append(rs.stop, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), telemetryShutdownGrace)
		defer cancel()
		return tel.Shutdown(sctx)
	})
	defer func() {
		if err != nil {
			err = errors.Join(err, rs.Close())
		}
	}()
	tel.LogStartup(logger)
	var tp trace.TracerProvider = tel.TracerProvider
	var profiler *profile.Profiler
	if to.profiling {
		profiler, err = profile.Start(profile.Config{
			AppName:           cmp.Or(os.Getenv("PYROSCOPE_APPLICATION_NAME"), profile.DefaultAppName),
			Window:            to.profileWindow,
			Keep:              to.profileKeep,
			WallRate:          to.wallRate,
			ServerAddress:     os.Getenv("PYROSCOPE_SERVER_ADDRESS"),
			BasicAuthUser:     os.Getenv("PYROSCOPE_BASIC_AUTH_USER"),
			BasicAuthPassword: os.Getenv("PYROSCOPE_BASIC_AUTH_PASSWORD"),
			TenantID:          os.Getenv("PYROSCOPE_TENANT_ID"),
			Now:               tel.Now,
			Logger:            logger,
		})
		switch {
		case errors.Is(err, profile.ErrRunning):
			// Another service in this process (tests, an embedding program) holds the CPU
			// profiler; serving matters more than profiling.
			logger.Warn("continuous profiler not started: another one runs in this process", "err", err)
			err = nil
		case err != nil:
			return nil, fmt.Errorf("profiler: %w", err)
		default:
			rs.stop = append(rs.stop, profiler.Stop)
			tp = profiler.WrapTracerProvider(tp)
		}
	}
	svc, err := service.New(ctx, cfg, service.WithLogger(logger), service.WithTelemetry(service.Telemetry{
		TracerProvider: tp, MeterProvider: tel.MeterProvider, Propagator: tel.Propagator,
		Registry: tel.Registry, Now: tel.Now, CaptureContent: tel.CaptureContent,
		Traces: tel.Ring.Handler(), Profiles: profile.Handler(profiler.Store()), CPUProfile: profile.CPUProfileHandler(),
	}))
	if err != nil {
		return nil, err
	}
	rs.Service = svc
	return rs, nil
}

func profileNames() string {
	var names []string
	for _, p := range llmsim.Profiles() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// lawFlag is a flag.Value holding one latency law.
type lawFlag struct{ law *latency.Law }

func (f lawFlag) String() string {
	if f.law == nil {
		return ""
	}
	return f.law.String()
}

func (f lawFlag) Set(s string) error { return f.law.UnmarshalText([]byte(s)) }

// lawList is a flag.Value holding latency laws separated by ';'.
type lawList []latency.Law

func (l *lawList) String() string {
	var parts []string
	for _, law := range *l {
		parts = append(parts, law.String())
	}
	return strings.Join(parts, ";")
}

func (l *lawList) Set(s string) error {
	var out lawList
	for part := range strings.SplitSeq(s, ";") {
		law, err := latency.Parse(part)
		if err != nil {
			return err
		}
		out = append(out, law)
	}
	*l = out
	return nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// engineFlagNames are the llm-sim flags that --llm-sim-args passes to the embedded engine.
var engineFlagNames = []string{"max-num-seqs", "max-model-len", "max-num-batched-tokens", "block-size",
	"num-gpu-blocks-override", "gpu-memory-utilization", "enable-chunked-prefill", "no-enable-chunked-prefill",
	"enable-prefix-caching", "no-enable-prefix-caching"}

// parseEngineArgs parses --llm-sim-args: llm-sim's engine flags, separated by spaces.
func parseEngineArgs(v string) (llmsim.EngineArgs, error) {
	var o llmSimOptions
	fs := flag.NewFlagSet("llm-sim-args", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b := o.register(fs)
	if err := fs.Parse(strings.Fields(v)); err != nil {
		return o.engine, fmt.Errorf("%w (engine flags: --%s)", err, strings.Join(engineFlagNames, ", --"))
	}
	if fs.NArg() > 0 {
		return o.engine, fmt.Errorf("unexpected argument %.64q: give engine flags only", fs.Arg(0))
	}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		if bad == nil && !slices.Contains(engineFlagNames, f.Name) {
			bad = fmt.Errorf("--%s is not an engine flag (engine flags: --%s)", f.Name, strings.Join(engineFlagNames, ", --"))
		}
	})
	if bad != nil {
		return o.engine, bad
	}
	err := b.resolve(fs, &o.engine)
	return o.engine, err
}
