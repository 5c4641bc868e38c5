package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/llm"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// backendOptions are the flags that replace a part of the embedded default by a real backend:
// Qdrant for the index, an OpenAI-compatible server for generation or embeddings, or a corpus
// snapshot written by ingest. A zero field leaves the embedded default in place.
type backendOptions struct {
	qdrantAddr             string
	qdrantCollection       string
	qdrantAPIKey           string
	qdrantTLS              bool
	qdrantPool             int
	qdrantKeepalive        time.Duration
	qdrantKeepaliveTimeout time.Duration
	qdrantTimeout          time.Duration

	llmURL               string
	llmModel             string
	llmAPIKey            string
	llmConnectTimeout    time.Duration
	llmFirstTokenTimeout time.Duration
	llmIdleTimeout       time.Duration
	llmRetries           int

	embedURL     string
	embedModel   string
	embedAPIKey  string
	embedTimeout time.Duration
	embedBatch   int

	snapshot string

	// getenv reads the environment (os.Getenv unless a test sets it).
	getenv func(string) string
	// readyEvery is how often the Qdrant readiness watch checks again (default 2 s).
	readyEvery time.Duration
}

// Environment variables backendOptions read. Flags win over them.
const (
	envQdrant       = "RAGTAIL_QDRANT"
	envQdrantAPIKey = "QDRANT_API_KEY"
	envLLMURL       = "RAGTAIL_LLM_URL"
	envEmbedURL     = "RAGTAIL_EMBED_URL"
	envOpenAIAPIKey = "OPENAI_API_KEY"
)

func (o *backendOptions) env(name string) string {
	if o.getenv != nil {
		return o.getenv(name)
	}
	return os.Getenv(name)
}

// register adds every backend flag: what serve takes.
func (o *backendOptions) register(fs *flag.FlagSet) {
	o.registerQdrant(fs)
	o.registerEmbed(fs)
	o.registerLLM(fs)
	fs.StringVar(&o.snapshot, "snapshot", "", "serve the corpus from this snapshot (written by ragtail ingest --snapshot) instead of the built-in one")
}

// registerQdrant adds the Qdrant flags (serve and ingest).
func (o *backendOptions) registerQdrant(fs *flag.FlagSet) {
	fs.StringVar(&o.qdrantAddr, "qdrant", o.env(envQdrant), "Qdrant gRPC address host:port (port 6334) to retrieve from instead of the in-memory index (env "+envQdrant+")")
	fs.StringVar(&o.qdrantCollection, "qdrant-collection", retrieve.DefaultCollection, "Qdrant collection; with several --shards, shard i is the collection NAME_i")
	fs.StringVar(&o.qdrantAPIKey, "qdrant-api-key", "", "Qdrant API key (default $"+envQdrantAPIKey+")")
	fs.BoolVar(&o.qdrantTLS, "qdrant-tls", false, "connect to Qdrant over TLS, verifying its certificate against the system roots")
	fs.IntVar(&o.qdrantPool, "qdrant-pool", retrieve.DefaultQdrantPoolSize, "gRPC connections to Qdrant; calls are spread over them round robin")
	fs.DurationVar(&o.qdrantKeepalive, "qdrant-keepalive", retrieve.DefaultQdrantKeepalive, "gRPC keepalive: ping Qdrant after this long without activity (gRPC's minimum is 10s; negative disables)")
	fs.DurationVar(&o.qdrantKeepaliveTimeout, "qdrant-keepalive-timeout", retrieve.DefaultQdrantKeepaliveTimeout, "gRPC keepalive: drop the connection if a ping is not answered within this")
	fs.DurationVar(&o.qdrantTimeout, "qdrant-timeout", retrieve.DefaultQdrantCallTimeout, "longest a Qdrant search may take before it fails with 504")
}

// registerEmbed adds the embeddings flags (serve and ingest).
func (o *backendOptions) registerEmbed(fs *flag.FlagSet) {
	fs.StringVar(&o.embedURL, "embed-url", o.env(envEmbedURL), "OpenAI-compatible embeddings base URL (e.g. http://localhost:11434/v1) instead of the hash embedder (env "+envEmbedURL+")")
	fs.StringVar(&o.embedModel, "embed-model", "", "embedding model to ask --embed-url for (required with it)")
	fs.StringVar(&o.embedAPIKey, "embed-api-key", "", "embeddings API key (default $"+envOpenAIAPIKey+")")
	fs.DurationVar(&o.embedTimeout, "embed-timeout", 10*time.Second, "longest an embeddings request may take before it fails with 504")
	fs.IntVar(&o.embedBatch, "embed-batch", embed.DefaultBatchSize, "texts per embeddings request when ingesting")
}

// registerLLM adds the LLM flags (serve).
func (o *backendOptions) registerLLM(fs *flag.FlagSet) {
	fs.StringVar(&o.llmURL, "llm-url", o.env(envLLMURL), "OpenAI-compatible base URL (vLLM, Ollama, llama.cpp, OpenAI: e.g. http://localhost:8000/v1)\nto generate with instead of the simulated engine (env "+envLLMURL+")")
	fs.StringVar(&o.llmModel, "llm-model", "", "model(s) to serve from --llm-url, comma-separated (default: the server's list from GET /v1/models at start)")
	fs.StringVar(&o.llmAPIKey, "llm-api-key", "", "LLM API key (default $"+envOpenAIAPIKey+")")
	fs.DurationVar(&o.llmConnectTimeout, "llm-connect-timeout", llm.DefaultConnectTimeout, "longest connecting to --llm-url may take")
	fs.DurationVar(&o.llmFirstTokenTimeout, "llm-first-token-timeout", llm.DefaultFirstTokenTimeout, "longest wait for the first token, retries included, before a 504")
	fs.DurationVar(&o.llmIdleTimeout, "llm-idle-timeout", llm.DefaultIdleTimeout, "longest silence between two tokens before the stream is cut")
	fs.IntVar(&o.llmRetries, "llm-retries", llm.DefaultRetries, "retries of a request that failed before its first token (never after)")
}

// validate checks the backend flags together; the flags of a backend that is not selected are
// not checked (ingest does not even register the LLM's).
func (o *backendOptions) validate() error {
	if o.qdrantAddr != "" {
		switch {
		case o.snapshot != "":
			return errors.New("--qdrant and --snapshot both give the index: choose one")
		case strings.TrimSpace(o.qdrantCollection) == "":
			return errors.New("--qdrant-collection must not be empty")
		case o.qdrantPool < 1:
			return fmt.Errorf("--qdrant-pool must be at least 1, got %d", o.qdrantPool)
		case o.qdrantTimeout <= 0 || o.qdrantKeepaliveTimeout <= 0:
			return fmt.Errorf("--qdrant-timeout and --qdrant-keepalive-timeout must be positive, got %v and %v", o.qdrantTimeout, o.qdrantKeepaliveTimeout)
		}
	}
	if o.embedURL != "" {
		switch {
		case strings.TrimSpace(o.embedModel) == "":
			return fmt.Errorf("--embed-url %s needs --embed-model (the server's embedding model, e.g. nomic-embed-text)", o.embedURL)
		case o.embedTimeout <= 0 || o.embedBatch < 1:
			return fmt.Errorf("--embed-timeout must be positive and --embed-batch at least 1, got %v and %d", o.embedTimeout, o.embedBatch)
		}
	}
	if o.llmURL != "" {
		switch {
		case o.llmConnectTimeout <= 0 || o.llmFirstTokenTimeout <= 0 || o.llmIdleTimeout <= 0:
			return errors.New("--llm-connect-timeout, --llm-first-token-timeout and --llm-idle-timeout must be positive")
		case o.llmRetries < 0:
			return fmt.Errorf("--llm-retries must not be negative, got %d", o.llmRetries)
		}
	}
	return nil
}

// backendTelemetry is what the backends report to; zero fields record nothing.
type backendTelemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
}

// httpClient returns an HTTP client that records otelhttp client spans when a tracer provider is
// set, or nil for the backend's own.
func (t backendTelemetry) httpClient() *http.Client {
	if t.TracerProvider == nil {
		return nil
	}
	mp, prop := t.MeterProvider, t.Propagator
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: otelhttp.NewTransport(tr, otelhttp.WithTracerProvider(t.TracerProvider),
		otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(prop))}
}

// hashEmbedderID names the hash embedder's vectors, for snapshots and collection metadata.
func hashEmbedderID(dim int, seed uint64) string {
	return fmt.Sprintf("hash dim=%d seed=%d", dim, seed)
}

// embedderID names the vectors of the embedder the flags select: the embeddings server's model
// with --embed-url, else the hash embedder of dim and seed.
func (o *backendOptions) embedderID(dim int, seed uint64) string {
	if o.embedURL != "" {
		return fmt.Sprintf("openai model=%s dim=%d", o.embedModel, dim)
	}
	return hashEmbedderID(dim, seed)
}

// openEmbedder returns the embeddings client --embed-url selects, or nil without it. It probes
// the server at once, which also learns the vector size, and fails if the server does not
// answer: the index cannot be built or checked without knowing it.
func openEmbedder(ctx context.Context, o backendOptions, tel backendTelemetry, logger *slog.Logger) (*embed.Client, error) {
	if o.embedURL == "" {
		return nil, nil
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	opts := []embed.ClientOption{embed.WithTimeout(o.embedTimeout), embed.WithBatchSize(o.embedBatch)}
	if key := cmp.Or(o.embedAPIKey, o.env(envOpenAIAPIKey)); key != "" {
		opts = append(opts, embed.WithAPIKey(key))
	}
	if hc := tel.httpClient(); hc != nil {
		opts = append(opts, embed.WithHTTPClient(hc))
	} else if tel.Propagator != nil {
		opts = append(opts, embed.WithPropagator(tel.Propagator))
	}
	c, err := embed.NewClient(o.embedURL, o.embedModel, opts...)
	if err != nil {
		return nil, fmt.Errorf("--embed-url: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.embedTimeout)
	defer cancel()
	if err := c.Probe(pctx); err != nil {
		return nil, fmt.Errorf("embeddings server %s (model %s) did not answer a probe: %w: start it, or drop --embed-url to use the hash embedder", c.Endpoint(), o.embedModel, err)
	}
	logger.Info("embeddings", "url", c.Endpoint(), "model", o.embedModel, "dimension", c.Dimension())
	return c, nil
}

// openGenerator returns the LLM client --llm-url selects, or nil without it. With --llm-model
// it makes no request at start, so the service starts whether the LLM is up or not; without,
// it asks the server for its models and fails if it cannot.
func openGenerator(ctx context.Context, o backendOptions, tel backendTelemetry, logger *slog.Logger) (*llm.Client, error) {
	if o.llmURL == "" {
		return nil, nil
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	opts := []llm.Option{
		llm.WithConnectTimeout(o.llmConnectTimeout),
		llm.WithFirstTokenTimeout(o.llmFirstTokenTimeout),
		llm.WithIdleTimeout(o.llmIdleTimeout),
		llm.WithRetries(o.llmRetries),
	}
	if key := cmp.Or(o.llmAPIKey, o.env(envOpenAIAPIKey)); key != "" {
		opts = append(opts, llm.WithAPIKey(key))
	}
	for m := range strings.SplitSeq(o.llmModel, ",") {
		if m = strings.TrimSpace(m); m != "" {
			opts = append(opts, llm.WithModels(m))
		}
	}
	if tel.TracerProvider != nil {
		opts = append(opts, llm.WithTracerProvider(tel.TracerProvider))
	}
	if tel.MeterProvider != nil {
		opts = append(opts, llm.WithMeterProvider(tel.MeterProvider))
	}
	if tel.Propagator != nil {
		opts = append(opts, llm.WithPropagator(tel.Propagator))
	}
	c, err := llm.New(o.llmURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("--llm-url: %w", err)
	}
	if len(c.Models()) == 0 {
		mctx, cancel := context.WithTimeout(ctx, o.llmConnectTimeout+5*time.Second)
		defer cancel()
		if _, err := c.FetchModels(mctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("list the models of --llm-url %s: %w: start the server, or name the model with --llm-model so that ragtail can start without it", o.llmURL, err)
		}
	}
	logger.Info("llm", "url", c.BaseURL(), "models", strings.Join(c.Models(), ","))
	return c, nil
}

// qdrantBackend is the Qdrant retriever with a readiness watch. Qdrant being down at start
// does not stop the service: /readyz reports why until Qdrant answers with the collections the
// service needs, and searches fail fast with 503 meanwhile. The watch keeps checking, so
// /readyz also follows Qdrant going away and coming back.
type qdrantBackend struct {
	*retrieve.Qdrant
	dim    int
	load   func([]rag.Chunk) error
	logger *slog.Logger
	every  time.Duration

	mu     sync.Mutex
	reason error // nil once ready
	loaded int   // chunk payloads last handed to load

	cancel context.CancelFunc
	done   chan struct{}
}

// openRetriever returns the Qdrant retriever --qdrant selects, or nil without it. shards and
// dim must be the service's: each shard is a Qdrant collection, and every one must hold vectors
// of dim components (the embedder's dimension) written by the embedder named embedder. Once
// Qdrant is ready, load receives every chunk payload stored there (for the doc store), once;
// nil skips that. It never fails because Qdrant is down: see qdrantBackend.
func openRetriever(ctx context.Context, o backendOptions, shards, dim int, embedder string, load func([]rag.Chunk) error,
	tel backendTelemetry, logger *slog.Logger) (*qdrantBackend, error) {
	if o.qdrantAddr == "" {
		return nil, nil
	}
	q, err := newQdrant(o, shards, embedder, tel, logger)
	if err != nil {
		return nil, err
	}
	b := &qdrantBackend{Qdrant: q, dim: dim, load: load, logger: logger, every: o.readyEvery, done: make(chan struct{})}
	if b.every <= 0 {
		b.every = 2 * time.Second
	}
	b.reason = errNotChecked
	if err := b.check(ctx); err != nil {
		logger.Warn("qdrant is not ready; serving anyway: /readyz reports why and searches fail with 503 until it is",
			"qdrant", q.Addr(), "reason", err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel = cancel
	go b.watch(wctx)
	return b, nil
}

// newQdrant makes the Qdrant client the flags describe.
func newQdrant(o backendOptions, shards int, embedder string, tel backendTelemetry, logger *slog.Logger) (*retrieve.Qdrant, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	opts := []retrieve.QdrantOption{
		retrieve.WithPoolSize(o.qdrantPool),
		retrieve.WithKeepalive(o.qdrantKeepalive, o.qdrantKeepaliveTimeout),
		retrieve.WithCallTimeout(o.qdrantTimeout),
		retrieve.WithEmbedder(embedder),
		retrieve.WithLogger(logger),
	}
	if key := cmp.Or(o.qdrantAPIKey, o.env(envQdrantAPIKey)); key != "" {
		opts = append(opts, retrieve.WithAPIKey(key))
	}
	if o.qdrantTLS {
		opts = append(opts, retrieve.WithTLS(nil))
	}
	if tel.TracerProvider != nil {
		opts = append(opts, retrieve.WithTracerProvider(tel.TracerProvider))
	}
	if tel.MeterProvider != nil {
		opts = append(opts, retrieve.WithMeterProvider(tel.MeterProvider))
	}
	if tel.Propagator != nil {
		opts = append(opts, retrieve.WithPropagator(tel.Propagator))
	}
	q, err := retrieve.NewQdrant(o.qdrantAddr, o.qdrantCollection, shards, opts...)
	if err != nil {
		return nil, fmt.Errorf("--qdrant: %w", err)
	}
	if strings.HasSuffix(q.Addr(), ":6333") {
		logger.Warn("port 6333 is Qdrant's REST port; ragtail speaks gRPC, on 6334 by default", "qdrant", q.Addr())
	}
	return q, nil
}

// check checks Qdrant once, (re)loads the payloads when the number of points changed since the
// last load (a first start, or an ingest while serving), and records and logs the outcome.
func (b *qdrantBackend) check(ctx context.Context) error {
	err := b.Check(ctx, b.dim)
	points := 0
	if err == nil {
		points, err = b.Count(ctx)
	}
	switch {
	case err != nil:
	case points == 0:
		err = fmt.Errorf("%w: the collections hold no points: ingest documents first (ragtail ingest DIR --qdrant %s --shards %d)",
			retrieve.ErrCollectionMissing, b.Addr(), b.Shards())
	case b.load != nil && points != b.loadedPoints():
		start := time.Now()
		var chunks []rag.Chunk
		err = b.ScrollChunks(ctx, func(page []rag.Chunk) error { chunks = append(chunks, page...); return nil })
		if err == nil {
			err = b.load(chunks)
		}
		if err != nil {
			err = fmt.Errorf("loading chunk payloads: %w", err)
			break
		}
		b.mu.Lock()
		b.loaded = len(chunks)
		b.mu.Unlock()
		b.logger.Info("loaded chunk payloads from qdrant", "chunks", len(chunks), "took", time.Since(start).Round(time.Millisecond))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	was := b.reason
	b.reason = err
	switch {
	case err == nil && was != nil:
		b.logger.Info("qdrant ready", "qdrant", b.Addr(), "version", b.ServerVersion(), "collection", b.Collection(), "shards", b.Shards())
	case err != nil && was == nil:
		b.logger.Warn("qdrant not ready", "qdrant", b.Addr(), "reason", err)
	case err != nil && kind(err) != kind(was) && !errors.Is(was, errNotChecked):
		b.logger.Warn("qdrant still not ready", "qdrant", b.Addr(), "reason", err)
	}
	return err
}

// errNotChecked is the readiness of a Qdrant not checked yet.
var errNotChecked = errors.New("not checked yet")

// kind classifies a readiness failure, so that the log says when the reason changes (Qdrant
// came up but the collection is missing) without repeating the same reason every check.
func kind(err error) string {
	switch {
	case err == nil:
		return "ready"
	case errors.Is(err, retrieve.ErrCollectionMissing):
		return "missing"
	case errors.Is(err, retrieve.ErrCollectionMismatch):
		return "mismatch"
	}
	return "unavailable"
}

func (b *qdrantBackend) loadedPoints() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loaded
}

func (b *qdrantBackend) watch(ctx context.Context) {
	defer close(b.done)
	t := time.NewTimer(b.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = b.check(ctx)
		t.Reset(b.every)
	}
}

// Ready reports why Qdrant cannot serve, or nil, as of the last check (at most a few seconds
// old); it makes no call itself, so /readyz stays cheap. Give it to httpapi.WithReadiness.
func (b *qdrantBackend) Ready(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reason != nil {
		return fmt.Errorf("qdrant at %s: %w", b.Addr(), b.reason)
	}
	return nil
}

// Close stops the watch and closes the connections. It is idempotent.
func (b *qdrantBackend) Close() error {
	b.cancel()
	<-b.done
	return b.Qdrant.Close()
}

// loadSnapshot reads the snapshot at path and checks that its vectors come from the embedder
// the service embeds queries with (embedder, see backendOptions.embedderID).
func loadSnapshot(path, embedder string) (*retrieve.Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--snapshot: %w", err)
	}
	defer f.Close()
	snap, err := retrieve.ReadSnapshot(f)
	if err != nil {
		return nil, fmt.Errorf("--snapshot %s: %w: write it again with ragtail ingest --snapshot", path, err)
	}
	if snap.Embedder != embedder {
		return nil, fmt.Errorf("--snapshot %s was embedded with %q but queries would be embedded with %q: pass the flags ingest used (--dim, --seed or --embed-url, --embed-model) or ingest again",
			path, snap.Embedder, embedder)
	}
	return snap, nil
}

// embedCorpus embeds chunks with the embeddings server, in batches, for an in-memory index
// served with --embed-url (the hash embedder's vectors are computed directly instead).
func embedCorpus(ctx context.Context, c *embed.Client, chunks []rag.Chunk) ([][]float32, error) {
	texts := make([]string, len(chunks))
	for i, ch := range chunks {
		texts[i] = chunkText(ch)
	}
	vecs, err := c.EmbedBatch(ctx, texts)
	if err != nil {
		return nil, fmt.Errorf("embed the corpus with %s: %w", c.Endpoint(), err)
	}
	return vecs, nil
}

// chunkText is the text of a chunk that is embedded: its title, then its body. Ingest and the
// embedded default must agree on it, or queries will not find what was indexed.
func chunkText(c rag.Chunk) string { return c.Title + "\n" + c.Text }
