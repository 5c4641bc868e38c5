package docstore

import (
	"context"
	"fmt"
	"strings"
	"sync"

	arc "github.com/hashicorp/golang-lru/arc/v2"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ragtail/ragtail/rag"
)

// Cache is the cache tier in front of the backing store. MemoryCache and Redis implement it. An
// error from a Cache means the cache could not answer (unreachable, too slow); the Store then
// serves the lookup from the backing store and counts the failure.
type Cache interface {
	// Get returns the cached chunk with the given id and whether there was one.
	Get(ctx context.Context, id string) (rag.Chunk, bool, error)
	// Add caches chunk.
	Add(ctx context.Context, chunk rag.Chunk) error
	// Replace updates the cached copy of chunk, if there is one, without caching it otherwise.
	Replace(ctx context.Context, chunk rag.Chunk) error
	// Remove drops the cached copy of the chunk with the given id.
	Remove(ctx context.Context, id string) error
	// Kind names the cache for Stats: "lru", "2q", "arc" or "redis".
	Kind() string
}

// CachePolicy is the eviction policy of an in-memory cache.
type CachePolicy string

// The in-memory cache policies, from hashicorp/golang-lru.
const (
	// PolicyLRU evicts the least recently used chunk. A scan of cold ids evicts every hot one
	// (cache pollution).
	PolicyLRU CachePolicy = "lru"
	// Policy2Q keeps ids seen once in a small recent queue and promotes ids seen twice to a
	// frequent queue, so a scan of cold ids passes through without evicting the hot ones.
	Policy2Q CachePolicy = "2q"
	// PolicyARC balances recency against frequency adaptively (Megiddo and Modha's ARC).
	PolicyARC CachePolicy = "arc"
)

// ParseCachePolicy parses "lru", "2q" or "arc", case-insensitively.
func ParseCachePolicy(s string) (CachePolicy, error) {
	switch p := CachePolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case PolicyLRU, Policy2Q, PolicyARC:
		return p, nil
	}
	return "", fmt.Errorf("%w: cache policy %.40q: want lru, 2q or arc", rag.ErrInvalidRequest, s)
}

// memoryCache is what the golang-lru caches have in common.
type memoryCache interface {
	Get(key string) (rag.Chunk, bool)
	Add(key string, value rag.Chunk)
	Contains(key string) bool
	Remove(key string)
	Purge()
	Len() int
}

// lruCache adapts the LRU cache, whose Add and Remove return whether they evicted or found, to
// memoryCache.
type lruCache struct{ *lru.Cache[string, rag.Chunk] }

func (c lruCache) Add(k string, v rag.Chunk) { c.Cache.Add(k, v) }
func (c lruCache) Remove(k string)           { c.Cache.Remove(k) }

// MemoryCache is an in-process cache of chunks with a fixed capacity and an eviction policy. It
// is safe for concurrent use.
type MemoryCache struct {
	policy CachePolicy
	mu     sync.RWMutex // guards c and size; the caches lock themselves
	c      memoryCache
	size   int
}

var _ Cache = (*MemoryCache)(nil)

// NewMemoryCache returns a cache of size chunks (at least 1) with the given policy.
func NewMemoryCache(policy CachePolicy, size int) (*MemoryCache, error) {
	if _, err := ParseCachePolicy(string(policy)); err != nil {
		return nil, err
	}
	if size < 1 {
		return nil, fmt.Errorf("%w: cache size %d: want 1 or more", rag.ErrInvalidRequest, size)
	}
	m := &MemoryCache{policy: policy}
	m.c, m.size = newPolicyCache(policy, size), size
	return m, nil
}

func newPolicyCache(policy CachePolicy, size int) memoryCache {
	switch policy {
	case Policy2Q:
		c, _ := lru.New2Q[string, rag.Chunk](size) // errors only for size <= 0
		return c
	case PolicyARC:
		c, _ := arc.NewARC[string, rag.Chunk](size)
		return c
	default:
		c, _ := lru.New[string, rag.Chunk](size)
		return lruCache{c}
	}
}

func (m *MemoryCache) cache() memoryCache {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.c
}

// Get implements Cache; it never fails.
func (m *MemoryCache) Get(_ context.Context, id string) (rag.Chunk, bool, error) {
	c, ok := m.cache().Get(id)
	return c, ok, nil
}

// Add implements Cache; it never fails.
func (m *MemoryCache) Add(_ context.Context, chunk rag.Chunk) error {
	m.cache().Add(chunk.ID, chunk)
	return nil
}

// Replace implements Cache; it never fails. Between its check and its update a concurrent
// eviction may let the chunk back in; the Store serialises Replace with its own fills.
func (m *MemoryCache) Replace(_ context.Context, chunk rag.Chunk) error {
	c := m.cache()
	if c.Contains(chunk.ID) {
		c.Add(chunk.ID, chunk)
	}
	return nil
}

// Remove implements Cache; it never fails.
func (m *MemoryCache) Remove(_ context.Context, id string) error {
	m.cache().Remove(id)
	return nil
}

// Kind implements Cache.
func (m *MemoryCache) Kind() string { return string(m.policy) }

// Policy returns the eviction policy.
func (m *MemoryCache) Policy() CachePolicy { return m.policy }

// Len returns the number of chunks cached.
func (m *MemoryCache) Len() int { return m.cache().Len() }

// Size returns the capacity in chunks.
func (m *MemoryCache) Size() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.size
}

// Purge drops every cached chunk.
func (m *MemoryCache) Purge() { m.cache().Purge() }

// Resize changes the capacity to size chunks (at least 1). The LRU and 2Q caches evict down to
// the new size and keep the rest; the ARC cache has no resize, so it starts over empty.
func (m *MemoryCache) Resize(size int) error {
	if size < 1 {
		return fmt.Errorf("%w: cache size %d: want 1 or more", rag.ErrInvalidRequest, size)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch c := m.c.(type) {
	case lruCache:
		c.Resize(size)
	case *lru.TwoQueueCache[string, rag.Chunk]:
		c.Resize(size)
	default:
		m.c = newPolicyCache(m.policy, size)
	}
	m.size = size
	return nil
}
