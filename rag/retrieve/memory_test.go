package retrieve_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
)

var _ pipeline.Retriever = (*retrieve.Memory)(nil)

// dataset is a set of random vectors with their ids.
type dataset struct {
	ids  []string
	vecs [][]float32
}

// randomDataset returns n Gaussian vectors of dim components (uniform directions on the sphere),
// drawn from a source seeded by seed.
func randomDataset(tb testing.TB, seed uint64, n, dim int) dataset {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, seed+1))
	d := dataset{ids: make([]string, n), vecs: make([][]float32, n)}
	for i := range n {
		d.ids[i] = fmt.Sprintf("chunk-%06d", i)
		d.vecs[i] = randomVector(r, dim)
	}
	return d
}

func randomVector(r *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for j := range v {
		v[j] = float32(r.NormFloat64())
	}
	return v
}

// newIndex builds a Memory holding d.
func newIndex(tb testing.TB, dim, shards int, d dataset, opts ...retrieve.Option) *retrieve.Memory {
	tb.Helper()
	m, err := retrieve.NewMemory(dim, shards, opts...)
	if err != nil {
		tb.Fatalf("NewMemory(%d, %d): %v", dim, shards, err)
	}
	if err := m.AddBatch(d.ids, d.vecs); err != nil {
		tb.Fatalf("AddBatch: %v", err)
	}
	return m
}

// scored is a reference result computed in float64.
type scored struct {
	id    string
	score float64
}

// cosine is the reference similarity, in float64 and without the index's code.
func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// bruteForce ranks every vector of d against query by sorting all of them.
func bruteForce(d dataset, query []float32) []scored {
	all := make([]scored, len(d.ids))
	for i := range d.ids {
		all[i] = scored{id: d.ids[i], score: cosine(query, d.vecs[i])}
	}
	slices.SortFunc(all, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return all
}

// scoreEps bounds the difference between the index's float32 cosine and the float64 reference.
// Each product of unit-vector components is exact in float64 and rounded once in float32; over
// d = 384 terms the accumulated rounding error is at most about d * 2^-24 ≈ 2.3e-5 in the worst
// case and of order sqrt(d) * 2^-24 ≈ 1.2e-6 typically; the tests use d <= 64, where the worst case
// is 3.8e-6. 1e-5 covers that while staying far below the gap between neighbouring scores of
// random vectors (of order 1/n ≈ 5e-4 for the n = 2000 used here).
const scoreEps = 1e-5

// assertTopK checks that got is a correct top len(want) list: the i-th hit's score is the i-th
// best reference score, and its id truly has that score, so near-ties within rounding may swap
// ids but a wrong vector cannot slip in. It also checks order and uniqueness.
func assertTopK(tb testing.TB, got []rag.Hit, want []scored, reference map[string]float64) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("got %d hits, want %d", len(got), len(want))
	}
	seen := make(map[string]bool, len(got))
	for i, h := range got {
		if seen[h.ChunkID] {
			tb.Fatalf("hit %d: duplicate id %s", i, h.ChunkID)
		}
		seen[h.ChunkID] = true
		if math.Abs(float64(h.Score)-want[i].score) > scoreEps {
			tb.Fatalf("hit %d: score %.7f, want %.7f (%s)", i, h.Score, want[i].score, want[i].id)
		}
		if math.Abs(reference[h.ChunkID]-want[i].score) > scoreEps {
			tb.Fatalf("hit %d: id %s has reference score %.7f, want the %d-th best %.7f (%s)",
				i, h.ChunkID, reference[h.ChunkID], i, want[i].score, want[i].id)
		}
		if i > 0 {
			prev := got[i-1]
			if prev.Score < h.Score || (prev.Score == h.Score && prev.ChunkID > h.ChunkID) {
				tb.Fatalf("hits %d and %d out of order: %+v then %+v", i-1, i, prev, h)
			}
		}
	}
}

func TestSearchAllMatchesBruteForce(t *testing.T) {
	t.Parallel()
	const n, dim = 2000, 45 // 45 = 5*8 + 5: the unrolled loop and its tail
	data := randomDataset(t, 1, n, dim)
	queries := randomDataset(t, 2, 5, dim)
	tests := []struct {
		name   string
		shards int
		k      int
	}{
		{name: "one shard top1", shards: 1, k: 1},
		{name: "one shard top10", shards: 1, k: 10},
		{name: "three shards top10", shards: 3, k: 10},
		{name: "four shards top50", shards: 4, k: 50},
		{name: "seven shards top7", shards: 7, k: 7},
		{name: "k above size returns all", shards: 5, k: n + 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newIndex(t, dim, tt.shards, data)
			for qi, q := range queries.vecs {
				ranked := bruteForce(data, q)
				reference := make(map[string]float64, len(ranked))
				for _, s := range ranked {
					reference[s.id] = s.score
				}
				got, err := m.SearchAll(context.Background(), q, tt.k)
				if err != nil {
					t.Fatalf("query %d: SearchAll: %v", qi, err)
				}
				assertTopK(t, got, ranked[:min(tt.k, n)], reference)
			}
		})
	}
}

func TestShardedEqualsUnsharded(t *testing.T) {
	t.Parallel()
	const n, dim, k = 1500, 32, 20
	data := randomDataset(t, 3, n, dim)
	queries := randomDataset(t, 4, 8, dim)
	single := newIndex(t, dim, 1, data)
	for _, shards := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			m := newIndex(t, dim, shards, data)
			for qi, q := range queries.vecs {
				want, err := single.SearchAll(context.Background(), q, k)
				if err != nil {
					t.Fatal(err)
				}
				// The pipeline's way: search each shard, then merge.
				lists := make([][]rag.Hit, m.Shards())
				for s := range m.Shards() {
					if lists[s], err = m.Search(context.Background(), s, q, k); err != nil {
						t.Fatal(err)
					}
					for _, h := range lists[s] {
						if h.Shard != s {
							t.Fatalf("shard %d returned a hit marked shard %d", s, h.Shard)
						}
					}
				}
				got := retrieve.MergeHits(k, lists...)
				if len(got) != len(want) {
					t.Fatalf("query %d: %d hits, want %d", qi, len(got), len(want))
				}
				for i := range got {
					// Same stored vectors, same arithmetic: scores are bit-identical.
					if got[i].ChunkID != want[i].ChunkID || got[i].Score != want[i].Score {
						t.Fatalf("query %d hit %d: %+v, unsharded %+v", qi, i, got[i], want[i])
					}
				}
			}
		})
	}
}

func TestAddSameIDReplaces(t *testing.T) {
	t.Parallel()
	m, err := retrieve.NewMemory(3, 4)
	if err != nil {
		t.Fatal(err)
	}
	mustAdd := func(id string, v ...float32) {
		t.Helper()
		if err := m.Add(id, v); err != nil {
			t.Fatalf("Add(%s): %v", id, err)
		}
	}
	mustAdd("a", 1, 0, 0)
	mustAdd("b", 0, 1, 0)
	mustAdd("a", 0, 0, 5) // replaces a, not a second a
	mustAdd("a", 0, 0, 5) // idempotent
	if got := m.Len(); got != 2 {
		t.Fatalf("Len = %d after re-adding a, want 2", got)
	}
	hits, err := m.SearchAll(context.Background(), []float32{0, 0, 1}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 || hits[0].ChunkID != "a" || math.Abs(float64(hits[0].Score)-1) > 1e-6 {
		t.Fatalf("hits = %+v, want a first with score 1 (its replacement vector)", hits)
	}
	if err := m.AddBatch([]string{"c", "c"}, [][]float32{{1, 0, 0}, {0, 1, 0}}); err != nil {
		t.Fatal(err)
	}
	hits, err = m.SearchAll(context.Background(), []float32{0, 1, 0}, 2)
	if err != nil {
		t.Fatal(err)
	}
	// c's last vector equals b's, so they tie at 1 and the tie goes to the lower id.
	want := []string{"b", "c"}
	if m.Len() != 3 || len(hits) != 2 || hits[0].ChunkID != want[0] || hits[1].ChunkID != want[1] || hits[1].Score < 0.9999 {
		t.Fatalf("after a batch repeating c: Len %d, hits %+v; want 3 vectors and hits %v at score 1", m.Len(), hits, want)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	m, err := retrieve.NewMemory(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Add("x", []float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{name: "new zero dimension", call: func() error { _, err := retrieve.NewMemory(0, 1); return err }},
		{name: "new zero shards", call: func() error { _, err := retrieve.NewMemory(4, 0); return err }},
		{name: "new shard latency out of range", call: func() error {
			_, err := retrieve.NewMemory(4, 2, retrieve.WithShardLatency(2, latency.Fixed(time.Millisecond)))
			return err
		}},
		{name: "add short vector", call: func() error { return m.Add("y", []float32{1, 2, 3}) }},
		{name: "add long vector", call: func() error { return m.Add("y", []float32{1, 2, 3, 4, 5}) }},
		{name: "add zero vector", call: func() error { return m.Add("y", make([]float32, 4)) }},
		{name: "add NaN vector", call: func() error { return m.Add("y", []float32{float32(math.NaN()), 0, 0, 1}) }},
		{name: "add empty id", call: func() error { return m.Add("", []float32{1, 0, 0, 0}) }},
		{name: "batch length mismatch", call: func() error { return m.AddBatch([]string{"y"}, nil) }},
		{name: "batch one bad vector", call: func() error {
			return m.AddBatch([]string{"y", "z"}, [][]float32{{1, 0, 0, 0}, {1, 0}})
		}},
		{name: "search wrong dimension", call: func() error { _, err := m.Search(ctx, 0, []float32{1, 0}, 3); return err }},
		{name: "search zero vector", call: func() error { _, err := m.Search(ctx, 0, make([]float32, 4), 3); return err }},
		{name: "search negative shard", call: func() error { _, err := m.Search(ctx, -1, []float32{1, 0, 0, 0}, 3); return err }},
		{name: "search shard past end", call: func() error { _, err := m.Search(ctx, 2, []float32{1, 0, 0, 0}, 3); return err }},
		{name: "search all wrong dimension", call: func() error { _, err := m.SearchAll(ctx, []float32{1}, 3); return err }},
		{name: "set latency of missing shard", call: func() error { return m.SetShardLatency(5, latency.Fixed(time.Millisecond)) }},
		{name: "reshard to zero", call: func() error { return m.Reshard(0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("error = %v, want one matching rag.ErrInvalidRequest", err)
			}
		})
	}
	if got := m.Len(); got != 1 {
		t.Fatalf("Len = %d after rejected inserts, want 1 (a failed batch inserts nothing)", got)
	}
	for _, k := range []int{0, -3} {
		hits, err := m.Search(ctx, 0, []float32{1, 0, 0, 0}, k)
		if err != nil || len(hits) != 0 {
			t.Fatalf("Search with k=%d = %v, %v; want no hits and no error", k, hits, err)
		}
	}
}

func TestSearchCancelledDuringLatency(t *testing.T) {
	t.Parallel()
	const law = 10 * time.Second
	m, err := retrieve.NewMemory(2, 2, retrieve.WithLatency(latency.Fixed(law)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Add("a", []float32{1, 0}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(20*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	_, err = m.Search(ctx, 1, []float32{1, 0}, 3)
	elapsed := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	// The bound only has to separate "returned on cancel" from "waited out the law".
	if elapsed >= law/2 {
		t.Fatalf("Search returned after %v, want it to return on cancel, well before the %v law", elapsed, law)
	}
}

func TestShardLatencyApplied(t *testing.T) {
	t.Parallel()
	const wait = 20 * time.Millisecond
	query := []float32{1, 0}
	tests := []struct {
		name  string
		opts  []retrieve.Option
		set   func(m *retrieve.Memory) error
		shard int
	}{
		{name: "option on one shard", opts: []retrieve.Option{retrieve.WithShardLatency(1, latency.Fixed(wait))}, shard: 1},
		{name: "option on all shards", opts: []retrieve.Option{retrieve.WithLatency(latency.Fixed(wait))}, shard: 2},
		{name: "set at runtime", set: func(m *retrieve.Memory) error { return m.SetShardLatency(0, latency.Fixed(wait)) }, shard: 0},
		{name: "set all at runtime", set: func(m *retrieve.Memory) error { m.SetLatency(latency.Fixed(wait)); return nil }, shard: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := retrieve.NewMemory(2, 3, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tt.set != nil {
				if err := tt.set(m); err != nil {
					t.Fatal(err)
				}
			}
			if got := m.ShardLatency(tt.shard); got != latency.Fixed(wait) {
				t.Fatalf("ShardLatency(%d) = %v, want %v", tt.shard, got, latency.Fixed(wait))
			}
			start := time.Now()
			if _, err := m.Search(context.Background(), tt.shard, query, 1); err != nil {
				t.Fatal(err)
			}
			if elapsed := time.Since(start); elapsed < wait {
				t.Fatalf("Search of shard %d took %v, want at least its %v latency", tt.shard, elapsed, wait)
			}
		})
	}
	m, err := retrieve.NewMemory(2, 2, retrieve.WithShardLatency(1, latency.Fixed(wait)))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ShardLatency(0); got.Kind != latency.LawNone {
		t.Fatalf("ShardLatency(0) = %v, want none: WithShardLatency must touch only its shard", got)
	}
}

func TestReshardKeepsVectors(t *testing.T) {
	t.Parallel()
	const n, dim = 600, 16
	data := randomDataset(t, 5, n, dim)
	slow := latency.Fixed(7 * time.Millisecond)
	base := latency.Fixed(time.Microsecond)
	tests := []struct {
		name     string
		from, to int
	}{
		{name: "grow 3 to 5", from: 3, to: 5},
		{name: "shrink 5 to 2", from: 5, to: 2},
		{name: "collapse 4 to 1", from: 4, to: 1},
		{name: "same count", from: 3, to: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newIndex(t, dim, tt.from, data,
				retrieve.WithLatency(base), retrieve.WithShardLatency(0, slow))
			if err := m.Reshard(tt.to); err != nil {
				t.Fatal(err)
			}
			if m.Shards() != tt.to || m.Len() != n {
				t.Fatalf("after Reshard(%d): %d shards, %d vectors; want %d and %d", tt.to, m.Shards(), m.Len(), tt.to, n)
			}
			for i := 0; i < n; i += 7 {
				hits, err := m.SearchAll(context.Background(), data.vecs[i], 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(hits) != 1 || hits[0].ChunkID != data.ids[i] || hits[0].Score < 0.9999 {
					t.Fatalf("own vector of %s finds %+v, want itself with score 1", data.ids[i], hits)
				}
			}
			if got := m.ShardLatency(0); got != slow {
				t.Fatalf("shard 0 latency = %v after reshard, want its own %v kept", got, slow)
			}
			for s := 1; s < tt.to; s++ {
				if got := m.ShardLatency(s); got != base {
					t.Fatalf("shard %d latency = %v, want the default %v", s, got, base)
				}
			}
		})
	}
}

// TestConcurrentUse runs searches, inserts, latency changes and reshards at once; run with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	const dim = 8
	data := randomDataset(t, 6, 400, dim)
	m := newIndex(t, dim, 3, data)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range 200 {
				shards := m.Shards()
				// A reshard may shrink the index between Shards and Search; that is the one
				// error allowed here.
				_, err := m.Search(ctx, r.IntN(shards), randomVector(r, dim), 5)
				if err != nil && !errors.Is(err, rag.ErrInvalidRequest) {
					errs <- err
					return
				}
				if _, err := m.SearchAll(ctx, randomVector(r, dim), 3); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(8, 9))
		for i := range 300 {
			if err := m.Add(fmt.Sprintf("new-%d", i%50), randomVector(r, dim)); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() {
		for i := range 100 {
			_ = m.SetShardLatency(i%2, latency.Fixed(time.Duration(i%3)*time.Microsecond))
			_ = m.ShardLatency(i % 4)
		}
	})
	wg.Go(func() {
		for i := range 6 {
			if err := m.Reshard(2 + i%3); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := m.Len(), len(data.ids)+50; got != want {
		t.Fatalf("Len = %d after concurrent use, want %d (no vector lost or duplicated)", got, want)
	}
}

func TestMergeHits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		k     int
		lists [][]rag.Hit
		want  []rag.Hit
	}{
		{
			name: "global order across shards",
			k:    3,
			lists: [][]rag.Hit{
				{{ChunkID: "a", Score: 0.9, Shard: 0}, {ChunkID: "b", Score: 0.5, Shard: 0}},
				{{ChunkID: "c", Score: 0.7, Shard: 1}, {ChunkID: "d", Score: 0.6, Shard: 1}},
			},
			want: []rag.Hit{{ChunkID: "a", Score: 0.9, Shard: 0}, {ChunkID: "c", Score: 0.7, Shard: 1}, {ChunkID: "d", Score: 0.6, Shard: 1}},
		},
		{
			name:  "ties broken by id",
			k:     2,
			lists: [][]rag.Hit{{{ChunkID: "z", Score: 0.5}}, {{ChunkID: "m", Score: 0.5}}, {{ChunkID: "q", Score: 0.5}}},
			want:  []rag.Hit{{ChunkID: "m", Score: 0.5}, {ChunkID: "q", Score: 0.5}},
		},
		{
			name:  "duplicate id kept once with best score",
			k:     5,
			lists: [][]rag.Hit{{{ChunkID: "a", Score: 0.3, Shard: 0}, {ChunkID: "b", Score: 0.2}}, {{ChunkID: "a", Score: 0.8, Shard: 2}}},
			want:  []rag.Hit{{ChunkID: "a", Score: 0.8, Shard: 2}, {ChunkID: "b", Score: 0.2}},
		},
		{
			name:  "unsorted input",
			k:     2,
			lists: [][]rag.Hit{{{ChunkID: "a", Score: 0.1}, {ChunkID: "b", Score: 0.9}, {ChunkID: "c", Score: 0.5}}},
			want:  []rag.Hit{{ChunkID: "b", Score: 0.9}, {ChunkID: "c", Score: 0.5}},
		},
		{name: "k zero", k: 0, lists: [][]rag.Hit{{{ChunkID: "a", Score: 1}}}, want: nil},
		{name: "no lists", k: 3, want: []rag.Hit{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := fmt.Sprint(tt.lists)
			got := retrieve.MergeHits(tt.k, tt.lists...)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("MergeHits = %+v, want %+v", got, tt.want)
			}
			if after := fmt.Sprint(tt.lists); after != before {
				t.Fatalf("MergeHits modified its input: %s, was %s", after, before)
			}
		})
	}
}

func TestTiesBrokenByID(t *testing.T) {
	t.Parallel()
	// Ten identical vectors inserted in scrambled order, plus a worse one: every k-subset of the
	// ties scores the same, so only the id rule decides which ones come back.
	ids := []string{"t7", "t2", "t9", "t0", "t5", "t3", "t8", "t1", "t6", "t4", "worse"}
	vecs := make([][]float32, len(ids))
	for i := range vecs {
		vecs[i] = []float32{1, 1}
	}
	vecs[len(vecs)-1] = []float32{1, 0}
	for _, shards := range []int{1, 3} {
		for _, k := range []int{1, 3, 10} {
			t.Run(fmt.Sprintf("shards=%d k=%d", shards, k), func(t *testing.T) {
				m := newIndex(t, 2, shards, dataset{ids: ids, vecs: vecs})
				hits, err := m.SearchAll(context.Background(), []float32{1, 1}, k)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]string, len(hits))
				for i, h := range hits {
					got[i] = h.ChunkID
				}
				want := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"}[:k]
				if !slices.Equal(got, want) {
					t.Fatalf("hits %v, want %v", got, want)
				}
			})
		}
	}
}
