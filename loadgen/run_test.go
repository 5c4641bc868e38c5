package loadgen

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDoer is a Doer whose requests take a fixed time (or block until released or cancelled),
// tracking how many are in flight.
type fakeDoer struct {
	service  time.Duration // how long each request takes
	block    bool          // wait for ctx instead
	fail     func(req *Request) bool
	inflight atomic.Int64
	peak     atomic.Int64
	calls    atomic.Int64
}

func (f *fakeDoer) Do(ctx context.Context, req *Request, origin time.Time, rec *Record) {
	f.calls.Add(1)
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	rec.Sent = time.Since(origin)
	var wait <-chan time.Time
	if !f.block {
		t := time.NewTimer(f.service)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-wait:
		rec.Status = 200
		rec.FirstByte = time.Since(origin)
		rec.FirstToken = rec.FirstByte
		if f.fail != nil && f.fail(req) {
			rec.Status, rec.ErrKind, rec.Err = 500, ErrKindHTTP5xx, "HTTP 500"
		}
	case <-ctx.Done():
		rec.ErrKind, rec.Err = ErrKindCanceled, ctx.Err().Error()
	}
	rec.End = time.Since(origin)
}

// evenly is a workload of n requests every gap, the first at 0 (n < 0: endless).
type evenly struct {
	gap  time.Duration
	n, i int
	then []Step
}

func (e *evenly) Next() (Item, bool) {
	if e.n >= 0 && e.i >= e.n {
		return Item{}, false
	}
	item := Item{At: time.Duration(e.i) * e.gap, Request: Request{MaxTokens: e.i}}
	if e.then != nil {
		item.Session, item.Then = "s"+string(rune('a'+e.i%26)), e.then
	}
	e.i++
	return item, true
}

func run(tb testing.TB, ctx context.Context, cfg Config) *Result {
	tb.Helper()
	res, err := Run(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	for i, r := range res.Records {
		if r.Index != i || (i > 0 && r.Intended < res.Records[i-1].Intended) {
			tb.Fatalf("record %d: index %d, intended %v after %v", i, r.Index, r.Intended, res.Records[max(0, i-1)].Intended)
		}
		if r.Sent < r.Intended || r.End < r.Sent {
			tb.Fatalf("record %d: intended %v, sent %v, end %v", i, r.Intended, r.Sent, r.End)
		}
	}
	return res
}

func TestOpenLoopSendsOnTimeWithoutWorkerCap(t *testing.T) {
	t.Parallel()
	// 50 requests 10 ms apart, each taking 200 ms: 20 are in flight at once. A generator with
	// a worker pool smaller than that would send late; this one must not.
	doer := &fakeDoer{service: 200 * time.Millisecond}
	res := run(t, context.Background(), Config{Workload: &evenly{gap: 10 * time.Millisecond, n: 50}, Client: doer})
	if len(res.Records) != 50 {
		t.Fatalf("%d records, want 50", len(res.Records))
	}
	if p := doer.peak.Load(); p < 15 {
		t.Errorf("peak in flight %d, want about 20", p)
	}
	lags := make([]time.Duration, len(res.Records))
	for i, r := range res.Records {
		if r.Intended != time.Duration(i)*10*time.Millisecond {
			t.Fatalf("record %d intended at %v", i, r.Intended)
		}
		lags[i] = r.SendLag()
	}
	slices.Sort(lags)
	// Not a speed assertion (the benchmark measures that): a lag near the 200 ms service time
	// would mean requests waited for earlier ones.
	if lags[len(lags)-1] > 100*time.Millisecond {
		t.Errorf("largest send lag %v: requests waited for others", lags[len(lags)-1])
	}
	if res.Duration < res.Records[49].End || res.Config.Concurrency != 0 {
		t.Errorf("duration %v, config %+v", res.Duration, res.Config)
	}
}

func TestConcurrencyCapCountsQueueing(t *testing.T) {
	t.Parallel()
	// 20 requests 20 ms apart, 100 ms each, at most 2 at a time: the server completes 20/s
	// while 50/s arrive, so the queue grows and the k-th request can start no earlier than
	// (k/2) x 100 ms. That wait is latency the user sees: it must show in E2EL and send lag.
	doer := &fakeDoer{service: 100 * time.Millisecond}
	res := run(t, context.Background(), Config{Workload: &evenly{gap: 20 * time.Millisecond, n: 20}, Client: doer, Concurrency: 2})
	if p := doer.peak.Load(); p > 2 {
		t.Fatalf("%d in flight with a cap of 2", p)
	}
	last := res.Records[19]
	// Request 19 is intended at 380 ms and can start at 9 x 100 ms = 900 ms at the earliest.
	if lag := last.SendLag(); lag < 500*time.Millisecond {
		t.Errorf("send lag of the last request %v, want at least 520 ms", lag)
	}
	if e2e, svc := last.E2EL(), last.ServiceE2EL(); e2e-svc != last.SendLag() || svc < 100*time.Millisecond {
		t.Errorf("E2EL %v, service E2EL %v, lag %v", e2e, svc, last.SendLag())
	}
	if res.Config.Concurrency != 2 {
		t.Errorf("RunInfo.Concurrency = %d", res.Config.Concurrency)
	}
}

func TestClosedLoop(t *testing.T) {
	t.Parallel()
	doer := &fakeDoer{service: 20 * time.Millisecond}
	res := run(t, context.Background(), Config{Workload: &evenly{gap: time.Hour, n: -1}, Client: doer,
		ClosedLoop: true, Concurrency: 3, NumItems: 30})
	if len(res.Records) != 30 || doer.peak.Load() > 3 {
		t.Fatalf("%d records, peak %d", len(res.Records), doer.peak.Load())
	}
	// Each user's next request is intended exactly when its previous one ended: every intended
	// time after the first three is some earlier record's end.
	ends := map[time.Duration]bool{}
	for _, r := range res.Records {
		ends[r.End] = true
	}
	for i, r := range res.Records[3:] {
		if !ends[r.Intended] {
			t.Errorf("record %d intended at %v, when no request ended", i+3, r.Intended)
		}
		if r.SendLag() > 50*time.Millisecond {
			t.Errorf("record %d waited %v to be sent", i+3, r.SendLag())
		}
	}
	if !math.IsInf(res.Config.RequestRate, 1) || res.Config.NumPrompts != 30 {
		t.Errorf("config %+v", res.Config)
	}
	if _, err := Run(context.Background(), Config{Workload: &evenly{n: 1}, Client: doer, ClosedLoop: true}); !errors.Is(err, ErrClosedLoopNeedsUsers) {
		t.Errorf("closed loop without users: %v", err)
	}
	if _, err := Run(context.Background(), Config{Workload: &evenly{n: 1}, Client: doer, ClosedLoop: true, Concurrency: 1}); !errors.Is(err, ErrUnbounded) {
		t.Errorf("endless closed loop: %v", err)
	}
}

func TestStopConditions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       Config
		want, min int // min > 0: at least min and at most want records
	}{
		{"num items", Config{Workload: &evenly{gap: time.Millisecond, n: -1}, NumItems: 7}, 7, 0},
		{"workload ends", Config{Workload: &evenly{gap: time.Millisecond, n: 4}}, 4, 0},
		// Intended at 0, 40, 80 ms; 120 ms is at the 120 ms duration and is not sent.
		{"duration", Config{Workload: &evenly{gap: 40 * time.Millisecond, n: -1}, Duration: 120 * time.Millisecond}, 3, 0},
		// Two users of 20 ms requests start at most 5 each before 95 ms; a slow timer only
		// lowers that, and nothing may be intended after the duration.
		{"closed loop duration", Config{Workload: &evenly{n: -1}, ClosedLoop: true, Concurrency: 2, Duration: 95 * time.Millisecond}, 10, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Client = &fakeDoer{service: 20 * time.Millisecond}
			res := run(t, context.Background(), tt.cfg)
			if n := len(res.Records); (tt.min == 0 && n != tt.want) || (tt.min > 0 && (n < tt.min || n > tt.want)) {
				t.Errorf("%d records, want %d", n, tt.want)
			}
			for _, r := range res.Records {
				if !r.OK() || (tt.cfg.Duration > 0 && r.Intended >= tt.cfg.Duration) {
					t.Errorf("record %+v", r)
				}
			}
		})
	}
}

func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	// Requests that never finish: sending stops at 100 ms, the drain gives up 150 ms later and
	// every request, running or still queued for the single slot, is recorded as drained.
	doer := &fakeDoer{block: true}
	start := time.Now()
	res := run(t, context.Background(), Config{Workload: &evenly{gap: 30 * time.Millisecond, n: -1}, Client: doer,
		Concurrency: 1, Duration: 100 * time.Millisecond, DrainTimeout: 150 * time.Millisecond})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("run took %v", took)
	}
	if len(res.Records) != 4 || res.Config.Interrupted {
		t.Fatalf("%d records (want 4: at 0, 30, 60, 90 ms), interrupted %v", len(res.Records), res.Config.Interrupted)
	}
	for i, r := range res.Records {
		if r.ErrKind != ErrKindDrain {
			t.Errorf("record %d: %q (%s), want drain", i, r.ErrKind, r.Err)
		}
		if i > 0 && (r.Sent != r.End || r.Status != 0) {
			t.Errorf("queued record %d: sent %v, end %v, status %d", i, r.Sent, r.End, r.Status)
		}
		if r.End < 250*time.Millisecond {
			t.Errorf("record %d ended at %v, before the drain timeout", i, r.End)
		}
	}
}

func TestInterrupt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(100*time.Millisecond, cancel)
	defer stop.Stop()
	doer := &fakeDoer{block: true}
	start := time.Now()
	res := run(t, ctx, Config{Workload: &evenly{gap: 30 * time.Millisecond, n: -1}, Client: doer})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("run took %v after the interrupt", took)
	}
	// Requests are due at 0, 30, 60, 90 ms; the interrupt comes at 100 ms after a timer set
	// just before Run started, so the last one may or may not have been due by then.
	if n := len(res.Records); !res.Config.Interrupted || n < 3 || n > 4 {
		t.Fatalf("interrupted %v, %d records (want 3 or 4)", res.Config.Interrupted, n)
	}
	for _, r := range res.Records {
		if r.ErrKind != ErrKindCanceled {
			t.Errorf("record %+v: want canceled", r)
		}
	}
}

func TestSessions(t *testing.T) {
	t.Parallel()
	// Two sessions of three steps, 30 ms of thinking between steps; the second session's
	// middle step fails, so its last step is never sent (the user gave up).
	then := []Step{{Think: 30 * time.Millisecond, Request: Request{Key: "second"}}, {Think: 30 * time.Millisecond, Request: Request{Key: "third"}}}
	doer := &fakeDoer{service: 10 * time.Millisecond, fail: func(req *Request) bool { return req.Key == "second" && req.MaxTokens == 1 }}
	w := &evenly{gap: 5 * time.Millisecond, n: 2, then: then}
	// The evenly workload tags requests with their item index in MaxTokens; give the steps it.
	ws := workloadFunc(func() (Item, bool) {
		item, ok := w.Next()
		if ok {
			item.Then = slices.Clone(item.Then)
			for i := range item.Then {
				item.Then[i].Request.MaxTokens = item.Request.MaxTokens
			}
		}
		return item, ok
	})
	res := run(t, context.Background(), Config{Workload: ws, Client: doer})
	bySession := map[string][]Record{}
	for _, r := range res.Records {
		bySession[r.Session] = append(bySession[r.Session], r)
	}
	a, b := bySession["sa"], bySession["sb"]
	if len(a) != 3 || len(b) != 2 {
		t.Fatalf("steps recorded: %d and %d, want 3 and 2", len(a), len(b))
	}
	for i := 1; i < 3; i++ {
		if a[i].Step != i || a[i].Intended != a[i-1].End+30*time.Millisecond {
			t.Errorf("step %d intended at %v, previous ended %v", i, a[i].Intended, a[i-1].End)
		}
	}
	if b[1].OK() || b[1].Key != "second" {
		t.Errorf("the second session's failing step: %+v", b[1])
	}
}

type workloadFunc func() (Item, bool)

func (f workloadFunc) Next() (Item, bool) { return f() }

func TestProgress(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []Progress
	run(t, context.Background(), Config{Workload: &evenly{gap: 10 * time.Millisecond, n: 30}, Client: &fakeDoer{service: 5 * time.Millisecond},
		ProgressInterval: 50 * time.Millisecond, Progress: func(p Progress) {
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
		}})
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 3 {
		t.Fatalf("%d progress calls over 300 ms at 50 ms", len(got))
	}
	last := got[len(got)-1]
	if !last.Final || last.Sent != 30 || last.Done != 30 || last.InFlight != 0 || last.Failed != 0 {
		t.Errorf("final progress %+v", last)
	}
	if last.P99E2EL != 0 {
		t.Errorf("a P99 from %d samples", last.Done)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want error
	}{
		{Config{Client: &fakeDoer{}}, ErrNoWorkload},
		{Config{Workload: &evenly{}}, ErrNoClient},
	} {
		if _, err := Run(context.Background(), tt.cfg); !errors.Is(err, tt.want) {
			t.Errorf("Run(%+v) = %v, want %v", tt.cfg, err, tt.want)
		}
	}
}

func TestWaitUntil(t *testing.T) {
	t.Parallel()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for _, d := range []time.Duration{-time.Millisecond, 0, 500 * time.Microsecond, 3 * time.Millisecond, 20 * time.Millisecond} {
		target := time.Now().Add(d)
		if !waitUntil(context.Background(), timer, target) {
			t.Fatal("waitUntil reported a cancellation")
		}
		if late := time.Since(target); late < 0 {
			t.Errorf("woke %v early for a %v wait", -late, d)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if waitUntil(ctx, timer, time.Now().Add(time.Second)) {
		t.Error("waitUntil ignored a cancelled context")
	}
}

func TestGracefulStopDrainsInFlight(t *testing.T) {
	t.Parallel()
	// Requests of 200 ms every 20 ms; Stop comes at 100 ms. Sending stops there, and every
	// request sent before it completes (the drain allows 5 s), so the tail is not cut off.
	doer := &fakeDoer{service: 200 * time.Millisecond}
	stop := make(chan struct{})
	timer := time.AfterFunc(100*time.Millisecond, func() { close(stop) })
	defer timer.Stop()
	start := time.Now()
	res := run(t, context.Background(), Config{Workload: &evenly{gap: 20 * time.Millisecond, n: -1}, Client: doer,
		Stop: stop, DrainTimeout: 5 * time.Second})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("run took %v", took)
	}
	if n := len(res.Records); !res.Config.Interrupted || n < 4 || n > 7 {
		t.Fatalf("interrupted %v, %d records (want about 5, due at 0..80 ms)", res.Config.Interrupted, n)
	}
	for _, r := range res.Records {
		if !r.OK() || r.E2EL() < 200*time.Millisecond {
			t.Errorf("record %d: %q %s, e2el %v: want completed after its 200 ms", r.Index, r.ErrKind, r.Err, r.E2EL())
		}
		if r.Intended > 150*time.Millisecond {
			t.Errorf("record %d intended at %v, after the stop", r.Index, r.Intended)
		}
	}
}

func TestGracefulStopThenAbort(t *testing.T) {
	t.Parallel()
	// Stop at 50 ms starts the drain of requests that never finish; cancelling ctx at 150 ms
	// (the second Ctrl-C) aborts it long before the drain timeout.
	doer := &fakeDoer{block: true}
	stop := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	t1 := time.AfterFunc(50*time.Millisecond, func() { close(stop) })
	t2 := time.AfterFunc(150*time.Millisecond, cancel)
	defer t1.Stop()
	defer t2.Stop()
	start := time.Now()
	res := run(t, ctx, Config{Workload: &evenly{gap: 20 * time.Millisecond, n: -1}, Client: doer,
		Stop: stop, DrainTimeout: time.Minute})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("run took %v: the abort did not end the drain", took)
	}
	if len(res.Records) == 0 || !res.Config.Interrupted {
		t.Fatalf("%d records, interrupted %v", len(res.Records), res.Config.Interrupted)
	}
	for _, r := range res.Records {
		if r.ErrKind != ErrKindCanceled || r.End < 140*time.Millisecond {
			t.Errorf("record %d: %q at %v, want canceled by the abort", r.Index, r.ErrKind, r.End)
		}
	}
}

func TestSessionCutWhileThinking(t *testing.T) {
	t.Parallel()
	// One session: a 10 ms step, then 10 s of thinking. The stop at 100 ms comes while the user
	// thinks: the next step is recorded as not sent, and the run ends at once.
	tests := []struct {
		name     string
		stop     bool // graceful stop; else the drain times out
		wantKind string
	}{
		{"graceful stop", true, ErrKindCanceled},
		{"drain timeout", false, ErrKindDrain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doer := &fakeDoer{service: 10 * time.Millisecond}
			cfg := Config{Workload: &evenly{gap: time.Millisecond, n: 1, then: []Step{{Think: 10 * time.Second}}}, Client: doer}
			if tt.stop {
				stop := make(chan struct{})
				timer := time.AfterFunc(100*time.Millisecond, func() { close(stop) })
				defer timer.Stop()
				cfg.Stop = stop
			} else {
				cfg.Duration, cfg.DrainTimeout = 10*time.Millisecond, 100*time.Millisecond
			}
			start := time.Now()
			res := run(t, context.Background(), cfg)
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("run took %v", took)
			}
			if len(res.Records) != 2 {
				t.Fatalf("%d records, want the step sent and the one not sent", len(res.Records))
			}
			if r := res.Records[0]; !r.OK() || r.NotSent {
				t.Errorf("first step %+v", r)
			}
			if r := res.Records[1]; !r.NotSent || r.Step != 1 || r.ErrKind != tt.wantKind || r.Session == "" {
				t.Errorf("cut step %+v: want not sent, step 1, %s", r, tt.wantKind)
			}
			if doer.calls.Load() != 1 {
				t.Errorf("%d requests sent, want 1", doer.calls.Load())
			}
		})
	}
}

func TestWarmup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		cfg          Config
		wantRecords  int
		wantWarmup   int
		measuredFrom time.Duration
	}{
		{"first items", Config{NumItems: 5, Warmup: 3}, 8, 3, 30 * time.Millisecond},
		{"first stretch", Config{Duration: 50 * time.Millisecond, WarmupDuration: 25 * time.Millisecond}, 8, 3, 25 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			cfg.Workload, cfg.Client = &evenly{gap: 10 * time.Millisecond, n: -1}, &fakeDoer{service: time.Millisecond}
			res := run(t, context.Background(), cfg)
			if len(res.Records) != tt.wantRecords || res.Warmup != tt.wantWarmup || res.MeasuredFrom != tt.measuredFrom {
				t.Fatalf("%d records, %d warmup, measured from %v; want %d, %d, %v", len(res.Records), res.Warmup,
					res.MeasuredFrom, tt.wantRecords, tt.wantWarmup, tt.measuredFrom)
			}
			for i, r := range res.Records {
				if r.Warmup != (i < tt.wantWarmup) {
					t.Errorf("record %d intended at %v: warmup %v", i, r.Intended, r.Warmup)
				}
			}
		})
	}
	if _, err := Run(context.Background(), Config{Workload: &evenly{n: 1}, Client: &fakeDoer{}, Warmup: -1}); !errors.Is(err, ErrNegativeWarmup) {
		t.Errorf("negative warmup: %v", err)
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	// With Stream, Run keeps no record: each item's records arrive once, a session's steps
	// together and in order, numbered in creation order.
	then := []Step{{Think: time.Millisecond}, {Think: time.Millisecond}}
	var got [][]Record
	res := run(t, context.Background(), Config{Workload: &evenly{gap: 5 * time.Millisecond, n: 4, then: then},
		Client: &fakeDoer{service: time.Millisecond},
		Stream: func(recs []Record) { got = append(got, slices.Clone(recs)) }})
	if len(res.Records) != 0 || len(got) != 4 {
		t.Fatalf("%d records kept, %d items streamed; want 0 and 4", len(res.Records), len(got))
	}
	seen := map[int]bool{}
	for _, recs := range got {
		if len(recs) != 3 {
			t.Fatalf("item of %d records, want 3 steps", len(recs))
		}
		for k, r := range recs {
			if r.Step != k || r.Session != recs[0].Session || seen[r.Index] {
				t.Errorf("step %d: %+v", k, r)
			}
			seen[r.Index] = true
		}
	}
	if len(seen) != 12 || res.Duration < got[len(got)-1][2].End {
		t.Errorf("indices %v, duration %v", seen, res.Duration)
	}
}

// TestSessionStepLimitEndsSession checks the user's patience in the runner itself: a session
// whose step runs over Config.SessionStepLimit sends none of its remaining steps, so the load
// drops; without the limit, or with steps within it, every step is sent.
func TestSessionStepLimitEndsSession(t *testing.T) {
	t.Parallel()
	const slow = 300 * time.Millisecond // the slow step's service time, twice the limit
	const limit = 150 * time.Millisecond
	tests := []struct {
		name      string
		limit     time.Duration
		slowKey   string // the step that takes slow; the others take no time
		wantCalls int64
		wantKeys  []string
	}{
		{"no limit", 0, "second", 3, []string{"first", "second", "third"}},
		{"slow step within a roomy limit", 2 * slow, "second", 3, []string{"first", "second", "third"}},
		{"slow first step ends the session", limit, "first", 1, []string{"first"}},
		{"slow middle step ends the session", limit, "second", 2, []string{"first", "second"}},
		{"slow last step", limit, "third", 3, []string{"first", "second", "third"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doer := &slowKeyDoer{slowKey: tt.slowKey, slow: slow}
			item := Item{Request: Request{Key: "first"}, Session: "s",
				Then: []Step{{Think: time.Millisecond, Request: Request{Key: "second"}}, {Think: time.Millisecond, Request: Request{Key: "third"}}}}
			done := false
			w := workloadFunc(func() (Item, bool) {
				if done {
					return Item{}, false
				}
				done = true
				return item, true
			})
			res := run(t, context.Background(), Config{Workload: w, Client: doer, SessionStepLimit: tt.limit})
			if got := doer.calls.Load(); got != tt.wantCalls {
				t.Fatalf("%d requests sent, want %d", got, tt.wantCalls)
			}
			var keys []string
			for _, r := range res.Records {
				if r.NotSent {
					t.Fatalf("record %+v: a step the user gave up on must not be recorded as cut by the run", r)
				}
				keys = append(keys, r.Key)
			}
			if !slices.Equal(keys, tt.wantKeys) {
				t.Fatalf("steps recorded %v, want %v", keys, tt.wantKeys)
			}
		})
	}
}

// slowKeyDoer answers at once, except the request for slowKey, which takes slow.
type slowKeyDoer struct {
	slowKey string
	slow    time.Duration
	calls   atomic.Int64
}

func (d *slowKeyDoer) Do(ctx context.Context, req *Request, origin time.Time, rec *Record) {
	d.calls.Add(1)
	rec.Sent = time.Since(origin)
	if req.Key == d.slowKey {
		t := time.NewTimer(d.slow)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			rec.ErrKind, rec.Err = ErrKindCanceled, ctx.Err().Error()
		}
	}
	if rec.ErrKind == "" {
		rec.Status = 200
		rec.FirstByte = time.Since(origin)
		rec.FirstToken = rec.FirstByte
	}
	rec.End = time.Since(origin)
}
