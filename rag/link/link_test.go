package link_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/link"
)

// newLink starts a link to addr and closes it when the test ends.
func newLink(tb testing.TB, addr string, spec string) *link.Link {
	tb.Helper()
	s, err := link.Parse(spec)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := link.New("backend", addr, s, link.WithDialTimeout(time.Second))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// backend is an HTTP server answering every request with body.
func backend(tb testing.TB, body string) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, body)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// client is a keep-alive HTTP client with a deadline on every request.
func client(tb testing.TB) *http.Client {
	tb.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(tb testing.TB, c *http.Client, url string) (string, error) {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// medianRoundTrip is the median time of n requests on a warm keep-alive connection.
func medianRoundTrip(tb testing.TB, c *http.Client, url string, n int) time.Duration {
	tb.Helper()
	if _, err := get(tb, c, url); err != nil { // warm the connection
		tb.Fatal(err)
	}
	rtts := make([]time.Duration, n)
	for i := range rtts {
		start := time.Now()
		if _, err := get(tb, c, url); err != nil {
			tb.Fatal(err)
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	return rtts[n/2]
}

// TestLatencyAddsRoundTrips is the acceptance check: a 20 ms link raises an HTTP round trip by
// at least 20 ms (one round trip: the toxic delays the reply) and by less than four; taking the
// toxic away at run time, on the same open connection, restores it.
func TestLatencyAddsRoundTrips(t *testing.T) {
	t.Parallel()
	const added = 20 * time.Millisecond
	const n = 21
	srv := backend(t, "ok")
	l := newLink(t, srv.Listener.Addr().String(), "")
	url := "http://" + l.Addr() + "/"
	c := client(t)

	base := medianRoundTrip(t, c, url, n)
	if err := l.Set(link.Spec{Latency: added}); err != nil {
		t.Fatal(err)
	}
	slow := medianRoundTrip(t, c, url, n)
	if err := l.Set(link.Spec{}); err != nil {
		t.Fatal(err)
	}
	restored := medianRoundTrip(t, c, url, n)
	t.Logf("median round trip: %v without the toxic, %v with latency:%v, %v after removing it", base, slow, added, restored)
	if d := slow - base; d < added || d >= 4*added {
		t.Fatalf("latency:%v raised the median round trip by %v, want at least %v and under %v", added, d, added, 4*added)
	}
	if restored-base >= added {
		t.Fatalf("after removing the toxic the median round trip is %v, %v above the %v before it", restored, restored-base, base)
	}
	st := l.Stats()
	if st.Connections != 1 || st.Active != 1 || st.BytesUpstream == 0 || st.BytesDownstream == 0 || st.Toxics != "" {
		t.Fatalf("stats %+v; want one connection, still open, bytes both ways, no toxics", st)
	}
}

func TestToxics(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", 20_000)
	cases := []struct {
		name    string
		spec    string
		wantErr bool
		check   func(t *testing.T, got string, took time.Duration)
	}{
		{name: "none", spec: "", check: func(t *testing.T, got string, _ time.Duration) {
			if got != body {
				t.Fatalf("body of %d bytes, want %d", len(got), len(body))
			}
		}},
		{name: "bandwidth", spec: "bandwidth:50KB/s", check: func(t *testing.T, got string, took time.Duration) {
			// 20 kB at 50 kB/s cannot arrive in less than 0.4 s.
			if got != body || took < 400*time.Millisecond {
				t.Fatalf("%d bytes in %v, want %d in at least 400ms", len(got), took, len(body))
			}
		}},
		{name: "limit data", spec: "limit_data:1000", wantErr: true},
		{name: "reset peer", spec: "reset_peer:0", wantErr: true},
		{name: "timeout", spec: "timeout:100ms", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := backend(t, body)
			l := newLink(t, srv.Listener.Addr().String(), tc.spec)
			start := time.Now()
			got, err := get(t, client(t), "http://"+l.Addr()+"/")
			took := time.Since(start)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("GET through %q = %d bytes, want an error", tc.spec, len(got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got, took)
		})
	}
}

func TestDialErrorAndClose(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: each connection is accepted, then closed when the dial fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	l := newLink(t, dead, "")
	if _, err := get(t, client(t), "http://"+l.Addr()+"/"); err == nil {
		t.Fatal("GET through a link to a closed port succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().DialErrors == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := l.Stats(); st.DialErrors != 1 || st.Active != 0 {
		t.Fatalf("stats %+v; want one dial error, nothing open", st)
	}

	srv := backend(t, "ok")
	open := newLink(t, srv.Listener.Addr().String(), "")
	c := client(t)
	if _, err := get(t, c, "http://"+open.Addr()+"/"); err != nil {
		t.Fatal(err)
	}
	if err := open.Close(); err != nil {
		t.Fatal(err)
	}
	if err := open.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if st := open.Stats(); st.Active != 0 {
		t.Fatalf("%d connections open after Close", st.Active)
	}
	if _, err := net.DialTimeout("tcp", open.Addr(), time.Second); err == nil {
		t.Fatal("the link still accepts connections after Close")
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, linkName, upstream string }{
		{"empty name", "", "127.0.0.1:1"},
		{"upper-case name", "LLM", "127.0.0.1:1"},
		{"no port", "llm", "localhost"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := link.New(tc.linkName, tc.upstream, link.Spec{}); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("New(%q, %q): %v, want rag.ErrInvalidRequest", tc.linkName, tc.upstream, err)
			}
		})
	}
}

func TestInstrument(t *testing.T) {
	t.Parallel()
	srv := backend(t, "ok")
	l := newLink(t, srv.Listener.Addr().String(), "latency:5ms")
	if _, err := get(t, client(t), "http://"+l.Addr()+"/"); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	reg, err := link.Instrument(mp, func() []*link.Link { return []*link.Link{l} })
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += float64(dp.Value)
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					got[m.Name] = dp.Value
				}
			}
		}
	}
	if got["rag.link.connections"] != 1 || got["rag.link.connections.active"] != 1 || got["rag.link.io"] <= 0 || got["rag.link.latency"] != 0.005 {
		t.Fatalf("metrics %v; want 1 connection, 1 active, bytes, latency 0.005 s", got)
	}
}

// TestHangUpLeavesNothingRunning hangs up on a long answer while the link still holds some of
// it in its latency toxic, and checks that every goroutine the connection started ends: a
// chain whose destination has gone must still drain, or its toxics block for good. Not
// parallel: it counts the process's goroutines.
func TestHangUpLeavesNothingRunning(t *testing.T) {
	for _, spec := range []string{"latency:20ms", "latency:20ms,reset_peer:50ms"} {
		t.Run(spec, func(t *testing.T) {
			before := runtime.NumGoroutine()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				chunk := []byte(strings.Repeat("x", 32<<10))
				for range 256 { // 8 MiB: far more than the link holds in 20 ms
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			}))
			l := newLink(t, srv.Listener.Addr().String(), spec)
			for range 4 {
				c, err := net.DialTimeout("tcp", l.Addr(), time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 4096)
				// reset_peer drops what it holds and resets: the read fails, as it should.
				if _, err := c.Read(buf); err != nil && !strings.Contains(spec, "reset_peer") {
					t.Fatal(err)
				}
				_ = c.Close() // mid-answer
			}
			time.Sleep(100 * time.Millisecond)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			srv.CloseClientConnections()
			srv.Close()
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<20)
					t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
