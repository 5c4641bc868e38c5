package embed_test

import (
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/pipeline"
)

var (
	_ pipeline.Embedder = (*embed.Hash)(nil)
	_ pipeline.Embedder = (*embed.Client)(nil)
)
