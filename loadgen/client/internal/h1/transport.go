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
// callers wait for one, as with net/http's MaxConnsPerHost. A reused connection that fails
// before any byte of its response came is retried once on a fresh connection, when the
// request's body can be sent again: that is how a connection the server closed while it sat
// idle shows (there is no reader goroutine to notice it earlier). Context cancellation and
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
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"
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
// reader takes from the network while headers are read.
type conn struct {
	nc     net.Conn
	host   *host
	reused bool
	idleAt time.Time
	limit  int64 // bytes the reader may still take while headers are read; -1: no limit
	nread  int64 // bytes read from the network during the current round trip
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
	c.nread += int64(n)
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
		resp, retry, err := t.exchange(ctx, c, req, trace)
		if err == nil {
			return resp, nil
		}
		if !retry || attempt > 0 || ctx.Err() != nil {
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

// exchange writes req on c and reads the response's head. On error c is closed, and retry says
// whether the request may go again on a new connection: c was reused and no byte of a response
// came.
func (t *Transport) exchange(ctx context.Context, c *conn, req *http.Request, trace *httptrace.ClientTrace) (*http.Response, bool, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	c.nread = 0
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		retry := c.reused && c.nread == 0 && !errors.Is(err, errInvalidRequest)
		t.closeConn(c)
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, retry, err
	}
	closeReq := req.Close || hasToken(req.Header["Connection"], "close")
	if err := t.writeRequest(c, req, closeReq, trace); err != nil {
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

// getConn returns an idle connection of h, or dials one when h is under the limit, or waits.
func (t *Transport) getConn(ctx context.Context, h *host, trace *httptrace.ClientTrace) (*conn, error) {
	t.mu.Lock()
	if n := len(h.idle); n > 0 {
		c := h.idle[n-1]
		idleFor := time.Since(c.idleAt)
		if t.cfg.idleTimeout == 0 || idleFor < t.cfg.idleTimeout {
			h.idle[n-1] = nil
			h.idle = h.idle[:n-1]
			t.mu.Unlock()
			gotConn(trace, c, idleFor)
			return c, nil
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
		return t.dial(ctx, h, trace)
	}
	if t.cfg.maxConns == 0 || h.open < t.cfg.maxConns {
		h.open++
		t.mu.Unlock()
		return t.dial(ctx, h, trace)
	}
	w := &waiter{ch: make(chan *conn, 1)}
	h.queue = append(h.queue, w)
	t.mu.Unlock()
	select {
	case c := <-w.ch:
		if c == nil {
			return t.dial(ctx, h, trace)
		}
		gotConn(trace, c, 0)
		return c, nil
	case <-ctx.Done():
		t.mu.Lock()
		for i, q := range h.queue {
			if q == w {
				h.queue = append(h.queue[:i], h.queue[i+1:]...)
				t.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		t.mu.Unlock()
		// Handed something already: pass it on.
		if c := <-w.ch; c != nil {
			t.putIdle(c)
		} else {
			t.releaseSlot(h)
		}
		return nil, ctx.Err()
	}
}

func gotConn(trace *httptrace.ClientTrace, c *conn, idleFor time.Duration) {
	c.reused = true
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: true, WasIdle: idleFor > 0, IdleTime: idleFor})
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
	c := &conn{nc: nc, host: h, limit: -1}
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

// writeRequest writes req on c: its head and, when short enough, its body in one write.
func (t *Transport) writeRequest(c *conn, req *http.Request, closeReq bool, trace *httptrace.ClientTrace) (err error) {
	buf := writeBufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledWrite {
			writeBufs.Put(buf)
		}
		if trace != nil && trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
		}
	}()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if !validMethod(method) {
		return fmt.Errorf("%w: method %q", errInvalidRequest, method)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !validValue(host) {
		return fmt.Errorf("%w: Host %q", errInvalidRequest, host)
	}
	buf.WriteString(method)
	buf.WriteByte(' ')
	buf.WriteString(req.URL.RequestURI())
	buf.WriteString(" HTTP/1.1\r\nHost: ")
	buf.WriteString(host)
	buf.WriteString("\r\n")
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
			continue // framed by the transport
		}
		if !validName(k) {
			return fmt.Errorf("%w: header name %q", errInvalidRequest, k)
		}
		for _, v := range vs {
			if !validValue(v) {
				return fmt.Errorf("%w: value of header %s", errInvalidRequest, k)
			}
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
		_, err = c.nc.Write(buf.Bytes())
		return err
	}
	defer func() { _ = req.Body.Close() }()
	if length > 0 && length <= maxPooledWrite {
		head := buf.Len()
		buf.Grow(int(length))
		b := buf.AvailableBuffer()[:length]
		if _, err := io.ReadFull(req.Body, b); err != nil {
			return fmt.Errorf("h1: read request body: %w", err)
		}
		buf.Write(b)
		if buf.Len() != head+int(length) {
			return errors.New("h1: request body shorter than its ContentLength")
		}
		_, err = c.nc.Write(buf.Bytes())
		return err
	}
	if _, err := c.nc.Write(buf.Bytes()); err != nil {
		return err
	}
	if length > 0 {
		n, err := io.Copy(c.nc, io.LimitReader(req.Body, length))
		if err != nil {
			return err
		}
		if n != length {
			return fmt.Errorf("h1: request body of %d bytes, ContentLength %d", n, length)
		}
		return nil
	}
	cw := &chunkWriter{w: c.nc}
	if _, err := io.Copy(cw, req.Body); err != nil {
		return err
	}
	_, err = io.WriteString(c.nc, "0\r\n\r\n")
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

// validMethod reports whether m is an HTTP token.
func validMethod(m string) bool { return m != "" && validName(m) }

// validName reports whether s is an HTTP token (RFC 9110 5.6.2).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validValue reports whether s may be sent as a header value: no CR, LF or NUL, which would
// split the request.
func validValue(s string) bool {
	return strings.IndexByte(s, '\r') < 0 && strings.IndexByte(s, '\n') < 0 && strings.IndexByte(s, 0) < 0
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
