package profile

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func ctxLabels(ctx context.Context) map[string]string {
	m := map[string]string{}
	pprof.ForLabels(ctx, func(k, v string) bool { m[k] = v; return true })
	return m
}

func profileID(s sdktrace.ReadOnlySpan) string {
	for _, kv := range s.Attributes() {
		if kv.Key == attribute.Key("pyroscope.profile.id") {
			return kv.Value.AsString()
		}
	}
	return ""
}

// TestWrapTracerProvider checks the labels otel-profiling-go sets under our wrapper, without a
// profiling session: the labels live in the context and on the goroutine whether or not
// anything samples them.
func TestWrapTracerProvider(t *testing.T) {
	tests := []struct {
		name     string
		allSpans bool
		sampler  sdktrace.Sampler
		// want the child's span_id label to be the child's own id (else the root's)
		childOwnID bool
		// want the child span to carry pyroscope.profile.id
		childAttr bool
		labelled  bool
	}{
		{name: "root span scope", sampler: sdktrace.AlwaysSample(), labelled: true},
		{name: "all spans scope", allSpans: true, sampler: sdktrace.AlwaysSample(), childOwnID: true, childAttr: true, labelled: true},
		{name: "unsampled", sampler: sdktrace.NeverSample()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(tt.sampler))
			defer func() { _ = sdk.Shutdown(context.Background()) }()
			p := &Profiler{cfg: Config{AllSpans: tt.allSpans}}
			tracer := p.WrapTracerProvider(sdk).Tracer("test")

			rootCtx, root := tracer.Start(context.Background(), "server")
			childCtx, child := tracer.Start(rootCtx, "chat")
			var stageLabels map[string]string
			pprof.Do(childCtx, pprof.Labels(LabelStage, "generate"), func(ctx context.Context) { stageLabels = ctxLabels(ctx) })
			child.End()
			root.End()

			rootLabels, childLabels := ctxLabels(rootCtx), ctxLabels(childCtx)
			if !tt.labelled {
				if rootLabels[LabelSpanID] != "" || rootLabels[LabelTraceID] != "" || childLabels[LabelTraceID] != "" {
					t.Errorf("unsampled spans labelled: %v %v", rootLabels, childLabels)
				}
				return
			}
			rootID, childID := root.SpanContext().SpanID().String(), child.SpanContext().SpanID().String()
			traceID := root.SpanContext().TraceID().String()
			wantChild := rootID
			if tt.childOwnID {
				wantChild = childID
			}
			if rootLabels[LabelSpanID] != rootID || rootLabels[LabelTraceID] != traceID {
				t.Errorf("root labels %v, want span_id %s trace_id %s", rootLabels, rootID, traceID)
			}
			if childLabels[LabelSpanID] != wantChild || childLabels[LabelTraceID] != traceID {
				t.Errorf("child labels %v, want span_id %s trace_id %s", childLabels, wantChild, traceID)
			}
			want := maps.Clone(childLabels)
			want[LabelStage] = "generate"
			if !maps.Equal(stageLabels, want) {
				t.Errorf("labels inside pprof.Do %v, want %v", stageLabels, want)
			}

			attrs := map[trace.SpanID]string{}
			for _, s := range rec.Ended() {
				attrs[s.SpanContext().SpanID()] = profileID(s)
			}
			if attrs[root.SpanContext().SpanID()] != rootID {
				t.Errorf("root pyroscope.profile.id = %q, want %s", attrs[root.SpanContext().SpanID()], rootID)
			}
			if got := attrs[child.SpanContext().SpanID()]; (got == childID) != tt.childAttr {
				t.Errorf("child pyroscope.profile.id = %q (all spans: %v)", got, tt.allSpans)
			}
		})
	}
}

func TestNilProfiler(t *testing.T) {
	var p *Profiler
	sdk := sdktrace.NewTracerProvider()
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	if got := p.WrapTracerProvider(sdk); got != trace.TracerProvider(sdk) {
		t.Error("a nil profiler wrapped the provider")
	}
	if p.Store() != nil || p.Stop() != nil || p.PushStats() != (PushStats{}) {
		t.Error("nil profiler not inert")
	}
}

// instantProvider gives the SDK's tracers and spans the StartAt and EndAt of telemetry's, so
// that WrapTracerProvider takes its own root-labelling path around them.
type instantProvider struct {
	trace.TracerProvider
}

func (p instantProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return instantTracerOf{p.TracerProvider.Tracer(name, opts...)}
}

type instantTracerOf struct{ trace.Tracer }

func (t instantTracerOf) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, s := t.Tracer.Start(ctx, name, opts...)
	return ctx, instantSpanOf{s}
}

func (t instantTracerOf) StartAt(ctx context.Context, name string, at time.Time) (context.Context, trace.Span) {
	return t.Start(ctx, name, trace.WithTimestamp(at))
}

type instantSpanOf struct{ trace.Span }

func (s instantSpanOf) EndAt(at time.Time) { s.End(trace.WithTimestamp(at)) }

// recordOnly records spans without sampling them.
type recordOnly struct{}

func (recordOnly) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}
func (recordOnly) Description() string { return "RecordOnly" }

// goroutineLabels returns the calling goroutine's pprof labels, read from a goroutine profile.
func goroutineLabels(t *testing.T) map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	for rec := range strings.SplitSeq(buf.String(), "\n\n") {
		if !strings.Contains(rec, "profile.goroutineLabels") {
			continue
		}
		labels := map[string]string{}
		for line := range strings.SplitSeq(rec, "\n") {
			if l, ok := strings.CutPrefix(line, "# labels: "); ok {
				if err := json.Unmarshal([]byte(l), &labels); err != nil {
					t.Fatalf("labels %q: %v", l, err)
				}
			}
		}
		return labels
	}
	t.Fatal("the calling goroutine is not in the goroutine profile")
	return nil
}

// TestRootLabelsAsOtelProfilingGo checks that the root labelling WrapTracerProvider does itself
// around a tracer with StartAt (telemetry's) sets what otel-profiling-go sets around any other:
// the same labels on the root's and a child's contexts and on the goroutine while the root runs,
// the goroutine's labels of before restored when it ends, and the same pyroscope.profile.id
// attributes, for sampled, record-only and unsampled roots, with and without a name, started
// with Start and with StartAt.
func TestRootLabelsAsOtelProfilingGo(t *testing.T) {
	// observe runs one root and child on tp and returns what they left, with the root's trace
	// and span ids written as TRACE and ROOT so that two runs compare.
	observe := func(t *testing.T, tp trace.TracerProvider, rec *tracetest.SpanRecorder, name string, at bool) map[string]any {
		t.Helper()
		parent := pprof.WithLabels(context.Background(), pprof.Labels("request", "r1"))
		pprof.SetGoroutineLabels(parent)
		defer pprof.SetGoroutineLabels(context.Background())
		tracer := tp.Tracer("test")
		var (
			rootCtx context.Context
			root    trace.Span
		)
		if at {
			rootCtx, root = tracer.(interface {
				StartAt(context.Context, string, time.Time) (context.Context, trace.Span)
			}).StartAt(parent, name, time.Now())
		} else {
			rootCtx, root = tracer.Start(parent, name)
		}
		during := goroutineLabels(t)
		childCtx, child := tracer.Start(rootCtx, "child")
		child.End()
		if e, ok := root.(interface{ EndAt(time.Time) }); ok && at {
			e.EndAt(time.Now())
		} else {
			root.End()
		}
		after := goroutineLabels(t)
		norm := strings.NewReplacer(root.SpanContext().TraceID().String(), "TRACE", root.SpanContext().SpanID().String(), "ROOT")
		normalize := func(m map[string]string) map[string]string {
			out := map[string]string{}
			for k, v := range m {
				out[k] = norm.Replace(v)
			}
			return out
		}
		attrs := map[string]string{}
		for _, s := range rec.Ended() {
			attrs[s.Name()] = norm.Replace(profileID(s))
		}
		rec.Reset()
		return map[string]any{
			"root ctx": normalize(ctxLabels(rootCtx)), "child ctx": normalize(ctxLabels(childCtx)),
			"goroutine during root": normalize(during), "goroutine after root": normalize(after),
			"pyroscope.profile.id": attrs,
		}
	}
	for _, sampler := range []sdktrace.Sampler{sdktrace.AlwaysSample(), recordOnly{}, sdktrace.NeverSample()} {
		for _, name := range []string{"server", ""} {
			t.Run(sampler.Description()+"/"+name, func(t *testing.T) {
				rec := tracetest.NewSpanRecorder()
				sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler))
				defer func() { _ = sdk.Shutdown(context.Background()) }()
				p := &Profiler{}
				want := observe(t, p.WrapTracerProvider(sdk), rec, name, false) // through otel-profiling-go
				if _, ok := p.WrapTracerProvider(instantProvider{sdk}).Tracer("x").(*instantRootLabelTracer); !ok {
					t.Fatal("a tracer with StartAt is not labelled by instantRootLabelTracer")
				}
				for _, at := range []bool{false, true} {
					got := observe(t, p.WrapTracerProvider(instantProvider{sdk}), rec, name, at)
					if !reflect.DeepEqual(got, want) {
						t.Errorf("StartAt %v:\n got %v\nwant %v", at, got, want)
					}
				}
				if sampler == sdktrace.AlwaysSample() && want["goroutine during root"].(map[string]string)[LabelSpanID] != "ROOT" {
					t.Errorf("otel-profiling-go's labels: %v", want)
				}
			})
		}
	}
}
