package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// startDroppingChat serves streamed chat completions, but every fifth request (counting the
// preflight) is read in full and its connection closed without an answer, as a crashing
// server or a proxy's timeout does. It counts the requests that reached it.
func startDroppingChat(tb testing.TB) (*httptest.Server, *atomic.Int64) {
	tb.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r) // bench's look for the server's metrics
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1)%5 == 0 {
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				tb.Errorf("hijack: %v", err)
				return
			}
			_ = c.Close()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"a", "b"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	}))
	tb.Cleanup(srv.Close)
	return srv, &n
}

// TestBenchHTTPClientsCountDroppedRequestsAlike is the acceptance of issue 35's h1 item: against
// a server that drops a connection after reading the request, bench with --http-client h1 and
// with net/http sends each request once and counts the same completed and failed requests, by
// the same error kinds. h1 used to send a dropped request again on a new connection and count
// it a success.
func TestBenchHTTPClientsCountDroppedRequestsAlike(t *testing.T) {
	t.Parallel()
	const prompts = 40 // and the preflight: 41 requests, of which 8 are dropped
	results := map[string]map[string]any{}
	for _, client := range []string{"h1", "net/http"} {
		srv, received := startDroppingChat(t)
		out := filepath.Join(t.TempDir(), "r.json")
		err := run(context.Background(), []string{"bench", "--url", srv.URL, "--model", "m", "--http-client", client,
			"--request-rate", "200", "--concurrency", "4", "--num-prompts", fmt.Sprint(prompts), "--json", out, "--quiet"}, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("--http-client %s: %v", client, err)
		}
		if n := received.Load(); n != prompts+1 {
			t.Errorf("--http-client %s: the server received %d requests, want %d (each sent once)", client, n, prompts+1)
		}
		r := readJSON(t, out)
		if cfg, _ := r["config"].(map[string]any); cfg["http_client"] != client {
			t.Errorf("config.http_client %v, want %s", cfg["http_client"], client)
		}
		results[client] = r
	}
	h1, std := results["h1"], results["net/http"]
	if h1["completed"] != 32.0 || h1["failed"] != 8.0 {
		t.Errorf("h1: completed %v, failed %v; want 32 and 8", h1["completed"], h1["failed"])
	}
	for _, k := range []string{"completed", "failed"} {
		if h1[k] != std[k] {
			t.Errorf("%s: h1 %v, net/http %v", k, h1[k], std[k])
		}
	}
	if fmt.Sprint(h1["errors"]) != fmt.Sprint(std["errors"]) {
		t.Errorf("errors by kind: h1 %v, net/http %v", h1["errors"], std["errors"])
	}
}
