package docstore_test

import (
	"context"
	"testing"

	"github.com/ragtail/ragtail/rag/docstore"
)

// BenchmarkGetCacheHit measures the hot path: the Bloom guard, then a cache hit. The store has
// a fetch latency of zero, but no iteration reaches it, which the benchmark checks.
func BenchmarkGetCacheHit(b *testing.B) {
	chunks := makeChunks(b, 10_000)
	s := docstore.New(chunks, docstore.WithCache(len(chunks)))
	ctx := context.Background()
	for _, c := range chunks {
		if _, err := s.Get(ctx, c.ID); err != nil {
			b.Fatal(err)
		}
	}
	ids := idsOf(chunks)
	before := s.Stats().StoreLookups
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := s.Get(ctx, ids[i%len(ids)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := s.Get(ctx, ids[i%len(ids)]); err != nil {
					b.Fatal(err)
				}
				i += 7
			}
		})
	})
	if after := s.Stats().StoreLookups; after != before {
		b.Fatalf("%d store lookups during a cache-hit benchmark, want none", after-before)
	}
}
