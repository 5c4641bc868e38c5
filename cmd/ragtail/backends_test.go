package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
	"github.com/ragtail/ragtail/rag/embed"
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

// testBackendOptions returns the flags' defaults with --qdrant addr and a fast readiness watch.
func testBackendOptions(addr string) backendOptions {
	var o backendOptions
	o.getenv = func(string) string { return "" }
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.register(fs)
	o.qdrantAddr = addr
	o.readyEvery = 20 * time.Millisecond
	return o
}

func TestBackendFlagsAndEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		envQdrant: "qdrant.internal:6334", envLLMURL: "http://vllm:8000/v1", envEmbedURL: "",
		envQdrantAPIKey: "qdrant-secret", envOpenAIAPIKey: "sk-secret",
	}
	tests := []struct {
		name       string
		args       []string
		wantQdrant string
		wantLLM    string
	}{
		{name: "environment", wantQdrant: "qdrant.internal:6334", wantLLM: "http://vllm:8000/v1"},
		{name: "flags win", args: []string{"--qdrant", "localhost:7000", "--llm-url", "http://localhost:8000/v1"}, wantQdrant: "localhost:7000", wantLLM: "http://localhost:8000/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := backendOptions{getenv: func(k string) string { return env[k] }}
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var help bytes.Buffer
			fs.SetOutput(&help)
			o.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if o.qdrantAddr != tt.wantQdrant || o.llmURL != tt.wantLLM {
				t.Errorf("qdrant %q, llm %q; want %q, %q", o.qdrantAddr, o.llmURL, tt.wantQdrant, tt.wantLLM)
			}
			if o.qdrantCollection != retrieve.DefaultCollection || o.qdrantPool != retrieve.DefaultQdrantPoolSize || o.qdrantTimeout <= 0 {
				t.Errorf("defaults: collection %q, pool %d, timeout %v", o.qdrantCollection, o.qdrantPool, o.qdrantTimeout)
			}
			fs.PrintDefaults()
			if strings.Contains(help.String(), "secret") {
				t.Errorf("--help shows a secret from the environment:\n%s", help.String())
			}
			for _, f := range []string{"qdrant", "qdrant-collection", "qdrant-api-key", "qdrant-tls", "qdrant-pool", "qdrant-keepalive",
				"qdrant-keepalive-timeout", "qdrant-timeout", "llm-url", "llm-model", "llm-api-key", "llm-connect-timeout",
				"llm-first-token-timeout", "llm-idle-timeout", "embed-url", "embed-model", "snapshot"} {
				if fs.Lookup(f) == nil {
					t.Errorf("no flag --%s", f)
				}
			}
		})
	}
}

func TestBackendValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*backendOptions)
		wantIn string
	}{
		{"qdrant and snapshot", func(o *backendOptions) { o.snapshot = "x.snap" }, "choose one"},
		{"empty pool", func(o *backendOptions) { o.qdrantPool = 0 }, "--qdrant-pool"},
		{"no timeout", func(o *backendOptions) { o.qdrantTimeout = 0 }, "--qdrant-timeout"},
		{"embed url without model", func(o *backendOptions) { o.embedURL = "http://e/v1" }, "--embed-model"},
		{"negative llm retries", func(o *backendOptions) { o.llmURL = "http://l/v1"; o.llmRetries = -1 }, "--llm-retries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testBackendOptions("localhost:6334")
			tt.change(&o)
			if err := o.validate(); err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("validate: %v, want an error mentioning %s", err, tt.wantIn)
			}
		})
	}
	if o := testBackendOptions("localhost:6334"); o.validate() != nil {
		err := o.validate()
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestBackendsUnsetKeepTheDefault(t *testing.T) {
	t.Parallel()
	o := testBackendOptions("")
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

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	o := testBackendOptions(addr)
	o.qdrantTimeout = time.Minute // unavailability must show at once, not as a timeout
	b, err := openRetriever(ctx, o, 2, 8, hashEmbedderID(8, 1), load, backendTelemetry{}, logger)
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
	time.Sleep(5 * o.readyEvery) // several more checks: still one line
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "serving anyway") {
		t.Errorf("want exactly one log line about Qdrant being down, got:\n%s", logs.String())
	}

	srv, err := qdranttest.Start(qdranttest.WithAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	waitFor(t, "the missing collection to be the reason", func() bool {
		err := b.Ready(ctx)
		return errors.Is(err, retrieve.ErrCollectionMissing) && strings.Contains(err.Error(), "ragtail ingest")
	})
	if !strings.Contains(logs.String(), "still not ready") {
		t.Errorf("the log does not say the reason changed:\n%s", logs.String())
	}

	dir := writeDocs(t)
	if _, stderr, err := runIngestCmd(t, ctx, dir, "--qdrant", addr, "--shards", "2", "--dim", "8"); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	want, _, err := corpus.LoadDir(dir, corpus.ChunkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The watch may see the collections mid-ingest; it reloads until it has every payload.
	waitFor(t, "ready with every payload loaded", func() bool {
		mu.Lock()
		n := len(loaded)
		mu.Unlock()
		return b.Ready(ctx) == nil && n == len(want)
	})
	if !strings.Contains(logs.String(), "qdrant ready") || !strings.Contains(logs.String(), "loaded chunk payloads") {
		t.Errorf("log lacks the recovery:\n%s", logs.String())
	}

	srv.Stop()
	waitFor(t, "not ready after Qdrant died", func() bool { return errors.Is(b.Ready(ctx), rag.ErrUnavailable) })
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ready after Qdrant returned", func() bool { return b.Ready(ctx) == nil })
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
			o := testBackendOptions("")
			o.llmURL, o.llmModel = tt.url, tt.model
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
	srv := hashEmbeddingsServer(t, 16)
	o := testBackendOptions("")
	o.embedURL, o.embedModel = srv.URL+"/v1", "hash-16"
	c, err := openEmbedder(context.Background(), o, backendTelemetry{}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if c.Dimension() != 16 || o.embedderID(c.Dimension(), 1) != "openai model=hash-16 dim=16" {
		t.Errorf("dimension %d, id %q", c.Dimension(), o.embedderID(c.Dimension(), 1))
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
	if _, _, err := runIngestCmd(t, context.Background(), "--snapshot", out, "--corpus-docs", "5", "--dim", "32"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		path     string
		embedder string
		wantIn   string
	}{
		{name: "same embedder", path: out, embedder: hashEmbedderID(32, 1)},
		{name: "other seed", path: out, embedder: hashEmbedderID(32, 2), wantIn: "seed=2"},
		{name: "missing file", path: out + ".missing", embedder: hashEmbedderID(32, 1), wantIn: "no such file"},
		{name: "not a snapshot", path: "backends.go", embedder: hashEmbedderID(32, 1), wantIn: "ingest --snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, err := loadSnapshot(tt.path, tt.embedder)
			if tt.wantIn == "" {
				if err != nil || len(snap.Chunks) == 0 {
					t.Fatalf("loadSnapshot: %v", err)
				}
				idx, _ := retrieve.NewMemory(snap.Dim, 3)
				if err := snap.AddTo(idx); err != nil || idx.Len() != len(snap.Chunks) {
					t.Errorf("the embedded default cannot load it: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("loadSnapshot: %v, want an error mentioning %q", err, tt.wantIn)
			}
		})
	}
}
