package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/openai"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/telemetry"
	"github.com/ragtail/ragtail/telemetry/profile"
)

// serviceOptions are the settings of the RAG service on its embedded default, shared by serve
// and demo.
type serviceOptions struct {
	profile      string
	kvAlloc      string
	dim          int
	shards       int
	shardLatency lawList
	embedLatency latency.Law
	fetchLatency latency.Law
	cacheSize    int
	bloom        bool
	bloomFP      float64
	coupling     string
	topK         int
	asyncQuorum  int
	asyncDeadln  time.Duration
	workers      int
	queue        int
	queueTimeout time.Duration
	policy       string
	maxTokensCap int
	corpusDocs   int
	seed         uint64
	logLevel     string
	faults       fault.Rules
	telemetry    telemetryOptions
	backends     backendOptions
}

// telemetryOptions are the telemetry flags of serve. The zero value, which demo uses, traces
// into the in-process ring and serves metrics, with no profiler and no trace file; the OTEL_*
// and PYROSCOPE_* environment variables apply either way.
type telemetryOptions struct {
	traceFile     string
	profiling     bool
	profileWindow time.Duration
	profileKeep   int
}

func (o *telemetryOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.traceFile, "trace-file", "", "append every span as a JSON line to this file (for offline analysis)")
	fs.BoolVar(&o.profiling, "profiling", true, "run the built-in continuous profiler (profiles on /debug/profiles; pushed to\nPYROSCOPE_SERVER_ADDRESS when set)")
	fs.DurationVar(&o.profileWindow, "profile-window", profile.DefaultWindow, "length of each profile window")
	fs.IntVar(&o.profileKeep, "profile-keep", profile.DefaultKeep, "profile windows of each kind kept in memory")
}

// Defaults of the embedded service. Shard latency is lognormal with a capped tail: each shard
// stands for a remote index partition answering in a few milliseconds with an occasional slow
// reply, which is what makes the slowest-shard effect of fan-out visible.
const (
	defaultShardLatency = "lognormal:6ms,0.6,2s"
	defaultEmbedLatency = "lognormal:2ms,0.3,1s"
	defaultFetchLatency = "lognormal:1.5ms,0.5,1s"
)

func (o *serviceOptions) register(fs *flag.FlagSet) {
	o.shardLatency = lawList{mustLaw(defaultShardLatency)}
	o.embedLatency = mustLaw(defaultEmbedLatency)
	o.fetchLatency = mustLaw(defaultFetchLatency)
	fs.StringVar(&o.profile, "profile", llmsim.DefaultProfile, "simulated LLM engine profile: "+profileNames())
	fs.StringVar(&o.kvAlloc, "kv-alloc", "", "KV-cache allocation of the simulated engine: paged or contiguous (default: the profile's)")
	fs.IntVar(&o.dim, "dim", 384, "embedding dimension of the hash embedder")
	fs.IntVar(&o.shards, "shards", 4, "number of index shards")
	fs.Var(&o.shardLatency, "shard-latency", "latency law of each shard search, one for all or one per shard separated by ';'\n(none, fixed:5ms, uniform:2ms,8ms, lognormal:MEDIAN,SIGMA[,CAP], pareto:XM,ALPHA[,CAP])")
	fs.Var(lawFlag{&o.embedLatency}, "embed-latency", "latency law of the embedder")
	fs.Var(lawFlag{&o.fetchLatency}, "fetch-latency", "latency law of a doc-store lookup on a cache miss")
	fs.IntVar(&o.cacheSize, "cache-size", 1024, "doc-store LRU cache entries; 0 disables the cache")
	fs.BoolVar(&o.bloom, "bloom", true, "guard the doc store with a Bloom filter of existing ids")
	fs.Float64Var(&o.bloomFP, "bloom-fp", 0.01, "Bloom filter false-positive rate")
	fs.StringVar(&o.coupling, "coupling", "sync", "default coupling of retrieval and generation: sync, fanout or async")
	fs.IntVar(&o.topK, "top-k", pipeline.DefaultTopK, "default number of chunks retrieved per request")
	fs.IntVar(&o.asyncQuorum, "async-quorum", 0, "async coupling: shards that must answer before generation starts (0: a majority)")
	fs.DurationVar(&o.asyncDeadln, "async-deadline", pipeline.DefaultAsyncDeadline, "async coupling: start generation after this long with whatever arrived")
	def := admission.DefaultConfig()
	fs.IntVar(&o.workers, "workers", def.Workers, "admission: requests running the pipeline at once")
	fs.IntVar(&o.queue, "queue", def.QueueCapacity, "admission: requests that may wait for a worker (-1: unbounded)")
	fs.DurationVar(&o.queueTimeout, "queue-timeout", def.QueueTimeout, "admission: longest wait for a worker before a 503 (0: no limit)")
	fs.StringVar(&o.policy, "admission-policy", string(def.Policy), "admission: when the queue is full, reject (503) or wait")
	fs.IntVar(&o.maxTokensCap, "max-tokens-cap", openai.DefaultLimits.MaxTokensCap, "largest max_tokens a request may ask for")
	fs.IntVar(&o.corpusDocs, "corpus-docs", 0, "documents in the built-in corpus (0: the default size)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the corpus and every latency law")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Var(&o.faults, "fault", fault.FlagUsage)
}

// service is the RAG service on its embedded default, wired and ready to serve.
type service struct {
	API       http.Handler
	Admin     http.Handler
	Telemetry *telemetry.Telemetry
	Profiler  *profile.Profiler // nil when profiling is off
	Registry  *prometheus.Registry
	Pipeline  *pipeline.Pipeline
	Engine    *llmsim.Engine
	Docs      *docstore.Store
	Index     *retrieve.Memory
	Model     string
	Profile   string
	Shards    int
	Chunks    int
	Questions []string // questions about the corpus, for demo load
	Pool      *admission.Pool
	Faults    *fault.Injector
	Runtime   *runtime // GET|PUT /admin/config and GET /admin/stats
	closers   []func() error
}

// telemetryShutdownGrace bounds how long Close waits for queued spans and metrics to be
// exported.
const telemetryShutdownGrace = 5 * time.Second

// Close stops the engine, the profiler and background work, and flushes telemetry, in the
// reverse order of their start. It is idempotent.
func (s *service) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

func buildService(ctx context.Context, o serviceOptions, logger *slog.Logger) (_ *service, err error) {
	svc := &service{}
	defer func() {
		if err != nil {
			_ = svc.Close()
		}
	}()
	prof, err := llmsim.ProfileByName(o.profile)
	if err != nil {
		return nil, err
	}
	engineOpts := []llmsim.Option{llmsim.WithSeed(o.seed), llmsim.WithLogger(logger)}
	if o.kvAlloc != "" {
		mode, err := llmsim.ParseAllocMode(o.kvAlloc)
		if err != nil {
			return nil, err
		}
		engineOpts = append(engineOpts, llmsim.WithAlloc(mode))
	}
	coupling, err := rag.ParseCoupling(o.coupling)
	if err != nil {
		return nil, fmt.Errorf("--coupling: %w", err)
	}
	if o.shards < 1 || o.shards > 256 {
		return nil, fmt.Errorf("--shards must be between 1 and 256, got %d", o.shards)
	}
	if len(o.shardLatency) != 1 && len(o.shardLatency) != o.shards {
		return nil, fmt.Errorf("--shard-latency has %d laws for %d shards: give one for all or one per shard", len(o.shardLatency), o.shards)
	}

	if o.telemetry.profiling && o.telemetry.profileWindow < profile.MinWindow {
		return nil, fmt.Errorf("--profile-window must be at least %v, got %v", profile.MinWindow, o.telemetry.profileWindow)
	}
	telCfg, err := telemetry.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("telemetry settings: %w", err)
	}

	telCfg.ServiceVersion = version
	telCfg.TraceFile = o.telemetry.traceFile
	telCfg.Logger = logger
	tel, err := telemetry.Setup(ctx, telCfg)
	if err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), telemetryShutdownGrace)
		defer cancel()
		return tel.Shutdown(sctx)
	})
	tel.LogStartup(logger)
	var tp trace.TracerProvider = tel.TracerProvider
	var profiler *profile.Profiler
	if o.telemetry.profiling {
		profiler, err = profile.Start(profile.Config{
			AppName:           cmp.Or(os.Getenv("PYROSCOPE_APPLICATION_NAME"), profile.DefaultAppName),
			Window:            o.telemetry.profileWindow,
			Keep:              o.telemetry.profileKeep,
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
		case err != nil:
			return nil, fmt.Errorf("profiler: %w", err)
		default:
			svc.closers = append(svc.closers, profiler.Stop)
			tp = profiler.WrapTracerProvider(tp)
		}
	}

	start := time.Now()
	if err := o.backends.validate(); err != nil {
		return nil, err
	}
	btel := backendTelemetry{TracerProvider: tp, MeterProvider: tel.MeterProvider, Propagator: tel.Propagator}
	var emb pipeline.Embedder
	dim := o.dim
	hash, err := embed.NewHash(embed.WithDimension(o.dim), embed.WithSeed(o.seed), embed.WithLatency(o.embedLatency, 0))
	if err != nil {
		return nil, fmt.Errorf("embedder: %w", err)
	}
	emb = hash
	ec, err := openEmbedder(ctx, o.backends, btel, logger)
	if err != nil {
		return nil, err
	}
	if ec != nil {
		emb, dim = ec, ec.Dimension()
	}
	embedderID := o.backends.embedderID(dim, o.seed)
	docOpts := []docstore.Option{docstore.WithSeed(o.seed), docstore.WithFetchLatency(o.fetchLatency), docstore.WithCache(o.cacheSize)}
	if o.bloom {
		docOpts = append(docOpts, docstore.WithBloom(o.bloomFP))
	} else {
		docOpts = append(docOpts, docstore.WithoutBloom())
	}

	var (
		chunks    []rag.Chunk
		questions []string
		ret       pipeline.Retriever
		idx       *retrieve.Memory
		docs      *docstore.Store
		ready     func(context.Context) error
	)
	switch {
	case o.backends.qdrantAddr != "":
		// Qdrant holds the vectors and the payloads; the doc store is filled from it once
		// Qdrant is ready (and again after an ingest while serving).
		docs = docstore.New(nil, docOpts...)
		qb, err := openRetriever(ctx, o.backends, o.shards, dim, embedderID, func(cs []rag.Chunk) error {
			for _, c := range cs {
				if err := docs.Put(c); err != nil {
					return err
				}
			}
			docs.RebuildBloom()
			return nil
		}, btel, logger)
		if err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, qb.Close)
		ret, ready = qb, qb.Ready
		questions = corpus.Questions(corpus.Builtin(corpus.Options{Seed: o.seed, Docs: o.corpusDocs}), 1000, o.seed)
	default:
		idxOpts := []retrieve.Option{retrieve.WithSeed(o.seed)}
		for i, law := range o.shardLatency {
			if len(o.shardLatency) == 1 {
				idxOpts = append(idxOpts, retrieve.WithLatency(law))
				break
			}
			idxOpts = append(idxOpts, retrieve.WithShardLatency(i, law))
		}
		var vecs [][]float32
		if o.backends.snapshot != "" {
			snap, err := loadSnapshot(o.backends.snapshot, embedderID)
			if err != nil {
				return nil, err
			}
			chunks, dim = snap.Chunks, snap.Dim
			if idx, err = retrieve.NewMemory(dim, o.shards, idxOpts...); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
			if err := snap.AddTo(idx); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
		} else {
			if chunks, _, err = builtinCorpus(o); err != nil {
				return nil, err
			}
			if idx, err = retrieve.NewMemory(dim, o.shards, idxOpts...); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
			if ec != nil {
				if vecs, err = embedCorpus(ctx, ec, chunks); err != nil {
					return nil, fmt.Errorf("embed the corpus: %w", err)
				}
			} else {
				vecs = make([][]float32, len(chunks))
				for i, c := range chunks {
					vecs[i] = hash.Vector(chunkText(c))
				}
			}
			ids := make([]string, len(chunks))
			for i, c := range chunks {
				ids[i] = c.ID
			}
			if err := idx.AddBatch(ids, vecs); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
		}
		questions = corpus.Questions(chunks, 1000, o.seed)
		docs = docstore.New(chunks, docOpts...)
		ret = idx
		ready = func(context.Context) error {
			if idx.Len() == 0 {
				return errors.New("the index is empty")
			}
			return nil
		}
	}
	svc.closers = append(svc.closers, docs.Close)

	engine, err := llmsim.New(prof, engineOpts...)
	if err != nil {
		return nil, fmt.Errorf("llm-sim: %w", err)
	}
	engines := newEngineSwitch(engine, engineOpts, logger)
	svc.closers = append(svc.closers, engines.Close)
	if err := tel.Registry.Register(engines); err != nil {
		return nil, fmt.Errorf("llm-sim metrics: %w", err)
	}

	pool, err := admission.NewPool(admission.Config{Workers: o.workers, QueueCapacity: o.queue,
		QueueTimeout: o.queueTimeout, Policy: admission.Policy(o.policy)}, admission.WithClock(tel.Now))
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	var gen pipeline.Generator = engines
	sim := engines
	model := prof.Model
	lc, err := openGenerator(ctx, o.backends, btel, logger)
	if err != nil {
		return nil, err
	}
	if lc != nil {
		svc.closers = append(svc.closers, lc.Close)
		gen, model, sim = lc, lc.Models()[0], nil
	}
	faults, err := fault.NewInjector(o.faults, o.seed)
	if err != nil {
		return nil, fmt.Errorf("--fault: %w", err)
	}
	p, err := pipeline.New(emb, ret, cacheReporting{docs}, gen, pipeline.Config{
		Coupling: coupling, TopK: o.topK, AsyncQuorum: o.asyncQuorum, AsyncDeadline: o.asyncDeadln,
	}, pipeline.WithAdmitter(pool), pipeline.WithFaults(faultHook{faults}), pipeline.WithLogger(logger), pipeline.WithClock(tel.Now),
		pipeline.WithTracerProvider(tp), pipeline.WithMeterProvider(tel.MeterProvider),
		pipeline.WithContentCapture(tel.CaptureContent))
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}

	reg := tel.Registry
	limits := openai.DefaultLimits
	limits.MaxTokensCap = o.maxTokensCap
	if limits.DefaultMaxTokens > limits.MaxTokensCap {
		limits.DefaultMaxTokens = limits.MaxTokensCap
	}
	svc.API = httpapi.New(p, httpapi.WithDocuments(docs), httpapi.WithLimits(limits), httpapi.WithLogger(logger),
		httpapi.WithClock(tel.Now), httpapi.WithTracerProvider(tp), httpapi.WithMeterProvider(tel.MeterProvider),
		httpapi.WithPropagator(tel.Propagator),
		httpapi.WithReadiness(ready))
	rt := newRuntime(o, p, idx, docs, pool, faults, sim)
	svc.Pool, svc.Faults, svc.Runtime = pool, faults, rt
	svc.Admin = httpapi.NewAdmin(reg, httpapi.WithTraces(tel.Ring.Handler()),
		httpapi.WithProfiles(profile.Handler(profiler.Store())), httpapi.WithPprof(profile.PprofHandler()),
		httpapi.WithConfig(rt, httpapi.ConfigAccess{Token: os.Getenv("RAGTAIL_ADMIN_TOKEN"), TrustLoopback: true}),
		httpapi.WithStats(rt.Stats))
	svc.Telemetry, svc.Profiler = tel, profiler
	svc.Registry, svc.Pipeline, svc.Engine, svc.Docs, svc.Index = reg, p, engine, docs, idx
	svc.Model, svc.Profile, svc.Shards, svc.Chunks, svc.Questions = model, prof.Name, o.shards, len(chunks), questions
	logger.Debug("service built", "chunks", len(chunks), "took", time.Since(start))
	return svc, nil
}

// cacheReporting lets the pipeline see how the doc store answered each lookup (cache hit, miss,
// or blocked by the Bloom guard), for rag_cache_requests_total and the rag.fetch span.
type cacheReporting struct{ *docstore.Store }

var _ pipeline.CacheReporter = cacheReporting{}

// LookupResult implements pipeline.CacheReporter.
func (c cacheReporting) LookupResult(ctx context.Context, id string) (rag.Chunk, string, error) {
	chunk, result, err := c.Lookup(ctx, id)
	return chunk, string(result), err
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

func mustLaw(s string) latency.Law {
	law, err := latency.Parse(s)
	if err != nil {
		panic(err)
	}
	return law
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// builtinCorpus returns the built-in corpus and a pool of questions about it.
func builtinCorpus(o serviceOptions) ([]rag.Chunk, []string, error) {
	if o.corpusDocs < 0 {
		return nil, nil, fmt.Errorf("--corpus-docs must not be negative, got %d", o.corpusDocs)
	}
	chunks := corpus.Builtin(corpus.Options{Seed: o.seed, Docs: o.corpusDocs})
	return chunks, corpus.Questions(chunks, 1000, o.seed), nil
}
