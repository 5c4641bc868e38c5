package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/retrieve"
)

type ingestOptions struct {
	backends      backendOptions
	snapshot      string
	shards        int
	dim           int
	seed          uint64
	corpusDocs    int
	chunkTokens   int
	chunkOverlap  int
	batch         int
	prune         bool
	progressEvery time.Duration
}

func runIngest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o ingestOptions
	fs := newFlagSet("ingest", "[DIR] [flags]", `Chunks and embeds documents into an index that ragtail serve retrieves from: Qdrant
(--qdrant host:6334) or a snapshot file (--snapshot FILE, served with serve --snapshot FILE).
DIR is read recursively for .md, .markdown and .txt files; without DIR the built-in corpus is
ingested (the one serve uses by default, sized by --corpus-docs and --seed).

Ingesting is idempotent: chunk ids are a file's path and the chunk's number, Qdrant point ids
are derived from them, so running it again replaces points instead of adding them (--prune also
deletes the points of chunks that are gone). Vectors come from the hash embedder (--dim, --seed:
give serve the same values) or an OpenAI-compatible embeddings server (--embed-url,
--embed-model). With several --shards, shard i is the Qdrant collection NAME_i; serve must run
with the same --shards, and checks it.

Examples:
  ragtail ingest ./docs --qdrant localhost:6334
  ragtail ingest ./docs --snapshot docs.snap && ragtail serve --snapshot docs.snap
  ragtail ingest ./docs --qdrant localhost:6334 --embed-url http://localhost:11434/v1 --embed-model nomic-embed-text`)
	o.backends.registerQdrant(fs)
	o.backends.registerEmbed(fs)
	fs.StringVar(&o.snapshot, "snapshot", "", "write the chunks and their vectors to this snapshot file (for serve --snapshot)")
	fs.IntVar(&o.shards, "shards", 4, "Qdrant shards, one collection each; serve must use the same number")
	fs.IntVar(&o.dim, "dim", embed.DefaultDimension, "embedding dimension of the hash embedder")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the hash embedder and of the built-in corpus")
	fs.IntVar(&o.corpusDocs, "corpus-docs", 0, "documents of the built-in corpus, when no DIR is given (0: the default size)")
	fs.IntVar(&o.chunkTokens, "chunk-tokens", 256, "target chunk length in tokens")
	fs.IntVar(&o.chunkOverlap, "chunk-overlap", 32, "tokens at the end of a chunk repeated at the start of the next (0: none)")
	fs.IntVar(&o.batch, "batch", retrieve.DefaultQdrantBatchSize, "chunks embedded and written per round")
	fs.BoolVar(&o.prune, "prune", false, "delete the Qdrant points of chunks not in this ingest (files removed or shortened)")
	fs.DurationVar(&o.progressEvery, "progress-interval", 2*time.Second, "how often to report progress on stderr (0: never)")
	positional, err := parseInterspersed(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(positional) > 1 {
		fmt.Fprintf(stderr, "ragtail ingest: one DIR at most, got %d: %s\n", len(positional), strings.Join(positional, " "))
		return errUsage
	}
	if o.backends.qdrantAddr == "" && o.snapshot == "" {
		fmt.Fprintln(stderr, "ragtail ingest: say where the index goes: --qdrant host:6334, --snapshot FILE, or both")
		fs.Usage()
		return errUsage
	}
	if err := o.validate(); err != nil {
		return err
	}
	var dir string
	if len(positional) == 1 {
		dir = positional[0]
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return ingest(ctx, o, dir, stdout, stderr, logger)
}

func (o *ingestOptions) validate() error {
	switch {
	case o.shards < 1 || o.shards > 256:
		return fmt.Errorf("--shards must be between 1 and 256, got %d", o.shards)
	case o.dim < 1:
		return fmt.Errorf("--dim must be at least 1, got %d", o.dim)
	case o.batch < 1:
		return fmt.Errorf("--batch must be at least 1, got %d", o.batch)
	case o.corpusDocs < 0:
		return fmt.Errorf("--corpus-docs must not be negative, got %d", o.corpusDocs)
	case o.chunkOverlap < 0:
		return fmt.Errorf("--chunk-overlap must not be negative, got %d", o.chunkOverlap)
	case o.prune && o.backends.qdrantAddr == "":
		return errors.New("--prune deletes points from Qdrant: it needs --qdrant")
	}
	return o.backends.validate()
}

// parseInterspersed parses args with fs, allowing positional arguments before, between and after
// the flags (ragtail ingest ./docs --qdrant ...), and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil, flag.ErrHelp
		}
		if a == "--" {
			break
		}
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// ingestSummary is what an ingest did, for its last lines.
type ingestSummary struct {
	source    string
	documents int
	chunks    int
	written   int
	tokens    int
	skipped   []corpus.Skipped
	embedder  string
	points    int // in Qdrant after the ingest; -1 if not counted
	stale     int
	pruned    int
	snapshot  string
	snapBytes int64
	took      time.Duration
}

func ingest(ctx context.Context, o ingestOptions, dir string, stdout, stderr io.Writer, logger *slog.Logger) (err error) {
	start := time.Now()
	sum := ingestSummary{points: -1}
	var chunks []rag.Chunk
	if dir != "" {
		overlap := o.chunkOverlap
		if overlap == 0 {
			overlap = -1 // corpus.ChunkOptions: 0 means its default, negative means none
		}
		chunks, sum.skipped, err = corpus.LoadDir(dir, corpus.ChunkOptions{Tokens: o.chunkTokens, Overlap: overlap})
		if err != nil {
			return err
		}
		sum.source = dir
	} else {
		chunks = corpus.Builtin(corpus.Options{Seed: o.seed, Docs: o.corpusDocs})
		sum.source = "the built-in corpus"
	}
	docs := map[string]bool{}
	for _, c := range chunks {
		docs[c.DocID] = true
		sum.tokens += c.Tokens
	}
	sum.documents, sum.chunks = len(docs), len(chunks)

	embedBatch, dim, err := ingestEmbedder(ctx, o, logger)
	if err != nil {
		return err
	}
	sum.embedder = o.backends.embedderID(dim, o.seed)

	var q *retrieve.Qdrant
	if o.backends.qdrantAddr != "" {
		q, err = newQdrant(o.backends, o.shards, sum.embedder, backendTelemetry{}, logger)
		if err != nil {
			return err
		}
		defer q.Close()
		if err := q.EnsureCollections(ctx, dim); err != nil {
			return fmt.Errorf("prepare qdrant collections: %w", err)
		}
	}

	var vecs [][]float32
	if o.snapshot != "" {
		vecs = make([][]float32, 0, len(chunks))
	}
	progress := newProgress(stderr, o.progressEvery, len(chunks))
	defer func() {
		if err != nil && sum.written < len(chunks) && ctx.Err() != nil {
			err = fmt.Errorf("interrupted after %d of %d chunks (%w): run it again to finish, ingest is idempotent", sum.written, len(chunks), err)
		}
	}()
	for from := 0; from < len(chunks); from += o.batch {
		round := chunks[from:min(from+o.batch, len(chunks))]
		texts := make([]string, len(round))
		for i, c := range round {
			texts[i] = chunkText(c)
		}
		rv, err := embedBatch(ctx, texts)
		if err != nil {
			return fmt.Errorf("embed chunks %d to %d: %w", from, from+len(round)-1, err)
		}
		if q != nil {
			if _, err := q.Upsert(ctx, round, rv); err != nil {
				return fmt.Errorf("write chunks %d to %d to qdrant: %w", from, from+len(round)-1, err)
			}
		}
		vecs = append(vecs, rv...)
		sum.written += len(round)
		progress.update(sum.written)
	}
	if q != nil {
		if o.prune {
			keep := make(map[string]bool, len(chunks))
			for _, c := range chunks {
				keep[c.ID] = true
			}
			if sum.pruned, err = q.Prune(ctx, func(id string) bool { return keep[id] }); err != nil {
				return fmt.Errorf("prune qdrant: %w", err)
			}
		}
		if sum.points, err = q.Count(ctx); err != nil {
			return fmt.Errorf("count qdrant points: %w", err)
		}
		sum.stale = sum.points - len(chunks)
	}
	if o.snapshot != "" {
		n, err := writeSnapshotFile(o.snapshot, &retrieve.Snapshot{Dim: dim, Embedder: sum.embedder, Chunks: chunks, Vectors: vecs})
		if err != nil {
			return err
		}
		sum.snapshot, sum.snapBytes = o.snapshot, n
	}
	sum.took = time.Since(start)
	sum.print(stdout, o, q)
	return nil
}

// ingestEmbedder returns the batch embedding function and vector size the flags select.
func ingestEmbedder(ctx context.Context, o ingestOptions, logger *slog.Logger) (func(context.Context, []string) ([][]float32, error), int, error) {
	if o.backends.embedURL != "" {
		c, err := openEmbedder(ctx, o.backends, backendTelemetry{}, logger)
		if err != nil {
			return nil, 0, err
		}
		return c.EmbedBatch, c.Dimension(), nil
	}
	h, err := embed.NewHash(embed.WithDimension(o.dim), embed.WithSeed(o.seed))
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
	}, o.dim, nil
}

// writeSnapshotFile writes s to path atomically: to a temporary file in the same directory,
// renamed over path once complete, so an interrupted ingest never leaves a half-written
// snapshot behind. It returns the file's size.
func writeSnapshotFile(path string, s *retrieve.Snapshot) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("--snapshot: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := retrieve.WriteSnapshot(tmp, s); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("--snapshot %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("--snapshot %s: %w", path, err)
	}
	// CreateTemp makes the file private; a snapshot is as readable as any file the user writes.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("--snapshot %s: %w", path, err)
	}
	info, err := tmp.Stat()
	if err != nil {
		tmp.Close()
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

func (s ingestSummary) print(w io.Writer, o ingestOptions, q *retrieve.Qdrant) {
	rate := float64(s.chunks) / max(s.took.Seconds(), 1e-9)
	fmt.Fprintf(w, "ingested %d chunks (%d tokens) from %d documents of %s in %v (%.0f chunks/s)\n",
		s.chunks, s.tokens, s.documents, s.source, s.took.Round(time.Millisecond), rate)
	fmt.Fprintf(w, "  embedder  %s\n", s.embedder)
	if q != nil {
		names := q.ShardCollection(0)
		if q.Shards() > 1 {
			names += ".." + q.ShardCollection(q.Shards()-1)
		}
		fmt.Fprintf(w, "  qdrant    %s, %d shard collection(s) %s, %d points\n", q.Addr(), q.Shards(), names, s.points)
		switch {
		case s.pruned > 0:
			fmt.Fprintf(w, "  pruned    %d points of chunks no longer in %s\n", s.pruned, s.source)
		case s.stale > 0:
			fmt.Fprintf(w, "  stale     %d points are not from this ingest (removed or shortened files): --prune deletes them\n", s.stale)
		}
		fmt.Fprintf(w, "  serve     ragtail serve --qdrant %s --qdrant-collection %s --shards %d %s\n", q.Addr(), q.Collection(), q.Shards(), serveEmbedFlags(o))
	}
	if s.snapshot != "" {
		fmt.Fprintf(w, "  snapshot  %s (%.1f MB)\n", s.snapshot, float64(s.snapBytes)/1e6)
		fmt.Fprintf(w, "  serve     ragtail serve --snapshot %s %s\n", s.snapshot, serveEmbedFlags(o))
	}
	if len(s.skipped) > 0 {
		fmt.Fprintf(w, "  skipped   %d file(s):\n", len(s.skipped))
		for _, sk := range s.skipped {
			fmt.Fprintf(w, "            %s: %s\n", sk.Path, sk.Reason)
		}
	}
}

// serveEmbedFlags are the serve flags that embed queries as this ingest embedded chunks.
func serveEmbedFlags(o ingestOptions) string {
	if o.backends.embedURL != "" {
		return fmt.Sprintf("--embed-url %s --embed-model %s", o.backends.embedURL, o.backends.embedModel)
	}
	return fmt.Sprintf("--dim %d --seed %d", o.dim, o.seed)
}

// progress reports on long runs: a line every interval, with rate and time left.
type progress struct {
	w      io.Writer
	every  time.Duration
	total  int
	start  time.Time
	last   time.Time
	report bool
}

func newProgress(w io.Writer, every time.Duration, total int) *progress {
	now := time.Now()
	return &progress{w: w, every: every, total: total, start: now, last: now, report: every > 0}
}

func (p *progress) update(done int) {
	now := time.Now()
	if !p.report || done >= p.total || now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	elapsed := now.Sub(p.start)
	rate := float64(done) / max(elapsed.Seconds(), 1e-9)
	left := time.Duration(float64(p.total-done) / max(rate, 1e-9) * float64(time.Second))
	fmt.Fprintf(p.w, "ingest: %d/%d chunks (%.0f%%), %.0f chunks/s, about %v left\n",
		done, p.total, 100*float64(done)/float64(p.total), rate, left.Round(time.Second))
}
