package service

import (
	"fmt"
	"io"
	"time"
)

// WriteText writes the summary of an ingest made with cfg, as ragtail ingest prints it: what
// was read and written, and the serve command line that retrieves from it with the same
// embedder.
func (s *IngestSummary) WriteText(w io.Writer, cfg IngestConfig) {
	rate := float64(s.Chunks) / max(s.Took.Seconds(), 1e-9)
	fmt.Fprintf(w, "ingested %d chunks (%d tokens) from %d documents of %s in %v (%.0f chunks/s)\n",
		s.Chunks, s.Tokens, s.Documents, s.Source, s.Took.Round(time.Millisecond), rate)
	fmt.Fprintf(w, "  embedder  %s\n", s.Embedder)
	embedFlags := serveEmbedFlags(cfg)
	if s.QdrantAddr != "" {
		names := s.QdrantFirst
		if s.QdrantShards > 1 {
			names += ".." + s.QdrantLast
		}
		fmt.Fprintf(w, "  qdrant    %s, %d shard collection(s) %s, %d points\n", s.QdrantAddr, s.QdrantShards, names, s.Points)
		switch {
		case s.Pruned > 0:
			fmt.Fprintf(w, "  pruned    %d points of chunks no longer in %s\n", s.Pruned, s.Source)
		case s.Stale > 0:
			fmt.Fprintf(w, "  stale     %d points are not from this ingest (removed or shortened files): --prune deletes them\n", s.Stale)
		}
		fmt.Fprintf(w, "  serve     ragtail serve --qdrant %s --qdrant-collection %s --shards %d %s\n", s.QdrantAddr, s.QdrantCollection, s.QdrantShards, embedFlags)
	}
	if s.DocStoreTable != "" {
		fmt.Fprintf(w, "  docstore  PostgreSQL table %s, %d chunks", s.DocStoreTable, s.DocStoreChunks)
		if s.DocStorePruned > 0 {
			fmt.Fprintf(w, " (%d pruned)", s.DocStorePruned)
		}
		fmt.Fprintf(w, "\n  serve     ragtail serve --docstore URL %s\n", embedFlags)
	}
	if s.Snapshot != "" {
		fmt.Fprintf(w, "  snapshot  %s (%.1f MB)\n", s.Snapshot, float64(s.SnapBytes)/1e6)
		fmt.Fprintf(w, "  serve     ragtail serve --snapshot %s %s\n", s.Snapshot, embedFlags)
	}
	if len(s.Skipped) > 0 {
		fmt.Fprintf(w, "  skipped   %d file(s):\n", len(s.Skipped))
		for _, sk := range s.Skipped {
			fmt.Fprintf(w, "            %s: %s\n", sk.Path, sk.Reason)
		}
	}
}

// serveEmbedFlags are the serve flags that embed queries as an ingest with cfg embedded chunks.
func serveEmbedFlags(cfg IngestConfig) string {
	if e := cfg.Backends.Embed; e.URL != "" {
		return fmt.Sprintf("--embed-url %s --embed-model %s", e.URL, e.Model)
	}
	return fmt.Sprintf("--dim %d --seed %d", cfg.Dim, cfg.Seed)
}

// IngestProgress returns an IngestConfig.Progress that writes a line to w at most every
// interval, with the rate and the time left; every <= 0 writes nothing.
func IngestProgress(w io.Writer, every time.Duration) func(done, total int) {
	start := time.Now()
	last := start
	return func(done, total int) {
		now := time.Now()
		if every <= 0 || done >= total || now.Sub(last) < every {
			return
		}
		last = now
		rate := float64(done) / max(now.Sub(start).Seconds(), 1e-9)
		left := time.Duration(float64(total-done) / max(rate, 1e-9) * float64(time.Second))
		fmt.Fprintf(w, "ingest: %d/%d chunks (%.0f%%), %.0f chunks/s, about %v left\n",
			done, total, 100*float64(done)/float64(total), rate, left.Round(time.Second))
	}
}
