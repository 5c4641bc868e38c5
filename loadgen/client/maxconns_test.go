package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

func TestWithMaxConns(t *testing.T) {
	t.Parallel()
	for _, name := range HTTPClients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testMaxConns(t, name)
		})
	}
}

func testMaxConns(t *testing.T, httpClient string) {
	// 12 requests at once through a client limited to 3 connections: the server never sees
	// more than 3, and every request completes on them.
	var open, peak atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(5 * time.Millisecond)
		_, _ = w.Write([]byte(`{}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			n := open.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := New(srv.URL, WithMaxConns(3), WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	var failed atomic.Int64
	origin := time.Now()
	for range 12 {
		wg.Go(func() {
			var rec loadgen.Record
			c.Do(context.Background(), &loadgen.Request{Path: "/x"}, origin, &rec)
			if !rec.OK() {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 || peak.Load() > 3 {
		t.Errorf("%d failed, %d connections at once (want at most 3)", failed.Load(), peak.Load())
	}
}

func TestHTTPClientChoice(t *testing.T) {
	tests := []struct {
		name, url, option, proxy, want string
	}{
		{name: "default for http", url: "http://127.0.0.1:8000/v1", want: HTTPClientH1},
		{name: "https goes through net/http", url: "https://127.0.0.1:8443/v1", want: HTTPClientNetHTTP},
		{name: "asked for net/http", url: "http://127.0.0.1:8000/v1", option: HTTPClientNetHTTP, want: HTTPClientNetHTTP},
		{name: "a proxy goes through net/http", url: "http://example.test:8000/v1", proxy: "http://proxy.test:3128", want: HTTPClientNetHTTP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.proxy != "" {
				// http.ProxyFromEnvironment reads the environment once per process: give
				// the choice a proxy setting of its own.
				u, _ := url.Parse(tt.url)
				p, _ := url.Parse(tt.proxy)
				_, got, err := defaultTransport(u, config{httpClient: HTTPClientH1}, http.ProxyURL(p))
				if err != nil || got != tt.want {
					t.Errorf("through a proxy: %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			var opts []Option
			if tt.option != "" {
				opts = append(opts, WithHTTPClient(tt.option))
			}
			c, err := New(tt.url, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.HTTPClient(); got != tt.want {
				t.Errorf("HTTPClient() = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := New("http://127.0.0.1:8000/v1", WithHTTPClient("curl")); err == nil {
		t.Error("an unknown http client was accepted")
	}
}
