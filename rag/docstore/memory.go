package docstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// Backend is where chunk payloads live: the backing store behind the cache tier and the Bloom
// guard. Memory and Postgres implement it. Fetch returns an error matching rag.ErrNotFound for an
// id that does not exist and one matching rag.ErrUnavailable when the store cannot answer.
type Backend interface {
	// Fetch returns the chunk with the given id.
	Fetch(ctx context.Context, id string) (rag.Chunk, error)
	// Upsert adds chunks, replacing those with the same ids.
	Upsert(ctx context.Context, chunks ...rag.Chunk) error
	// Remove deletes the chunk with the given id and reports whether it existed.
	Remove(ctx context.Context, id string) (bool, error)
	// EachID calls fn with every id held, in no particular order, for building the Bloom guard.
	EachID(ctx context.Context, fn func(id string)) error
	// Count returns the number of chunks held.
	Count(ctx context.Context) (int, error)
}

// BackendStats is a snapshot of a backing store's lookup counters, in Stats.Backend.
type BackendStats struct {
	Kind         string  // "memory" or "postgresql"
	Lookups      uint64  // fetches completed (found or not)
	Missing      uint64  // of those, ids that did not exist
	Errors       uint64  // fetches that failed (store unavailable, timeout)
	Concurrency  int     // lookups served at once; 0 means unbounded
	InUse        int     // lookups being served now
	Waiting      int     // lookups queued for a free slot now
	Waited       uint64  // lookups that found every slot busy and queued
	WaitSeconds  float64 // total time spent queued for a slot
	FetchLatency string  // the latency law paid per lookup, when simulated
}

// MemoryConfig configures NewMemory. The zero value is an unbounded store with no latency.
type MemoryConfig struct {
	// ServiceTime is the latency law each lookup pays while it holds one of the store's slots.
	ServiceTime latency.Law
	// Seed seeds the service time's random source.
	Seed uint64
	// Concurrency gives the store a finite capacity: at most Concurrency lookups are served at
	// once, each holding its slot for its service time, and the others queue for a free slot in
	// arrival order. So when lookups arrive faster than Concurrency per service time, a queue
	// forms, as in front of a database's connection pool. Zero or less means unbounded.
	Concurrency int
}

// Memory is an in-memory backing store that charges a latency law on every lookup, optionally
// with finite concurrency (MemoryConfig.Concurrency). It is safe for concurrent use.
type Memory struct {
	seed  uint64
	delay atomic.Pointer[latency.Delay]
	// slots holds a token per lookup being served; nil when unbounded. SetConcurrency swaps it,
	// and each lookup gives its token back to the channel it took it from.
	slots atomic.Pointer[chan struct{}]

	mu     sync.RWMutex
	chunks map[string]rag.Chunk

	lookups, missing, waited atomic.Uint64
	waitNanos                atomic.Int64
	inUse, waiting           atomic.Int64
}

var _ Backend = (*Memory)(nil)

// NewMemory returns a memory store holding chunks; a later chunk with the same id replaces an
// earlier one and chunks with an empty id are skipped.
func NewMemory(chunks []rag.Chunk, cfg MemoryConfig) *Memory {
	if cfg.ServiceTime.Kind == "" {
		cfg.ServiceTime.Kind = latency.LawNone
	}
	m := &Memory{seed: cfg.Seed, chunks: make(map[string]rag.Chunk, len(chunks))}
	m.SetConcurrency(cfg.Concurrency)
	m.delay.Store(latency.NewDelay(cfg.ServiceTime, cfg.Seed))
	for _, c := range chunks {
		if c.ID != "" {
			m.chunks[c.ID] = c
		}
	}
	return m
}

// Fetch implements Backend: take a slot (queueing while all are busy), pay the service time, look
// the id up, free the slot. A wait cut short by ctx returns ctx's error, wrapped.
func (m *Memory) Fetch(ctx context.Context, id string) (rag.Chunk, error) {
	release, err := m.acquire(ctx)
	if err != nil {
		return rag.Chunk{}, fmt.Errorf("fetch chunk %q: wait for a store slot: %w", id, err)
	}
	defer release()
	if _, err := m.delay.Load().Wait(ctx); err != nil {
		return rag.Chunk{}, fmt.Errorf("fetch chunk %q: %w", id, err)
	}
	m.lookups.Add(1)
	m.mu.RLock()
	c, ok := m.chunks[id]
	m.mu.RUnlock()
	if !ok {
		m.missing.Add(1)
		return rag.Chunk{}, fmt.Errorf("chunk %q: %w", id, rag.ErrNotFound)
	}
	return c, nil
}

// acquire takes one of the store's slots, waiting for one while all are busy.
func (m *Memory) acquire(ctx context.Context) (release func(), err error) {
	slotsPtr := m.slots.Load()
	if slotsPtr == nil {
		m.inUse.Add(1)
		return func() { m.inUse.Add(-1) }, nil
	}
	slots := *slotsPtr
	select {
	case slots <- struct{}{}:
	default:
		m.waited.Add(1)
		m.waiting.Add(1)
		start := time.Now()
		select {
		case slots <- struct{}{}:
			m.waiting.Add(-1)
			m.waitNanos.Add(int64(time.Since(start)))
		case <-ctx.Done():
			m.waiting.Add(-1)
			m.waitNanos.Add(int64(time.Since(start)))
			return nil, ctx.Err()
		}
	}
	m.inUse.Add(1)
	return func() { m.inUse.Add(-1); <-slots }, nil
}

// SetConcurrency changes how many lookups are served at once; zero or less means unbounded.
// Lookups already holding or waiting for a slot finish under the old bound, so for as long as
// they run the two bounds add up.
func (m *Memory) SetConcurrency(n int) {
	if n <= 0 {
		m.slots.Store(nil)
		return
	}
	slots := make(chan struct{}, n)
	m.slots.Store(&slots)
}

// Concurrency returns how many lookups are served at once; 0 means unbounded.
func (m *Memory) Concurrency() int {
	if p := m.slots.Load(); p != nil {
		return cap(*p)
	}
	return 0
}

// Upsert implements Backend.
func (m *Memory) Upsert(_ context.Context, chunks ...rag.Chunk) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range chunks {
		if c.ID == "" {
			return fmt.Errorf("%w: put chunk: empty id", rag.ErrInvalidRequest)
		}
		m.chunks[c.ID] = c
	}
	return nil
}

// Remove implements Backend.
func (m *Memory) Remove(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.chunks[id]
	delete(m.chunks, id)
	return ok, nil
}

// EachID implements Backend. fn runs under the store's read lock and must not call back into it.
func (m *Memory) EachID(_ context.Context, fn func(id string)) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for id := range m.chunks {
		fn(id)
	}
	return nil
}

// Count implements Backend.
func (m *Memory) Count(context.Context) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.chunks), nil
}

// SetFetchLatency replaces the service-time law. Lookups already being served keep the time they
// drew.
func (m *Memory) SetFetchLatency(law latency.Law) { m.delay.Store(latency.NewDelay(law, m.seed)) }

// FetchLatency returns the service-time law.
func (m *Memory) FetchLatency() latency.Law { return m.delay.Load().Law() }

// BackendStats returns the store's lookup counters.
func (m *Memory) BackendStats() BackendStats {
	return BackendStats{
		Kind:         "memory",
		Lookups:      m.lookups.Load(),
		Missing:      m.missing.Load(),
		Concurrency:  m.Concurrency(),
		InUse:        int(m.inUse.Load()),
		Waiting:      int(m.waiting.Load()),
		Waited:       m.waited.Load(),
		WaitSeconds:  time.Duration(m.waitNanos.Load()).Seconds(),
		FetchLatency: m.FetchLatency().String(),
	}
}
