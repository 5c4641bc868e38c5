package retrieve_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc/keepalive"

	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/rag/retrieve/qdranttest"
)

// TestQdrantReconnectCostThroughLink is the keepalive pitfall's mechanism: over TLS, through a
// link that adds a round trip of linkRTT, a server MaxConnectionAge forces reconnects, and each
// one costs a TLS handshake through the link (at least one round trip, as the server measures
// it) and a search whose answer outgrows the fresh connection's 64 KiB flow-control window;
// without MaxConnectionAge the one connection is kept. The bounds below are lower bounds the
// link guarantees (it delays every answer by linkRTT), so a loaded machine cannot break them.
func TestQdrantReconnectCostThroughLink(t *testing.T) {
	checkGoroutines(t)
	const (
		linkRTT = 20 * time.Millisecond
		age     = 300 * time.Millisecond
		padding = 256 << 10 // four 64 KiB windows
		run     = 2 * time.Second
	)
	serverTLS, roots, err := qdranttest.SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	chunks, vecs := testCorpus(20, 8, 9)
	tests := []struct {
		name       string
		maxAge     time.Duration
		reconnects bool
	}{
		{"max-age", age, true},
		{"no max-age", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []qdranttest.Option{qdranttest.WithTLS(serverTLS), qdranttest.WithAnswerPadding(padding)}
			if tt.maxAge > 0 {
				opts = append(opts, qdranttest.WithKeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: tt.maxAge, MaxConnectionAgeGrace: tt.maxAge}))
			}
			srv := startQdrant(t, opts...)
			clientTLS := retrieve.WithTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
			ingest(t, srv.Addr(), 1, chunks, vecs, clientTLS)
			l, err := link.New("qdrant", srv.Addr(), link.Spec{Latency: linkRTT})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			before := srv.Stats()
			q := newQdrant(t, l.Addr(), 1, clientTLS, retrieve.WithPoolSize(1), retrieve.WithKeepalive(-1, 0))
			ctx := context.Background()
			var reconnectSearches, slowest int
			var fastestReconnect time.Duration
			start := time.Now()
			for i := 0; time.Since(start) < run; i++ {
				connects := q.Stats().Connects
				t0 := time.Now()
				if _, err := q.Search(ctx, 0, vecs[i%len(vecs)], 3); err != nil {
					t.Fatalf("search %d: %v", i, err)
				}
				took := time.Since(t0)
				if q.Stats().Connects > connects && i > 0 {
					reconnectSearches++
					if fastestReconnect == 0 || took < fastestReconnect {
						fastestReconnect = took
					}
				}
				if took > 4*linkRTT {
					slowest++
				}
			}
			elapsed := time.Since(start)
			st := srv.Stats()
			conns := st.Connections - before.Connections
			handshakes := st.TLSHandshakes - before.TLSHandshakes
			handshakeTime := st.TLSHandshakeTime - before.TLSHandshakeTime
			t.Logf("%v: %d connections, %d handshakes (mean %v), %d searches over a fresh connection (fastest %v), %d searches over 4 x RTT; link %+v",
				elapsed.Round(time.Millisecond), conns, handshakes, handshakeTime/time.Duration(max(handshakes, 1)), reconnectSearches, fastestReconnect, slowest, l.Stats())
			if got := int(l.Stats().Connections); got != conns {
				t.Errorf("link carried %d connections, server accepted %d: some bypassed the link", got, conns)
			}
			if handshakes != conns || st.TLSHandshakeFailures != before.TLSHandshakeFailures {
				t.Errorf("%d TLS handshakes (%d failed) for %d connections, want one each", handshakes, st.TLSHandshakeFailures-before.TLSHandshakeFailures, conns)
			}
			// Each handshake needs the server's flight to cross the link and the client's
			// Finished to come back: at least one round trip from accept to completion.
			if handshakes > 0 && handshakeTime/time.Duration(handshakes) < linkRTT {
				t.Errorf("mean TLS handshake %v through a %v link: want at least one round trip", handshakeTime/time.Duration(handshakes), linkRTT)
			}
			if !tt.reconnects {
				if conns != 1 {
					t.Errorf("%d connections without MaxConnectionAge, want the first one kept", conns)
				}
				return
			}
			// A connection lives at most 1.1 x age plus the grace for calls in flight; with
			// sequential calls it closes once the current one ends.
			atLeast := int(elapsed / (age*11/10 + time.Second/4))
			if conns < 1+atLeast {
				t.Errorf("%d connections in %v with MaxConnectionAge %v, want at least %d", conns, elapsed, age, 1+atLeast)
			}
			// A search that opened the new connection waited for the handshake's round trip,
			// then for its answer: 256 KiB through a window of 64 KiB that only the client's
			// WINDOW_UPDATEs reopen, one round trip per window.
			if reconnectSearches == 0 {
				t.Fatalf("no search opened a connection among %d reconnects", conns-1)
			}
			if want := 1*linkRTT + padding/(64<<10)*linkRTT; fastestReconnect < want {
				t.Errorf("fastest search over a fresh connection %v, want at least %v (handshake + %d windows of %v)", fastestReconnect, want, padding/(64<<10), linkRTT)
			}
		})
	}
}
