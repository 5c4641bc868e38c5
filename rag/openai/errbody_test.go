package openai_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/openai"
)

func TestServerMessage(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, want string }{
		{name: "openai", body: `{"error":{"message":"model not found","type":"invalid_request_error"}}`, want: "model not found"},
		{name: "tei and ollama", body: `{"error":"Input validation error","error_type":"Validation"}`, want: "Input validation error"},
		{name: "old vllm", body: `{"object":"error","message":"too long","type":"BadRequestError"}`, want: "too long"},
		{name: "fastapi", body: `{"detail":[{"loc":["body","model"],"msg":"field required"}]}`, want: `[{"loc":["body","model"],"msg":"field required"}]`},
		{name: "html page", body: "<html><body><h1>502 Bad Gateway</h1>\n<hr>nginx</body></html>", want: "502 Bad Gateway nginx"},
		{name: "plain text", body: "upstream connect error\n", want: "upstream connect error"},
		{name: "empty", body: "", want: "no error message"},
		{name: "long text is cut at a rune", body: strings.Repeat("é", 150), want: strings.Repeat("é", 100) + "..."},
		{name: "long message inside JSON is cut", body: `{"error":{"message":"` + strings.Repeat("x", 500) + `"}}`, want: strings.Repeat("x", 200) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := openai.ServerMessage([]byte(tt.body), 200); got != tt.want {
				t.Errorf("ServerMessage = %q, want %q", got, tt.want)
			}
		})
	}
}

// closeCounter is a body that counts its reads' bytes and its closes.
type closeCounter struct {
	r      io.Reader
	read   int
	closed bool
}

func (c *closeCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

func (c *closeCounter) Close() error { c.closed = true; return nil }

func TestReadError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, retryAfter string
		want                   openai.ErrorAnswer
	}{
		{name: "retry after seconds", body: `{"error":{"message":"busy"}}`, retryAfter: " 3 ",
			want: openai.ErrorAnswer{Status: 503, Message: "busy", RetryAfter: 3 * time.Second}},
		{name: "retry after a date is ignored", body: `{"error":"busy"}`, retryAfter: "Wed, 21 Oct 2015 07:28:00 GMT",
			want: openai.ErrorAnswer{Status: 503, Message: "busy"}},
		{name: "huge body read only in part", body: strings.Repeat("x", 10*openai.MaxErrorBody),
			want: openai.ErrorAnswer{Status: 503, Message: strings.Repeat("x", 50) + "..."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := &closeCounter{r: strings.NewReader(tt.body)}
			resp := &http.Response{StatusCode: 503, Header: http.Header{}, Body: body}
			if tt.retryAfter != "" {
				resp.Header.Set("Retry-After", tt.retryAfter)
			}
			if got := openai.ReadError(resp, 50); got != tt.want {
				t.Errorf("ReadError = %+v, want %+v", got, tt.want)
			}
			if !body.closed || body.read > openai.MaxErrorBody {
				t.Errorf("body closed %v after reading %d bytes; want closed, at most %d read", body.closed, body.read, openai.MaxErrorBody)
			}
		})
	}
}
