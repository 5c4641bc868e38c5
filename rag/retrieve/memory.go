// Package retrieve owns the vector indexes the pipeline searches. Memory is the embedded default:
// an exact, sharded, in-memory cosine index whose shards each wait a configurable latency law
// before answering, so that fanning a query out over shards shows the slowest-shard effect of a
// real distributed index rather than a constant sleep.
package retrieve

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// DefaultCollection is the collection name a Memory reports unless WithCollection sets another.
const DefaultCollection = "ragtail"

// defaultSeed seeds the shards' latency sources unless WithSeed sets another seed.
const defaultSeed uint64 = 0x5eed

type config struct {
	collection string
	law        latency.Law         // default law of every shard, and of shards added by Reshard
	shardLaws  map[int]latency.Law // per-shard overrides at construction
	seed       uint64
}

// Option configures NewMemory.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithCollection sets the collection name returned by Collection (default "ragtail").
func WithCollection(name string) Option {
	return optionFunc(func(c *config) { c.collection = name })
}

// WithLatency sets the latency law of every shard that WithShardLatency does not override, and
// of shards created later by Reshard.
func WithLatency(law latency.Law) Option {
	return optionFunc(func(c *config) { c.law = law })
}

// WithShardLatency sets the latency law of one shard, overriding WithLatency for it. NewMemory
// fails if shard is not below the shard count.
func WithShardLatency(shard int, law latency.Law) Option {
	return optionFunc(func(c *config) {
		if c.shardLaws == nil {
			c.shardLaws = make(map[int]latency.Law)
		}
		c.shardLaws[shard] = law
	})
}

// WithSeed seeds the shards' latency sources. Each shard gets its own seed derived from this one
// and its shard number, so runs with the same seed draw the same latencies per shard.
func WithSeed(seed uint64) Option {
	return optionFunc(func(c *config) { c.seed = seed })
}

// Memory is an exact, sharded, in-memory vector index using cosine similarity. Vectors are
// assigned to shards by an FNV-1a hash of their id, stored L2-normalised in one contiguous slab
// per shard, and searched exhaustively. Each shard waits a draw of its latency law before it
// searches, standing in for the network and remote index time of a real shard.
//
// A Memory is safe for concurrent use: searches, inserts, latency changes and Reshard may all
// run at once. A search that started before a Reshard completes against the shard layout it
// started with. A search scans its shard under a read lock, so an insert into that shard waits
// for the scans in progress (a few milliseconds per 100k vectors of 384 components).
type Memory struct {
	dim        int
	collection string
	seed       uint64
	defaultLaw atomic.Pointer[latency.Law]

	// writeMu orders structural changes: Add, AddBatch and SetShardLatency hold it shared,
	// Reshard holds it exclusively so that no insert or latency change lands in a shard layout
	// it has already copied. Searches never take it.
	writeMu sync.RWMutex
	layout  atomic.Pointer[[]*shard]
}

// shard is one partition of the index.
type shard struct {
	delay atomic.Pointer[latency.Delay]

	mu    sync.RWMutex
	ids   []string       // ids[i] owns vecs[i*dim : (i+1)*dim]
	vecs  []float32      // unit vectors, back to back
	index map[string]int // id -> position in ids
}

// NewMemory returns an empty index of vectors with dim components, split into shards shards.
func NewMemory(dim int, shards int, opts ...Option) (*Memory, error) {
	if dim <= 0 {
		return nil, fmt.Errorf("%w: dimension %d: want a positive number", rag.ErrInvalidRequest, dim)
	}
	if shards <= 0 {
		return nil, fmt.Errorf("%w: %d shards: want a positive number", rag.ErrInvalidRequest, shards)
	}
	cfg := config{collection: DefaultCollection, law: latency.Law{Kind: latency.LawNone}, seed: defaultSeed}
	for _, o := range opts {
		o.apply(&cfg)
	}
	for i := range cfg.shardLaws {
		if i < 0 || i >= shards {
			return nil, fmt.Errorf("%w: latency for shard %d: index has %d shards", rag.ErrInvalidRequest, i, shards)
		}
	}
	m := &Memory{dim: dim, collection: cfg.collection, seed: cfg.seed}
	m.defaultLaw.Store(&cfg.law)
	layout := make([]*shard, shards)
	for i := range layout {
		law, ok := cfg.shardLaws[i]
		if !ok {
			law = cfg.law
		}
		layout[i] = m.newShard(i, law, 0)
	}
	m.layout.Store(&layout)
	return m, nil
}

func (m *Memory) newShard(i int, law latency.Law, capacity int) *shard {
	s := &shard{
		ids:   make([]string, 0, capacity),
		vecs:  make([]float32, 0, capacity*m.dim),
		index: make(map[string]int, capacity),
	}
	s.delay.Store(latency.NewDelay(law, m.shardSeed(i)))
	return s
}

// shardSeed derives shard i's latency seed from the index seed (SplitMix64 finaliser).
func (m *Memory) shardSeed(i int) uint64 {
	z := m.seed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// shardOf returns the shard that owns id among n shards: FNV-1a (64 bit) of the id, modulo n.
// It is stable across processes, so an id always lands on the same shard for a given count.
func shardOf(id string, n int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return int(h % uint64(n))
}

// Collection returns the collection name, for span names and attributes.
func (m *Memory) Collection() string { return m.collection }

// Dimension returns the number of components of the vectors the index holds.
func (m *Memory) Dimension() int { return m.dim }

// Shards returns the current number of shards.
func (m *Memory) Shards() int { return len(*m.layout.Load()) }

// Len returns the number of vectors in the index.
func (m *Memory) Len() int {
	n := 0
	for _, s := range *m.layout.Load() {
		s.mu.RLock()
		n += len(s.ids)
		s.mu.RUnlock()
	}
	return n
}

// Add inserts vec under id, or replaces the vector already stored under id. The vector is
// L2-normalised on insert; a vector of the wrong dimension, a zero or non-finite vector and an
// empty id are rejected with an error matching rag.ErrInvalidRequest.
func (m *Memory) Add(id string, vec []float32) error {
	return m.AddBatch([]string{id}, [][]float32{vec})
}

// AddBatch inserts or replaces many vectors at once, locking each shard once. Either every
// vector is valid and all are inserted, or none is. If an id repeats, its last vector wins.
func (m *Memory) AddBatch(ids []string, vecs [][]float32) error {
	if len(ids) != len(vecs) {
		return fmt.Errorf("%w: add: %d ids but %d vectors", rag.ErrInvalidRequest, len(ids), len(vecs))
	}
	unit := make([]float32, len(vecs)*m.dim)
	for i, v := range vecs {
		if ids[i] == "" {
			return fmt.Errorf("%w: add vector %d: empty id", rag.ErrInvalidRequest, i)
		}
		if err := m.normalize(unit[i*m.dim:(i+1)*m.dim], v); err != nil {
			return fmt.Errorf("add %q: %w", ids[i], err)
		}
	}

	m.writeMu.RLock()
	defer m.writeMu.RUnlock()
	layout := *m.layout.Load()
	byShard := make([][]int, len(layout))
	for i, id := range ids {
		s := shardOf(id, len(layout))
		byShard[s] = append(byShard[s], i)
	}
	for s, members := range byShard {
		if len(members) == 0 {
			continue
		}
		sh := layout[s]
		sh.mu.Lock()
		for _, i := range members {
			sh.put(ids[i], unit[i*m.dim:(i+1)*m.dim])
		}
		sh.mu.Unlock()
	}
	return nil
}

// put stores a unit vector under id; the caller holds s.mu for writing.
func (s *shard) put(id string, unit []float32) {
	if pos, ok := s.index[id]; ok {
		copy(s.vecs[pos*len(unit):], unit)
		return
	}
	s.index[id] = len(s.ids)
	s.ids = append(s.ids, id)
	s.vecs = append(s.vecs, unit...)
}

// normalize writes src scaled to unit length into dst, which has m.dim components.
func (m *Memory) normalize(dst, src []float32) error {
	if len(src) != m.dim {
		return fmt.Errorf("%w: vector has %d components, index has %d", rag.ErrInvalidRequest, len(src), m.dim)
	}
	var sum float64
	for _, x := range src {
		sum += float64(x) * float64(x)
	}
	if sum == 0 || math.IsNaN(sum) || math.IsInf(sum, 0) {
		return fmt.Errorf("%w: vector has no direction (zero, NaN or infinite components)", rag.ErrInvalidRequest)
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range src {
		dst[i] = float32(float64(x) * inv)
	}
	return nil
}

// Search returns the k vectors of one shard most similar to vec (cosine similarity), best first,
// ties broken by id. It first waits a draw of the shard's latency law, returning the context's
// error, wrapped, if ctx ends during the wait. A shard number out of range or an invalid query
// vector returns an error matching rag.ErrInvalidRequest; k <= 0 returns no hits at once.
func (m *Memory) Search(ctx context.Context, shard int, vec []float32, k int) ([]rag.Hit, error) {
	return m.search(ctx, *m.layout.Load(), shard, vec, k)
}

// queryBufs holds the buffers searches normalize their query vector into: every shard's search
// needs one for as long as it scans.
var queryBufs = sync.Pool{New: func() any { return new([]float32) }}

func (m *Memory) search(ctx context.Context, layout []*shard, shard int, vec []float32, k int) ([]rag.Hit, error) {
	if shard < 0 || shard >= len(layout) {
		return nil, fmt.Errorf("search shard %d: %w: index has %d shards", shard, rag.ErrInvalidRequest, len(layout))
	}
	if k <= 0 {
		return nil, nil
	}
	qp := queryBufs.Get().(*[]float32)
	defer queryBufs.Put(qp)
	if cap(*qp) < m.dim {
		*qp = make([]float32, m.dim)
	}
	query := (*qp)[:m.dim]
	if err := m.normalize(query, vec); err != nil {
		return nil, fmt.Errorf("search shard %d: %w", shard, err)
	}
	s := layout[shard]
	if _, err := s.delay.Load().Wait(ctx); err != nil {
		return nil, fmt.Errorf("search shard %d: %w", shard, err)
	}
	return s.topK(query, k, shard), nil
}

// SearchAll searches every shard one after another, each through Search and so each paying its
// latency, and merges their hits into the global top k. It is meant for tools and tests; the
// pipeline drives the shards itself.
func (m *Memory) SearchAll(ctx context.Context, vec []float32, k int) ([]rag.Hit, error) {
	layout := *m.layout.Load()
	lists := make([][]rag.Hit, len(layout))
	for i := range layout {
		hits, err := m.search(ctx, layout, i, vec, k)
		if err != nil {
			return nil, err
		}
		lists[i] = hits
	}
	return MergeHits(k, lists...), nil
}

// SetShardLatency replaces the latency law of one shard. Searches already waiting keep the
// latency they drew. A shard number out of range returns an error matching rag.ErrInvalidRequest.
func (m *Memory) SetShardLatency(shard int, law latency.Law) error {
	m.writeMu.RLock()
	defer m.writeMu.RUnlock()
	layout := *m.layout.Load()
	if shard < 0 || shard >= len(layout) {
		return fmt.Errorf("set latency of shard %d: %w: index has %d shards", shard, rag.ErrInvalidRequest, len(layout))
	}
	layout[shard].delay.Store(latency.NewDelay(law, m.shardSeed(shard)))
	return nil
}

// SetLatency replaces the latency law of every shard, and the default law of shards that a later
// Reshard creates.
func (m *Memory) SetLatency(law latency.Law) {
	m.writeMu.RLock()
	defer m.writeMu.RUnlock()
	m.defaultLaw.Store(&law)
	for i, s := range *m.layout.Load() {
		s.delay.Store(latency.NewDelay(law, m.shardSeed(i)))
	}
}

// ShardLatency returns the latency law of one shard, or the "none" law if there is no such shard.
func (m *Memory) ShardLatency(shard int) latency.Law {
	layout := *m.layout.Load()
	if shard < 0 || shard >= len(layout) {
		return latency.Law{Kind: latency.LawNone}
	}
	return layout[shard].delay.Load().Law()
}

// Reshard redistributes every vector into n shards. Shards that exist both before and after keep
// their latency law (and its random stream); new shards get the default law (see WithLatency and
// SetLatency). Inserts and latency changes wait while it runs; searches do not, and those that
// started before it finish on the old layout.
func (m *Memory) Reshard(n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: reshard into %d shards: want a positive number", rag.ErrInvalidRequest, n)
	}
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	old := *m.layout.Load()
	if n == len(old) {
		return nil
	}

	// Count first so that every new slab is allocated once, at its final size.
	counts := make([]int, n)
	for _, s := range old {
		s.mu.RLock()
		for _, id := range s.ids {
			counts[shardOf(id, n)]++
		}
		s.mu.RUnlock()
	}
	defaultLaw := *m.defaultLaw.Load()
	layout := make([]*shard, n)
	for i := range layout {
		layout[i] = m.newShard(i, defaultLaw, counts[i])
		if i < len(old) {
			layout[i].delay.Store(old[i].delay.Load())
		}
	}
	for _, s := range old {
		s.mu.RLock()
		for pos, id := range s.ids {
			layout[shardOf(id, n)].put(id, s.vecs[pos*m.dim:(pos+1)*m.dim])
		}
		s.mu.RUnlock()
	}
	m.layout.Store(&layout)
	return nil
}

// DBSystem returns "ragtail.memory", the db.system.name of its spans.
func (m *Memory) DBSystem() string { return "ragtail.memory" }
