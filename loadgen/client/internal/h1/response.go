package h1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// max1xx bounds the informational responses skipped before the final one, as net/http does.
const max1xx = 5

// readResponse reads a response head from r: the status line and headers of the final
// response, after any 1xx ones. It calls GotFirstResponseByte once the first byte is there.
func readResponse(r *reader, trace *httptrace.ClientTrace) (*http.Response, error) {
	if _, err := r.br.Peek(1); err != nil {
		return nil, err
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	for n1xx := 0; ; n1xx++ {
		line, err := r.tp.ReadLine()
		if err != nil {
			return nil, eofIsUnexpected(err)
		}
		resp, err := parseStatusLine(line)
		if err != nil {
			return nil, err
		}
		mh, err := r.tp.ReadMIMEHeader()
		if err != nil {
			return nil, eofIsUnexpected(err)
		}
		resp.Header = http.Header(mh)
		code := resp.StatusCode
		if code < 100 || code > 199 {
			return resp, nil
		}
		if code == http.StatusSwitchingProtocols {
			return nil, errors.New("h1: 101 Switching Protocols is not supported")
		}
		if n1xx >= max1xx {
			return nil, errors.New("h1: too many 1xx responses")
		}
		switch {
		case code == http.StatusContinue && trace != nil && trace.Got100Continue != nil:
			trace.Got100Continue()
		case trace != nil && trace.Got1xxResponse != nil:
			if err := trace.Got1xxResponse(code, mh); err != nil {
				return nil, err
			}
		}
	}
}

func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseStatusLine parses "HTTP/1.1 200 OK".
func parseStatusLine(line string) (*http.Response, error) {
	proto, status, ok := strings.Cut(line, " ")
	if !ok {
		return nil, fmt.Errorf("h1: malformed status line %q", truncate(line))
	}
	major, minor, ok := http.ParseHTTPVersion(proto)
	if !ok || major != 1 {
		return nil, fmt.Errorf("h1: malformed HTTP version %q", truncate(proto))
	}
	code, _, _ := strings.Cut(status, " ")
	n, err := strconv.Atoi(code)
	if len(code) != 3 || err != nil || n < 100 {
		return nil, fmt.Errorf("h1: malformed status code %q", truncate(code))
	}
	return &http.Response{Status: status, StatusCode: n, Proto: proto, ProtoMajor: major, ProtoMinor: minor}, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// How a response body is delimited.
const (
	modeNone    = iota // no body: HEAD, 1xx, 204, 304, or a Content-Length of 0
	modeLength         // Content-Length bytes
	modeChunked        // chunked transfer coding, then trailers
	modeClose          // up to the connection's close
)

// States of a body.
const (
	bodyReading   = iota
	bodyDone      // read to its end: the connection was released
	bodyAbandoned // closed before its end: the connection is closed
)

// body is a response body reading from its connection on the caller's goroutine.
type body struct {
	t          *Transport // nil when c is nil
	c          *conn      // nil when the body reads from a plain reader (the parser's tests)
	r          *reader
	ctx        context.Context
	resp       *http.Response
	trace      *httptrace.ClientTrace
	stop       func() bool // stops the context's AfterFunc; nil for none
	closeAfter bool        // either side asked for Connection: close

	mode      int
	remaining int64     // modeLength: bytes still to come
	chunks    io.Reader // modeChunked

	mu     sync.Mutex // held by Read; Close takes it to release the reader
	state  atomic.Int32
	closed atomic.Bool
	err    error // sticky: io.EOF at the end, or the error that ended the body
}

// frame sets the body's delimitation from the response head (RFC 9112 6.3) and says whether
// the connection must close after it.
func (b *body) frame(method string) error {
	resp, h := b.resp, b.resp.Header
	if hasToken(h["Connection"], "close") || (resp.ProtoMinor == 0 && !hasToken(h["Connection"], "keep-alive")) {
		resp.Close = true
		b.closeAfter = true
	}
	chunked := false
	if te, ok := h["Transfer-Encoding"]; ok && resp.ProtoMinor >= 1 {
		if len(te) != 1 || !strings.EqualFold(textproto.TrimString(te[0]), "chunked") {
			return fmt.Errorf("h1: unsupported transfer encoding %q", te)
		}
		chunked = true
		delete(h, "Transfer-Encoding")
		delete(h, "Content-Length") // a chunked body's length is the chunks'
		resp.TransferEncoding = []string{"chunked"}
		if err := b.declareTrailers(); err != nil {
			return err
		}
	}
	length, hasLength, err := contentLength(h["Content-Length"])
	if err != nil {
		return err
	}
	code := resp.StatusCode
	switch {
	case method == http.MethodHead && hasLength:
		b.mode, resp.ContentLength = modeNone, length
	case method == http.MethodHead:
		b.mode, resp.ContentLength = modeNone, -1
	case code/100 == 1 || code == http.StatusNoContent || code == http.StatusNotModified:
		b.mode, resp.ContentLength = modeNone, 0
	case chunked:
		b.mode, resp.ContentLength = modeChunked, -1
		b.chunks = httputil.NewChunkedReader(b.r.br)
	case hasLength && length == 0:
		b.mode, resp.ContentLength = modeNone, 0
	case hasLength:
		b.mode, b.remaining, resp.ContentLength = modeLength, length, length
	default:
		b.mode, resp.ContentLength = modeClose, -1
		b.closeAfter, resp.Close = true, true
	}
	return nil
}

// contentLength parses the Content-Length values of a response: several must agree.
func contentLength(vs []string) (int64, bool, error) {
	if len(vs) == 0 {
		return 0, false, nil
	}
	first := textproto.TrimString(vs[0])
	for _, v := range vs[1:] {
		if textproto.TrimString(v) != first {
			return 0, false, fmt.Errorf("h1: conflicting Content-Length values %q", vs)
		}
	}
	n, err := strconv.ParseUint(first, 10, 63)
	if err != nil || first == "" || first[0] == '+' {
		return 0, false, fmt.Errorf("h1: bad Content-Length %q", truncate(first))
	}
	return int64(n), true, nil
}

// declareTrailers makes resp.Trailer list the keys the Trailer header announces, each with no
// value until the body's end, as net/http does.
func (b *body) declareTrailers() error {
	vs, ok := b.resp.Header["Trailer"]
	if !ok {
		return nil
	}
	delete(b.resp.Header, "Trailer")
	trailer := http.Header{}
	for _, v := range vs {
		for key := range strings.SplitSeq(v, ",") {
			key = http.CanonicalHeaderKey(textproto.TrimString(key))
			switch key {
			case "":
				continue
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return fmt.Errorf("h1: bad trailer key %q", key)
			}
			trailer[key] = nil
		}
	}
	if len(trailer) > 0 {
		b.resp.Trailer = trailer
	}
	return nil
}

// Read reads the body; at its end the connection is released before io.EOF is returned.
func (b *body) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errBodyClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n   int
		err error
	)
	switch b.mode {
	case modeLength:
		if int64(len(p)) > b.remaining {
			p = p[:b.remaining]
		}
		n, err = b.r.br.Read(p)
		b.remaining -= int64(n)
		if b.remaining == 0 {
			b.end(true)
			return n, io.EOF
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
	case modeChunked:
		n, err = b.chunks.Read(p)
		if errors.Is(err, io.EOF) {
			if err = b.readTrailer(); err == nil {
				b.end(true)
				return n, io.EOF
			}
			err = eofIsUnexpected(err)
		}
	case modeClose:
		n, err = b.r.br.Read(p)
		if errors.Is(err, io.EOF) {
			b.end(false)
			return n, io.EOF
		}
	default:
		b.end(true)
		return 0, io.EOF
	}
	if err != nil {
		return n, b.fail(err)
	}
	return n, nil
}

// readTrailer reads the trailer section after the last chunk into resp.Trailer.
func (b *body) readTrailer() error {
	if p, err := b.r.br.Peek(2); err == nil && p[0] == '\r' && p[1] == '\n' {
		_, _ = b.r.br.Discard(2)
		return nil // no trailers: nothing to allocate
	}
	if b.c != nil {
		b.c.limit = b.t.cfg.maxHeaderBytes
		defer func() { b.c.limit = -1 }()
	}
	mh, err := b.r.tp.ReadMIMEHeader()
	if err != nil {
		if errors.Is(err, ErrHeaderTooLarge) {
			return fmt.Errorf("%w: trailers over %d bytes", ErrHeaderTooLarge, b.t.cfg.maxHeaderBytes)
		}
		return err
	}
	if b.resp.Trailer == nil {
		b.resp.Trailer = http.Header(mh)
		return nil
	}
	for k, vs := range mh {
		b.resp.Trailer[k] = vs
	}
	return nil
}

// end marks the body read to its end and releases the connection, for reuse when keep says.
func (b *body) end(keep bool) {
	b.err = io.EOF
	if b.state.CompareAndSwap(bodyReading, bodyDone) {
		b.release(keep)
	}
}

// fail ends the body with err (the context's error when it was cancelled) and closes the
// connection.
func (b *body) fail(err error) error {
	switch {
	case b.closed.Load():
		err = errBodyClosed
	case b.ctx != nil && b.ctx.Err() != nil:
		err = b.ctx.Err()
	case errors.Is(err, ErrHeaderTooLarge):
	default:
		err = fmt.Errorf("h1: read body: %w", err)
	}
	b.err = err
	if b.state.CompareAndSwap(bodyReading, bodyDone) {
		b.release(false)
	}
	return err
}

// release hands the reader back to its pool and the connection to the idle pool, when keep
// says and nothing argues against it, or closes it.
func (b *body) release(keep bool) {
	stopped := b.stop == nil || b.stop()
	keep = keep && stopped && !b.closeAfter && b.r.br.Buffered() == 0
	putReader(b.r)
	b.r = nil
	if b.c == nil {
		return
	}
	if keep {
		if b.trace != nil && b.trace.PutIdleConn != nil {
			b.trace.PutIdleConn(nil)
		}
		b.t.putIdle(b.c)
		return
	}
	b.t.closeConn(b.c)
}

// Close closes the body. Before its end it closes the connection (unblocking a Read in
// progress); after it, it only makes later Reads fail.
func (b *body) Close() error {
	b.closed.Store(true)
	if !b.state.CompareAndSwap(bodyReading, bodyAbandoned) {
		return nil
	}
	if b.c != nil {
		_ = b.c.nc.Close()
	}
	b.mu.Lock()
	b.release(false)
	b.mu.Unlock()
	return nil
}
