package docstore_test

import (
	"context"
	"fmt"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/docstore"
)

// ExampleStore_Lookup shows the three ways a lookup is answered: by the backing store (a miss,
// which pays the store latency), by the cache, or by the Bloom guard for an id that cannot exist.
func ExampleStore_Lookup() {
	store := docstore.New([]rag.Chunk{
		{ID: "doc-1#0", DocID: "doc-1", Text: "Tail latency is dominated by the slowest shard."},
	})
	defer store.Close()

	for _, id := range []string{"doc-1#0", "doc-1#0", "doc-9#9"} {
		chunk, result, err := store.Lookup(context.Background(), id)
		fmt.Printf("%s: %s %q %v\n", id, result, chunk.Text, err)
	}
	st := store.Stats()
	fmt.Printf("hits %d, misses %d, blocked %d, store lookups %d\n", st.Hits, st.Misses, st.Blocked, st.StoreLookups)
	// Output:
	// doc-1#0: miss "Tail latency is dominated by the slowest shard." <nil>
	// doc-1#0: hit "Tail latency is dominated by the slowest shard." <nil>
	// doc-9#9: blocked "" chunk "doc-9#9": not found
	// hits 1, misses 1, blocked 1, store lookups 1
}
