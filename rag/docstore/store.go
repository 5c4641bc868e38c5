// Package docstore owns chunk payloads: the text the pipeline fetches by id after retrieval.
// Store is the embedded default: an in-memory backing map that charges a configurable latency
// law on every lookup, fronted by an LRU cache and a Bloom-filter guard of the ids that exist.
//
// The latency is paid on every trip to the backing store, including trips for ids that do not
// exist, and misses are not cached. Without the Bloom guard, a stream of absent ids therefore
// goes to the store every time (cache penetration); with it, almost all of them are answered at
// once. Both behaviours are deliberate, so that the pitfall and its fix can be reproduced.
package docstore

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// Defaults of New.
const (
	// DefaultCacheSize is the number of chunks the LRU cache holds unless WithCache says otherwise.
	DefaultCacheSize = 1024
	// DefaultBloomFalsePositiveRate is the Bloom guard's target false-positive rate unless
	// WithBloom says otherwise.
	DefaultBloomFalsePositiveRate = 0.01
)

// minBloomCapacity is the fewest ids a Bloom filter is sized for, so that a store that starts
// empty or tiny does not rebuild its filter on almost every Put.
const minBloomCapacity = 64

// defaultSeed seeds the fetch latency source unless WithSeed sets another seed.
const defaultSeed uint64 = 0xd0c5

// Result says how a lookup was answered. Its values are the result label of the
// rag_cache_requests_total metric.
type Result string

// The ways a lookup can be answered.
const (
	// ResultHit means the chunk came from the cache, without touching the backing store.
	ResultHit Result = "hit"
	// ResultMiss means the lookup went to the backing store and paid its latency, whether or not
	// the id existed there.
	ResultMiss Result = "miss"
	// ResultBlocked means the Bloom guard ruled the id out: rag.ErrNotFound at once, no cache or
	// store lookup.
	ResultBlocked Result = "blocked"
)

type config struct {
	fetchLaw     latency.Law
	cacheSize    int
	bloomEnabled bool
	bloomRate    float64
	seed         uint64
	rebuildEvery time.Duration
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithFetchLatency sets the latency law of the backing store, paid on every lookup that reaches
// it: each cache miss, including misses for ids that do not exist.
func WithFetchLatency(law latency.Law) Option {
	return optionFunc(func(c *config) { c.fetchLaw = law })
}

// WithCache sets the LRU cache's capacity in chunks (default DefaultCacheSize). Zero or a
// negative size disables the cache.
func WithCache(size int) Option {
	return optionFunc(func(c *config) { c.cacheSize = max(size, 0) })
}

// WithBloom turns the Bloom guard on with the given target false-positive rate (it is on by
// default at DefaultBloomFalsePositiveRate). A rate outside (0, 1) selects the default rate.
func WithBloom(falsePositiveRate float64) Option {
	return optionFunc(func(c *config) {
		c.bloomEnabled = true
		if validRate(falsePositiveRate) {
			c.bloomRate = falsePositiveRate
		} else {
			c.bloomRate = DefaultBloomFalsePositiveRate
		}
	})
}

// WithoutBloom turns the Bloom guard off, so every cache miss goes to the backing store.
func WithoutBloom() Option {
	return optionFunc(func(c *config) { c.bloomEnabled = false })
}

// WithSeed seeds the fetch latency's random source.
func WithSeed(seed uint64) Option {
	return optionFunc(func(c *config) { c.seed = seed })
}

// WithBloomRebuildEvery rebuilds the Bloom filter every d in a background goroutine, so that
// deleted ids stop passing the guard without an explicit RebuildBloom. Close stops it. Zero or
// a negative d, the default, means no periodic rebuild.
func WithBloomRebuildEvery(d time.Duration) Option {
	return optionFunc(func(c *config) { c.rebuildEvery = d })
}

func validRate(r float64) bool { return r > 0 && r < 1 && !math.IsNaN(r) }

// Store is an in-memory chunk store with a simulated backing-store latency, an LRU cache and a
// Bloom-filter guard. Lookups take, in order: the guard (an id it rules out returns
// rag.ErrNotFound at once), the cache (a hit returns at once), then the backing store (pay the
// latency, look up; a found chunk enters the cache, an absent id is not cached).
//
// A Store is safe for concurrent use; every method may run concurrently with lookups.
type Store struct {
	seed  uint64
	delay atomic.Pointer[latency.Delay]

	// mu guards the backing map, the filter and its settings, and which cache is in use. Lookups
	// hold it shared; the cache is then used under its own lock. Store-side cache inserts
	// happen under the shared lock and Put and Delete change the cache under the exclusive
	// lock, so a lookup that read an old payload cannot put it in the cache after a Put.
	mu           sync.RWMutex
	chunks       map[string]rag.Chunk
	filter       *bloom.BloomFilter // nil when the guard is off
	bloomEnabled bool
	bloomRate    float64
	bloomCap     int // ids the filter was sized for
	bloomLoad    int // distinct ids added to the filter since it was built
	cache        *lru.Cache[string, rag.Chunk]
	cacheSize    int

	hits, misses, blocked      atomic.Uint64
	storeLookups, storeMissing atomic.Uint64

	stop      chan struct{}
	closeOnce sync.Once
	done      sync.WaitGroup
}

// Stats is a snapshot of a Store's counters and settings.
type Stats struct {
	Hits                uint64 // lookups answered by the cache
	Misses              uint64 // lookups that went to the backing store (cache misses)
	Blocked             uint64 // lookups the Bloom guard answered with not found
	StoreLookups        uint64 // backing-store lookups completed, each having paid the latency
	StoreMissingLookups uint64 // those of StoreLookups whose id did not exist

	CacheSize              int     // cache capacity in chunks; 0 when the cache is off
	CacheLen               int     // chunks in the cache now
	BloomEnabled           bool    // whether the Bloom guard is on
	BloomFalsePositiveRate float64 // the guard's configured target false-positive rate
}

// New returns a store holding chunks. A later chunk with the same id replaces an earlier one;
// chunks with an empty id are skipped. Call Close when done if WithBloomRebuildEvery is used.
func New(chunks []rag.Chunk, opts ...Option) *Store {
	cfg := config{
		fetchLaw:     latency.Law{Kind: latency.LawNone},
		cacheSize:    DefaultCacheSize,
		bloomEnabled: true,
		bloomRate:    DefaultBloomFalsePositiveRate,
		seed:         defaultSeed,
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	s := &Store{
		seed:         cfg.seed,
		chunks:       make(map[string]rag.Chunk, len(chunks)),
		bloomEnabled: cfg.bloomEnabled,
		bloomRate:    cfg.bloomRate,
		stop:         make(chan struct{}),
	}
	s.delay.Store(latency.NewDelay(cfg.fetchLaw, cfg.seed))
	for _, c := range chunks {
		if c.ID != "" {
			s.chunks[c.ID] = c
		}
	}
	s.setCacheLocked(cfg.cacheSize)
	if s.bloomEnabled {
		s.rebuildLocked(len(s.chunks))
	}
	if cfg.rebuildEvery > 0 {
		s.done.Add(1)
		go s.rebuildLoop(cfg.rebuildEvery)
	}
	return s
}

// Get returns the chunk with the given id, or an error matching rag.ErrNotFound if there is
// none. See Lookup.
func (s *Store) Get(ctx context.Context, id string) (rag.Chunk, error) {
	c, _, err := s.Lookup(ctx, id)
	return c, err
}

// Lookup is Get that also says how the lookup was answered: from the cache (ResultHit), from the
// backing store after paying its latency (ResultMiss, also for absent ids and for a wait cut
// short by ctx, whose error it returns wrapped), or by the Bloom guard (ResultBlocked, with an
// error matching rag.ErrNotFound). The chunk returned is a copy.
func (s *Store) Lookup(ctx context.Context, id string) (rag.Chunk, Result, error) {
	s.mu.RLock()
	if s.filter != nil && !s.filter.TestString(id) {
		s.mu.RUnlock()
		s.blocked.Add(1)
		return rag.Chunk{}, ResultBlocked, fmt.Errorf("chunk %q: %w", id, rag.ErrNotFound)
	}
	if s.cache != nil {
		if c, ok := s.cache.Get(id); ok {
			s.mu.RUnlock()
			s.hits.Add(1)
			return c, ResultHit, nil
		}
	}
	s.mu.RUnlock()

	s.misses.Add(1)
	if _, err := s.delay.Load().Wait(ctx); err != nil {
		return rag.Chunk{}, ResultMiss, fmt.Errorf("fetch chunk %q: %w", id, err)
	}
	s.storeLookups.Add(1)
	s.mu.RLock()
	c, ok := s.chunks[id]
	if ok && s.cache != nil {
		s.cache.Add(id, c)
	}
	s.mu.RUnlock()
	if !ok {
		s.storeMissing.Add(1)
		return rag.Chunk{}, ResultMiss, fmt.Errorf("chunk %q: %w", id, rag.ErrNotFound)
	}
	return c, ResultMiss, nil
}

// Put adds chunk to the backing store, or replaces the chunk with its id, and adds the id to the
// Bloom guard. A cached copy is replaced, but a chunk not yet cached is not put in the cache. When
// the guard has taken as many new ids as it was sized for, Put rebuilds it for twice the current
// count, so its false-positive rate stays at or below the configured one. An empty id returns an
// error matching rag.ErrInvalidRequest.
func (s *Store) Put(chunk rag.Chunk) error {
	if chunk.ID == "" {
		return fmt.Errorf("%w: put chunk: empty id", rag.ErrInvalidRequest)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, existed := s.chunks[chunk.ID]
	s.chunks[chunk.ID] = chunk
	if s.cache != nil && s.cache.Contains(chunk.ID) {
		s.cache.Add(chunk.ID, chunk)
	}
	if s.filter != nil && !existed {
		s.filter.AddString(chunk.ID)
		s.bloomLoad++
		if s.bloomLoad > s.bloomCap {
			s.rebuildLocked(2 * len(s.chunks))
		}
	}
	return nil
}

// Delete removes the chunk with the given id from the backing store and the cache, and reports
// whether it existed. A Bloom filter cannot forget an id, so the deleted id keeps passing the
// guard, and costing a store lookup, until the next RebuildBloom.
func (s *Store) Delete(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, existed := s.chunks[id]
	delete(s.chunks, id)
	if s.cache != nil {
		s.cache.Remove(id)
	}
	return existed
}

// Len returns the number of chunks in the backing store.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.chunks)
}

// RebuildBloom rebuilds the Bloom filter from the ids that exist now, sized for their count, so
// that deleted ids stop passing the guard. It does nothing while the guard is off. Lookups wait
// while it runs, which takes time linear in the number of chunks.
func (s *Store) RebuildBloom() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bloomEnabled {
		s.rebuildLocked(len(s.chunks))
	}
}

// rebuildLocked replaces the filter by one sized for capacity ids (at least minBloomCapacity)
// holding every current id. The caller holds s.mu exclusively.
func (s *Store) rebuildLocked(capacity int) {
	capacity = max(capacity, minBloomCapacity)
	f := bloom.NewWithEstimates(uint(capacity), s.bloomRate)
	for id := range s.chunks {
		f.AddString(id)
	}
	s.filter, s.bloomCap, s.bloomLoad = f, capacity, len(s.chunks)
}

func (s *Store) rebuildLoop(every time.Duration) {
	defer s.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.RebuildBloom()
		}
	}
}

// SetBloom turns the Bloom guard on or off. Turning it on (or leaving it on) with a rate in
// (0, 1) rebuilds the filter for that false-positive rate; a rate outside (0, 1) with enabled
// set returns an error matching rag.ErrInvalidRequest and changes nothing. When disabling, a
// valid rate is remembered for later and an invalid one is ignored.
func (s *Store) SetBloom(enabled bool, falsePositiveRate float64) error {
	valid := validRate(falsePositiveRate)
	if enabled && !valid {
		return fmt.Errorf("%w: bloom false-positive rate %v: want a number between 0 and 1", rag.ErrInvalidRequest, falsePositiveRate)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if valid {
		s.bloomRate = falsePositiveRate
	}
	s.bloomEnabled = enabled
	if enabled {
		s.rebuildLocked(len(s.chunks))
	} else {
		s.filter, s.bloomCap, s.bloomLoad = nil, 0, 0
	}
	return nil
}

// SetCache resizes the LRU cache to size chunks, evicting the least recently used ones if it
// shrinks; 0 disables the cache and drops its contents. A negative size returns an error
// matching rag.ErrInvalidRequest.
func (s *Store) SetCache(size int) error {
	if size < 0 {
		return fmt.Errorf("%w: cache size %d: want 0 (off) or more", rag.ErrInvalidRequest, size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setCacheLocked(size)
	return nil
}

// setCacheLocked applies a cache size; the caller holds s.mu exclusively or owns s alone.
func (s *Store) setCacheLocked(size int) {
	switch {
	case size == 0:
		if s.cache != nil {
			s.cache.Purge()
		}
		s.cache = nil
	case s.cache == nil:
		s.cache, _ = lru.New[string, rag.Chunk](size) // errors only for size <= 0
	default:
		s.cache.Resize(size)
	}
	s.cacheSize = size
}

// SetFetchLatency replaces the backing store's latency law. Lookups already waiting keep the
// latency they drew.
func (s *Store) SetFetchLatency(law latency.Law) {
	s.delay.Store(latency.NewDelay(law, s.seed))
}

// FetchLatency returns the backing store's latency law.
func (s *Store) FetchLatency() latency.Law { return s.delay.Load().Law() }

// Stats returns the store's counters and current settings. The counters are read one by one,
// so a snapshot taken while lookups run may be off by the lookups in flight.
func (s *Store) Stats() Stats {
	st := Stats{
		Hits:                s.hits.Load(),
		Misses:              s.misses.Load(),
		Blocked:             s.blocked.Load(),
		StoreLookups:        s.storeLookups.Load(),
		StoreMissingLookups: s.storeMissing.Load(),
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	st.CacheSize = s.cacheSize
	if s.cache != nil {
		st.CacheLen = s.cache.Len()
	}
	st.BloomEnabled = s.bloomEnabled
	st.BloomFalsePositiveRate = s.bloomRate
	return st
}

// Close stops the periodic Bloom rebuild started by WithBloomRebuildEvery and waits for it to
// exit. It is idempotent, always returns nil, and the store stays usable afterwards.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	s.done.Wait()
	return nil
}
