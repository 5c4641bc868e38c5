package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/dbconv"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/ragconv"
)

// The span, event, attribute and label names of the pipeline, defined in ragconv so that
// packages reading them need not import the pipeline. The names here are kept for callers of
// this package. Span names that depend on a backend are "embeddings {model}", "retrieval
// {collection}", "Query {collection}" (one per shard) and "chat {model}", as the GenAI and
// database semantic conventions name them. Every span the pipeline starts carries AttrStage; the
// rag.pipeline span carries the request-level dye.
const (
	SpanPipeline          = ragconv.SpanPipeline
	SpanAdmission         = ragconv.SpanAdmission
	SpanFetch             = ragconv.SpanFetch
	SpanStream            = ragconv.SpanStream
	EventFirstToken       = ragconv.EventFirstToken
	EventLateShardDropped = ragconv.EventLateShardDropped
	AttrStage             = ragconv.AttrStage
	AttrRequestID         = ragconv.AttrRequestID
	AttrUserID            = ragconv.AttrUserID
	AttrQueryHash         = ragconv.AttrQueryHash
	AttrCoupling          = ragconv.AttrCoupling
	AttrTopK              = ragconv.AttrTopK
	AttrChunkIDs          = ragconv.AttrChunkIDs
	AttrFaultInjectedMS   = ragconv.AttrFaultInjectedMS
	AttrShard             = ragconv.AttrShard
	AttrShards            = ragconv.AttrShards
	AttrShardsAnswered    = ragconv.AttrShardsAnswered
	AttrShardsLate        = ragconv.AttrShardsLate
	AttrShardsFailed      = ragconv.AttrShardsFailed
	AttrHits              = ragconv.AttrHits
	AttrChunksMissing     = ragconv.AttrChunksMissing
	AttrCacheHits         = ragconv.AttrCacheHits
	AttrCacheMisses       = ragconv.AttrCacheMisses
	AttrCacheBlocked      = ragconv.AttrCacheBlocked
	AttrStreamWriteMS     = ragconv.AttrStreamWriteMS
	AttrStreamChunks      = ragconv.AttrStreamChunks
	AttrAdmissionWaitMS   = ragconv.AttrAdmissionWaitMS
	StagePipeline         = ragconv.StagePipeline
	ProfileLabel          = ragconv.ProfileLabel
	ProfileSpanIDLabel    = ragconv.ProfileSpanIDLabel
	AttrProfileID         = ragconv.AttrProfileID
)

// Optional interfaces a backend may implement so that its spans and metrics are named properly.
// The pipeline checks for them with a type assertion; a backend without them gets the default
// documented on each.

// ModelNamer names the model behind an Embedder, for the "embeddings {model}" span and the
// gen_ai.request.model attribute. Default: "unknown".
type ModelNamer interface{ Model() string }

// ProviderNamer names the GenAI provider behind an Embedder or Generator (gen_ai.provider.name,
// e.g. "openai"). Default: "ragtail", meaning the backend runs inside ragtail (the hash embedder
// and the simulated engine).
type ProviderNamer interface{ ProviderName() string }

// DBSystemNamer names the database behind a Retriever (db.system.name, e.g. "qdrant").
// Default: "ragtail.memory", the in-process sharded index.
type DBSystemNamer interface{ DBSystem() string }

// CacheReporter is a DocStore that says how each lookup was answered: rag.CacheHit (from the
// cache), rag.CacheMiss (from the backing store) or rag.CacheBlocked (ruled out by a Bloom guard). The pipeline counts
// the results in rag_cache_requests_total{result} and on the rag.fetch span. Without it, fetches
// go through DocStore.Get and are not counted.
type CacheReporter interface {
	LookupResult(ctx context.Context, id string) (rag.Chunk, rag.CacheResult, error)
}

// WaitReporter is an Admitter that reports how long a request waited for its slot, for
// rag_admission_queue_wait_seconds. Without it the admission stage's duration is used.
type WaitReporter interface {
	AcquireWait(ctx context.Context) (release func(), wait time.Duration, err error)
}

// Defaults for backends that do not implement the optional interfaces.
const (
	DefaultProviderName = "ragtail"
	DefaultDBSystem     = "ragtail.memory"
	defaultModelName    = "unknown"
)

// Histogram bucket boundaries, in the unit of each instrument. The gen_ai and db ones are those
// the OpenTelemetry semantic conventions (v1.41) specify; the stage and queue-wait buckets follow
// the same roughly-doubling progression from 0.5 ms to 30 s, since a stage can be anywhere from a
// cache hit to a long generation.
var (
	bucketsGenAIDuration = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	bucketsGenAITokens   = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	bucketsTTFT          = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	bucketsTPOT          = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	bucketsDB            = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}
	bucketsStage         = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// instrumentationName is the instrumentation scope of the pipeline's tracer and meter.
const instrumentationName = "github.com/ragtail/ragtail/rag/pipeline"

// instruments are the pipeline's metric instruments.
type instruments struct {
	ttft       genaiconv.ServerTimeToFirstToken
	tpot       genaiconv.ServerTimePerOutputToken
	serverDur  genaiconv.ServerRequestDuration
	clientDur  genaiconv.ClientOperationDuration
	tokenUsage genaiconv.ClientTokenUsage
	dbDur      dbconv.ClientOperationDuration
	stageDur   metric.Float64Histogram
	cacheReq   metric.Int64Counter
	queueWait  metric.Float64Histogram
	rejected   metric.Int64Counter
	inflight   metric.Int64UpDownCounter
	faults     metric.Int64Counter
	lateShards metric.Int64Counter
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	m := mp.Meter(instrumentationName)
	var (
		in   instruments
		errs []error
		err  error
	)
	keep := func(e error) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	in.ttft, err = genaiconv.NewServerTimeToFirstToken(m, metric.WithExplicitBucketBoundaries(bucketsTTFT...))
	keep(err)
	in.tpot, err = genaiconv.NewServerTimePerOutputToken(m, metric.WithExplicitBucketBoundaries(bucketsTPOT...))
	keep(err)
	in.serverDur, err = genaiconv.NewServerRequestDuration(m, metric.WithExplicitBucketBoundaries(bucketsGenAIDuration...))
	keep(err)
	in.clientDur, err = genaiconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(bucketsGenAIDuration...))
	keep(err)
	in.tokenUsage, err = genaiconv.NewClientTokenUsage(m, metric.WithExplicitBucketBoundaries(bucketsGenAITokens...))
	keep(err)
	in.dbDur, err = dbconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(bucketsDB...))
	keep(err)
	in.stageDur, err = m.Float64Histogram("rag.stage.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of each pipeline stage (the Server-Timing durations); the stream stage counts only the time spent handing tokens to the client."),
		metric.WithExplicitBucketBoundaries(bucketsStage...))
	keep(err)
	in.cacheReq, err = m.Int64Counter("rag.cache.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Doc-store lookups made while fetching chunks, by how they were answered: hit (cache), miss (backing store) or blocked (Bloom guard)."))
	keep(err)
	in.queueWait, err = m.Float64Histogram("rag.admission.queue_wait", metric.WithUnit("s"),
		metric.WithDescription("Time admitted requests waited for a worker slot."),
		metric.WithExplicitBucketBoundaries(bucketsStage...))
	keep(err)
	in.rejected, err = m.Int64Counter("rag.admission.rejected", metric.WithUnit("{request}"),
		metric.WithDescription("Requests shed by admission control (503)."))
	keep(err)
	in.inflight, err = m.Int64UpDownCounter("rag.inflight_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests running the pipeline now, waiting for admission included."))
	keep(err)
	in.faults, err = m.Int64Counter("rag.fault.injected", metric.WithUnit("{fault}"),
		metric.WithDescription("Faults injected by fault rules."))
	keep(err)
	in.lateShards, err = m.Int64Counter("rag.shard.late_dropped", metric.WithUnit("{shard}"),
		metric.WithDescription("Shards still searching when async coupling started generating; their hits were left out of the prompt."))
	keep(err)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Counters of rare events start at zero, so that their series exist (and rate() works)
	// before the first event.
	for _, c := range []metric.Int64Counter{in.faults, in.rejected, in.lateShards} {
		c.Add(context.Background(), 0)
	}
	return &in, nil
}

// telemetry is what the pipeline needs to trace and measure its runs, resolved once in New. It
// holds every label set and constant attribute the recorder uses, built once, so that recording
// a run allocates only what the SDK itself needs.
type telemetry struct {
	tracer  trace.Tracer
	instant instantTracer // tracer, when it starts spans at an instant without an option; else nil
	tracing bool          // a tracer provider was given: start spans and build their attributes
	inst    *instruments
	labels  bool // set the rag_stage pprof label around stages
	capture bool // record prompt and answer text

	embedName, embedModel, embedProvider string
	retrievalName, queryName             string
	genProvider                          string
	dbSystem, collection                 string

	cache  CacheReporter
	waiter WaitReporter

	stageDur   [numStages][numCouplings]f64Rec // rag_stage_duration_seconds, per label set
	cacheReq   [numCacheResults]i64Rec         // rag_cache_requests_total, per label set
	faultSets  [numStages]addOpts              // rag_fault_injected_total labels
	inflight   i64Rec                          // rag_inflight_requests
	queueWait  f64Rec                          // rag_admission_queue_wait_seconds
	dbSet      attribute.Set                   // db_client_operation_duration_seconds labels on success
	dbDur      f64Rec                          // that histogram's recorder of dbSet
	querySpan  *fixedAttrs                     // attributes every Query span has
	embedSet   attribute.Set                   // gen_ai client labels of the embeddings operation
	embedDur   f64Rec                          // gen_ai client duration of embedSet
	embedInput i64Rec                          // gen_ai token usage of embedding input
	embedSpan  *fixedAttrs                     // attributes every embeddings span has
	retrieval  *fixedAttrs                     // attributes every retrieval span has
	chatModels sync.Map                        // served model name -> *chatSets
	chatCount  atomic.Int32                    // entries in chatModels
	chatOther  *chatSets                       // the sets of every model not served
}

// instantTracer is a tracer that starts a span at a given instant without a trace.WithTimestamp
// option, and instantEnder a span that ends at one: the option boxes a time.Time, an allocation
// for each distinct instant, and a run has about fifteen; eventAdder adds an event at one.
// attrEnder sets a span's last attributes and ends it in one call (one lock rather than three,
// with IsRecording). ragtail's own tracer (telemetry's) does all four; with any other the
// recorder passes the options.
type (
	instantTracer interface {
		StartAt(ctx context.Context, name string, at time.Time) (context.Context, trace.Span)
	}
	instantEnder interface{ EndAt(at time.Time) }
	eventAdder   interface {
		AddEventAt(name string, at time.Time)
	}
	attrEnder interface {
		EndAtWith(at time.Time, attrs []attribute.KeyValue)
	}
	// setEnder is a span that takes a set of fixed attributes besides attrs as it ends, and may
	// copy them in as it encoded them before (telemetry's).
	setEnder interface {
		EndAtWithSet(at time.Time, set *attribute.Set, attrs []attribute.KeyValue)
	}
)

// fixedAttrs are the attributes every span of a kind has (every Query span's database, every
// chat span's model), as a set, which a setEnder span copies in as it encoded it the first
// time, and as the set's list, which other spans are given.
type fixedAttrs struct {
	set attribute.Set
	kv  []attribute.KeyValue
}

func newFixedAttrs(kv ...attribute.KeyValue) *fixedAttrs {
	set := attribute.NewSet(slices.Clone(kv)...) // NewSet sorts what it is given in place
	return &fixedAttrs{set: set, kv: set.ToSlice()}
}

// before returns f's attributes followed by attrs, for a span that takes them in one call (the
// SDK's spans take a second SetAttributes with an allocation). It moves attrs up within their
// array when it has room, as the recorder's scratch array does, and allocates otherwise; a nil
// f returns attrs.
func (f *fixedAttrs) before(attrs []attribute.KeyValue) []attribute.KeyValue {
	if f == nil {
		return attrs
	}
	n := len(f.kv)
	if cap(attrs)-len(attrs) < n {
		return append(slices.Clip(f.kv), attrs...)
	}
	out := attrs[:len(attrs)+n]
	copy(out[n:], attrs)
	copy(out, f.kv)
	return out
}

// recordOpts and addOpts are one label set as ready-made variadic arguments: passing a stored
// slice to Record or Add allocates nothing, where building the option each time would.
type (
	recordOpts []metric.RecordOption
	addOpts    []metric.AddOption
)

// f64Rec and i64Rec record a measurement with one label set, bound when the recorder is built.
// An instrument of ragtail's own meter provider (telemetry's) binds the set (float64Binder,
// int64Binder) and records with no option to resolve and no series to look up; with any other
// provider the recorder passes the set's option.
type (
	f64Rec        func(context.Context, float64)
	i64Rec        func(context.Context, int64)
	float64Binder interface {
		BindFloat64(attribute.Set) func(context.Context, float64)
	}
	int64Binder interface {
		BindInt64(attribute.Set) func(context.Context, int64)
	}
	// int64Adder is an int64 counter, up-down or not.
	int64Adder interface {
		Add(context.Context, int64, ...metric.AddOption)
	}
)

// bindF64 returns h's recorder of set.
func bindF64(h metric.Float64Histogram, set attribute.Set) f64Rec {
	if b, ok := h.(float64Binder); ok {
		return b.BindFloat64(set)
	}
	opts, _ := setOpts(set)
	return func(ctx context.Context, v float64) { h.Record(ctx, v, opts...) }
}

// bindI64Hist returns h's recorder of set.
func bindI64Hist(h metric.Int64Histogram, set attribute.Set) i64Rec {
	if b, ok := h.(int64Binder); ok {
		return b.BindInt64(set)
	}
	opts, _ := setOpts(set)
	return func(ctx context.Context, v int64) { h.Record(ctx, v, opts...) }
}

// bindI64Sum returns c's recorder of set.
func bindI64Sum(c int64Adder, set attribute.Set) i64Rec {
	if b, ok := c.(int64Binder); ok {
		return b.BindInt64(set)
	}
	_, opts := setOpts(set)
	return func(ctx context.Context, v int64) { c.Add(ctx, v, opts...) }
}

// recordDur records v with bound, or when err is not nil with set and error.type through h.
func recordDur(ctx context.Context, h metric.Float64Histogram, bound f64Rec, set attribute.Set, v float64, err error) {
	if err == nil {
		bound(ctx, v)
		return
	}
	h.Record(ctx, v, errorOpts(set, err)...)
}

func setOpts(set attribute.Set) (recordOpts, addOpts) {
	o := metric.WithAttributeSet(set)
	return recordOpts{o}, addOpts{o}
}

// Cache lookup results as rag_cache_requests_total labels them; other is for a reporter that
// answers something else.
const (
	cacheOther      = int(rag.NumCacheResults)
	numCacheResults = cacheOther + 1
)

// numCouplings is len(rag.Couplings).
const numCouplings = 3

// OtherModel is the gen_ai.request.model metric label of every request for a model the
// generator does not serve, so that the label's values stay bounded by the served models plus
// one, whatever clients send.
const OtherModel = "_OTHER"

// maxChatModels bounds the per-model label sets kept: more than any deployment serves. Past it
// (a generator whose model list keeps changing) sets are built per request instead of kept.
const maxChatModels = 64

// chatSets are the gen_ai label sets and span attributes of one model.
type chatSets struct {
	spanName                         string      // "chat {model}"
	span                             *fixedAttrs // the chat span's: stage, operation, provider, model
	base                             attribute.Set
	serverDur, ttft, tpot, clientDur f64Rec // gen_ai histograms of base
	inputTokens, outputTokens        i64Rec // gen_ai token usage of base and the token type
	responseModel                    attribute.KeyValue
}

func newTelemetry(o *options, emb Embedder, ret Retriever, docs DocStore, gen Generator) (*telemetry, error) {
	tp := o.tracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := o.meterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	inst, err := newInstruments(mp)
	if err != nil {
		return nil, err
	}
	t := &telemetry{
		tracer:        tp.Tracer(instrumentationName),
		tracing:       o.tracerProvider != nil,
		inst:          inst,
		labels:        o.profileLabels,
		capture:       o.captureContent,
		embedModel:    defaultModelName,
		embedProvider: DefaultProviderName,
		genProvider:   DefaultProviderName,
		dbSystem:      DefaultDBSystem,
		collection:    ret.Collection(),
	}
	t.instant, _ = t.tracer.(instantTracer)
	if m, ok := emb.(ModelNamer); ok && m.Model() != "" {
		t.embedModel = m.Model()
	}
	if p, ok := emb.(ProviderNamer); ok && p.ProviderName() != "" {
		t.embedProvider = p.ProviderName()
	}
	if p, ok := gen.(ProviderNamer); ok && p.ProviderName() != "" {
		t.genProvider = p.ProviderName()
	}
	if d, ok := ret.(DBSystemNamer); ok && d.DBSystem() != "" {
		t.dbSystem = d.DBSystem()
	}
	t.cache, _ = docs.(CacheReporter)
	t.waiter, _ = o.admitter.(WaitReporter)
	t.embedName = "embeddings " + t.embedModel
	t.retrievalName = "retrieval " + t.collection
	t.queryName = "Query " + t.collection

	for i, s := range rag.Stages {
		for j, c := range rag.Couplings {
			t.stageDur[i][j] = bindF64(inst.stageDur, attribute.NewSet(AttrStage.String(string(s)), AttrCoupling.String(string(c))))
		}
		_, t.faultSets[i] = setOpts(attribute.NewSet(AttrStage.String(string(s))))
	}
	for i := range numCacheResults {
		t.cacheReq[i] = bindI64Sum(inst.cacheReq, attribute.NewSet(attribute.String("result", rag.CacheResult(i).String())))
	}
	t.inflight = bindI64Sum(inst.inflight, *attribute.EmptySet())
	t.queueWait = bindF64(inst.queueWait, *attribute.EmptySet())
	t.dbSet = attribute.NewSet(semconv.DBSystemNameKey.String(t.dbSystem), semconv.DBCollectionName(t.collection),
		semconv.DBOperationName("Query"))
	t.querySpan = newFixedAttrs(append(t.dbSet.ToSlice(), AttrStage.String(string(rag.StageRetrieve)))...)
	t.retrieval = newFixedAttrs(AttrStage.String(string(rag.StageRetrieve)),
		semconv.GenAIOperationNameKey.String(string(genaiconv.OperationNameRetrieval)),
		semconv.GenAIDataSourceID(t.collection))
	t.dbDur = bindF64(inst.dbDur.Float64Histogram, t.dbSet)
	t.embedSet = attribute.NewSet(semconv.GenAIOperationNameKey.String(string(genaiconv.OperationNameEmbeddings)),
		semconv.GenAIProviderNameKey.String(t.embedProvider), semconv.GenAIRequestModel(t.embedModel))
	t.embedSpan = newFixedAttrs(append(t.embedSet.ToSlice(), AttrStage.String(string(rag.StageEmbed)),
		semconv.GenAIEmbeddingsDimensionCount(emb.Dimension()))...)
	t.embedDur = bindF64(inst.clientDur.Float64Histogram, t.embedSet)
	t.embedInput = bindI64Hist(inst.tokenUsage.Int64Histogram, attribute.NewSet(append(t.embedSet.ToSlice(), semconv.GenAITokenTypeKey.String(string(genaiconv.TokenTypeInput)))...))
	t.chatOther = t.newChatSets(OtherModel)
	for _, m := range gen.Models() {
		t.chat(m, true)
	}
	return t, nil
}

func (t *telemetry) newChatSets(model string) *chatSets {
	attrs := []attribute.KeyValue{
		AttrStage.String(string(rag.StageGenerate)),
		semconv.GenAIOperationNameKey.String(string(genaiconv.OperationNameChat)),
		semconv.GenAIProviderNameKey.String(t.genProvider),
		semconv.GenAIRequestModel(model),
	}
	base := attrs[1:]
	cs := &chatSets{
		spanName:      "chat " + model,
		span:          newFixedAttrs(attrs...),
		base:          attribute.NewSet(base...),
		responseModel: semconv.GenAIResponseModel(model),
	}
	in := t.inst
	cs.serverDur = bindF64(in.serverDur.Float64Histogram, cs.base)
	cs.ttft = bindF64(in.ttft.Float64Histogram, cs.base)
	cs.tpot = bindF64(in.tpot.Float64Histogram, cs.base)
	cs.clientDur = bindF64(in.clientDur.Float64Histogram, cs.base)
	cs.inputTokens = bindI64Hist(in.tokenUsage.Int64Histogram, attribute.NewSet(append(base[:3:3], semconv.GenAITokenTypeKey.String(string(genaiconv.TokenTypeInput)))...))
	cs.outputTokens = bindI64Hist(in.tokenUsage.Int64Histogram, attribute.NewSet(append(base[:3:3], semconv.GenAITokenTypeKey.String(string(genaiconv.TokenTypeOutput)))...))
	return cs
}

// chat returns the gen_ai label sets of the chat operation with model. Only served models get
// sets of their own, and only up to maxChatModels of them are kept; every other name shares the
// OtherModel sets, so that no client-chosen string becomes a metric label or stays in memory.
func (t *telemetry) chat(model string, served bool) *chatSets {
	if !served {
		return t.chatOther
	}
	if v, ok := t.chatModels.Load(model); ok {
		return v.(*chatSets)
	}
	cs := t.newChatSets(model)
	if t.chatCount.Load() >= maxChatModels {
		return cs
	}
	if v, loaded := t.chatModels.LoadOrStore(model, cs); loaded {
		return v.(*chatSets)
	}
	t.chatCount.Add(1)
	return cs
}

// stageRec returns the rag_stage_duration_seconds recorder of stage s under coupling c.
func (t *telemetry) stageRec(s rag.Stage, c rag.Coupling) f64Rec {
	return t.stageDur[stageIndex(s)][couplingIndex(c)]
}

// stageIndex returns the index of s in rag.Stages.
func stageIndex(s rag.Stage) int {
	switch s {
	case rag.StageAdmission:
		return 0
	case rag.StageEmbed:
		return 1
	case rag.StageRetrieve:
		return 2
	case rag.StageFetch:
		return 3
	case rag.StageGenerate:
		return 4
	}
	return 5
}

// couplingIndex returns the index of c in rag.Couplings; an invalid coupling never gets this far.
func couplingIndex(c rag.Coupling) int {
	switch c {
	case rag.CouplingFanout:
		return 1
	case rag.CouplingAsync:
		return 2
	}
	return 0
}

func cacheIndex(result rag.CacheResult) int {
	if result >= rag.NumCacheResults {
		return cacheOther
	}
	return int(result)
}

// errorOpts returns the options of set with error.type added. Errors are rare, and error.type
// has a closed set of values, so the set is built on the spot.
func errorOpts(set attribute.Set, err error) recordOpts {
	o, _ := setOpts(attribute.NewSet(append(set.ToSlice(), semconv.ErrorTypeKey.String(ErrorType(err)))...))
	return o
}

// ErrorType classifies err into the low-cardinality error.type value the pipeline puts on spans
// and metrics: overloaded, timeout, canceled, client_disconnected, unknown_model,
// invalid_request, not_found, unavailable, or _OTHER.
func ErrorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, rag.ErrOverloaded):
		return "overloaded"
	case errors.Is(err, rag.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, rag.ErrUnknownModel):
		return "unknown_model"
	case errors.Is(err, rag.ErrInvalidRequest):
		return "invalid_request"
	case errors.Is(err, rag.ErrNotFound):
		return "not_found"
	case errors.Is(err, rag.ErrUnavailable):
		return "unavailable"
	case rag.StageOf(err) == rag.StageStream:
		return "client_disconnected"
	}
	return string(genaiconv.ErrorTypeOther)
}

// QueryHash returns the rag.query.hash of a question: the first 16 hex digits of its SHA-256,
// enough to group requests for the same question without recording it.
func QueryHash(question string) string {
	var sum [sha256.Size]byte
	if len(question) <= 512 {
		var buf [512]byte // a usual question is hashed without a heap copy
		sum = sha256.Sum256(append(buf[:0], question...))
	} else {
		sum = sha256.Sum256([]byte(question))
	}
	return hex.EncodeToString(sum[:8])
}

// finishReasons are the gen_ai.response.finish_reasons attributes of the usual finish reasons,
// built once: a one-element string slice attribute costs two allocations to build.
var finishReasons = func() map[string]attribute.KeyValue {
	m := map[string]attribute.KeyValue{}
	for _, r := range []string{"stop", "length", "content_filter", "tool_calls", "error"} {
		m[r] = semconv.GenAIResponseFinishReasons(r)
	}
	return m
}()

// finishReasonsAttr returns the gen_ai.response.finish_reasons attribute of reason.
func finishReasonsAttr(reason string) attribute.KeyValue {
	if kv, ok := finishReasons[reason]; ok {
		return kv
	}
	return semconv.GenAIResponseFinishReasons(reason)
}

// messagesJSON renders messages in the semantic conventions' gen_ai.input.messages shape.
func messagesJSON(msgs []rag.Message) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	type message struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	out := make([]message, len(msgs))
	for i, m := range msgs {
		out[i] = message{Role: m.Role, Parts: []part{{Type: "text", Content: m.Content}}}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// outputJSON renders an answer in the semantic conventions' gen_ai.output.messages shape.
func outputJSON(text, finishReason string) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	b, _ := json.Marshal([]struct {
		Role         string `json:"role"`
		Parts        []part `json:"parts"`
		FinishReason string `json:"finish_reason"`
	}{{Role: "assistant", Parts: []part{{Type: "text", Content: text}}, FinishReason: finishReason}})
	return string(b)
}

// seconds converts d to float seconds.
func seconds(d time.Duration) float64 { return d.Seconds() }
