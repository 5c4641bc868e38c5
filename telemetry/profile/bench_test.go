package profile

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkSpan measures what the span-to-profile link adds to a span's start and end: the
// pprof label set otel-profiling-go builds and puts on the goroutine.
func BenchmarkSpan(b *testing.B) {
	sdk := sdktrace.NewTracerProvider() // sampled, no processor: the SDK's own cost only
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"sdk", sdk},
		{"wrapped root span ids", (&Profiler{}).WrapTracerProvider(sdk)},
		{"wrapped all span ids", (&Profiler{cfg: Config{AllSpans: true}}).WrapTracerProvider(sdk)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tracer := bc.tp.Tracer("bench")
			ctx, root := tracer.Start(context.Background(), "server")
			defer root.End()
			b.ReportAllocs()
			for b.Loop() {
				_, span := tracer.Start(ctx, "chat")
				span.End()
			}
		})
	}
}

// BenchmarkStoreQuery measures a /debug/profiles query by trace over a full store: 60 CPU
// windows of 500 distinct stacks each, one trace in 50 per window.
func BenchmarkStoreQuery(b *testing.B) {
	s := NewStore(60, 0)
	for w := range 60 {
		var samples []synthSample
		for i := range 500 {
			trace := fmt.Sprintf("%032x", w*1000+i%50+1)
			samples = append(samples, synthSample{
				stack:  stack(fmt.Sprintf("leaf%d", i), fmt.Sprintf("mid%d", i%40), "handler", "main"),
				labels: labels(LabelTraceID, trace, LabelStage, "generate"),
				count:  int64(1 + i%7),
			})
		}
		from := t0.Add(time.Duration(w) * 10 * time.Second)
		if err := s.Add(KindCPU, from, from.Add(10*time.Second), cpuProfile(b, samples...)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(s.Stats().Bytes)/60, "bytes/window")
	q := Query{TraceID: fmt.Sprintf("%032x", 30*1000+7)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Query(q); err != nil {
			b.Fatal(err)
		}
	}
}
