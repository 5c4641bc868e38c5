//go:build linux || darwin

package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// connRecorder dials as the default dialer does and keeps the client's side of every
// connection, unwrapped (the idle check needs its descriptor).
type connRecorder struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (r *connRecorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		r.mu.Lock()
		r.conns = append(r.conns, c)
		r.mu.Unlock()
	}
	return c, err
}

func (r *connRecorder) conn(tb testing.TB, i int) net.Conn {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.conns) {
		tb.Fatalf("connection %d not dialled (%d were)", i, len(r.conns))
	}
	return r.conns[i]
}

// waitReadable waits until c has something to read, a byte or its end, without reading it:
// what the server sent has then arrived, with no guess at how long that takes.
func waitReadable(tb testing.TB, c net.Conn) {
	tb.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return !errors.Is(err, syscall.EAGAIN)
	})
	if err != nil {
		tb.Fatalf("wait for the server's bytes: %v", err)
	}
}

// TestIdleClosedByServerNotUsed: a server that closes each connection after its response,
// without Connection: close, leaves a closed connection in the pool. The idle check finds it
// closed before anything is written, so the next request goes on a new connection at once: no
// write on the dead one and no retry (the trace shows one fresh connection, not a reused one and
// then a fresh one).
func TestIdleClosedByServerNotUsed(t *testing.T) {
	t.Parallel()
	var posts atomic.Int64
	url := rawServer(t, func(_ int, c net.Conn) {
		req, err := readRequestHead(bufio.NewReader(c))
		if err != nil {
			return
		}
		posts.Add(1)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		// The connection closes here, without Connection: close: it looks reusable.
	})
	rec := &connRecorder{}
	tr := newTransport(t, WithDialContext(rec.dial))
	for i, path := range []string{"/one", "/two", "/three"} {
		if i > 0 {
			waitReadable(t, rec.conn(t, i-1)) // the server's close has arrived
		}
		var reused []bool
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
		req := newRequest(t, "POST", url+path, strings.NewReader("body"))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		_, body := do(t, tr, req)
		if body != path {
			t.Errorf("body %q, want %q", body, path)
		}
		if fmt.Sprint(reused) != "[false]" {
			t.Errorf("%s: connections reused %v, want [false] (the closed one left unused)", path, reused)
		}
	}
	if n := posts.Load(); n != 3 {
		t.Errorf("%d POSTs on the wire, want 3", n)
	}
}

// TestStrayResponseNotHandedOn is the second regression of issue 35: a response nobody asked
// for (a duplicated or unsolicited one) that arrives while the connection sits idle must not be
// read as the next request's answer. The connection is dropped and the request goes on a new
// one, as net/http does.
func TestStrayResponseNotHandedOn(t *testing.T) {
	t.Parallel()
	sendStray := make(chan struct{})
	url := rawServer(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := readRequestHead(br); err != nil {
			return
		}
		if n > 0 {
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
			return
		}
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
		<-sendStray
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
		_, _ = readRequestHead(br) // keep the connection open: the stray is not an EOF
	})
	rec := &connRecorder{}
	tr := newTransport(t, WithDialContext(rec.dial))
	if _, body := do(t, tr, newRequest(t, "GET", url+"/first", nil)); body != "first" {
		t.Fatalf("first body %q", body)
	}
	close(sendStray)
	waitReadable(t, rec.conn(t, 0)) // the stray response has arrived on the idle connection
	start := time.Now()
	_, body := do(t, tr, newRequest(t, "GET", url+"/second", nil))
	if body != "second" {
		t.Errorf("second request read %q (after %v), want its own answer %q", body, time.Since(start), "second")
	}
	rec.mu.Lock()
	dialled := len(rec.conns)
	rec.mu.Unlock()
	if dialled != 2 {
		t.Errorf("%d connections dialled, want 2 (the one with the stray response dropped)", dialled)
	}
}
