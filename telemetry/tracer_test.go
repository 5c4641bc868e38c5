package telemetry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// pair is the same configuration twice: the SDK alone, and TracerProvider over an SDK provider,
// each with a span recorder after a ring.
type pair struct {
	sdk, ours          trace.TracerProvider
	sdkRec, oursRec    *tracetest.SpanRecorder
	oursRing, sdkRing  *Ring
	oursProvider       *TracerProvider
	sdkProviderToClose *sdktrace.TracerProvider
}

func newPair(tb testing.TB, limits sdktrace.SpanLimits, sampler sdktrace.Sampler) *pair {
	tb.Helper()
	res := resource.NewSchemaless(attribute.String("service.name", "conformance"))
	p := &pair{sdkRec: tracetest.NewSpanRecorder(), oursRec: tracetest.NewSpanRecorder(),
		sdkRing: NewRing(0, 0, 0), oursRing: NewRing(0, 0, 0)}
	opts := func(ring *Ring, rec *tracetest.SpanRecorder) []sdktrace.TracerProviderOption {
		return []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits),
			sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(ring), sdktrace.WithSpanProcessor(rec)}
	}
	p.sdkProviderToClose = sdktrace.NewTracerProvider(opts(p.sdkRing, p.sdkRec)...)
	p.sdk = p.sdkProviderToClose
	p.oursProvider = newTracerProvider(sdktrace.NewTracerProvider(opts(p.oursRing, p.oursRec)...), sampler, res, limits, nil,
		p.oursRing, []sdktrace.SpanProcessor{p.oursRec})
	p.ours = p.oursProvider
	tb.Cleanup(func() {
		_ = p.sdkProviderToClose.Shutdown(context.Background())
		_ = p.oursProvider.Shutdown(context.Background())
	})
	return p
}

// script is what a test does to one child span.
type script func(ctx context.Context, tr trace.Tracer, at time.Time)

// endWith ends s at at with kv set last: in one call on a span of ours (EndAtWith, as the
// pipeline's recorder ends them), by SetAttributes and End on the SDK's.
func endWith(s trace.Span, at time.Time, kv ...attribute.KeyValue) {
	if e, ok := s.(interface {
		EndAtWith(time.Time, []attribute.KeyValue)
	}); ok {
		e.EndAtWith(at, kv)
		return
	}
	s.SetAttributes(kv...)
	s.End(trace.WithTimestamp(at))
}

// endWithSet sets set's attributes and kv on s and ends it at at: in one call (EndAtWithSet) on a
// span of ours, as the pipeline's recorder ends a span with fixed attributes, in three on the
// SDK's.
func endWithSet(s trace.Span, at time.Time, set *attribute.Set, kv ...attribute.KeyValue) {
	if e, ok := s.(interface {
		EndAtWithSet(time.Time, *attribute.Set, []attribute.KeyValue)
	}); ok {
		e.EndAtWithSet(at, set, kv)
		return
	}
	s.SetAttributes(set.ToSlice()...)
	s.SetAttributes(kv...)
	s.End(trace.WithTimestamp(at))
}

// eventAt adds an event without attributes to s at at: through AddEventAt on a span of ours, as
// the pipeline's recorder marks the first token, through AddEvent on the SDK's.
func eventAt(s trace.Span, name string, at time.Time) {
	if e, ok := s.(interface{ AddEventAt(string, time.Time) }); ok {
		e.AddEventAt(name, at)
		return
	}
	s.AddEvent(name, trace.WithTimestamp(at))
}

func TestTracerProviderRecordsAsTheSDK(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 123_456_789)
	long := strings.Repeat("é", 20) // 20 characters, 40 bytes
	errBoom := errors.New("boom")
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = 8
	small := limits
	small.AttributeCountLimit = 4
	small.EventCountLimit = 2
	small.LinkCountLimit = 1
	small.AttributePerEventCountLimit = 1
	small.AttributePerLinkCountLimit = 1
	tests := []struct {
		name   string
		limits sdktrace.SpanLimits
		run    script
	}{
		{"plain", limits, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			s.End(trace.WithTimestamp(at.Add(time.Millisecond)))
		}},
		{"attributes of every type, an empty one, duplicates, invalid and long values", limits, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(attribute.String("start", "yes")))
			s.SetAttributes(attribute.Bool("b", true), attribute.Int("i", -7), attribute.Float64("f", 2.5),
				attribute.String("s", long), attribute.StringSlice("ss", []string{"short", long}),
				attribute.Int64Slice("is", []int64{1, 2}), attribute.BoolSlice("bs", []bool{true}),
				attribute.Float64Slice("fs", []float64{0.5}), attribute.KeyValue{Key: "empty"}, attribute.KeyValue{},
				attribute.String("", "no key"))
			s.SetAttributes(attribute.Int("i", 8), attribute.String("start", "again"))
			s.SetName("renamed")
			s.End(trace.WithTimestamp(at.Add(time.Second)))
		}},
		{"attribute count limit", small, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			s.SetAttributes(attribute.Int("a", 1), attribute.Int("b", 2), attribute.Int("c", 3))
			s.SetAttributes(attribute.Int("a", 10), attribute.Int("d", 4), attribute.Int("e", 5), attribute.String("b", long))
			s.SetAttributes(attribute.Int("f", 6))
			s.End(trace.WithTimestamp(at.Add(time.Second)))
		}},
		{"attributes and the end in one call (EndAtWith)", small, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			s.SetAttributes(attribute.Int("a", 1), attribute.Int("b", 2))
			endWith(s, at.Add(time.Second), attribute.Int("a", 10), attribute.String("c", long), attribute.Int("d", 4), attribute.Int("e", 5))
			endWith(s, at.Add(2*time.Second), attribute.Int("late", 1))
		}},
		{"a fixed set, attributes and the end in one call (EndAtWithSet)", limits, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			set := attribute.NewSet(attribute.String("db", "memory"), attribute.Int("shard", 3), attribute.Bool("ok", true),
				attribute.Float64("w", 0.5), attribute.String("empty", ""))
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			s.SetAttributes(attribute.Int("before", 1))
			endWithSet(s, at.Add(time.Second), &set, attribute.Int("shard", 4), attribute.String("s", long))
			endWithSet(s, at.Add(2*time.Second), &set, attribute.Int("late", 1))
		}},
		{"a fixed set with a value longer than the limit", limits, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			set := attribute.NewSet(attribute.String("db", long), attribute.Int("shard", 3))
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			endWithSet(s, at.Add(time.Second), &set, attribute.Int("rows", 5))
		}},
		{"a fixed set over the attribute count limit", small, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			set := attribute.NewSet(attribute.String("db", "memory"), attribute.Int("shard", 3), attribute.Int("a", 7))
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			s.SetAttributes(attribute.Int("a", 1), attribute.Int("b", 2))
			endWithSet(s, at.Add(time.Second), &set, attribute.Int("rows", 5))
		}},
		{"a fixed set holding a slice and no attributes besides", limits, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			set := attribute.NewSet(attribute.StringSlice("ids", []string{"a", long}), attribute.Int("shard", 3))
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			endWithSet(s, at.Add(time.Second), &set)
		}},
		{"events at an instant (AddEventAt), over the limit", small, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			for i := range 3 {
				eventAt(s, fmt.Sprintf("token%d", i), at.Add(time.Duration(i)*time.Millisecond))
			}
			s.End(trace.WithTimestamp(at.Add(time.Second)))
			eventAt(s, "late", at.Add(2*time.Second))
		}},
		{"events, links and their limits", small, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled})
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at), trace.WithLinks(trace.Link{SpanContext: other,
				Attributes: []attribute.KeyValue{attribute.String("l", long), attribute.Int("dropped", 1)}}))
			s.AddLink(trace.Link{SpanContext: other})
			for i := range 3 {
				s.AddEvent(fmt.Sprintf("e%d", i), trace.WithTimestamp(at.Add(time.Duration(i)*time.Microsecond)),
					trace.WithAttributes(attribute.String("k", long), attribute.Int("n", i)))
			}
			s.End(trace.WithTimestamp(at.Add(time.Second)))
		}},
		{"status and errors", limits, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			s.SetStatus(codes.Error, "first")
			s.SetStatus(codes.Unset, "ignored")
			s.RecordError(errBoom, trace.WithTimestamp(at.Add(time.Microsecond)))
			s.RecordError(nil)
			s.SetStatus(codes.Ok, "ok drops the description")
			s.SetStatus(codes.Error, "ok is final")
			s.End(trace.WithTimestamp(at.Add(time.Second)))
		}},
		{"changes after the end are ignored", limits, func(ctx context.Context, tr trace.Tracer, at time.Time) {
			_, s := tr.Start(ctx, "child", trace.WithTimestamp(at))
			s.End(trace.WithTimestamp(at.Add(time.Second)))
			s.SetAttributes(attribute.Int("late", 1))
			s.AddEvent("late")
			s.SetStatus(codes.Error, "late")
			s.SetName("late")
			s.End(trace.WithTimestamp(at.Add(2 * time.Second)))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t, tt.limits, sdktrace.ParentBased(sdktrace.AlwaysSample()))
			var want, got, wantRoot, gotRoot sdktrace.ReadOnlySpan
			for i, tp := range []trace.TracerProvider{p.sdk, p.ours} {
				tr := tp.Tracer("conformance", trace.WithInstrumentationVersion("1.0"))
				ctx, root := tr.Start(context.Background(), "root", trace.WithTimestamp(t0))
				tt.run(ctx, tr, t0.Add(time.Millisecond))
				root.End(trace.WithTimestamp(t0.Add(time.Hour)))
				rec := []*tracetest.SpanRecorder{p.sdkRec, p.oursRec}[i]
				ended := rec.Ended()
				if len(ended) != 2 {
					t.Fatalf("provider %d: %d spans ended, want 2", i, len(ended))
				}
				child := ended[0]
				if child.Parent().SpanID() != root.SpanContext().SpanID() || child.SpanContext().TraceID() != root.SpanContext().TraceID() {
					t.Errorf("provider %d: child's parent %v, want the root %v", i, child.Parent(), root.SpanContext())
				}
				if i == 0 {
					want, wantRoot = child, ended[1]
				} else {
					got, gotRoot = child, ended[1]
				}
			}
			compareSpans(t, want, got, tt.limits.AttributeValueLengthLimit)
			compareSpans(t, wantRoot, gotRoot, tt.limits.AttributeValueLengthLimit)
			// The ring got the span itself, not a copy, and reads the same.
			tr, ok := p.oursRing.Find(got.SpanContext().TraceID())
			if !ok || len(tr.Spans) != 2 {
				t.Fatalf("ring: trace %v found %v with %d spans, want 2", got.SpanContext().TraceID(), ok, len(tr.Spans))
			}
			if _, ok := tr.Spans[0].(*localSpan); !ok {
				t.Errorf("ring holds a %T for the child, want the tracer's own span", tr.Spans[0])
			}
			compareSpans(t, want, tr.Spans[0], tt.limits.AttributeValueLengthLimit)
		})
	}
}

// compareSpans fails t where got differs from want in anything but ids and the child count. The
// one intended difference: TracerProvider cuts the values of event and link attributes to
// valueLen too (exception messages quote what clients sent), where the SDK keeps them whole.
func compareSpans(t *testing.T, want, got SpanData, valueLen int) {
	t.Helper()
	check := func(what string, w, g any) {
		t.Helper()
		if fmt.Sprint(w) != fmt.Sprint(g) {
			t.Errorf("%s: got %v, want %v (the SDK's)", what, g, w)
		}
	}
	check("name", want.Name(), got.Name())
	check("kind", want.SpanKind(), got.SpanKind())
	check("start", want.StartTime().UnixNano(), got.StartTime().UnixNano())
	check("end", want.EndTime().UnixNano(), got.EndTime().UnixNano())
	check("attributes", attrMap(want.Attributes()), attrMap(got.Attributes()))
	check("attribute order", keys(want.Attributes()), keys(got.Attributes()))
	check("dropped attributes", want.DroppedAttributes(), got.DroppedAttributes())
	check("status", want.Status(), got.Status())
	check("dropped events", want.DroppedEvents(), got.DroppedEvents())
	check("dropped links", want.DroppedLinks(), got.DroppedLinks())
	check("trace flags", want.SpanContext().TraceFlags(), got.SpanContext().TraceFlags())
	check("parent remote", want.Parent().IsRemote(), got.Parent().IsRemote())
	check("scope", want.InstrumentationScope(), got.InstrumentationScope())
	check("resource", want.Resource(), got.Resource())
	we, ge := want.Events(), got.Events()
	check("events", len(we), len(ge))
	for i := range min(len(we), len(ge)) {
		check("event name", we[i].Name, ge[i].Name)
		check("event attributes", attrMap(cut(we[i].Attributes, valueLen)), attrMap(ge[i].Attributes))
		check("event dropped attributes", we[i].DroppedAttributeCount, ge[i].DroppedAttributeCount)
		if we[i].Name != "exception" || !strings.Contains(fmt.Sprint(attrMap(we[i].Attributes)), "stacktrace") {
			check("event time", we[i].Time.UnixNano(), ge[i].Time.UnixNano())
		}
	}
	wl, gl := want.Links(), got.Links()
	check("links", len(wl), len(gl))
	for i := range min(len(wl), len(gl)) {
		check("link", wl[i].SpanContext, gl[i].SpanContext)
		check("link attributes", attrMap(cut(wl[i].Attributes, valueLen)), attrMap(gl[i].Attributes))
		check("link dropped attributes", wl[i].DroppedAttributeCount, gl[i].DroppedAttributeCount)
	}
}

func keys(attrs []attribute.KeyValue) []attribute.Key {
	out := make([]attribute.Key, len(attrs))
	for i, a := range attrs {
		out[i] = a.Key
	}
	return out
}

// cut returns attrs with their values cut to n characters.
func cut(attrs []attribute.KeyValue, n int) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		out[i] = truncateAttr(a, n)
	}
	return out
}

// TestTracerProviderSamples: the sampler decides a root, a span with a remote parent, a span
// whose parent is not sampled and a new root; a child of a sampled span of this process is
// sampled without asking it.
func TestTracerProviderSamples(t *testing.T) {
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, Remote: true})
	root := func(tr trace.Tracer) context.Context {
		ctx, _ := tr.Start(context.Background(), "root")
		return ctx
	}
	tests := []struct {
		name               string
		sampler            sdktrace.Sampler
		parent             func(tr trace.Tracer) context.Context
		opts               []trace.SpanStartOption
		recording, sampled bool
		sameTrace          bool
	}{
		{"root, always on", sdktrace.AlwaysSample(), func(trace.Tracer) context.Context { return context.Background() }, nil, true, true, false},
		{"root, always off", sdktrace.NeverSample(), func(trace.Tracer) context.Context { return context.Background() }, nil, false, false, false},
		{"remote sampled parent, parent-based", sdktrace.ParentBased(sdktrace.NeverSample()),
			func(trace.Tracer) context.Context {
				return trace.ContextWithRemoteSpanContext(context.Background(), remote)
			}, nil, true, true, true},
		{"remote unsampled parent, parent-based", sdktrace.ParentBased(sdktrace.AlwaysSample()),
			func(trace.Tracer) context.Context {
				return trace.ContextWithRemoteSpanContext(context.Background(), remote.WithTraceFlags(0))
			}, nil, false, false, true},
		{"unsampled local parent", sdktrace.ParentBased(sdktrace.NeverSample()), root, nil, false, false, true},
		{"new root under a sampled parent, always off", sdktrace.ParentBased(sdktrace.AlwaysSample()),
			func(tr trace.Tracer) context.Context {
				return trace.ContextWithSpanContext(context.Background(), remote.WithRemote(false))
			}, []trace.SpanStartOption{trace.WithNewRoot()}, true, true, false},
		{"sampled local parent", sdktrace.ParentBased(sdktrace.NeverSample()), func(tr trace.Tracer) context.Context {
			return trace.ContextWithSpanContext(context.Background(), remote.WithRemote(false))
		}, nil, true, true, true},
		{"record only", recordOnly{}, func(trace.Tracer) context.Context { return context.Background() }, nil, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t, sdktrace.NewSpanLimits(), tt.sampler)
			for i, tp := range []trace.TracerProvider{p.sdk, p.ours} {
				tr := tp.Tracer("t")
				ctx := tt.parent(tr)
				_, s := tr.Start(ctx, "span", tt.opts...)
				if s.IsRecording() != tt.recording || s.SpanContext().IsSampled() != tt.sampled {
					t.Errorf("provider %d: recording %v sampled %v, want %v %v", i, s.IsRecording(), s.SpanContext().IsSampled(), tt.recording, tt.sampled)
				}
				if same := s.SpanContext().TraceID() == trace.SpanContextFromContext(ctx).TraceID(); same != tt.sameTrace {
					t.Errorf("provider %d: in the parent's trace %v, want %v", i, same, tt.sameTrace)
				}
				s.End()
			}
			if ws, gs := len(p.sdkRec.Ended()), len(p.oursRec.Ended()); ws != gs {
				t.Errorf("processors saw %d spans of ours, %d of the SDK's", gs, ws)
			}
		})
	}
	t.Run("after shutdown", func(t *testing.T) {
		p := newPair(t, sdktrace.NewSpanLimits(), sdktrace.AlwaysSample())
		tr := p.ours.Tracer("t")
		ctx, root := tr.Start(context.Background(), "root")
		if err := p.oursProvider.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, parent := range []context.Context{ctx, context.Background()} {
			_, s := tr.Start(parent, "late")
			if s.IsRecording() {
				t.Errorf("a span started after Shutdown records")
			}
			s.End()
		}
		root.End()
		if n := len(p.oursRec.Ended()); n != 0 {
			t.Errorf("%d spans reached the processors after Shutdown", n)
		}
	})
}

// recordOnly records every span without sampling it.
type recordOnly struct{}

func (recordOnly) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}
func (recordOnly) Description() string { return "RecordOnly" }

// TestSamplerFromEnv reads OTEL_TRACES_SAMPLER and _ARG as the SDK does.
func TestSamplerFromEnv(t *testing.T) {
	tests := []struct {
		sampler, arg string
		want         sdktrace.Sampler
		err          bool
	}{
		{"", "", sdktrace.ParentBased(sdktrace.AlwaysSample()), false},
		{"always_on", "", sdktrace.AlwaysSample(), false},
		{" Always_Off ", "", sdktrace.NeverSample(), false},
		{"traceidratio", "0.25", sdktrace.TraceIDRatioBased(0.25), false},
		{"traceidratio", "", sdktrace.TraceIDRatioBased(1), false},
		{"traceidratio", "2", sdktrace.TraceIDRatioBased(1), true},
		{"traceidratio", "x", sdktrace.TraceIDRatioBased(1), true},
		{"parentbased_always_on", "", sdktrace.ParentBased(sdktrace.AlwaysSample()), false},
		{"parentbased_always_off", "", sdktrace.ParentBased(sdktrace.NeverSample()), false},
		{"parentbased_traceidratio", "0.5", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5)), false},
		{"parentbased_traceidratio", "-1", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(1)), true},
		{"jaeger_remote", "", sdktrace.ParentBased(sdktrace.AlwaysSample()), true},
	}
	for _, tt := range tests {
		t.Run(tt.sampler+"/"+tt.arg, func(t *testing.T) {
			env := map[string]string{"OTEL_TRACES_SAMPLER": tt.sampler, "OTEL_TRACES_SAMPLER_ARG": tt.arg}
			got, err := samplerFromEnv(func(k string) string { return env[k] })
			if (err != nil) != tt.err {
				t.Errorf("error %v, want one: %v", err, tt.err)
			}
			if got.Description() != tt.want.Description() {
				t.Errorf("sampler %s, want %s", got.Description(), tt.want.Description())
			}
		})
	}
}

// TestTracerProviderConcurrentSpans ends children from many goroutines while their parent gains
// children and the ring is read (go test -race).
func TestTracerProviderConcurrentSpans(t *testing.T) {
	p := newPair(t, sdktrace.NewSpanLimits(), sdktrace.AlwaysSample())
	tr := p.ours.Tracer("t")
	ctx, root := tr.Start(context.Background(), "root")
	ctx, parent := tr.Start(ctx, "parent")
	const workers, each = 8, 25 // within DefaultRingMaxSpans
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, s := tr.Start(ctx, "child")
				s.SetAttributes(attribute.Int("w", w), attribute.Int("i", i))
				s.AddEvent("e")
				s.End()
				_ = p.oursRing.Stats()
			}
		})
	}
	wg.Wait()
	parent.End()
	root.End()
	if got := parent.(SpanData).ChildSpanCount(); got != workers*each {
		t.Errorf("parent counts %d children, want %d", got, workers*each)
	}
	if got := len(p.oursRec.Ended()); got != workers*each+2 {
		t.Errorf("processor saw %d spans, want %d", got, workers*each+2)
	}
	tr2, ok := p.oursRing.Find(root.SpanContext().TraceID())
	if !ok || len(tr2.Spans) != workers*each+2 {
		t.Fatalf("ring kept the trace: %v, %d spans; want %d", ok, len(tr2.Spans), workers*each+2)
	}
}

// TestRingGathersARequestsSpans: the spans of a local root's subtree reach the ring together
// when the root ends, bounded by RingMaxSpans, stragglers join the kept trace, and two requests
// within one trace are both kept; the ring ends up as it does fed by the SDK, span by span.
func TestRingGathersARequestsSpans(t *testing.T) {
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7},
		TraceFlags: trace.FlagsSampled, Remote: true})
	tests := []struct {
		name string
		run  func(tr trace.Tracer) trace.TraceID
	}{
		{"within the bound", func(tr trace.Tracer) trace.TraceID {
			ctx, root := tr.Start(context.Background(), "root")
			for i := range 3 {
				_, s := tr.Start(ctx, fmt.Sprint("child ", i))
				s.End()
			}
			root.End()
			return root.SpanContext().TraceID()
		}},
		{"over the bound", func(tr trace.Tracer) trace.TraceID {
			ctx, root := tr.Start(context.Background(), "root")
			ctx2, mid := tr.Start(ctx, "mid")
			for i := range 6 {
				_, s := tr.Start(ctx2, fmt.Sprint("grandchild ", i))
				s.End()
			}
			mid.End()
			root.End()
			return root.SpanContext().TraceID()
		}},
		{"stragglers", func(tr trace.Tracer) trace.TraceID {
			ctx, root := tr.Start(context.Background(), "root")
			_, early := tr.Start(ctx, "early")
			_, late := tr.Start(ctx, "late")
			early.End()
			root.End()
			late.End()
			return root.SpanContext().TraceID()
		}},
		{"two requests in one trace", func(tr trace.Tracer) trace.TraceID {
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), caller)
			ctx1, r1 := tr.Start(ctx, "request 1")
			ctx2, r2 := tr.Start(ctx, "request 2")
			_, c1 := tr.Start(ctx1, "child 1")
			_, c2 := tr.Start(ctx2, "child 2")
			c1.End()
			c2.End()
			r2.End()
			r1.End()
			return caller.TraceID()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t, sdktrace.NewSpanLimits(), sdktrace.ParentBased(sdktrace.AlwaysSample()))
			p.sdkRing, p.oursRing = NewRing(0, 0, 5), NewRing(0, 0, 5)
			p.oursProvider.ring = p.oursRing
			sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.sdkRing))
			t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
			var shapes [2]string
			for i, tp := range []trace.TracerProvider{sdk, p.ours} {
				ring := []*Ring{p.sdkRing, p.oursRing}[i]
				id := tt.run(tp.Tracer("t"))
				tr, ok := ring.Find(id)
				if !ok {
					t.Fatalf("provider %d: trace not kept", i)
				}
				var names, roots []string
				for _, s := range tr.Spans {
					names = append(names, s.Name())
				}
				for _, s := range tr.Roots {
					roots = append(roots, s.Name())
				}
				slices.Sort(names)
				shapes[i] = fmt.Sprintf("spans %d %v roots %v dropped %d stats %+v", len(tr.Spans), names, roots, tr.Dropped, ring.Stats())
				if len(tr.Spans) > 5 {
					t.Errorf("provider %d: %d spans kept, over the bound of 5", i, len(tr.Spans))
				}
			}
			if shapes[0] != shapes[1] {
				t.Errorf("ring fed by the SDK:\n  %s\nby TracerProvider:\n  %s", shapes[0], shapes[1])
			}
		})
	}
}
