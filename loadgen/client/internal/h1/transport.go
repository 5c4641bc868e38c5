// Package h1 is a lean HTTP/1.1 client transport for plaintext http:// targets, made for a load
// generator that keeps thousands of requests in flight. It implements http.RoundTripper, so it
// slots in where net/http's Transport goes, but a round trip runs entirely on the caller's
// goroutine: the request is written with one write from a pooled buffer and the response read
// with a pooled bufio.Reader, with no reader or writer goroutine per connection. A request in
// flight then costs its caller's goroutine, the connection and one 4 KB read buffer, where
// net/http's Transport adds two goroutines and a write buffer per connection.
//
// The returned Body reads from the connection; at its end (Content-Length, chunked with
// trailers, or the connection's close) the connection goes back to an idle pool, or is closed
// when either side asked for Connection: close. A Body closed before its end, and any error,
// close the connection. Trailers are declared from the Trailer header and filled at the body's
// end, as net/http does. 1xx responses before the final one are skipped.
//
// The pool keeps connections per host for reuse (most recently used first), closes those idle
// longer than the idle timeout, and with WithMaxConns limits the connections open to a host:
// callers wait for one, as with net/http's MaxConnsPerHost.
//
// A request is sent again only when it provably never reached the server (net/http's rule for
// requests that are not idempotent; h1 applies it to every method): before an idle connection
// is reused, a non-blocking read checks that nothing arrived on it while it sat in the pool; a
// connection the server closed (EOF, reset) or that received bytes nobody asked for (an
// unsolicited or duplicated response, logged as net/http logs it) is closed and another taken,
// so that a stray response is never read as the next request's answer. A reused connection whose write fails before any byte of the request went out is
// retried on another connection, when the request's body can be sent again (GetBody). Once a
// byte of the request is written, an error ends the round trip, whatever the method: a server
// that read a POST and closed without answering gets it once, and the caller sees the error.
// (The check needs the connection's file descriptor: on a connection from WithDialContext that
// does not implement syscall.Conn, and off Unix, it is skipped.)
//
// Request heads are checked as net/http checks them before anything is written: the method and
// header names must be tokens, header values and the Host must be valid (httpguts), and the
// request target must start with / and hold no space or control character; the error names
// what is wrong, never a header's value. Context cancellation and
// deadlines reach dialling (through the dialer), writing and reading (context.AfterFunc sets a
// past deadline on the connection, so waiting costs no goroutine). The httptrace hooks GetConn,
// GotConn, WroteHeaders, WroteRequest, GotFirstResponseByte, Got100Continue, Got1xxResponse and
// PutIdleConn are called, and the default dialer (net.Dialer) calls DNSStart, DNSDone,
// ConnectStart and ConnectDone.
//
// It speaks neither TLS nor HTTP/2 and ignores proxies: a caller sends https:// and proxied
// requests through net/http. A Transport is safe for concurrent use.
package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Default settings of New.
const (
	DefaultIdleTimeout    = 90 * time.Second
	DefaultDialTimeout    = 30 * time.Second
	DefaultMaxHeaderBytes = 1 << 20
)

// ErrHeaderTooLarge is returned when a response's headers (or trailers) exceed the limit set by
// WithMaxHeaderBytes.
var ErrHeaderTooLarge = errors.New("h1: response headers too large")

// ErrUnsupportedScheme is returned for a request whose URL is not http://.
var ErrUnsupportedScheme = errors.New("h1: only http:// URLs are supported (send https:// through net/http)")

// errInvalidRequest marks a request that cannot be written as it is: no new connection helps.
var errInvalidRequest = errors.New("h1: invalid request")

// errBodyRead marks a request whose body could not be read: no new connection helps.
var errBodyRead = errors.New("h1: read request body")

// errBodyClosed is returned by a Body read after Close.
var errBodyClosed = errors.New("h1: read on closed response body")

// Transport is an HTTP/1.1 http.RoundTripper for http:// URLs (see the package doc).
type Transport struct {
	cfg config

	mu    sync.Mutex
	hosts map[string]*host
}

var _ http.RoundTripper = (*Transport)(nil)

type config struct {
	maxConns       int
	idleTimeout    time.Duration
	maxHeaderBytes int64
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMaxConns limits the connections open to one host to n (0, the default: no limit). A round
// trip at the limit waits for a connection to come back idle or to close.
func WithMaxConns(n int) Option { return optionFunc(func(c *config) { c.maxConns = max(n, 0) }) }

// WithIdleTimeout sets how long a connection may stay idle in the pool before it is closed
// rather than reused (DefaultIdleTimeout; 0 keeps connections without limit). Expired
// connections are closed when the pool is next used, not by a timer.
func WithIdleTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.idleTimeout = max(d, 0) })
}

// WithMaxHeaderBytes bounds the bytes read for a response's status line and headers, 1xx
// responses included, and for its trailers (DefaultMaxHeaderBytes).
func WithMaxHeaderBytes(n int64) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxHeaderBytes = n
		}
	})
}

// WithDialContext replaces the dialer (by default a net.Dialer with DefaultDialTimeout and TCP
// keep-alives every 30 s).
func WithDialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return optionFunc(func(c *config) {
		if dial != nil {
			c.dial = dial
		}
	})
}

// New returns a Transport with opts applied.
func New(opts ...Option) *Transport {
	cfg := config{
		idleTimeout:    DefaultIdleTimeout,
		maxHeaderBytes: DefaultMaxHeaderBytes,
		dial:           (&net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	return &Transport{cfg: cfg, hosts: map[string]*host{}}
}

// host is the pool of one host:port.
type host struct {
	addr  string
	idle  []*conn   // oldest first; reused from the end
	open  int       // connections open or being dialled, idle ones included
	queue []*waiter // round trips waiting for a connection, first come first served
}

// waiter receives an idle connection, or nil: a slot to dial a new one.
type waiter struct{ ch chan *conn }

// conn is one connection. It is the bufio.Reader's source, so that it can bound what the
// reader takes from the network while headers are read, and the request's writer, so that it
// knows whether any byte of the request went out.
type conn struct {
	nc     net.Conn
	host   *host
	reused bool
	idleAt time.Time
	limit  int64 // bytes the reader may still take while headers are read; -1: no limit
	nwrite int64 // bytes written during the current round trip

	// The idle check (see stale): the connection's descriptor, and the peek's function and
	// results kept here so that a check allocates nothing.
	raw     syscall.RawConn // nil: no descriptor to check
	peekFn  func(fd uintptr)
	peekN   int
	peekErr error
	peekBuf [1]byte
}

func newConn(nc net.Conn, h *host) *conn {
	c := &conn{nc: nc, host: h, limit: -1}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
			c.peekFn = c.peek
		}
	}
	return c
}

func (c *conn) Write(p []byte) (int, error) {
	n, err := c.nc.Write(p)
	c.nwrite += int64(n)
	return n, err
}

func (c *conn) Read(p []byte) (int, error) {
	if c.limit >= 0 {
		if c.limit == 0 {
			return 0, ErrHeaderTooLarge
		}
		if int64(len(p)) > c.limit {
			p = p[:c.limit]
		}
	}
	n, err := c.nc.Read(p)
	if c.limit >= 0 {
		c.limit -= int64(n)
	}
	return n, err
}

// reader is a pooled response reader.
type reader struct {
	br *bufio.Reader
	tp textproto.Reader
}

var readers = sync.Pool{New: func() any {
	r := &reader{br: bufio.NewReaderSize(nil, 4096)}
	r.tp.R = r.br
	return r
}}

func getReader(src io.Reader) *reader {
	r := readers.Get().(*reader)
	r.br.Reset(src)
	return r
}

func putReader(r *reader) {
	r.br.Reset(nil)
	readers.Put(r)
}

// writeBufs holds request buffers: a request is written with one write from one of them.
var writeBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledWrite bounds the buffers kept in writeBufs, and the body copied into the request's
// single write; a longer body follows the headers in writes of its own.
const maxPooledWrite = 64 << 10

// aLongTimeAgo is a deadline in the past: it makes every blocked read and write return.
var aLongTimeAgo = time.Unix(1, 0)

// RoundTrip sends req and returns its response (see the package doc). The response's Body must
// be read to its end or closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.roundTrip(req)
	if err != nil && req.Body != nil {
		_ = req.Body.Close()
	}
	return resp, err
}

func (t *Transport) roundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		return nil, errors.New("h1: request has no URL")
	}
	if req.URL.Scheme != "http" {
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedScheme, req.URL.Scheme)
	}
	if req.URL.Host == "" {
		return nil, errors.New("h1: request URL has no host")
	}
	head, err := checkHead(req)
	if err != nil {
		return nil, err
	}
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	h := t.host(req.URL)
	addr := h.addr
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if trace != nil && trace.GetConn != nil {
			trace.GetConn(addr)
		}
		c, err := t.getConn(ctx, h, trace)
		if err != nil {
			return nil, err
		}
		resp, retry, err := t.exchange(ctx, c, req, head, trace)
		if err == nil {
			return resp, nil
		}
		if !retry || attempt+1 >= maxAttempts || ctx.Err() != nil {
			return nil, err
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			req = req.Clone(ctx)
			req.Body = body
		}
	}
}

// maxAttempts bounds the connections one round trip tries when writes fail before any byte.
const maxAttempts = 3

// nothingWrittenError is the error of a request write that sent no byte: the server cannot
// have seen the request.
type nothingWrittenError struct{ error }

func (e nothingWrittenError) Unwrap() error { return e.error }

// exchange writes req on c and reads the response's head. On error c is closed, and retry says
// whether the request may go again on another connection: c was reused (a fresh connection
// that fails says something about the server, not about a stale pool) and its write failed
// before any byte of the request went out.
func (t *Transport) exchange(ctx context.Context, c *conn, req *http.Request, head requestHead, trace *httptrace.ClientTrace) (*http.Response, bool, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	c.nwrite = 0
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		var nothing nothingWrittenError
		retry := c.reused && errors.As(err, &nothing)
		t.closeConn(c)
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, retry, err
	}
	closeReq := req.Close || hasToken(req.Header["Connection"], "close")
	if err := writeRequest(c, req, head, closeReq, trace); err != nil {
		return fail(err)
	}
	r := getReader(c)
	c.limit = t.cfg.maxHeaderBytes
	resp, err := readResponse(r, trace)
	c.limit = -1
	if err != nil {
		putReader(r)
		if errors.Is(err, ErrHeaderTooLarge) {
			return fail(fmt.Errorf("%w: over %d bytes", ErrHeaderTooLarge, t.cfg.maxHeaderBytes))
		}
		return fail(fmt.Errorf("h1: read response: %w", err))
	}
	b := &body{t: t, c: c, r: r, ctx: ctx, resp: resp, trace: trace, stop: stop, closeAfter: closeReq}
	if err := b.frame(req.Method); err != nil {
		putReader(r)
		return fail(err)
	}
	resp.Request = req
	if b.mode == modeNone {
		b.end(true)
		resp.Body = http.NoBody
		return resp, false, nil
	}
	resp.Body = b
	return resp, false, nil
}

// hostPort is u's host with the port, 80 when the URL names none.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// host returns the pool of u's host, keyed by the URL's host as written (no allocation).
func (t *Transport) host(u *url.URL) *host {
	t.mu.Lock()
	h := t.hosts[u.Host]
	if h == nil {
		h = &host{addr: hostPort(u)}
		t.hosts[u.Host] = h
	}
	t.mu.Unlock()
	return h
}

// getConn returns an idle connection of h that is still fit for a request (see stale), or
// dials one when h is under the limit, or waits.
func (t *Transport) getConn(ctx context.Context, h *host, trace *httptrace.ClientTrace) (*conn, error) {
	for {
		c, idleFor, err := t.takeConn(ctx, h, trace)
		if err != nil || !c.reused {
			return c, err
		}
		if stray, dead := c.stale(); dead {
			reportStray(h.addr, stray)
			t.closeConn(c)
			continue
		}
		if trace != nil && trace.GotConn != nil {
			trace.GotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: true, WasIdle: idleFor > 0, IdleTime: idleFor})
		}
		return c, nil
	}
}

// takeConn returns an idle connection of h (reused set, with how long it was idle), or dials
// one when h is under the limit, or waits for one.
func (t *Transport) takeConn(ctx context.Context, h *host, trace *httptrace.ClientTrace) (*conn, time.Duration, error) {
	t.mu.Lock()
	if n := len(h.idle); n > 0 {
		c := h.idle[n-1]
		idleFor := time.Since(c.idleAt)
		if t.cfg.idleTimeout == 0 || idleFor < t.cfg.idleTimeout {
			h.idle[n-1] = nil
			h.idle = h.idle[:n-1]
			t.mu.Unlock()
			c.reused = true
			return c, idleFor, nil
		}
		// The newest idle connection expired, so did all the older ones: close them all and
		// take one's slot for a new connection.
		stale := h.idle
		h.idle = nil
		h.open -= len(stale) - 1
		t.mu.Unlock()
		for _, s := range stale {
			_ = s.nc.Close()
		}
		c, err := t.dial(ctx, h, trace)
		return c, 0, err
	}
	if t.cfg.maxConns == 0 || h.open < t.cfg.maxConns {
		h.open++
		t.mu.Unlock()
		c, err := t.dial(ctx, h, trace)
		return c, 0, err
	}
	w := &waiter{ch: make(chan *conn, 1)}
	h.queue = append(h.queue, w)
	t.mu.Unlock()
	select {
	case c := <-w.ch:
		if c == nil {
			c, err := t.dial(ctx, h, trace)
			return c, 0, err
		}
		c.reused = true
		return c, 0, nil
	case <-ctx.Done():
		t.mu.Lock()
		for i, q := range h.queue {
			if q == w {
				h.queue = append(h.queue[:i], h.queue[i+1:]...)
				t.mu.Unlock()
				return nil, 0, ctx.Err()
			}
		}
		t.mu.Unlock()
		// Handed something already: pass it on.
		if c := <-w.ch; c != nil {
			t.putIdle(c)
		} else {
			t.releaseSlot(h)
		}
		return nil, 0, ctx.Err()
	}
}

// dial opens a connection in a slot of h already counted in h.open.
func (t *Transport) dial(ctx context.Context, h *host, trace *httptrace.ClientTrace) (*conn, error) {
	// net.Dialer calls the trace's DNS and Connect hooks itself.
	nc, err := t.cfg.dial(ctx, "tcp", h.addr)
	if err != nil {
		t.releaseSlot(h)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("dial %s: %w", h.addr, err)
	}
	c := newConn(nc, h)
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: nc})
	}
	return c, nil
}

// putIdle hands c to the first waiter of its host, or keeps it idle.
func (t *Transport) putIdle(c *conn) {
	h := c.host
	_ = c.nc.SetDeadline(time.Time{})
	t.mu.Lock()
	if w := h.popWaiter(); w != nil {
		t.mu.Unlock()
		w.ch <- c
		return
	}
	now := time.Now()
	c.idleAt = now
	h.idle = append(h.idle, c)
	var stale []*conn
	if t.cfg.idleTimeout > 0 {
		n := 0
		for n < len(h.idle) && now.Sub(h.idle[n].idleAt) >= t.cfg.idleTimeout {
			n++
		}
		if n > 0 {
			stale = append(stale, h.idle[:n]...)
			h.idle = append(h.idle[:0], h.idle[n:]...)
			h.open -= n
		}
	}
	t.mu.Unlock()
	for _, s := range stale {
		_ = s.nc.Close()
	}
}

// popWaiter removes and returns the first round trip waiting for a connection to h, or nil;
// the Transport's lock is held.
func (h *host) popWaiter() *waiter {
	if len(h.queue) == 0 {
		return nil
	}
	w := h.queue[0]
	h.queue[0] = nil
	h.queue = h.queue[1:]
	return w
}

// closeConn closes c and frees its slot.
func (t *Transport) closeConn(c *conn) {
	_ = c.nc.Close()
	t.releaseSlot(c.host)
}

// releaseSlot frees a slot of h: the first waiter may dial in it.
func (t *Transport) releaseSlot(h *host) {
	t.mu.Lock()
	if w := h.popWaiter(); w != nil {
		t.mu.Unlock()
		w.ch <- nil
		return
	}
	h.open--
	t.mu.Unlock()
}

// CloseIdleConnections closes the connections idle in the pool. Connections in use are not
// touched, and the Transport stays usable.
func (t *Transport) CloseIdleConnections() {
	var idle []*conn
	t.mu.Lock()
	for _, h := range t.hosts {
		idle = append(idle, h.idle...)
		h.open -= len(h.idle)
		h.idle = nil
	}
	t.mu.Unlock()
	for _, c := range idle {
		_ = c.nc.Close()
	}
}

// IdleConns returns the number of idle connections in the pool and of connections open (idle
// ones included) to all hosts.
func (t *Transport) IdleConns() (idle, open int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.hosts {
		idle += len(h.idle)
		open += h.open
	}
	return idle, open
}

// requestHead is what the request line and Host header of a checked request carry.
type requestHead struct {
	method, target, host string
}

// checkHead checks req as net/http does before it writes anything, so that a request that
// cannot be written as it is fails before a connection is taken: the method and every header
// name must be tokens, header values may hold no control character but tab, the Host (the
// URL's host when req.Host is empty, in its ASCII form) must be a valid Host header, and the
// request target must start with / (or be *) and hold no space or control character. The
// errors match errInvalidRequest.
func checkHead(req *http.Request) (requestHead, error) {
	h := requestHead{method: req.Method, target: req.URL.RequestURI(), host: req.Host}
	if h.method == "" {
		h.method = http.MethodGet
	}
	if !httpguts.ValidHeaderFieldName(h.method) { // a method is a token, as a header name
		return h, fmt.Errorf("%w: method %q is not a token", errInvalidRequest, truncate(h.method))
	}
	if h.host == "" {
		h.host = req.URL.Host
	}
	host, err := httpguts.PunycodeHostPort(h.host)
	if err != nil {
		return h, fmt.Errorf("%w: Host %q: %w", errInvalidRequest, truncate(h.host), err)
	}
	if !httpguts.ValidHostHeader(host) {
		return h, fmt.Errorf("%w: Host %q holds a character a Host header may not", errInvalidRequest, truncate(host))
	}
	h.host = host
	if h.target != "*" && !strings.HasPrefix(h.target, "/") {
		return h, fmt.Errorf("%w: the URL's path %q does not start with /", errInvalidRequest, truncate(h.target))
	}
	if !validTarget(h.target) {
		return h, fmt.Errorf("%w: the URL's path or query holds a space or a control character: escape it", errInvalidRequest)
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return h, fmt.Errorf("%w: header name %q is not a token", errInvalidRequest, truncate(k))
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				// Not the value itself: it may be a credential.
				return h, fmt.Errorf("%w: the value of header %s holds a control character", errInvalidRequest, k)
			}
		}
	}
	return h, nil
}

// writeRequest writes req, checked by checkHead into head, on c: its head and, when short
// enough, its body in one write. A write that fails before any byte went out returns a
// nothingWrittenError.
func writeRequest(c *conn, req *http.Request, head requestHead, closeReq bool, trace *httptrace.ClientTrace) (err error) {
	buf := writeBufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledWrite {
			writeBufs.Put(buf)
		}
		if err != nil && c.nwrite == 0 && !errors.Is(err, errBodyRead) {
			err = nothingWrittenError{err}
		}
		if trace != nil && trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
		}
	}()
	method := head.method
	buf.WriteString(method)
	buf.WriteByte(' ')
	buf.WriteString(head.target)
	buf.WriteString(" HTTP/1.1\r\nHost: ")
	buf.WriteString(head.host)
	buf.WriteString("\r\n")
	for k, vs := range req.Header {
		if framing(k) {
			continue // framed by the transport
		}
		for _, v := range vs {
			buf.WriteString(k)
			buf.WriteString(": ")
			buf.WriteString(v)
			buf.WriteString("\r\n")
		}
	}
	if closeReq {
		buf.WriteString("Connection: close\r\n")
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	length := req.ContentLength
	switch {
	case hasBody && length > 0:
		writeLength(buf, length)
	case hasBody:
		buf.WriteString("Transfer-Encoding: chunked\r\n")
		length = -1
	case method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch:
		buf.WriteString("Content-Length: 0\r\n")
	}
	buf.WriteString("\r\n")
	if trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	if !hasBody {
		_, err = c.Write(buf.Bytes())
		return err
	}
	defer func() { _ = req.Body.Close() }()
	if length > 0 && length <= maxPooledWrite {
		head := buf.Len()
		buf.Grow(int(length))
		b := buf.AvailableBuffer()[:length]
		if _, err := io.ReadFull(req.Body, b); err != nil {
			return fmt.Errorf("%w: %w", errBodyRead, err)
		}
		buf.Write(b)
		if buf.Len() != head+int(length) {
			return fmt.Errorf("%w: shorter than its ContentLength", errBodyRead)
		}
		_, err = c.Write(buf.Bytes())
		return err
	}
	if _, err := c.Write(buf.Bytes()); err != nil {
		return err
	}
	if length > 0 {
		n, err := io.Copy(c, io.LimitReader(req.Body, length))
		if err != nil {
			return err
		}
		if n != length {
			return fmt.Errorf("%w: %d bytes, ContentLength %d", errBodyRead, n, length)
		}
		return nil
	}
	cw := &chunkWriter{w: c}
	if _, err := io.Copy(cw, req.Body); err != nil {
		return err
	}
	_, err = io.WriteString(c, "0\r\n\r\n")
	return err
}

func writeLength(buf *bytes.Buffer, n int64) {
	buf.WriteString("Content-Length: ")
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	buf.Write(d[i:])
	buf.WriteString("\r\n")
}

// chunkWriter writes each Write as one chunk.
type chunkWriter struct{ w io.Writer }

func (cw *chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if _, err := fmt.Fprintf(cw.w, "%x\r\n", len(p)); err != nil {
		return 0, err
	}
	n, err := cw.w.Write(p)
	if err != nil {
		return n, err
	}
	_, err = io.WriteString(cw.w, "\r\n")
	return n, err
}

// validTarget reports whether a request target may go on the request line: no space, which
// would end it, and no control character (net/http refuses those too).
func validTarget(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b == 0x7f {
			return false
		}
	}
	return true
}

// framing reports whether a header names one the transport writes itself, in any case: a
// caller's "transfer-encoding" must not reach the wire beside the transport's framing.
func framing(k string) bool {
	switch len(k) {
	case len("Host"):
		return strings.EqualFold(k, "Host")
	case len("Trailer"):
		return strings.EqualFold(k, "Trailer")
	case len("Connection"):
		return strings.EqualFold(k, "Connection")
	case len("Content-Length"):
		return strings.EqualFold(k, "Content-Length")
	case len("Transfer-Encoding"):
		return strings.EqualFold(k, "Transfer-Encoding")
	}
	return false
}

// hasToken reports whether a comma-separated header value of vs lists token (case-insensitive).
func hasToken(vs []string, token string) bool {
	for _, v := range vs {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// maxStray bounds the bytes of an unsolicited response quoted in the log.
const maxStray = 64

// reportStray logs bytes that arrived on an idle connection to addr without a request, as
// net/http's transport logs them ("Unsolicited response received on idle HTTP channel"); the
// connection is closed and never read. A 408 Request Timeout is how some servers announce that
// they close an idle connection: it is not reported.
func reportStray(addr string, stray []byte) {
	if len(stray) == 0 || is408(stray) {
		return
	}
	log.Printf("h1: unsolicited response received on idle connection to %s starting with %q; connection closed", addr, stray)
}

// is408 reports whether b starts an HTTP/1.x 408 response.
func is408(b []byte) bool {
	return len(b) >= len("HTTP/1.x 408") && string(b[:7]) == "HTTP/1." && string(b[8:12]) == " 408"
}
