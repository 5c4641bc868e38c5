package telemetry

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ringWith returns a ring and a tracer whose spans it receives.
func ringWith(tb testing.TB, recent, slowest, maxSpans int) (*Ring, trace.Tracer) {
	tb.Helper()
	r := NewRing(recent, slowest, maxSpans)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())), sdktrace.WithSpanProcessor(r))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return r, tp.Tracer("test")
}

// span starts and ends a span under ctx at [start, start+d].
func span(tr trace.Tracer, ctx context.Context, name string, start time.Time, d time.Duration, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, s := tr.Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return ctx, s
}

// rootTrace records a trace whose root lasts d, with children ending before it, and returns its id.
func rootTrace(tr trace.Tracer, start time.Time, d time.Duration, children int) trace.TraceID {
	ctx, root := span(tr, context.Background(), "root", start, d)
	for i := range children {
		_, c := span(tr, ctx, "child", start.Add(time.Duration(i)), time.Microsecond)
		c.End(trace.WithTimestamp(start.Add(time.Duration(i) + time.Microsecond)))
	}
	root.End(trace.WithTimestamp(start.Add(d)))
	return root.SpanContext().TraceID()
}

func ids(traces []*Trace) []trace.TraceID {
	out := make([]trace.TraceID, len(traces))
	for i, t := range traces {
		out[i] = t.ID
	}
	return out
}

func TestRingKeepsRecentAndSlowestApart(t *testing.T) {
	t.Parallel()
	r, tr := ringWith(t, 3, 2, 16)
	durations := []time.Duration{5, 1, 9, 3, 7, 2}
	var all []trace.TraceID
	for i, d := range durations {
		all = append(all, rootTrace(tr, epoch.Add(time.Duration(i)*time.Second), d*time.Millisecond, 2))
	}
	if got, want := ids(r.Recent(10)), []trace.TraceID{all[5], all[4], all[3]}; !slices.Equal(got, want) {
		t.Errorf("Recent = %v, want the last three, newest first: %v", got, want)
	}
	if got, want := ids(r.Slowest(10)), []trace.TraceID{all[2], all[4]}; !slices.Equal(got, want) {
		t.Errorf("Slowest = %v, want the 9 ms and 7 ms traces: %v", got, want)
	}
	if got := ids(r.Slowest(1)); !slices.Equal(got, []trace.TraceID{all[2]}) {
		t.Errorf("Slowest(1) = %v", got)
	}
	// The 9 ms trace left the recent list but stays findable as one of the slowest.
	if tr, ok := r.Find(all[2]); !ok || len(tr.Spans) != 3 || tr.Duration != 9*time.Millisecond {
		t.Errorf("Find(slow trace) = %+v, %v", tr, ok)
	}
	// The 5 ms trace is in neither list any more.
	if _, ok := r.Find(all[0]); ok {
		t.Error("an evicted trace is still found")
	}
	if s := r.Stats(); s.Traces != 6 || s.Spans != 18 {
		t.Errorf("stats %+v, want 6 traces of 3 spans", s)
	}
	r.Reset()
	if len(r.Recent(10)) != 0 || len(r.Slowest(10)) != 0 {
		t.Error("Reset left traces behind")
	}
}

func TestRingBounds(t *testing.T) {
	t.Parallel()
	t.Run("spans per trace", func(t *testing.T) {
		t.Parallel()
		r, tr := ringWith(t, 4, 4, 4)
		id := rootTrace(tr, epoch, time.Millisecond, 10)
		got, ok := r.Find(id)
		if !ok || len(got.Spans) != 4 || got.Root == nil || got.Root.Name() != "root" {
			t.Fatalf("trace %+v: want 3 children and the root", got)
		}
		if s := r.Stats(); s.DroppedSpans != 7 {
			t.Errorf("dropped %d spans, want 7", s.DroppedSpans)
		}
	})
	t.Run("pending traces", func(t *testing.T) {
		t.Parallel()
		r, tr := ringWith(t, 4, 4, 16)
		r.pendingCap = 3
		// Five traces whose roots never end: only the last three stay pending.
		var roots []trace.Span
		for i := range 5 {
			ctx, root := span(tr, context.Background(), "root", epoch.Add(time.Duration(i)), time.Second)
			roots = append(roots, root)
			_, c := span(tr, ctx, "child", epoch, time.Millisecond)
			c.End()
		}
		if n := len(r.pending); n != 3 {
			t.Errorf("%d traces pending, want 3", n)
		}
		if s := r.Stats(); s.EvictedPending != 2 {
			t.Errorf("evicted %d pending traces, want 2", s.EvictedPending)
		}
		roots[4].End()
		got, ok := r.Find(roots[4].SpanContext().TraceID())
		if !ok || len(got.Spans) != 2 {
			t.Errorf("completed trace %+v: want its child and root", got)
		}
		roots[0].End()
		got, ok = r.Find(roots[0].SpanContext().TraceID())
		if !ok || len(got.Spans) != 1 {
			t.Errorf("trace whose child was evicted: %+v, want the root alone", got)
		}
	})
	t.Run("stragglers join their trace", func(t *testing.T) {
		t.Parallel()
		r, tr := ringWith(t, 4, 4, 16)
		ctx, root := span(tr, context.Background(), "root", epoch, 0)
		_, late := span(tr, ctx, "late", epoch, 0)
		root.End(trace.WithTimestamp(epoch.Add(time.Millisecond)))
		late.End(trace.WithTimestamp(epoch.Add(time.Second)))
		got, _ := r.Find(root.SpanContext().TraceID())
		if len(got.Spans) != 2 || got.Duration != time.Millisecond {
			t.Errorf("trace %+v: want the root (1 ms) and the late span", got)
		}
	})
	t.Run("local roots of one trace are grouped within the bound", func(t *testing.T) {
		t.Parallel()
		r, tr := ringWith(t, 4, 4, 8)
		// Three requests in one remote trace, three spans each (root and two children): nine
		// spans for a bound of eight.
		remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true}))
		for i := range 3 {
			start := epoch.Add(time.Duration(i) * time.Second)
			ctx, root := span(tr, remote, "root", start, 0)
			for range 2 {
				_, c := span(tr, ctx, "child", start, 0)
				c.End(trace.WithTimestamp(start.Add(time.Millisecond)))
			}
			root.End(trace.WithTimestamp(start.Add(time.Duration(i+1) * time.Millisecond)))
		}
		got, ok := r.Find(trace.TraceID{1})
		if !ok {
			t.Fatal("trace not kept")
		}
		if len(got.Roots) != 2 || len(got.Spans) != 8 || got.Dropped != 1 || got.Duration != 2*time.Millisecond {
			t.Errorf("roots %d, spans %d, dropped %d, duration %v: want 2 roots (the third did not fit), 8 spans, 1 dropped, 2ms",
				len(got.Roots), len(got.Spans), got.Dropped, got.Duration)
		}
		if s := r.Stats(); s.Spans != 8 || s.DroppedSpans != 1 || s.Traces != 3 {
			t.Errorf("stats %+v: want 8 spans kept, 1 dropped, 3 roots completed", s)
		}
		if n := len(r.Recent(10)); n != 1 {
			t.Errorf("%d recent traces, want the one", n)
		}
	})
	t.Run("unsampled spans are ignored", func(t *testing.T) {
		t.Parallel()
		r := NewRing(4, 4, 16)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(r))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		_, s := tp.Tracer("t").Start(context.Background(), "root")
		s.End()
		if n := len(r.Recent(10)); n != 0 {
			t.Errorf("%d traces from an unsampled span", n)
		}
	})
}

// pipelineTrace records a trace shaped like one request: server span, rag.pipeline, stage spans,
// two Query spans under retrieval, and a stream span whose write time is less than its length.
func pipelineTrace(tr trace.Tracer, start time.Time) trace.TraceID {
	stage := func(s string) attribute.KeyValue { return rag.AttrStage.String(s) }
	ms := time.Millisecond
	ctx, server := span(tr, context.Background(), "POST /v1/chat/completions", start, 0, stage("http"))
	pctx, pipe := span(tr, ctx, rag.SpanPipeline, start.Add(ms), 0, stage("pipeline"), rag.AttrRequestID.String("req-9"))
	end := func(s trace.Span, at time.Duration) { s.End(trace.WithTimestamp(start.Add(at))) }
	_, emb := span(tr, pctx, "embeddings m", start.Add(2*ms), 0, stage("embed"))
	end(emb, 4*ms)
	rctx, ret := span(tr, pctx, "retrieval c", start.Add(4*ms), 0, stage("retrieve"))
	_, q0 := span(tr, rctx, "Query c", start.Add(4*ms), 0, stage("retrieve"))
	_, q1 := span(tr, rctx, "Query c", start.Add(4*ms), 0, stage("retrieve"))
	end(q0, 7*ms)
	end(q1, 9*ms)
	ret.AddEvent(rag.EventLateShardDropped, trace.WithTimestamp(start.Add(9*ms)))
	end(ret, 9*ms)
	_, chat := span(tr, pctx, "chat m", start.Add(10*ms), 0, stage("generate"))
	_, stream := span(tr, pctx, rag.SpanStream, start.Add(12*ms), 0, stage("stream"), rag.AttrStreamWriteMS.Float64(0.5))
	end(stream, 20*ms)
	end(chat, 20*ms)
	end(pipe, 21*ms)
	end(server, 22*ms)
	return server.SpanContext().TraceID()
}

func TestTraceView(t *testing.T) {
	t.Parallel()
	r, tr := ringWith(t, 4, 4, 32)
	id := pipelineTrace(tr, epoch)
	got, ok := r.Find(id)
	if !ok {
		t.Fatal("trace not kept")
	}
	v := got.View()
	if v.Root != "POST /v1/chat/completions" || v.DurationMS != 22 || v.RequestID != "req-9" || v.TraceID != id.String() {
		t.Errorf("view header %+v", v)
	}
	want := map[string]float64{"embed": 2, "retrieve": 5, "generate": 10, "stream": 0.5}
	if len(v.Stages) != len(want) {
		t.Errorf("stages %v, want %v", v.Stages, want)
	}
	for stage, ms := range want {
		if v.Stages[stage] != ms {
			t.Errorf("stage %s = %v ms, want %v (each stage once, Query spans not added to retrieve)", stage, v.Stages[stage], ms)
		}
	}
	if len(v.Waterfall) != 8 {
		t.Fatalf("waterfall has %d spans, want 8", len(v.Waterfall))
	}
	for i, s := range v.Waterfall {
		if i > 0 && s.StartOffsetMS < v.Waterfall[i-1].StartOffsetMS {
			t.Errorf("waterfall not in start order at %d", i)
		}
		if s.Stage == "" {
			t.Errorf("span %s without a stage", s.Name)
		}
	}
	ret := v.Waterfall[3]
	if ret.Name != "retrieval c" || ret.StartOffsetMS != 4 || ret.DurationMS != 5 || len(ret.Events) != 1 || ret.Events[0].OffsetMS != 9 {
		t.Errorf("retrieval entry %+v", ret)
	}
}

func TestTracesHandler(t *testing.T) {
	t.Parallel()
	r, tr := ringWith(t, 8, 3, 32)
	var traces []trace.TraceID
	for i := range 6 {
		traces = append(traces, rootTrace(tr, epoch.Add(time.Duration(i)*time.Second), time.Duration(i+1)*time.Millisecond, 1))
	}
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	tests := []struct {
		name, query string
		status      int
		want        []trace.TraceID
	}{
		{"recent", "", 200, []trace.TraceID{traces[5], traces[4], traces[3], traces[2], traces[1], traces[0]}},
		{"recent limit", "?limit=2", 200, []trace.TraceID{traces[5], traces[4]}},
		{"slowest", "?slowest=2", 200, []trace.TraceID{traces[5], traces[4]}},
		{"slowest more than kept", "?slowest=5", 200, []trace.TraceID{traces[5], traces[4], traces[3]}},
		{"one trace", "?trace_id=" + traces[1].String(), 200, []trace.TraceID{traces[1]}},
		{"unknown trace", "?trace_id=" + trace.TraceID{1}.String(), 404, nil},
		{"bad trace id", "?trace_id=xyz", 400, nil},
		{"bad slowest", "?slowest=0", 400, nil},
		{"bad limit", "?limit=many", 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tt.query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status != 200 {
				var e struct {
					Error struct{ Message string } `json:"error"`
				}
				if json.NewDecoder(resp.Body).Decode(&e) != nil || e.Error.Message == "" {
					t.Error("error without a message")
				}
				return
			}
			var got []string
			if strings.HasPrefix(tt.query, "?trace_id=") {
				var v TraceView
				if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
					t.Fatal(err)
				}
				got = []string{v.TraceID}
			} else {
				var list TraceList
				if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
					t.Fatal(err)
				}
				if list.Count != len(list.Traces) {
					t.Errorf("count %d for %d traces", list.Count, len(list.Traces))
				}
				for _, v := range list.Traces {
					got = append(got, v.TraceID)
				}
			}
			want := make([]string, len(tt.want))
			for i, id := range tt.want {
				want[i] = id.String()
			}
			if !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// BenchmarkRingTrace records one trace of a root and ten children into the ring: the SDK's span
// cost plus the ring's grouping, per trace.
func BenchmarkRingTrace(b *testing.B) {
	r, tr := ringWith(b, DefaultRingRecent, DefaultRingSlowest, DefaultRingMaxSpans)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		rootTrace(tr, epoch.Add(time.Duration(i)), time.Duration(i%1000)*time.Microsecond, 10)
	}
	_ = r
}

// BenchmarkRingOnEnd is the ring's own share of a trace's cost: ten children and a root, as a
// request of the pipeline makes, handed to OnEnd as ready snapshots, so that the SDK's work
// (starting, attributing and snapshotting the spans) is left out.
func BenchmarkRingOnEnd(b *testing.B) {
	const traces, children = 4096, 10
	spans := make([][]sdktrace.ReadOnlySpan, traces)
	for i := range spans {
		tid := trace.TraceID{0: 1, 8: byte(i), 9: byte(i >> 8)}
		root := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0: 1}, TraceFlags: trace.FlagsSampled})
		for c := range children {
			sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0: 2, 1: byte(c)}, TraceFlags: trace.FlagsSampled})
			spans[i] = append(spans[i], tracetest.SpanStub{Name: "child", SpanContext: sc, Parent: root, StartTime: epoch, EndTime: epoch.Add(time.Microsecond)}.Snapshot())
		}
		spans[i] = append(spans[i], tracetest.SpanStub{Name: "root", SpanContext: root, StartTime: epoch, EndTime: epoch.Add(time.Millisecond)}.Snapshot())
	}
	r := NewRing(DefaultRingRecent, DefaultRingSlowest, DefaultRingMaxSpans)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%traces == 0 {
			r.Reset() // every trace id is new to the ring again
		}
		for _, s := range spans[i%traces] {
			r.OnEnd(s)
		}
	}
}

// trackedSpan is an ended span whose collection a test can watch.
type trackedSpan struct{ sdktrace.ReadOnlySpan }

// TestRingResetReleasesTraces checks that Reset lets the collector have the traces the ring
// held, the slowest ones included (their heap's array outlives its length).
func TestRingResetReleasesTraces(t *testing.T) {
	r := NewRing(4, 2, 16)
	freed := make(chan struct{}, 16)
	for i := range 6 {
		s := &trackedSpan{tracetest.SpanStub{
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i + 1)}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}),
			StartTime:   epoch, EndTime: epoch.Add(time.Duration(i+1) * time.Millisecond),
		}.Snapshot()}
		runtime.AddCleanup(s, func(struct{}) { freed <- struct{}{} }, struct{}{})
		r.OnEnd(s)
	}
	if len(r.Slowest(10)) != 2 {
		t.Fatalf("slowest: %d traces, want 2", len(r.Slowest(10)))
	}
	r.Reset()
	deadline := time.After(10 * time.Second)
	for n := 0; n < 6; {
		runtime.GC()
		select {
		case <-freed:
			n++
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of 6 traces freed after Reset: the ring still holds the others", n)
		}
	}
	runtime.KeepAlive(r)
}
