package profile

import (
	"bytes"
	"github.com/grafana/pyroscope-go"
	"log/slog"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/grafana/pyroscope-go/upstream"
)

// memProfile encodes a memory window with the four sample types of pyroscope-go's heap profile,
// one sample on one stack.
func memProfile(tb testing.TB, allocObjects, allocSpace, inuseObjects, inuseSpace int64) []byte {
	tb.Helper()
	fn := &profile.Function{ID: 1, Name: "alloc", SystemName: "alloc"}
	loc := &profile.Location{ID: 1, Address: 0x1000, Line: []profile.Line{{Function: fn, Line: 1}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:     512 << 10,
		Sample:     []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{allocObjects, allocSpace, inuseObjects, inuseSpace}}},
		Location:   []*profile.Location{loc},
		Function:   []*profile.Function{fn},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestBatcher checks that ten 1 s windows become one 10 s pushed window per kind: CPU and
// allocations summed, in-use memory and the goroutine snapshot taken from the last window.
func TestBatcher(t *testing.T) {
	b := newBatcher(10*time.Second, time.Second)
	var pushed []*upstream.UploadJob
	for i := range 25 {
		from := t0.Add(time.Duration(i) * time.Second)
		cpu := &upstream.UploadJob{StartTime: from, EndTime: from.Add(time.Second), Units: "samples",
			Profile: cpuProfile(t, synthSample{stack: stack("work", "main"), count: int64(i + 1)})}
		mem := &upstream.UploadJob{StartTime: from, EndTime: from.Add(time.Second),
			SampleTypeConfig: map[string]*upstream.SampleType{"alloc_objects": {}},
			Profile:          memProfile(t, 1, 100, int64(i), int64(1000*i))}
		gor := &upstream.UploadJob{StartTime: from, EndTime: from.Add(time.Second),
			SampleTypeConfig: map[string]*upstream.SampleType{"goroutine": {}}, Profile: []byte{byte(i)}}
		for _, job := range []*upstream.UploadJob{cpu, mem, gor} {
			pushed = append(pushed, b.add(job)...)
		}
	}
	if len(pushed) != 6 {
		t.Fatalf("%d jobs pushed for 25 s of 1 s windows of three kinds, want two 10 s windows of each", len(pushed))
	}
	pushed = append(pushed, b.flush()...)
	if len(pushed) != 9 {
		t.Fatalf("%d jobs after flush, want the three partial 5 s groups too", len(pushed))
	}
	for _, job := range pushed[:6] {
		if d := job.EndTime.Sub(job.StartTime); d != 10*time.Second {
			t.Errorf("%s window of %v, want 10s", kindOf(job), d)
		}
	}
	sums := func(job *upstream.UploadJob) []int64 {
		t.Helper()
		p, err := profile.ParseData(job.Profile)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int64, len(p.SampleType))
		for _, s := range p.Sample {
			for i, v := range s.Value {
				out[i] += v
			}
		}
		return out
	}
	// The first CPU group holds windows 1..10: 55 samples.
	if got := sums(pushed[0])[0]; got != 55 {
		t.Errorf("first pushed CPU window has %d samples, want 55", got)
	}
	// Memory group 1 (windows 0..9): allocations summed, in-use from window 9.
	if got := sums(pushed[1]); got[0] != 10 || got[1] != 1000 || got[2] != 9 || got[3] != 9000 {
		t.Errorf("first pushed memory window %v, want [10 1000 9 9000]", got)
	}
	if g := pushed[2].Profile; len(g) != 1 || g[0] != 9 {
		t.Errorf("first pushed goroutine window is snapshot %v, want the group's last, 9", g)
	}
	// Windows longer than or equal to the push window pass through.
	if out := newBatcher(time.Second, time.Second).add(pushed[0]); len(out) != 1 || out[0] != pushed[0] {
		t.Errorf("1 s push of 1 s windows: %v, want the window itself", out)
	}
}

// TestSessionShortStoreWindows runs a session pushing 4 s windows while the store keeps short
// ones: the store answers seconds after the work, Pyroscope gets the upload rate it was given.
// pyroscope-go v1.5.0's CPU collector skips every other tick of its period (collector.go: the
// first tick comes just under one period after the profile started, and the ticker is reset to
// that remainder), so its CPU windows last two session periods: 2 s here.
func TestSessionShortStoreWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("profiles for several seconds")
	}
	stub, srv := newPyroscopeStub(t)
	p, err := Start(Config{Window: 4 * time.Second, ServerAddress: srv.URL, WallRate: -1,
		ProfileTypes: []pyroscope.ProfileType{pyroscope.ProfileCPU}, Logger: slog.New(&logRecorder{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	cpuIngests := func() []ingest {
		var out []ingest
		for _, in := range stub.received() {
			if in.units == "samples" {
				out = append(out, in)
			}
		}
		return out
	}
	if !waitFor(t, 8*time.Second, func() bool { return len(cpuIngests()) > 0 }) {
		t.Fatal("no CPU window pushed")
	}
	in := cpuIngests()[0]
	t.Logf("pushed [%s, %s]", in.from.Format("15:04:05.000"), in.until.Format("15:04:05.000"))
	// The windows' edges come from the collector's ticker, a few milliseconds off the period:
	// a group can end just short of the push threshold and take one more window, so the bound
	// allows that jitter beyond half a window.
	const jitter = 100 * time.Millisecond
	if d := in.until.Sub(in.from); d < 3*time.Second-jitter || d > 5*time.Second+jitter {
		t.Errorf("pushed CPU window of %v, want the 4 s upload rate within half a 2 s window (and %v of ticker jitter)", d, jitter)
	}
	var stored int
	for _, w := range p.Store().Windows() {
		if w.Kind != KindCPU {
			continue
		}
		stored++
		t.Logf("stored CPU window [%s, %s]", w.From.Format("15:04:05.000"), w.Until.Format("15:04:05.000"))
		if d := w.Until.Sub(w.From); d < 500*time.Millisecond || d > 2500*time.Millisecond {
			t.Errorf("stored CPU window of %v, want two 1 s session periods at most", d)
		}
	}
	if stored < 2 {
		t.Errorf("%d stored CPU windows by the first push, want the two it merged", stored)
	}
}
