package profile

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/pprof"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/grafana/pyroscope-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestParseLabels(t *testing.T) {
	tests := []struct {
		name, in string
		want     labelSet
	}{
		{"all three", `{"rag_stage":"retrieve", "span_id":"00f067aa0ba902b7", "trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}`,
			labelSet{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "retrieve"}},
		{"others ignored", `{"a":"x, \"y\"", "rag_stage":"generate"}`, labelSet{stage: "generate"}},
		{"empty", `{}`, labelSet{}},
		{"truncated", `{"rag_stage":"gen`, labelSet{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseLabels(tt.in); got != tt.want {
				t.Errorf("parseLabels(%s) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// TestGoroutineProfileCarriesLabels checks what the wall sampler relies on: the goroutine
// profile's text form lists a parked goroutine's stack with its pprof labels.
func TestGoroutineProfileCarriesLabels(t *testing.T) {
	release := parkLabelled(t, 4)
	defer release()
	w := newWallSampler(NewStore(0, 0), time.Now, 100, time.Second)
	w.open = w.newWindow(time.Now())
	var buf bytes.Buffer
	w.sample(&buf)
	want := labelSet{fmt.Sprintf("%032x", 1), fmt.Sprintf("%016x", 1), "retrieve"}
	if got := w.open.presence[want].snapshots; got != 1 {
		t.Fatalf("label set %+v seen in %d snapshots, want 1; presence %v", want, got, w.open.presence)
	}
	var n wallCount
	for k, c := range w.open.counts {
		if k.labels == want {
			n.goroutines += c.goroutines
		}
	}
	if n.goroutines != 4 {
		t.Errorf("%d goroutines counted under %+v, want the 4 parked", n, want)
	}
}

// threadCPU returns the CPU time the calling OS thread has used (RUSAGE_THREAD).
func threadCPU(tb testing.TB) time.Duration {
	tb.Helper()
	const rusageThread = 1 // RUSAGE_THREAD on Linux
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tolerance is the sampling error of a count whose mean is mean: four standard deviations of a
// Poisson count, plus one sample for where the first and last sampling instants fall.
func tolerance(mean float64) float64 { return 4*math.Sqrt(mean) + 1 }

// TestAlignment plants work of known shape in known spans, a CPU burn in one stage span and a
// wait in another, and checks that the samples attributed to each span match it in amount
// (within sampling error at the samplers' rates) and in time (on the clock of span timestamps).
func TestAlignment(t *testing.T) {
	if testing.Short() {
		t.Skip("profiles for about two seconds")
	}
	const (
		wallRate = 100.0 // Hz
		cpuRate  = 100.0 // pyroscope-go's CPU profiling rate
		burn     = 200 * time.Millisecond
		wait     = 300 * time.Millisecond
	)
	p, err := Start(Config{Window: time.Second, WallRate: wallRate, AllSpans: true,
		ProfileTypes: []pyroscope.ProfileType{pyroscope.ProfileCPU}, Logger: slog.New(&logRecorder{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	if !waitFor(t, 5*time.Second, func() bool {
		return slices.ContainsFunc(p.Store().Windows(), func(w WindowInfo) bool { return w.Kind == KindCPU })
	}) {
		t.Fatal("no CPU window stored")
	}
	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	tracer := p.WrapTracerProvider(sdk).Tracer("ragtail/test")

	ctx, root := tracer.Start(context.Background(), "POST /v1/chat/completions")
	var burnCPUTime time.Duration
	gctx, gen := tracer.Start(ctx, "generate")
	pprof.Do(gctx, pprof.Labels(LabelStage, "generate"), func(context.Context) {
		runtime.LockOSThread()
		before := threadCPU(t)
		burnSink = burnCPU(burn)
		burnCPUTime = threadCPU(t) - before
		runtime.UnlockOSThread()
	})
	gen.End()
	rctx, ret := tracer.Start(ctx, "retrieve")
	pprof.Do(rctx, pprof.Labels(LabelStage, "retrieve"), func(ctx context.Context) {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
	})
	ret.End()
	root.End()
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	traceID := root.SpanContext().TraceID().String()

	// The CPU window holding the burn closes within a second of it.
	var cpu queryResult
	genSpan := spans["generate"]
	cq := Query{TraceID: traceID, SpanID: genSpan.SpanContext().SpanID().String(), From: genSpan.StartTime(), Until: genSpan.EndTime()}
	if !waitFor(t, 3*time.Second, func() bool {
		cpu, err = p.Store().query(cq)
		return err == nil && !cpu.until.Before(genSpan.EndTime())
	}) {
		t.Fatalf("CPU view of the generate span: %v", err)
	}
	_ = p.Stop() // closes the last wall window

	t.Run("cpu samples of the burn", func(t *testing.T) {
		want := burnCPUTime.Seconds() * cpuRate
		got := float64(cpu.stageNanos["generate"]) / float64(time.Second/cpuRate)
		t.Logf("burn: %v wall, %v CPU on its thread; %.0f CPU samples attributed, %.1f expected ± %.1f",
			burn, burnCPUTime, got, want, tolerance(want))
		if math.Abs(got-want) > tolerance(want) {
			t.Errorf("%.0f CPU samples in the generate span, want %.1f ± %.1f", got, want, tolerance(want))
		}
		if cpu.from.After(genSpan.StartTime()) || cpu.until.Before(genSpan.EndTime()) {
			t.Errorf("CPU windows [%v, %v] do not bracket the span [%v, %v]", cpu.from, cpu.until, genSpan.StartTime(), genSpan.EndTime())
		}
	})

	st := p.WallStats()
	u := time.Duration(st.StampUncertaintySec * float64(time.Second))
	period := time.Duration(float64(time.Second) / wallRate)
	// Past its budget the sampler skips ticks; each snapshot then stands for a longer interval,
	// up to MaxWallInterval ticks' worth, plus however late the sampler's goroutine woke: the
	// longest interval it measured widens the granularity term from one period to that.
	longest := max(MaxWallInterval, time.Duration(st.MaxIntervalSec*float64(time.Second)))
	granularity := float64(longest) / float64(period)
	for _, name := range []string{"generate", "retrieve"} {
		t.Run("wall samples of "+name, func(t *testing.T) {
			sp := spans[name]
			q := Query{Type: ProfileWall, TraceID: traceID, SpanID: sp.SpanContext().SpanID().String()}
			res, err := p.Store().query(q)
			if err != nil {
				t.Fatal(err)
			}
			d := sp.EndTime().Sub(sp.StartTime())
			want := d.Seconds() * wallRate
			got := float64(res.stageNanos[name]) / float64(period)
			tol := 4*math.Sqrt(want) + granularity
			t.Logf("%s: span %v; present for %.1f periods, %.1f expected ± %.1f", name, d, got, want, tol)
			if math.Abs(got-want) > tol {
				t.Errorf("%s span present for %.1f periods, want %.1f ± %.1f", name, got, want, tol)
			}
			// In time: no snapshot outside the span (give or take a stamp's uncertainty) saw its
			// label, and the first and last that did are within a period of its ends.
			first, last := seenRange(p.Store(), labelSet{traceID, q.SpanID, name})
			lead, trail := first.Sub(sp.StartTime()), sp.EndTime().Sub(last)
			t.Logf("%s: first snapshot %v after the span's start, last %v before its end (period %v, stamp uncertainty %v)",
				name, lead, trail, period, u)
			if lead < -u || trail < -u {
				t.Errorf("%s: a snapshot outside the span carries its label: lead %v, trail %v, uncertainty %v", name, lead, trail, u)
			}
			if edge := longest + u; lead > edge || trail > edge {
				t.Errorf("%s: span edges %v and %v from the nearest snapshot seeing it, want at most the longest interval plus the stamp uncertainty, %v", name, lead, trail, edge)
			}
		})
	}
	t.Logf("wall sampler: %d snapshots, %.0f us each, %.2f%% of a core at %g Hz (effective %.1f Hz), stamp uncertainty %v, longest interval %v",
		st.Snapshots, st.MeanCostSec*1e6, st.CoreShare*100, st.RateHz, st.EffectiveRateHz, u,
		time.Duration(st.MaxIntervalSec*float64(time.Second)))
}

// seenRange returns the first and last snapshot times that saw ls in the stored wall windows.
func seenRange(s *Store, ls labelSet) (first, last time.Time) {
	for _, w := range s.overlapping(KindWall, time.Time{}, time.Time{}) {
		sn, ok := w.presence[ls]
		if !ok {
			continue
		}
		if first.IsZero() || sn.first.Before(first) {
			first = sn.first
		}
		if sn.last.After(last) {
			last = sn.last
		}
	}
	return first, last
}
