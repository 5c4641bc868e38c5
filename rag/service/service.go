// Package service is the composition root of the ragtail service: New turns a Config into the
// wired service (embedder, index or Qdrant, doc store with its cache and Bloom guard, simulated
// engine or a real LLM, admission pool, fault injector, pipeline, the API and admin handlers)
// and the typed runtime configuration behind /admin/config, validated and applied in one place.
//
// It builds no telemetry of its own: the caller (cmd/ragtail) sets up the OTel SDK and the
// profiler and injects their providers and handlers with WithTelemetry.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/openai"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// Telemetry is what the service reports to and serves from, built by the caller. Zero fields
// record nothing (no-op providers) and leave the matching admin route out.
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
	// Registry is the Prometheus registry /metrics serves; the simulated engine's collector is
	// registered on it. Nil: a fresh registry.
	Registry *prometheus.Registry
	// Now is the clock of spans, profiles and Server-Timing (default time.Now).
	Now func() time.Time
	// CaptureContent records prompt and answer text on spans.
	CaptureContent bool
	// ProfileLabels labels each pipeline stage with the rag_stage and span_id pprof labels
	// (pipeline.WithProfileLabels), so that CPU profiles split by stage and span.
	ProfileLabels bool
	// GenAILatest names the GenAI metrics and attributes after the latest GenAI conventions
	// rather than semantic conventions v1.41 (pipeline.WithGenAILatest).
	GenAILatest bool
	// Traces and Profiles serve /debug/traces and /debug/profiles; CPUProfile serves
	// /debug/pprof/profile (the admin handler serves the other pprof routes).
	Traces, Profiles, CPUProfile http.Handler
	// Pprof serves /debug/pprof/ and everything under it but the redacted cmdline.
	//
	// Deprecated: set CPUProfile.
	Pprof http.Handler
}

// Option configures New.
type Option interface{ apply(*options) }

type options struct {
	tel    Telemetry
	logger *slog.Logger
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithTelemetry injects the providers and handlers the service reports to and serves.
func WithTelemetry(t Telemetry) Option { return optionFunc(func(o *options) { o.tel = t }) }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.logger = l }) }

// Service is the RAG service, wired and ready to serve. Its handlers are safe for concurrent
// use; Close once, after the servers using them have stopped.
type Service struct {
	// API serves the OpenAI-compatible API; Admin the metrics, debug and admin routes.
	API, Admin http.Handler
	// Runtime is the configuration behind GET|PUT /admin/config and GET /admin/stats.
	Runtime *Runtime

	Pipeline *pipeline.Pipeline
	Engine   *llmsim.Engine // the engine at start; nil fields below mean the part is a real backend
	Docs     *docstore.Store
	Index    *retrieve.Memory
	Pool     *admission.Pool
	Faults   *fault.Injector
	Registry *prometheus.Registry

	// Model is the model the service answers for; Profile the simulated engine's profile.
	Model, Profile string
	// Shards and Chunks size the index.
	Shards, Chunks int
	// Questions are questions about the corpus, for demo and lab load.
	Questions []string

	closers []func() error
}

// Close stops the engine and background work, in the reverse order of their start. It is
// idempotent.
func (s *Service) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// New builds the service cfg describes. It fails on invalid settings and on real backends that
// must answer at start (an embeddings server, an LLM without named models); Qdrant being down
// does not stop it (see /readyz).
func New(ctx context.Context, cfg Config, opts ...Option) (_ *Service, err error) {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger, tel := o.logger, o.tel
	if tel.Now == nil {
		tel.Now = time.Now
	}
	if tel.Registry == nil {
		tel.Registry = prometheus.NewRegistry()
	}
	svc := &Service{Registry: tel.Registry}
	defer func() {
		if err != nil {
			err = errors.Join(err, svc.Close())
		}
	}()
	start := time.Now()
	prof, err := llmsim.ProfileByName(cfg.Profile)
	if err != nil {
		return nil, err
	}
	if prof, err = cfg.EngineArgs.Apply(prof); err != nil {
		return nil, fmt.Errorf("engine arguments: %w", err)
	}
	engineOpts := []llmsim.Option{llmsim.WithSeed(cfg.Seed), llmsim.WithLogger(logger), llmsim.WithToolCalls(cfg.ToolCalls)}
	if cfg.KVAlloc != "" {
		mode, err := llmsim.ParseAllocMode(cfg.KVAlloc)
		if err != nil {
			return nil, err
		}
		engineOpts = append(engineOpts, llmsim.WithAlloc(mode))
	}
	coupling, _ := rag.ParseCoupling(cfg.Coupling) // validated

	btel := backendTelemetry{TracerProvider: tel.TracerProvider, MeterProvider: tel.MeterProvider, Propagator: tel.Propagator}
	backends, ls, err := openLinks(cfg.Backends, cfg.Links)
	if err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, ls.Close)
	if mp := tel.MeterProvider; mp != nil && len(cfg.Links) > 0 {
		reg, err := link.Instrument(mp, ls.all)
		if err != nil {
			return nil, fmt.Errorf("link metrics: %w", err)
		}
		svc.closers = append(svc.closers, reg.Unregister)
	}
	cfg.Backends = backends
	var emb pipeline.Embedder
	dim := cfg.Dim
	hash, err := embed.NewHash(embed.WithDimension(cfg.Dim), embed.WithSeed(cfg.Seed), embed.WithLatency(cfg.EmbedLatency, 0))
	if err != nil {
		return nil, fmt.Errorf("embedder: %w", err)
	}
	emb = hash
	ec, err := openEmbedder(ctx, cfg.Backends, btel, logger)
	if err != nil {
		return nil, err
	}
	if ec != nil {
		emb, dim = ec, ec.Dimension()
	}
	embedderID := cfg.Backends.EmbedderID(dim, cfg.Seed)
	docOpts, err := docstoreOptions(cfg, tel, logger, svc)
	if err != nil {
		return nil, err
	}
	var pg *docstore.Postgres
	if cfg.Backends.DocStore != "" {
		pg, err = openPostgres(ctx, cfg.Backends, tel)
		if err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, func() error { pg.Close(); return nil })
	}

	var (
		chunks    []rag.Chunk
		questions []string
		ret       pipeline.Retriever
		idx       *retrieve.Memory
		docs      *docstore.Store
		ready     func(context.Context) error
	)
	if cfg.Backends.Qdrant.Addr != "" {
		// Qdrant holds the vectors and the payloads; the doc store is filled from it once
		// Qdrant is ready (and again after an ingest while serving).
		load := func(cs []rag.Chunk) error {
			for _, c := range cs {
				if err := docs.Put(c); err != nil {
					return err
				}
			}
			docs.RebuildBloom()
			return nil
		}
		if pg != nil {
			// PostgreSQL holds the payloads: Qdrant's copies are not loaded.
			if docs, err = docstore.Compose(ctx, pg, docOpts...); err != nil {
				return nil, fmt.Errorf("doc store: %w", err)
			}
			load = nil
		} else {
			docs = docstore.New(nil, docOpts...)
		}
		qb, err := openRetriever(ctx, cfg.Backends, cfg.Shards, dim, embedderID, load, btel, logger)
		if err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, qb.Close)
		ret, ready = qb, qb.Ready
		questions = corpus.Questions(corpus.Builtin(corpus.Options{Seed: cfg.Seed, Docs: cfg.CorpusDocs}), 1000, cfg.Seed)
	} else {
		if idx, chunks, err = memoryIndex(ctx, cfg, dim, embedderID, hash, ec); err != nil {
			return nil, err
		}
		dim = idx.Dimension()
		questions = corpus.Questions(chunks, 1000, cfg.Seed)
		if pg != nil {
			if docs, err = docstore.Compose(ctx, pg, docOpts...); err != nil {
				return nil, fmt.Errorf("doc store: %w", err)
			}
			if n := docs.Len(); n < len(chunks) {
				logger.Warn("the doc store holds fewer chunks than the index serves: ingest them (ragtail ingest --docstore URL, with the flags of this corpus)",
					"docstore_chunks", n, "index_chunks", len(chunks))
			}
		} else {
			docs = docstore.New(chunks, docOpts...)
		}
		ret = idx
		ready = func(context.Context) error {
			if idx.Len() == 0 {
				return errors.New("the index is empty")
			}
			return nil
		}
	}
	svc.closers = append(svc.closers, docs.Close)
	if pg != nil {
		ready = allReady(ready, func(ctx context.Context) error {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := pg.Ping(pctx); err != nil {
				return fmt.Errorf("doc store: %w", err)
			}
			return nil
		})
	}

	engine, err := llmsim.New(prof, engineOpts...)
	if err != nil {
		return nil, fmt.Errorf("llm-sim: %w", err)
	}
	engines := newEngineSwitch(engine, engineOpts, logger)
	svc.closers = append(svc.closers, engines.Close)
	if err := tel.Registry.Register(engines); err != nil {
		return nil, fmt.Errorf("llm-sim metrics: %w", err)
	}
	if cfg.Backends.LLM.URL != "" && cfg.Admission.Adaptive.Enabled {
		// The limit follows the simulated engine's reports of its latency; a real LLM server
		// makes none, so the limit would stay where it starts.
		cfg.Admission.Adaptive.Enabled = false
		logger.Info("adaptive concurrency limit off: it follows the simulated engine's latency, and generation goes to --llm-url (size --workers for that server)")
	}
	pool, err := admission.NewPool(cfg.Admission, admission.WithClock(tel.Now))
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	engines.observe = pool.Observe
	if mp := tel.MeterProvider; mp != nil {
		reg, err := admission.Instrument(mp, pool)
		if err != nil {
			return nil, fmt.Errorf("admission metrics: %w", err)
		}
		svc.closers = append(svc.closers, reg.Unregister)
	}
	var gen pipeline.Generator = engines
	sim := engines
	model := prof.Model
	lc, err := openGenerator(ctx, cfg.Backends, btel, logger)
	if err != nil {
		return nil, err
	}
	if lc != nil {
		svc.closers = append(svc.closers, lc.Close)
		gen, model, sim = lc, lc.Models()[0], nil
	}
	faults, err := fault.NewInjector(cfg.Faults, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("--fault: %w", err)
	}
	popts := []pipeline.Option{pipeline.WithAdmitter(pool), pipeline.WithFaults(faultHook{faults}),
		pipeline.WithLogger(logger), pipeline.WithClock(tel.Now), pipeline.WithContentCapture(tel.CaptureContent),
		pipeline.WithGenAILatest(tel.GenAILatest), pipeline.WithProfileLabels(tel.ProfileLabels)}
	if tel.TracerProvider != nil {
		popts = append(popts, pipeline.WithTracerProvider(tel.TracerProvider))
	}
	if tel.MeterProvider != nil {
		popts = append(popts, pipeline.WithMeterProvider(tel.MeterProvider))
	}
	p, err := pipeline.New(emb, ret, cacheReporting{docs}, gen, pipeline.Config{
		Coupling: coupling, TopK: cfg.TopK, AsyncQuorum: cfg.AsyncQuorum, AsyncDeadline: cfg.AsyncDeadline, HedgeAfter: cfg.HedgeAfter,
		ChunkOrder: pipeline.ChunkOrder(cfg.ChunkOrder),
	}, popts...)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}

	limits := openai.DefaultLimits
	limits.MaxTokensCap = cfg.MaxTokensCap
	if limits.DefaultMaxTokens > limits.MaxTokensCap {
		limits.DefaultMaxTokens = limits.MaxTokensCap
	}
	apiOpts := []httpapi.Option{httpapi.WithDocuments(docs), httpapi.WithLimits(limits), httpapi.WithLogger(logger),
		httpapi.WithClock(tel.Now), httpapi.WithReadiness(ready), httpapi.WithRouteFaults(faultHook{faults})}
	if e, ok := emb.(httpapi.Embedder); ok {
		apiOpts = append(apiOpts, httpapi.WithEmbeddings(e), httpapi.WithAdmission(pool))
	}
	if tel.TracerProvider != nil {
		apiOpts = append(apiOpts, httpapi.WithTracerProvider(tel.TracerProvider))
	}
	if tel.MeterProvider != nil {
		apiOpts = append(apiOpts, httpapi.WithMeterProvider(tel.MeterProvider))
	}
	if tel.Propagator != nil {
		apiOpts = append(apiOpts, httpapi.WithPropagator(tel.Propagator))
	}
	svc.API = httpapi.New(p, apiOpts...)
	rt := newRuntime(cfg, p, idx, docs, pool, faults, sim, ls)
	adminOpts := []httpapi.AdminOption{
		httpapi.WithAccess(httpapi.AdminAccess{Token: cfg.AdminToken, ListenAddr: cfg.AdminAddr}),
		httpapi.WithConfig(rt),
		httpapi.WithStats(func() any { return rt.Stats() }),
	}
	if tel.Traces != nil {
		adminOpts = append(adminOpts, httpapi.WithTraces(tel.Traces))
	}
	if tel.Profiles != nil {
		adminOpts = append(adminOpts, httpapi.WithProfiles(tel.Profiles))
	}
	if tel.CPUProfile != nil {
		adminOpts = append(adminOpts, httpapi.WithCPUProfile(tel.CPUProfile))
	}
	if tel.Pprof != nil {
		adminOpts = append(adminOpts, httpapi.WithPprof(tel.Pprof)) //nolint:staticcheck // the deprecated field still works
	}
	svc.Admin = httpapi.NewAdmin(tel.Registry, adminOpts...)
	svc.Runtime, svc.Pool, svc.Faults = rt, pool, faults
	svc.Pipeline, svc.Engine, svc.Docs, svc.Index = p, engine, docs, idx
	svc.Model, svc.Profile, svc.Shards, svc.Chunks, svc.Questions = model, prof.Name, cfg.Shards, len(chunks), questions
	logger.Debug("service built", "chunks", len(chunks), "dim", dim, "took", time.Since(start))
	return svc, nil
}

// memoryIndex builds the sharded in-memory index: from the snapshot cfg names, or from the
// built-in corpus embedded by the embeddings server ec (when set) or the hash embedder.
func memoryIndex(ctx context.Context, cfg Config, dim int, embedderID string, hash *embed.Hash, ec *embed.Client) (*retrieve.Memory, []rag.Chunk, error) {
	idxOpts := []retrieve.Option{retrieve.WithSeed(cfg.Seed)}
	for i, law := range cfg.ShardLatency {
		if len(cfg.ShardLatency) == 1 {
			idxOpts = append(idxOpts, retrieve.WithLatency(law))
			break
		}
		idxOpts = append(idxOpts, retrieve.WithShardLatency(i, law))
	}
	if cfg.Backends.Snapshot != "" {
		snap, err := LoadSnapshot(cfg.Backends.Snapshot, embedderID)
		if err != nil {
			return nil, nil, err
		}
		idx, err := retrieve.NewMemory(snap.Dim, cfg.Shards, idxOpts...)
		if err == nil {
			err = snap.AddTo(idx)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("index: %w", err)
		}
		return idx, snap.Chunks, nil
	}
	chunks := corpus.Builtin(corpus.Options{Seed: cfg.Seed, Docs: cfg.CorpusDocs})
	idx, err := retrieve.NewMemory(dim, cfg.Shards, idxOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("index: %w", err)
	}
	var vecs [][]float32
	if ec != nil {
		if vecs, err = embedCorpus(ctx, ec, chunks); err != nil {
			return nil, nil, fmt.Errorf("embed the corpus: %w", err)
		}
	} else {
		vecs = make([][]float32, len(chunks))
		for i, c := range chunks {
			vecs[i] = hash.Vector(ChunkText(c))
		}
	}
	ids := make([]string, len(chunks))
	for i, c := range chunks {
		ids[i] = c.ID
	}
	if err := idx.AddBatch(ids, vecs); err != nil {
		return nil, nil, fmt.Errorf("index: %w", err)
	}
	return idx, chunks, nil
}

// docstoreOptions are the doc store's cache, Bloom guard and latency options cfg asks for. A
// Redis cache tier is opened here and closed with svc.
func docstoreOptions(cfg Config, tel Telemetry, logger *slog.Logger, svc *Service) ([]docstore.Option, error) {
	opts := []docstore.Option{docstore.WithSeed(cfg.Seed), docstore.WithFetchLatency(cfg.FetchLatency),
		docstore.WithCache(cfg.CacheSize), docstore.WithLogger(logger), docstore.WithConcurrency(cfg.Backends.DocStoreConcurrency)}
	if cfg.Bloom {
		opts = append(opts, docstore.WithBloom(cfg.BloomFP))
	} else {
		opts = append(opts, docstore.WithoutBloom())
	}
	if !isRedisURL(cfg.Backends.Cache) {
		policy, err := docstore.ParseCachePolicy(cfg.Backends.Cache)
		if err != nil {
			return nil, fmt.Errorf("--cache: %w", err)
		}
		return append(opts, docstore.WithCachePolicy(policy)), nil
	}
	ropts := []docstore.RedisOption{docstore.WithRedisLogger(logger)}
	if tel.TracerProvider != nil {
		ropts = append(ropts, docstore.WithRedisTracerProvider(tel.TracerProvider))
	}
	if tel.MeterProvider != nil {
		ropts = append(ropts, docstore.WithRedisMeterProvider(tel.MeterProvider))
	}
	r, err := docstore.OpenRedis(cfg.Backends.Cache, ropts...)
	if err != nil {
		return nil, fmt.Errorf("--cache: %w", err)
	}
	svc.closers = append(svc.closers, r.Close)
	return append(opts, docstore.WithCacheTier(r)), nil
}

// openPostgres opens the PostgreSQL doc store b names.
func openPostgres(ctx context.Context, b Backends, tel Telemetry) (*docstore.Postgres, error) {
	opts := []docstore.PostgresOption{docstore.WithPoolSize(b.DocStorePool)}
	if tel.TracerProvider != nil {
		opts = append(opts, docstore.WithPostgresTracerProvider(tel.TracerProvider))
	}
	if tel.MeterProvider != nil {
		opts = append(opts, docstore.WithPostgresMeterProvider(tel.MeterProvider))
	}
	pg, err := docstore.OpenPostgres(ctx, b.DocStore, opts...)
	if err != nil {
		return nil, fmt.Errorf("--docstore: %w: start PostgreSQL, or drop --docstore to keep the payloads in memory", err)
	}
	return pg, nil
}

// allReady returns a readiness check failing with the first failing check's reason.
func allReady(checks ...func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, check := range checks {
			if check == nil {
				continue
			}
			if err := check(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}
