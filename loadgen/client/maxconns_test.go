package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

func TestWithMaxConns(t *testing.T) {
	t.Parallel()
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
	c, err := New(srv.URL, WithMaxConns(3))
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
