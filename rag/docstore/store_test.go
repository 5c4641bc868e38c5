package docstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/pipeline"
)

var _ pipeline.DocStore = (*docstore.Store)(nil)

// makeChunks returns n chunks with ids chunk-00000, chunk-00001, ...
func makeChunks(tb testing.TB, n int) []rag.Chunk {
	tb.Helper()
	chunks := make([]rag.Chunk, n)
	for i := range chunks {
		id := fmt.Sprintf("chunk-%05d", i)
		chunks[i] = rag.Chunk{ID: id, DocID: fmt.Sprintf("doc-%04d", i/4), Title: "title " + id, Text: "text of " + id, Tokens: 3}
	}
	return chunks
}

// absentIDs returns n ids that no chunk of makeChunks has.
func absentIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("absent-%05d", i)
	}
	return ids
}

// referenceFilter builds the filter the store documents: sized for exactly the number of ids
// present when it is built (the store's floor of 64 ids does not apply at these sizes), so its
// answers are the store's answers. It lets tests pick ids that are not false positives.
func referenceFilter(tb testing.TB, ids []string, rate float64) *bloom.BloomFilter {
	tb.Helper()
	if len(ids) < 64 {
		tb.Fatalf("referenceFilter needs at least 64 ids to match the store's sizing, got %d", len(ids))
	}
	f := bloom.NewWithEstimates(uint(len(ids)), rate)
	for _, id := range ids {
		f.AddString(id)
	}
	return f
}

func idsOf(chunks []rag.Chunk) []string {
	ids := make([]string, len(chunks))
	for i, c := range chunks {
		ids[i] = c.ID
	}
	return ids
}

// lookup calls Lookup and fails the test on an error other than not found.
func lookup(tb testing.TB, s *docstore.Store, id string) (rag.Chunk, docstore.Result, error) {
	tb.Helper()
	c, res, err := s.Lookup(context.Background(), id)
	if err != nil && !errors.Is(err, rag.ErrNotFound) {
		tb.Fatalf("Lookup(%s): %v", id, err)
	}
	return c, res, err
}

func TestCacheHitSkipsStore(t *testing.T) {
	t.Parallel()
	const fetch = 30 * time.Millisecond
	chunks := makeChunks(t, 100)
	s := docstore.New(chunks, docstore.WithFetchLatency(latency.Fixed(fetch)))
	want := chunks[42]

	start := time.Now()
	got, res, err := s.Lookup(context.Background(), want.ID)
	elapsed := time.Since(start)
	if err != nil || got != want || res != docstore.ResultMiss {
		t.Fatalf("first Lookup = %+v, %s, %v; want %+v from the store (miss)", got, res, err, want)
	}
	if elapsed < fetch {
		t.Fatalf("first Lookup took %v, want at least the %v store latency", elapsed, fetch)
	}
	got, res, err = s.Lookup(context.Background(), want.ID)
	if err != nil || got != want || res != docstore.ResultHit {
		t.Fatalf("second Lookup = %+v, %s, %v; want %+v from the cache (hit)", got, res, err, want)
	}
	st := s.Stats()
	if st.StoreLookups != 1 || st.Hits != 1 || st.Misses != 1 || st.CacheLen != 1 {
		t.Fatalf("stats %+v; want 1 store lookup, 1 hit, 1 miss, 1 cached chunk", st)
	}
}

func TestBloomBlocksAbsentIDs(t *testing.T) {
	t.Parallel()
	chunks := makeChunks(t, 500)
	s := docstore.New(chunks, docstore.WithFetchLatency(latency.Fixed(time.Hour)))
	ref := referenceFilter(t, idsOf(chunks), docstore.DefaultBloomFalsePositiveRate)
	var probed int
	for _, id := range absentIDs(50) {
		if ref.TestString(id) {
			continue // a false positive would go to the store and wait an hour
		}
		probed++
		_, res, err := s.Lookup(context.Background(), id)
		if !errors.Is(err, rag.ErrNotFound) || res != docstore.ResultBlocked {
			t.Fatalf("Lookup(%s) = %s, %v; want blocked with rag.ErrNotFound", id, res, err)
		}
	}
	st := s.Stats()
	if probed < 40 || st.Blocked != uint64(probed) || st.StoreLookups != 0 || st.Misses != 0 {
		t.Fatalf("probed %d absent ids, stats %+v; want all blocked, no store lookup", probed, st)
	}
}

func TestWithoutBloomAbsentIDsReachStore(t *testing.T) {
	t.Parallel()
	const fetch = 10 * time.Millisecond
	s := docstore.New(makeChunks(t, 100), docstore.WithoutBloom(), docstore.WithFetchLatency(latency.Fixed(fetch)))
	absent := absentIDs(3)
	start := time.Now()
	for round := range 2 { // the second round shows absent ids are not cached either
		for _, id := range absent {
			if _, res, err := s.Lookup(context.Background(), id); !errors.Is(err, rag.ErrNotFound) || res != docstore.ResultMiss {
				t.Fatalf("round %d: Lookup(%s) = %s, %v; want a miss with rag.ErrNotFound", round, id, res, err)
			}
		}
	}
	elapsed := time.Since(start)
	n := uint64(2 * len(absent))
	st := s.Stats()
	if st.BloomEnabled || st.Blocked != 0 || st.StoreLookups != n || st.StoreMissingLookups != n || st.CacheLen != 0 {
		t.Fatalf("stats %+v; want guard off and %d store lookups, all for missing ids, nothing cached", st, n)
	}
	if want := time.Duration(n) * fetch; elapsed < want {
		t.Fatalf("%d absent lookups took %v, want at least %v: each pays the store latency", n, elapsed, want)
	}
}

func TestDeleteAndRebuildBloom(t *testing.T) {
	t.Parallel()
	chunks := makeChunks(t, 200)
	s := docstore.New(chunks)
	// Pick a chunk whose id the rebuilt filter (over the 199 others) rules out.
	var victim string
	for i, c := range chunks {
		rest := append(idsOf(chunks[:i:i]), idsOf(chunks[i+1:])...)
		if !referenceFilter(t, rest, docstore.DefaultBloomFalsePositiveRate).TestString(c.ID) {
			victim = c.ID
			break
		}
	}
	if victim == "" {
		t.Fatal("every candidate is a false positive of the rebuilt filter")
	}
	if _, res, err := lookup(t, s, victim); err != nil || res != docstore.ResultMiss {
		t.Fatalf("Lookup before delete = %s, %v; want a miss that finds it", res, err)
	}
	if !s.Delete(victim) || s.Delete(victim) {
		t.Fatal("Delete must report true once, then false")
	}
	if s.Len() != len(chunks)-1 {
		t.Fatalf("Len = %d after Delete, want %d", s.Len(), len(chunks)-1)
	}
	before := s.Stats()
	if _, res, err := lookup(t, s, victim); !errors.Is(err, rag.ErrNotFound) || res != docstore.ResultMiss {
		t.Fatalf("Lookup after Delete = %s, %v; want a miss to the store (not the stale cache entry)", res, err)
	}
	after := s.Stats()
	if after.StoreMissingLookups != before.StoreMissingLookups+1 {
		t.Fatalf("missing-id store lookups went %d -> %d; want +1: the filter still passes a deleted id",
			before.StoreMissingLookups, after.StoreMissingLookups)
	}
	s.RebuildBloom()
	if _, res, err := lookup(t, s, victim); !errors.Is(err, rag.ErrNotFound) || res != docstore.ResultBlocked {
		t.Fatalf("Lookup after RebuildBloom = %s, %v; want blocked", res, err)
	}
	if st := s.Stats(); st.StoreLookups != after.StoreLookups {
		t.Fatalf("store lookups went %d -> %d after rebuild; want none", after.StoreLookups, st.StoreLookups)
	}
}

func TestLRUEvictionOrder(t *testing.T) {
	t.Parallel()
	s := docstore.New(makeChunks(t, 100), docstore.WithCache(2))
	steps := []struct {
		name string
		id   string
		want docstore.Result
	}{
		{name: "a cold", id: "chunk-00001", want: docstore.ResultMiss},
		{name: "b cold", id: "chunk-00002", want: docstore.ResultMiss},
		{name: "a warm, now most recent", id: "chunk-00001", want: docstore.ResultHit},
		{name: "c cold evicts b, the least recent", id: "chunk-00003", want: docstore.ResultMiss},
		{name: "a survived", id: "chunk-00001", want: docstore.ResultHit},
		{name: "b was evicted", id: "chunk-00002", want: docstore.ResultMiss},
		{name: "c evicted by b", id: "chunk-00003", want: docstore.ResultMiss},
		{name: "b cached again", id: "chunk-00002", want: docstore.ResultHit},
	}
	var wantLookups uint64
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if _, res, err := lookup(t, s, step.id); err != nil || res != step.want {
				t.Fatalf("Lookup(%s) = %s, %v; want %s", step.id, res, err, step.want)
			}
			if step.want == docstore.ResultMiss {
				wantLookups++
			}
			if st := s.Stats(); st.StoreLookups != wantLookups || st.CacheLen > 2 {
				t.Fatalf("stats %+v; want %d store lookups, at most 2 cached", st, wantLookups)
			}
		})
	}
}

// TestBloomFalsePositiveRate measures the guard's false-positive rate over fixed absent ids.
//
// Each absent id passes a filter of n ids with probability p, the configured rate (the filter's
// rounded m and k put its exact design rate within a few percent of p: 0.01003 for p = 0.01,
// 0.0511 for p = 0.05). Over N independent absent ids the number passing is Binomial(N, p), so
// the measured rate p̂ has standard error sigma = sqrt(p(1-p)/N): 7.0e-4 for p = 0.01 and
// N = 20000. We accept |p̂ - p| <= 4 sigma, which a correct filter fails with probability about
// 6e-5 (two-sided normal tail); the spread of the filter's own fill ratio adds well under 1% of
// sigma at these sizes. A filter with k or m off by one, or one overloaded beyond its capacity,
// lands outside. The ids are fixed and the hash is unseeded, so the outcome is deterministic.
func TestBloomFalsePositiveRate(t *testing.T) {
	t.Parallel()
	const n, probes = 10_000, 20_000
	chunks := makeChunks(t, n)
	tests := []struct {
		name string
		rate float64
	}{
		{name: "default 1%", rate: docstore.DefaultBloomFalsePositiveRate},
		{name: "5%", rate: 0.05},
		{name: "0.5%", rate: 0.005},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := docstore.New(chunks, docstore.WithBloom(tt.rate))
			measured := measureFalsePositiveRate(t, s, probes)
			sigma := math.Sqrt(tt.rate * (1 - tt.rate) / probes)
			t.Logf("measured %.5f, configured %.5f, sigma %.5f", measured, tt.rate, sigma)
			if math.Abs(measured-tt.rate) > 4*sigma {
				t.Fatalf("false-positive rate %.5f over %d absent ids, want %.5f ± %.5f (4 sigma)", measured, probes, tt.rate, 4*sigma)
			}
			if st := s.Stats(); st.BloomFalsePositiveRate != tt.rate || !st.BloomEnabled {
				t.Fatalf("stats %+v; want the guard on at %v", st, tt.rate)
			}
		})
	}
}

// measureFalsePositiveRate looks up probes absent ids and returns the fraction the guard let
// through. It also checks that no present id is blocked (a Bloom filter has no false negatives).
func measureFalsePositiveRate(tb testing.TB, s *docstore.Store, probes int) float64 {
	tb.Helper()
	before := s.Stats()
	for _, id := range absentIDs(probes) {
		if _, _, err := lookup(tb, s, id); !errors.Is(err, rag.ErrNotFound) {
			tb.Fatalf("Lookup(%s) found an absent id", id)
		}
	}
	after := s.Stats()
	passed := after.StoreMissingLookups - before.StoreMissingLookups
	if got := passed + after.Blocked - before.Blocked; got != uint64(probes) {
		tb.Fatalf("%d absent lookups were either blocked or looked up, want %d", got, probes)
	}
	return float64(passed) / float64(probes)
}

func TestGrowthKeepsFalsePositiveRate(t *testing.T) {
	t.Parallel()
	const probes = 20_000
	// Start at the filter's 64-id floor, then grow 50-fold: without rebuilding on growth the
	// filter would pass nearly every absent id.
	all := makeChunks(t, 3200)
	s := docstore.New(all[:64])
	for _, c := range all[64:] {
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range all {
		if _, res, err := lookup(t, s, c.ID); err != nil || res == docstore.ResultBlocked {
			t.Fatalf("Lookup(%s) = %s, %v; a present id must never be blocked", c.ID, res, err)
		}
	}
	// Rebuilds size the filter for up to twice the ids it holds, so the rate is at most the
	// configured one; allow the same 4-sigma sampling error as TestBloomFalsePositiveRate.
	p := docstore.DefaultBloomFalsePositiveRate
	sigma := math.Sqrt(p * (1 - p) / probes)
	if got := measureFalsePositiveRate(t, s, probes); got > p+4*sigma {
		t.Fatalf("false-positive rate %.5f after growth, want at most %.5f + 4 sigma (%.5f)", got, p, 4*sigma)
	}
}

func TestPutUpdatesStoreCacheAndBloom(t *testing.T) {
	t.Parallel()
	chunks := makeChunks(t, 100)
	s := docstore.New(chunks)
	// A new id passes the guard and is found.
	fresh := rag.Chunk{ID: "fresh#0", DocID: "fresh", Text: "new text"}
	if err := s.Put(fresh); err != nil {
		t.Fatal(err)
	}
	if got, _, err := lookup(t, s, fresh.ID); err != nil || got != fresh {
		t.Fatalf("Lookup(new id) = %+v, %v; want %+v", got, err, fresh)
	}
	// Replacing a cached chunk replaces the cached copy too.
	id := chunks[7].ID
	if _, _, err := lookup(t, s, id); err != nil {
		t.Fatal(err)
	}
	updated := chunks[7]
	updated.Text = "revised"
	if err := s.Put(updated); err != nil {
		t.Fatal(err)
	}
	got, res, err := lookup(t, s, id)
	if err != nil || res != docstore.ResultHit || got.Text != "revised" {
		t.Fatalf("Lookup after Put = %+v, %s, %v; want the revised chunk from the cache", got, res, err)
	}
	if s.Len() != len(chunks)+1 {
		t.Fatalf("Len = %d, want %d", s.Len(), len(chunks)+1)
	}
	if err := s.Put(rag.Chunk{Text: "no id"}); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Fatalf("Put without id: %v, want rag.ErrInvalidRequest", err)
	}
}

func TestRuntimeSettings(t *testing.T) {
	t.Parallel()
	chunks := makeChunks(t, 100)
	s := docstore.New(chunks)
	if st := s.Stats(); st.CacheSize != docstore.DefaultCacheSize || !st.BloomEnabled ||
		st.BloomFalsePositiveRate != docstore.DefaultBloomFalsePositiveRate {
		t.Fatalf("default stats %+v; want cache %d, guard on at %v", st, docstore.DefaultCacheSize, docstore.DefaultBloomFalsePositiveRate)
	}
	ref := referenceFilter(t, idsOf(chunks), 0.05)
	var absent string
	for _, id := range absentIDs(100) {
		if !ref.TestString(id) {
			absent = id
			break
		}
	}
	if absent == "" {
		t.Fatal("no absent id is ruled out by a 5% filter among 100 tries")
	}
	present := chunks[3].ID
	steps := []struct {
		name        string
		change      func() error
		id          string
		want        docstore.Result
		wantSize    int
		wantBloomOn bool
	}{
		{name: "warm the cache", change: func() error { return nil }, id: present, want: docstore.ResultMiss, wantSize: docstore.DefaultCacheSize, wantBloomOn: true},
		{name: "cached", change: func() error { return nil }, id: present, want: docstore.ResultHit, wantSize: docstore.DefaultCacheSize, wantBloomOn: true},
		{name: "cache off purges", change: func() error { return s.SetCache(0) }, id: present, want: docstore.ResultMiss, wantSize: 0, wantBloomOn: true},
		{name: "still off", change: func() error { return nil }, id: present, want: docstore.ResultMiss, wantSize: 0, wantBloomOn: true},
		{name: "cache back on", change: func() error { return s.SetCache(8) }, id: present, want: docstore.ResultMiss, wantSize: 8, wantBloomOn: true},
		{name: "cached again", change: func() error { return nil }, id: present, want: docstore.ResultHit, wantSize: 8, wantBloomOn: true},
		{name: "guard off lets absent ids through", change: func() error { return s.SetBloom(false, 0) }, id: absent, want: docstore.ResultMiss, wantSize: 8},
		{name: "guard on at 5% blocks", change: func() error { return s.SetBloom(true, 0.05) }, id: absent, want: docstore.ResultBlocked, wantSize: 8, wantBloomOn: true},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if err := step.change(); err != nil {
				t.Fatal(err)
			}
			if _, res, _ := lookup(t, s, step.id); res != step.want {
				t.Fatalf("Lookup(%s) = %s, want %s", step.id, res, step.want)
			}
			if st := s.Stats(); st.CacheSize != step.wantSize || st.BloomEnabled != step.wantBloomOn {
				t.Fatalf("stats %+v; want cache size %d, guard on %v", st, step.wantSize, step.wantBloomOn)
			}
		})
	}
	if st := s.Stats(); st.BloomFalsePositiveRate != 0.05 {
		t.Fatalf("configured rate %v, want 0.05", st.BloomFalsePositiveRate)
	}
	law := latency.Fixed(3 * time.Millisecond)
	s.SetFetchLatency(law)
	if got := s.FetchLatency(); got != law {
		t.Fatalf("FetchLatency = %v, want %v", got, law)
	}

	invalid := []struct {
		name string
		call func() error
	}{
		{name: "negative cache", call: func() error { return s.SetCache(-1) }},
		{name: "zero rate", call: func() error { return s.SetBloom(true, 0) }},
		{name: "rate of one", call: func() error { return s.SetBloom(true, 1) }},
		{name: "NaN rate", call: func() error { return s.SetBloom(true, math.NaN()) }},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("error %v, want rag.ErrInvalidRequest", err)
			}
		})
	}
	if st := s.Stats(); st.CacheSize != 8 || !st.BloomEnabled || st.BloomFalsePositiveRate != 0.05 {
		t.Fatalf("stats %+v after rejected changes; want them unchanged", st)
	}
}

func TestCancelDuringStoreWait(t *testing.T) {
	t.Parallel()
	const law = 10 * time.Second
	s := docstore.New(makeChunks(t, 10), docstore.WithFetchLatency(latency.Fixed(law)))
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(20*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	_, res, err := s.Lookup(ctx, "chunk-00001")
	elapsed := time.Since(start)
	if !errors.Is(err, context.Canceled) || res != docstore.ResultMiss {
		t.Fatalf("Lookup = %s, %v; want a miss with context.Canceled", res, err)
	}
	// The bound only separates "returned on cancel" from "waited out the law".
	if elapsed >= law/2 {
		t.Fatalf("Lookup returned after %v, want it to return on cancel", elapsed)
	}
	if st := s.Stats(); st.StoreLookups != 0 || st.CacheLen != 0 {
		t.Fatalf("stats %+v; a cancelled wait must not count a store lookup or cache anything", st)
	}
}

func TestPeriodicRebuild(t *testing.T) {
	t.Parallel()
	chunks := makeChunks(t, 100)
	s := docstore.New(chunks, docstore.WithBloomRebuildEvery(5*time.Millisecond))
	defer s.Close()
	ref := referenceFilter(t, idsOf(chunks[1:]), docstore.DefaultBloomFalsePositiveRate)
	if ref.TestString(chunks[0].ID) {
		t.Fatalf("%s is a false positive of the rebuilt filter; pick another id", chunks[0].ID)
	}
	s.Delete(chunks[0].ID)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, res, _ := lookup(t, s, chunks[0].ID); res == docstore.ResultBlocked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted id still passes the guard 5 s after deletion with a 5 ms rebuild period")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
}

// TestConcurrentUse runs lookups, mutations and setting changes at once; run with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	chunks := makeChunks(t, 300)
	s := docstore.New(chunks, docstore.WithCache(32), docstore.WithBloomRebuildEvery(time.Millisecond))
	defer s.Close()
	const readers, perReader = 4, 500
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Go(func() {
			for i := range perReader {
				id := chunks[(r*perReader+i*7)%len(chunks)].ID
				if i%5 == 0 {
					id = fmt.Sprintf("absent-%d", i)
				}
				c, _, err := s.Lookup(context.Background(), id)
				if err != nil && !errors.Is(err, rag.ErrNotFound) {
					errs <- err
					return
				}
				if err == nil && c.ID != id {
					errs <- fmt.Errorf("Lookup(%s) returned chunk %s", id, c.ID)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			c := chunks[i%len(chunks)]
			if i%3 == 0 {
				s.Delete(c.ID)
			} else {
				c.Text = fmt.Sprintf("edit %d", i)
				_ = s.Put(c)
			}
		}
	})
	wg.Go(func() {
		for i := range 60 {
			_ = s.SetCache(i % 40)
			_ = s.SetBloom(i%4 != 0, 0.01+float64(i%3)/100)
			s.SetFetchLatency(latency.Fixed(time.Duration(i%2) * time.Microsecond))
			_ = s.Stats()
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := s.Stats()
	if total := st.Hits + st.Misses + st.Blocked; total != readers*perReader {
		t.Fatalf("hits+misses+blocked = %d, want %d lookups", total, readers*perReader)
	}
	if st.StoreLookups != st.Misses {
		t.Fatalf("%d store lookups for %d misses; with no cancellation every miss reaches the store", st.StoreLookups, st.Misses)
	}
}
