package loadgen

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
)

func TestMaxInFlightFor(t *testing.T) {
	tests := []struct {
		limit uint64
		known bool
		want  int
	}{
		{0, false, MaxInFlightCeiling},
		{1 << 20, true, MaxInFlightCeiling},
		{MaxInFlightCeiling + fdReserve, true, MaxInFlightCeiling},
		{1024, true, 1024 - fdReserve},
		{fdReserve, true, 1},
		{3, true, 1},
	}
	for _, tt := range tests {
		if got := maxInFlightFor(tt.limit, tt.known); got != tt.want {
			t.Errorf("maxInFlightFor(%d, %v) = %d, want %d", tt.limit, tt.known, got, tt.want)
		}
	}
	if n := DefaultMaxInFlight(); n < 1 || n > MaxInFlightCeiling {
		t.Errorf("DefaultMaxInFlight() = %d", n)
	}
}

// pulls counts the items a workload handed out.
type pulls struct {
	w Workload
	n atomic.Int64
}

func (p *pulls) Next() (Item, bool) {
	item, ok := p.w.Next()
	if ok {
		p.n.Add(1)
	}
	return item, ok
}

// gate is a Doer whose requests all wait until it opens.
type gate struct {
	open     chan struct{}
	inflight atomic.Int64
	peak     atomic.Int64
}

func (g *gate) Do(ctx context.Context, _ *Request, origin time.Time, rec *Record) {
	n := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	rec.Sent = time.Since(origin)
	select {
	case <-g.open:
		rec.Status = 200
	case <-ctx.Done():
		rec.ErrKind, rec.Err = ErrKindCanceled, ctx.Err().Error()
	}
	rec.End = time.Since(origin)
}

func TestCapBoundsTheBacklog(t *testing.T) {
	t.Parallel()
	// 200 requests all due at once against a target that answers nothing until the gate
	// opens, at most 3 in flight: 3 are sent, 3 wait for a slot, and the pacer holds the rest
	// back (it takes the next from the workload, then waits), so the run costs 7 items of
	// memory, not 200. Once the target answers, all 200 complete, late by their wait.
	g := &gate{open: make(chan struct{})}
	w := &pulls{w: &evenly{n: 200}}
	done := make(chan *Result)
	go func() { done <- run(t, context.Background(), Config{Workload: w, Client: g, Concurrency: 3}) }()
	testwait.For(t, "3 requests in flight", func() bool { return g.inflight.Load() == 3 })
	time.Sleep(20 * time.Millisecond) // room for the pacer to overshoot, which it must not
	if n := w.n.Load(); n > 7 {
		t.Errorf("%d items taken from the workload with 3 in flight and 3 waiting, want at most 7", n)
	}
	close(g.open)
	res := <-done
	if len(res.Records) != 200 || g.peak.Load() > 3 {
		t.Fatalf("%d records, peak %d in flight", len(res.Records), g.peak.Load())
	}
	for i, r := range res.Records {
		if !r.OK() {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if res.SlotWaits < 1 || res.Records[199].SendLag() < 20*time.Millisecond {
		t.Errorf("%d slot waits, last send lag %v: the wait for a slot is not in the send lag", res.SlotWaits, res.Records[199].SendLag())
	}
	if res.Config.InFlightCap != 0 {
		t.Errorf("in_flight_cap %d with a Concurrency given", res.Config.InFlightCap)
	}
}

func TestDefaultCap(t *testing.T) {
	t.Parallel()
	res := run(t, context.Background(), Config{Workload: &evenly{n: 5}, Client: &fakeDoer{}})
	if res.Config.InFlightCap != DefaultMaxInFlight() || res.Config.Concurrency != 0 || len(res.Records) != 5 {
		t.Errorf("in_flight_cap %d, concurrency %d, %d records; want the default cap %d",
			res.Config.InFlightCap, res.Config.Concurrency, len(res.Records), DefaultMaxInFlight())
	}
}

func TestStopWithAFullBacklog(t *testing.T) {
	t.Parallel()
	// 20 requests due at once, one slot, a target that never answers: a graceful stop leaves
	// one request in flight and one queued for the slot (both drained), and records the 18 the
	// pacer held back as not sent, so every due request leaves a record.
	g := &gate{open: make(chan struct{})}
	w := &pulls{w: &evenly{n: 20}}
	stop := make(chan struct{})
	done := make(chan *Result)
	go func() {
		done <- run(t, context.Background(), Config{Workload: w, Client: g, Concurrency: 1, Stop: stop,
			DrainTimeout: 50 * time.Millisecond})
	}()
	// The third item taken means the second was handed to a sender: the stop may then come
	// before or after the pacer waits on the backlog, and either way leaves the same records.
	testwait.For(t, "a request in flight and one queued", func() bool { return g.inflight.Load() == 1 && w.n.Load() >= 3 })
	close(stop)
	res := <-done
	if len(res.Records) != 20 || !res.Config.Interrupted {
		t.Fatalf("%d records (want 20), interrupted %v", len(res.Records), res.Config.Interrupted)
	}
	kinds := map[string]int{}
	for _, r := range res.Records {
		kinds[r.ErrKind]++
	}
	if kinds[ErrKindDrain] != 2 || kinds[ErrKindCanceled] != 18 {
		t.Errorf("error kinds %v, want 2 drained and 18 canceled", kinds)
	}
}

func TestMaxConcurrencyFor(t *testing.T) {
	tests := []struct {
		limit uint64
		known bool
		want  int
	}{
		{0, false, 1 << 40},
		{20000, true, 20000 - fdReserve},
		{fdReserve, true, 1},
		{1 << 62, true, 1 << 40},
	}
	for _, tt := range tests {
		if got := maxConcurrencyFor(tt.limit, tt.known); got != tt.want {
			t.Errorf("maxConcurrencyFor(%d, %v) = %d, want %d", tt.limit, tt.known, got, tt.want)
		}
	}
}
