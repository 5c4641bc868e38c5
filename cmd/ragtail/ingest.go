package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/rag/service"
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
	o.backends.registerDocstore(fs)
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
	if o.backends.qdrantAddr == "" && o.snapshot == "" && o.backends.docstore == "" {
		fmt.Fprintln(stderr, "ragtail ingest: say where the chunks go: --qdrant host:6334, --snapshot FILE, --docstore postgres://..., or several")
		fs.Usage()
		return errUsage
	}
	var dir string
	if len(positional) == 1 {
		dir = positional[0]
	}
	if err := o.config(dir).Validate(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return ingest(ctx, o, dir, stdout, stderr, logger)
}

// config returns the service's ingest settings the flags give.
func (o *ingestOptions) config(dir string) service.IngestConfig {
	return service.IngestConfig{Dir: dir, CorpusDocs: o.corpusDocs, ChunkTokens: o.chunkTokens, ChunkOverlap: o.chunkOverlap,
		Backends: o.backends.config(), Shards: o.shards, Dim: o.dim, Seed: o.seed, Snapshot: o.snapshot, Batch: o.batch, Prune: o.prune}
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

func ingest(ctx context.Context, o ingestOptions, dir string, stdout, stderr io.Writer, logger *slog.Logger) error {
	cfg := o.config(dir)
	cfg.Progress = newProgress(stderr, o.progressEvery).update
	sum, err := service.Ingest(ctx, cfg, logger)
	if err != nil {
		if sum != nil && sum.Written < sum.Chunks && ctx.Err() != nil {
			return fmt.Errorf("interrupted after %d of %d chunks (%w): run it again to finish, ingest is idempotent", sum.Written, sum.Chunks, err)
		}
		return err
	}
	printIngest(stdout, sum, o)
	return nil
}

func printIngest(w io.Writer, s *service.IngestSummary, o ingestOptions) {
	rate := float64(s.Chunks) / max(s.Took.Seconds(), 1e-9)
	fmt.Fprintf(w, "ingested %d chunks (%d tokens) from %d documents of %s in %v (%.0f chunks/s)\n",
		s.Chunks, s.Tokens, s.Documents, s.Source, s.Took.Round(time.Millisecond), rate)
	fmt.Fprintf(w, "  embedder  %s\n", s.Embedder)
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
		fmt.Fprintf(w, "  serve     ragtail serve --qdrant %s --qdrant-collection %s --shards %d %s\n", s.QdrantAddr, s.QdrantCollection, s.QdrantShards, serveEmbedFlags(o))
	}
	if s.DocStoreTable != "" {
		fmt.Fprintf(w, "  docstore  PostgreSQL table %s, %d chunks", s.DocStoreTable, s.DocStoreChunks)
		if s.DocStorePruned > 0 {
			fmt.Fprintf(w, " (%d pruned)", s.DocStorePruned)
		}
		fmt.Fprintf(w, "\n  serve     ragtail serve --docstore URL %s\n", serveEmbedFlags(o))
	}
	if s.Snapshot != "" {
		fmt.Fprintf(w, "  snapshot  %s (%.1f MB)\n", s.Snapshot, float64(s.SnapBytes)/1e6)
		fmt.Fprintf(w, "  serve     ragtail serve --snapshot %s %s\n", s.Snapshot, serveEmbedFlags(o))
	}
	if len(s.Skipped) > 0 {
		fmt.Fprintf(w, "  skipped   %d file(s):\n", len(s.Skipped))
		for _, sk := range s.Skipped {
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
	start  time.Time
	last   time.Time
	report bool
}

func newProgress(w io.Writer, every time.Duration) *progress {
	now := time.Now()
	return &progress{w: w, every: every, start: now, last: now, report: every > 0}
}

func (p *progress) update(done, total int) {
	now := time.Now()
	if !p.report || done >= total || now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	elapsed := now.Sub(p.start)
	rate := float64(done) / max(elapsed.Seconds(), 1e-9)
	left := time.Duration(float64(total-done) / max(rate, 1e-9) * float64(time.Second))
	fmt.Fprintf(p.w, "ingest: %d/%d chunks (%.0f%%), %.0f chunks/s, about %v left\n",
		done, total, 100*float64(done)/float64(total), rate, left.Round(time.Second))
}
