package telemetry

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Ring is the in-process trace store: an sdktrace.SpanProcessor that groups ended spans by
// trace and keeps, in bounded memory, the most recent traces and, apart from them, the slowest
// traces since start (or since Reset). A trace is complete when a local root span ends (a span
// of the trace whose parent is not in this process: the HTTP server span, or the pipeline span
// when there is none); spans that end later (an async search cancelled after the response) join
// it while it is still kept. Several requests may share one W3C trace id (an agent or a gateway
// making several calls inside one trace, a retry): each is a local root, and every root's
// subtree is kept, grouped under the one trace (Trace.Roots). The ring holds only sampled spans,
// so with a ratio sampler it sees a sample of the traffic.
//
// Bounds: RingRecent recent traces, RingSlowest slow ones, RingMaxSpans spans per trace, and at
// most DefaultRingPending traces whose root has not ended yet (the oldest is dropped first). A
// Ring is safe for concurrent use.
type Ring struct {
	recentCap, slowCap, maxSpans, pendingCap int

	mu           sync.Mutex
	pending      map[trace.TraceID]*Trace // traces whose root has not ended: Spans only
	pendingOrder []trace.TraceID          // FIFO of pending ids, for eviction; may hold completed ids
	recent       []*Trace                 // circular, newest at recent[(next-1) % cap]
	next         int
	slow         slowHeap
	kept         map[trace.TraceID]*Trace // every trace in recent or slow
	stats        RingStats
}

// RingStats counts what a Ring has seen and dropped.
type RingStats struct {
	Traces         uint64 `json:"traces"`          // traces completed (local root ended)
	Spans          uint64 `json:"spans"`           // spans kept
	DroppedSpans   uint64 `json:"dropped_spans"`   // spans over the per-trace limit
	EvictedPending uint64 `json:"evicted_pending"` // incomplete traces dropped because too many were pending
}

// Trace is one complete trace held by the Ring. Its fields must not be changed.
type Trace struct {
	ID trace.TraceID
	// Root is the first local root that ended; Roots lists every local root kept, in the order
	// they ended (one per request made within the trace).
	Root  sdktrace.ReadOnlySpan
	Roots []sdktrace.ReadOnlySpan
	Spans []sdktrace.ReadOnlySpan // every kept span, roots included, in the order they ended
	// Duration is the longest local root's: the slowest request of the trace.
	Duration time.Duration
	Dropped  int // spans not kept because the trace had RingMaxSpans

	inRecent, inSlow bool
	firstRoot        [1]sdktrace.ReadOnlySpan            // Roots' backing array until a second root joins
	spanBuf          [pendingSpans]sdktrace.ReadOnlySpan // Spans' backing array until it outgrows it
}

// NewRing returns a Ring keeping recent traces, slowest traces apart from them, and at most
// maxSpans spans per trace. Non-positive values take the Default values.
func NewRing(recent, slowest, maxSpans int) *Ring {
	if recent <= 0 {
		recent = DefaultRingRecent
	}
	if slowest <= 0 {
		slowest = DefaultRingSlowest
	}
	if maxSpans <= 0 {
		maxSpans = DefaultRingMaxSpans
	}
	return &Ring{
		recentCap: recent, slowCap: slowest, maxSpans: maxSpans, pendingCap: DefaultRingPending,
		pending: make(map[trace.TraceID]*Trace),
		recent:  make([]*Trace, recent),
		kept:    make(map[trace.TraceID]*Trace, recent+slowest),
	}
}

var _ sdktrace.SpanProcessor = (*Ring)(nil)

// OnStart implements sdktrace.SpanProcessor; the ring looks at spans only when they end.
func (r *Ring) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it keeps the ended span s. A span of a trace still
// pending costs one map lookup and an append; a trace costs one allocation, its Trace with room
// for its first pendingSpans spans, which the trace keeps when its root ends.
func (r *Ring) OnEnd(s sdktrace.ReadOnlySpan) {
	sc := s.SpanContext()
	if !sc.IsSampled() {
		return
	}
	id := sc.TraceID()
	parent := s.Parent()
	isRoot := !parent.IsValid() || parent.IsRemote()

	r.mu.Lock()
	defer r.mu.Unlock()
	p, pending := r.pending[id]
	if !isRoot {
		if pending {
			if len(p.Spans) < r.maxSpans-1 { // keep room for the root
				p.Spans = append(p.Spans, s)
				r.stats.Spans++
			} else {
				p.Dropped++
				r.stats.DroppedSpans++
			}
			return
		}
		if t, ok := r.kept[id]; ok {
			// A straggler of a completed trace, or a span of a further request within it.
			if len(t.Spans) < r.maxSpans {
				t.Spans = append(t.Spans, s)
				r.stats.Spans++
			} else {
				t.Dropped++
				r.stats.DroppedSpans++
			}
			return
		}
		r.evictPending()
		p = newTrace(id)
		if r.maxSpans > 1 {
			p.Spans = append(p.Spans, s)
			r.stats.Spans++
		} else {
			p.Dropped++
			r.stats.DroppedSpans++
		}
		r.pending[id] = p
		r.pendingOrder = append(r.pendingOrder, id)
		return
	}
	var t *Trace
	if pending {
		delete(r.pending, id)
		t = p
	}
	r.endRoot(s, t)
}

// endRoot keeps the ended local root s with t, the trace holding the spans of its subtree that
// ended before it (nil for none). The caller holds r.mu.
func (r *Ring) endRoot(s sdktrace.ReadOnlySpan, t *Trace) {
	id := s.SpanContext().TraceID()
	r.stats.Traces++
	if kept, ok := r.kept[id]; ok {
		// Another request of a trace already kept: its subtree joins the trace.
		var spans []sdktrace.ReadOnlySpan
		if t != nil {
			spans = t.Spans
		}
		r.join(kept, s, spans)
		return
	}
	if t == nil {
		t = newTrace(id)
	}
	t.Root, t.Duration = s, s.EndTime().Sub(s.StartTime())
	t.firstRoot[0] = s
	t.Roots = t.firstRoot[:]
	t.Spans = append(t.Spans, s)
	r.stats.Spans++
	r.addRecent(t)
	r.addSlow(t)
	if t.inRecent || t.inSlow {
		r.kept[id] = t
	}
}

// pendingSpans is how many spans a Trace holds before its span slice needs an allocation of
// its own: a request of ragtail's pipeline makes 10 or 11.
const pendingSpans = 16

// newTrace returns an empty trace with room for pendingSpans spans.
func newTrace(id trace.TraceID) *Trace {
	t := &Trace{ID: id}
	t.Spans = t.spanBuf[:0]
	return t
}

// join adds a further local root of t, and the spans of its subtree that ended before it, to t,
// within the per-trace bound, and makes t the most recent trace.
func (r *Ring) join(t *Trace, root sdktrace.ReadOnlySpan, spans []sdktrace.ReadOnlySpan) {
	rootKept := false
	for i, s := range append(spans, root) {
		isRoot := i == len(spans)
		if len(t.Spans) >= r.maxSpans {
			t.Dropped++
			r.stats.DroppedSpans++
			if !isRoot {
				r.stats.Spans-- // counted when it was pending
			}
			continue
		}
		t.Spans = append(t.Spans, s)
		if isRoot {
			t.Roots = append(t.Roots, root)
			r.stats.Spans++
			rootKept = true
		}
	}
	if d := root.EndTime().Sub(root.StartTime()); rootKept && d > t.Duration {
		t.Duration = d
		if t.inSlow {
			heap.Fix(&r.slow, slices.Index(r.slow, t))
		}
	}
	if !t.inSlow {
		r.addSlow(t)
	}
	if t.inRecent {
		r.recent[slices.Index(r.recent, t)] = nil
		t.inRecent = false
	}
	r.addRecent(t)
	r.kept[t.ID] = t
}

// evictPending drops the oldest pending traces while there are too many.
func (r *Ring) evictPending() {
	for len(r.pending) >= r.pendingCap && len(r.pendingOrder) > 0 {
		id := r.pendingOrder[0]
		r.pendingOrder = r.pendingOrder[1:]
		if _, ok := r.pending[id]; ok {
			delete(r.pending, id)
			r.stats.EvictedPending++
		}
	}
	// The FIFO keeps ids of traces that completed; compact it when they dominate.
	if len(r.pendingOrder) > 2*r.pendingCap {
		live := r.pendingOrder[:0]
		for _, id := range r.pendingOrder {
			if _, ok := r.pending[id]; ok {
				live = append(live, id)
			}
		}
		r.pendingOrder = slices.Clip(live)
	}
}

func (r *Ring) addRecent(t *Trace) {
	if old := r.recent[r.next]; old != nil {
		old.inRecent = false
		r.release(old)
	}
	r.recent[r.next] = t
	t.inRecent = true
	r.next = (r.next + 1) % r.recentCap
}

func (r *Ring) addSlow(t *Trace) {
	if len(r.slow) < r.slowCap {
		heap.Push(&r.slow, t)
		t.inSlow = true
		return
	}
	if t.Duration <= r.slow[0].Duration {
		return
	}
	old := r.slow[0]
	r.slow[0] = t
	heap.Fix(&r.slow, 0)
	t.inSlow = true
	old.inSlow = false
	r.release(old)
}

// release forgets t once neither list holds it.
func (r *Ring) release(t *Trace) {
	if !t.inRecent && !t.inSlow && r.kept[t.ID] == t {
		delete(r.kept, t.ID)
	}
}

// Recent returns up to n of the most recent complete traces, newest first.
func (r *Ring) Recent(n int) []*Trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Trace, 0, min(n, r.recentCap))
	for i := 1; i <= r.recentCap && len(out) < n; i++ {
		if t := r.recent[(r.next-i+r.recentCap)%r.recentCap]; t != nil {
			out = append(out, t.snapshot())
		}
	}
	return out
}

// Slowest returns up to n of the slowest traces kept, slowest first.
func (r *Ring) Slowest(n int) []*Trace {
	r.mu.Lock()
	all := make([]*Trace, len(r.slow))
	for i, t := range r.slow {
		all[i] = t.snapshot()
	}
	r.mu.Unlock()
	slices.SortFunc(all, func(a, b *Trace) int {
		switch {
		case a.Duration > b.Duration:
			return -1
		case a.Duration < b.Duration:
			return 1
		}
		return a.Root.StartTime().Compare(b.Root.StartTime())
	})
	return all[:min(n, len(all))]
}

// Find returns the kept trace with id.
func (r *Ring) Find(id trace.TraceID) (*Trace, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.kept[id]
	if !ok {
		return nil, false
	}
	return t.snapshot(), true
}

// Stats returns the ring's counters.
func (r *Ring) Stats() RingStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Reset forgets every trace, so that Slowest covers only what follows (an experiment's next
// variant, say).
func (r *Ring) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.recent)
	r.next = 0
	clear(r.slow) // the array keeps what it points to, whatever the slice's length
	r.slow = r.slow[:0]
	clear(r.kept)
	clear(r.pending)
	r.pendingOrder = nil
}

// snapshot copies t so that a reader does not race with stragglers being appended.
func (t *Trace) snapshot() *Trace {
	c := *t
	c.Spans = slices.Clone(t.Spans)
	c.Roots = slices.Clone(t.Roots)
	return &c
}

// Shutdown implements sdktrace.SpanProcessor.
func (r *Ring) Shutdown(context.Context) error { return nil }

// ForceFlush implements sdktrace.SpanProcessor.
func (r *Ring) ForceFlush(context.Context) error { return nil }

// slowHeap is a min-heap of traces by duration, so the fastest of the slow ones is replaced.
type slowHeap []*Trace

func (h slowHeap) Len() int           { return len(h) }
func (h slowHeap) Less(i, j int) bool { return h[i].Duration < h[j].Duration }
func (h slowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slowHeap) Push(x any)        { *h = append(*h, x.(*Trace)) }
func (h *slowHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
