package profile

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"sync"
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

// parkLabelled starts n goroutines parked on a channel under trace, span and stage labels, as
// requests waiting on shards or the engine are; the returned func releases them.
func parkLabelled(tb testing.TB, n int) (release func()) {
	tb.Helper()
	ch := make(chan struct{})
	var wg, parked sync.WaitGroup
	parked.Add(n)
	for i := range n {
		ctx := pprof.WithLabels(context.Background(), pprof.Labels(
			LabelTraceID, fmt.Sprintf("%032x", i/4+1), LabelSpanID, fmt.Sprintf("%016x", i/4+1), LabelStage, "retrieve"))
		wg.Go(func() {
			pprof.Do(ctx, pprof.Labels(), func(context.Context) {
				parked.Done()
				<-ch
			})
		})
	}
	parked.Wait()
	return func() { close(ch); wg.Wait() }
}

// parkUnlabelled starts n goroutines parked in a select without labels, as the pipeline's idle
// fan-out workers are; the returned func releases them.
func parkUnlabelled(n int) (release func()) {
	ch := make(chan struct{})
	var wg, parked sync.WaitGroup
	parked.Add(n)
	for range n {
		wg.Go(func() {
			t := time.NewTimer(time.Hour)
			defer t.Stop()
			parked.Done()
			select {
			case <-ch:
			case <-t.C:
			}
		})
	}
	parked.Wait()
	return func() { close(ch); wg.Wait() }
}

// BenchmarkWallSnapshot measures one wall-sampler tick (goroutine profile, parse, filter,
// merge into the open window) with n labelled goroutines parked, and idle unlabelled ones
// beside them (the goroutine profile records every goroutine; the sampler keeps the labelled),
// and reports the share of one core it costs at DefaultWallRate (%core@default) and at 50 Hz,
// the default before.
func BenchmarkWallSnapshot(b *testing.B) {
	for _, c := range []struct{ labelled, idle int }{{10, 0}, {100, 0}, {1000, 0}, {10, 256}} {
		name := fmt.Sprintf("goroutines=%d", c.labelled)
		if c.idle > 0 {
			name += fmt.Sprintf(",idle=%d", c.idle)
		}
		b.Run(name, func(b *testing.B) {
			release := parkLabelled(b, c.labelled)
			defer release()
			defer parkUnlabelled(c.idle)()
			w := newWallSampler(NewStore(0, 0), time.Now, DefaultWallRate, DefaultStoreWindow)
			w.open = w.newWindow(time.Now())
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				w.sample(&buf)
			}
			perSnapshot := float64(w.costNanos.Load()) / float64(w.snapshots.Load())
			b.ReportMetric(perSnapshot/1e3, "us/snapshot")
			b.ReportMetric(perSnapshot*DefaultWallRate/1e9*100, "%core@default")
			b.ReportMetric(perSnapshot*50/1e9*100, "%core@50Hz")
		})
	}
}

// BenchmarkWallOverhead measures what the sampler costs the work it watches: the time of a fixed
// amount of labelled CPU-bound work with 100 labelled goroutines parked beside it, sampler off
// and at 20, 50 and 100 Hz (each snapshot briefly stops the world and suspends running
// goroutines to record their stacks).
func BenchmarkWallOverhead(b *testing.B) {
	release := parkLabelled(b, 100)
	defer release()
	for _, rate := range []float64{0, 20, 50, 100} {
		b.Run(fmt.Sprintf("rate=%gHz", rate), func(b *testing.B) {
			if rate > 0 {
				w := newWallSampler(NewStore(0, 0), time.Now, rate, DefaultStoreWindow)
				w.start()
				defer w.stopAndFlush()
			}
			ctx := pprof.WithLabels(context.Background(), pprof.Labels(LabelStage, "generate"))
			pprof.Do(ctx, pprof.Labels(), func(context.Context) {
				x := uint64(88172645463325252)
				for b.Loop() {
					for range 1_000_000 {
						x ^= x << 13
						x ^= x >> 7
						x ^= x << 17
					}
				}
				burnSink = x
			})
		})
	}
}
