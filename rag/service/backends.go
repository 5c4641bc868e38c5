package service

import (
	"context"
	"crypto/tls"
	"errors"
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

// qdrantOptions returns the Qdrant client's telemetry options.
func (t backendTelemetry) qdrantOptions() []retrieve.QdrantOption {
	var opts []retrieve.QdrantOption
	if t.TracerProvider != nil {
		opts = append(opts, retrieve.WithTracerProvider(t.TracerProvider))
	}
	if t.MeterProvider != nil {
		opts = append(opts, retrieve.WithMeterProvider(t.MeterProvider))
	}
	if t.Propagator != nil {
		opts = append(opts, retrieve.WithPropagator(t.Propagator))
	}
	return opts
}

// openEmbedder returns the embeddings client b selects, or nil without it. It probes
// the server at once, which also learns the vector size, and fails if the server does not
// answer: the index cannot be built or checked without knowing it.
func openEmbedder(ctx context.Context, b Backends, tel backendTelemetry, logger *slog.Logger) (*embed.Client, error) {
	o := b.Embed
	if o.URL == "" {
		return nil, nil
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	opts := []embed.ClientOption{embed.WithTimeout(o.Timeout), embed.WithBatchSize(o.Batch)}
	if key := o.APIKey; key != "" {
		opts = append(opts, embed.WithAPIKey(key))
	}
	if hc := tel.httpClient(); hc != nil {
		opts = append(opts, embed.WithHTTPClient(hc))
	} else if tel.Propagator != nil {
		opts = append(opts, embed.WithPropagator(tel.Propagator))
	}
	c, err := embed.NewClient(o.URL, o.Model, opts...)
	if err != nil {
		return nil, fmt.Errorf("--embed-url: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := c.Probe(pctx); err != nil {
		return nil, fmt.Errorf("embeddings server %s (model %s) did not answer a probe: %w: start it, or drop --embed-url to use the hash embedder", c.Endpoint(), o.Model, err)
	}
	logger.Info("embeddings", "url", c.Endpoint(), "model", o.Model, "dimension", c.Dimension())
	return c, nil
}

// openGenerator returns the LLM client b selects, or nil without it. With --llm-model
// it makes no request at start, so the service starts whether the LLM is up or not; without,
// it asks the server for its models and fails if it cannot.
func openGenerator(ctx context.Context, b Backends, tel backendTelemetry, logger *slog.Logger) (*llm.Client, error) {
	o := b.LLM
	if o.URL == "" {
		return nil, nil
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	opts := []llm.Option{
		llm.WithConnectTimeout(o.ConnectTimeout),
		llm.WithFirstTokenTimeout(o.FirstTokenTimeout),
		llm.WithIdleTimeout(o.IdleTimeout),
		llm.WithRetries(o.Retries),
	}
	if o.APIKey != "" {
		opts = append(opts, llm.WithAPIKey(o.APIKey))
	}
	for _, m := range o.Models {
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
	c, err := llm.New(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("--llm-url: %w", err)
	}
	if len(c.Models()) == 0 {
		mctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout+5*time.Second)
		defer cancel()
		if _, err := c.FetchModels(mctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("list the models of --llm-url %s: %w: start the server, or name the model with --llm-model so that ragtail can start without it", o.URL, err)
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

// openRetriever returns the Qdrant retriever b selects, or nil without it. shards and
// dim must be the service's: each shard is a Qdrant collection, and every one must hold vectors
// of dim components (the embedder's dimension) written by the embedder named embedder. Once
// Qdrant is ready, load receives every chunk payload stored there (for the doc store), once;
// nil skips that. It never fails because Qdrant is down: see qdrantBackend.
func openRetriever(ctx context.Context, b Backends, shards, dim int, embedder string, load func([]rag.Chunk) error,
	tel backendTelemetry, logger *slog.Logger) (*qdrantBackend, error) {
	if b.Qdrant.Addr == "" {
		return nil, nil
	}
	q, err := NewQdrant(b, shards, embedder, tel.qdrantOptions(), logger)
	if err != nil {
		return nil, err
	}
	qb := &qdrantBackend{Qdrant: q, dim: dim, load: load, logger: logger, every: b.ReadyEvery, done: make(chan struct{})}
	if qb.every <= 0 {
		qb.every = 2 * time.Second
	}
	qb.reason = errNotChecked
	if err := qb.check(ctx); err != nil {
		logger.Warn("qdrant is not ready; serving anyway: /readyz reports why and searches fail with 503 until it is",
			"qdrant", q.Addr(), "reason", err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	qb.cancel = cancel
	go qb.watch(wctx)
	return qb, nil
}

// NewQdrant makes the Qdrant client b describes, for shards collections holding vectors of the
// embedder named embedder. extra options (telemetry) are appended.
func NewQdrant(b Backends, shards int, embedder string, extra []retrieve.QdrantOption, logger *slog.Logger) (*retrieve.Qdrant, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	o := b.Qdrant
	opts := []retrieve.QdrantOption{
		retrieve.WithPoolSize(o.Pool),
		retrieve.WithKeepalive(o.Keepalive, o.KeepaliveTimeout),
		retrieve.WithCallTimeout(o.Timeout),
		retrieve.WithEmbedder(embedder),
		retrieve.WithLogger(logger),
	}
	if o.APIKey != "" {
		opts = append(opts, retrieve.WithAPIKey(o.APIKey))
	}
	if o.TLS {
		var cfg *tls.Config
		if o.ServerName != "" || o.RootCAs != nil {
			cfg = &tls.Config{ServerName: o.ServerName, RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}
		}
		opts = append(opts, retrieve.WithTLS(cfg))
	}
	opts = append(opts, extra...)
	q, err := retrieve.NewQdrant(o.Addr, o.Collection, shards, opts...)
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

// LoadSnapshot reads the snapshot at path and checks that its vectors come from the embedder
// the service embeds queries with (embedder, see Backends.EmbedderID).
func LoadSnapshot(path, embedder string) (*retrieve.Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--snapshot: %w", err)
	}
	defer func() { _ = f.Close() }() // read only: nothing is lost
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
		texts[i] = ChunkText(ch)
	}
	vecs, err := c.EmbedBatch(ctx, texts)
	if err != nil {
		return nil, fmt.Errorf("embed the corpus with %s: %w", c.Endpoint(), err)
	}
	return vecs, nil
}
