package embed_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/embed"
)

const (
	benchQuery = "How does the bloom filter keep missing keys away from the document store?"
	benchChunk = "A Bloom filter of existing keys answers \"definitely not present\" for most keys " +
		"that do not exist, so lookups for deleted or malicious ids never reach the cache or the store. "
)

func BenchmarkHashVector(b *testing.B) {
	h := newHash(b)
	tests := []struct {
		name, text string
	}{
		{name: "query", text: benchQuery},
		{name: "chunk-256-tokens", text: strings.Repeat(benchChunk, 256/rag.CountTokens(benchChunk))},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tt.text)))
			for b.Loop() {
				h.Vector(tt.text)
			}
		})
	}
}

// BenchmarkClientEmbed is one round trip over loopback to an embeddings server, the cost the
// client adds on top of the model's.
func BenchmarkClientEmbed(b *testing.B) {
	for _, dim := range []int{384, 1536} {
		b.Run("dim="+strconv.Itoa(dim), func(b *testing.B) {
			_, srv := newEmbeddingsServer(b, dim)
			c, err := embed.NewClient(srv.URL, "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Embed(b.Context(), benchQuery); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
