package profile

import (
	"context"
	"maps"
	"runtime/pprof"
	"testing"

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
