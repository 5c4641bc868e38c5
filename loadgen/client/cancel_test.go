package client

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// TestDoCancels: a request with a cancel point is abandoned there through either transport:
// the server sees its client go (the request's context ends) well before the stream's end, and
// the record is cancelled, with no error. A point the response never reaches leaves it whole.
// "Well before" is counted in the tokens the server wrote, not in wall time, which a loaded
// machine stretches.
func TestDoCancels(t *testing.T) {
	t.Parallel()
	const tokens, gap = 40, 10 * time.Millisecond // the stream lasts 400 ms
	gone := make(chan int, 16)                    // tokens written when the server saw its client go; -1: it never did
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As a server does, it reads the request first: net/http then watches the connection
		// and ends the request's context when the client goes.
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		if r.Header.Get("X-First-Delay") != "" {
			select { // a slow prefill: no byte before it
			case <-time.After(200 * time.Millisecond):
			case <-r.Context().Done():
				gone <- 0
				return
			}
		}
		for i := range tokens {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			fl.Flush()
			select {
			case <-time.After(gap):
			case <-r.Context().Done():
				gone <- i + 1
				return
			}
		}
		io.WriteString(w, `data: {"choices":[{"delta":{},"finish_reason":"length"}]}`+"\n\ndata: [DONE]\n\n")
		gone <- -1
	}))
	defer srv.Close()
	for _, hc := range HTTPClients {
		for _, tc := range []struct {
			name, point string
			slow        bool   // the server waits 200 ms before its first byte
			wantTokens  [2]int // tokens received, from and to
			serverGone  int    // the server sees the client go by this many tokens written; -1: it never does
		}{
			{"tokens", "tokens:5", false, [2]int{5, 8}, 25},
			{"after the first token", "ttft+50ms", false, [2]int{3, 10}, 25},
			{"from the send, before the first byte", "50ms", true, [2]int{0, 0}, 0},
			{"past the end", "tokens:1000", false, [2]int{tokens, tokens}, -1},
		} {
			t.Run(hc+"/"+tc.name, func(t *testing.T) {
				opts := []Option{WithHTTPClient(hc)}
				if tc.slow {
					opts = append(opts, WithHeader("X-First-Delay", "1"))
				}
				c := newTestClient(t, srv, opts...)
				p, err := loadgen.ParseCancelPoint(tc.point)
				if err != nil {
					t.Fatal(err)
				}
				req := question
				req.Cancel = &p
				rec := do(t, c, req)
				got := 0
				for _, k := range rec.Chunks {
					got += k.Tokens
				}
				wantCancelled := tc.serverGone >= 0
				if rec.Cancelled != wantCancelled || rec.ErrKind != "" || got < tc.wantTokens[0] || got > tc.wantTokens[1] ||
					(wantCancelled && (rec.CancelledAt == 0 || rec.End < rec.CancelledAt)) || rec.OK() == wantCancelled {
					t.Errorf("cancelled %v at %v, end %v, %d tokens, error %q; want cancelled %v with %v tokens",
						rec.Cancelled, rec.CancelledAt, rec.End, got, rec.Err, wantCancelled, tc.wantTokens)
				}
				select {
				case d := <-gone:
					if (tc.serverGone < 0) != (d < 0) || d > tc.serverGone {
						t.Errorf("the server saw the client go after writing %d tokens of %d, want by %d (-1: never)", d, tokens, tc.serverGone)
					}
				case <-time.After(2 * time.Second):
					t.Error("the server handler did not end")
				}
			})
		}
	}
}
