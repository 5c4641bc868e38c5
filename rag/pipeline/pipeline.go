package pipeline

import (
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
)

// Defaults filled in for zero Config fields.
const (
	// DefaultTopK is the number of hits taken from each shard and of chunks put in the prompt.
	DefaultTopK = 5
	// MaxTopK is the largest TopK accepted, the same bound the HTTP API puts on rag.top_k.
	MaxTopK = 100
	// DefaultAsyncDeadline is how long async coupling waits for its quorum before it generates
	// with whatever arrived. 100 ms is a few times a healthy shard's search latency, so it only
	// cuts off shards that are in their tail.
	DefaultAsyncDeadline = 100 * time.Millisecond
	// DefaultSystemPrompt opens the context message when Config.SystemPrompt is empty.
	DefaultSystemPrompt = "Answer the user's question using the numbered context passages below and cite them like [1]. If they do not contain the answer, say so."
)

// Config holds the pipeline settings that may change at run time (see SetConfig). Zero fields
// take the defaults documented on each.
type Config struct {
	// Coupling is used when a query sets none; "" means rag.CouplingSync.
	Coupling rag.Coupling
	// TopK is used when a query sets none: the hits taken from each shard and the chunks put in
	// the prompt; 0 means DefaultTopK. At most MaxTopK.
	TopK int
	// AsyncQuorum is how many shards must answer before async coupling starts generating; 0
	// means a majority, Shards/2+1 (the smallest count that is more than half, so the answer
	// always rests on most of the corpus). A quorum above the shard count is clamped to it at
	// run time, because the shard count can change while the config does not.
	AsyncQuorum int
	// AsyncDeadline, measured from the start of retrieval, is when async coupling starts
	// generating with whatever has arrived, quorum or not; if nothing has arrived by then it
	// waits for the first shard. 0 means DefaultAsyncDeadline.
	AsyncDeadline time.Duration
	// SystemPrompt opens the context message that carries the retrieved chunks; "" means
	// DefaultSystemPrompt.
	SystemPrompt string
	// ChunkOrder is the order of the chunks in the prompt; "" means ChunkOrderScore.
	ChunkOrder ChunkOrder
	// HedgeAfter, when positive, hedges shard searches ("The Tail at Scale"): a search still
	// unanswered after it gets a second, identical request (to another replica, in a replicated
	// store; the in-memory index draws the second one's latency anew), the first answer wins
	// and the other is cancelled. 0 sends one request per shard.
	HedgeAfter time.Duration
}

// ChunkOrder is the order in which the retrieved chunks are placed in the prompt.
type ChunkOrder string

const (
	// ChunkOrderScore places the chunks in rank order, the best first.
	ChunkOrderScore ChunkOrder = "score"
	// ChunkOrderStable places them by chunk id, whatever their scores: requests that retrieve
	// the same chunks, or the same first ones, send the same prompt prefix, which an engine's
	// prefix cache can reuse.
	ChunkOrderStable ChunkOrder = "stable"
)

// ParseChunkOrder reads a chunk order: score or stable ("" is score).
func ParseChunkOrder(s string) (ChunkOrder, error) {
	switch o := ChunkOrder(s); o {
	case "", ChunkOrderScore:
		return ChunkOrderScore, nil
	case ChunkOrderStable:
		return o, nil
	}
	return "", fmt.Errorf("%w: chunk order %.40q: want score or stable", rag.ErrInvalidRequest, s)
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		Coupling:      rag.CouplingSync,
		TopK:          DefaultTopK,
		AsyncDeadline: DefaultAsyncDeadline,
		SystemPrompt:  DefaultSystemPrompt,
	}
}

// Validate reports whether c is usable, with a message saying what to change. Errors match
// rag.ErrInvalidRequest.
func (c Config) Validate() error {
	if c.Coupling != "" && !validCoupling(c.Coupling) {
		return fmt.Errorf("%w: coupling %q: want sync, fanout or async", rag.ErrInvalidRequest, c.Coupling)
	}
	if _, err := ParseChunkOrder(string(c.ChunkOrder)); err != nil {
		return err
	}
	switch {
	case c.TopK < 0 || c.TopK > MaxTopK:
		return fmt.Errorf("%w: top_k must be between 1 and %d (0 for the default %d), got %d", rag.ErrInvalidRequest, MaxTopK, DefaultTopK, c.TopK)
	case c.AsyncQuorum < 0:
		return fmt.Errorf("%w: async quorum must be positive (0 for a majority of shards), got %d", rag.ErrInvalidRequest, c.AsyncQuorum)
	case c.AsyncDeadline < 0:
		return fmt.Errorf("%w: async deadline must be positive (0 for the default %v), got %v", rag.ErrInvalidRequest, DefaultAsyncDeadline, c.AsyncDeadline)
	case c.HedgeAfter < 0:
		return fmt.Errorf("%w: hedge delay must be positive (0 for no hedging), got %v", rag.ErrInvalidRequest, c.HedgeAfter)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Coupling == "" {
		c.Coupling = rag.CouplingSync
	}
	if c.TopK == 0 {
		c.TopK = DefaultTopK
	}
	if c.AsyncDeadline == 0 {
		c.AsyncDeadline = DefaultAsyncDeadline
	}
	if c.SystemPrompt == "" {
		c.SystemPrompt = DefaultSystemPrompt
	}
	return c
}

// quorum returns the async quorum for a retriever with the given number of shards.
func (c Config) quorum(shards int) int {
	q := c.AsyncQuorum
	if q == 0 {
		q = shards/2 + 1
	}
	return min(q, shards)
}

// Option configures a Pipeline.
type Option interface{ apply(*options) }

type options struct {
	admitter       Admitter
	faults         FaultInjector
	logger         *slog.Logger
	now            func() time.Time
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	captureContent bool
	profileLabels  bool
	genAILatest    bool
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithAdmitter bounds concurrent runs with a: every Run acquires a slot first and releases it
// when it returns. Without one, runs are not bounded and no admission stage is timed.
func WithAdmitter(a Admitter) Option {
	return optionFunc(func(o *options) { o.admitter = a })
}

// WithLogger sets the logger for events worth a line (late and failed shards, at debug level).
// The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l != nil {
			o.logger = l
		}
	})
}

// WithClock sets the clock stage timings and time to first token are measured with (default
// time.Now), so that they line up with spans and profiles on one clock. The clock must be safe
// for concurrent use and should carry a monotonic reading, as time.Now's does.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(o *options) {
		if now != nil {
			o.now = now
		}
	})
}

// WithTracerProvider traces every run with tp: a rag.pipeline span carrying the rag.* dye, and one
// span per stage below it (see the package documentation). The default is a no-op provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.tracerProvider = tp })
}

// WithMeterProvider records the pipeline's metrics (gen_ai server and client metrics,
// db_client_operation_duration_seconds, rag_stage_duration_seconds, rag_cache_requests_total,
// admission and in-flight metrics) with mp. The default is a no-op provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(o *options) { o.meterProvider = mp })
}

// WithGenAILatest names the GenAI client metrics and attributes after the latest GenAI semantic
// conventions (the semantic-conventions-genai repository) rather than semantic conventions v1.41
// (the default): gen_ai.client.inference.duration, .time_to_first_chunk and
// .time_per_output_chunk for model calls, gen_ai.client.embeddings.duration, the usage counters
// gen_ai.client.inference.usage.* and the per-operation token histograms instead of
// gen_ai.client.operation.duration and gen_ai.client.token.usage, and gen_ai.retrieval.top_k on
// the retrieval span instead of gen_ai.request.top_k. The server metrics are the same in both.
// It is what OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental asks for.
func WithGenAILatest(on bool) Option {
	return optionFunc(func(o *options) { o.genAILatest = on })
}

// WithContentCapture records the question, the prompt messages and the answer on spans
// (gen_ai.retrieval.query.text, gen_ai.input.messages, gen_ai.output.messages). It is off by
// default: spans then carry only the question's hash (rag.query.hash) and sizes, never text.
func WithContentCapture(on bool) Option {
	return optionFunc(func(o *options) { o.captureContent = on })
}

// WithProfileLabels sets whether the pipeline labels each stage with the rag_stage pprof label
// and, when the stage's span is sampled, the span_id label with that span's id (default on), so
// that CPU profiles taken while it runs can be filtered by stage and by any stage span; the span
// then carries pyroscope.profile.id. Goroutines a stage starts inherit its labels.
func WithProfileLabels(on bool) Option {
	return optionFunc(func(o *options) { o.profileLabels = on })
}

// Stats counts what a Pipeline has done since it was built.
type Stats struct {
	Runs              uint64                  // calls to Run
	Failed            uint64                  // runs that returned an error
	InFlight          int64                   // runs in progress now
	LateShardsDropped uint64                  // async: shards that missed the cut, in total
	ChunksMissing     uint64                  // hits whose chunk the doc store did not have, in total
	ByCoupling        map[rag.Coupling]uint64 // runs per coupling mode (those that got that far)
}

type counters struct {
	runs, failed, lateShards, chunksMissing atomic.Uint64
	inFlight                                atomic.Int64
	byCoupling                              [3]atomic.Uint64 // indexed like rag.Couplings
}

// Pipeline runs RAG requests through admission, embed, retrieve, fetch, generate and stream.
// It is safe for concurrent use; SetConfig may be called while requests run (each run uses the
// config it started with).
type Pipeline struct {
	emb  Embedder
	ret  Retriever
	docs DocStore
	gen  Generator

	admitter Admitter
	faults   FaultInjector
	log      *slog.Logger
	now      func() time.Time
	rec      *recorder

	cfg   atomic.Pointer[Config]
	stats counters
}

// New returns a pipeline over the given backends. The backends are required; cfg is validated
// and its zero fields take their defaults.
func New(emb Embedder, ret Retriever, docs DocStore, gen Generator, cfg Config, opts ...Option) (*Pipeline, error) {
	switch {
	case emb == nil:
		return nil, fmt.Errorf("new pipeline: embedder is nil")
	case ret == nil:
		return nil, fmt.Errorf("new pipeline: retriever is nil")
	case docs == nil:
		return nil, fmt.Errorf("new pipeline: doc store is nil")
	case gen == nil:
		return nil, fmt.Errorf("new pipeline: generator is nil")
	}
	o := options{logger: slog.New(slog.DiscardHandler), now: time.Now, profileLabels: true}
	for _, opt := range opts {
		opt.apply(&o)
	}
	rec, err := newRecorder(&o, emb, ret, docs, gen)
	if err != nil {
		return nil, fmt.Errorf("new pipeline: instruments: %w", err)
	}
	p := &Pipeline{emb: emb, ret: ret, docs: docs, gen: gen, admitter: o.admitter, faults: o.faults, log: o.logger, now: o.now, rec: rec}
	if err := p.SetConfig(cfg); err != nil {
		return nil, fmt.Errorf("new pipeline: %w", err)
	}
	return p, nil
}

// Config returns the current configuration, defaults filled in.
func (p *Pipeline) Config() Config { return *p.cfg.Load() }

// SetConfig validates cfg and, if it is valid, makes it the configuration of every run that
// starts afterwards. Zero fields take their defaults.
func (p *Pipeline) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c := cfg.withDefaults()
	p.cfg.Store(&c)
	return nil
}

// Models lists the models the generator serves.
func (p *Pipeline) Models() []string { return p.gen.Models() }

// Stats returns a snapshot of the pipeline's counters.
func (p *Pipeline) Stats() Stats {
	s := Stats{
		Runs:              p.stats.runs.Load(),
		Failed:            p.stats.failed.Load(),
		InFlight:          p.stats.inFlight.Load(),
		LateShardsDropped: p.stats.lateShards.Load(),
		ChunksMissing:     p.stats.chunksMissing.Load(),
		ByCoupling:        make(map[rag.Coupling]uint64, len(rag.Couplings)),
	}
	for i, c := range rag.Couplings {
		s.ByCoupling[c] = p.stats.byCoupling[i].Load()
	}
	return s
}

func (p *Pipeline) countCoupling(c rag.Coupling) {
	if i := slices.Index(rag.Couplings, c); i >= 0 && i < len(p.stats.byCoupling) {
		p.stats.byCoupling[i].Add(1)
	}
}

func validCoupling(c rag.Coupling) bool { return slices.Contains(rag.Couplings, c) }
