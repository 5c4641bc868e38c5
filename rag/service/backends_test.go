package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/embed/embedtest"
	"github.com/ragtail/ragtail/rag/llm"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/rag/retrieve/qdranttest"
)

var (
	_ pipeline.Retriever = (*qdrantBackend)(nil)
	_ pipeline.Generator = (*llm.Client)(nil)
	_ pipeline.Embedder  = (*embed.Client)(nil)
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testBackends returns the default backends with Qdrant at addr and a fast readiness watch.
func testBackends(addr string) Backends {
	b := DefaultConfig().Backends
	b.Qdrant.Addr = addr
	b.ReadyEvery = 20 * time.Millisecond
	return b
}

func splitModels(s string) []string {
	var out []string
	for m := range strings.SplitSeq(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// writeDocs writes a small Markdown tree and returns its directory.
func writeDocs(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	files := map[string]string{
		"kv-cache.md":       "# Paged KV cache\n\n" + strings.Repeat("Paged attention splits the KV cache into fixed-size blocks so sequences share memory. ", 40),
		"grpc/keepalive.md": "# gRPC keepalive\n\n" + strings.Repeat("A client that pings more often than the server allows gets a GOAWAY too_many_pings. ", 30),
		"notes/tail.txt":    strings.Repeat("The p99 of a fan-out is the slowest shard's tail. ", 25),
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

func TestBackendsUnsetKeepTheDefault(t *testing.T) {
	t.Parallel()
	o := testBackends("")
	ctx := context.Background()
	r, err := openRetriever(ctx, o, 4, 384, "hash dim=384 seed=1", nil, backendTelemetry{}, discardLogger())
	if r != nil || err != nil {
		t.Errorf("openRetriever without --qdrant = %v, %v; want nil, nil", r, err)
	}
	g, err := openGenerator(ctx, o, backendTelemetry{}, discardLogger())
	if g != nil || err != nil {
		t.Errorf("openGenerator without --llm-url = %v, %v; want nil, nil", g, err)
	}
	e, err := openEmbedder(ctx, o, backendTelemetry{}, discardLogger())
	if e != nil || err != nil {
		t.Errorf("openEmbedder without --embed-url = %v, %v; want nil, nil", e, err)
	}
}

// lockedBuffer collects log output written from the watch goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestQdrantReadiness: Qdrant unreachable at start does not stop the service: readiness says
// why, one log line says so, searches fail fast with 503; when Qdrant comes up with the
// collections, the payloads are loaded and the service becomes ready; when Qdrant dies and
// returns, readiness follows; Close stops the watch.
func TestQdrantReadiness(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var mu sync.Mutex
	var loaded []rag.Chunk
	load := func(c []rag.Chunk) error { mu.Lock(); loaded = c; mu.Unlock(); return nil }
	ctx := context.Background()
	o := testBackends(addr)
	o.Qdrant.Timeout = time.Minute // unavailability must show at once, not as a timeout
	b, err := openRetriever(ctx, o, 2, 8, HashEmbedderID(8, 1), load, backendTelemetry{}, logger)
	if err != nil {
		t.Fatalf("openRetriever with Qdrant down: %v", err)
	}
	defer b.Close()
	err = b.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), addr) || !errors.Is(err, rag.ErrUnavailable) {
		t.Fatalf("Ready with Qdrant down: %v; want the reason, naming %s", err, addr)
	}
	if _, err := b.Search(ctx, 0, make8(), 3); !errors.Is(err, rag.ErrUnavailable) {
		t.Errorf("Search with Qdrant down: %v, want rag.ErrUnavailable", err)
	}
	time.Sleep(5 * o.ReadyEvery) // several more checks: still one line
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "serving anyway") {
		t.Errorf("want exactly one log line about Qdrant being down, got:\n%s", logs.String())
	}

	srv, err := qdranttest.Start(qdranttest.WithAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	testwait.For(t, "the missing collection to be the reason", func() bool {
		err := b.Ready(ctx)
		return errors.Is(err, retrieve.ErrCollectionMissing) && strings.Contains(err.Error(), "ragtail ingest")
	})
	if !strings.Contains(logs.String(), "still not ready") {
		t.Errorf("the log does not say the reason changed:\n%s", logs.String())
	}

	dir := writeDocs(t)
	in := DefaultIngestConfig()
	in.Dir, in.Shards, in.Dim, in.Backends = dir, 2, 8, o
	if _, err := Ingest(ctx, in, nil); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	want, _, err := corpus.LoadDir(dir, corpus.ChunkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The watch may see the collections mid-ingest; it reloads until it has every payload.
	testwait.For(t, "ready with every payload loaded", func() bool {
		mu.Lock()
		n := len(loaded)
		mu.Unlock()
		return b.Ready(ctx) == nil && n == len(want)
	})
	if !strings.Contains(logs.String(), "qdrant ready") || !strings.Contains(logs.String(), "loaded chunk payloads") {
		t.Errorf("log lacks the recovery:\n%s", logs.String())
	}

	srv.Stop()
	testwait.For(t, "not ready after Qdrant died", func() bool { return errors.Is(b.Ready(ctx), rag.ErrUnavailable) })
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "ready after Qdrant returned", func() bool { return b.Ready(ctx) == nil })
	if _, err := b.Search(ctx, 0, make8(), 3); err != nil {
		t.Errorf("Search after Qdrant returned: %v", err)
	}

	if err := b.Close(); err != nil {
		t.Error(err)
	}
	select {
	case <-b.done:
	default:
		t.Error("the readiness watch is still running after Close")
	}
}

func make8() []float32 { return []float32{1, 2, 3, 4, 5, 6, 7, 8} }

func TestOpenGenerator(t *testing.T) {
	t.Parallel()
	models := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"llama3","object":"model","created":0,"owned_by":"me"}]}`)
	}))
	defer models.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	tests := []struct {
		name       string
		url, model string
		wantModels string
		wantIn     string
	}{
		{name: "models from the flag, server down", url: down.URL + "/v1", model: "a, b", wantModels: "a,b"},
		{name: "models from the server", url: models.URL + "/v1", wantModels: "llama3"},
		{name: "server down, no model", url: down.URL + "/v1", wantIn: "--llm-model"},
		{name: "bad url", url: "localhost:8000", model: "m", wantIn: "--llm-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testBackends("")
			o.LLM.URL, o.LLM.Models = tt.url, splitModels(tt.model)
			c, err := openGenerator(context.Background(), o, backendTelemetry{}, discardLogger())
			if tt.wantIn != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
					t.Errorf("openGenerator: %v, want an error mentioning %s", err, tt.wantIn)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := strings.Join(c.Models(), ","); got != tt.wantModels {
				t.Errorf("models %q, want %q", got, tt.wantModels)
			}
		})
	}
}

func TestOpenEmbedder(t *testing.T) {
	t.Parallel()
	srv := embedtest.NewHashServer(t, 16)
	o := testBackends("")
	o.Embed.URL, o.Embed.Model = srv.URL+"/v1", "hash-16"
	c, err := openEmbedder(context.Background(), o, backendTelemetry{}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if c.Dimension() != 16 || o.EmbedderID(c.Dimension(), 1) != "openai model=hash-16 dim=16" {
		t.Errorf("dimension %d, id %q", c.Dimension(), o.EmbedderID(c.Dimension(), 1))
	}
	chunks := []rag.Chunk{{ID: "a", Title: "A", Text: "alpha"}, {ID: "b", Title: "B", Text: "beta"}}
	vecs, err := embedCorpus(context.Background(), c, chunks)
	if err != nil || len(vecs) != 2 || len(vecs[1]) != 16 {
		t.Errorf("embedCorpus: %d vectors, %v", len(vecs), err)
	}
	srv.Close()
	// Embeddings down mid-run: the query fails with 503, and the service decides what to do.
	if _, err := c.Embed(context.Background(), "query"); !errors.Is(err, rag.ErrUnavailable) {
		t.Errorf("Embed with the server down: %v, want rag.ErrUnavailable", err)
	}
	if _, err := openEmbedder(context.Background(), o, backendTelemetry{}, discardLogger()); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("openEmbedder with the server down: %v", err)
	}
}

func TestLoadSnapshot(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "s.snap")
	in := DefaultIngestConfig()
	in.Snapshot, in.CorpusDocs, in.Dim = out, 5, 32
	if _, err := Ingest(context.Background(), in, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		path     string
		embedder string
		wantIn   string
	}{
		{name: "same embedder", path: out, embedder: HashEmbedderID(32, 1)},
		{name: "other seed", path: out, embedder: HashEmbedderID(32, 2), wantIn: "seed=2"},
		{name: "missing file", path: out + ".missing", embedder: HashEmbedderID(32, 1), wantIn: "no such file"},
		{name: "not a snapshot", path: "backends.go", embedder: HashEmbedderID(32, 1), wantIn: "ingest --snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, err := LoadSnapshot(tt.path, tt.embedder)
			if tt.wantIn == "" {
				if err != nil || len(snap.Chunks) == 0 {
					t.Fatalf("LoadSnapshot: %v", err)
				}
				idx, _ := retrieve.NewMemory(snap.Dim, 3)
				if err := snap.AddTo(idx); err != nil || idx.Len() != len(snap.Chunks) {
					t.Errorf("the embedded default cannot load it: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("LoadSnapshot: %v, want an error mentioning %q", err, tt.wantIn)
			}
		})
	}
}
