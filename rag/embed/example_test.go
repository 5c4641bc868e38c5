package embed_test

import (
	"context"
	"fmt"

	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/latency"
)

func ExampleHash() {
	// No simulated service time: embed at once, as when seeding an index.
	h, err := embed.NewHash(embed.WithLatency(latency.Law{}, 0))
	if err != nil {
		panic(err)
	}
	query, err := h.Embed(context.Background(), "Why does a Bloom filter stop cache penetration?")
	if err != nil {
		panic(err)
	}
	onTopic := h.Vector("A Bloom filter of existing keys rejects lookups for keys that cannot exist.")
	offTopic := h.Vector("Continuous batching admits new sequences between decode steps.")
	fmt.Println(h.Model(), len(query))
	fmt.Println("on-topic chunk scores higher:", embed.Cosine(query, onTopic) > embed.Cosine(query, offTopic))
	// Output:
	// ragtail-hash-384 384
	// on-topic chunk scores higher: true
}
