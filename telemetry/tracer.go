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

// TracerProvider is the service's tracer provider. The spans that enter a trace in this process
// (a server span continuing a caller's trace, or a root) are the OpenTelemetry SDK's: its sampler
// (Config.Sampler, or OTEL_TRACES_SAMPLER) decides whether the trace is recorded, and its span
// processors see them as usual. Their descendants in this process, the pipeline's stage spans,
// the backends' client spans and the rest, are recorded by TracerProvider itself, as the SDK would
// record them (same span limits, same attribute, event, link and status rules, same span
// processors at their end), at a fraction of the SDK's cost: one allocation for the span, one
// for its attributes and one for its context, where the SDK makes five or six and copies the
// span once more to hand it over. A request of the pipeline starts about ten such spans.
//
// A descendant is recorded and sampled when its parent is a sampled span of this process: what
// every sampler the SDK configures from the environment decides for it (parent-based ones follow
// the parent; always_on samples it; traceidratio samples it with its parent, whose trace id it
// shares). A span whose parent is not sampled, is remote, or is absent, and a span started with
// trace.WithNewRoot, is the SDK's.
//
// Differences from the SDK, all of them outside what DESIGN names: span processors see the
// spans of TracerProvider only when they end (OnEnd, with a snapshot; not OnStart), an SDK span's
// ChildSpanCount does not count children recorded here (OTLP does not carry the count), and
// start and end times a caller does not give come from the service's clock rather than
// time.Now (events without a timestamp still take time.Now, as trace.NewEventConfig fills it in). A
// TracerProvider is safe for concurrent use.
type TracerProvider struct {
	embedded.TracerProvider

	sdk      *sdktrace.TracerProvider
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

// newTracerProvider returns a TracerProvider recording descendants itself and everything else
// through sdk. ring and others must be the span processors registered on sdk, and limits its
// span limits, so that both kinds of span are bounded and delivered alike.
func newTracerProvider(sdk *sdktrace.TracerProvider, res *resource.Resource, limits sdktrace.SpanLimits, now func() time.Time, ring *Ring, others []sdktrace.SpanProcessor) *TracerProvider {
	if now == nil {
		now = time.Now
	}
	return &TracerProvider{sdk: sdk, resource: res, limits: limits, now: now, ring: ring, others: others,
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
	t := &tracer{p: p, sdk: p.sdk.Tracer(name, opts...), scope: scope}
	p.tracers[scope] = t
	return t
}

// SDK returns the SDK provider behind p, which records the spans that enter a trace.
func (p *TracerProvider) SDK() *sdktrace.TracerProvider { return p.sdk }

// ForceFlush exports what the span processors hold.
func (p *TracerProvider) ForceFlush(ctx context.Context) error { return p.sdk.ForceFlush(ctx) }

// Shutdown stops recording and shuts the span processors down (exporting what they hold,
// within ctx). Spans started afterwards are not recorded.
func (p *TracerProvider) Shutdown(ctx context.Context) error {
	p.stopped.Store(true)
	return p.sdk.Shutdown(ctx)
}

// tracer is one instrumentation scope's tracer.
type tracer struct {
	embedded.Tracer
	p     *TracerProvider
	sdk   trace.Tracer
	scope instrumentation.Scope
}

// Start starts a span named name. Under a sampled span of this process it is recorded here;
// otherwise the SDK starts it.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	psc := trace.SpanContextFromContext(ctx)
	if !t.records(psc) {
		return t.sdk.Start(ctx, name, opts...)
	}
	cfg := trace.NewSpanStartConfig(opts...)
	if cfg.NewRoot() {
		return t.sdk.Start(ctx, name, opts...)
	}
	start := cfg.Timestamp()
	if start.IsZero() {
		start = t.p.now()
	}
	ctx, s := t.start(ctx, psc, name, start, cfg.SpanKind())
	for _, l := range cfg.Links() {
		s.AddLink(l)
	}
	s.SetAttributes(cfg.Attributes()...)
	return ctx, s
}

// StartAt starts a span named name at the instant at, as Start with trace.WithTimestamp(at)
// does, without the option's allocation (the pipeline's recorder calls it).
func (t *tracer) StartAt(ctx context.Context, name string, at time.Time) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	psc := trace.SpanContextFromContext(ctx)
	if !t.records(psc) {
		return t.sdk.Start(ctx, name, trace.WithTimestamp(at))
	}
	return t.start(ctx, psc, name, at, trace.SpanKindInternal)
}

// records reports whether a child of the span context psc is recorded here: psc is a sampled
// span of this process, and the provider runs.
func (t *tracer) records(psc trace.SpanContext) bool {
	return psc.IsValid() && psc.IsSampled() && !psc.IsRemote() && !t.p.stopped.Load()
}

// start starts a span of this tracer under psc, the span context in ctx.
func (t *tracer) start(ctx context.Context, psc trace.SpanContext, name string, at time.Time, kind trace.SpanKind) (context.Context, *localSpan) {
	if parent, ok := trace.SpanFromContext(ctx).(*localSpan); ok {
		parent.addChild()
	}
	s := &localSpan{
		tracer: t,
		name:   name,
		sc: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    psc.TraceID(),
			SpanID:     newSpanID(),
			TraceFlags: psc.TraceFlags() | trace.FlagsSampled,
			TraceState: psc.TraceState(),
		}),
		parentID:    psc.SpanID(),
		parentFlags: psc.TraceFlags(),
		kind:        trace.ValidateSpanKind(kind),
		start:       at.UnixNano(),
	}
	return trace.ContextWithSpan(ctx, s), s
}
