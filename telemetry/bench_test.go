//go:build unix

package telemetry_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/pipeline"
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

// benchRounds is the number of rounds BenchmarkPipelineTelemetry runs: the median of more
// rounds' ratios moves less with the machine's noise (each round's phases are b.N/(2*rounds)
// requests, so more rounds at the same phase length take a larger b.N).
var benchRounds = flag.Int("telemetry.rounds", 30, "BenchmarkPipelineTelemetry: rounds of phases, every arm once a round on b.N/(2*rounds) requests (even: they run in forward and backward pairs)")

// benchRingRecent and benchRingSlowest size the trace ring of BenchmarkPipelineTelemetry's arms
// with spans (0: the service's defaults, telemetry.DefaultRingRecent and DefaultRingSlowest), to
// see what keeping traces costs.
var (
	benchRingRecent  = flag.Int("telemetry.ring-recent", 0, "BenchmarkPipelineTelemetry: recent traces the ring keeps (0: telemetry.DefaultRingRecent)")
	benchRingSlowest = flag.Int("telemetry.ring-slowest", 0, "BenchmarkPipelineTelemetry: slowest traces the ring keeps (0: telemetry.DefaultRingSlowest)")
)

// benchArms selects the arms BenchmarkPipelineTelemetry runs besides "off" (comma-separated;
// empty runs the usual ones). Profiling the benchmark with -cpuprofile needs the arms that start
// the built-in profiler left out (-telemetry.arms=spans,metrics,labels): a process has one CPU
// profiler. The name aa adds an A/A arm, a second copy of off: its loss is the benchmark's noise.
var benchArms = flag.String("telemetry.arms", "", "BenchmarkPipelineTelemetry: arms to run besides off (spans,metrics,labels,profiler,all,aa; empty: all but aa)")

// benchArm is one way of running the pipeline in BenchmarkPipelineTelemetry: which telemetry
// components are on.
type benchArm struct {
	name     string
	tracing  bool // spans, every one sampled into the ring, through the SDK's tracer
	metrics  bool // every metric, through the SDK's meter
	labels   bool // the rag_stage (and, with spans, span_id) pprof labels
	profiler bool // the continuous profiler, CPU and wall sampler, linking spans when tracing
}

// telemetryArms are the arms of BenchmarkPipelineTelemetry: off, each component on its own (the
// ablation), and everything on. The components' losses need not add up to the loss of all:
// span_id labels exist only with spans and labels, and the profiler's wall sampler parses the
// labels of every goroutine it sees.
var telemetryArms = []benchArm{
	{name: "off"},
	{name: "spans", tracing: true},
	{name: "metrics", metrics: true},
	{name: "labels", labels: true},
	{name: "profiler", profiler: true},
	{name: "all", tracing: true, metrics: true, labels: true, profiler: true},
}

// aaArm is off again, run only when asked for: the spread of its loss around zero is what the
// machine's noise does to a ratio.
var aaArm = benchArm{name: "aa"}

// BenchmarkPipelineTelemetry runs the pipeline with telemetry off (no-op providers, no pprof
// labels, no profiler), with each telemetry component on its own (spans, metrics, pprof labels,
// the continuous profiler), fully on (every trace sampled into the ring, every metric recorded,
// the continuous profiler running with span labels), in interleaved phases within one run, and
// reports each arm's loss of throughput against off in percent (loss_% for all, loss_spans_% and
// so on for the others). It is a figure of what telemetry costs a pipeline whose backends cost
// nothing, not a gate: a real request spends hundreds of milliseconds in its backends, and what
// users feel is the observer effect on latency (cmd/ragtail's BenchmarkObserverEffect). Throughput is counted per second of the process's
// CPU time (req/cpu_s), which other processes on a shared machine do not disturb the way they
// disturb wall-clock rates (reported too, as req/s, for off and all); each arm's ratio to off is
// the median over the rounds (30 by default, -telemetry.rounds), each round running every arm once
// on the same number of requests in an order that rotates and reverses from round to round, after
// a warm-up round that is not counted, so that neither a burst of outside
// load in one phase nor the position in a round decides it; each phase starts from a collected
// heap, so that it pays for the collections its own garbage causes. The backends answer at once (no
// simulated latency), so every microsecond telemetry costs shows. Two corpora: the service's
// default one (the index search is most of a request's CPU, as in a real deployment where search
// is remote and far slower still), and a tiny one, where a request does almost nothing but
// telemetry: the worst case.
//
// b.N counts requests of the off and all arms (ns/op, allocs/op and B/op average those two, as
// before the ablation arms existed); each ablation arm runs as many requests as off, with the
// timer stopped. Per arm, it also reports the allocations and bytes of a request
// (<arm>_allocs/req, <arm>_B/req), its process CPU time in microseconds (<arm>_cpu_us/req), of
// which the runtime counted gc_us/req as the garbage collector's, and the collections per
// thousand requests (<arm>_gcs/kreq).
func BenchmarkPipelineTelemetry(b *testing.B) {
	arms, err := selectArms(*benchArms)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		docs int
	}{{"corpus=default", 0}, {"corpus=tiny", 10}} {
		b.Run(c.name, func(b *testing.B) { benchTelemetry(b, c.docs, arms) })
	}
}

// selectArms returns the arms named in list (comma-separated, "" for all but aa), off first.
func selectArms(list string) ([]benchArm, error) {
	if list == "" {
		return telemetryArms, nil
	}
	arms := telemetryArms[:1:1]
	for name := range strings.SplitSeq(list, ",") {
		if name == aaArm.name {
			arms = append(arms, aaArm)
			continue
		}
		i := slices.IndexFunc(telemetryArms, func(a benchArm) bool { return a.name == name })
		if i < 1 {
			return nil, fmt.Errorf("-telemetry.arms: unknown arm %q: want spans, metrics, labels, profiler, all or aa", name)
		}
		arms = append(arms, telemetryArms[i])
	}
	return arms, nil
}

// phaseStats is what one phase, or the sum of an arm's phases, cost.
type phaseStats struct {
	wall, cpu time.Duration
	allocs    uint64  // heap objects allocated
	bytes     uint64  // heap bytes allocated
	gcs       uint64  // garbage collections that ended
	gcCPU     float64 // CPU seconds the runtime counted as the collector's (marking, assists, pauses)
}

// since returns what the runtime counted between before and s.
func (s phaseStats) since(before phaseStats) phaseStats {
	return phaseStats{allocs: s.allocs - before.allocs, bytes: s.bytes - before.bytes, gcs: s.gcs - before.gcs, gcCPU: s.gcCPU - before.gcCPU}
}

func (s *phaseStats) add(o phaseStats) {
	s.wall, s.cpu = s.wall+o.wall, s.cpu+o.cpu
	s.allocs, s.bytes, s.gcs, s.gcCPU = s.allocs+o.allocs, s.bytes+o.bytes, s.gcs+o.gcs, s.gcCPU+o.gcCPU
}

// armResult sums one arm's phases.
type armResult struct {
	phaseStats
	ratios []float64 // per round: off's CPU time over this arm's, on the same request count
}

func benchTelemetry(b *testing.B, docs int, arms []benchArm) {
	chunks, hash, idx, store := instantBackends(b, docs, 4)
	gen := instantGenerator{tokens: make([]string, 32)}
	for i := range gen.tokens {
		gen.tokens[i] = " token"
	}
	questions := corpus.Questions(chunks, 256, 1)

	tel, err := telemetry.Setup(context.Background(), telemetry.Config{RingRecent: *benchRingRecent, RingSlowest: *benchRingSlowest, Sampler: sdktrace.AlwaysSample(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })

	// build returns the pipeline of arm a, around prof when the arm runs the profiler.
	build := func(a benchArm, prof *profile.Profiler) *pipeline.Pipeline {
		opts := []pipeline.Option{pipeline.WithClock(tel.Now), pipeline.WithProfileLabels(a.labels)}
		if a.tracing {
			opts = append(opts, pipeline.WithTracerProvider(prof.WrapTracerProvider(tel.TracerProvider)))
		}
		if a.metrics {
			opts = append(opts, pipeline.WithMeterProvider(tel.MeterProvider))
		}
		p, err := pipeline.New(hash, idx, lookups{store}, gen, pipeline.Config{TopK: 5}, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}

	workers := runtime.GOMAXPROCS(0)
	// Under -cpuprofile, the requests of each arm carry the pprof label arm=NAME (their stages
	// add theirs to it), so that the profile splits by arm: go tool pprof -tagfocus arm=spans.
	profiling := flag.Lookup("test.cpuprofile") != nil && flag.Lookup("test.cpuprofile").Value.String() != ""
	// phase runs n requests on p from workers goroutines and returns what they cost.
	phase := func(p *pipeline.Pipeline, arm string, n int) phaseStats {
		ctx := context.Background()
		if profiling {
			ctx = pprof.WithLabels(ctx, pprof.Labels("arm", arm))
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		before := runtimeStats()
		start, startCPU := time.Now(), processCPU()
		for range workers {
			wg.Go(func() {
				pprof.SetGoroutineLabels(ctx)
				for {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					q := rag.Query{ID: "bench", Model: "bench-model", MaxTokens: 32, Coupling: rag.CouplingFanout,
						Messages: []rag.Message{{Role: "user", Content: questions[i%int64(len(questions))]}}}
					if _, err := p.Run(ctx, q, discardSink{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		wall, cpu := time.Since(start), processCPU()-startCPU
		st := runtimeStats().since(before)
		st.wall, st.cpu = wall, cpu
		return st
	}
	// timed reports whether an arm's phases count towards b.N (and so ns/op and allocs/op).
	timed := func(a benchArm) bool { return a.name == "off" || a.name == "all" }

	rounds := *benchRounds
	if rounds < 2 || rounds%2 != 0 {
		b.Fatalf("-telemetry.rounds=%d: want an even number of rounds, at least 2", rounds)
	}
	per := max(1, b.N/(2*rounds))
	// runArm runs one phase of arm a and returns what it cost, on the timer when count is set
	// and the arm is timed.
	runArm := func(a benchArm, count bool) phaseStats {
		var prof *profile.Profiler
		if a.profiler {
			cfg := profile.Config{Now: tel.Now, Logger: slog.New(slog.DiscardHandler)}
			var err error
			if prof, err = profile.Start(cfg); err != nil {
				b.Fatal(err)
			}
		}
		p := build(a, prof)
		// Each phase starts from a collected heap, so that it pays for the collections its
		// own garbage causes, not for the debt of the phase before it.
		runtime.GC()
		count = count && timed(a)
		if count {
			b.StartTimer()
		}
		st := phase(p, a.name, per)
		if count {
			b.StopTimer()
		}
		if err := prof.Stop(); err != nil {
			b.Fatal(err)
		}
		tel.Ring.Reset()
		return st
	}
	results := make([]armResult, len(arms))
	order := make([]int, len(arms))
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	// A warm-up round, not counted: the first phases of a process run on a heap, page tables
	// and caches the backends have only just filled, and would otherwise make the arms that run
	// first (off, in the first round) look slower.
	for _, a := range arms {
		runArm(a, false)
	}
	for r := range rounds {
		// Rounds come in pairs, one forwards and one backwards (ABBA), and the order rotates by
		// one arm from pair to pair, so that every arm runs early and late, after each of the
		// others, alike.
		for i := range order {
			order[i] = (i + r/2) % len(arms)
		}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		cpus := make([]time.Duration, len(arms))
		for _, ai := range order {
			st := runArm(arms[ai], true)
			results[ai].add(st)
			cpus[ai] = st.cpu
		}
		for ai := range arms {
			if cpus[0] > 0 && cpus[ai] > 0 {
				results[ai].ratios = append(results[ai].ratios, cpus[0].Seconds()/cpus[ai].Seconds())
			}
		}
	}
	n := float64(per * rounds)
	for ai, a := range arms {
		res := &results[ai]
		switch a.name {
		case "off", "all":
			side := map[string]string{"off": "off", "all": "on"}[a.name]
			b.ReportMetric(n/res.wall.Seconds(), side+"_req/s")
			b.ReportMetric(n/res.cpu.Seconds(), side+"_req/cpu_s")
			// allocs/op averages off and all; these are each arm's own, per request, the
			// profiler's and the exporters' background work included.
			b.ReportMetric(float64(res.allocs)/n, side+"_allocs/req")
		default:
			b.ReportMetric(float64(res.allocs)/n, a.name+"_allocs/req")
		}
		b.ReportMetric(1000*float64(res.gcs)/n, a.name+"_gcs/kreq")
		b.ReportMetric(float64(res.bytes)/n, a.name+"_B/req")
		b.ReportMetric(1e6*res.cpu.Seconds()/n, a.name+"_cpu_us/req")
		b.ReportMetric(1e6*res.gcCPU/n, a.name+"_gc_us/req")
		if ai == 0 || len(res.ratios) == 0 {
			continue
		}
		m := median(res.ratios)
		if a.name == "all" {
			b.ReportMetric(m, "on/off")
			b.ReportMetric(100*(1-m), "loss_%")
		} else {
			b.ReportMetric(100*(1-m), "loss_"+a.name+"_%")
		}
	}
}

// median returns the median of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + m) / 2
	}
	return m
}

// runtimeStats returns the heap objects and bytes the process has allocated so far, the garbage
// collections it has completed and the CPU time the runtime has counted as the collector's, in
// seconds (in phaseStats' fields).
func runtimeStats() phaseStats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := phaseStats{allocs: ms.Mallocs, bytes: ms.TotalAlloc, gcs: uint64(ms.NumGC)}
	gc := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(gc)
	if gc[0].Value.Kind() == metrics.KindFloat64 {
		st.gcCPU = gc[0].Value.Float64()
	}
	return st
}

// processCPU returns the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSpanCost is the price of one span as the pipeline makes it, through the SDK's tracer
// under a sampled root, with the ring as its processor and the span limits Setup configures:
// bare, then with seven attributes set in one call at the end (a "Query {collection}" span has
// six, a stage span five to twelve), then with explicit start and end timestamps from the
// service's clock, as the pipeline passes them. The root ends and a new one starts every
// spansPerTrace spans, as a request's does, so that every trace completes and reaches the ring.
func BenchmarkSpanCost(b *testing.B) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Sampler: sdktrace.AlwaysSample(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	attrs := []attribute.KeyValue{
		attribute.String("rag.stage", "retrieve"), attribute.String("db.system.name", "ragtail.memory"),
		attribute.String("db.collection.name", "ragtail"), attribute.String("db.operation.name", "Query"),
		attribute.Int("rag.shard", 2), attribute.Int("db.response.returned_rows", 5), attribute.Int("rag.hits", 5),
	}
	for _, bc := range []struct {
		name              string
		attrs, timestamps bool
	}{{"bare", false, false}, {"attrs", true, false}, {"attrs+timestamps", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			tracer := tel.TracerProvider.Tracer("bench")
			ctx, root := tracer.Start(context.Background(), "root")
			children := 0
			b.ReportAllocs()
			for b.Loop() {
				if children == spansPerTrace {
					root.End()
					ctx, root = tracer.Start(context.Background(), "root")
					children = 0
				}
				children++
				var (
					startOpts []trace.SpanStartOption
					endOpts   []trace.SpanEndOption
				)
				if bc.timestamps {
					now := tel.Now()
					startOpts = []trace.SpanStartOption{trace.WithTimestamp(now)}
					endOpts = []trace.SpanEndOption{trace.WithTimestamp(now.Add(time.Microsecond))}
				}
				_, span := tracer.Start(ctx, "Query ragtail", startOpts...)
				if bc.attrs {
					span.SetAttributes(attrs...)
				}
				span.End(endOpts...)
			}
			b.StopTimer()
			root.End()
			tel.Ring.Reset()
		})
	}
}

// spansPerTrace is how many spans BenchmarkSpanCost makes under one root: about a request's.
const spansPerTrace = 10
