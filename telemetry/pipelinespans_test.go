package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/telemetry"
	"github.com/ragtail/ragtail/telemetry/profile"
)

// instantBackends returns the built-in corpus of docs documents (0: the default size), the hash
// embedder, an index of its chunks in shards shards and a doc store holding them, all answering
// at once (no simulated latency).
func instantBackends(tb testing.TB, docs, shards int) ([]rag.Chunk, *embed.Hash, *retrieve.Memory, *docstore.Store) {
	tb.Helper()
	chunks := corpus.Builtin(corpus.Options{Seed: 1, Docs: docs})
	hash, err := embed.NewHash(embed.WithLatency(latency.Law{}, 0), embed.WithSeed(1), embed.WithConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		tb.Fatal(err)
	}
	idx, err := retrieve.NewMemory(hash.Dimension(), shards, retrieve.WithSeed(1))
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range chunks {
		if err := idx.Add(c.ID, hash.Vector(c.Title+"\n"+c.Text)); err != nil {
			tb.Fatal(err)
		}
	}
	store := docstore.New(chunks, docstore.WithFetchLatency(latency.Law{}), docstore.WithSeed(1))
	tb.Cleanup(func() { _ = store.Close() })
	return chunks, hash, idx, store
}

// TestPipelineSpansTileTheStages runs one request of every coupling mode through the pipeline
// twice, its spans recorded by the SDK's tracer as Setup builds it, bare and through the
// profiler's wrapper (otel-profiling-go), and requires the same spans either way (names, parents,
// kinds, attributes but the ids in them, events) with start and end instants on the service's
// clock that tile the stages as Server-Timing reports them.
func TestPipelineSpansTileTheStages(t *testing.T) {
	chunks, hash, idx, store := instantBackends(t, 10, 3)
	gen := instantGenerator{tokens: []string{" a", " b", " c", " d"}}
	question := corpus.Questions(chunks, 1, 1)[0]

	rec := tracetest.NewSpanRecorder()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Sampler: sdktrace.AlwaysSample(),
		Logger: slog.New(slog.DiscardHandler), SpanProcessors: []sdktrace.SpanProcessor{rec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	prof, err := profile.Start(profile.Config{Now: tel.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prof.Stop() })

	// run serves one request on a pipeline tracing to tp and returns its spans (in the order they
	// ended) and stage timings.
	run := func(t *testing.T, tp trace.TracerProvider, coupling rag.Coupling, labels bool) ([]sdktrace.ReadOnlySpan, []rag.StageTiming) {
		t.Helper()
		p, err := pipeline.New(hash, idx, lookups{store}, gen, pipeline.Config{TopK: 4},
			pipeline.WithClock(tel.Now), pipeline.WithTracerProvider(tp), pipeline.WithProfileLabels(labels))
		if err != nil {
			t.Fatal(err)
		}
		rec.Reset()
		res, err := p.Run(context.Background(), rag.Query{ID: "parity", Model: "bench-model", MaxTokens: 8, Coupling: coupling,
			Messages: []rag.Message{{Role: "user", Content: question}}}, discardSink{})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Ended(), res.Timings
	}
	for _, coupling := range []rag.Coupling{rag.CouplingSync, rag.CouplingFanout, rag.CouplingAsync} {
		for _, labels := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/labels=%v", coupling, labels), func(t *testing.T) {
				want, wantTimings := run(t, tel.TracerProvider, coupling, labels)
				got, gotTimings := run(t, prof.WrapTracerProvider(tel.TracerProvider), coupling, labels)
				async := coupling == rag.CouplingAsync
				if w, g := describe(want, async), describe(got, async); !slices.Equal(w, g) {
					t.Errorf("spans differ\nbare:\n  %s\nthrough the profiler:\n  %s", strings.Join(w, "\n  "), strings.Join(g, "\n  "))
				}
				checkTiling(t, got, gotTimings)
				checkTiling(t, want, wantTimings)
			})
		}
	}
}

// describe returns one line per span, sorted: its name, its parent's name, kind, status,
// attributes (ids and times masked) and event names. With async, what timing decides is masked
// too: which shards' searches were left behind (and cancelled, with an error status and an
// exception event on their Query spans, and an event on the retrieval span).
func describe(spans []sdktrace.ReadOnlySpan, async bool) []string {
	names := map[trace.SpanID]string{}
	for _, s := range spans {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	var out []string
	for _, s := range spans {
		var attrs []string
		late := async && strings.HasPrefix(s.Name(), "Query ")
		for _, a := range s.Attributes() {
			v := a.Value.String()
			if late && (a.Key == "rag.shard" || a.Key == "error.type") {
				continue
			}
			if a.Key == "pyroscope.profile.id" && s.Name() == "rag.pipeline" {
				continue // the profiler's wrapper labels the local root; the pipeline its stages
			}
			switch a.Key {
			case "pyroscope.profile.id", "gen_ai.response.time_to_first_chunk", "rag.stream.write_ms", "rag.fault.injected_ms",
				"rag.admission.wait_ms",
				// what the doc store's cache and async coupling's late shard make differ from run to run
				"rag.chunk.ids", "rag.cache.hits", "rag.cache.misses", "rag.shards.answered", "rag.shards.late", "rag.hits",
				"db.response.returned_rows":
				v = "*"
			}
			attrs = append(attrs, string(a.Key)+"="+v)
		}
		slices.Sort(attrs)
		var events []string
		for _, e := range s.Events() {
			if !async || e.Name != "rag.shard.late_dropped" && e.Name != "exception" {
				events = append(events, e.Name)
			}
		}
		status := s.Status().Code.String()
		if late {
			status = "*"
		}
		out = append(out, fmt.Sprintf("%s <- %s kind=%s status=%s attrs=%v events=%v", s.Name(), names[s.Parent().SpanID()],
			s.SpanKind(), status, attrs, events))
	}
	slices.Sort(out)
	return out
}

// checkTiling requires each stage's span to start and end where Server-Timing's stage does
// (the stream span covers the stream stage's hand-overs, so only its start is checked).
func checkTiling(t *testing.T, spans []sdktrace.ReadOnlySpan, timings []rag.StageTiming) {
	t.Helper()
	root := slices.IndexFunc(spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "rag.pipeline" })
	if root < 0 {
		t.Fatal("no rag.pipeline span")
	}
	for _, st := range timings {
		i := slices.IndexFunc(spans, func(s sdktrace.ReadOnlySpan) bool {
			if s.Parent().SpanID() != spans[root].SpanContext().SpanID() {
				return false
			}
			for _, a := range s.Attributes() {
				if a.Key == "rag.stage" {
					return a.Value.AsString() == string(st.Stage)
				}
			}
			return false
		})
		if i < 0 {
			t.Errorf("no span of stage %s", st.Stage)
			continue
		}
		s := spans[i]
		if !s.StartTime().Equal(st.Start) {
			t.Errorf("stage %s: span starts at %v, Server-Timing's stage at %v", st.Stage, s.StartTime(), st.Start)
		}
		if st.Stage != rag.StageStream && s.EndTime().Sub(s.StartTime()) != st.Duration {
			t.Errorf("stage %s: span lasts %v, Server-Timing's stage %v", st.Stage, s.EndTime().Sub(s.StartTime()), st.Duration)
		}
	}
}
