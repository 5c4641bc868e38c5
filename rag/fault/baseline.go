package fault

import (
	"slices"
	"sync"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// maxBaselineKeys bounds how many stages and routes the injector keeps a baseline for, so that a
// caller passing raw URL paths instead of route patterns cannot grow memory without limit.
const maxBaselineKeys = 256

// baselineKey names what a baseline is the latency of: a stage, or a route when stage is "".
type baselineKey struct {
	stage rag.Stage
	route string
}

func keyFor(stage rag.Stage, route string) baselineKey {
	if stage != "" {
		return baselineKey{stage: stage}
	}
	return baselineKey{route: route}
}

// baselines holds one rolling window per stage or route.
type baselines struct {
	size int // observations per window

	mu      sync.RWMutex
	windows map[baselineKey]*window
}

func newBaselines(size int) *baselines {
	return &baselines{size: size, windows: make(map[baselineKey]*window)}
}

// observe adds d to the window of key, creating it unless there are too many already.
func (b *baselines) observe(key baselineKey, d time.Duration) {
	if d < 0 {
		return
	}
	b.mu.RLock()
	w := b.windows[key]
	b.mu.RUnlock()
	if w == nil {
		b.mu.Lock()
		if w = b.windows[key]; w == nil {
			if len(b.windows) >= maxBaselineKeys {
				b.mu.Unlock()
				return
			}
			w = &window{ring: make([]time.Duration, 0, b.size)}
			b.windows[key] = w
		}
		b.mu.Unlock()
	}
	w.add(d)
}

// median returns the rolling median of key's window and how many observations it holds.
func (b *baselines) median(key baselineKey) (time.Duration, int) {
	b.mu.RLock()
	w := b.windows[key]
	b.mu.RUnlock()
	if w == nil {
		return 0, 0
	}
	return w.median()
}

// window is a ring of the last observations of one stage or route, with its median cached
// until the next observation: a rule reads the median on every call, while sorting a hundred
// numbers costs about a microsecond.
type window struct {
	mu      sync.Mutex
	ring    []time.Duration // grows to cap, then wraps at next
	next    int
	dirty   bool
	cached  time.Duration
	scratch []time.Duration
}

func (w *window) add(d time.Duration) {
	w.mu.Lock()
	if len(w.ring) < cap(w.ring) {
		w.ring = append(w.ring, d)
	} else {
		w.ring[w.next] = d
		w.next = (w.next + 1) % len(w.ring)
	}
	w.dirty = true
	w.mu.Unlock()
}

func (w *window) median() (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.ring)
	if w.dirty {
		w.scratch = append(w.scratch[:0], w.ring...)
		slices.Sort(w.scratch)
		if n%2 == 1 {
			w.cached = w.scratch[n/2]
		} else {
			w.cached = w.scratch[n/2-1] + (w.scratch[n/2]-w.scratch[n/2-1])/2
		}
		w.dirty = false
	}
	return w.cached, n
}
