package loadgen

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// SegmentOf is one host's share of a schedule that several hosts send together: segment Index
// of Count, Index from 0.
type SegmentOf struct {
	Index, Count int
}

// ParseSegment parses "i/n" (i from 0 to n-1, as a Kubernetes Indexed Job's
// JOB_COMPLETION_INDEX).
func ParseSegment(s string) (SegmentOf, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return SegmentOf{}, fmt.Errorf("segment %q: want i/n, e.g. 0/4", s)
	}
	seg := SegmentOf{Index: i, Count: n}
	return seg, seg.Validate()
}

// Validate checks 0 <= Index < Count.
func (s SegmentOf) Validate() error {
	if s.Count < 1 || s.Index < 0 || s.Index >= s.Count {
		return errors.New("segment: want i/n with n >= 1 and 0 <= i < n")
	}
	return nil
}

func (s SegmentOf) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Owns reports whether the segment sends the item at position k of the full schedule: a
// session by its id, a lone request by its position, each hashed so that the shares are
// independent of the arrival process. An item goes to one segment exactly, and since the
// choice is independent of the arrival times, each share of a Poisson process is a Poisson
// process of 1/Count of its rate (thinning).
func (s SegmentOf) Owns(k int, item *Item) bool {
	if s.Count <= 1 {
		return true
	}
	var h uint64
	if item.Session != "" {
		f := fnv.New64a()
		_, _ = f.Write([]byte(item.Session))
		h = mix64(f.Sum64())
	} else {
		h = mix64(uint64(k) + 0x9e3779b97f4a7c15)
	}
	return h%uint64(s.Count) == uint64(s.Index)
}

// mix64 is SplitMix64's finaliser: every input bit moves every output bit.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Segment returns the share of w that segment s sends: every host builds the same seeded
// workload and keeps the items it owns, so the union of the Count segments is w exactly.
// limit, when positive, ends the schedule after that many items of the full workload intended
// at or after from (the --num-prompts of a single-host run, counted after its warmup
// duration), so that the segments together send what one host would.
func Segment(w Workload, s SegmentOf, limit int, from time.Duration) Workload {
	return &segmented{w: w, s: s, limit: limit, from: from}
}

type segmented struct {
	w       Workload
	s       SegmentOf
	limit   int
	from    time.Duration
	k       int // position in the full workload of the next item
	counted int // items of the full workload at or after from
}

func (g *segmented) Next() (Item, bool) {
	for g.limit <= 0 || g.counted < g.limit {
		item, ok := g.w.Next()
		if !ok {
			return Item{}, false
		}
		k := g.k
		g.k++
		if item.At >= g.from {
			g.counted++
		}
		if g.s.Owns(k, &item) {
			return item, true
		}
	}
	return Item{}, false
}
