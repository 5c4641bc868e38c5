package retrieve_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ragtail/ragtail/rag/retrieve"
)

// BenchmarkSearchTop10_100kx384 measures exact top-10 search over 100k random unit vectors of
// 384 components, a typical sentence-embedding size, with no shard latency: the figure is pure
// scan cost. The index is built once (about 150 MB of vectors) and resharded between the
// sub-benchmarks; each one searches every shard through SearchAll.
func BenchmarkSearchTop10_100kx384(b *testing.B) {
	const n, dim, k = 100_000, 384, 10
	m, err := retrieve.NewMemory(dim, 1)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(42, 43))
	const batch = 10_000
	ids := make([]string, batch)
	vecs := make([][]float32, batch)
	for start := 0; start < n; start += batch {
		for i := range batch {
			ids[i] = fmt.Sprintf("chunk-%06d", start+i)
			vecs[i] = randomVector(r, dim)
		}
		if err := m.AddBatch(ids, vecs); err != nil {
			b.Fatal(err)
		}
	}
	queries := make([][]float32, 64)
	for i := range queries {
		queries[i] = randomVector(r, dim)
	}
	ctx := context.Background()
	for _, shards := range []int{1, 4} {
		if err := m.Reshard(shards); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				hits, err := m.SearchAll(ctx, queries[i%len(queries)], k)
				if err != nil || len(hits) != k {
					b.Fatalf("SearchAll: %d hits, %v", len(hits), err)
				}
				i++
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "vectors/s")
		})
	}
}
