package service

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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

	start := time.Now()
	conns := make([]net.Conn, 0, stalled)
	for range stalled {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial after %d connections: %v", len(conns), err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	client := &http.Client{Timeout: 2 * time.Second}
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

	// Every stalled connection gets its answer (408) and is closed within the body timeout
	// of its start, give or take the time the dials took and scheduling.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open int
	var latest time.Duration
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := io.ReadAll(bufio.NewReader(c))
			mu.Lock()
			defer mu.Unlock()
			if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
				open++
			}
			latest = max(latest, time.Since(start))
		})
	}
	wg.Wait()
	if open > 0 {
		t.Errorf("%d of %d stalled connections were still open after 10 s", open, stalled)
	}
	if latest > 5*time.Second {
		t.Errorf("the last stalled connection closed %v after the first dial; body timeout %v", latest, body)
	}
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
	t.Logf("%d stalled connections closed by %v after the first dial (body timeout %v)", stalled, latest.Round(time.Millisecond), body)
}
