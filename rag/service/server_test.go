package service

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStalledBodiesAreClosed: 2,000 connections that send their headers and then stall are
// closed by the server once the body timeout passes, while /healthz keeps answering, and a
// streamed response that outlives the body timeout is not cut.
func TestStalledBodiesAreClosed(t *testing.T) {
	const (
		stalled = 2000
		body    = 400 * time.Millisecond
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprintln(w, "read")
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		for i := range 6 {
			fmt.Fprintf(w, "tick %d\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(body / 3):
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(mux, Timeouts{Header: time.Second, Body: body, Idle: 5 * time.Second}, nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	conns := make([]net.Conn, 0, stalled)
	dialed := make([]time.Time, 0, stalled)
	for range stalled {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial after %d connections: %v", len(conns), err)
		}
		conns = append(conns, c)
		dialed = append(dialed, time.Now())
		fmt.Fprintf(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) error {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := get("/healthz"); err != nil {
		t.Errorf("/healthz with %d stalled connections: %v", stalled, err)
	}

	// Every stalled connection is closed by the server (the client sees the end of the
	// stream, not its own 30 s read deadline), and never before the body timeout. How long
	// after the timeout it goes depends on the machine's load, so it is reported, not asserted.
	var wg sync.WaitGroup
	closedAfter := make([]time.Duration, len(conns))
	stillOpen := make([]bool, len(conns))
	for i, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := io.ReadAll(bufio.NewReader(c))
			closedAfter[i] = time.Since(dialed[i])
			var ne net.Error
			stillOpen[i] = errors.As(err, &ne) && ne.Timeout()
		})
	}
	wg.Wait()
	var open, early int
	for i := range conns {
		switch {
		case stillOpen[i]:
			open++
		case closedAfter[i] < body:
			early++
		}
	}
	if open > 0 {
		t.Errorf("%d of %d stalled connections were still open after 30 s", open, stalled)
	}
	if early > 0 {
		t.Errorf("%d connections were closed before the body timeout of %v", early, body)
	}
	slices.Sort(closedAfter)
	t.Logf("%d stalled connections closed after their dial: median %v, p99 %v, max %v (body timeout %v)", stalled,
		closedAfter[len(closedAfter)/2].Round(time.Millisecond), closedAfter[len(closedAfter)*99/100].Round(time.Millisecond),
		closedAfter[len(closedAfter)-1].Round(time.Millisecond), body)
	if err := get("/healthz"); err != nil {
		t.Errorf("/healthz after the stalled connections: %v", err)
	}

	// A streamed answer lasting twice the body timeout runs to its end.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+"/stream", strings.NewReader(`{"q":1}`))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "tick 5") {
		t.Errorf("a stream past the body timeout was cut: %q", b)
	}
}
