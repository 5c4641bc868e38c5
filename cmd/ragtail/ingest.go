package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag/service"
)

func runIngest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := service.DefaultIngestConfig()
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
	cfg.RegisterFlags(fs, os.Getenv)
	progressEvery := fs.Duration("progress-interval", 2*time.Second, "how often to report progress on stderr (0: never)")
	positional, err := parseFlagsAndArgs(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(positional) > 1 {
		fmt.Fprintf(stderr, "ragtail ingest: one DIR at most, got %d: %s\n", len(positional), strings.Join(positional, " "))
		return errUsage
	}
	if cfg.Backends.Qdrant.Addr == "" && cfg.Snapshot == "" && cfg.Backends.DocStore == "" {
		fmt.Fprintln(stderr, "ragtail ingest: say where the chunks go: --qdrant host:6334, --snapshot FILE, --docstore postgres://..., or several")
		fs.Usage()
		return errUsage
	}
	if len(positional) == 1 {
		cfg.Dir = positional[0]
	}
	cfg.FlagsParsed(fs, os.Getenv)
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.Progress = service.IngestProgress(stderr, *progressEvery)
	logger := newLogger(stderr, "warn")
	sum, err := service.Ingest(ctx, cfg, logger)
	if err != nil {
		if sum != nil && sum.Written < sum.Chunks && ctx.Err() != nil {
			return fmt.Errorf("interrupted after %d of %d chunks (%w): run it again to finish, ingest is idempotent", sum.Written, sum.Chunks, err)
		}
		return err
	}
	sum.WriteText(stdout, cfg)
	return nil
}
