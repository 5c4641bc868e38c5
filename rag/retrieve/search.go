package retrieve

import (
	"cmp"
	"slices"

	"github.com/ragtail/ragtail/rag"
)

// candidate is a scored position in a shard.
type candidate struct {
	score float32
	pos   int
}

// topK scans the shard exhaustively and returns its k best hits for the unit vector query, best
// first. It keeps a bounded min-heap whose root is the worst of the best k seen so far, so most
// vectors cost one dot product and one comparison.
func (s *shard) topK(query []float32, k int, shardNo int) []rag.Hit {
	s.mu.RLock()
	defer s.mu.RUnlock()
	dim := len(query)
	n := len(s.ids)
	h := boundedHeap{ids: s.ids, items: make([]candidate, 0, min(k, n))}
	for pos := 0; pos < n; pos++ {
		off := pos * dim
		score := dot(query, s.vecs[off:off+dim:off+dim])
		if len(h.items) == k && score < h.items[0].score {
			continue // the common case once the heap is full: not among the best k
		}
		h.offer(candidate{score: score, pos: pos}, k)
	}
	hits := make([]rag.Hit, len(h.items))
	for i := len(hits) - 1; i >= 0; i-- {
		c := h.pop()
		hits[i] = rag.Hit{ChunkID: s.ids[c.pos], Score: c.score, Shard: shardNo}
	}
	return hits
}

// boundedHeap is a min-heap of at most k candidates ordered by rank: the root ranks lowest.
type boundedHeap struct {
	ids   []string
	items []candidate
}

// below reports whether a ranks below b: a lower score, or an equal score and a greater id.
func (h *boundedHeap) below(a, b candidate) bool {
	if a.score != b.score {
		return a.score < b.score
	}
	return h.ids[a.pos] > h.ids[b.pos]
}

// offer adds c if the heap holds fewer than k candidates or c ranks above the root.
func (h *boundedHeap) offer(c candidate, k int) {
	if len(h.items) < k {
		h.items = append(h.items, c)
		h.up(len(h.items) - 1)
		return
	}
	if h.below(h.items[0], c) {
		h.items[0] = c
		h.down(0)
	}
}

// pop removes and returns the lowest-ranked candidate.
func (h *boundedHeap) pop() candidate {
	root := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	if last > 0 {
		h.down(0)
	}
	return root
}

func (h *boundedHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.below(h.items[i], h.items[parent]) {
			return
		}
		h.items[i], h.items[parent] = h.items[parent], h.items[i]
		i = parent
	}
}

func (h *boundedHeap) down(i int) {
	n := len(h.items)
	for {
		lowest := i
		if l := 2*i + 1; l < n && h.below(h.items[l], h.items[lowest]) {
			lowest = l
		}
		if r := 2*i + 2; r < n && h.below(h.items[r], h.items[lowest]) {
			lowest = r
		}
		if lowest == i {
			return
		}
		h.items[i], h.items[lowest] = h.items[lowest], h.items[i]
		i = lowest
	}
}

// dot returns the dot product of a and b, which have the same length. The loop is unrolled by
// eight into four independent accumulators, which lets the CPU overlap the multiply-adds
// instead of waiting on one running sum.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x := a[i : i+8 : i+8]
		y := b[i : i+8 : i+8]
		s0 += x[0]*y[0] + x[4]*y[4]
		s1 += x[1]*y[1] + x[5]*y[5]
		s2 += x[2]*y[2] + x[6]*y[6]
		s3 += x[3]*y[3] + x[7]*y[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// MergeHits merges hit lists, from shards or from separate searches, into the k best hits, best
// first: higher score first, then lower chunk id, then lower shard. A chunk id that appears in
// several lists is kept once, with its best entry. The lists need not be sorted and are not
// modified. k <= 0 returns no hits.
func MergeHits(k int, lists ...[]rag.Hit) []rag.Hit {
	if k <= 0 {
		return nil
	}
	total := 0
	for _, l := range lists {
		total += len(l)
	}
	all := make([]rag.Hit, 0, total)
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortFunc(all, func(a, b rag.Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ChunkID, b.ChunkID); c != 0 {
			return c
		}
		return cmp.Compare(a.Shard, b.Shard)
	})
	// After sorting, duplicates of an id are adjacent only if their scores tie, so track ids.
	seen := make(map[string]struct{}, min(k, len(all)))
	merged := all[:0]
	for _, h := range all {
		if len(merged) == k {
			break
		}
		if _, dup := seen[h.ChunkID]; dup {
			continue
		}
		seen[h.ChunkID] = struct{}{}
		merged = append(merged, h)
	}
	return merged
}
