//go:build unix

package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

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

// instantGenerator streams a fixed answer with no delay: the benchmark measures the pipeline's
// own CPU cost (embedding, exact search over every shard, fetches through the cache, merging,
// streaming) and what telemetry adds to it. A simulated engine's sleeps would hide any overhead
// behind idle time; here there is none, so the ratio is the worst case.
type instantGenerator struct{ tokens []string }

func (g instantGenerator) Models() []string { return []string{"bench-model"} }

func (g instantGenerator) Generate(context.Context, rag.GenRequest) (rag.TokenStream, error) {
	return &instantStream{tokens: g.tokens}, nil
}

type instantStream struct {
	tokens []string
	i      int
}

func (s *instantStream) Recv() (rag.Delta, error) {
	if s.i == len(s.tokens) {
		return rag.Delta{}, io.EOF
	}
	d := rag.Delta{Text: s.tokens[s.i], Tokens: 1}
	s.i++
	if s.i == len(s.tokens) {
		d.FinishReason = "stop"
		d.Usage = &rag.Usage{PromptTokens: 900, CompletionTokens: len(s.tokens)}
	}
	return d, nil
}

func (s *instantStream) Close() error { return nil }

type discardSink struct{}

func (discardSink) Progress(pipeline.Progress) error { return nil }
func (discardSink) Delta(rag.Delta) error            { return nil }

// BenchmarkPipelineTelemetry runs the pipeline with telemetry off (no-op providers, no pprof
// labels, no profiler) and fully on (every trace sampled into the ring, every metric recorded,
// the continuous profiler running with span labels), in alternating phases within one run, and
// reports the throughput of each, their ratio and the loss in percent. Throughput is counted per
// second of the process's CPU time (req/cpu_s), which other processes on a shared machine do not
// disturb the way they disturb wall-clock rates (reported too, as req/s); the ratio is the median
// over ten off/on pairs, so a burst of outside load in one phase does not decide it. The backends
// answer at once (no simulated latency), so every microsecond telemetry costs shows. Two corpora: the service's default one (the index search is most of a request's
// CPU, as in a real deployment where search is remote and far slower still), and a tiny one,
// where a request does almost nothing but telemetry: the worst case.
func BenchmarkPipelineTelemetry(b *testing.B) {
	for _, c := range []struct {
		name string
		docs int
	}{{"corpus=default", 0}, {"corpus=tiny", 10}} {
		b.Run(c.name, func(b *testing.B) { benchTelemetry(b, c.docs) })
	}
}

func benchTelemetry(b *testing.B, docs int) {
	chunks := corpus.Builtin(corpus.Options{Seed: 1, Docs: docs})
	hash, err := embed.NewHash(embed.WithLatency(latency.Law{}, 0), embed.WithSeed(1), embed.WithConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		b.Fatal(err)
	}
	idx, err := retrieve.NewMemory(hash.Dimension(), 4, retrieve.WithSeed(1))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range chunks {
		if err := idx.Add(c.ID, hash.Vector(c.Title+"\n"+c.Text)); err != nil {
			b.Fatal(err)
		}
	}
	store := docstore.New(chunks, docstore.WithFetchLatency(latency.Law{}), docstore.WithSeed(1))
	b.Cleanup(func() { _ = store.Close() })
	gen := instantGenerator{tokens: make([]string, 32)}
	for i := range gen.tokens {
		gen.tokens[i] = " token"
	}
	questions := corpus.Questions(chunks, 256, 1)

	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Sampler: sdktrace.AlwaysSample(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })

	off, err := pipeline.New(hash, idx, lookups{store}, gen, pipeline.Config{TopK: 5}, pipeline.WithProfileLabels(false))
	if err != nil {
		b.Fatal(err)
	}
	// on builds the fully instrumented pipeline around a running profiler.
	on := func(prof *profile.Profiler) *pipeline.Pipeline {
		p, err := pipeline.New(hash, idx, lookups{store}, gen, pipeline.Config{TopK: 5},
			pipeline.WithClock(tel.Now), pipeline.WithTracerProvider(prof.WrapTracerProvider(tel.TracerProvider)),
			pipeline.WithMeterProvider(tel.MeterProvider))
		if err != nil {
			b.Fatal(err)
		}
		return p
	}

	workers := runtime.GOMAXPROCS(0)
	// phase runs n requests on p from workers goroutines and returns the wall and CPU time they
	// took and the heap allocations they made.
	phase := func(p *pipeline.Pipeline, n int) (wall, cpu time.Duration, allocs uint64) {
		var next atomic.Int64
		var wg sync.WaitGroup
		startAllocs := mallocs()
		start, startCPU := time.Now(), processCPU()
		for range workers {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					q := rag.Query{ID: "bench", Model: "bench-model", MaxTokens: 32, Coupling: rag.CouplingFanout,
						Messages: []rag.Message{{Role: "user", Content: questions[i%int64(len(questions))]}}}
					if _, err := p.Run(context.Background(), q, discardSink{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		wall, cpu = time.Since(start), processCPU()-startCPU
		return wall, cpu, mallocs() - startAllocs
	}

	// Ten off/on pairs, in ABBA order, so that drift in machine load (other processes, GC of
	// earlier rounds) falls on both sides alike.
	const pairs = 10
	per := max(1, b.N/(2*pairs))
	var (
		offWall, onWall, offCPU, onCPU time.Duration
		offAllocs, onAllocs            uint64
		ratios                         []float64
	)
	b.ReportAllocs()
	b.ResetTimer()
	for r := range pairs {
		var pairOff, pairOn time.Duration
		for _, instrumented := range []bool{r%2 == 1, r%2 == 0} {
			if !instrumented {
				wall, cpu, allocs := phase(off, per)
				offWall, offCPU, offAllocs, pairOff = offWall+wall, offCPU+cpu, offAllocs+allocs, cpu
				continue
			}
			b.StopTimer()
			prof, err := profile.Start(profile.Config{Now: tel.Now, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			p := on(prof)
			b.StartTimer()
			wall, cpu, allocs := phase(p, per)
			onWall, onCPU, onAllocs, pairOn = onWall+wall, onCPU+cpu, onAllocs+allocs, cpu
			b.StopTimer()
			if err := prof.Stop(); err != nil {
				b.Fatal(err)
			}
			tel.Ring.Reset()
			b.StartTimer()
		}
		if pairOff > 0 && pairOn > 0 {
			ratios = append(ratios, pairOff.Seconds()/pairOn.Seconds()) // same request count
		}
	}
	b.StopTimer()
	n := float64(per * pairs)
	b.ReportMetric(n/offWall.Seconds(), "off_req/s")
	b.ReportMetric(n/onWall.Seconds(), "on_req/s")
	b.ReportMetric(n/offCPU.Seconds(), "off_req/cpu_s")
	b.ReportMetric(n/onCPU.Seconds(), "on_req/cpu_s")
	// allocs/op averages the two phases; these are each phase's own, per request, the profiler's
	// and the exporters' background work included.
	b.ReportMetric(float64(offAllocs)/n, "off_allocs/req")
	b.ReportMetric(float64(onAllocs)/n, "on_allocs/req")
	if len(ratios) > 0 {
		slices.Sort(ratios)
		median := ratios[len(ratios)/2]
		if len(ratios)%2 == 0 {
			median = (ratios[len(ratios)/2-1] + median) / 2
		}
		b.ReportMetric(median, "on/off")
		b.ReportMetric(100*(1-median), "loss_%")
	}
}

// mallocs returns the number of heap objects the process has allocated so far.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// processCPU returns the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
