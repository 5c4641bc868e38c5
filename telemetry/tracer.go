package telemetry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// SpanData is the read side of an ended span, as the trace ring, /debug/traces and the trace
// file read it. The SDK's sdktrace.ReadOnlySpan satisfies it, and so do the spans TracerProvider
// records itself.
type SpanData interface {
	Name() string
	SpanContext() trace.SpanContext
	Parent() trace.SpanContext
	SpanKind() trace.SpanKind
	StartTime() time.Time
	EndTime() time.Time
	Attributes() []attribute.KeyValue
	Links() []sdktrace.Link
	Events() []sdktrace.Event
	Status() sdktrace.Status
	InstrumentationScope() instrumentation.Scope
	Resource() *resource.Resource
	DroppedAttributes() int
	DroppedLinks() int
	DroppedEvents() int
	ChildSpanCount() int
}

var _ SpanData = sdktrace.ReadOnlySpan(nil)

// TracerProvider is the service's tracer provider: OpenTelemetry's trace API over a span recorder
// of ragtail's own, with the SDK's parts around it: its samplers (Config.Sampler, or
// OTEL_TRACES_SAMPLER and _ARG, read as the SDK reads them), its span limits, and its span
// processors and exporters (the ring, the trace file, OTLP), which get each span as it ends.
//
// Why not the SDK's tracer: a request of the pipeline makes about ten spans, and the SDK spends
// about three times the CPU and allocations on each (BenchmarkSpanCost: a recording span, its
// attribute array, a snapshot and a dedupe map at End). TracerProvider records them as the SDK would (same limits,
// same attribute, event, link and status rules: TestTracerProviderRecordsAsTheSDK runs the same
// scripts through both) with one allocation for the span (its attributes encoded inside it) and
// one for its context, and hands the ring the span itself rather than a snapshot.
//
// The sampler decides every span that enters a trace in this process (a root, or a span whose
// parent is remote) and every span whose parent is not sampled. A span whose parent is a
// sampled span of this process is recorded and sampled without asking it again: what every
// sampler the SDK configures from the environment decides (parent-based ones follow the parent;
// always_on samples it; traceidratio samples it with its parent, whose trace id it shares).
//
// Differences from the SDK, none of them in a name or value the service promises: span processors
// see spans only when they end (OnEnd, with a snapshot), never at OnStart; and start and end times
// a caller does not give come from the service's clock rather than time.Now (events without a
// timestamp still take time.Now, as trace.NewEventConfig fills it in). A TracerProvider is safe for
// concurrent use.
type TracerProvider struct {
	embedded.TracerProvider

	sdk      *sdktrace.TracerProvider // holds the processors, for ForceFlush and Shutdown
	sampler  sdktrace.Sampler
	resource *resource.Resource
	limits   sdktrace.SpanLimits
	now      func() time.Time
	ring     *Ring                    // gets every span of this provider directly; may be nil
	others   []sdktrace.SpanProcessor // get a snapshot of every span of this provider

	mu      sync.Mutex
	tracers map[instrumentation.Scope]*tracer
	stopped atomic.Bool
}

var _ trace.TracerProvider = (*TracerProvider)(nil)

// newTracerProvider returns a TracerProvider sampling with sampler and handing its spans to ring
// and others. sdk is an SDK provider with the same sampler, limits and processors: its
// ForceFlush and Shutdown are TracerProvider's, and SDK returns it (to compare the two).
func newTracerProvider(sdk *sdktrace.TracerProvider, sampler sdktrace.Sampler, res *resource.Resource, limits sdktrace.SpanLimits, now func() time.Time, ring *Ring, others []sdktrace.SpanProcessor) *TracerProvider {
	if now == nil {
		now = time.Now
	}
	return &TracerProvider{sdk: sdk, sampler: sampler, resource: res, limits: limits, now: now, ring: ring, others: others,
		tracers: make(map[instrumentation.Scope]*tracer)}
}

// Tracer returns the tracer of the instrumentation scope name (with opts' version, schema URL
// and attributes); the same scope gets the same tracer.
func (p *TracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	c := trace.NewTracerConfig(opts...)
	scope := instrumentation.Scope{Name: name, Version: c.InstrumentationVersion(), SchemaURL: c.SchemaURL()}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Scope holds an attribute.Set, which is comparable; two scopes with equal attributes are
	// one key.
	scope.Attributes = c.InstrumentationAttributes()
	if t, ok := p.tracers[scope]; ok {
		return t
	}
	t := &tracer{p: p, scope: scope}
	p.tracers[scope] = t
	return t
}

// SDK returns an SDK provider configured as p (sampler, limits, processors), whose tracer is the
// SDK's own: what p replaces, kept for side-by-side comparisons.
func (p *TracerProvider) SDK() *sdktrace.TracerProvider { return p.sdk }

// ForceFlush exports what the span processors hold.
func (p *TracerProvider) ForceFlush(ctx context.Context) error { return p.sdk.ForceFlush(ctx) }

// Shutdown stops recording and shuts the span processors down (exporting what they hold,
// within ctx). Spans started afterwards are not recorded; spans ending afterwards reach nothing.
func (p *TracerProvider) Shutdown(ctx context.Context) error {
	p.stopped.Store(true)
	return p.sdk.Shutdown(ctx)
}

// tracer is one instrumentation scope's tracer.
type tracer struct {
	embedded.Tracer
	p     *TracerProvider
	scope instrumentation.Scope
}

// Start starts a span named name: under a sampled span of this process, recorded and sampled;
// otherwise as the sampler decides.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanFromContext(ctx)
	psc := parent.SpanContext()
	var s *localSpan
	if cfg.NewRoot() || !t.records(psc) {
		var span trace.Span
		if ctx, span, s = t.sample(ctx, psc, name, &cfg, time.Time{}); s == nil {
			return ctx, span
		}
	} else {
		start := cfg.Timestamp()
		if start.IsZero() {
			start = t.p.now()
		}
		ctx, s = t.start(ctx, parent, psc, name, start, cfg.SpanKind())
	}
	for _, l := range cfg.Links() {
		s.AddLink(l)
	}
	s.SetAttributes(cfg.Attributes()...)
	return ctx, s
}

// sample starts a span the sampler decides: a root (or a span started with trace.WithNewRoot),
// a span with a remote parent, or one whose parent is not sampled. A dropped span is not
// recorded (span is a non-recording one carrying its span context, s nil); otherwise s is the
// span, sampled or only recorded, with the sampler's attributes. It starts at at, or else at the
// configuration's timestamp, or now.
func (t *tracer) sample(ctx context.Context, psc trace.SpanContext, name string, cfg *trace.SpanConfig, at time.Time) (_ context.Context, span trace.Span, s *localSpan) {
	if cfg.NewRoot() {
		psc = trace.SpanContext{}
		ctx = trace.ContextWithSpanContext(ctx, psc)
	}
	tid := psc.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	res := sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: psc.TraceState()} // after Shutdown
	if !t.p.stopped.Load() {
		res = t.p.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: name,
			Kind: cfg.SpanKind(), Attributes: cfg.Attributes(), Links: cfg.Links()})
	}
	flags := psc.TraceFlags() &^ trace.FlagsSampled
	if res.Decision == sdktrace.RecordAndSample {
		flags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceFlags: flags, TraceState: res.Tracestate})
	if res.Decision == sdktrace.Drop {
		ctx = trace.ContextWithSpanContext(ctx, sc)
		return ctx, trace.SpanFromContext(ctx), nil
	}
	start := at
	if start.IsZero() {
		start = cfg.Timestamp()
	}
	if start.IsZero() {
		start = t.p.now()
	}
	s = t.newSpan(psc, sc, name, start, cfg.SpanKind())
	if t.p.ring != nil && sc.IsSampled() {
		s.local, s.localRoot = t.p.ring.newLocal(tid), true
	}
	s.SetAttributes(res.Attributes...)
	return trace.ContextWithSpan(ctx, s), s, s
}

// StartAt starts a span named name at the instant at, as Start with trace.WithTimestamp(at)
// does, without the option's allocation (the pipeline's recorder calls it).
func (t *tracer) StartAt(ctx context.Context, name string, at time.Time) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	parent := trace.SpanFromContext(ctx)
	psc := parent.SpanContext()
	if !t.records(psc) {
		var cfg trace.SpanConfig // no options: an internal span, no attributes, no links
		ctx, span, s := t.sample(ctx, psc, name, &cfg, at)
		if s == nil {
			return ctx, span
		}
		return ctx, s
	}
	return t.start(ctx, parent, psc, name, at, trace.SpanKindInternal)
}

// records reports whether a child of the span context psc is recorded here: psc is a sampled
// span of this process, and the provider runs.
func (t *tracer) records(psc trace.SpanContext) bool {
	return psc.IsValid() && psc.IsSampled() && !psc.IsRemote() && !t.p.stopped.Load()
}

// start starts a span under parent, the span in ctx, whose span context psc is a sampled span
// of this process. The caller has looked parent up once, for both: a lookup walks ctx's chain
// of values, which grows by two with each stage (its span's and its labels').
func (t *tracer) start(ctx context.Context, parent trace.Span, psc trace.SpanContext, name string, at time.Time, kind trace.SpanKind) (context.Context, *localSpan) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: psc.TraceID(), SpanID: newSpanID(),
		TraceFlags: psc.TraceFlags() | trace.FlagsSampled, TraceState: psc.TraceState()})
	s := t.newSpan(psc, sc, name, at, kind)
	if p, ok := parent.(*localSpan); ok {
		p.addChild()
		s.local = p.local
	}
	return trace.ContextWithSpan(ctx, s), s
}

// newSpan returns the recording span sc, child of psc (invalid for a root).
func (t *tracer) newSpan(psc, sc trace.SpanContext, name string, at time.Time, kind trace.SpanKind) *localSpan {
	return &localSpan{
		tracer:       t,
		name:         name,
		sc:           sc,
		parentID:     psc.SpanID(),
		parentFlags:  psc.TraceFlags(),
		parentRemote: psc.IsRemote(),
		kind:         trace.ValidateSpanKind(kind),
		start:        at.UnixNano(),
	}
}
