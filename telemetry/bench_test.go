//go:build unix

package telemetry_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
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

	"github.com/grafana/pyroscope-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

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
// empty runs them all). Profiling the benchmark with -cpuprofile needs the arms that start the
// built-in profiler left out (-telemetry.arms=spans,metrics,labels,all-profiler): a process has
// one CPU profiler. The name aa adds an A/A arm, a second copy of off: its loss is the benchmark's
// noise; all-spans, all-metrics, all-labels and all-profiler add the leave-one-out arms;
// profiler-cpu, profiler-nowall, profiler-wall50 and all-wall50 split the profiler's cost.
var benchArms = flag.String("telemetry.arms", "", "BenchmarkPipelineTelemetry: arms to run besides off (spans,metrics,labels,profiler,all,sdk,aa,spans-floor,all-spans,all-metrics,all-labels,all-profiler,profiler-cpu,profiler-nowall,profiler-wall50,all-wall50; empty: spans to sdk)")

// benchArm is one way of running the pipeline in BenchmarkPipelineTelemetry: which telemetry
// components are on.
type benchArm struct {
	name     string
	tracing  bool // spans, every one sampled into the ring
	sdk      bool // every span and measurement through the OTel SDK (tel.TracerProvider.SDK(), tel.MeterProvider.SDK())
	metrics  bool // every metric, recorded through the SDK
	labels   bool // the rag_stage (and, with spans, span_id) pprof labels
	profiler bool // the continuous profiler, CPU and wall sampler, linking spans when tracing
	// wallRate is the profiler's wall sampler rate (0: profile.DefaultWallRate, negative: off);
	// cpuOnly leaves pyroscope-go's CPU profile alone, without its memory and goroutine ones.
	wallRate float64
	cpuOnly  bool
	// floor runs the spans through floorTracerProvider instead: an object and a context each,
	// nothing recorded.
	floor bool
}

// telemetryArms are the arms of BenchmarkPipelineTelemetry: off, each component on its own (the
// ablation), everything on, and everything on with every span through the OTel SDK's own tracer
// instead of telemetry.TracerProvider (sdk: what the service recorded before TracerProvider, side
// by side with all). The components' losses need not add up to the loss of all: span_id labels
// exist only with spans and labels, and the profiler's wall sampler parses the labels of every
// goroutine it sees.
var telemetryArms = []benchArm{
	{name: "off"},
	{name: "spans", tracing: true},
	{name: "metrics", metrics: true},
	{name: "labels", labels: true},
	{name: "profiler", profiler: true},
	{name: "all", tracing: true, metrics: true, labels: true, profiler: true},
	{name: "sdk", tracing: true, sdk: true, metrics: true, labels: true, profiler: true},
}

// profilerArms split the profiler's cost, run only when asked for: pyroscope-go's CPU profile
// alone, pyroscope-go's profiles without the wall sampler, the profiler with the wall sampler at
// 50 Hz (its default before 20 Hz), and everything on with it.
var profilerArms = []benchArm{
	{name: "profiler-cpu", profiler: true, cpuOnly: true, wallRate: -1},
	{name: "profiler-nowall", profiler: true, wallRate: -1},
	{name: "profiler-wall50", profiler: true, wallRate: 50},
	{name: "all-wall50", tracing: true, metrics: true, labels: true, profiler: true, wallRate: 50},
}

// floorArm is spans through floorTracerProvider, run only when asked for: what a span costs the
// pipeline through the OpenTelemetry API before anything is recorded (the span and its context,
// the recorder's attributes built and handed over), the floor under the spans arm.
var floorArm = benchArm{name: "spans-floor", tracing: true, floor: true}

// aaArm is off again, run only when asked for: the spread of its loss around zero is what the
// machine's noise does to a ratio.
var aaArm = benchArm{name: "aa"}

// leaveOneOutArms are everything on but one component, run only when asked for: each one's
// saving against all is what that component costs among the others (span_id labels, exemplars
// and the profiler's root labels exist only together).
var leaveOneOutArms = []benchArm{
	{name: "all-spans", metrics: true, labels: true, profiler: true},
	{name: "all-metrics", tracing: true, labels: true, profiler: true},
	{name: "all-labels", tracing: true, metrics: true, profiler: true},
	{name: "all-profiler", tracing: true, metrics: true, labels: true},
}

// BenchmarkPipelineTelemetry runs the pipeline with telemetry off (no-op providers, no pprof
// labels, no profiler), with each telemetry component on its own (spans, metrics, pprof labels,
// the continuous profiler), fully on (every trace sampled into the ring, every metric recorded,
// the continuous profiler running with span labels), and fully on with the SDK's tracer (sdk), in
// interleaved phases within one run, and reports each arm's loss of throughput against off in
// percent (loss_% for all, loss_spans_%, loss_sdk_% and so on for the others). Throughput is counted per second of the process's
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

// selectArms returns the arms named in list (comma-separated, "" for all), off first.
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
		if name == floorArm.name {
			arms = append(arms, floorArm)
			continue
		}
		if i := slices.IndexFunc(leaveOneOutArms, func(a benchArm) bool { return a.name == name }); i >= 0 {
			arms = append(arms, leaveOneOutArms[i])
			continue
		}
		if i := slices.IndexFunc(profilerArms, func(a benchArm) bool { return a.name == name }); i >= 0 {
			arms = append(arms, profilerArms[i])
			continue
		}
		i := slices.IndexFunc(telemetryArms, func(a benchArm) bool { return a.name == name })
		if i < 1 {
			return nil, fmt.Errorf("-telemetry.arms: unknown arm %q: want spans, metrics, labels, profiler, all, sdk, aa, spans-floor, all-spans, all-metrics, all-labels, all-profiler, profiler-cpu, profiler-nowall, profiler-wall50 or all-wall50", name)
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
			var tp trace.TracerProvider = tel.TracerProvider
			if a.sdk {
				tp = tel.TracerProvider.SDK()
			}
			if a.floor {
				tp = floorTracerProvider{}
			}
			opts = append(opts, pipeline.WithTracerProvider(prof.WrapTracerProvider(tp)))
		}
		if a.metrics {
			var mp metric.MeterProvider = tel.MeterProvider
			if a.sdk {
				mp = tel.MeterProvider.SDK()
			}
			opts = append(opts, pipeline.WithMeterProvider(mp))
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
			cfg := profile.Config{Now: tel.Now, Logger: slog.New(slog.DiscardHandler), WallRate: a.wallRate}
			if a.cpuOnly {
				cfg.ProfileTypes = []pyroscope.ProfileType{pyroscope.ProfileCPU}
			}
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

// BenchmarkSpanCost is the price of one span as the pipeline makes it, under a sampled root,
// with the ring as its processor and the span limits Setup configures, through the OTel SDK's
// tracer (sdk: tel.TracerProvider.SDK()) and through ragtail's (ours: tel.TracerProvider), side
// by side: bare, then with seven attributes set in one call at the end (a "Query {collection}"
// span has six, a stage span five to twelve), then with explicit start and end timestamps from
// the service's clock, and for ours through StartAt and EndAt as the pipeline's recorder calls
// them, then ending with the seven attributes in one call (endwith, EndAtWith), and with the four
// that every Query span has passed as a set (set, EndAtWithSet), which the tracer copies in as it
// encoded it once. BenchmarkPipelineTelemetry's spans arm makes about ten of the last kind per
// request.
//
// The root ends and a new one starts every spansPerTrace spans, as a request's does, so that
// every trace completes and reaches the ring, and a run's later spans cost what its first do
// rather than hang on a root that has been open for millions of them. A span's figure carries a
// tenth of its root's start and end with it.
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
	type instant interface {
		StartAt(ctx context.Context, name string, at time.Time) (context.Context, trace.Span)
	}
	type instantEnd interface{ EndAt(time.Time) }
	type attrEnd interface {
		EndAtWith(time.Time, []attribute.KeyValue)
	}
	type setEnd interface {
		EndAtWithSet(time.Time, *attribute.Set, []attribute.KeyValue)
	}
	fixed := attribute.NewSet(attrs[:4]...)
	// How a case makes its span: bare; with the attributes set in one call; with timestamp
	// options too; through StartAt, SetAttributes and EndAt; through StartAt and EndAtWith; through
	// StartAt and EndAtWithSet, the first four attributes as a set.
	const (
		bare = iota
		withAttrs
		withTimestamps
		at
		endWith
		withSet
	)
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider
		how  int
	}{
		{"sdk", tel.TracerProvider.SDK(), bare},
		{"sdk+attrs", tel.TracerProvider.SDK(), withAttrs},
		{"sdk+attrs+timestamps", tel.TracerProvider.SDK(), withTimestamps},
		{"ours", tel.TracerProvider, bare},
		{"ours+attrs", tel.TracerProvider, withAttrs},
		{"ours+attrs+timestamps", tel.TracerProvider, withTimestamps},
		{"ours+attrs+at", tel.TracerProvider, at},
		{"ours+attrs+at+endwith", tel.TracerProvider, endWith},
		{"ours+attrs+at+set", tel.TracerProvider, withSet},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tracer := bc.tp.Tracer("bench")
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
				var now time.Time
				if bc.how >= withTimestamps {
					now = tel.Now() // the cases without timestamps read no clock, as before
				}
				switch bc.how {
				case bare:
					_, span := tracer.Start(ctx, "Query ragtail")
					span.End()
				case withAttrs:
					_, span := tracer.Start(ctx, "Query ragtail")
					span.SetAttributes(attrs...)
					span.End()
				case withTimestamps:
					_, span := tracer.Start(ctx, "Query ragtail", trace.WithTimestamp(now))
					span.SetAttributes(attrs...)
					span.End(trace.WithTimestamp(now.Add(time.Microsecond)))
				case at:
					_, span := tracer.(instant).StartAt(ctx, "Query ragtail", now)
					span.SetAttributes(attrs...)
					span.(instantEnd).EndAt(now.Add(time.Microsecond))
				case endWith:
					_, span := tracer.(instant).StartAt(ctx, "Query ragtail", now)
					span.(attrEnd).EndAtWith(now.Add(time.Microsecond), attrs)
				case withSet:
					_, span := tracer.(instant).StartAt(ctx, "Query ragtail", now)
					span.(setEnd).EndAtWithSet(now.Add(time.Microsecond), &fixed, attrs[4:])
				}
			}
			b.StopTimer()
			root.End()
			tel.Ring.Reset()
		})
	}
}

// spansPerTrace is how many spans BenchmarkSpanCost makes under one root: about a request's.
const spansPerTrace = 10

// BenchmarkMetricCost is the price of one histogram measurement as the pipeline makes it (a
// stage duration with its stage and coupling labels, on an instrument with fifteen buckets)
// through the OTel SDK's meter provider (sdk: tel.MeterProvider.SDK(), the label set passed as a
// ready-made option) and through ragtail's (ours, the same option; ours bound, through a recorder
// bound to the set as the pipeline's are), side by side, within a sampled span (exemplars
// offered) and outside any span, from one goroutine, and from GOMAXPROCS goroutines at once on
// the same series (parallel), where each measurement of one core would otherwise wait for the
// series' lock and counts to come over from another's. BenchmarkPipelineTelemetry's metrics arm
// makes about twenty a request.
func BenchmarkMetricCost(b *testing.B) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Sampler: sdktrace.AlwaysSample(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := attribute.NewSet(attribute.String("rag.stage", "retrieve"), attribute.String("rag.coupling", "fanout"))
	opts := []metric.RecordOption{metric.WithAttributeSet(set)}
	bounds := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
	spanCtx, span := tel.TracerProvider.Tracer("bench").Start(context.Background(), "root")
	defer span.End()
	for _, bc := range []struct {
		name  string
		mp    metric.MeterProvider
		bound bool
	}{
		{"sdk", tel.MeterProvider.SDK(), false},
		{"ours", tel.MeterProvider, false},
		{"ours_bound", tel.MeterProvider, true},
	} {
		h, err := bc.mp.Meter("github.com/ragtail/ragtail/bench/"+bc.name).Float64Histogram("rag.stage.duration", metric.WithUnit("s"), bounds)
		if err != nil {
			b.Fatal(err)
		}
		record := func(ctx context.Context, v float64) { h.Record(ctx, v, opts...) }
		if bc.bound {
			record = h.(interface {
				BindFloat64(attribute.Set) func(context.Context, float64)
			}).BindFloat64(set)
		}
		for _, where := range []struct {
			name string
			ctx  context.Context
		}{{"in_span", spanCtx}, {"no_span", context.Background()}} {
			b.Run(bc.name+"/"+where.name, func(b *testing.B) {
				b.ReportAllocs()
				v := 0.0
				for b.Loop() {
					record(where.ctx, v)
					v += 0.0001
				}
			})
		}
		b.Run(bc.name+"/in_span/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				v := 0.0
				for pb.Next() {
					record(spanCtx, v)
					v += 0.0001
				}
			})
		})
	}
}

// floorTracerProvider hands out the least a recording span can be through the OpenTelemetry
// API: an object carrying its span context (sampled, with random ids), in a context of its own,
// every method a no-op, the instants and attributes the pipeline's recorder passes dropped. The
// spans-floor arm runs the pipeline with it, so that what the spans arm costs beyond it is what
// recording costs (telemetry.TracerProvider's attributes, the ring), and the floor itself is
// what any recording tracer would cost at least.
type floorTracerProvider struct{ embedded.TracerProvider }

func (floorTracerProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return floorTracer{} }

type floorTracer struct{ embedded.Tracer }

func (floorTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	return floorStart(ctx)
}

// StartAt is the pipeline recorder's start at an instant (its instantTracer).
func (floorTracer) StartAt(ctx context.Context, _ string, _ time.Time) (context.Context, trace.Span) {
	return floorStart(ctx)
}

func floorStart(ctx context.Context) (context.Context, trace.Span) {
	tid := trace.SpanContextFromContext(ctx).TraceID()
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	s := &floorSpan{sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})}
	return trace.ContextWithSpan(ctx, s), s
}

type floorSpan struct {
	embedded.Span
	sc trace.SpanContext
}

func (*floorSpan) End(...trace.SpanEndOption)                {}
func (*floorSpan) EndAt(time.Time)                           {}
func (*floorSpan) EndAtWith(time.Time, []attribute.KeyValue) {}
func (*floorSpan) AddEvent(string, ...trace.EventOption)     {}
func (*floorSpan) AddEventAt(string, time.Time)              {}
func (*floorSpan) AddLink(trace.Link)                        {}
func (*floorSpan) IsRecording() bool                         { return true }
func (*floorSpan) RecordError(error, ...trace.EventOption)   {}
func (s *floorSpan) SpanContext() trace.SpanContext          { return s.sc }
func (*floorSpan) SetStatus(codes.Code, string)              {}
func (*floorSpan) SetName(string)                            {}
func (*floorSpan) SetAttributes(...attribute.KeyValue)       {}
func (*floorSpan) TracerProvider() trace.TracerProvider      { return floorTracerProvider{} }
