package profile

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/grafana/pyroscope-go"
	"github.com/grafana/pyroscope-go/upstream"
)

const (
	traceA = "0af7651916cd43dd8448eb211c80319c"
	traceB = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceC = "11111111111111111111111111111111"
	traceD = "22222222222222222222222222222222"
	spanS1 = "b7ad6b7169203331"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixtureStore holds two adjacent 10 s CPU windows whose sample counts are known:
//
//	window 1 [t0, t0+10s]:  burn<handle<main  trace A span S1 generate   7
//	                        hash<handle<main  trace A embed              3
//	                        gcBgMarkWorker    (no labels)                5
//	                        [inlinedLeaf+caller]<main  trace D           1
//	window 2 [t0+10s, +20s]: burn<handle<main  trace B generate          4
//	                        burn<burn<main    trace A (recursion)        2
func fixtureStore(tb testing.TB) *Store {
	tb.Helper()
	s := NewStore(10, 1<<20)
	w1 := cpuProfile(tb,
		synthSample{stack("burn", "handle", "main"), labels(LabelTraceID, traceA, LabelSpanID, spanS1, LabelStage, "generate"), 7},
		synthSample{stack("hash", "handle", "main"), labels(LabelTraceID, traceA, LabelStage, "embed"), 3},
		synthSample{stack("gcBgMarkWorker"), nil, 5},
		synthSample{[]frame{{"inlinedLeaf", "caller"}, {"main"}}, labels(LabelTraceID, traceD), 1},
	)
	w2 := cpuProfile(tb,
		synthSample{stack("burn", "handle", "main"), labels(LabelTraceID, traceB, LabelStage, "generate"), 4},
		synthSample{stack("burn", "burn", "main"), labels(LabelTraceID, traceA), 2},
	)
	if err := s.Add(KindCPU, t0, t0.Add(10*time.Second), w1); err != nil {
		tb.Fatal(err)
	}
	if err := s.Add(KindCPU, t0.Add(10*time.Second), t0.Add(20*time.Second), w2); err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestStoreQuery(t *testing.T) {
	s := fixtureStore(t)
	tests := []struct {
		name    string
		q       Query
		want    int64 // sum of the "samples" values kept
		windows int
		err     error
	}{
		{name: "no filter", q: Query{}, want: 7 + 3 + 5 + 1 + 4 + 2, windows: 2},
		{name: "trace", q: Query{TraceID: traceA}, want: 7 + 3 + 2, windows: 2},
		{name: "trace and stage", q: Query{TraceID: traceA, Stage: "generate"}, want: 7, windows: 1},
		{name: "stage", q: Query{Stage: "generate"}, want: 7 + 4, windows: 2},
		{name: "span", q: Query{SpanID: spanS1}, want: 7, windows: 1},
		{name: "range selects window 2", q: Query{TraceID: traceA, From: t0.Add(12 * time.Second), Until: t0.Add(15 * time.Second)}, want: 2, windows: 1},
		{name: "range touching both windows", q: Query{From: t0.Add(10 * time.Second), Until: t0.Add(10 * time.Second)}, want: 22, windows: 2},
		{name: "open until", q: Query{From: t0.Add(11 * time.Second)}, want: 6, windows: 1},
		{name: "open from", q: Query{Until: t0.Add(5 * time.Second)}, want: 16, windows: 1},
		{name: "cpu type named", q: Query{Type: pyroscope.ProfileCPU, TraceID: traceB}, want: 4, windows: 1},
		{name: "range before every window", q: Query{From: t0.Add(-time.Hour), Until: t0.Add(-time.Minute)}, err: ErrNoWindows},
		{name: "unknown trace", q: Query{TraceID: traceC}, err: ErrNoSamples},
		{name: "no memory window", q: Query{Type: pyroscope.ProfileAllocSpace}, err: ErrNoWindows},
		{name: "unknown type", q: Query{Type: "itimer"}, err: ErrUnknownType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := s.query(tt.q)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got int64
			for _, smp := range res.profile.Sample {
				got += smp.Value[0]
				if !tt.q.matches(smp) {
					t.Errorf("sample with labels %v kept by %+v", smp.Label, tt.q)
				}
			}
			if got != tt.want {
				t.Errorf("samples = %d, want %d", got, tt.want)
			}
			if res.windows != tt.windows {
				t.Errorf("windows = %d, want %d", res.windows, tt.windows)
			}
			if res.profile.DefaultSampleType != "samples" {
				t.Errorf("default sample type = %q", res.profile.DefaultSampleType)
			}
			if from := time.Unix(0, res.profile.TimeNanos); !from.Equal(res.from) {
				t.Errorf("TimeNanos = %s, want %s", from, res.from)
			}
			if d := time.Duration(res.profile.DurationNanos); d != res.until.Sub(res.from) || d != time.Duration(tt.windows)*10*time.Second {
				t.Errorf("DurationNanos = %s for %d windows of 10s", d, tt.windows)
			}
		})
	}
}

func TestTopFunctions(t *testing.T) {
	s := fixtureStore(t)
	tests := []struct {
		name string
		q    Query
		top  int
		sum  int64
		want []FunctionStat
	}{
		{
			// burn: self 7+2, total 7+2 (the recursive sample counts once); hash: 3; handle is on
			// 7+3 stacks, main on all 12; ties on self order by total.
			name: "trace A", q: Query{TraceID: traceA}, top: 10, sum: 12,
			want: []FunctionStat{
				{Name: "burn", Self: 9, Total: 9, SelfPct: 75, TotalPct: 75},
				{Name: "hash", Self: 3, Total: 3, SelfPct: 25, TotalPct: 25},
				{Name: "main", Self: 0, Total: 12, SelfPct: 0, TotalPct: 100},
				{Name: "handle", Self: 0, Total: 10, SelfPct: 0, TotalPct: 83.33},
			},
		},
		{
			name: "top 1", q: Query{TraceID: traceA}, top: 1, sum: 12,
			want: []FunctionStat{{Name: "burn", Self: 9, Total: 9, SelfPct: 75, TotalPct: 75}},
		},
		{
			// self goes to the innermost of the inlined functions, total to each of them.
			name: "inlined leaf", q: Query{TraceID: traceD}, top: 10, sum: 1,
			want: []FunctionStat{
				{Name: "inlinedLeaf", Self: 1, Total: 1, SelfPct: 100, TotalPct: 100},
				{Name: "caller", Self: 0, Total: 1, SelfPct: 0, TotalPct: 100},
				{Name: "main", Self: 0, Total: 1, SelfPct: 0, TotalPct: 100},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := s.query(tt.q)
			if err != nil {
				t.Fatal(err)
			}
			got, sum, unit := topFunctions(res.profile, res.sampleType, tt.top)
			if sum != tt.sum || unit != "count" {
				t.Errorf("sum, unit = %d %q, want %d count", sum, unit, tt.sum)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("top =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestStoreBounds(t *testing.T) {
	prof := cpuProfile(t, synthSample{stack("f"), nil, 1})
	t.Run("keep per kind", func(t *testing.T) {
		const keep = 3
		s := NewStore(keep, 1<<30)
		for i := range 10 {
			from := t0.Add(time.Duration(i) * time.Second)
			if err := s.Add(KindCPU, from, from.Add(time.Second), prof); err != nil {
				t.Fatal(err)
			}
			if i < 2 {
				if err := s.Add(KindMemory, from, from.Add(time.Second), prof); err != nil {
					t.Fatal(err)
				}
			}
		}
		var cpuIDs []uint64
		mem := 0
		for _, w := range s.Windows() {
			switch w.Kind {
			case KindCPU:
				cpuIDs = append(cpuIDs, w.ID)
			case KindMemory:
				mem++
			}
		}
		// CPU windows got ids 1, 3 and 5 to 12 (memory took 2 and 4): the last three stay.
		if !slices.Equal(cpuIDs, []uint64{10, 11, 12}) || mem != 2 {
			t.Errorf("cpu ids %v, memory windows %d; want [10 11 12] and 2", cpuIDs, mem)
		}
		st := s.Stats()
		if st.Windows != keep+2 || st.Evicted != 7 || st.Added != 12 || st.Bytes != int64((keep+2)*len(prof)) {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("byte cap", func(t *testing.T) {
		maxBytes := int64(3*len(prof) + len(prof)/2) // room for three windows and a half
		s := NewStore(100, maxBytes)
		for i := range 10 {
			from := t0.Add(time.Duration(i) * time.Second)
			if err := s.Add(KindCPU, from, from.Add(time.Second), prof); err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			if st.Bytes > maxBytes {
				t.Fatalf("after %d adds: %d bytes > cap %d", i+1, st.Bytes, maxBytes)
			}
		}
		ws := s.Windows()
		if len(ws) != 3 || !ws[0].From.Equal(t0.Add(7*time.Second)) {
			t.Errorf("kept %d windows from %v, want the last 3", len(ws), ws)
		}
		if err := s.Add(KindCPU, t0, t0, make([]byte, maxBytes+1)); err == nil {
			t.Error("window larger than the cap accepted")
		}
		if st := s.Stats(); st.Rejected != 1 || st.Windows != 3 {
			t.Errorf("stats after oversize add %+v", st)
		}
	})
}

func TestStoreAddErrors(t *testing.T) {
	s := NewStore(0, 0)
	prof := []byte{1}
	tests := []struct {
		name        string
		kind        Kind
		from, until time.Time
		data        []byte
	}{
		{"unknown kind", "itimer", t0, t0, prof},
		{"empty", KindCPU, t0, t0, nil},
		{"until before from", KindCPU, t0, t0.Add(-time.Nanosecond), prof},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Add(tt.kind, tt.from, tt.until, tt.data); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if st := s.Stats(); st.Windows != 0 || st.Rejected != uint64(len(tests)) || st.Keep != DefaultKeep || st.MaxBytes != DefaultMaxBytes {
		t.Errorf("stats %+v", st)
	}
}

func TestStoreCorruptWindow(t *testing.T) {
	s := NewStore(10, 1<<20)
	if err := s.Add(KindCPU, t0, t0.Add(time.Second), []byte("not a profile")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(Query{}); err == nil || errors.Is(err, ErrNoSamples) {
		t.Fatalf("only window corrupt: err = %v, want a parse error", err)
	}
	good := cpuProfile(t, synthSample{stack("f"), nil, 3})
	if err := s.Add(KindCPU, t0.Add(time.Second), t0.Add(2*time.Second), good); err != nil {
		t.Fatal(err)
	}
	p, err := s.Query(Query{})
	if err != nil {
		t.Fatalf("one good window: %v", err)
	}
	if len(p.Sample) != 1 || p.Sample[0].Value[0] != 3 {
		t.Errorf("samples %v", p.Sample)
	}
}

// TestStoreConcurrent runs adds, lists and queries at once; the race detector checks them.
func TestStoreConcurrent(t *testing.T) {
	s := NewStore(4, 1<<20)
	prof := cpuProfile(t, synthSample{stack("f"), labels(LabelTraceID, traceA), 1})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				from := t0.Add(time.Duration(g*100+i) * time.Second)
				if err := s.Add(KindCPU, from, from.Add(time.Second), prof); err != nil {
					t.Error(err)
					return
				}
				_ = s.Windows()
				if _, err := s.Query(Query{TraceID: traceA}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.Windows != 4 || st.Added != 200 || st.Evicted != 196 {
		t.Errorf("stats %+v", st)
	}
}

func TestKindOf(t *testing.T) {
	// The upload jobs as pyroscope-go's session.go and collector.go build them.
	tests := []struct {
		name string
		job  upstream.UploadJob
		want Kind
	}{
		{"cpu", upstream.UploadJob{Units: "samples", AggregationType: "sum"}, KindCPU},
		{"goroutines", upstream.UploadJob{Units: "goroutines", SampleTypeConfig: map[string]*upstream.SampleType{"goroutine": {DisplayName: "goroutine"}}}, KindGoroutine},
		{"heap", upstream.UploadJob{SampleTypeConfig: map[string]*upstream.SampleType{"alloc_objects": {}, "alloc_space": {}, "inuse_space": {}, "inuse_objects": {}}}, KindMemory},
		{"mutex", upstream.UploadJob{SampleTypeConfig: map[string]*upstream.SampleType{"contentions": {DisplayName: "mutex_count"}, "delay": {DisplayName: "mutex_duration"}}}, KindMutex},
		{"block", upstream.UploadJob{SampleTypeConfig: map[string]*upstream.SampleType{"contentions": {DisplayName: "block_count"}, "delay": {DisplayName: "block_duration"}}}, KindBlock},
		{"goroutine leak", upstream.UploadJob{SampleTypeConfig: map[string]*upstream.SampleType{"goroutineleak": {DisplayName: "goroutine_leak"}}}, KindGoroutineLeak},
		{"unknown units", upstream.UploadJob{Units: "bytes"}, ""},
		{"unknown sample type", upstream.UploadJob{SampleTypeConfig: map[string]*upstream.SampleType{"wall": {}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kindOf(&tt.job); got != tt.want {
				t.Errorf("kindOf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKindProfileTypes(t *testing.T) {
	tests := []struct {
		kind Kind
		want string
	}{
		{KindCPU, "[cpu]"},
		{KindMemory, "[alloc_objects alloc_space inuse_objects inuse_space]"},
		{KindGoroutine, "[goroutine]"},
		{KindMutex, "[mutex_count mutex_duration]"},
		{KindBlock, "[block_count block_duration]"},
		{KindGoroutineLeak, "[goroutine_leak]"},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			if got := fmt.Sprint(tt.kind.ProfileTypes()); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestOnClock(t *testing.T) {
	wall := time.Now()
	tests := []struct {
		name   string
		now    func() time.Time
		offset time.Duration
	}{
		{"default clock", nil, 0},
		{"clock anchored at start, advanced monotonically", func() time.Time { return wall.Add(time.Since(wall)) }, 0},
		{"clock an hour ahead", func() time.Time { return time.Now().Add(time.Hour) }, time.Hour},
		{"clock a minute behind", func() time.Time { return time.Now().Add(-time.Minute) }, -time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := (&tee{now: tt.now}).onClock(wall)
			// The offset is read from two consecutive clock calls: its error is the time between
			// them, far below a millisecond.
			if d := got.Sub(wall.Add(tt.offset)); d < -time.Millisecond || d > time.Millisecond {
				t.Errorf("mapped %s off by %s", got, d)
			}
			if got.String() != got.Round(0).String() {
				t.Error("monotonic reading kept")
			}
		})
	}
}

func TestTeeUpload(t *testing.T) {
	logs := &logRecorder{}
	store := NewStore(10, 100)
	tt := &tee{store: store, log: slog.New(logs)}
	cpu := testJob(0)
	heap := testJob(1)
	heap.Units, heap.SampleTypeConfig = "", map[string]*upstream.SampleType{"inuse_space": {}}
	unknown := testJob(2)
	unknown.Units = "wall"
	big := testJob(3)
	big.Profile = make([]byte, 101)
	for _, job := range []*upstream.UploadJob{cpu, heap, unknown, big, big} {
		tt.Upload(job)
	}
	ws := store.Windows()
	if len(ws) != 2 || ws[0].Kind != KindCPU || ws[1].Kind != KindMemory {
		t.Fatalf("windows %+v, want a cpu and a memory window", ws)
	}
	if !ws[0].From.Equal(cpu.StartTime) || !ws[0].Until.Equal(cpu.EndTime) {
		t.Errorf("cpu window [%s, %s], want [%s, %s]", ws[0].From, ws[0].Until, cpu.StartTime, cpu.EndTime)
	}
	if st := store.Stats(); st.Rejected != 2 {
		t.Errorf("rejected %d, want the two oversize windows", st.Rejected)
	}
	if n := logs.count(slog.LevelWarn, "not stored"); n != 1 {
		t.Errorf("%d log lines for two refused windows, want 1:\n%s", n, logs.dump(slog.LevelDebug))
	}
}
