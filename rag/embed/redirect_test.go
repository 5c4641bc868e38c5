package embed_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/embed"
)

// TestClientRefusesCrossOriginRedirects: a redirect to another origin (scheme, host or port)
// would send the texts, and any header a proxy adds, to a server nobody configured; the client
// stops with a clear error and the other server is never reached. A redirect within the
// configured origin is followed.
func TestClientRefusesCrossOriginRedirects(t *testing.T) {
	t.Parallel()
	es, _ := newEmbeddingsServer(t, 8)
	var reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		es.ServeHTTP(w, r)
	}))
	defer other.Close()
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+r.URL.Path, status)
		}))
		_, err := newClient(t, redirector.URL, embed.WithAPIKey("sk-embed")).Embed(t.Context(), "query")
		redirector.Close()
		if !errors.Is(err, rag.ErrUnavailable) || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), "another origin") {
			t.Errorf("redirect %d to another origin: error %v, want ErrUnavailable saying it refused a redirect to another origin", status, err)
		}
		if err != nil && strings.Contains(err.Error(), other.URL) {
			t.Errorf("the error shows the redirect target %s: %v", other.URL, err)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the other origin was reached %d times", n)
	}

	// Same origin: /old redirects to the real route on the same server.
	mux := http.NewServeMux()
	mux.Handle("/v1/embeddings", es)
	mux.HandleFunc("/old/v1/embeddings", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/embeddings", http.StatusPermanentRedirect)
	})
	same := httptest.NewServer(mux)
	defer same.Close()
	if _, err := newClient(t, same.URL+"/old").Embed(t.Context(), "query"); err != nil {
		t.Fatalf("a redirect within the origin was not followed: %v", err)
	}
}
