package admission_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
)

// adaptivePool is a pool of 256 workers with the adaptive limit on, on a fake clock, and no
// queue unless queue is given.
func adaptivePool(tb testing.TB, clock *fakeClock, queue int) *admission.Pool {
	tb.Helper()
	p, err := admission.NewPool(admission.Config{Workers: 256, QueueCapacity: queue, QueueTimeout: time.Minute,
		Adaptive: admission.Adaptive{Enabled: true}}, clock.options()...)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// window reports one window of requests that ran at slowdown times their unloaded latency of
// a second, a minute after the last: they started after any change the last window made.
func window(p *admission.Pool, clock *fakeClock, slowdown float64) {
	clock.Advance(time.Minute)
	for range 8 {
		p.Observe(time.Duration(slowdown*float64(time.Second)), time.Second)
	}
}

// holdAll takes every slot the limit gives, and one arrival more that the limit turns away:
// the limit held a request back.
func holdAll(tb testing.TB, p *admission.Pool) (release func()) {
	tb.Helper()
	var releases []func()
	for range p.Stats().Limit {
		releases = append(releases, mustAcquire(tb, p))
	}
	if _, err := p.Acquire(context.Background()); !errors.Is(err, rag.ErrOverloaded) || !strings.Contains(err.Error(), "adaptive concurrency limit") {
		tb.Fatalf("arrival beyond the limit of %d: %v; want a 503 naming the adaptive limit", p.Stats().Limit, err)
	}
	return func() {
		for _, r := range releases {
			r()
		}
	}
}

// TestAdaptiveLimitFollowsSlowdown drives the limit window by window: it starts at
// InitialLimit, shrinks by the gradient tolerance/slowdown (at most halving a window)
// whenever requests run slower than the tolerance, down to the minimum, and grows by half the
// gradient only while it holds arrivals back and requests run within the tolerance.
func TestAdaptiveLimitFollowsSlowdown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		slowdown []float64 // one window each
		hold     bool      // fill the limit before each window
		want     []int     // the limit after each window
	}{
		// Gradient 4/8 = 0.5: 20 -> 10 -> 5 -> 4 (the minimum).
		{name: "overload shrinks to the minimum", slowdown: []float64{8, 8, 8, 8}, want: []int{10, 5, 4, 4}},
		// A window at 40x moves no more than one at 8x: the gradient is at least 0.5.
		{name: "a step at most halves", slowdown: []float64{40}, want: []int{10}},
		// 4/5 = 0.8: 20 -> 16.
		{name: "just above the tolerance", slowdown: []float64{5}, want: []int{16}},
		// Nobody reached the limit: fast requests say nothing about a higher one.
		{name: "no growth while nobody waits", slowdown: []float64{1, 1, 1}, want: []int{20, 20, 20}},
		// Gradient 2 (capped), half a step: 20 -> 30 -> 45.
		{name: "growth while the limit holds requests back", slowdown: []float64{1, 1}, hold: true, want: []int{30, 45}},
		// 4/3.9 grows by less than one: it grows by one.
		{name: "growth of one at least", slowdown: []float64{3.9}, hold: true, want: []int{21}},
		// At the tolerance nothing moves.
		{name: "at the tolerance", slowdown: []float64{4, 4}, hold: true, want: []int{20, 20}},
		// Up to the workers and no further (the limit is kept as a fraction, so 151.9 x 1.5
		// is 227).
		{name: "at most the workers", slowdown: []float64{1, 1, 1, 1, 1, 1, 1}, hold: true, want: []int{30, 45, 67, 101, 151, 227, 256}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{now: time.Unix(1000, 0)}
			p := adaptivePool(t, clock, 0)
			if got := p.Stats().Limit; got != admission.InitialLimit {
				t.Fatalf("limit %d at start; want %d", got, admission.InitialLimit)
			}
			for i, s := range tt.slowdown {
				release := func() {}
				if tt.hold {
					release = holdAll(t, p)
				}
				window(p, clock, s)
				release()
				st := p.Stats()
				if st.Limit != tt.want[i] || math.Abs(st.Slowdown-s) > 1e-9 {
					t.Fatalf("window %d at %gx: limit %d, slowdown %g; want %d, %g", i+1, s, st.Limit, st.Slowdown, tt.want[i], s)
				}
			}
		})
	}
}

// TestAdaptiveLimitWindow: a window closes after 8 requests and 250 ms, whichever comes last,
// so that one slow request, or a burst of them in an instant, does not move the limit; and
// only requests that started under the limit in force count.
func TestAdaptiveLimitWindow(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p := adaptivePool(t, clock, 0)
	clock.Advance(time.Minute)
	for range 7 {
		p.Observe(4*time.Second, time.Second)
	}
	if st := p.Stats(); st.Limit != 20 || st.Slowdown != 0 {
		t.Fatalf("after 7 requests: %+v; want no window closed yet", st)
	}
	p.Observe(4*time.Second, time.Second)
	if st := p.Stats(); st.Limit != 20 || st.Slowdown != 4 {
		t.Fatalf("after 8 requests: %+v; want a window at 4x, at the tolerance: the limit unchanged", st)
	}
	for range 8 {
		p.Observe(10*time.Second, time.Second) // 8 requests, but within 250 ms of the last window
	}
	if st := p.Stats(); st.Limit != 20 || st.Slowdown != 4 {
		t.Fatalf("8 requests within 250 ms of the last window closed one: %+v", st)
	}
	clock.Advance(250 * time.Millisecond)
	p.Observe(10*time.Second, time.Second)
	if st := p.Stats(); st.Limit != 10 || st.Slowdown != 10 {
		t.Fatalf("9 requests over 250 ms: limit %d, slowdown %g; want 10, 10", st.Limit, st.Slowdown)
	}
	// Requests that started before the cut ran under the old limit: they do not count.
	clock.Advance(time.Minute)
	for range 20 {
		p.Observe(61*time.Second, time.Second)
	}
	if st := p.Stats(); st.Limit != 10 || st.Slowdown != 10 {
		t.Fatalf("requests admitted before the cut moved the limit: %+v", st)
	}
	for range 8 {
		p.Observe(20*time.Second, time.Second)
	}
	if st := p.Stats(); st.Limit != 5 || st.Slowdown != 20 {
		t.Fatalf("requests admitted after the cut: limit %d, slowdown %g; want 5, 20", st.Limit, st.Slowdown)
	}
}

// TestAdaptiveLimitGrowsOnlyWhenHeldThroughout: fast requests raise the limit only if the limit
// was already holding arrivals back when they started; those admitted before it filled up
// (the last ones of a light load, finishing as an overload begins) say nothing about it.
func TestAdaptiveLimitGrowsOnlyWhenHeldThroughout(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p := adaptivePool(t, clock, 0)
	clock.Advance(time.Minute)
	release := holdAll(t, p) // the limit holds arrivals back from now on
	defer release()
	clock.Advance(time.Second)
	for range 8 {
		p.Observe(2*time.Second, time.Second) // started a second before the limit filled
	}
	if st := p.Stats(); st.Limit != 20 || st.Slowdown != 2 {
		t.Fatalf("requests admitted before the limit filled: %+v; want the limit unchanged at 20", st)
	}
	if _, err := p.Acquire(context.Background()); !errors.Is(err, rag.ErrOverloaded) {
		t.Fatalf("arrival beyond the full limit: %v", err)
	}
	clock.Advance(time.Second)
	for range 8 {
		p.Observe(time.Second/2, time.Second/4) // started after it filled, at 2x
	}
	if st := p.Stats(); st.Limit != 30 {
		t.Fatalf("requests admitted while the limit held: limit %d; want 30", st.Limit)
	}
}

// TestAdaptiveLimitAdmission: the limit, not the workers, decides how many requests run; a
// request beyond it waits in the line and is admitted when the limit grows, and one that waits
// out the queue target is shed then, without a slot having freed.
func TestAdaptiveLimitAdmission(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p, err := admission.NewPool(admission.Config{Workers: 256, QueueCapacity: 10, QueueTimeout: time.Minute,
		QueueTarget: 2 * time.Second, Adaptive: admission.Adaptive{Enabled: true}}, clock.options()...)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, p, clock, 1, 10*time.Second) // a measured service time for the queue target
	var releases []func()
	for range 20 {
		releases = append(releases, mustAcquire(t, p))
	}
	waiter := acquireAsync(context.Background(), p)
	testwait.For(t, "a request queued behind the limit of 20", queued(p, 1))
	clock.Advance(time.Second)
	for range 8 {
		p.Observe(time.Second, time.Second) // fast, and the limit held one back: it grows
	}
	got := <-waiter
	if got.err != nil {
		t.Fatalf("queued request after the limit grew to %d: %v", p.Stats().Limit, got.err)
	}
	releases = append(releases, got.release)
	if st := p.Stats(); st.Limit != 30 || st.InFlight != 21 {
		t.Fatalf("stats %+v; want the limit at 30 and 21 running", st)
	}
	for range 9 {
		releases = append(releases, mustAcquire(t, p))
	}
	// Predicted wait 10 s / 30 slots = 333 ms, within the 2 s target: it queues, and nothing
	// frees a slot. Once it has waited the target it gets its 503.
	stale := acquireAsync(context.Background(), p)
	testwait.For(t, "a request queued behind the limit of 30", queued(p, 1))
	clock.Advance(1999 * time.Millisecond)
	select {
	case got := <-stale:
		t.Fatalf("the waiter left before the target: %v", got.err)
	default:
	}
	clock.Advance(time.Millisecond)
	if got := <-stale; !errors.Is(got.err, rag.ErrOverloaded) {
		t.Fatalf("waiter past the 2 s target: %v; want a 503", got.err)
	}
	if st := p.Stats(); st.Queued != 0 || st.Rejected != 1 || st.TimedOut != 0 {
		t.Fatalf("stats %+v; want the waiter shed (rejected, not timed out)", st)
	}
	for _, r := range releases {
		r()
	}
}

// TestAdaptiveLimitConfig: the limit is off without Adaptive.Enabled (Observe then does
// nothing and the workers are the limit); turning it on starts it at InitialLimit, at most the
// workers; its settings are validated.
func TestAdaptiveLimitConfig(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p, err := admission.NewPool(admission.Config{Workers: 64}, clock.options()...)
	if err != nil {
		t.Fatal(err)
	}
	window(p, clock, 50)
	if st := p.Stats(); st.Limit != 64 || st.Slowdown != 0 {
		t.Fatalf("limit off: %+v; want the 64 workers and no slowdown seen", st)
	}
	on := admission.Config{Workers: 64, Adaptive: admission.Adaptive{Enabled: true, Tolerance: 2, MinLimit: 10}}
	if err := p.Resize(on); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats().Limit; got != admission.InitialLimit {
		t.Fatalf("limit %d once on; want %d", got, admission.InitialLimit)
	}
	for range 5 {
		window(p, clock, 50)
	}
	if got := p.Stats().Limit; got != 10 {
		t.Fatalf("limit %d after overload; want the minimum of 10", got)
	}
	on.Workers = 6 // fewer workers than the minimum: the workers win
	if err := p.Resize(on); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats().Limit; got != 6 {
		t.Fatalf("limit %d with 6 workers; want 6", got)
	}
	on.Workers = 64 // and raising them again leaves the limit where it was
	if err := p.Resize(on); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats().Limit; got != 10 {
		t.Fatalf("limit %d with the workers back at 64; want the 10 it had reached", got)
	}
	on.Adaptive.MinLimit = 12 // a new minimum raises it
	if err := p.Resize(on); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats().Limit; got != 12 {
		t.Fatalf("limit %d after the minimum went to 12; want 12", got)
	}
	if c := p.Config().Adaptive; !c.Enabled || c.Tolerance != 2 || c.MinLimit != 12 {
		t.Fatalf("config %+v", c)
	}
	if c := admission.DefaultConfig().Adaptive; !c.Enabled {
		t.Fatal("the default config has the adaptive limit off")
	}
	if c := newPool(t, admission.DefaultConfig()).Config().Adaptive; c.Tolerance != admission.DefaultTolerance || c.MinLimit != admission.DefaultMinLimit {
		t.Fatalf("defaults filled in: %+v", c)
	}
	for _, tt := range []struct {
		a       admission.Adaptive
		wantErr string
	}{
		{admission.Adaptive{Enabled: true, Tolerance: 1}, "tolerance must be between 1.5 and 100"},
		{admission.Adaptive{Tolerance: 101}, "tolerance"},
		{admission.Adaptive{Tolerance: math.NaN()}, "tolerance"},
		{admission.Adaptive{MinLimit: -1}, "min_limit must be between 1 and 65536"},
		{admission.Adaptive{MinLimit: admission.MaxWorkers + 1}, "min_limit"},
	} {
		err := admission.Config{Workers: 4, Adaptive: tt.a}.Validate()
		if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Validate(%+v) = %v; want an invalid-request error containing %q", tt.a, err, tt.wantErr)
		}
	}
}
