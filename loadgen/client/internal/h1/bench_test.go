package h1

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRoundTrip sends a small POST and reads its chunked reply with a trailer (the shape
// of a short streamed completion) through this transport and through net/http's, on one
// loopback server; the two sub-benchmarks side by side give the ratio. The server's work is in
// both figures.
func BenchmarkRoundTrip(b *testing.B) {
	srv, _ := newServer(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "Server-Timing")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
		w.Header().Set("Server-Timing", "generate;dur=0.1")
	})
	const payload = `{"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true}`
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"h1", newTransport(b)},
		{"net-http", &http.Transport{MaxIdleConnsPerHost: 1 << 16, DisableCompression: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 4096)
			for b.Loop() {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(payload))
				if err != nil {
					b.Fatal(err)
				}
				req.Header["Content-Type"] = []string{"application/json"}
				resp, err := tc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := resp.Body.Read(buf); err != nil {
						break
					}
				}
				_ = resp.Body.Close()
				if resp.Trailer.Get("Server-Timing") == "" {
					b.Fatal("no trailer")
				}
			}
			if t, ok := tc.rt.(interface{ CloseIdleConnections() }); ok {
				t.CloseIdleConnections()
			}
		})
	}
}
