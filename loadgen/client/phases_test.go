package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// TestConnectionPhases checks the phases each transport records: a first request dials (a
// connect, a DNS lookup for a name, a TLS handshake for https://), the next reuses the
// connection and has none.
func TestConnectionPhases(t *testing.T) {
	t.Parallel()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":1}}`))
	})
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(handler)
	t.Cleanup(secure.Close)
	byName := strings.Replace(plain.URL, "127.0.0.1", "localhost", 1)

	tests := []struct {
		name     string
		url      string
		opts     []Option
		dns, tls bool
	}{
		{"h1 to an address", plain.URL, []Option{WithHTTPClient(HTTPClientH1)}, false, false},
		{"h1 to a name", byName, []Option{WithHTTPClient(HTTPClientH1)}, true, false},
		{"net/http to an address", plain.URL, []Option{WithHTTPClient(HTTPClientNetHTTP)}, false, false},
		{"net/http over TLS", secure.URL, []Option{WithTransport(secure.Client().Transport)}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(tt.url+"/v1/chat/completions", append(tt.opts, WithModel("m"), WithStream(false))...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseIdleConnections()
			origin := time.Now()
			var first, second loadgen.Record
			c.Do(context.Background(), &question, origin, &first)
			c.Do(context.Background(), &question, origin, &second)
			if !first.OK() || !second.OK() {
				t.Fatalf("requests failed: %q, %q", first.Err, second.Err)
			}
			if !first.NewConn || first.ConnReused || first.Connect <= 0 || (first.DNS > 0) != tt.dns || (first.TLSHandshake > 0) != tt.tls {
				t.Errorf("first request: new %v reused %v dns %v connect %v tls %v; want a new connection, dns %v, tls %v",
					first.NewConn, first.ConnReused, first.DNS, first.Connect, first.TLSHandshake, tt.dns, tt.tls)
			}
			// The phases happen between the start of the round trip and the send.
			if total := first.DNS + first.Connect + first.TLSHandshake; total > first.Sent {
				t.Errorf("phases %v longer than the time to the send %v", total, first.Sent)
			}
			if second.NewConn || !second.ConnReused || second.DNS != 0 || second.Connect != 0 || second.TLSHandshake != 0 {
				t.Errorf("second request: %+v; want the kept-alive connection, no phases", second)
			}
			if ttfb, ok := second.TTFB(); !ok || ttfb <= 0 || ttfb > second.End-second.Sent {
				t.Errorf("ttfb %v %v", ttfb, ok)
			}
		})
	}
}
