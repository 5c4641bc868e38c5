package admission_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/pipeline"
)

var _ pipeline.Admitter = (*admission.Pool)(nil)

func newPool(tb testing.TB, cfg admission.Config) *admission.Pool {
	tb.Helper()
	p, err := admission.NewPool(cfg)
	if err != nil {
		tb.Fatalf("NewPool(%+v): %v", cfg, err)
	}
	return p
}

func mustAcquire(tb testing.TB, p *admission.Pool) func() {
	tb.Helper()
	release, err := p.Acquire(context.Background())
	if err != nil {
		tb.Fatalf("Acquire: %v", err)
	}
	return release
}

func queued(p *admission.Pool, n int) func() bool {
	return func() bool { return p.Stats().Queued == n }
}

type acquired struct {
	release func()
	err     error
}

// acquireAsync starts one Acquire in a goroutine and returns the channel its outcome arrives on.
func acquireAsync(ctx context.Context, p *admission.Pool) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		release, err := p.Acquire(ctx)
		ch <- acquired{release, err}
	}()
	return ch
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     admission.Config
		wantErr string
	}{
		{name: "default", cfg: admission.DefaultConfig()},
		{name: "no queue", cfg: admission.Config{Workers: 1}},
		{name: "unbounded wait", cfg: admission.Config{Workers: 1, QueueCapacity: admission.Unbounded, Policy: admission.PolicyWait}},
		{name: "zero workers", cfg: admission.Config{}, wantErr: "workers must be at least 1"},
		{name: "negative workers", cfg: admission.Config{Workers: -3}, wantErr: "workers must be at least 1"},
		{name: "capacity below -1", cfg: admission.Config{Workers: 1, QueueCapacity: -2}, wantErr: "queue capacity"},
		{name: "negative timeout", cfg: admission.Config{Workers: 1, QueueTimeout: -time.Second}, wantErr: "queue timeout"},
		{name: "unknown policy", cfg: admission.Config{Workers: 1, Policy: "drop-oldest"}, wantErr: "want reject or wait"},
		{name: "most workers", cfg: admission.Config{Workers: admission.MaxWorkers, QueueCapacity: admission.MaxQueueCapacity, QueueTimeout: admission.MaxQueueTimeout, QueueTarget: admission.MaxQueueTarget}},
		{name: "too many workers", cfg: admission.Config{Workers: admission.MaxWorkers + 1}, wantErr: "at most 65536"},
		{name: "queue too long", cfg: admission.Config{Workers: 1, QueueCapacity: admission.MaxQueueCapacity + 1}, wantErr: "up to 1048576"},
		{name: "timeout too long", cfg: admission.Config{Workers: 1, QueueTimeout: admission.MaxQueueTimeout + 1}, wantErr: "queue timeout"},
		{name: "target too long", cfg: admission.Config{Workers: 1, QueueTarget: admission.MaxQueueTarget + 1}, wantErr: "queue target"},
		{name: "target below auto", cfg: admission.Config{Workers: 1, QueueTarget: -2}, wantErr: "queue target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			_, newErr := admission.NewPool(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate = %v, NewPool = %v; want both nil", err, newErr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("Validate = %v; want an invalid-request error containing %q", err, tt.wantErr)
			}
			if newErr == nil {
				t.Fatal("NewPool accepted an invalid config")
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	cfg := admission.DefaultConfig()
	if cfg.Workers != 256 || cfg.QueueCapacity != 1024 || cfg.QueueTimeout != 30*time.Second || cfg.Policy != admission.PolicyReject || cfg.QueueTarget != admission.AutoQueueTarget {
		t.Fatalf("DefaultConfig = %+v; want 256 workers, queue 1024, 30s, reject, auto queue target", cfg)
	}
	p := newPool(t, admission.Config{Workers: 1})
	if got := p.Config().Policy; got != admission.PolicyReject {
		t.Fatalf("empty policy became %q; want reject", got)
	}
}

func TestParseQueueTarget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{{"auto", admission.AutoQueueTarget, false}, {"off", 0, false}, {"0", 0, false}, {"250ms", 250 * time.Millisecond, false},
		{"-1s", 0, true}, {"soon", 0, true}, {"", 0, true}} {
		got, err := admission.ParseQueueTarget(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseQueueTarget(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil {
			if back, _ := admission.ParseQueueTarget(admission.FormatQueueTarget(got)); back != got {
				t.Errorf("FormatQueueTarget(%v) = %q does not parse back", got, admission.FormatQueueTarget(got))
			}
		}
	}
}

func TestFIFO(t *testing.T) {
	t.Parallel()
	const waiters = 8
	p := newPool(t, admission.Config{Workers: 1, QueueCapacity: admission.Unbounded})
	hold := mustAcquire(t, p)

	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range waiters {
		wg.Go(func() {
			release, err := p.Acquire(context.Background())
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			release()
		})
		// Enqueue strictly one after another so that arrival order is known.
		testwait.For(t, fmt.Sprintf("%d waiters are queued", i+1), queued(p, i+1))
	}
	hold()
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("admission order = %v; want 0..%d in arrival order", order, waiters-1)
		}
	}
	if len(order) != waiters {
		t.Fatalf("%d of %d waiters admitted", len(order), waiters)
	}
	if s := p.Stats(); s.InFlight != 0 || s.Queued != 0 || s.Admitted != waiters+1 {
		t.Fatalf("stats after drain = %+v; want nothing in flight or queued and %d admitted", s, waiters+1)
	}
}

func TestCapacityAndRejection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        admission.Config
		queueable  int  // arrivals beyond the workers that must queue
		rejectNext bool // whether the arrival after them is rejected
		wantInMsg  string
	}{
		{name: "bounded queue rejects when full", cfg: admission.Config{Workers: 2, QueueCapacity: 2}, queueable: 2, rejectNext: true, wantInMsg: "queue of 2 is full"},
		{name: "no queue rejects at once", cfg: admission.Config{Workers: 2}, queueable: 0, rejectNext: true, wantInMsg: "queueing is off"},
		{name: "wait policy queues beyond capacity", cfg: admission.Config{Workers: 2, QueueCapacity: 1, Policy: admission.PolicyWait}, queueable: 3},
		{name: "wait policy without a queue waits", cfg: admission.Config{Workers: 1, Policy: admission.PolicyWait}, queueable: 2},
		{name: "unbounded queue", cfg: admission.Config{Workers: 1, QueueCapacity: admission.Unbounded}, queueable: 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPool(t, tt.cfg)
			var releases []func()
			for range tt.cfg.Workers {
				releases = append(releases, mustAcquire(t, p))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var waiting []<-chan acquired
			for i := range tt.queueable {
				waiting = append(waiting, acquireAsync(ctx, p))
				testwait.For(t, fmt.Sprintf("%d queued", i+1), queued(p, i+1))
			}
			if tt.rejectNext {
				start := time.Now()
				_, err := p.Acquire(ctx)
				if !errors.Is(err, rag.ErrOverloaded) || !strings.Contains(err.Error(), tt.wantInMsg) || !strings.Contains(err.Error(), "workers") {
					t.Fatalf("Acquire on a full pool = %v; want ErrOverloaded saying %q and naming the workers", err, tt.wantInMsg)
				}
				// Rejection must not wait: bound it far below any queue timeout (there is none here).
				if d := time.Since(start); d > 100*time.Millisecond {
					t.Fatalf("rejection took %v; want it immediate", d)
				}
				if s := p.Stats(); s.Rejected != 1 {
					t.Fatalf("Rejected = %d; want 1", s.Rejected)
				}
			}
			if s := p.Stats(); s.InFlight != tt.cfg.Workers || s.Queued != tt.queueable {
				t.Fatalf("stats = %+v; want %d in flight, %d queued", s, tt.cfg.Workers, tt.queueable)
			}
			for _, release := range releases {
				release()
			}
			for _, ch := range waiting {
				got := <-ch
				if got.err != nil {
					t.Fatalf("queued request failed: %v", got.err)
				}
				got.release()
			}
			if s := p.Stats(); s.InFlight != 0 || s.Queued != 0 {
				t.Fatalf("stats after drain = %+v; want empty", s)
			}
		})
	}
}

func TestQueueTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 30 * time.Millisecond
	p := newPool(t, admission.Config{Workers: 1, QueueCapacity: 4, QueueTimeout: timeout})
	hold := mustAcquire(t, p)
	defer hold()

	release, wait, err := p.AcquireWait(context.Background())
	if err == nil {
		release()
		t.Fatal("Acquire succeeded while the only worker was held")
	}
	if !errors.Is(err, rag.ErrOverloaded) || !strings.Contains(err.Error(), "queue timeout") {
		t.Fatalf("err = %v; want ErrOverloaded naming the queue timeout", err)
	}
	// A timer never fires early, so the wait is at least the timeout.
	if wait < timeout {
		t.Fatalf("waited %v; want at least the %v timeout", wait, timeout)
	}
	if s := p.Stats(); s.TimedOut != 1 || s.Queued != 0 || s.Admitted != 1 {
		t.Fatalf("stats = %+v; want 1 timed out, none queued, 1 admitted", s)
	}
}

func TestCancelWhileQueuedRemovesWaiter(t *testing.T) {
	t.Parallel()
	p := newPool(t, admission.Config{Workers: 1, QueueCapacity: 2})
	hold := mustAcquire(t, p)

	ctxA, cancelA := context.WithCancel(context.Background())
	a := acquireAsync(ctxA, p)
	testwait.For(t, "A is queued", queued(p, 1))
	b := acquireAsync(context.Background(), p)
	testwait.For(t, "B is queued", queued(p, 2))

	cancelA()
	got := <-a
	if !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled waiter got %v; want context.Canceled", got.err)
	}
	if s := p.Stats(); s.Queued != 1 || s.Cancelled != 1 {
		t.Fatalf("stats = %+v; want B alone in the queue and 1 cancelled", s)
	}
	// A's place is gone: a newcomer can take it, so the queue of 2 is not full.
	c := acquireAsync(context.Background(), p)
	testwait.For(t, "C is queued", queued(p, 2))

	hold()
	gotB := <-b
	if gotB.err != nil {
		t.Fatalf("B: %v", gotB.err)
	}
	select {
	case gotC := <-c:
		t.Fatalf("C admitted (%v) while B holds the only worker", gotC.err)
	default:
	}
	gotB.release()
	gotC := <-c
	if gotC.err != nil {
		t.Fatalf("C: %v", gotC.err)
	}
	gotC.release()
	if s := p.Stats(); s.InFlight != 0 || s.Queued != 0 || s.Admitted != 3 {
		t.Fatalf("stats = %+v; want empty and 3 admitted (hold, B, C)", s)
	}
}

func TestAcquireWithDoneContext(t *testing.T) {
	t.Parallel()
	p := newPool(t, admission.Config{Workers: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a done context = %v; want context.Canceled", err)
	}
	if s := p.Stats(); s.InFlight != 0 || s.Admitted != 0 || s.Cancelled != 1 {
		t.Fatalf("stats = %+v; want nothing admitted and 1 cancelled", s)
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	p := newPool(t, admission.Config{Workers: 1, QueueCapacity: 1})
	first := mustAcquire(t, p)
	w := acquireAsync(context.Background(), p)
	testwait.For(t, "second request is queued", queued(p, 1))

	first()
	second := <-w
	if second.err != nil {
		t.Fatalf("queued request: %v", second.err)
	}
	first() // a double release must not free the slot the second request now holds
	if s := p.Stats(); s.InFlight != 1 {
		t.Fatalf("InFlight after double release = %d; want 1", s.InFlight)
	}
	third := acquireAsync(context.Background(), p)
	testwait.For(t, "third request is queued", queued(p, 1))
	second.release()
	second.release()
	got := <-third
	if got.err != nil {
		t.Fatalf("third: %v", got.err)
	}
	got.release()
	if s := p.Stats(); s.InFlight != 0 || s.Queued != 0 || s.Admitted != 3 {
		t.Fatalf("stats = %+v; want empty and 3 admitted", s)
	}
}

func TestResizeWhileWaiting(t *testing.T) {
	t.Parallel()
	p := newPool(t, admission.Config{Workers: 1, QueueCapacity: admission.Unbounded})
	hold := mustAcquire(t, p)
	var waiting []<-chan acquired
	for i := range 3 {
		waiting = append(waiting, acquireAsync(context.Background(), p))
		testwait.For(t, fmt.Sprintf("%d queued", i+1), queued(p, i+1))
	}

	// Growing to 3 workers admits the two oldest waiters at once; the youngest keeps waiting.
	if err := p.Resize(admission.Config{Workers: 3, QueueCapacity: admission.Unbounded}); err != nil {
		t.Fatal(err)
	}
	var releases []func()
	for i, ch := range waiting[:2] {
		got := <-ch
		if got.err != nil {
			t.Fatalf("waiter %d: %v", i, got.err)
		}
		releases = append(releases, got.release)
	}
	if s := p.Stats(); s.InFlight != 3 || s.Queued != 1 {
		t.Fatalf("after growing: %+v; want 3 in flight, 1 queued", s)
	}

	// Shrinking to 1 worker interrupts nobody, but admits nobody until in-flight drops below 1.
	if err := p.Resize(admission.Config{Workers: 1, QueueCapacity: 0}); err != nil {
		t.Fatal(err)
	}
	hold()
	releases[0]()
	if s := p.Stats(); s.InFlight != 1 || s.Queued != 1 {
		t.Fatalf("after shrinking and two releases: %+v; want 1 in flight, the waiter still queued", s)
	}
	releases[1]()
	got := <-waiting[2]
	if got.err != nil {
		t.Fatalf("last waiter: %v", got.err)
	}
	// The smaller capacity applies to newcomers: with the worker busy and no queue, reject.
	if _, err := p.Acquire(context.Background()); !errors.Is(err, rag.ErrOverloaded) {
		t.Fatalf("Acquire after shrinking to no queue = %v; want ErrOverloaded", err)
	}
	got.release()

	if err := p.Resize(admission.Config{Workers: 0}); err == nil {
		t.Fatal("Resize accepted zero workers")
	}
	if got := p.Config().Workers; got != 1 {
		t.Fatalf("a rejected Resize changed the config: workers = %d", got)
	}
}

func TestAcquireWaitReportsWait(t *testing.T) {
	t.Parallel()
	const holdFor = 20 * time.Millisecond
	p := newPool(t, admission.Config{Workers: 1, QueueCapacity: 1})
	hold := mustAcquire(t, p)
	done := make(chan struct{})
	var wait time.Duration
	go func() {
		defer close(done)
		release, w, err := p.AcquireWait(context.Background())
		if err != nil {
			t.Errorf("AcquireWait: %v", err)
			return
		}
		wait = w
		release()
	}()
	testwait.For(t, "the waiter is queued", queued(p, 1))
	time.Sleep(holdFor)
	hold()
	<-done
	// The waiter was queued before the sleep began and admitted after it ended.
	if wait < holdFor {
		t.Fatalf("reported wait %v; want at least %v", wait, holdFor)
	}
	if s := p.Stats(); s.QueueWait != wait {
		t.Fatalf("Stats.QueueWait = %v; want the one wait %v", s.QueueWait, wait)
	}
}

// TestConcurrentChurn hammers the pool with acquirers that time out, get cancelled or succeed,
// while it is resized, and checks that the books balance afterwards. Its value is under -race.
func TestConcurrentChurn(t *testing.T) {
	t.Parallel()
	p := newPool(t, admission.Config{Workers: 3, QueueCapacity: 8, QueueTimeout: 2 * time.Millisecond})
	const goroutines, rounds = 16, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7)) // fixed seed per goroutine
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
				release, err := p.Acquire(ctx)
				cancel()
				if err != nil {
					if !errors.Is(err, rag.ErrOverloaded) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("unexpected error: %v", err)
					}
					continue
				}
				mu.Lock()
				admitted++
				mu.Unlock()
				if s := p.Stats(); s.InFlight > 4 {
					t.Errorf("InFlight = %d exceeds the largest worker count 4", s.InFlight)
				}
				runtime.Gosched()
				release()
				release()
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			if err := p.Resize(admission.Config{Workers: 2 + i%3, QueueCapacity: 8, QueueTimeout: 2 * time.Millisecond}); err != nil {
				t.Error(err)
			}
			runtime.Gosched()
		}
	})
	wg.Wait()
	s := p.Stats()
	if s.InFlight != 0 || s.Queued != 0 {
		t.Fatalf("after churn: %+v; want nothing in flight or queued", s)
	}
	if s.Admitted != uint64(admitted) {
		t.Fatalf("Admitted = %d; callers saw %d successful acquires", s.Admitted, admitted)
	}
	if total := s.Admitted + s.Rejected + s.TimedOut + s.Cancelled; total != goroutines*rounds {
		t.Fatalf("admitted+rejected+timed out+cancelled = %d; want every one of %d acquires accounted for once (%+v)", total, goroutines*rounds, s)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	p := newPool(b, admission.DefaultConfig())
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			release, err := p.Acquire(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			release()
		}
	})
}

// fakeClock is a clock the test moves by hand, so service times are exact; its timers fire when
// it is moved past their deadline.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Timer is the pool's timer on c (admission.WithTimer).
func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t.ch, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := len(c.timers)
		c.timers = slices.DeleteFunc(c.timers, func(o *fakeTimer) bool { return o == t })
		return len(c.timers) < n
	}
}

// Advance moves the clock by d and fires the timers it passes; it returns how many fired.
func (c *fakeClock) Advance(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	fired := 0
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool {
		if t.at.After(c.now) {
			return false
		}
		t.ch <- c.now
		fired++
		return true
	})
	return fired
}

// options are the pool options that put it on c.
func (c *fakeClock) options() []admission.Option {
	return []admission.Option{admission.WithClock(c.Now), admission.WithTimer(c.Timer)}
}

// serve admits n requests, lets each hold its slot for service on the fake clock, and releases
// them: n service times of exactly service.
func serve(tb testing.TB, p *admission.Pool, clock *fakeClock, n int, service time.Duration) {
	tb.Helper()
	for range n {
		release := mustAcquire(tb, p)
		clock.Advance(service)
		release()
	}
}

// TestQueueTargetShedsOnArrival checks the queue sized from measured service time: with every
// worker busy, a request whose place in line times the mean service time over the workers
// exceeds the target is shed at once, and one that fits is queued.
func TestQueueTargetShedsOnArrival(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		workers   int
		service   time.Duration
		target    time.Duration
		queueable int // arrivals beyond the workers that are queued; the next one is shed
	}{
		// Each place in line costs service/workers: 100ms/2 = 50ms, so 2 places fit in 100ms.
		{name: "two workers", workers: 2, service: 100 * time.Millisecond, target: 100 * time.Millisecond, queueable: 2},
		{name: "one worker, target below one service time", workers: 1, service: 100 * time.Millisecond, target: 99 * time.Millisecond, queueable: 0},
		{name: "eight workers", workers: 8, service: 200 * time.Millisecond, target: 250 * time.Millisecond, queueable: 10},
		// Auto: half the mean service time, 100ms/4 = 25ms a place, so 2 places fit in 50ms.
		{name: "auto target", workers: 4, service: 100 * time.Millisecond, target: admission.AutoQueueTarget, queueable: 2},
		// Auto is at most MaxAutoQueueTarget: 10s/100 = 100ms a place, so 5 places fit in 500ms.
		{name: "auto target capped", workers: 100, service: 10 * time.Second, target: admission.AutoQueueTarget, queueable: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{now: time.Unix(1000, 0)}
			p, err := admission.NewPool(admission.Config{Workers: tt.workers, QueueCapacity: 1000, QueueTimeout: time.Minute, QueueTarget: tt.target},
				clock.options()...)
			if err != nil {
				t.Fatal(err)
			}
			serve(t, p, clock, 3, tt.service)
			if got := p.Stats().MeanService; got != tt.service {
				t.Fatalf("MeanService = %v after three services of %v", got, tt.service)
			}
			var releases []func()
			for range tt.workers {
				releases = append(releases, mustAcquire(t, p))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var waiting []<-chan acquired
			for i := range tt.queueable {
				waiting = append(waiting, acquireAsync(ctx, p))
				testwait.For(t, fmt.Sprintf("%d queued", i+1), queued(p, i+1))
			}
			_, err = p.Acquire(ctx)
			if !errors.Is(err, rag.ErrOverloaded) || !strings.Contains(err.Error(), "queue target") {
				t.Fatalf("arrival %d beyond the workers: %v; want ErrOverloaded naming the queue target", tt.queueable+1, err)
			}
			if s := p.Stats(); s.Rejected != 1 || s.Queued != tt.queueable {
				t.Fatalf("stats = %+v; want 1 rejected, %d queued", s, tt.queueable)
			}
			for _, release := range releases {
				release()
			}
			for _, ch := range waiting {
				got := <-ch
				if got.err != nil {
					t.Fatalf("queued request: %v", got.err)
				}
				got.release()
			}
		})
	}
}

// TestQueueTargetOffAndCold: without a measured service time (a cold pool) or with the target
// off, nothing is shed before the queue is full, as before.
func TestQueueTargetOffAndCold(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		target time.Duration
		warm   bool
	}{{"off", admission.QueueTargetOff, true}, {"cold", admission.AutoQueueTarget, false}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{now: time.Unix(1000, 0)}
			p, err := admission.NewPool(admission.Config{Workers: 1, QueueCapacity: 5, QueueTarget: tt.target}, clock.options()...)
			if err != nil {
				t.Fatal(err)
			}
			if tt.warm {
				serve(t, p, clock, 1, time.Second)
			}
			hold := mustAcquire(t, p)
			ctx, cancel := context.WithCancel(context.Background())
			var waiting []<-chan acquired
			for i := range 5 {
				waiting = append(waiting, acquireAsync(ctx, p))
				testwait.For(t, fmt.Sprintf("%d queued", i+1), queued(p, i+1))
			}
			if _, err := p.Acquire(ctx); !errors.Is(err, rag.ErrOverloaded) || !strings.Contains(err.Error(), "is full") {
				t.Fatalf("sixth waiter: %v; want the full-queue rejection", err)
			}
			cancel()
			for _, ch := range waiting {
				<-ch
			}
			hold()
		})
	}
}

// TestQueueTargetSimulated drives a pool in virtual time with Poisson arrivals at 1x, 3x and 10x
// the capacity of 8 workers with fixed 200ms service: sheds come on arrival, and
// the waits of admitted requests stay within the target, whatever the load. Without the target,
// at 10x, admitted requests would wait for the whole queue of 1024 (25 s of work).
func TestQueueTargetSimulated(t *testing.T) {
	t.Parallel()
	const workers, service = 8, 200 * time.Millisecond
	capacity := float64(workers) / service.Seconds() // 40 req/s
	for _, load := range []float64{1, 3, 10} {
		t.Run(fmt.Sprintf("%gx", load), func(t *testing.T) {
			t.Parallel()
			res := simulate(t, admission.Config{Workers: workers, QueueCapacity: 1024, QueueTimeout: 30 * time.Second, QueueTarget: admission.AutoQueueTarget},
				service, load*capacity, 4000)
			// Once the service time is known no admitted request waits longer than the target;
			// before that (the first service time) the line is not cut yet.
			if target := service / 2; res.meanWait > target || res.maxWaitWarm > target || res.maxWait > service {
				t.Errorf("at %gx admitted requests waited %v on average, %v at most after the first release, %v at most; want at most the %v target, and one service time before the first release",
					load, res.meanWait, res.maxWaitWarm, res.maxWait, target)
			}
			if load >= 3 && res.shed == 0 {
				t.Errorf("at %gx nothing was shed", load)
			}
			// At 10x the pool serves its capacity and sheds the rest: 9 in 10 arrivals.
			if load == 10 {
				if frac := float64(res.shed) / 4000; frac < 0.85 || frac > 0.95 {
					t.Errorf("at 10x %.3f of arrivals were shed; want about 0.9", frac)
				}
			}
			// Before the first request finishes there is no service time to predict from: the
			// line that builds meanwhile is cut at the first release, so no shed request waited
			// longer than one service time.
			if res.maxShedWait > service {
				t.Errorf("at %gx a shed request waited %v before its 503; want at most one service time", load, res.maxShedWait)
			}
			t.Logf("load %gx: %d of 4000 shed (longest wait before the 503 %v), admitted wait mean %v, max %v (%v after the first release)", load, res.shed, res.maxShedWait, res.meanWait, res.maxWait, res.maxWaitWarm)
		})
	}
}

type simResult struct {
	shed                                        int
	maxWait, maxWaitWarm, meanWait, maxShedWait time.Duration
}

// simulate is a discrete-event run of the pool on a fake clock: n Poisson arrivals at rate per
// second (fixed seed), each holding its slot for service once admitted. Events are processed in
// time order; a queued request's grant is observed by waiting for its goroutine.
func simulate(tb testing.TB, cfg admission.Config, service time.Duration, rate float64, n int) simResult {
	tb.Helper()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p, err := admission.NewPool(cfg, clock.options()...)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(42, 7))
	type running struct {
		end     time.Time
		release func()
	}
	warmAt := clock.Now().Add(service) // the first release: from then on the service time is known
	var (
		inService []running // admitted, sorted by end
		queue     []<-chan acquired
		queuedAt  []time.Time
		res       simResult
		totalWait time.Duration
		admitted  int
	)
	admit := func(release func(), at time.Time) {
		inService = append(inService, running{end: clock.Now().Add(service), release: release})
		wait := clock.Now().Sub(at)
		totalWait += wait
		res.maxWait = max(res.maxWait, wait)
		if at.After(warmAt) {
			res.maxWaitWarm = max(res.maxWaitWarm, wait)
		}
		admitted++
	}
	// collect receives the outcomes of pending queued requests, whichever they are.
	collect := func(pending int) {
		for pending > 0 {
			for i := 0; i < len(queue); i++ {
				select {
				case got := <-queue[i]:
					if got.err == nil {
						admit(got.release, queuedAt[i])
					} else if errors.Is(got.err, rag.ErrOverloaded) {
						res.shed++
						res.maxShedWait = max(res.maxShedWait, clock.Now().Sub(queuedAt[i]))
					} else {
						tb.Fatalf("queued request failed: %v", got.err)
					}
					queue, queuedAt = slices.Delete(queue, i, i+1), slices.Delete(queuedAt, i, i+1)
					i--
					pending--
				default:
				}
			}
			runtime.Gosched()
		}
	}
	// advance moves the clock to t; the waiters whose target or timeout passed leave the line.
	advance := func(t time.Time) { collect(clock.Advance(t.Sub(clock.Now()))) }
	finishUntil := func(t time.Time) {
		for len(inService) > 0 && !inService[0].end.After(t) {
			r := inService[0]
			inService = inService[1:]
			advance(r.end)
			r.release()
			// A release decides under the pool's lock which waiters are granted or shed
			// (stale ones at the head, those beyond the target at the tail); collect every
			// outcome it decided.
			collect(len(queue) - p.Stats().Queued)
		}
	}
	next := clock.Now()
	for range n {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		finishUntil(next)
		advance(next)
		if s := p.Stats(); s.InFlight < s.Workers && s.Queued == 0 {
			admit(mustAcquire(tb, p), next)
			continue
		}
		before := p.Stats()
		ch := acquireAsync(context.Background(), p)
		testwait.For(tb, "the arrival is queued or shed", func() bool {
			s := p.Stats()
			return s.Queued == before.Queued+1 || s.Rejected == before.Rejected+1
		})
		if p.Stats().Rejected == before.Rejected+1 {
			if got := <-ch; !errors.Is(got.err, rag.ErrOverloaded) {
				tb.Fatalf("shed arrival got %v", got.err)
			}
			res.shed++
			continue
		}
		queue, queuedAt = append(queue, ch), append(queuedAt, next)
	}
	finishUntil(next.Add(time.Hour))
	if admitted > 0 {
		res.meanWait = totalWait / time.Duration(admitted)
	}
	return res
}
