package shape

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

// The range of TraceWindow.Speedup.
const (
	MinTraceSpeedup = 1e-3
	MaxTraceSpeedup = 1e6
)

// TraceWindow selects and paces the replay of a trace.
type TraceWindow struct {
	// Start skips the requests before this offset of trace time.
	Start time.Duration
	// Length keeps the requests of this much trace time from Start (0: to the end).
	Length time.Duration
	// Speedup divides the trace's gaps: 2 replays twice as fast (default 1), from
	// MinTraceSpeedup to MaxTraceSpeedup, and the replay of the window may last a year at most.
	Speedup float64
}

// Trace returns the workload replaying a trace on its own timestamps: the requests of the
// window, each due at (At - Start) / Speedup, with InputTokens words of prompt and
// OutputTokens as max_tokens. A Mooncake request's prompt is its hash blocks' texts in order,
// the same 512 words for the same block id, so requests sharing a hash_ids prefix share a
// prompt prefix (and hit a server's prefix cache); other requests get text of their own,
// seeded by seed.
func Trace(reqs []dataset.TraceRequest, w TraceWindow, seed uint64) (loadgen.Workload, error) {
	if w.Speedup == 0 {
		w.Speedup = 1
	}
	if w.Start < 0 || w.Length < 0 || !(w.Speedup > 0) || math.IsInf(w.Speedup, 1) {
		return nil, fmt.Errorf("trace window: start (%v) and length (%v) must not be negative, speedup (%v) must be positive", w.Start, w.Length, w.Speedup)
	}
	if w.Speedup < MinTraceSpeedup || w.Speedup > MaxTraceSpeedup {
		return nil, fmt.Errorf("trace window: speedup %g is outside %g to %g: a thousand times slower or a million times faster at most", w.Speedup, MinTraceSpeedup, MaxTraceSpeedup)
	}
	lo, _ := slices.BinarySearchFunc(reqs, w.Start, func(r dataset.TraceRequest, t time.Duration) int { return cmp.Compare(r.At, t) })
	hi := len(reqs)
	if w.Length > 0 {
		hi, _ = slices.BinarySearchFunc(reqs, w.Start+w.Length, func(r dataset.TraceRequest, t time.Duration) int { return cmp.Compare(r.At, t) })
	}
	if lo >= hi {
		return nil, fmt.Errorf("trace window from %v for %v holds none of the trace's %d requests", w.Start, w.Length, len(reqs))
	}
	// Replayed, the window must fit in a time.Duration with room to spare: gaps divided by
	// 1e-300 became offsets past its range, and all but one request were lost without a word.
	if replay := float64(reqs[hi-1].At-w.Start) / w.Speedup; replay > float64(dataset.MaxTraceSpan) {
		return nil, fmt.Errorf("trace window: %v of trace time replayed at speedup %g lasts %.3g years; a year at most: raise --trace-speedup or shorten the window",
			reqs[hi-1].At-w.Start, w.Speedup, replay/float64(dataset.MaxTraceSpan))
	}
	return &trace{reqs: reqs[lo:hi], w: w, salt: mix(seed ^ streamPrompts)}, nil
}

type trace struct {
	reqs []dataset.TraceRequest
	w    TraceWindow
	salt uint64
	i    int
}

func (t *trace) Next() (loadgen.Item, bool) {
	if t.i >= len(t.reqs) {
		return loadgen.Item{}, false
	}
	r := &t.reqs[t.i]
	t.i++
	at := time.Duration(float64(r.At-t.w.Start) / t.w.Speedup)
	return loadgen.Item{At: at, Request: loadgen.Request{
		Messages:     []loadgen.Message{{Role: "user", Content: t.text(r, t.i)}},
		MaxTokens:    r.OutputTokens,
		PromptTokens: r.InputTokens,
	}}, true
}

// text builds a prompt of r.InputTokens words from 512-word blocks: r's hash ids, or blocks
// keyed by the request's position in the trace.
func (t *trace) text(r *dataset.TraceRequest, n int) string {
	var b strings.Builder
	b.Grow(r.InputTokens * 6)
	left := r.InputTokens
	for blk := 0; left > 0; blk++ {
		var key uint64
		if blk < len(r.HashIDs) {
			key = mix(uint64(r.HashIDs[blk])) // the same block id gives the same text, whatever the seed
		} else {
			key = mix(t.salt ^ uint64(n)<<20 ^ uint64(blk))
		}
		words := min(left, dataset.MooncakeBlockTokens)
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(syntheticText(nil, key, words, dataset.MooncakeBlockTokens))
		left -= words
	}
	return b.String()
}
