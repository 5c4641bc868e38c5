package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
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
