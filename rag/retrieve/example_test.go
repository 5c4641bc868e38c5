package retrieve_test

import (
	"context"
	"fmt"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// ExampleMemory_Search searches every shard, as the pipeline's fanout does, and merges the
// shards' hits into the global top 2.
func ExampleMemory_Search() {
	index, err := retrieve.NewMemory(2, 3, retrieve.WithCollection("compass"))
	if err != nil {
		panic(err)
	}
	_ = index.AddBatch(
		[]string{"north", "east", "north-east", "south"},
		[][]float32{{0, 1}, {1, 0}, {1, 1}, {0, -1}},
	)

	query := []float32{0.2, 1} // mostly north, a little east
	var perShard [][]rag.Hit
	for shard := range index.Shards() {
		hits, err := index.Search(context.Background(), shard, query, 2)
		if err != nil {
			panic(err)
		}
		perShard = append(perShard, hits)
	}
	for _, h := range retrieve.MergeHits(2, perShard...) {
		fmt.Printf("%s %.3f\n", h.ChunkID, h.Score)
	}
	// Output:
	// north 0.981
	// north-east 0.832
}
