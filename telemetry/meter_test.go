package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.opentelemetry.io/otel/trace"
)

// meterSide is one of the two meter providers the tests compare: the SDK's, or ragtail's with
// the SDK's reader taking it as a producer.
type meterSide struct {
	name   string
	mp     metric.MeterProvider
	reader *sdkmetric.ManualReader
	bound  bool // record through BindFloat64 and BindInt64
}

func meterSides(t *testing.T) []meterSide {
	t.Helper()
	sdkReader := sdkmetric.NewManualReader()
	ours := newMeterProvider(true, time.Now)
	ourReader := sdkmetric.NewManualReader(sdkmetric.WithProducer(ours))
	ours.sdk = sdkmetric.NewMeterProvider(sdkmetric.WithReader(ourReader))
	bound := newMeterProvider(true, time.Now)
	boundReader := sdkmetric.NewManualReader(sdkmetric.WithProducer(bound))
	bound.sdk = sdkmetric.NewMeterProvider(sdkmetric.WithReader(boundReader))
	return []meterSide{
		{name: "sdk", mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkReader)), reader: sdkReader},
		{name: "ours", mp: ours, reader: ourReader},
		{name: "ours bound", mp: bound, reader: boundReader, bound: true},
	}
}

// sampledCtx returns a context within a sampled span of trace i, for exemplars.
func sampledCtx(i byte) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{i, 1}, SpanID: trace.SpanID{i, 2}, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

// unsampledCtx is within a span that is not sampled: no exemplar.
var unsampledCtx = trace.ContextWithSpanContext(context.Background(),
	trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}}))

// meterScript makes the same instruments and measurements on a side's provider, through the
// instruments' options or, on a bound side, through bound recorders of the same sets.
func meterScript(t *testing.T, s meterSide, round int) {
	t.Helper()
	m := s.mp.Meter("github.com/ragtail/ragtail/rag/pipeline", metric.WithInstrumentationVersion("v1"))
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	stage, err := m.Float64Histogram("rag.stage.duration", metric.WithUnit("s"), metric.WithDescription("stage"),
		metric.WithExplicitBucketBoundaries(0.0009765625, 0.0078125, 0.125, 1))
	keep(err)
	tokens, err := m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}")) // the default buckets
	keep(err)
	cache, err := m.Int64Counter("rag.cache.requests", metric.WithUnit("{request}"))
	keep(err)
	inflight, err := m.Int64UpDownCounter("rag.inflight_requests")
	keep(err)
	cost, err := m.Float64Counter("rag.cost")
	keep(err)
	unused, err := m.Float64Histogram("rag.unused") // no measurements: not exported
	keep(err)
	_ = unused
	again, err := m.Int64Counter("rag.cache.requests", metric.WithUnit("{request}")) // the same instrument
	keep(err)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", s.name, errors.Join(errs...))
	}

	embed := attribute.NewSet(attribute.String("rag.stage", "embed"), attribute.String("rag.coupling", "sync"))
	fetch := attribute.NewSet(attribute.String("rag.stage", "fetch"), attribute.String("rag.coupling", "sync"))
	hit := attribute.NewSet(attribute.String("result", "hit"))
	miss := attribute.NewSet(attribute.String("result", "miss"))
	input := attribute.NewSet(attribute.String("gen_ai.token.type", "input"))
	none := *attribute.EmptySet()

	recF := func(h metric.Float64Histogram, set attribute.Set) func(context.Context, float64) {
		if s.bound {
			return h.(interface {
				BindFloat64(attribute.Set) func(context.Context, float64)
			}).BindFloat64(set)
		}
		return func(ctx context.Context, v float64) { h.Record(ctx, v, metric.WithAttributeSet(set)) }
	}
	type int64Binder interface {
		BindInt64(attribute.Set) func(context.Context, int64)
	}
	recI := func(h metric.Int64Histogram, set attribute.Set) func(context.Context, int64) {
		if s.bound {
			return h.(int64Binder).BindInt64(set)
		}
		return func(ctx context.Context, v int64) { h.Record(ctx, v, metric.WithAttributeSet(set)) }
	}
	addI := func(c interface {
		Add(context.Context, int64, ...metric.AddOption)
	}, set attribute.Set) func(context.Context, int64) {
		if s.bound {
			return c.(int64Binder).BindInt64(set)
		}
		return func(ctx context.Context, v int64) { c.Add(ctx, v, metric.WithAttributeSet(set)) }
	}

	// One sampled measurement per histogram bucket and per sum series at most, so that every
	// one is kept as an exemplar whatever the reservoirs draw. The values are binary fractions,
	// so that their sums are exact in whatever order the SDK adds them.
	base := byte(10 * round)
	if s.bound {
		// A set bound but never recorded has no series, as a set never measured has none in
		// the SDK.
		recF(stage, attribute.NewSet(attribute.String("rag.stage", "never")))
		addI(cache, attribute.NewSet(attribute.String("result", "never")))
	}
	embedRec := recF(stage, embed)
	embedRec(sampledCtx(base+1), 0.00048828125)                                                                                                           // first bucket
	embedRec(context.Background(), 0.0009765625)                                                                                                          // on a boundary: first bucket
	embedRec(unsampledCtx, 0.0625)                                                                                                                        // third
	embedRec(sampledCtx(base+2), 7)                                                                                                                       // above every bound
	recF(stage, fetch)(context.Background(), -1)                                                                                                          // negative: the first bucket, and the minimum
	stage.Record(context.Background(), 0.015625, metric.WithAttributes(attribute.String("rag.stage", "embed"), attribute.String("rag.coupling", "sync"))) // the same series, by attributes
	recI(tokens, input)(sampledCtx(base+3), 900)
	recI(tokens, input)(context.Background(), 12000)
	addI(cache, hit)(sampledCtx(base+4), 3)
	addI(again, miss)(context.Background(), 1)
	addI(inflight, none)(context.Background(), 1)
	addI(inflight, none)(context.Background(), -1)
	addI(inflight, none)(sampledCtx(base+5), 1)
	cost.Add(context.Background(), 0.25, metric.WithAttributes(attribute.String("model", "m")))
}

// collect reads a side's data.
func collect(t *testing.T, s meterSide) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("%s: collect: %v", s.name, err)
	}
	return rm
}

// TestMeterProviderAggregatesAsTheSDK runs the same instruments and measurements through the
// SDK's meter provider and through ragtail's, by options and through bound recorders, and
// requires the same data from their readers: the same metrics, series, counts, sums, buckets,
// minima and maxima, and the same exemplars, over two collections (cumulative).
func TestMeterProviderAggregatesAsTheSDK(t *testing.T) {
	sides := meterSides(t)
	for round := range 2 {
		for _, s := range sides {
			meterScript(t, s, round)
		}
		want := collect(t, sides[0])
		if len(want.ScopeMetrics) != 1 || len(want.ScopeMetrics[0].Metrics) != 5 {
			t.Fatalf("the SDK's data: %+v", want.ScopeMetrics)
		}
		for _, s := range sides[1:] {
			got := collect(t, s)
			metricdatatest.AssertEqual(t, want, got, metricdatatest.IgnoreTimestamp())
		}
	}
}

// TestMeterProviderCardinalityLimit checks that past OTEL_GO_X_CARDINALITY_LIMIT label sets an
// instrument's measurements go to the otel.metric.overflow series, as the SDK's do.
func TestMeterProviderCardinalityLimit(t *testing.T) {
	t.Setenv("OTEL_GO_X_CARDINALITY_LIMIT", "4")
	sides := meterSides(t)
	for _, s := range sides {
		c, err := s.mp.Meter("github.com/ragtail/ragtail/x").Int64Counter("requests")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 9 {
			set := attribute.NewSet(attribute.String("user", fmt.Sprint(i%7)))
			if s.bound {
				c.(interface {
					BindInt64(attribute.Set) func(context.Context, int64)
				}).BindInt64(set)(context.Background(), int64(i))
			} else {
				c.Add(context.Background(), int64(i), metric.WithAttributeSet(set))
			}
		}
	}
	want := collect(t, sides[0])
	points := want.ScopeMetrics[0].Metrics[0].Data.(metricdata.Sum[int64]).DataPoints
	if len(points) != 4 {
		t.Fatalf("the SDK kept %d series, want 4", len(points))
	}
	for _, s := range sides[1:] {
		metricdatatest.AssertEqual(t, want, collect(t, s), metricdatatest.IgnoreTimestamp())
	}
}

// TestMeterProviderScopes checks that only ragtail's scopes are aggregated by ragtail, that the
// exemplar filter follows OTEL_METRICS_EXEMPLAR_FILTER, that an invalid instrument name and
// non-monotonic boundaries are errors with a working instrument, and that asking again for a
// histogram returns the first one, all as in the SDK, and that with own aggregation off (delta
// temporality wanted) every scope is the SDK's.
func TestMeterProviderScopes(t *testing.T) {
	t.Setenv("OTEL_METRICS_EXEMPLAR_FILTER", "always_off")
	sides := meterSides(t)
	ours := sides[1].mp.(*MeterProvider)
	if _, ok := ours.Meter("go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp").(*meter); ok {
		t.Error("otelhttp's scope got ragtail's meter")
	}
	if _, ok := ours.Meter(OwnScopePrefix + "rag/httpapi").(*meter); !ok {
		t.Error("ragtail's scope got the SDK's meter")
	}
	for _, s := range sides[:2] {
		h, err := s.mp.Meter(OwnScopePrefix + "x").Float64Histogram("9bad name")
		if !errors.Is(err, sdkmetric.ErrInstrumentName) {
			t.Errorf("%s: invalid name: error %v, want ErrInstrumentName", s.name, err)
		}
		h.Record(sampledCtx(1), 1) // always_off: no exemplar
		m := s.mp.Meter(OwnScopePrefix + "x")
		first, err1 := m.Int64Histogram("sized", metric.WithExplicitBucketBoundaries(1, 2, 3))
		again, err2 := m.Int64Histogram("sized", metric.WithExplicitBucketBoundaries(5, 6)) // the same instrument, its first boundaries
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v, %v", s.name, err1, err2)
		}
		first.Record(context.Background(), 2)
		again.Record(context.Background(), 4)
		bad, err := m.Float64Histogram("unsorted", metric.WithExplicitBucketBoundaries(3, 1))
		if err == nil {
			t.Errorf("%s: non-monotonic boundaries: no error", s.name)
		}
		bad.Record(context.Background(), 7) // the default boundaries
	}
	metricdatatest.AssertEqual(t, collect(t, sides[0]), collect(t, sides[1]), metricdatatest.IgnoreTimestamp())

	off := newMeterProvider(false, time.Now)
	off.sdk = sdkmetric.NewMeterProvider()
	if _, ok := off.Meter(OwnScopePrefix + "rag/pipeline").(*meter); ok {
		t.Error("with own aggregation off, ragtail's scope got ragtail's meter")
	}
}

// TestDeltaPreferred checks the temporality preferences that turn ragtail's aggregation off.
func TestDeltaPreferred(t *testing.T) {
	for v, want := range map[string]bool{"": false, "cumulative": false, "delta": true, " LowMemory ": true} {
		t.Setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", v)
		if got := deltaPreferred(); got != want {
			t.Errorf("%q: deltaPreferred %v, want %v", v, got, want)
		}
	}
}

// TestMeterProviderConcurrent records from several goroutines, bound and by options, while a
// reader collects, and requires every measurement in the final collection.
func TestMeterProviderConcurrent(t *testing.T) {
	s := meterSides(t)[2]
	m := s.mp.Meter(OwnScopePrefix + "x")
	h, err := m.Int64Histogram("latency", metric.WithExplicitBucketBoundaries(10, 100))
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Int64Counter("requests")
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 2000
	sets := []attribute.Set{attribute.NewSet(attribute.Int("w", 0)), attribute.NewSet(attribute.Int("w", 1))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			collect(t, s)
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			set := sets[w%2]
			rec := h.(interface {
				BindInt64(attribute.Set) func(context.Context, int64)
			}).BindInt64(set)
			for i := range each {
				if i%2 == 0 {
					rec(sampledCtx(byte(w)), int64(i%200))
				} else {
					h.Record(context.Background(), int64(i%200), metric.WithAttributeSet(set))
				}
				c.Add(context.Background(), 1, metric.WithAttributeSet(set))
			}
		})
	}
	wg.Wait()
	<-done
	rm := collect(t, s)
	var count, total uint64
	for _, mt := range rm.ScopeMetrics[0].Metrics {
		switch d := mt.Data.(type) {
		case metricdata.Histogram[int64]:
			for _, dp := range d.DataPoints {
				var buckets uint64
				for _, n := range dp.BucketCounts {
					buckets += n
				}
				if buckets != dp.Count {
					t.Errorf("%v: buckets hold %d measurements, count says %d", dp.Attributes, buckets, dp.Count)
				}
				count += dp.Count
			}
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				total += uint64(dp.Value)
			}
		}
	}
	if count != workers*each || total != workers*each {
		t.Errorf("histogram count %d, counter total %d: want %d each", count, total, workers*each)
	}
}
