package profile

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/grafana/pyroscope-go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

const burnFunc = "github.com/ragtail/ragtail/telemetry/profile.burnCPU"

// burnCPU spins for d of wall time, doing integer work the compiler cannot drop, all of it in
// this one function so the CPU samples land on it as their leaf.
//
//go:noinline
func burnCPU(d time.Duration) uint64 {
	x := uint64(88172645463325252)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		for range 20000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
	}
	return x
}

// TestSession runs one real pyroscope-go session (there can be only one CPU profiler per
// process) with 1 s windows pushing to a stub Pyroscope, and checks in turn what the issue
// accepts: a CPU-heavy span's samples carry its span_id, trace_id and rag_stage in the pushed
// pprof and in the store, on the windows that bracket it; the admin endpoints serve them; a
// Pyroscope answering 500 blocks nothing and logs once; memory stays within Keep.
func TestSession(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a profiling session for several seconds")
	}
	stub, srv := newPyroscopeStub(t)
	logs := &logRecorder{}
	const keep = 3
	p, err := Start(Config{
		Window:        time.Second,
		Keep:          keep,
		ServerAddress: srv.URL,
		PushTimeout:   2 * time.Second,
		Tags:          map[string]string{"env": "test"},
		Logger:        slog.New(logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = p.Stop()
		}
	})
	if _, err := Start(Config{}); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Start: err = %v, want ErrRunning", err)
	}

	// The session's CPU collector starts in its own goroutine just after Start returns; the first
	// stored CPU window proves it runs, so the span below falls wholly inside profiled time.
	if !waitFor(t, 5*time.Second, func() bool {
		ws := p.Store().Windows()
		return slices.ContainsFunc(ws, func(w WindowInfo) bool { return w.Kind == KindCPU })
	}) {
		t.Fatalf("no CPU window stored; log:\n%s", logs.dump(slog.LevelDebug))
	}

	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	tracer := p.WrapTracerProvider(sdk).Tracer("ragtail/test")

	ctx, span := tracer.Start(context.Background(), "POST /v1/chat/completions")
	pprof.Do(ctx, pprof.Labels(LabelStage, "generate"), func(context.Context) { burnSink = burnCPU(800 * time.Millisecond) })
	span.End()
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended", len(ended))
	}
	sp := ended[0]
	traceID, spanID := sp.SpanContext().TraceID().String(), sp.SpanContext().SpanID().String()
	start, end := sp.StartTime(), sp.EndTime()

	t.Run("span carries pyroscope.profile.id", func(t *testing.T) {
		var got string
		for _, kv := range sp.Attributes() {
			if kv.Key == attribute.Key("pyroscope.profile.id") {
				got = kv.Value.AsString()
			}
		}
		if got != spanID {
			t.Errorf("pyroscope.profile.id = %q, want the span id %s", got, spanID)
		}
	})

	t.Run("pushed pprof holds the span's labelled samples on windows bracketing it", func(t *testing.T) {
		cpuIngests := func() []ingest {
			var out []ingest
			for _, in := range stub.received() {
				if in.units == "samples" {
					out = append(out, in)
				}
			}
			return out
		}
		if !waitFor(t, 5*time.Second, func() bool {
			in := cpuIngests()
			return len(in) > 0 && !in[len(in)-1].until.Before(end)
		}) {
			t.Fatalf("no CPU window pushed past the span's end %s; log:\n%s", end, logs.dump(slog.LevelDebug))
		}
		var (
			labelled, onBurn int64
			cover            []ingest // windows overlapping the span
		)
		for _, in := range cpuIngests() {
			if !strings.HasPrefix(in.name, "ragtail{") || !strings.Contains(in.name, "env=test") || in.spyName != "gospy" {
				t.Errorf("pushed name %q spy %q", in.name, in.spyName)
			}
			prof, err := profile.ParseData(in.profile)
			if err != nil {
				t.Fatalf("pushed profile: %v", err)
			}
			overlaps := !in.until.Before(start) && !in.from.After(end)
			if overlaps {
				cover = append(cover, in)
			}
			for _, s := range prof.Sample {
				if !s.HasLabel(LabelSpanID, spanID) {
					continue
				}
				if !s.HasLabel(LabelTraceID, traceID) || !s.HasLabel(LabelStage, "generate") {
					t.Errorf("sample with the span id lacks trace_id or rag_stage: %v", s.Label)
				}
				if !overlaps {
					t.Errorf("window [%s, %s] outside the span [%s, %s] holds its samples: the clocks disagree",
						in.from, in.until, start, end)
				}
				labelled += s.Value[0]
				if len(s.Location) > 0 && len(s.Location[0].Line) > 0 && s.Location[0].Line[0].Function.Name == burnFunc {
					onBurn += s.Value[0]
				}
			}
		}
		if labelled == 0 || onBurn == 0 {
			t.Fatalf("%d samples labelled with the span, %d of them in burnCPU; want some of each", labelled, onBurn)
		}
		first, last := cover[0], cover[len(cover)-1]
		if first.from.After(start) || last.until.Before(end) {
			t.Errorf("windows [%s, %s] do not bracket the span [%s, %s]", first.from, last.until, start, end)
		}
		for i := 1; i < len(cover); i++ {
			if gap := cover[i].from.Sub(cover[i-1].until); gap < 0 || gap > 50*time.Millisecond {
				t.Errorf("windows %d and %d: gap %s, want contiguous windows", i-1, i, gap)
			}
		}
		t.Logf("%d samples labelled with the span (%d in burnCPU) over %d windows", labelled, onBurn, len(cover))

		// The store holds the same windows on the same clock.
		stored := map[[2]int64]bool{}
		for _, w := range p.Store().Windows() {
			if w.Kind == KindCPU {
				stored[[2]int64{w.From.UnixNano(), w.Until.UnixNano()}] = true
			}
		}
		in := cpuIngests()
		if last := in[len(in)-1]; !stored[[2]int64{last.from.UnixNano(), last.until.UnixNano()}] {
			t.Errorf("last pushed window [%s, %s] not in the store: %v", last.from, last.until, p.Store().Windows())
		}
	})

	t.Run("store query by trace ranks the busy function first", func(t *testing.T) {
		tests := []struct {
			name string
			q    Query
		}{
			{"trace", Query{TraceID: traceID}},
			{"trace in the span's range", Query{TraceID: traceID, From: start, Until: end}},
			{"span and stage", Query{SpanID: spanID, Stage: "generate"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res, err := p.Store().query(tt.q)
				if err != nil {
					t.Fatal(err)
				}
				fns, sum, _ := topFunctions(res.profile, res.sampleType, 5)
				if len(fns) == 0 || fns[0].Name != burnFunc {
					t.Fatalf("top functions %+v, want %s first", fns, burnFunc)
				}
				t.Logf("%s: self %d of %d samples (%.1f%%)", fns[0].Name, fns[0].Self, sum, fns[0].SelfPct)
			})
		}
		if _, err := p.Store().Query(Query{TraceID: traceC}); !errors.Is(err, ErrNoSamples) {
			t.Errorf("unknown trace: err = %v, want ErrNoSamples", err)
		}
	})

	t.Run("debug/profiles answers JSON and pprof", func(t *testing.T) {
		admin := httptest.NewServer(Handler(p.Store()))
		defer admin.Close()
		resp, err := admin.Client().Get(admin.URL + "/debug/profiles?trace_id=" + traceID + "&top=3")
		if err != nil {
			t.Fatal(err)
		}
		var s Summary
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if len(s.Functions) == 0 || s.Functions[0].Name != burnFunc || s.Samples == 0 || len(s.Functions) > 3 {
			t.Errorf("summary %+v", s)
		}
		resp, err = admin.Client().Get(admin.URL + "/debug/profiles?format=pprof&stage=generate&span_id=" + spanID)
		if err != nil {
			t.Fatal(err)
		}
		prof, err := profile.Parse(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(prof.Sample) == 0 || !prof.Sample[0].HasLabel(LabelTraceID, traceID) {
			t.Errorf("pprof answer: %d samples", len(prof.Sample))
		}
	})

	t.Run("debug/pprof/profile works beside the continuous profiler", func(t *testing.T) {
		// The standard handler's way in fails: the session holds the CPU profiler.
		if err := pprof.StartCPUProfile(io.Discard); err == nil {
			pprof.StopCPUProfile()
			t.Fatal("runtime CPU profiler free while the session runs")
		}
		admin := httptest.NewServer(PprofHandler())
		defer admin.Close()
		before := p.Store().Stats().Added
		resp, err := admin.Client().Get(admin.URL + "/debug/pprof/profile?seconds=1")
		if err != nil {
			t.Fatal(err)
		}
		prof, err := profile.Parse(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if prof.PeriodType == nil || prof.PeriodType.Type != "cpu" {
			t.Errorf("period type %v, want cpu", prof.PeriodType)
		}
		if !waitFor(t, 3*time.Second, func() bool { return p.Store().Stats().Added > before }) {
			t.Error("the session stored nothing after the handler's profile")
		}
	})

	t.Run("pyroscope answering 500 blocks nothing and logs once", func(t *testing.T) {
		stub.set(http.StatusInternalServerError, false)
		before, failedBefore := p.Store().Stats().Added, p.PushStats().Failed
		// Windows keep reaching the store while pushes fail: the session never waits on Pyroscope.
		if !waitFor(t, 6*time.Second, func() bool {
			return p.PushStats().Failed >= failedBefore+3 && p.Store().Stats().Added >= before+4
		}) {
			t.Fatalf("during the outage: push stats %+v, %d windows stored", p.PushStats(), p.Store().Stats().Added-before)
		}
		if n := logs.count(slog.LevelWarn, "push to pyroscope failing"); n != 1 {
			t.Errorf("%d outage lines, want 1:\n%s", n, logs.dump(slog.LevelWarn))
		}
		if st := p.PushStats(); !st.Failing {
			t.Errorf("push stats %+v, want failing", st)
		}
		stub.set(http.StatusOK, false)
		pushed := p.PushStats().Pushed
		if !waitFor(t, 4*time.Second, func() bool { return p.PushStats().Pushed > pushed }) {
			t.Fatalf("no push after recovery: %+v", p.PushStats())
		}
		if n := logs.count(slog.LevelInfo, "recovered"); n != 1 {
			t.Errorf("%d recovery lines, want 1:\n%s", n, logs.dump(slog.LevelInfo))
		}
	})

	t.Run("memory bounded by Keep", func(t *testing.T) {
		perKind := map[Kind]int{}
		for _, w := range p.Store().Windows() {
			perKind[w.Kind]++
		}
		st := p.Store().Stats()
		for k, n := range perKind {
			if n > keep {
				t.Errorf("%d %s windows kept, want at most %d", n, k, keep)
			}
		}
		if perKind[KindCPU] == 0 || perKind[KindMemory] == 0 || perKind[KindGoroutine] == 0 || st.Evicted == 0 {
			t.Errorf("windows per kind %v, stats %+v; want each default kind present and some evicted", perKind, st)
		}
	})

	t.Run("stop is bounded, idempotent and frees the CPU profiler", func(t *testing.T) {
		stub.set(0, true) // the final window's push hangs until PushTimeout
		done := make(chan error, 1)
		go func() { done <- p.Stop() }()
		timer := time.NewTimer(15 * time.Second)
		defer timer.Stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Stop: %v", err)
			}
		case <-timer.C:
			t.Fatal("Stop blocked on a hanging pyroscope")
		}
		stopped = true
		if err := p.Stop(); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		if err := pprof.StartCPUProfile(io.Discard); err != nil {
			t.Errorf("CPU profiler still held after Stop: %v", err)
		} else {
			pprof.StopCPUProfile()
		}
		noGoroutine(t, "(*pusher).forward", "(*Remote).handleJobs", "(*Session).takeSnapshots", "(*cpuProfileCollector).Start")
		again, err := Start(Config{ProfileTypes: DefaultProfileTypes[:1], Logger: slog.New(&logRecorder{})})
		if err != nil {
			t.Fatalf("Start after Stop: %v", err)
		}
		_ = again.Stop()
	})
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"window too short", Config{Window: 100 * time.Millisecond}, "at least 1s"},
		{"negative keep", Config{Keep: -1}, "negative"},
		{"unknown profile type", Config{ProfileTypes: []pyroscope.ProfileType{"itimer"}}, `"itimer"`},
		{"wall as a pyroscope type", Config{ProfileTypes: []pyroscope.ProfileType{ProfileWall}}, "WallRate"},
		{"wall rate too high", Config{WallRate: 5000}, "at most 1000"},
		{"store window over the push window", Config{Window: 2 * time.Second, StoreWindow: 5 * time.Second}, "store window 5s"},
		{"bad address", Config{ServerAddress: "pyroscope:4040"}, "http://host:port"},
		{"invalid tag name", Config{Tags: map[string]string{"bad tag": "x"}}, "profiling session"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Logger = slog.New(&logRecorder{})
			p, err := Start(cfg)
			if err == nil {
				_ = p.Stop()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %q, want it to mention %q", err, tt.want)
			}
			if running.Load() {
				t.Error("a failed Start left the profiler marked running")
			}
		})
	}
}

// burnSink keeps burnCPU's result alive, so the compiler cannot drop the work.
var burnSink uint64
