// Package embedtest serves OpenAI-compatible /v1/embeddings from the hash embedder, for tests of
// code that talks to an embeddings server (ingest, the service with --embed-url).
package embedtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/openai"
)

// NewHashServer starts an embeddings server answering every input with its hash embedding of
// dim components; it is closed when tb's test ends.
func NewHashServer(tb testing.TB, dim int) *httptest.Server {
	tb.Helper()
	h, err := embed.NewHash(embed.WithDimension(dim))
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Input any `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var inputs []string
		switch in := req.Input.(type) {
		case string:
			inputs = []string{in}
		case []any:
			for _, x := range in {
				inputs = append(inputs, fmt.Sprint(x))
			}
		}
		data := make([]map[string]any, len(inputs))
		for i, s := range inputs {
			data[i] = map[string]any{"object": "embedding", "index": i, "embedding": h.Vector(s)}
		}
		openai.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	}))
	tb.Cleanup(srv.Close)
	return srv
}
