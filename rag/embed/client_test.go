package embed_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/openai"
)

// embeddingsServer is an OpenAI-compatible embeddings server backed by a Hash embedder, so that
// the vectors it returns can be checked against the texts sent.
type embeddingsServer struct {
	tb       testing.TB
	hash     *embed.Hash
	base64   bool // answer with base64 embeddings, as servers that ignore encoding_format do
	reversed bool // list the data in reverse index order
	mu       sync.Mutex
	requests []map[string]any
	headers  []http.Header
}

func newEmbeddingsServer(tb testing.TB, dim int) (*embeddingsServer, *httptest.Server) {
	tb.Helper()
	s := &embeddingsServer{tb: tb, hash: newHash(tb, embed.WithDimension(dim))}
	srv := httptest.NewServer(s)
	tb.Cleanup(srv.Close)
	return s, srv
}

func (s *embeddingsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
		openai.WriteJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"message": "no route " + r.Method + " " + r.URL.Path}})
		return
	}
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		openai.WriteJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": err.Error()}})
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	var inputs []string
	switch in := req["input"].(type) {
	case string:
		inputs = []string{in}
	case []any:
		for _, x := range in {
			inputs = append(inputs, x.(string))
		}
	}
	type item struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	data := make([]item, len(inputs))
	for i, text := range inputs {
		v := s.hash.Vector(text)
		var emb any = v
		if s.base64 {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		pos := i
		if s.reversed {
			pos = len(inputs) - 1 - i
		}
		data[pos] = item{Object: "embedding", Index: i, Embedding: emb}
	}
	openai.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": req["model"]})
}

func (s *embeddingsServer) sent() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.requests...)
}

func newClient(tb testing.TB, url string, opts ...embed.ClientOption) *embed.Client {
	tb.Helper()
	c, err := embed.NewClient(url, "test-embed", opts...)
	if err != nil {
		tb.Fatalf("NewClient: %v", err)
	}
	return c
}

func TestNewClientRejectsBadSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, model string
		opts             []embed.ClientOption
	}{
		{name: "no model", url: "http://localhost:8000", model: " "},
		{name: "bad url", url: "localhost:8000", model: "m"},
		{name: "negative dimensions", url: "http://localhost:8000", model: "m", opts: []embed.ClientOption{embed.WithOutputDimensions(-1)}},
		{name: "zero batch", url: "http://localhost:8000", model: "m", opts: []embed.ClientOption{embed.WithBatchSize(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := embed.NewClient(tt.url, tt.model, tt.opts...); err == nil {
				t.Errorf("NewClient succeeded, want an error")
			}
		})
	}
}

func TestClientEmbed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		base64 bool
	}{
		{name: "float embeddings"},
		{name: "base64 embeddings", base64: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake, srv := newEmbeddingsServer(t, 32)
			fake.base64 = tt.base64
			c := newClient(t, srv.URL+"/v1", embed.WithAPIKey("sk-test"))
			if c.Dimension() != 0 {
				t.Fatalf("Dimension before any request = %d, want 0", c.Dimension())
			}
			if err := c.Probe(t.Context()); err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if c.Dimension() != 32 {
				t.Errorf("Dimension after Probe = %d, want 32", c.Dimension())
			}
			const text = "How does paged attention reduce fragmentation?"
			got, err := c.Embed(t.Context(), text)
			if err != nil {
				t.Fatalf("Embed: %v", err)
			}
			if cos := embed.Cosine(got, fake.hash.Vector(text)); cos < 1-1e-6 {
				t.Errorf("cosine to the server's vector = %v, want 1", cos)
			}
			req := fake.sent()[1]
			if req["model"] != "test-embed" || req["input"] != text || req["encoding_format"] != "float" {
				t.Errorf("request = %v, want model, input string and encoding_format float", req)
			}
			if _, ok := req["dimensions"]; ok {
				t.Errorf("request has dimensions %v, want none unless asked", req["dimensions"])
			}
			if h := fake.headers[1]; h.Get("Authorization") != "Bearer sk-test" || h.Get("Content-Type") != "application/json" {
				t.Errorf("headers = %v, want bearer token and JSON content type", h)
			}
		})
	}
}

func TestClientEmbedBatch(t *testing.T) {
	t.Parallel()
	fake, srv := newEmbeddingsServer(t, 16)
	fake.reversed = true
	c := newClient(t, srv.URL, embed.WithBatchSize(3))
	texts := make([]string, 7)
	for i := range texts {
		texts[i] = fmt.Sprintf("document number %d about shard %d", i, i*i)
	}
	got, err := c.EmbedBatch(t.Context(), texts)
	if err != nil {
		t.Fatalf("EmbedBatch: %v", err)
	}
	if len(got) != len(texts) {
		t.Fatalf("got %d vectors, want %d", len(got), len(texts))
	}
	for i, text := range texts {
		if cos := embed.Cosine(got[i], fake.hash.Vector(text)); cos < 1-1e-6 {
			t.Errorf("vector %d does not belong to its text (cosine %v)", i, cos)
		}
	}
	var sizes []int
	for _, req := range fake.sent() {
		sizes = append(sizes, len(req["input"].([]any)))
	}
	if fmt.Sprint(sizes) != "[3 3 1]" {
		t.Errorf("batch sizes sent = %v, want [3 3 1]", sizes)
	}
	if _, err := c.EmbedBatch(t.Context(), []string{"ok", " "}); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Errorf("blank text: error = %v, want rag.ErrInvalidRequest", err)
	}
}

func TestClientOutputDimensions(t *testing.T) {
	t.Parallel()
	fake, srv := newEmbeddingsServer(t, 24)
	c := newClient(t, srv.URL, embed.WithOutputDimensions(24))
	if c.Dimension() != 24 {
		t.Fatalf("Dimension = %d before any request, want 24", c.Dimension())
	}
	if _, err := c.Embed(t.Context(), "query"); err != nil {
		t.Fatalf("Embed: %v", err)
	}
	if got := fake.sent()[0]["dimensions"]; got != 24.0 {
		t.Errorf("dimensions sent = %v, want 24", got)
	}
	// A server that answers with another length is not the model we were configured for.
	other := newClient(t, srv.URL, embed.WithOutputDimensions(8))
	if _, err := other.Embed(t.Context(), "query"); !errors.Is(err, rag.ErrUnavailable) || !strings.Contains(err.Error(), "24 dimensions, want 8") {
		t.Errorf("error = %v, want rag.ErrUnavailable naming both dimensions", err)
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		body     string
		wantErr  error
		wantText string
	}{
		{name: "input rejected", status: 400, body: `{"error":{"message":"input too long","type":"invalid_request_error"}}`, wantErr: rag.ErrInvalidRequest, wantText: "input too long"},
		{name: "validation error", status: 422, body: `{"error":"Input validation error: inputs must have less than 512 tokens"}`, wantErr: rag.ErrInvalidRequest, wantText: "less than 512 tokens"},
		{name: "unknown model", status: 404, body: `{"error":{"message":"The model 'x' does not exist"}}`, wantErr: rag.ErrUnavailable, wantText: "404 Not Found"},
		{name: "bad key", status: 401, body: `{"error":{"message":"Incorrect API key provided"}}`, wantErr: rag.ErrUnavailable, wantText: "Incorrect API key"},
		{name: "overloaded", status: 503, body: `{"error":"Model is overloaded","error_type":"overloaded"}`, wantErr: rag.ErrUnavailable, wantText: "Model is overloaded"},
		{name: "rate limited", status: 429, body: "slow down", wantErr: rag.ErrUnavailable, wantText: "429"},
		{name: "html from a proxy", status: 200, body: "<html>oops</html>", wantErr: rag.ErrUnavailable, wantText: "bad response"},
		{name: "wrong count", status: 200, body: `{"data":[]}`, wantErr: rag.ErrUnavailable, wantText: "0 embeddings for 1 inputs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			_, err := newClient(t, srv.URL).Embed(t.Context(), "query")
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error = %v, want %v containing %q", err, tt.wantErr, tt.wantText)
			}
		})
	}
}

func TestClientServerDown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if _, err := newClient(t, url).Embed(t.Context(), "query"); !errors.Is(err, rag.ErrUnavailable) {
		t.Errorf("error = %v, want rag.ErrUnavailable", err)
	}
}

func TestClientDimensionChange(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		vec := []float32{1, 0, 0}
		if calls.Add(1) > 1 {
			vec = []float32{1, 0} // the deployment was swapped for another model
		}
		openai.WriteJSON(w, http.StatusOK, map[string]any{"data": []any{map[string]any{"index": 0, "embedding": vec}}})
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	if _, err := c.Embed(t.Context(), "first"); err != nil {
		t.Fatalf("first Embed: %v", err)
	}
	if _, err := c.Embed(t.Context(), "second"); !errors.Is(err, rag.ErrUnavailable) {
		t.Errorf("error = %v, want rag.ErrUnavailable for a changed dimension", err)
	}
	if c.Dimension() != 3 {
		t.Errorf("Dimension = %d after a bad response, want it to stay 3", c.Dimension())
	}
}

func TestClientContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		deadline    bool
		wantTimeout bool
	}{
		{name: "deadline", deadline: true, wantTimeout: true},
		{name: "cancel", deadline: false, wantTimeout: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			arrived := make(chan struct{}, 1)
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				// Read the body first: only then does the server notice a client hanging up.
				_, _ = io.Copy(io.Discard, r.Body)
				select { // never block: a retried request must not wedge the handler
				case arrived <- struct{}{}:
				default:
				}
				select { // a server that never answers
				case <-r.Context().Done():
				case <-release:
				}
			}))
			defer srv.Close()
			defer close(release) // runs before srv.Close, so no handler outlives the test
			ctx, cancel := context.WithCancel(t.Context())
			if tt.deadline {
				ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
			}
			defer cancel()
			if !tt.deadline {
				go func() {
					<-arrived
					cancel()
				}()
			}
			_, err := newClient(t, srv.URL).Embed(ctx, "query")
			if got := errors.Is(err, rag.ErrTimeout); got != tt.wantTimeout {
				t.Errorf("error = %v; matches rag.ErrTimeout = %v, want %v", err, got, tt.wantTimeout)
			}
			if !errors.Is(err, ctx.Err()) {
				t.Errorf("error = %v, want it to wrap %v", err, ctx.Err())
			}
		})
	}
}
