package h1

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

// FuzzReadResponse feeds the response parser (status line, headers, 1xx, framing, chunks and
// trailers) arbitrary bytes: it must not panic, and where net/http's parser reads a final
// response from the same bytes, both agree on its status, body and trailers.
func FuzzReadResponse(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Server-Timing\r\n\r\n5\r\nhello\r\n0\r\nServer-Timing: a;dur=1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n1\r\nz\r\n0\r\nA: b\r\n c\r\n\r\n",
	} {
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		got, gotBody, gotErr := parseAll(raw, method)
		want, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), &http.Request{Method: method})
		if err != nil || want.StatusCode < 200 || gotErr != nil || want.ProtoMajor != 1 {
			return // only a final response both read is compared
		}
		wantBody, err := io.ReadAll(want.Body)
		if err != nil {
			return
		}
		if got.StatusCode != want.StatusCode {
			t.Fatalf("status %d, net/http %d", got.StatusCode, want.StatusCode)
		}
		if !bytes.Equal(gotBody, wantBody) {
			t.Fatalf("body %q, net/http %q", gotBody, wantBody)
		}
		if fmt.Sprint(got.Trailer) != fmt.Sprint(want.Trailer) {
			t.Fatalf("trailer %v, net/http %v", got.Trailer, want.Trailer)
		}
	})
}

// parseAll reads a response and its whole body from raw as a round trip does.
func parseAll(raw []byte, method string) (*http.Response, []byte, error) {
	r := getReader(bytes.NewReader(raw))
	resp, err := readResponse(r, nil)
	if err != nil {
		putReader(r)
		return nil, nil, err
	}
	b := &body{r: r, resp: resp}
	if err := b.frame(method); err != nil {
		putReader(r)
		return nil, nil, err
	}
	data, err := io.ReadAll(b)
	if err2 := b.Close(); err2 != nil && err == nil {
		err = err2
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return resp, data, err
}

// FuzzWriteRequest builds requests from arbitrary parts, writes them as a round trip does, and
// parses the bytes with net/http's server-side parser (http.ReadRequest). A request h1 accepts
// must follow net/http's rules (httpguts) and those of the request line, and parse back to the
// method, target, Host, header, body and Connection: close that were asked for, with nothing
// else but framing; a request h1 refuses must break one of those rules, and nothing may be
// written for it.
func FuzzWriteRequest(f *testing.F) {
	f.Add("POST", "/v1/chat/completions", "stream=true", "", "Content-Type", "application/json", []byte(`{"model":"m"}`), false, false)
	f.Add("", "/", "", "example.test:8080", "X-A", " \tpadded value\t ", []byte(nil), false, true)
	f.Add("PUT", "/a b/%zz", "q=1&r=a%20b", "bücher.example", "user-agent", "ragtail-bench", []byte("streamed"), true, false)
	f.Fuzz(func(t *testing.T, method, path, rawQuery, host, key, value string, body []byte, chunked, closeReq bool) {
		req := &http.Request{
			Method: method,
			URL:    &url.URL{Scheme: "http", Host: "example.test", Path: path, RawQuery: rawQuery},
			Host:   host,
			Header: http.Header{key: {value}},
			Close:  closeReq,
		}
		if len(body) > 0 {
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
			if chunked {
				req.ContentLength = -1
			}
		}
		var out bytes.Buffer
		c := newConn(&bufConn{w: &out}, nil)
		head, err := checkHead(req)
		if err == nil {
			err = writeRequest(c, req, head, closeReq, nil)
		}
		if err != nil {
			if !errors.Is(err, errInvalidRequest) {
				t.Fatalf("write: %v", err)
			}
			if out.Len() > 0 {
				t.Fatalf("refused (%v) after writing %q", err, out.Bytes())
			}
			if followsRules(req) {
				t.Fatalf("refused a request net/http's rules accept: %v", err)
			}
			return
		}
		if !followsRules(req) {
			t.Fatalf("wrote a request net/http's rules refuse: %q", out.Bytes())
		}
		got, err := http.ReadRequest(bufio.NewReader(&out))
		if err != nil {
			t.Fatalf("net/http cannot read what h1 wrote: %v\n%q", err, out.Bytes())
		}
		wantMethod := cmp.Or(method, http.MethodGet)
		wantHost, _ := httpguts.PunycodeHostPort(cmp.Or(host, req.URL.Host))
		if got.Method != wantMethod || got.RequestURI != req.URL.RequestURI() || got.Host != wantHost || got.Close != closeReq {
			t.Fatalf("read %s %s Host %q close %v, want %s %s Host %q close %v", got.Method, got.RequestURI, got.Host, got.Close,
				wantMethod, req.URL.RequestURI(), wantHost, closeReq)
		}
		ck := http.CanonicalHeaderKey(key)
		framed := ck == "Host" || ck == "Content-Length" || ck == "Transfer-Encoding" || ck == "Connection" || ck == "Trailer"
		if want := strings.Trim(value, " \t"); !framed && fmt.Sprint(got.Header[ck]) != fmt.Sprint([]string{want}) {
			t.Fatalf("header %s: read %q, want %q", ck, got.Header[ck], want)
		}
		for k := range got.Header {
			switch {
			case k == ck && !framed, k == "Content-Length", k == "Connection" && closeReq:
			case k == "Cache-Control" && ck == "Pragma": // ReadRequest's own addition for Pragma: no-cache
			default:
				t.Fatalf("read header %s: %q, not asked for", k, got.Header[k])
			}
		}
		gotBody, err := io.ReadAll(got.Body)
		if err != nil || !bytes.Equal(gotBody, body) {
			t.Fatalf("body %q (%v), want %q", gotBody, err, body)
		}
	})
}

// followsRules reports whether req passes net/http's checks of what it writes: a method and
// header names that are tokens, header values without control characters, a valid Host, and a
// request target that fits the request line.
func followsRules(req *http.Request) bool {
	host, err := httpguts.PunycodeHostPort(cmp.Or(req.Host, req.URL.Host))
	if err != nil || !httpguts.ValidHostHeader(host) || !httpguts.ValidHeaderFieldName(cmp.Or(req.Method, http.MethodGet)) {
		return false
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	target := req.URL.RequestURI()
	return (target == "*" || strings.HasPrefix(target, "/")) && !strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

// bufConn is a connection that keeps what is written to it.
type bufConn struct {
	net.Conn // nil: only Write, Close and SetDeadline are called
	w        *bytes.Buffer
}

func (c *bufConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *bufConn) Close() error                { return nil }
func (c *bufConn) SetDeadline(time.Time) error { return nil }
