package embed_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/embed"
)

// TestClientExpectedDimension: the client checks the server's vectors against the size the
// index needs (a Qdrant collection's), before and after learning anything from the server.
func TestClientExpectedDimension(t *testing.T) {
	t.Parallel()
	_, srv := newEmbeddingsServer(t, 8)
	tests := []struct {
		name     string
		expected int
		wantErr  bool
	}{
		{name: "matches the collection", expected: 8},
		{name: "another collection size", expected: 16, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, srv.URL, embed.WithExpectedDimension(tt.expected))
			if c.Dimension() != tt.expected {
				t.Errorf("Dimension() before any request = %d, want %d", c.Dimension(), tt.expected)
			}
			_, err := c.EmbedBatch(t.Context(), []string{"a", "b"})
			if !tt.wantErr {
				if err != nil {
					t.Errorf("EmbedBatch: %v", err)
				}
				return
			}
			if !errors.Is(err, rag.ErrUnavailable) || !strings.Contains(err.Error(), "returned 8 dimensions, want 16") {
				t.Errorf("EmbedBatch: %v; want rag.ErrUnavailable naming both sizes", err)
			}
		})
	}
}

func TestNewClientRejectsConflictingDimensions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []embed.ClientOption
	}{
		{"negative expected", []embed.ClientOption{embed.WithExpectedDimension(-1)}},
		{"output differs from expected", []embed.ClientOption{embed.WithOutputDimensions(256), embed.WithExpectedDimension(384)}},
		{"negative timeout", []embed.ClientOption{embed.WithTimeout(-time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := embed.NewClient("http://localhost:8000", "m", tt.opts...); err == nil {
				t.Error("NewClient accepted conflicting settings")
			}
		})
	}
}

// TestClientTimeout: an embeddings server that stops answering fails the request with
// rag.ErrTimeout after the client's timeout, whatever the caller's context allows.
func TestClientTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := newClient(t, srv.URL, embed.WithTimeout(50*time.Millisecond))
	_, err := c.Embed(context.Background(), "query")
	if !errors.Is(err, rag.ErrTimeout) {
		t.Errorf("Embed: %v, want rag.ErrTimeout", err)
	}
}

func TestClientPropagatesTraceContext(t *testing.T) {
	t.Parallel()
	s, srv := newEmbeddingsServer(t, 4)
	c := newClient(t, srv.URL, embed.WithPropagator(propagation.TraceContext{}))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	if _, err := c.Embed(ctx, "query"); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	got := s.headers[0].Get("Traceparent")
	s.mu.Unlock()
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
		t.Errorf("traceparent %q, want %q", got, want)
	}
}

// TestClientSendsTheEndpointQuery: a query in the configured URL (Azure's api-version, a
// gateway's key) goes with every request, although the SDK resolves routes against a base URL.
func TestClientSendsTheEndpointQuery(t *testing.T) {
	t.Parallel()
	es, _ := newEmbeddingsServer(t, 4)
	var query atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query.Store(r.URL.RawQuery)
		es.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL+"/v1?api-version=2024-02-01")
	if _, err := c.Embed(t.Context(), "query"); err != nil {
		t.Fatal(err)
	}
	if got, _ := query.Load().(string); got != "api-version=2024-02-01" {
		t.Errorf("query sent %q, want api-version=2024-02-01", got)
	}
}
