package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// traced returns a tracer provider recording every span, and the recorder.
func traced(tb testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	tb.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(sr))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// spanAttr returns the attribute key of s.
func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func byName(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func one(tb testing.TB, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	tb.Helper()
	got := byName(spans, name)
	if len(got) != 1 {
		names := make([]string, len(spans))
		for i, s := range spans {
			names[i] = s.Name()
		}
		tb.Fatalf("%d spans named %q, want 1; spans: %v", len(got), name, names)
	}
	return got[0]
}

// waitSpans waits until the recorder holds n ended spans; late shards end after Run returns.
func waitSpans(tb testing.TB, sr *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans := sr.Ended()
		if len(spans) >= n || time.Now().After(deadline) {
			return spans
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSpansOfOneRun(t *testing.T) {
	t.Parallel()
	for _, coupling := range rag.Couplings {
		t.Run(string(coupling), func(t *testing.T) {
			t.Parallel()
			tp, sr := traced(t)
			b := zeroLatency(4)
			b.ret.delays = []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}
			p := b.pipeline(t, pipeline.Config{AsyncQuorum: 4, AsyncDeadline: time.Minute}, pipeline.WithAdmitter(&fakeAdmitter{}), pipeline.WithTracerProvider(tp))

			ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
			q := query(coupling, 3)
			q.UserID = "user-7"
			res, err := p.Run(ctx, q, &recordingSink{tb: t})
			parent.End()
			if err != nil {
				t.Fatal(err)
			}
			spans := waitSpans(t, sr, 1+1+6+4)

			root := one(t, spans, rag.SpanPipeline)
			if root.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("rag.pipeline parent = %v, want the caller's span", root.Parent().SpanID())
			}
			for _, kv := range []attribute.KeyValue{
				rag.AttrStage.String(rag.StagePipeline),
				rag.AttrRequestID.String("req-1"),
				rag.AttrUserID.String("user-7"),
				rag.AttrQueryHash.String(pipeline.QueryHash("What is the answer?")),
				rag.AttrCoupling.String(string(coupling)),
				rag.AttrTopK.Int(3),
				rag.AttrChunkIDs.StringSlice(res.ChunkIDs),
				rag.AttrFaultInjectedMS.Float64(0),
			} {
				if v, ok := spanAttr(root, kv.Key); !ok || v != kv.Value {
					t.Errorf("rag.pipeline %s = %v, want %v", kv.Key, v.String(), kv.Value.String())
				}
			}

			stageSpans := map[rag.Stage]string{
				rag.StageAdmission: rag.SpanAdmission,
				rag.StageEmbed:     "embeddings unknown",
				rag.StageRetrieve:  "retrieval test",
				rag.StageFetch:     rag.SpanFetch,
				rag.StageGenerate:  "chat model-a",
				rag.StageStream:    rag.SpanStream,
			}
			for stage, name := range stageSpans {
				s := one(t, spans, name)
				if s.Parent().SpanID() != root.SpanContext().SpanID() {
					t.Errorf("%s is not a child of rag.pipeline", name)
				}
				if v, _ := spanAttr(s, rag.AttrStage); v.AsString() != string(stage) {
					t.Errorf("%s rag.stage = %q, want %s", name, v.AsString(), stage)
				}
				timing, ok := res.Timing(stage)
				if !ok {
					t.Fatalf("no %s timing", stage)
				}
				// The span and the Server-Timing entry are the same clock readings.
				if !s.StartTime().Equal(timing.Start) {
					t.Errorf("%s span starts at %v, timing at %v", name, s.StartTime(), timing.Start)
				}
				if d := s.EndTime().Sub(s.StartTime()); stage != rag.StageStream && d != timing.Duration {
					t.Errorf("%s span lasts %v, Server-Timing says %v", name, d, timing.Duration)
				}
			}

			retrieval := one(t, spans, "retrieval test")
			queries := byName(spans, "Query test")
			if len(queries) != 4 {
				t.Fatalf("%d Query spans, want one per shard (4)", len(queries))
			}
			var shards []int
			for _, s := range queries {
				if s.Parent().SpanID() != retrieval.SpanContext().SpanID() {
					t.Errorf("Query span is not a child of the retrieval span")
				}
				for _, kv := range []attribute.KeyValue{
					attribute.String("db.system.name", pipeline.DefaultDBSystem),
					attribute.String("db.collection.name", "test"),
					attribute.String("db.operation.name", "Query"),
					rag.AttrStage.String(string(rag.StageRetrieve)),
					attribute.Int("db.response.returned_rows", 3),
				} {
					if v, ok := spanAttr(s, kv.Key); !ok || v != kv.Value {
						t.Errorf("Query span %s = %v, want %v", kv.Key, v.String(), kv.Value.String())
					}
				}
				v, _ := spanAttr(s, rag.AttrShard)
				shards = append(shards, int(v.AsInt64()))
			}
			slices.Sort(shards)
			if !slices.Equal(shards, []int{0, 1, 2, 3}) {
				t.Errorf("Query spans for shards %v, want 0..3", shards)
			}

			chat := one(t, spans, "chat model-a")
			for _, kv := range []attribute.KeyValue{
				attribute.String("gen_ai.operation.name", "chat"),
				attribute.String("gen_ai.provider.name", pipeline.DefaultProviderName),
				attribute.String("gen_ai.request.model", "model-a"),
				attribute.Int("gen_ai.request.max_tokens", 64),
				attribute.Float64("gen_ai.request.temperature", 0.5),
				attribute.Int("gen_ai.usage.input_tokens", 42),
				attribute.Int("gen_ai.usage.output_tokens", 5),
				attribute.StringSlice("gen_ai.response.finish_reasons", []string{"stop"}),
			} {
				if v, ok := spanAttr(chat, kv.Key); !ok || v != kv.Value {
					t.Errorf("chat %s = %v, want %v", kv.Key, v.String(), kv.Value.String())
				}
			}
			if v, ok := spanAttr(chat, "gen_ai.response.time_to_first_chunk"); !ok || v.AsFloat64() <= 0 {
				t.Errorf("chat gen_ai.response.time_to_first_chunk = %v", v.String())
			}
			if evs := chat.Events(); len(evs) != 1 || evs[0].Name != rag.EventFirstToken ||
				evs[0].Time.Before(chat.StartTime()) || evs[0].Time.After(chat.EndTime()) {
				t.Errorf("chat events %+v, want one %s inside the span", evs, rag.EventFirstToken)
			}
			for _, s := range spans {
				if _, ok := spanAttr(s, rag.AttrStage); !ok && s.Name() != "caller" {
					t.Errorf("span %s has no rag.stage", s.Name())
				}
				if s.Status().Code == codes.Error {
					t.Errorf("span %s has an error status: %s", s.Name(), s.Status().Description)
				}
			}
		})
	}
}

func TestLateShardsAreSpanEvents(t *testing.T) {
	t.Parallel()
	tp, sr := traced(t)
	b := zeroLatency(3)
	b.ret.delays = []time.Duration{0, 0, time.Second}
	p := b.pipeline(t, pipeline.Config{AsyncQuorum: 2, AsyncDeadline: time.Second}, pipeline.WithTracerProvider(tp))
	res, err := p.Run(context.Background(), query(rag.CouplingAsync, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ShardsLate != 1 {
		t.Fatalf("ShardsLate = %d, want 1", res.ShardsLate)
	}
	spans := waitSpans(t, sr, 1+4+3)
	retrieval := one(t, spans, "retrieval test")
	var late []int64
	for _, e := range retrieval.Events() {
		if e.Name == rag.EventLateShardDropped {
			for _, kv := range e.Attributes {
				if kv.Key == rag.AttrShard {
					late = append(late, kv.Value.AsInt64())
				}
			}
		}
	}
	if !slices.Equal(late, []int64{2}) {
		t.Errorf("late-shard events for shards %v, want [2]", late)
	}
	if v, _ := spanAttr(retrieval, rag.AttrShardsLate); v.AsInt64() != 1 {
		t.Errorf("rag.shards.late = %v, want 1", v.String())
	}
	// The late search is cancelled when Run returns: its span ends with the cancellation.
	for _, s := range byName(spans, "Query test") {
		if v, _ := spanAttr(s, rag.AttrShard); v.AsInt64() == 2 && s.Status().Code != codes.Error {
			t.Errorf("the late shard's Query span has status %v, want an error (cancelled)", s.Status())
		}
	}
}

func TestSpanErrors(t *testing.T) {
	t.Parallel()
	boom := fmt.Errorf("shard exploded: %w", rag.ErrUnavailable)
	tests := []struct {
		name      string
		setup     func(b *backends) []pipeline.Option
		failSpan  string // the span that must carry the error
		errorType string
	}{
		{"shard fails", func(b *backends) []pipeline.Option {
			b.ret.errs = []error{nil, boom}
			return nil
		}, "Query test", "unavailable"},
		{"admission sheds", func(*backends) []pipeline.Option {
			return []pipeline.Option{pipeline.WithAdmitter(&fakeAdmitter{err: fmt.Errorf("full: %w", rag.ErrOverloaded)})}
		}, rag.SpanAdmission, "overloaded"},
		{"generator fails", func(b *backends) []pipeline.Option {
			b.gen.genErr = fmt.Errorf("engine down: %w", rag.ErrUnavailable)
			return nil
		}, "chat model-a", "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp, sr := traced(t)
			b := zeroLatency(2)
			opts := append(tt.setup(&b), pipeline.WithTracerProvider(tp))
			p := b.pipeline(t, pipeline.Config{}, opts...)
			_, err := p.Run(context.Background(), query(rag.CouplingFanout, 2), nil)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			spans := sr.Ended()
			// The failing span and the pipeline span carry the error; in fanout the other
			// shard's span may carry its cancellation.
			for _, name := range []string{tt.failSpan, rag.SpanPipeline} {
				var found bool
				for _, s := range byName(spans, name) {
					v, _ := spanAttr(s, "error.type")
					if s.Status().Code != codes.Error || v.AsString() != tt.errorType {
						continue
					}
					found = true
					if evs := s.Events(); len(evs) == 0 || evs[0].Name != "exception" {
						t.Errorf("%s did not record the error as an exception event", name)
					}
				}
				if !found {
					t.Errorf("no %s span with an error status and error.type %s", name, tt.errorType)
				}
			}
		})
	}
}

func TestContentCapture(t *testing.T) {
	t.Parallel()
	const question = "Which secret word did the user type?"
	for _, capture := range []bool{false, true} {
		t.Run(fmt.Sprintf("capture=%v", capture), func(t *testing.T) {
			t.Parallel()
			tp, sr := traced(t)
			b := zeroLatency(2)
			b.gen.tokens = []string{"Xylophone", "-", "answer"}
			p := b.pipeline(t, pipeline.Config{}, pipeline.WithTracerProvider(tp), pipeline.WithContentCapture(capture))
			q := query(rag.CouplingSync, 2)
			q.Messages = []rag.Message{{Role: "user", Content: question}}
			if _, err := p.Run(context.Background(), q, &recordingSink{tb: t}); err != nil {
				t.Fatal(err)
			}
			// Texts that must never leak without capture: the question, a retrieved chunk's
			// text, and the answer.
			secrets := []string{"secret word", "text of s0-c0", "Xylophone"}
			found := map[string]bool{}
			for _, s := range sr.Ended() {
				var values []string
				for _, kv := range s.Attributes() {
					values = append(values, kv.Value.String())
				}
				for _, e := range s.Events() {
					for _, kv := range e.Attributes {
						values = append(values, kv.Value.String())
					}
				}
				for _, v := range values {
					for _, secret := range secrets {
						if strings.Contains(v, secret) {
							found[secret] = true
						}
					}
				}
			}
			for _, secret := range secrets {
				if found[secret] != capture {
					t.Errorf("%q in span attributes: %v, want %v", secret, found[secret], capture)
				}
			}
		})
	}
}

func TestMetricsCarryExemplars(t *testing.T) {
	t.Parallel()
	tp, _ := traced(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b := zeroLatency(2)
	docs := &reportingDocs{fakeDocs: b.docs}
	p, err := pipeline.New(b.emb, b.ret, docs, b.gen, pipeline.Config{}, pipeline.WithTracerProvider(tp),
		pipeline.WithMeterProvider(mp), pipeline.WithAdmitter(&fakeAdmitter{}))
	if err != nil {
		t.Fatal(err)
	}
	const runs = 3
	traces := map[string]bool{}
	for range runs {
		ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
		if _, err := p.Run(ctx, query(rag.CouplingSync, 2), nil); err != nil {
			t.Fatal(err)
		}
		span.End()
		traces[span.SpanContext().TraceID().String()] = true
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	metrics := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			metrics[m.Name] = m.Data
		}
	}

	hist := func(name string) metricdata.Histogram[float64] {
		t.Helper()
		h, ok := metrics[name].(metricdata.Histogram[float64])
		if !ok {
			t.Fatalf("metric %s: %T, want a float histogram", name, metrics[name])
		}
		return h
	}
	// Stages: one measurement per run for each of the six stages, each with the run's trace.
	stages := map[string]uint64{}
	for _, dp := range hist("rag.stage.duration").DataPoints {
		v, _ := dp.Attributes.Value(rag.AttrStage)
		stages[v.AsString()] += dp.Count
		for _, ex := range dp.Exemplars {
			if !traces[trace.TraceID(ex.TraceID).String()] {
				t.Errorf("stage exemplar with trace %x, not one of the runs", ex.TraceID)
			}
		}
		if len(dp.Exemplars) == 0 {
			t.Errorf("stage %s histogram has no exemplar", v.AsString())
		}
	}
	for _, s := range rag.Stages {
		if stages[string(s)] != runs {
			t.Errorf("rag.stage.duration{rag.stage=%s} count = %d, want %d", s, stages[string(s)], runs)
		}
	}
	ttft := hist("gen_ai.server.time_to_first_token")
	if len(ttft.DataPoints) != 1 || ttft.DataPoints[0].Count != runs || len(ttft.DataPoints[0].Exemplars) == 0 {
		t.Fatalf("time_to_first_token data points %+v", ttft.DataPoints)
	}
	wantBounds := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	if !slices.Equal(ttft.DataPoints[0].Bounds, wantBounds) {
		t.Errorf("TTFT buckets %v, want the semantic conventions' %v", ttft.DataPoints[0].Bounds, wantBounds)
	}
	// The gen_ai client durations: a series for chat and one for embeddings, each labelled with
	// the operation, the provider and the model alone.
	ops := map[string]uint64{}
	for _, dp := range hist("gen_ai.client.operation.duration").DataPoints {
		op, _ := dp.Attributes.Value("gen_ai.operation.name")
		_, provider := dp.Attributes.Value("gen_ai.provider.name")
		_, model := dp.Attributes.Value("gen_ai.request.model")
		if !provider || !model || dp.Attributes.Len() != 3 {
			t.Errorf("gen_ai.client.operation.duration labels %v, want the operation, provider and model", dp.Attributes.ToSlice())
		}
		ops[op.AsString()] += dp.Count
	}
	if ops["chat"] != runs || ops["embeddings"] != runs || len(ops) != 2 {
		t.Errorf("gen_ai.client.operation.duration counts by operation %v, want chat and embeddings %d each", ops, runs)
	}
	if got := hist("db.client.operation.duration").DataPoints; len(got) != 1 || got[0].Count != 2*runs {
		t.Errorf("db.client.operation.duration points %+v, want %d measurements (2 shards x %d runs)", got, 2*runs, runs)
	}

	cache, ok := metrics["rag.cache.requests"].(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("rag.cache.requests: %T", metrics["rag.cache.requests"])
	}
	results := map[string]int64{}
	for _, dp := range cache.DataPoints {
		v, _ := dp.Attributes.Value("result")
		results[v.AsString()] += dp.Value
	}
	// reportingDocs misses the first lookup of each id and hits the rest; every run fetches the
	// same two chunks.
	if results["miss"] != 2 || results["hit"] != 2*(runs-1) {
		t.Errorf("cache results %v, want 2 misses and %d hits", results, 2*(runs-1))
	}
	faults, ok := metrics["rag.fault.injected"].(metricdata.Sum[int64])
	if !ok || len(faults.DataPoints) != 1 || faults.DataPoints[0].Value != 0 {
		t.Errorf("rag.fault.injected = %+v, want one point at 0", metrics["rag.fault.injected"])
	}
	inflight, ok := metrics["rag.inflight_requests"].(metricdata.Sum[int64])
	if !ok || len(inflight.DataPoints) != 1 || inflight.DataPoints[0].Value != 0 {
		t.Errorf("rag.inflight_requests = %+v, want 0 once the runs are done", metrics["rag.inflight_requests"])
	}
}

// reportingDocs is a CacheReporter: the first lookup of an id is a miss, later ones hits.
type reportingDocs struct {
	*fakeDocs
	mu   sync.Mutex
	seen map[string]bool
}

func (d *reportingDocs) LookupResult(ctx context.Context, id string) (rag.Chunk, rag.CacheResult, error) {
	d.mu.Lock()
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	result := rag.CacheHit
	if !d.seen[id] {
		result = rag.CacheMiss
	}
	d.seen[id] = true
	d.mu.Unlock()
	c, err := d.Get(ctx, id)
	return c, result, err
}

// labelSpy is a set of backends that record the rag_stage pprof label of the context each call
// receives.
type labelSpy struct {
	mu      sync.Mutex
	labels  map[string][]string // backend -> labels seen
	spanIDs map[string][]string // backend -> span_id labels seen
}

func (l *labelSpy) note(ctx context.Context, backend string) {
	v, _ := pprof.Label(ctx, rag.ProfileLabel)
	id, _ := pprof.Label(ctx, rag.ProfileSpanIDLabel)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.labels == nil {
		l.labels, l.spanIDs = map[string][]string{}, map[string][]string{}
	}
	l.labels[backend] = append(l.labels[backend], v)
	l.spanIDs[backend] = append(l.spanIDs[backend], id)
}

type spyEmbedder struct {
	*fakeEmbedder
	spy *labelSpy
}

func (e spyEmbedder) Embed(ctx context.Context, text string) ([]float32, error) {
	e.spy.note(ctx, "embed")
	return e.fakeEmbedder.Embed(ctx, text)
}

type spyRetriever struct {
	*fakeRetriever
	spy *labelSpy
}

func (r spyRetriever) Search(ctx context.Context, shard int, vec []float32, k int) ([]rag.Hit, error) {
	r.spy.note(ctx, "search")
	return r.fakeRetriever.Search(ctx, shard, vec, k)
}

type spyDocs struct {
	*fakeDocs
	spy *labelSpy
}

func (d spyDocs) Get(ctx context.Context, id string) (rag.Chunk, error) {
	d.spy.note(ctx, "get")
	return d.fakeDocs.Get(ctx, id)
}

type spyGenerator struct {
	*fakeGenerator
	spy *labelSpy
}

func (g spyGenerator) Generate(ctx context.Context, req rag.GenRequest) (rag.TokenStream, error) {
	g.spy.note(ctx, "generate")
	return g.fakeGenerator.Generate(ctx, req)
}

// TestProfileLabelsNameTheStageSpan checks that, traced, each backend call runs with the
// span_id label of its stage's span, and that the span names that id in pyroscope.profile.id.
func TestProfileLabelsNameTheStageSpan(t *testing.T) {
	t.Parallel()
	tp, sr := traced(t)
	b := zeroLatency(2)
	spy := &labelSpy{}
	p, err := pipeline.New(spyEmbedder{b.emb, spy}, spyRetriever{b.ret, spy}, spyDocs{b.docs, spy}, spyGenerator{b.gen, spy},
		pipeline.Config{}, pipeline.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background(), query(rag.CouplingFanout, 2), nil); err != nil {
		t.Fatal(err)
	}
	spans := waitSpans(t, sr, 9)
	for backend, name := range map[string]string{"embed": "embeddings unknown", "search": "retrieval test", "get": rag.SpanFetch, "generate": "chat model-a"} {
		s := one(t, spans, name)
		id := s.SpanContext().SpanID().String()
		spy.mu.Lock()
		seen := spy.spanIDs[backend]
		spy.mu.Unlock()
		if len(seen) == 0 {
			t.Errorf("%s was not called", backend)
		}
		for _, got := range seen {
			if got != id {
				t.Errorf("%s ran with span_id=%q, want its stage span %s's id %s", backend, got, name, id)
			}
		}
		if v, _ := spanAttr(s, rag.AttrProfileID); v.AsString() != id {
			t.Errorf("%s pyroscope.profile.id = %q, want %s", name, v.AsString(), id)
		}
	}
}

func TestProfileLabels(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("labels=%v", on), func(t *testing.T) {
			t.Parallel()
			b := zeroLatency(2)
			spy := &labelSpy{}
			p, err := pipeline.New(spyEmbedder{b.emb, spy}, spyRetriever{b.ret, spy}, spyDocs{b.docs, spy}, spyGenerator{b.gen, spy},
				pipeline.Config{}, pipeline.WithProfileLabels(on))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Run(context.Background(), query(rag.CouplingFanout, 2), nil); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"embed": "embed", "search": "retrieve", "get": "fetch", "generate": "generate"}
			for backend, stage := range want {
				if !on {
					stage = ""
				}
				seen := spy.labels[backend]
				if len(seen) == 0 {
					t.Fatalf("%s never called", backend)
				}
				for _, got := range seen {
					if got != stage {
						t.Errorf("%s ran with rag_stage=%q, want %q", backend, got, stage)
					}
				}
			}
		})
	}
}

func TestErrorType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", rag.ErrOverloaded), "overloaded"},
		{rag.AtStage(rag.StageRetrieve, context.DeadlineExceeded), "timeout"},
		{context.Canceled, "canceled"},
		{rag.ErrUnknownModel, "unknown_model"},
		{rag.ErrInvalidRequest, "invalid_request"},
		{rag.ErrNotFound, "not_found"},
		{rag.ErrUnavailable, "unavailable"},
		{&rag.StageError{Stage: rag.StageStream, Err: errors.New("broken pipe")}, "client_disconnected"},
		{errors.New("something else"), "_OTHER"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := pipeline.ErrorType(tt.err); got != tt.want {
				t.Errorf("ErrorType(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
