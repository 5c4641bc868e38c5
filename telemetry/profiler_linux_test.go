//go:build linux

package telemetry_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/telemetry"
	"github.com/ragtail/ragtail/telemetry/profile"
)

// The tests in this file run the process's one continuous profiler, so they are not parallel.

// threadCPU returns the CPU time the calling OS thread has used.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heavyEmbedder burns a fixed amount of CPU time in every Embed before embedding, standing in
// for an embedding model running in process.
type heavyEmbedder struct {
	*embed.Hash
	cpu time.Duration
}

func (e heavyEmbedder) Embed(ctx context.Context, text string) ([]float32, error) {
	burnCPU(e.cpu)
	return e.Hash.Embed(ctx, text)
}

var sink atomic.Uint64

// burnCPU spins on its OS thread until that thread has used d of CPU time, however busy the
// machine is. Its work is integer arithmetic on registers, which the race detector does not
// instrument, so that the CPU samples land on burnCPU itself and not in the race runtime, whose
// C frames the profiler cannot unwind back to it.
//
//go:noinline
func burnCPU(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	x := uint64(88172645463325252)
	for threadCPU()-start < d {
		for range 50000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
	}
	sink.Add(x)
}

// TestProfileOfATrace: a request that burns CPU in its embed stage is found in the profile store
// by its trace id and its stage, through the span<->profile links the pipeline and the profiler
// make.
func TestProfileOfATrace(t *testing.T) {
	var logs syncBuffer
	prof, err := profile.Start(profile.Config{Window: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prof.Stop() }()
	// 300 ms of CPU at pyroscope-go's 100 Hz sampling rate is 30 expected samples.
	const burn = 300 * time.Millisecond
	s := newStack(t, telemetry.Config{}, stackOptions{
		profiler: prof,
		embedder: func(h *embed.Hash) pipeline.Embedder { return heavyEmbedder{Hash: h, cpu: burn} },
	})
	a := s.ask(context.Background(), "What is paged attention?", 4)
	if a.err != nil || a.status != 200 || !a.complete {
		t.Fatalf("request: %+v", a)
	}
	s.waitTraces(t, 1)
	// Stopping flushes the last CPU window into the store.
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}

	// The embed span's time range, for the bracketing check below.
	code, body := get(t, s.admin.URL+"/debug/traces?trace_id="+a.traceID)
	var tv telemetry.TraceView
	if code != 200 || json.Unmarshal([]byte(body), &tv) != nil {
		t.Fatalf("trace: %d %s", code, body)
	}
	var embedStart, embedEnd time.Time
	for _, sp := range tv.Waterfall {
		if sp.Stage == "embed" {
			embedStart = tv.Start.Add(time.Duration(sp.StartOffsetMS * float64(time.Millisecond)))
			embedEnd = embedStart.Add(time.Duration(sp.DurationMS * float64(time.Millisecond)))
		}
	}

	type summary struct {
		From, Until string
		Samples     int64
		Functions   []struct {
			Name        string
			Self, Total int64
		}
	}
	burnSamples := func(query string) (int, summary) {
		t.Helper()
		code, body := get(t, s.admin.URL+"/debug/profiles?"+query)
		if code == http.StatusNotFound {
			return code, summary{}
		}
		var sum summary
		if code != 200 || json.Unmarshal([]byte(body), &sum) != nil {
			t.Fatalf("GET /debug/profiles?%s: %d %s", query, code, body)
		}
		return code, sum
	}
	total := func(sum summary, fn string) int64 {
		for _, f := range sum.Functions {
			if strings.HasSuffix(f.Name, fn) {
				return f.Total
			}
		}
		return 0
	}

	code, byTrace := burnSamples("trace_id=" + a.traceID + "&top=50")
	if code != 200 {
		t.Fatalf("no samples for trace %s", a.traceID)
	}
	// Expected 30 samples; a count below 10 is over 3.5 standard deviations of a Poisson count
	// below that, so it means the labels are lost, not bad luck.
	n := total(byTrace, "burnCPU")
	t.Logf("trace %s: burnCPU in %d of its %d samples", a.traceID, n, byTrace.Samples)
	if n < 10 {
		t.Errorf("trace %s: burnCPU in %d samples, want about %d (its top: %+v)", a.traceID, n, burn/(10*time.Millisecond), byTrace.Functions)
	}
	from, err1 := time.Parse(time.RFC3339Nano, byTrace.From)
	until, err2 := time.Parse(time.RFC3339Nano, byTrace.Until)
	if err1 != nil || err2 != nil || from.After(embedStart) || until.Before(embedEnd) {
		t.Errorf("profile windows [%s, %s] do not bracket the embed span [%v, %v]", byTrace.From, byTrace.Until, embedStart, embedEnd)
	}
	if _, byStage := burnSamples("trace_id=" + a.traceID + "&stage=embed&top=50"); total(byStage, "burnCPU") < 10 {
		t.Errorf("stage=embed: burnCPU in %d samples", total(byStage, "burnCPU"))
	}
	if _, other := burnSamples("trace_id=" + a.traceID + "&stage=fetch&top=50"); total(other, "burnCPU") != 0 {
		t.Errorf("stage=fetch holds %d burnCPU samples: the rag_stage label is wrong", total(other, "burnCPU"))
	}
	if code, _ := burnSamples("trace_id=0123456789abcdef0123456789abcdef"); code != http.StatusNotFound {
		t.Errorf("an unknown trace answered %d, want 404", code)
	}
}

// TestBackendsDownNeverFailRequests points OTLP at a closed port and Pyroscope at a server that
// answers 500, and checks that a few hundred requests all succeed and that each failing backend
// costs a log line, not one per failed export.
func TestBackendsDownNeverFailRequests(t *testing.T) {
	// Fail exports fast and often, so that the test sees them fail.
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	var pushes atomic.Int32
	pyroscope := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pushes.Add(1)
		http.Error(w, "ingester unavailable", http.StatusInternalServerError)
	}))
	defer pyroscope.Close()

	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	prof, err := profile.Start(profile.Config{Window: time.Second, ServerAddress: pyroscope.URL, PushTimeout: time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prof.Stop() }()
	s := newStack(t, telemetry.Config{
		Logger:          logger,
		TracesEndpoint:  "http://" + closed,
		TracesProtocol:  telemetry.ProtocolGRPC,
		MetricsEndpoint: "http://" + closed + "/v1/metrics",
		MetricsProtocol: telemetry.ProtocolHTTPProtobuf,
		MetricsInterval: 200 * time.Millisecond,
	}, stackOptions{profiler: prof})

	const n = 300
	var failed []answer
	answers := s.load(t, n, 8, 4)
	for _, a := range answers {
		if a.err != nil || a.status != 200 || !a.complete {
			failed = append(failed, a)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d requests failed with the backends down; first: %+v", len(failed), n, failed[0])
	}
	// Keep serving until a profile window has been pushed and refused.
	deadline := time.Now().Add(10 * time.Second)
	for pushes.Load() == 0 || s.tel.Errors.Errors() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d pushes to pyroscope, %d export errors: the backends were never tried", pushes.Load(), s.tel.Errors.Errors())
		}
		s.load(t, 8, 4, 2)
	}
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.tel.Shutdown(ctx) // the queued spans cannot be delivered; the error says so

	if st := prof.PushStats(); st.Failed == 0 {
		t.Errorf("push stats %+v: want failed pushes", st)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	perMessage := map[string]int{}
	for _, l := range lines {
		_, rest, _ := strings.Cut(l, "msg=")
		msg := rest
		if i := strings.Index(rest, "\" "); strings.HasPrefix(rest, "\"") && i > 0 {
			msg = rest[:i+1]
		}
		perMessage[msg]++
	}
	exportLines := strings.Count(logs.String(), "telemetry export failing")
	if exportLines != 1 {
		t.Errorf("%d export-failure lines for %d export errors, want 1:\n%s", exportLines, s.tel.Errors.Errors(), logs.String())
	}
	for msg, count := range perMessage {
		if count > 1 {
			t.Errorf("log line %s repeated %d times: a storm", msg, count)
		}
	}
	t.Logf("%d requests ok; %d export errors and %d refused pushes cost %d log lines:\n%s", n, s.tel.Errors.Errors(), pushes.Load(), len(lines), logs.String())
}

// syncBuffer is a strings.Builder safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
