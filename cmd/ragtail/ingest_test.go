package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/embed/embedtest"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/rag/retrieve/qdranttest"
	"github.com/ragtail/ragtail/rag/service"
)

// writeDocs writes a small Markdown tree and returns its directory.
func writeDocs(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	files := map[string]string{
		"kv-cache.md":         "# Paged KV cache\n\n" + strings.Repeat("Paged attention splits the KV cache into fixed-size blocks so sequences share memory. ", 40),
		"grpc/keepalive.md":   "# gRPC keepalive\n\n" + strings.Repeat("A client that pings more often than the server allows gets a GOAWAY too_many_pings. ", 30),
		"notes/tail.txt":      strings.Repeat("The p99 of a fan-out is the slowest shard's tail. ", 25),
		".hidden/secret.md":   "# never ingested\n",
		"notes/image.png":     "\x89PNG",
		"notes/latin1.txt":    "caf\xe9",
		"grpc/max-age.md":     "# MaxConnectionAge\n\nForces reconnects.",
		"empty-heading.md":    "#\n\nNo title here, the file name is used.",
		"nested/deep/a.md":    "# Deep\n\nA nested document.",
		"nested/deep/b.mdx":   "not a markdown extension ragtail reads",
		"nested/UPPER.MD":     "# Upper case extension\n\nStill Markdown.",
		"nested/spaces in.md": "# Spaces\n\nA file name with spaces.",
	}
	for name, text := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

func runIngestCmd(tb testing.TB, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	var out, errOut bytes.Buffer
	err = run(ctx, append([]string{"ingest"}, args...), &out, &errOut)
	return out.String(), errOut.String(), err
}

func readSnapshotFile(tb testing.TB, path string) *retrieve.Snapshot {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	s, err := retrieve.ReadSnapshot(f)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestIngestSnapshot(t *testing.T) {
	t.Parallel()
	dir := writeDocs(t)
	out := filepath.Join(t.TempDir(), "docs.snap")
	stdout, stderr, err := runIngestCmd(t, context.Background(), dir, "--snapshot", out, "--dim", "64", "--seed", "3", "--chunk-tokens", "64")
	if err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	want, skipped, err := corpus.LoadDir(dir, corpus.ChunkOptions{Tokens: 64, Overlap: 32})
	if err != nil {
		t.Fatal(err)
	}
	snap := readSnapshotFile(t, out)
	if !slices.Equal(snap.Chunks, want) || snap.Dim != 64 || snap.Embedder != "hash dim=64 seed=3" {
		t.Fatalf("snapshot holds %d chunks of %d dimensions by %q; want the %d chunks LoadDir gives, 64, hash dim=64 seed=3",
			len(snap.Chunks), snap.Dim, snap.Embedder, len(want))
	}
	h, err := embed.NewHash(embed.WithDimension(64), embed.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range snap.Chunks {
		if !slices.Equal(snap.Vectors[i], h.Vector(service.ChunkText(c))) {
			t.Fatalf("vector of %s is not the hash embedding of its title and text", c.ID)
		}
	}
	tokens := 0
	for _, c := range want {
		tokens += c.Tokens
	}
	for _, s := range []string{fmt.Sprintf("ingested %d chunks (%d tokens)", len(want), tokens), "hash dim=64 seed=3", "serve --snapshot " + out + " --dim 64 --seed 3",
		fmt.Sprintf("skipped   %d file(s)", len(skipped)), "not UTF-8 text"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("summary lacks %q:\n%s", s, stdout)
		}
	}
	if info, err := os.Stat(out); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("snapshot file mode: %v, %v; want 0644", info.Mode(), err)
	}
	first, _ := os.ReadFile(out)
	if _, _, err := runIngestCmd(t, context.Background(), "--snapshot", out, dir, "--dim", "64", "--seed", "3", "--chunk-tokens", "64"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(out); !bytes.Equal(first, again) {
		t.Error("ingesting the same directory again wrote a different snapshot")
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 1 {
		t.Errorf("%d files next to the snapshot, want none left over", len(entries)-1)
	}
}

func TestIngestBuiltinCorpus(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "builtin.snap")
	stdout, _, err := runIngestCmd(t, context.Background(), "--snapshot", out, "--corpus-docs", "12", "--progress-interval", "1ns", "--batch", "5")
	if err != nil {
		t.Fatal(err)
	}
	want := corpus.Builtin(corpus.Options{Seed: 1, Docs: 12})
	if snap := readSnapshotFile(t, out); !slices.Equal(snap.Chunks, want) || snap.Embedder != service.HashEmbedderID(embed.DefaultDimension, 1) {
		t.Errorf("snapshot of the built-in corpus: %d chunks by %q, want %d by the default hash embedder", len(snap.Chunks), snap.Embedder, len(want))
	}
	if !strings.Contains(stdout, "of the built-in corpus") {
		t.Errorf("summary:\n%s", stdout)
	}
}

func TestIngestProgress(t *testing.T) {
	t.Parallel()
	var errOut bytes.Buffer
	err := run(context.Background(), []string{"ingest", "--snapshot", filepath.Join(t.TempDir(), "s.snap"), "--corpus-docs", "12", "--progress-interval", "1ns", "--batch", "5"}, io.Discard, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(errOut.String(), "ingest: ")
	total := len(corpus.Builtin(corpus.Options{Seed: 1, Docs: 12}))
	// One line per round of 5 chunks, except after the last.
	if want := (total+4)/5 - 1; lines != want {
		t.Errorf("%d progress lines for %d chunks in rounds of 5, want %d:\n%s", lines, total, want, errOut.String())
	}
}

func TestIngestQdrant(t *testing.T) {
	t.Parallel()
	srv, err := qdranttest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := writeDocs(t)
	want, _, err := corpus.LoadDir(dir, corpus.ChunkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	args := []string{dir, "--qdrant", srv.Addr(), "--shards", "2", "--dim", "32", "--batch", "7"}
	for range 2 {
		stdout, stderr, err := runIngestCmd(t, ctx, args...)
		if err != nil {
			t.Fatalf("ingest: %v\n%s", err, stderr)
		}
		if got := srv.Points("ragtail_0") + srv.Points("ragtail_1"); got != len(want) {
			t.Fatalf("qdrant holds %d points after ingest, want %d (idempotent)", got, len(want))
		}
		if !strings.Contains(stdout, fmt.Sprintf("%d points", len(want))) || !strings.Contains(stdout, "--shards 2 --dim 32 --seed 1") {
			t.Errorf("summary:\n%s", stdout)
		}
	}

	// Serve's side: the service finds the collections ready and loads every payload.
	cfg := service.DefaultConfig()
	cfg.Shards, cfg.Dim = 2, 32
	cfg.Backends.Qdrant.Addr, cfg.Backends.ReadyEvery = srv.Addr(), 20*time.Millisecond
	svc, err := service.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := svc.Docs.Len(); n != len(want) {
		t.Errorf("the service loaded %d payloads, want %d", n, len(want))
	}
	_ = svc.Close()
	q, err := service.NewQdrant(cfg.Backends, 2, service.HashEmbedderID(32, 1), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := embed.NewHash(embed.WithDimension(32), embed.WithSeed(1))
	target := want[len(want)/2]
	hits, err := q.Search(ctx, retrieve.ShardOf(target.ID, 2), h.Vector(service.ChunkText(target)), 1)
	if err != nil || len(hits) != 1 || hits[0].ChunkID != target.ID {
		t.Errorf("searching a chunk's own embedding found %v, %v; want %s", hits, err, target.ID)
	}
	_ = q.Close()

	// Remove a file: without --prune its points stay and the summary says so; with it they go.
	if err := os.Remove(filepath.Join(dir, "kv-cache.md")); err != nil {
		t.Fatal(err)
	}
	remaining, _, _ := corpus.LoadDir(dir, corpus.ChunkOptions{})
	stdout, _, err := runIngestCmd(t, ctx, args...)
	if err != nil || !strings.Contains(stdout, fmt.Sprintf("stale     %d points", len(want)-len(remaining))) {
		t.Errorf("ingest after removing a file: %v\n%s", err, stdout)
	}
	stdout, _, err = runIngestCmd(t, ctx, append(args, "--prune")...)
	if err != nil || !strings.Contains(stdout, fmt.Sprintf("pruned    %d points", len(want)-len(remaining))) {
		t.Errorf("ingest --prune: %v\n%s", err, stdout)
	}
	if got := srv.Points("ragtail_0") + srv.Points("ragtail_1"); got != len(remaining) {
		t.Errorf("qdrant holds %d points after --prune, want %d", got, len(remaining))
	}
	// Serving with another embedder or shard count is refused with the reason.
	stdout, _, err = runIngestCmd(t, ctx, dir, "--qdrant", srv.Addr(), "--shards", "2", "--dim", "48")
	if err == nil || !errors.Is(err, retrieve.ErrCollectionMismatch) {
		t.Errorf("ingest with another dimension into the same collections: %v\n%s", err, stdout)
	}
}

func TestIngestWithEmbeddingsServer(t *testing.T) {
	t.Parallel()
	srv := embedtest.NewHashServer(t, 24)
	out := filepath.Join(t.TempDir(), "e.snap")
	stdout, stderr, err := runIngestCmd(t, context.Background(), writeDocs(t), "--snapshot", out, "--embed-url", srv.URL+"/v1", "--embed-model", "hash-24", "--embed-batch", "3")
	if err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	snap := readSnapshotFile(t, out)
	if snap.Dim != 24 || snap.Embedder != "openai model=hash-24 dim=24" {
		t.Errorf("snapshot by %q with %d dimensions", snap.Embedder, snap.Dim)
	}
	if !strings.Contains(stdout, "--embed-url "+srv.URL+"/v1 --embed-model hash-24") {
		t.Errorf("summary does not tell how to serve it:\n%s", stdout)
	}
}

func TestIngestErrors(t *testing.T) {
	t.Parallel()
	dir := writeDocs(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	tests := []struct {
		name    string
		args    []string
		wantErr error
		wantIn  string
	}{
		{name: "no destination", args: []string{dir}, wantErr: errUsage},
		{name: "two directories", args: []string{dir, dir, "--snapshot", "x"}, wantErr: errUsage},
		{name: "unknown flag", args: []string{"--snapshot", "x", "--nope"}, wantErr: errUsage},
		{name: "missing directory", args: []string{filepath.Join(dir, "missing"), "--snapshot", filepath.Join(t.TempDir(), "x")}, wantIn: "no such file"},
		{name: "empty directory", args: []string{t.TempDir(), "--snapshot", filepath.Join(t.TempDir(), "x")}, wantIn: "no .md or .txt files"},
		{name: "embed url without model", args: []string{dir, "--snapshot", "x", "--embed-url", "http://localhost:1/v1"}, wantIn: "--embed-model"},
		{name: "embeddings down", args: []string{dir, "--snapshot", filepath.Join(t.TempDir(), "x"), "--embed-url", down.URL, "--embed-model", "m"}, wantErr: rag.ErrUnavailable, wantIn: "did not answer"},
		{name: "prune without qdrant", args: []string{dir, "--snapshot", "x", "--prune"}, wantIn: "needs --qdrant"},
		{name: "qdrant down", args: []string{dir, "--qdrant", "127.0.0.1:1"}, wantErr: rag.ErrUnavailable, wantIn: "127.0.0.1:1"},
		{name: "bad shards", args: []string{dir, "--snapshot", "x", "--shards", "0"}, wantIn: "--shards"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runIngestCmd(t, context.Background(), tt.args...)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("ingest %v: %v; want %v mentioning %q", tt.args, err, tt.wantErr, tt.wantIn)
			}
		})
	}
}

// TestIngestInterrupted: Ctrl-C during an ingest leaves no snapshot (not even a partial one)
// and says how to finish.
func TestIngestInterrupted(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "i.snap")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := runIngestCmd(t, ctx, "--snapshot", out, "--corpus-docs", "12")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "run it again") {
		t.Errorf("interrupted ingest: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
		t.Errorf("%d files left behind by an interrupted ingest", len(entries))
	}
}
