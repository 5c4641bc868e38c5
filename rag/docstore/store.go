// Package docstore owns chunk payloads: the text the pipeline fetches by id after retrieval.
// A Store composes three parts: a backing store (Backend: Memory, the embedded default that
// charges a latency law per lookup with optionally finite concurrency, or Postgres), a cache tier
// in front of it (Cache: an in-memory LRU, 2Q or ARC cache, or Redis), and a Bloom-filter guard of
// the ids that exist in front of both.
//
// The backing store is paid on every trip to it, including trips for ids that do not exist, and
// misses are not cached. Without the Bloom guard, a stream of absent ids therefore
// goes to the store every time (cache penetration); with it, almost all of them are answered at
// once. Both behaviours are deliberate, so that the pitfall and its fix can be reproduced.
package docstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// Defaults of New.
const (
	// DefaultCacheSize is the number of chunks the in-memory cache holds unless WithCache says
	// otherwise.
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

// Result says how a lookup was answered: rag.CacheResult, whose String values are the result
// label of the rag_cache_requests_total metric.
type Result = rag.CacheResult

// The ways a lookup can be answered.
const (
	// ResultHit means the chunk came from the cache, without touching the backing store.
	ResultHit = rag.CacheHit
	// ResultMiss means the lookup went to the backing store and paid its latency, whether or not
	// the id existed there.
	ResultMiss = rag.CacheMiss
	// ResultBlocked means the Bloom guard ruled the id out: rag.ErrNotFound at once, no cache or
	// store lookup.
	ResultBlocked = rag.CacheBlocked
)

// cacheFailureLogEvery is the least time between two log lines about a failing cache tier.
const cacheFailureLogEvery = 10 * time.Second

// DefaultCacheRetry is how long a Store serves from the backing store alone after its cache tier
// failed, before it tries the cache again, unless WithCacheRetry says otherwise.
const DefaultCacheRetry = time.Second

type config struct {
	fetchLaw     latency.Law
	fetchLawSet  bool
	concurrency  int
	cacheSize    int
	cachePolicy  CachePolicy
	cacheTier    Cache
	cacheRetry   time.Duration
	bloomEnabled bool
	bloomRate    float64
	seed         uint64
	rebuildEvery time.Duration
	logger       *slog.Logger
}

// Option configures New and Compose.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithFetchLatency sets the latency law of the backing store, paid on every lookup that reaches
// it: each cache miss, including misses for ids that do not exist. With Compose it applies to
// backends that simulate a service time (Memory and Postgres do).
func WithFetchLatency(law latency.Law) Option {
	return optionFunc(func(c *config) { c.fetchLaw, c.fetchLawSet = law, true })
}

// WithConcurrency gives the memory backing store that New builds a finite capacity of n lookups
// served at once (see MemoryConfig.Concurrency); zero or less, the default, means unbounded.
// Compose ignores it: a backend passed to Compose brings its own capacity (Postgres: its pool).
func WithConcurrency(n int) Option {
	return optionFunc(func(c *config) { c.concurrency = max(n, 0) })
}

// WithCache sets the cache's capacity in chunks (default DefaultCacheSize). Zero or a negative
// size disables the cache. With WithCacheTier, the size only switches the tier on or off: a
// remote cache bounds itself (Redis: its maxmemory).
func WithCache(size int) Option {
	return optionFunc(func(c *config) { c.cacheSize = max(size, 0) })
}

// WithCachePolicy sets the in-memory cache's eviction policy (default PolicyLRU).
func WithCachePolicy(p CachePolicy) Option {
	return optionFunc(func(c *config) { c.cachePolicy = p })
}

// WithCacheTier puts cache, for instance a Redis, in front of the backing store instead of the
// in-memory cache. The Store does not close it.
func WithCacheTier(cache Cache) Option {
	return optionFunc(func(c *config) { c.cacheTier = cache })
}

// WithCacheRetry sets how long the Store leaves a failed cache tier alone, serving lookups from
// the backing store, before trying it again (default DefaultCacheRetry).
func WithCacheRetry(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.cacheRetry = d
		}
	})
}

// WithLogger sets the logger for cache-tier failures (at most one line per 10 s) and for errors
// of methods that cannot return one (Delete, Len, RebuildBloom). The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
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

// WithSeed seeds the fetch latency's random source of the memory backing store New builds.
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

// latencyKnob is a backend whose service time can be changed at run time.
type latencyKnob interface {
	SetFetchLatency(latency.Law)
	FetchLatency() latency.Law
}

// backendReporter is a backend that reports its own counters.
type backendReporter interface{ BackendStats() BackendStats }

// Store is a chunk store: a Bloom-filter guard, then a cache tier, then a backing store. Lookups
// take, in order: the guard (an id it rules out returns rag.ErrNotFound at once), the cache (a
// hit returns at once), then the backing store (a found chunk enters the cache, an absent id is
// not cached). A cache that fails is skipped for its retry interval (WithCacheRetry): lookups
// then go to the backing store, so a dead or slow cache costs capacity, not answers.
//
// A Store is safe for concurrent use; every method may run concurrently with lookups.
type Store struct {
	backend    Backend
	knob       latencyKnob // nil when the backend has no simulated service time
	logger     *slog.Logger
	cacheRetry time.Duration

	// mu guards the filter and its settings and which cache is in use. gen counts Puts and
	// Deletes; a lookup fills the cache only if gen has not moved since it missed, and for the
	// in-memory cache the check and the fill happen under mu, so that a lookup that read an old
	// payload cannot put it in the cache after a Put.
	mu           sync.RWMutex
	gen          uint64
	filter       *bloom.BloomFilter // nil when the guard is off
	bloomEnabled bool
	bloomRate    float64
	bloomCap     int      // ids the filter was sized for
	bloomLoad    int      // distinct ids added to the filter since it was built
	building     int      // filter rebuilds scanning the backend now
	pending      []string // ids put while a rebuild scans, added to its filter at the end
	tier         Cache    // the configured remote cache; nil for the in-memory cache
	mem          *MemoryCache
	cache        Cache // the cache in use; nil when off
	cacheSize    int
	cachePolicy  CachePolicy

	hits, misses, blocked                   atomic.Uint64
	storeLookups, storeMissing, storeErrors atomic.Uint64
	cacheErrors, cacheBypassed              atomic.Uint64
	cacheDownUntil, lastCacheLog            atomic.Int64 // unix nanoseconds

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
	StoreErrors         uint64 // backing-store lookups that failed (store unavailable, timed out)
	CacheErrors         uint64 // cache calls that failed; their lookups went to the backing store
	CacheBypassed       uint64 // lookups that skipped a failed cache during its retry interval

	CacheKind              string  // "lru", "2q", "arc" or "redis"
	CacheSize              int     // cache capacity in chunks; 0 when the cache is off
	CacheLen               int     // chunks in the in-memory cache now (0 for a remote cache)
	BloomEnabled           bool    // whether the Bloom guard is on
	BloomFalsePositiveRate float64 // the guard's configured target false-positive rate

	Backend BackendStats // the backing store's own counters
}

func newConfig(opts []Option) config {
	cfg := config{
		fetchLaw:     latency.Law{Kind: latency.LawNone},
		cacheSize:    DefaultCacheSize,
		cachePolicy:  PolicyLRU,
		cacheRetry:   DefaultCacheRetry,
		bloomEnabled: true,
		bloomRate:    DefaultBloomFalsePositiveRate,
		seed:         defaultSeed,
		logger:       slog.Default(),
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	return cfg
}

// New returns a store holding chunks in a Memory backing store, behind an in-memory cache and
// the Bloom guard. A later chunk with the same id replaces an earlier one; chunks with an empty
// id are skipped. Call Close when done if WithBloomRebuildEvery is used.
func New(chunks []rag.Chunk, opts ...Option) *Store {
	cfg := newConfig(opts)
	mem := NewMemory(chunks, MemoryConfig{ServiceTime: cfg.fetchLaw, Seed: cfg.seed, Concurrency: cfg.concurrency})
	s, err := compose(context.Background(), mem, cfg)
	if err != nil { // a Memory backend and an in-memory cache cannot fail
		panic(fmt.Sprintf("docstore: compose memory store: %v", err))
	}
	return s
}

// Compose returns a store in front of backend: the Bloom guard, built now from the ids backend
// holds, then the cache tier (in-memory by default, or WithCacheTier's). It fails if backend
// cannot list its ids or an option is invalid. The Store does not close backend.
func Compose(ctx context.Context, backend Backend, opts ...Option) (*Store, error) {
	return compose(ctx, backend, newConfig(opts))
}

func compose(ctx context.Context, backend Backend, cfg config) (*Store, error) {
	if _, err := ParseCachePolicy(string(cfg.cachePolicy)); err != nil {
		return nil, err
	}
	s := &Store{
		backend:      backend,
		logger:       cfg.logger,
		cacheRetry:   cfg.cacheRetry,
		bloomEnabled: cfg.bloomEnabled,
		bloomRate:    cfg.bloomRate,
		tier:         cfg.cacheTier,
		cachePolicy:  cfg.cachePolicy,
		stop:         make(chan struct{}),
	}
	s.knob, _ = backend.(latencyKnob)
	if cfg.fetchLawSet && s.knob != nil {
		s.knob.SetFetchLatency(cfg.fetchLaw)
	}
	if err := s.setCacheLocked(cfg.cacheSize); err != nil {
		return nil, err
	}
	if s.bloomEnabled {
		if err := s.rebuild(ctx, 1); err != nil {
			return nil, err
		}
	}
	if cfg.rebuildEvery > 0 {
		s.done.Add(1)
		go s.rebuildLoop(cfg.rebuildEvery)
	}
	return s, nil
}

// Backend returns the backing store.
func (s *Store) Backend() Backend { return s.backend }

// Get returns the chunk with the given id, or an error matching rag.ErrNotFound if there is
// none. See Lookup.
func (s *Store) Get(ctx context.Context, id string) (rag.Chunk, error) {
	c, _, err := s.Lookup(ctx, id)
	return c, err
}

// Lookup is Get that also says how the lookup was answered: from the cache (ResultHit), from the
// backing store (ResultMiss, also for absent ids, for a failed store, whose error matches
// rag.ErrUnavailable, and for a wait cut short by ctx, whose error it returns wrapped), or by
// the Bloom guard (ResultBlocked, with an error matching rag.ErrNotFound). The chunk returned is
// a copy.
func (s *Store) Lookup(ctx context.Context, id string) (rag.Chunk, Result, error) {
	s.mu.RLock()
	if s.filter != nil && !s.filter.TestString(id) {
		s.mu.RUnlock()
		s.blocked.Add(1)
		return rag.Chunk{}, ResultBlocked, fmt.Errorf("chunk %q: %w", id, rag.ErrNotFound)
	}
	cache, gen := s.cache, s.gen
	s.mu.RUnlock()

	useCache := cache != nil && s.cacheUp()
	if cache != nil && !useCache {
		s.cacheBypassed.Add(1)
	}
	if useCache {
		c, ok, err := cache.Get(ctx, id)
		switch {
		case err != nil && ctx.Err() != nil:
			s.misses.Add(1)
			return rag.Chunk{}, ResultMiss, fmt.Errorf("fetch chunk %q: %w", id, ctx.Err())
		case err != nil:
			s.cacheFailed(cache, "get", err)
			useCache = false
		case ok:
			s.hits.Add(1)
			return c, ResultHit, nil
		}
	}

	s.misses.Add(1)
	c, err := s.backend.Fetch(ctx, id)
	switch {
	case errors.Is(err, rag.ErrNotFound):
		s.storeLookups.Add(1)
		s.storeMissing.Add(1)
		return rag.Chunk{}, ResultMiss, err
	case err != nil:
		if ctx.Err() == nil {
			s.storeErrors.Add(1)
		}
		return rag.Chunk{}, ResultMiss, err
	}
	s.storeLookups.Add(1)
	if useCache {
		s.fill(ctx, cache, gen, c)
	}
	return c, ResultMiss, nil
}

// fill caches c, fetched when the store's generation was gen, unless a Put or Delete came since.
func (s *Store) fill(ctx context.Context, cache Cache, gen uint64, c rag.Chunk) {
	s.mu.RLock()
	current := s.gen == gen && s.cache == cache
	if current && cache == Cache(s.mem) {
		_ = s.mem.Add(ctx, c) // never fails; under mu, so no Put can slip in between
		s.mu.RUnlock()
		return
	}
	s.mu.RUnlock()
	// A remote cache is not called under mu, so that a slow cache cannot stall Puts and, behind
	// them, every lookup. A Put racing this fill may leave the old payload cached until the
	// remote cache's TTL ends it.
	if current {
		if err := cache.Add(ctx, c); err != nil && ctx.Err() == nil {
			s.cacheFailed(cache, "add", err)
		}
	}
}

// cacheUp reports whether the cache tier's retry interval after a failure is over.
func (s *Store) cacheUp() bool { return time.Now().UnixNano() >= s.cacheDownUntil.Load() }

// cacheFailed counts a failed cache call, leaves the cache alone for the retry interval and logs
// at most once per cacheFailureLogEvery.
func (s *Store) cacheFailed(cache Cache, op string, err error) {
	n := s.cacheErrors.Add(1)
	now := time.Now()
	s.cacheDownUntil.Store(now.Add(s.cacheRetry).UnixNano())
	last := s.lastCacheLog.Load()
	if now.UnixNano()-last < int64(cacheFailureLogEvery) || !s.lastCacheLog.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	s.logger.Warn("doc store cache failed; serving from the backing store",
		"cache", cache.Kind(), "op", op, "error", msg, "cache_errors", n, "retry_after", s.cacheRetry)
}

// Put adds chunk to the backing store, or replaces the chunk with its id, and adds the id to the
// Bloom guard. A cached copy is replaced, but a chunk not yet cached is not put in the cache. When
// the guard has taken as many new ids as it was sized for, Put rebuilds it for twice the current
// count, so its false-positive rate stays at or below the configured one. An empty id returns an
// error matching rag.ErrInvalidRequest. See Upsert.
func (s *Store) Put(chunk rag.Chunk) error { return s.Upsert(context.Background(), chunk) }

// Upsert is Put for several chunks, with a context for the backing store.
func (s *Store) Upsert(ctx context.Context, chunks ...rag.Chunk) error {
	for _, c := range chunks {
		if c.ID == "" {
			return fmt.Errorf("%w: put chunk: empty id", rag.ErrInvalidRequest)
		}
	}
	if err := s.backend.Upsert(ctx, chunks...); err != nil {
		return fmt.Errorf("put chunks: %w", err)
	}
	s.mu.Lock()
	s.gen++
	for _, c := range chunks {
		if s.building > 0 {
			s.pending = append(s.pending, c.ID)
		}
		if s.filter != nil && !s.filter.TestString(c.ID) {
			s.filter.AddString(c.ID)
			s.bloomLoad++
		}
	}
	grow := s.filter != nil && s.bloomLoad > s.bloomCap
	cache := s.cache
	local := cache != nil && cache == Cache(s.mem)
	if local {
		for _, c := range chunks {
			_ = s.mem.Replace(ctx, c)
		}
	}
	s.mu.Unlock()
	if cache != nil && !local && s.cacheUp() {
		for _, c := range chunks {
			if err := cache.Replace(ctx, c); err != nil {
				s.cacheFailed(cache, "replace", err)
				break
			}
		}
	}
	if grow {
		return s.rebuild(ctx, 2)
	}
	return nil
}

// Delete removes the chunk with the given id from the backing store and the cache, and reports
// whether it existed. A Bloom filter cannot forget an id, so the deleted id keeps passing the
// guard, and costing a store lookup, until the next RebuildBloom. A backing-store error is
// logged and reported as false; Remove returns it.
func (s *Store) Delete(id string) bool {
	ok, err := s.Remove(context.Background(), id)
	if err != nil {
		s.logger.Warn("doc store delete failed", "id", truncate(id), "error", err)
	}
	return ok
}

// Remove is Delete with a context and the backing store's error.
func (s *Store) Remove(ctx context.Context, id string) (bool, error) {
	existed, err := s.backend.Remove(ctx, id)
	if err != nil {
		return false, fmt.Errorf("delete chunk %q: %w", truncate(id), err)
	}
	s.mu.Lock()
	s.gen++
	cache := s.cache
	local := cache != nil && cache == Cache(s.mem)
	if local {
		_ = s.mem.Remove(ctx, id)
	}
	s.mu.Unlock()
	if cache != nil && !local {
		if err := cache.Remove(ctx, id); err != nil {
			s.cacheFailed(cache, "remove", err)
		}
	}
	return existed, nil
}

func truncate(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// Len returns the number of chunks in the backing store; on a backing-store error it logs it
// and returns 0 (Count returns the error).
func (s *Store) Len() int {
	n, err := s.Count(context.Background())
	if err != nil {
		s.logger.Warn("doc store count failed", "error", err)
	}
	return n
}

// Count returns the number of chunks in the backing store.
func (s *Store) Count(ctx context.Context) (int, error) { return s.backend.Count(ctx) }

// RebuildBloom rebuilds the Bloom filter from the ids that exist now, sized for their count, so
// that deleted ids stop passing the guard. It does nothing while the guard is off. It scans the
// backing store's ids without blocking lookups, which keep the old filter until the new one is
// in; a backing-store error is logged and leaves the old filter (RebuildBloomContext returns it).
func (s *Store) RebuildBloom() {
	if err := s.RebuildBloomContext(context.Background()); err != nil {
		s.logger.Warn("doc store bloom rebuild failed", "error", err)
	}
}

// RebuildBloomContext is RebuildBloom with a context and the backing store's error.
func (s *Store) RebuildBloomContext(ctx context.Context) error { return s.rebuild(ctx, 1) }

// rebuild replaces the filter by one sized for growth times the ids the backend holds (at least
// minBloomCapacity), holding all of them and every id put while it scanned.
func (s *Store) rebuild(ctx context.Context, growth int) error {
	s.mu.Lock()
	if !s.bloomEnabled {
		s.mu.Unlock()
		return nil
	}
	rate := s.bloomRate
	s.building++
	s.mu.Unlock()

	var ids []string
	err := s.backend.EachID(ctx, func(id string) { ids = append(ids, id) })

	s.mu.Lock()
	defer s.mu.Unlock()
	pending := s.pending
	if s.building--; s.building == 0 {
		s.pending = nil
	}
	if err != nil {
		return fmt.Errorf("build bloom guard: list ids: %w", err)
	}
	if !s.bloomEnabled || s.bloomRate != rate {
		return nil // the guard was switched off or re-rated meanwhile; that change rebuilt it
	}
	capacity := max(growth*len(ids), minBloomCapacity)
	f := bloom.NewWithEstimates(uint(capacity), rate)
	for _, id := range ids {
		f.AddString(id)
	}
	load := len(ids)
	for _, id := range pending {
		if !f.TestString(id) {
			f.AddString(id)
			load++
		}
	}
	s.filter, s.bloomCap, s.bloomLoad = f, capacity, load
	return nil
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
	if valid {
		s.bloomRate = falsePositiveRate
	}
	s.bloomEnabled = enabled
	if !enabled {
		s.filter, s.bloomCap, s.bloomLoad = nil, 0, 0
	}
	s.mu.Unlock()
	if enabled {
		return s.rebuild(context.Background(), 1)
	}
	return nil
}

// SetCache resizes the in-memory cache to size chunks, evicting by its policy if it shrinks; 0
// disables the cache and drops its contents. With a remote cache tier (WithCacheTier), size
// only switches it on (any positive size) or off (0). A negative size returns an error matching
// rag.ErrInvalidRequest.
func (s *Store) SetCache(size int) error {
	if size < 0 {
		return fmt.Errorf("%w: cache size %d: want 0 (off) or more", rag.ErrInvalidRequest, size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++ // a fill racing the change must not land in a cache just purged or replaced
	return s.setCacheLocked(size)
}

// SetCachePolicy replaces the in-memory cache by an empty one of the same size with policy p.
// It returns an error matching rag.ErrInvalidRequest for an unknown policy or when the cache
// tier is remote (WithCacheTier).
func (s *Store) SetCachePolicy(p CachePolicy) error {
	if _, err := ParseCachePolicy(string(p)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tier != nil {
		return fmt.Errorf("%w: cache policy %s: the cache tier is %s, whose eviction is its own", rag.ErrInvalidRequest, p, s.tier.Kind())
	}
	s.gen++
	s.cachePolicy = p
	s.mem = nil
	return s.setCacheLocked(s.cacheSize)
}

// setCacheLocked applies a cache size; the caller holds s.mu exclusively or owns s alone.
func (s *Store) setCacheLocked(size int) error {
	s.cacheSize = size
	switch {
	case size == 0:
		if s.mem != nil {
			s.mem.Purge()
		}
		s.cache = nil
	case s.tier != nil:
		s.cache = s.tier
	case s.mem == nil:
		m, err := NewMemoryCache(s.cachePolicy, size)
		if err != nil {
			return err
		}
		s.mem, s.cache = m, m
	default:
		if err := s.mem.Resize(size); err != nil {
			return err
		}
		s.cache = s.mem
	}
	return nil
}

// SetFetchLatency replaces the backing store's latency law, for backends that simulate a
// service time (Memory, Postgres); for others it does nothing. Lookups already waiting keep the
// latency they drew.
func (s *Store) SetFetchLatency(law latency.Law) {
	if s.knob != nil {
		s.knob.SetFetchLatency(law)
	}
}

// concurrencyKnob is a backend whose capacity can be changed at run time.
type concurrencyKnob interface {
	SetConcurrency(n int)
	Concurrency() int
}

// SetConcurrency changes how many lookups the backing store serves at once (0: unbounded), for
// backends whose capacity can change at run time (Memory). Others, among them Postgres whose
// capacity is its pool, return an error matching rag.ErrInvalidRequest; so does a negative n.
func (s *Store) SetConcurrency(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: doc store concurrency %d: want 0 (unbounded) or more", rag.ErrInvalidRequest, n)
	}
	k, ok := s.backend.(concurrencyKnob)
	if !ok {
		return fmt.Errorf("%w: doc store concurrency: the %T backing store's capacity is fixed when it opens", rag.ErrInvalidRequest, s.backend)
	}
	k.SetConcurrency(n)
	return nil
}

// FetchLatency returns the backing store's latency law (none for a backend without one).
func (s *Store) FetchLatency() latency.Law {
	if s.knob == nil {
		return latency.Law{Kind: latency.LawNone}
	}
	return s.knob.FetchLatency()
}

// Stats returns the store's counters and current settings. The counters are read one by one,
// so a snapshot taken while lookups run may be off by the lookups in flight.
func (s *Store) Stats() Stats {
	st := Stats{
		Hits:                s.hits.Load(),
		Misses:              s.misses.Load(),
		Blocked:             s.blocked.Load(),
		StoreLookups:        s.storeLookups.Load(),
		StoreMissingLookups: s.storeMissing.Load(),
		StoreErrors:         s.storeErrors.Load(),
		CacheErrors:         s.cacheErrors.Load(),
		CacheBypassed:       s.cacheBypassed.Load(),
	}
	if r, ok := s.backend.(backendReporter); ok {
		st.Backend = r.BackendStats()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	st.CacheKind = string(s.cachePolicy)
	if s.tier != nil {
		st.CacheKind = s.tier.Kind()
	}
	st.CacheSize = s.cacheSize
	if s.cache != nil && s.cache == Cache(s.mem) {
		st.CacheLen = s.mem.Len()
	}
	st.BloomEnabled = s.bloomEnabled
	st.BloomFalsePositiveRate = s.bloomRate
	return st
}

// Close stops the periodic Bloom rebuild started by WithBloomRebuildEvery and waits for it to
// exit. It is idempotent, always returns nil, and the store stays usable afterwards. It closes
// neither the backing store nor a cache tier given by WithCacheTier.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	s.done.Wait()
	return nil
}
