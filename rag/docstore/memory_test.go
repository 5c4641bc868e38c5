package docstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testpeer"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/latency"
)

// TestMemoryConcurrencyQueues checks finite capacity at the mechanism: with n slots and a fixed
// service time, the k-th of a burst of lookups cannot finish before ceil(k/n) service times,
// because each slot serves one lookup at a time; the lookups that found every slot busy are
// counted as waiting. Without the bound, nothing waits.
func TestMemoryConcurrencyQueues(t *testing.T) {
	t.Parallel()
	const service = 20 * time.Millisecond
	const burst = 10
	cases := []struct {
		name        string
		concurrency int
	}{
		{name: "two slots", concurrency: 2},
		{name: "three slots", concurrency: 3},
		{name: "unbounded", concurrency: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chunks := makeChunks(t, burst)
			m := docstore.NewMemory(chunks, docstore.MemoryConfig{ServiceTime: latency.Fixed(service), Concurrency: tc.concurrency})
			start := time.Now()
			done := make([]time.Duration, burst)
			var wg sync.WaitGroup
			for i, c := range chunks {
				wg.Go(func() {
					if _, err := m.Fetch(context.Background(), c.ID); err != nil {
						t.Error(err)
					}
					done[i] = time.Since(start)
				})
			}
			wg.Wait()
			slices.Sort(done)
			st := m.BackendStats()
			if st.Lookups != burst || st.InUse != 0 || st.Waiting != 0 || st.Concurrency != tc.concurrency {
				t.Fatalf("stats %+v; want %d lookups, none in use or waiting, concurrency %d", st, burst, tc.concurrency)
			}
			if tc.concurrency == 0 {
				if st.Waited != 0 {
					t.Fatalf("an unbounded store queued %d lookups", st.Waited)
				}
				return
			}
			for k, d := range done {
				rounds := (k + tc.concurrency) / tc.concurrency // ceil((k+1)/n)
				if floor := time.Duration(rounds) * service; d < floor {
					t.Fatalf("lookup %d of %d finished after %v, before %d rounds of %v on %d slots",
						k+1, burst, d, rounds, service, tc.concurrency)
				}
			}
			if st.Waited == 0 || st.WaitSeconds <= 0 {
				t.Fatalf("stats %+v; want queued lookups and their wait", st)
			}
		})
	}
}

func TestMemoryConcurrencyCancelWhileQueued(t *testing.T) {
	t.Parallel()
	m := docstore.NewMemory(makeChunks(t, 2), docstore.MemoryConfig{ServiceTime: latency.Fixed(10 * time.Second), Concurrency: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = m.Fetch(ctx, "chunk-00000") }() // holds the only slot
	for m.BackendStats().InUse == 0 {
		time.Sleep(time.Millisecond)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if _, err := m.Fetch(short, "chunk-00001"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued Fetch past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if st := m.BackendStats(); st.Waiting != 0 || st.Waited != 1 {
		t.Fatalf("stats %+v; want the queued lookup counted once and gone", st)
	}
}

func TestStoreWithConcurrency(t *testing.T) {
	t.Parallel()
	s := docstore.New(makeChunks(t, 10), docstore.WithConcurrency(4), docstore.WithFetchLatency(latency.Fixed(time.Millisecond)))
	if _, _, err := lookup(t, s, "chunk-00001"); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Backend.Kind != "memory" || st.Backend.Concurrency != 4 || st.Backend.Lookups != 1 || st.Backend.FetchLatency != "fixed:1ms" {
		t.Fatalf("backend stats %+v; want memory, concurrency 4, 1 lookup, fixed:1ms", st.Backend)
	}
	for _, n := range []int{1, 0, 8} {
		if err := s.SetConcurrency(n); err != nil {
			t.Fatal(err)
		}
		if got := s.Stats().Backend.Concurrency; got != n {
			t.Fatalf("after SetConcurrency(%d) the backend serves %d at once", n, got)
		}
		if _, _, err := lookup(t, s, "chunk-00002"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetConcurrency(-1); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Fatalf("SetConcurrency(-1): %v, want rag.ErrInvalidRequest", err)
	}
}

// TestCachePolicyScanResistance is the cache-pollution mechanism: hot ids are read twice, then a
// scan of cold ids many times the cache's size passes once, then the hot ids are read again.
// LRU has evicted every hot id; 2Q and ARC keep them, since the scan's ids were seen only once.
func TestCachePolicyScanResistance(t *testing.T) {
	t.Parallel()
	const size, hot, cold = 100, 50, 1000
	cases := []struct {
		policy      docstore.CachePolicy
		wantHotHits int
	}{
		{docstore.PolicyLRU, 0},
		{docstore.Policy2Q, hot},
		{docstore.PolicyARC, hot},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := docstore.NewMemoryCache(tc.policy, size)
			if err != nil {
				t.Fatal(err)
			}
			read := func(id string) bool {
				if _, ok, _ := c.Get(ctx, id); ok {
					return true
				}
				_ = c.Add(ctx, rag.Chunk{ID: id})
				return false
			}
			for range 2 {
				for i := range hot {
					read(fmt.Sprintf("hot-%d", i))
				}
			}
			for i := range cold {
				read(fmt.Sprintf("cold-%d", i))
			}
			hits := 0
			for i := range hot {
				if read(fmt.Sprintf("hot-%d", i)) {
					hits++
				}
			}
			if hits != tc.wantHotHits {
				t.Fatalf("%s: %d of %d hot ids still cached after a scan of %d cold ids, want %d", tc.policy, hits, hot, cold, tc.wantHotHits)
			}
			if c.Len() > size {
				t.Fatalf("%s: %d chunks cached, more than the size %d", tc.policy, c.Len(), size)
			}
		})
	}
}

func TestSetCachePolicy(t *testing.T) {
	t.Parallel()
	s := docstore.New(makeChunks(t, 10), docstore.WithCache(16))
	if _, _, err := lookup(t, s, "chunk-00001"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []docstore.CachePolicy{docstore.Policy2Q, docstore.PolicyARC, docstore.PolicyLRU} {
		if err := s.SetCachePolicy(p); err != nil {
			t.Fatal(err)
		}
		st := s.Stats()
		if st.CacheKind != string(p) || st.CacheSize != 16 || st.CacheLen != 0 {
			t.Fatalf("after SetCachePolicy(%s): %+v; want an empty %s cache of 16", p, st, p)
		}
		if _, res, _ := lookup(t, s, "chunk-00001"); res != docstore.ResultMiss {
			t.Fatalf("%s: first lookup %s, want miss", p, res)
		}
		if _, res, _ := lookup(t, s, "chunk-00001"); res != docstore.ResultHit {
			t.Fatalf("%s: second lookup %s, want hit", p, res)
		}
		if err := s.SetCache(4); err != nil { // resizing works for every policy
			t.Fatal(err)
		}
		if err := s.SetCache(16); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCachePolicy("mru"); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Fatalf("unknown policy: %v, want rag.ErrInvalidRequest", err)
	}
	if _, err := docstore.ParseCachePolicy(" 2Q "); err != nil {
		t.Fatal(err)
	}

	r := testpeer.StartRedis(t)
	remote, err := docstore.Compose(context.Background(), docstore.NewMemory(nil, docstore.MemoryConfig{}), docstore.WithCacheTier(openRedis(t, r)))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.SetCachePolicy(docstore.Policy2Q); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Fatalf("policy of a redis tier: %v, want rag.ErrInvalidRequest", err)
	}
}
