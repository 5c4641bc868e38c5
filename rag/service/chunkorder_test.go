package service

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// TestRuntimeChunkOrder: chunk_order in /admin/config reaches the pipeline, and a value that
// is neither score nor stable is refused without changing anything.
func TestRuntimeChunkOrder(t *testing.T) {
	t.Parallel()
	svc, _, _ := testService(t)
	if got := svc.Runtime.Config().ChunkOrder; got != "score" {
		t.Fatalf("chunk_order %q at start, want score", got)
	}
	if _, err := svc.Runtime.Apply(context.Background(), []byte(`{"chunk_order":"stable"}`)); err != nil {
		t.Fatal(err)
	}
	if got, pc := svc.Runtime.Config().ChunkOrder, svc.Pipeline.Config().ChunkOrder; got != "stable" || pc != pipeline.ChunkOrderStable {
		t.Fatalf("after a PUT of stable: chunk_order %q, pipeline %q", got, pc)
	}
	before := svc.Runtime.Config()
	_, err := svc.Runtime.Apply(context.Background(), []byte(`{"chunk_order":"random"}`))
	if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), "want score or stable") {
		t.Fatalf("PUT of random: %v, want an invalid request naming score and stable", err)
	}
	if after := svc.Runtime.Config(); after.Version != before.Version || svc.Pipeline.Config().ChunkOrder != pipeline.ChunkOrderStable {
		t.Errorf("a refused PUT changed the config: version %d -> %d", before.Version, after.Version)
	}
}

func TestConfigChunkOrderFlag(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.ChunkOrder = "by-id"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--chunk-order") {
		t.Errorf("Validate: %v, want an error naming --chunk-order", err)
	}
	cfg.ChunkOrder = "stable"
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate with stable: %v", err)
	}
}
