package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newTransport returns a Transport whose idle connections are closed when the test ends.
func newTransport(tb testing.TB, opts ...Option) *Transport {
	tb.Helper()
	tr := New(opts...)
	tb.Cleanup(tr.CloseIdleConnections)
	return tr
}

// do sends a request through tr and returns the response with its body read.
func do(tb testing.TB, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	tb.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("read body: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		tb.Fatalf("close body: %v", err)
	}
	return resp, string(b)
}

func newRequest(tb testing.TB, method, url string, body io.Reader) *http.Request {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	if err != nil {
		tb.Fatal(err)
	}
	return req
}

// connCounter counts the connections a httptest server accepted.
type connCounter struct{ n atomic.Int64 }

func (cc *connCounter) hook(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		cc.n.Add(1)
	}
}

func newServer(tb testing.TB, h http.HandlerFunc) (*httptest.Server, *connCounter) {
	tb.Helper()
	cc := &connCounter{}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = cc.hook
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv, cc
}

func TestNetHTTPServer(t *testing.T) {
	t.Parallel()
	srv, conns := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
		case "/chunked":
			w.Header().Set("Trailer", "Server-Timing")
			_, _ = io.WriteString(w, "first ")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "second")
			w.Header().Set("Server-Timing", "embed;dur=1.5")
		case "/undeclared-trailer":
			_, _ = io.WriteString(w, "x")
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
		case "/echo":
			fmt.Fprintf(w, "%s %s %s len=%d te=%v host=%s ua=%q x=%q", r.Method, r.URL.RequestURI(), body, r.ContentLength, r.TransferEncoding, r.Host, r.UserAgent(), r.Header.Values("X-Test"))
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "/empty":
		case "/error":
			http.Error(w, `{"error":{"message":"no"}}`, http.StatusTooManyRequests)
		}
	})
	tr := newTransport(t)
	tests := []struct {
		name        string
		req         func() *http.Request
		status      int
		body        string
		length      int64
		trailer     http.Header
		newConn     bool // the request must not reuse a connection after it
		notReusable bool
	}{
		{name: "content-length", req: func() *http.Request { return newRequest(t, "GET", srv.URL+"/length", nil) }, status: 200, body: "hello", length: 5},
		{name: "chunked with trailer", req: func() *http.Request { return newRequest(t, "GET", srv.URL+"/chunked", nil) }, status: 200, body: "first second", length: -1,
			trailer: http.Header{"Server-Timing": {"embed;dur=1.5"}}},
		{name: "undeclared trailer", req: func() *http.Request { return newRequest(t, "GET", srv.URL+"/undeclared-trailer", nil) }, status: 200, body: "x", length: -1,
			trailer: http.Header{"X-Late": {"yes"}}},
		{name: "post with length", req: func() *http.Request {
			r := newRequest(t, "POST", srv.URL+"/echo?q=1&r=a%20b", strings.NewReader(`{"a":1}`))
			r.Header["X-Test"] = []string{"one", "two"}
			r.Header.Set("User-Agent", "ragtail-test")
			return r
		}, status: 200, body: `POST /echo?q=1&r=a%20b {"a":1} len=7 te=[] host=` + strings.TrimPrefix(srv.URL, "http://") + ` ua="ragtail-test" x=["one" "two"]`},
		{name: "post of unknown length is chunked", req: func() *http.Request {
			r := newRequest(t, "POST", srv.URL+"/echo", io.NopCloser(strings.NewReader("streamed")))
			r.ContentLength = -1
			return r
		}, status: 200, body: `POST /echo streamed len=-1 te=[chunked] host=` + strings.TrimPrefix(srv.URL, "http://") + ` ua="" x=[]`},
		{name: "host override", req: func() *http.Request {
			r := newRequest(t, "PUT", srv.URL+"/echo", nil)
			r.Host = "example.test"
			return r
		}, status: 200, body: `PUT /echo  len=0 te=[] host=example.test ua="" x=[]`},
		{name: "head", req: func() *http.Request { return newRequest(t, "HEAD", srv.URL+"/length", nil) }, status: 200, length: 5},
		{name: "204", req: func() *http.Request { return newRequest(t, "GET", srv.URL+"/204", nil) }, status: 204},
		{name: "304", req: func() *http.Request { return newRequest(t, "GET", srv.URL+"/304", nil) }, status: 304},
		{name: "empty", req: func() *http.Request { return newRequest(t, "GET", srv.URL+"/empty", nil) }, status: 200},
		{name: "error status", req: func() *http.Request { return newRequest(t, "GET", srv.URL+"/error", nil) }, status: 429, body: "{\"error\":{\"message\":\"no\"}}\n", length: 27},
		{name: "server closes", req: func() *http.Request { return newRequest(t, "GET", srv.URL+"/close", nil) }, status: 200, body: "bye", length: 3, notReusable: true},
		{name: "client closes", req: func() *http.Request {
			r := newRequest(t, "GET", srv.URL+"/length", nil)
			r.Close = true
			return r
		}, status: 200, body: "hello", length: 5, notReusable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: each case checks what it leaves in the shared pool.
			resp, body := do(t, tr, tt.req())
			if resp.StatusCode != tt.status || body != tt.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tt.status, tt.body)
			}
			if tt.length != 0 && resp.ContentLength != tt.length {
				t.Errorf("ContentLength %d, want %d", resp.ContentLength, tt.length)
			}
			if tt.trailer != nil && fmt.Sprint(resp.Trailer) != fmt.Sprint(tt.trailer) {
				t.Errorf("trailer %v, want %v", resp.Trailer, tt.trailer)
			}
			idle, _ := tr.IdleConns()
			if want := 1; tt.notReusable {
				if idle != 0 {
					t.Errorf("%d idle connections after a closing response, want 0", idle)
				}
			} else if idle != want {
				t.Errorf("%d idle connections, want %d", idle, want)
			}
		})
	}
	// Every keep-alive request above reused one connection until the server closed it; the
	// last request's own close ended the second.
	if n := conns.n.Load(); n != 2 {
		t.Errorf("server accepted %d connections, want 2", n)
	}
}

// TestTrailerDeclared checks what client code relies on: the declared keys are in
// resp.Trailer before the body is read, and their values after its end.
func TestTrailerDeclared(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Trailer", "Server-Timing, X-Other")
		_, _ = io.WriteString(w, "data: {}\n\n")
		w.Header().Set("Server-Timing", "retrieve;dur=2")
	})
	tr := newTransport(t)
	resp, err := tr.RoundTrip(newRequest(t, "GET", srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if _, ok := resp.Trailer["Server-Timing"]; !ok || resp.Trailer.Get("Server-Timing") != "" {
		t.Errorf("before the body: trailer %v, want Server-Timing declared without a value", resp.Trailer)
	}
	if resp.Header.Get("Trailer") != "" {
		t.Errorf("Trailer header kept: %v", resp.Header)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	if got := resp.Trailer.Get("Server-Timing"); got != "retrieve;dur=2" {
		t.Errorf("after the body: Server-Timing %q", got)
	}
}

// rawServer serves each connection with handle, on the test's listener.
func rawServer(tb testing.TB, handle func(n int, c net.Conn)) string {
	tb.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				handle(n, c)
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// readRequestHead reads one request's head from br.
func readRequestHead(br *bufio.Reader) (*http.Request, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, req.Body)
	return req, nil
}

func TestRawServers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		reply   string // written after the request has been read
		status  int
		body    string
		trailer http.Header
		err     string // a substring of the round trip's or the body's error
	}{
		{name: "delimited by close", reply: "HTTP/1.1 200 OK\r\n\r\nuntil the end", status: 200, body: "until the end"},
		{name: "http/1.0 without length", reply: "HTTP/1.0 200 OK\r\n\r\nold", status: 200, body: "old"},
		{name: "100 continue skipped", reply: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", status: 200, body: "ok"},
		{name: "chunked trailers without Trailer header", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nServer-Timing: a;dur=1\r\nX-B: 2\r\n\r\n", status: 200, body: "abc",
			trailer: http.Header{"Server-Timing": {"a;dur=1"}, "X-B": {"2"}}},
		{name: "chunk extensions", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n", status: 200, body: "abc"},
		{name: "chunked wins over length", reply: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n", status: 200, body: "z"},
		{name: "same length twice", reply: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nq", status: 200, body: "q"},
		{name: "conflicting lengths", reply: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nqq", err: "conflicting Content-Length"},
		{name: "bad length", reply: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: "bad Content-Length"},
		{name: "unsupported encoding", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: "unsupported transfer encoding"},
		{name: "bad status line", reply: "HTTP/1.1 OK\r\n\r\n", err: "malformed status code"},
		{name: "not http", reply: "SSH-2.0-OpenSSH\r\n\r\n", err: "malformed"},
		{name: "cut in headers", reply: "HTTP/1.1 200 OK\r\nContent-Le", err: "malformed MIME header"},
		{name: "cut after status", reply: "HTTP/1.1 200 OK\r\n", err: "unexpected EOF"},
		{name: "nothing", reply: "", err: "EOF"},
		{name: "cut in body", reply: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", status: 200, err: "unexpected EOF"},
		{name: "cut in chunk", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\nshort", status: 200, err: "unexpected EOF"},
		{name: "bad chunk size", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 200, err: "invalid byte in chunk length"},
		{name: "101", reply: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", err: "101"},
		{name: "too many 1xx", reply: strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 6) + "HTTP/1.1 200 OK\r\n\r\n", err: "too many 1xx"},
		{name: "headers too large", reply: "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 2000) + "\r\n\r\n", err: "headers too large"},
		{name: "trailers too large", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Big: " + strings.Repeat("a", 2000) + "\r\n\r\n", status: 200, err: "headers too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := rawServer(t, func(_ int, c net.Conn) {
				if _, err := readRequestHead(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = io.WriteString(c, tt.reply)
			})
			tr := newTransport(t, WithMaxHeaderBytes(1024))
			resp, err := tr.RoundTrip(newRequest(t, "GET", url, nil))
			var body []byte
			if err == nil {
				if resp.StatusCode != tt.status {
					t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
				}
				body, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if tt.trailer != nil && fmt.Sprint(resp.Trailer) != fmt.Sprint(tt.trailer) {
					t.Errorf("trailer %v, want %v", resp.Trailer, tt.trailer)
				}
			}
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one with %q", err, tt.err)
			case tt.err == "" && string(body) != tt.body:
				t.Errorf("body %q, want %q", body, tt.body)
			}
			if _, open := tr.IdleConns(); open > 1 {
				t.Errorf("%d connections counted open", open)
			}
		})
	}
}

// TestServerClosesAfterReading is the first regression of issue 35: a server that reads a
// request on a reused connection and closes it without answering (a crash, a proxy's timeout, a
// drain) may have done the work. The POST must go on the wire once and the round trip fail, as
// with net/http; it was sent again, and reported a success, for every reused connection.
func TestServerClosesAfterReading(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rt   func(tb testing.TB) http.RoundTripper
	}{
		{"h1", func(tb testing.TB) http.RoundTripper { return newTransport(tb) }},
		{"net/http", func(tb testing.TB) http.RoundTripper {
			tr := &http.Transport{DisableCompression: true}
			tb.Cleanup(tr.CloseIdleConnections)
			return tr
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var posts atomic.Int64
			url := rawServer(t, func(_ int, c net.Conn) {
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					if _, err := readRequestHead(br); err != nil {
						return
					}
					posts.Add(1)
					if n == 2 {
						return // read, then closed without an answer
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			rt := tc.rt(t)
			do(t, rt, newRequest(t, "POST", url, strings.NewReader(`{"n":1}`)))
			resp, err := rt.RoundTrip(newRequest(t, "POST", url, strings.NewReader(`{"n":2}`)))
			if err == nil {
				_ = resp.Body.Close()
				t.Errorf("the POST the server read and dropped succeeded (status %d)", resp.StatusCode)
			}
			if n := posts.Load(); n != 2 {
				t.Errorf("%d POSTs on the wire for 2 round trips, want 2", n)
			}
			// The pool is usable after it: the next request goes on a new connection.
			do(t, rt, newRequest(t, "POST", url, strings.NewReader(`{"n":3}`)))
			if n := posts.Load(); n != 3 {
				t.Errorf("%d POSTs on the wire for 3 round trips, want 3", n)
			}
		})
	}
}

// failingConn fails the write numbered failAt (from 1) on its connection: it sends the first
// partial bytes of it, then returns an error.
type failingConn struct {
	net.Conn
	writes  int
	failAt  int
	partial int
}

func (c *failingConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes != c.failAt {
		return c.Conn.Write(p)
	}
	n := 0
	if c.partial > 0 {
		n, _ = c.Conn.Write(p[:min(c.partial, len(p))])
	}
	return n, errors.New("write: broken pipe")
}

// TestWriteFailure: a write that fails before any byte went out on a reused connection is
// retried on another, when the body can be sent again; once a byte went out, never; nor on a
// fresh connection. The connections come from a dialer wrapping them, so the idle check does
// not see them: the write is what fails.
func TestWriteFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		failConn  int  // the connection (from 0) whose write fails
		failWrite int  // its write that fails (from 1)
		partial   int  // bytes of that write sent first
		getBody   bool // the second request's body can be sent again
		wantErr   bool
		wantPosts int64 // requests the server read, both round trips
		wantConns int64
	}{
		{name: "nothing written, reused", failConn: 0, failWrite: 2, getBody: true, wantPosts: 2, wantConns: 2},
		{name: "nothing written, body cannot be sent again", failConn: 0, failWrite: 2, wantErr: true, wantPosts: 1, wantConns: 1},
		{name: "part written, reused", failConn: 0, failWrite: 2, partial: 10, getBody: true, wantErr: true, wantPosts: 1, wantConns: 1},
		{name: "nothing written, fresh connection", failConn: 1, failWrite: 1, getBody: true, wantErr: true, wantPosts: 1, wantConns: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var posts atomic.Int64
			url := rawServer(t, func(_ int, c net.Conn) {
				br := bufio.NewReader(c)
				for {
					if _, err := readRequestHead(br); err != nil {
						return
					}
					posts.Add(1)
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			var dialled atomic.Int64
			dialer := &net.Dialer{}
			tr := newTransport(t, WithDialContext(func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dialer.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				fc := &failingConn{Conn: c, partial: tt.partial}
				if int(dialled.Add(1)-1) == tt.failConn {
					fc.failAt = tt.failWrite
				}
				return fc, nil
			}))
			first := newRequest(t, "POST", url, strings.NewReader("first"))
			if tt.failConn == 1 {
				first.Close = true // the second request dials connection 1
			}
			do(t, tr, first)
			second := newRequest(t, "POST", url, strings.NewReader("second"))
			if !tt.getBody {
				second.GetBody = nil
			}
			resp, err := tr.RoundTrip(second)
			if err == nil {
				_ = resp.Body.Close()
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("error %v, want an error: %v", err, tt.wantErr)
			}
			if n := posts.Load(); n != tt.wantPosts {
				t.Errorf("%d requests on the wire, want %d", n, tt.wantPosts)
			}
			if n := dialled.Load(); n != tt.wantConns {
				t.Errorf("%d connections dialled, want %d", n, tt.wantConns)
			}
		})
	}
}

// countedConn counts itself out of open when closed.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

func TestMaxConnsWait(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	})
	// Counted on the client's side: a server sees a connection the client closed a little later.
	var open, peak atomic.Int64
	dialer := &net.Dialer{}
	tr := newTransport(t, WithMaxConns(3), WithDialContext(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		n := open.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		return &countedConn{Conn: c, open: &open}, nil
	}))
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range 40 {
		wg.Go(func() {
			req := newRequest(t, "GET", srv.URL, nil)
			if i%5 == 0 {
				req.Close = true // some connections close: their slots go to the waiters
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	wg.Wait()
	if failed.Load() != 0 || peak.Load() > 3 {
		t.Errorf("%d failed, %d connections at once (want at most 3)", failed.Load(), peak.Load())
	}
	if _, n := tr.IdleConns(); n > 3 {
		t.Errorf("%d connections counted open, want at most 3", n)
	}
}

// TestMaxConnsWaitCanceled: a round trip waiting for a connection gives up with its context,
// and the slot it would have had goes on to the next.
func TestMaxConnsWaitCanceled(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	tr := newTransport(t, WithMaxConns(1))
	slow := make(chan error, 1)
	go func() {
		resp, err := tr.RoundTrip(newRequest(t, "GET", srv.URL+"/slow", nil))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		slow <- err
	}()
	for _, open := tr.IdleConns(); open == 0; _, open = tr.IdleConns() {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	req := newRequest(t, "GET", srv.URL, nil).WithContext(ctx)
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting round trip: %v, want a deadline error", err)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	_, body := do(t, tr, newRequest(t, "GET", srv.URL, nil))
	if body != "ok" {
		t.Errorf("body %q", body)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	stalled := make(chan struct{})
	t.Cleanup(func() { close(stalled) })
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
		}
		select {
		case <-stalled:
		case <-r.Context().Done():
		}
	})
	tr := newTransport(t)
	t.Run("waiting for headers", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := tr.RoundTrip(newRequest(t, "GET", srv.URL+"/head", nil).WithContext(ctx))
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Errorf("error %v after %v, want a deadline error at once", err, time.Since(start))
		}
	})
	t.Run("reading the body", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := tr.RoundTrip(newRequest(t, "GET", srv.URL+"/body", nil).WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(20*time.Millisecond, cancel)
		if _, err := resp.Body.Read(buf); !errors.Is(err, context.Canceled) {
			t.Errorf("read after cancel: %v, want context.Canceled", err)
		}
	})
	t.Run("close unblocks a read", func(t *testing.T) {
		resp, err := tr.RoundTrip(newRequest(t, "GET", srv.URL+"/body", nil))
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(20*time.Millisecond, func() { _ = resp.Body.Close() })
		_, err = io.ReadAll(resp.Body)
		if !errors.Is(err, errBodyClosed) {
			t.Errorf("read during close: %v, want %v", err, errBodyClosed)
		}
	})
	t.Run("dialling", func(t *testing.T) {
		dialing := New(WithDialContext(func(ctx context.Context, _, _ string) (net.Conn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := dialing.RoundTrip(newRequest(t, "GET", "http://192.0.2.1/", nil).WithContext(ctx)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("dial: %v, want a deadline error", err)
		}
		if _, open := dialing.IdleConns(); open != 0 {
			t.Errorf("%d connections counted open after a failed dial", open)
		}
	})
	if _, open := tr.IdleConns(); open != 0 {
		t.Errorf("%d connections counted open after cancelled requests", open)
	}
}

func TestDialError(t *testing.T) {
	t.Parallel()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close()
	tr := newTransport(t)
	var done []error
	trace := &httptrace.ClientTrace{ConnectDone: func(_, _ string, err error) { done = append(done, err) }}
	req := newRequest(t, "GET", url, nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	_, err = tr.RoundTrip(req)
	var opErr *net.OpError
	if !errors.As(err, &opErr) || len(done) != 1 || done[0] == nil {
		t.Errorf("error %v (ConnectDone %v), want a *net.OpError reported to ConnectDone", err, done)
	}
}

func TestEarlyCloseClosesConn(t *testing.T) {
	t.Parallel()
	srv, conns := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 100<<10))
	})
	tr := newTransport(t)
	resp, err := tr.RoundTrip(newRequest(t, "GET", srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(make([]byte, 10))
	_ = resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 10)); !errors.Is(err, errBodyClosed) {
		t.Errorf("read after close: %v", err)
	}
	if idle, open := tr.IdleConns(); idle != 0 || open != 0 {
		t.Errorf("%d idle, %d open after an early close, want 0 and 0", idle, open)
	}
	do(t, tr, newRequest(t, "GET", srv.URL, nil))
	do(t, tr, newRequest(t, "GET", srv.URL, nil))
	if n := conns.n.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (one closed early, one reused)", n)
	}
}

func TestIdleTimeoutAndCloseIdle(t *testing.T) {
	t.Parallel()
	srv, conns := newServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	tr := newTransport(t, WithIdleTimeout(30*time.Millisecond))
	do(t, tr, newRequest(t, "GET", srv.URL, nil))
	do(t, tr, newRequest(t, "GET", srv.URL, nil)) // reused
	time.Sleep(60 * time.Millisecond)
	do(t, tr, newRequest(t, "GET", srv.URL, nil)) // the idle one expired
	if n := conns.n.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if idle, open := tr.IdleConns(); idle != 1 || open != 1 {
		t.Errorf("%d idle, %d open, want 1 and 1", idle, open)
	}
	tr.CloseIdleConnections()
	if idle, open := tr.IdleConns(); idle != 0 || open != 0 {
		t.Errorf("after CloseIdleConnections: %d idle, %d open, want 0 and 0", idle, open)
	}
	do(t, tr, newRequest(t, "GET", srv.URL, nil))
	if n := conns.n.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

func TestTraceHooks(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	tr := newTransport(t)
	for i, want := range []string{
		"GetConn ConnectStart ConnectDone GotConn(false) WroteHeaders WroteRequest GotFirstResponseByte PutIdleConn",
		"GetConn GotConn(true) WroteHeaders WroteRequest GotFirstResponseByte PutIdleConn",
	} {
		var events []string
		add := func(s string) { events = append(events, s) }
		trace := &httptrace.ClientTrace{
			GetConn:              func(string) { add("GetConn") },
			ConnectStart:         func(string, string) { add("ConnectStart") },
			ConnectDone:          func(string, string, error) { add("ConnectDone") },
			GotConn:              func(i httptrace.GotConnInfo) { add(fmt.Sprintf("GotConn(%v)", i.Reused)) },
			WroteHeaders:         func() { add("WroteHeaders") },
			WroteRequest:         func(httptrace.WroteRequestInfo) { add("WroteRequest") },
			GotFirstResponseByte: func() { add("GotFirstResponseByte") },
			PutIdleConn:          func(error) { add("PutIdleConn") },
		}
		req := newRequest(t, "POST", srv.URL, strings.NewReader("{}"))
		do(t, tr, req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if got := strings.Join(events, " "); got != want {
			t.Errorf("request %d: hooks %q, want %q", i, got, want)
		}
	}
}

// TestRejects: requests net/http refuses to write are refused before a connection is taken,
// with an error that names what is wrong (and not a header's value, which may be a secret).
func TestRejects(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	var dials atomic.Int64
	dialer := &net.Dialer{}
	tr := newTransport(t, WithDialContext(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dialer.DialContext(ctx, network, addr)
	}))
	withHeader := func(k, v string) func() *http.Request {
		return func() *http.Request {
			r := newRequest(t, "GET", srv.URL, nil)
			r.Header[k] = []string{v}
			return r
		}
	}
	tests := []struct {
		name string
		req  func() *http.Request
		want string
	}{
		{name: "https", req: func() *http.Request { return newRequest(t, "GET", "https://example.test/", nil) }, want: "only http://"},
		{name: "header injection", req: withHeader("X-A", "a\r\nX-Injected: 1"), want: "invalid request: the value of header X-A holds a control character"},
		{name: "control character in a value", req: withHeader("X-A", "secret\x01"), want: "invalid request: the value of header X-A"},
		{name: "NUL in a value", req: withHeader("Authorization", "Bearer \x00"), want: "invalid request: the value of header Authorization"},
		{name: "DEL in a value", req: withHeader("X-A", "a\x7f"), want: "invalid request: the value of header X-A"},
		{name: "bad header name", req: withHeader("Bad Name", "a"), want: `invalid request: header name "Bad Name" is not a token`},
		{name: "colon in a header name", req: withHeader("X-A:", "a"), want: "invalid request: header name"},
		{name: "bad value in a framing header", req: withHeader("Content-Length", "1\r\n"), want: "invalid request: the value of header Content-Length"},
		{name: "space in Host", req: func() *http.Request {
			r := newRequest(t, "GET", srv.URL, nil)
			r.Host = "example.test evil"
			return r
		}, want: `invalid request: Host "example.test evil"`},
		{name: "CRLF in Host", req: func() *http.Request {
			r := newRequest(t, "GET", srv.URL, nil)
			r.Host = "a\r\nX-Injected: 1"
			return r
		}, want: "invalid request: Host"},
		{name: "method not a token", req: func() *http.Request {
			r := newRequest(t, "GET", srv.URL, nil)
			r.Method = "GET /x HTTP/1.1\r\n"
			return r
		}, want: "invalid request: method"},
		{name: "space in the query", req: func() *http.Request {
			r := newRequest(t, "GET", srv.URL, nil)
			r.URL.RawQuery = "a=b c"
			return r
		}, want: "invalid request: the URL's path or query"},
		{name: "control character in the query", req: func() *http.Request {
			r := newRequest(t, "GET", srv.URL, nil)
			r.URL.RawQuery = "a=\x01"
			return r
		}, want: "invalid request: the URL's path or query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tr.RoundTrip(tt.req())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("error %v shows the header's value", err)
			}
		})
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("%d connections dialled for requests refused before any", n)
	}
	// A non-ASCII host goes in its ASCII (punycode) form, as net/http sends it.
	hosts := make(chan string, 1)
	idn, _ := newServer(t, func(_ http.ResponseWriter, r *http.Request) { hosts <- r.Host })
	r := newRequest(t, "GET", idn.URL, nil)
	r.Host = "bücher.example"
	if resp, _ := do(t, tr, r); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d for a non-ASCII Host, want 200", resp.StatusCode)
	}
	if host := <-hosts; host != "xn--bcher-kva.example" {
		t.Errorf("Host %q, want the punycode form", host)
	}
}
