package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// IngestConfig says what Ingest reads and where it writes. Start from DefaultIngestConfig.
type IngestConfig struct {
	// Dir is read recursively for .md, .markdown and .txt files; "" ingests the built-in corpus
	// of CorpusDocs documents and Seed.
	Dir        string
	CorpusDocs int
	// ChunkTokens is the target chunk length; ChunkOverlap the tokens repeated at the start of
	// the next chunk (0: none).
	ChunkTokens, ChunkOverlap int
	// Backends.Qdrant (when its Addr is set) receives the chunks and vectors, in Shards
	// collections; Backends.DocStore (a PostgreSQL URL) the chunk payloads; Backends.Embed (when its URL is set) embeds them, else the hash embedder of
	// Dim and Seed.
	Backends Backends
	Shards   int
	Dim      int
	Seed     uint64
	// Snapshot, when set, is the snapshot file written (atomically).
	Snapshot string
	// Batch is the chunks embedded and written per round.
	Batch int
	// Prune deletes the Qdrant points of chunks not in this ingest.
	Prune bool
	// Progress, when set, is called after every round with the chunks written so far.
	Progress func(done, total int)
}

// DefaultIngestConfig returns the defaults of ragtail ingest.
func DefaultIngestConfig() IngestConfig {
	return IngestConfig{ChunkTokens: 256, ChunkOverlap: 32, Backends: DefaultConfig().Backends, Shards: 4,
		Dim: embed.DefaultDimension, Seed: 1, Batch: retrieve.DefaultQdrantBatchSize}
}

// Validate checks the settings before anything is read or written.
func (o IngestConfig) Validate() error {
	switch {
	case o.Backends.Qdrant.Addr == "" && o.Snapshot == "" && o.Backends.DocStore == "":
		return errors.New("say where the chunks go: --qdrant host:6334, --snapshot FILE, --docstore postgres://..., or several")
	case o.Shards < 1 || o.Shards > MaxShards:
		return fmt.Errorf("--shards must be between 1 and %d, got %d", MaxShards, o.Shards)
	case o.Dim < 1:
		return fmt.Errorf("--dim must be at least 1, got %d", o.Dim)
	case o.Batch < 1:
		return fmt.Errorf("--batch must be at least 1, got %d", o.Batch)
	case o.CorpusDocs < 0:
		return fmt.Errorf("--corpus-docs must not be negative, got %d", o.CorpusDocs)
	case o.ChunkOverlap < 0:
		return fmt.Errorf("--chunk-overlap must not be negative, got %d", o.ChunkOverlap)
	case o.Prune && o.Backends.Qdrant.Addr == "" && o.Backends.DocStore == "":
		return errors.New("--prune deletes the chunks no longer ingested from Qdrant and the doc store: it needs --qdrant or --docstore")
	}
	return o.Backends.Validate()
}

// IngestSummary is what an ingest did.
type IngestSummary struct {
	Source    string           // the directory, or "the built-in corpus"
	Documents int              // documents read
	Chunks    int              // chunks made
	Written   int              // chunks embedded and written
	Tokens    int              // tokens in the chunks
	Skipped   []corpus.Skipped // files not ingested, with the reason
	Embedder  string           // the embedder's id (Backends.EmbedderID)
	Dim       int              // the vector size
	Points    int              // in Qdrant after the ingest; -1 if not counted
	Stale     int              // Qdrant points not from this ingest
	Pruned    int              // points deleted by Prune
	Snapshot  string           // the snapshot written, if any
	// DocStoreTable is the PostgreSQL table written ("" without --docstore), holding
	// DocStoreChunks chunks after the ingest; DocStorePruned were deleted by Prune.
	DocStoreTable                  string
	DocStoreChunks, DocStorePruned int
	SnapBytes                      int64 // its size
	Took                           time.Duration
	// Qdrant describes the collections written: address, collection, shards; empty without.
	QdrantAddr, QdrantCollection, QdrantFirst, QdrantLast string
	QdrantShards                                          int
}

// Ingest chunks and embeds documents into Qdrant, a snapshot file, or both. It is idempotent:
// chunk ids are a file's path and the chunk's number, Qdrant point ids are derived from them, so
// running it again replaces points instead of adding them. On an error after some rounds, the
// summary says how many chunks were written.
func Ingest(ctx context.Context, o IngestConfig, logger *slog.Logger) (sum *IngestSummary, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	dir := o.Dir
	sum = &IngestSummary{Points: -1}
	var chunks []rag.Chunk
	if dir != "" {
		overlap := o.ChunkOverlap
		if overlap == 0 {
			overlap = -1 // corpus.ChunkOptions: 0 means its default, negative means none
		}
		chunks, sum.Skipped, err = corpus.LoadDir(dir, corpus.ChunkOptions{Tokens: o.ChunkTokens, Overlap: overlap})
		if err != nil {
			return sum, err
		}
		sum.Source = dir
	} else {
		chunks = corpus.Builtin(corpus.Options{Seed: o.Seed, Docs: o.CorpusDocs})
		sum.Source = "the built-in corpus"
	}
	docs := map[string]bool{}
	for _, c := range chunks {
		docs[c.DocID] = true
		sum.Tokens += c.Tokens
	}
	sum.Documents, sum.Chunks = len(docs), len(chunks)

	embedBatch, dim, err := ingestEmbedder(ctx, o, logger)
	if err != nil {
		return sum, err
	}
	sum.Embedder, sum.Dim = o.Backends.EmbedderID(dim, o.Seed), dim

	var q *retrieve.Qdrant
	if o.Backends.Qdrant.Addr != "" {
		q, err = NewQdrant(o.Backends, o.Shards, sum.Embedder, nil, logger)
		if err != nil {
			return sum, err
		}
		defer func() { _ = q.Close() }()
		if err := q.EnsureCollections(ctx, dim); err != nil {
			return sum, fmt.Errorf("prepare qdrant collections: %w", err)
		}
	}

	var pg *docstore.Postgres
	if o.Backends.DocStore != "" {
		if pg, err = openPostgres(ctx, o.Backends, Telemetry{}); err != nil {
			return sum, err
		}
		defer pg.Close()
	}

	var vecs [][]float32
	if o.Snapshot != "" {
		vecs = make([][]float32, 0, len(chunks))
	}
	defer func() {
		if err != nil && sum.Written < len(chunks) && ctx.Err() != nil {
			err = fmt.Errorf("interrupted after %d of %d chunks (%w): run it again to finish, ingest is idempotent", sum.Written, len(chunks), err)
		}
	}()
	for from := 0; from < len(chunks); from += o.Batch {
		round := chunks[from:min(from+o.Batch, len(chunks))]
		texts := make([]string, len(round))
		for i, c := range round {
			texts[i] = ChunkText(c)
		}
		rv, err := embedBatch(ctx, texts)
		if err != nil {
			return sum, fmt.Errorf("embed chunks %d to %d: %w", from, from+len(round)-1, err)
		}
		if q != nil {
			if _, err := q.Upsert(ctx, round, rv); err != nil {
				return sum, fmt.Errorf("write chunks %d to %d to qdrant: %w", from, from+len(round)-1, err)
			}
		}
		if pg != nil {
			if err := pg.Upsert(ctx, round...); err != nil {
				return sum, fmt.Errorf("write chunks %d to %d to the doc store: %w", from, from+len(round)-1, err)
			}
		}
		if o.Snapshot != "" {
			vecs = append(vecs, rv...)
		}
		sum.Written += len(round)
		if o.Progress != nil {
			o.Progress(sum.Written, len(chunks))
		}
	}
	if q != nil {
		if o.Prune {
			keep := make(map[string]bool, len(chunks))
			for _, c := range chunks {
				keep[c.ID] = true
			}
			if sum.Pruned, err = q.Prune(ctx, func(id string) bool { return keep[id] }); err != nil {
				return sum, fmt.Errorf("prune qdrant: %w", err)
			}
		}
		if sum.Points, err = q.Count(ctx); err != nil {
			return sum, fmt.Errorf("count qdrant points: %w", err)
		}
		sum.Stale = sum.Points - len(chunks)
	}
	if pg != nil {
		if o.Prune {
			keep := make(map[string]bool, len(chunks))
			for _, c := range chunks {
				keep[c.ID] = true
			}
			if sum.DocStorePruned, err = pg.Prune(ctx, func(id string) bool { return keep[id] }); err != nil {
				return sum, fmt.Errorf("prune the doc store: %w", err)
			}
		}
		if sum.DocStoreChunks, err = pg.Count(ctx); err != nil {
			return sum, fmt.Errorf("count the doc store's chunks: %w", err)
		}
		sum.DocStoreTable = pg.Table()
	}
	if o.Snapshot != "" {
		n, err := writeSnapshotFile(o.Snapshot, &retrieve.Snapshot{Dim: dim, Embedder: sum.Embedder, Chunks: chunks, Vectors: vecs})
		if err != nil {
			return sum, err
		}
		sum.Snapshot, sum.SnapBytes = o.Snapshot, n
	}
	sum.Took = time.Since(start)
	if q != nil {
		sum.QdrantAddr, sum.QdrantCollection, sum.QdrantShards = q.Addr(), q.Collection(), q.Shards()
		sum.QdrantFirst, sum.QdrantLast = q.ShardCollection(0), q.ShardCollection(q.Shards()-1)
	}
	return sum, nil
}

// ingestEmbedder returns the batch embedding function and vector size the flags select.
func ingestEmbedder(ctx context.Context, o IngestConfig, logger *slog.Logger) (func(context.Context, []string) ([][]float32, error), int, error) {
	if o.Backends.Embed.URL != "" {
		c, err := openEmbedder(ctx, o.Backends, backendTelemetry{}, logger)
		if err != nil {
			return nil, 0, err
		}
		return c.EmbedBatch, c.Dimension(), nil
	}
	h, err := embed.NewHash(embed.WithDimension(o.Dim), embed.WithSeed(o.Seed))
	if err != nil {
		return nil, 0, fmt.Errorf("embedder: %w", err)
	}
	// The hash embedder's vectors need no service time: compute them directly.
	return func(ctx context.Context, texts []string) ([][]float32, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out := make([][]float32, len(texts))
		for i, t := range texts {
			out[i] = h.Vector(t)
		}
		return out, nil
	}, o.Dim, nil
}

// writeSnapshotFile writes s to path atomically: to a temporary file in the same directory,
// renamed over path once complete, so an interrupted ingest never leaves a half-written
// snapshot behind. It returns the file's size.
func writeSnapshotFile(path string, s *retrieve.Snapshot) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("--snapshot: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // fails harmlessly once renamed
	if err := retrieve.WriteSnapshot(tmp, s); err != nil {
		_ = tmp.Close()
		return 0, fmt.Errorf("--snapshot %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return 0, fmt.Errorf("--snapshot %s: %w", path, err)
	}
	// CreateTemp makes the file private; a snapshot is as readable as any file the user writes.
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return 0, fmt.Errorf("--snapshot %s: %w", path, err)
	}
	info, err := tmp.Stat()
	if err != nil {
		_ = tmp.Close()
		return 0, fmt.Errorf("--snapshot %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("--snapshot %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("--snapshot: %w", err)
	}
	return info.Size(), nil
}
