package embed

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

func base64Floats(v ...float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestDecodeResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		n       int
		want    [][]float32
		wantErr string
	}{
		{
			name: "openai float",
			body: `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-0.25]}],"model":"m","usage":{"prompt_tokens":2,"total_tokens":2}}`,
			n:    1, want: [][]float32{{0.5, -0.25}},
		},
		{
			name: "out of order indices are sorted",
			body: `{"data":[{"index":1,"embedding":[2,2]},{"index":0,"embedding":[1,1]}]}`,
			n:    2, want: [][]float32{{1, 1}, {2, 2}},
		},
		{
			name: "missing index means position",
			body: `{"data":[{"embedding":[1]},{"embedding":[2]}]}`,
			n:    2, want: [][]float32{{1}, {2}},
		},
		{
			name: "base64",
			body: `{"data":[{"index":0,"embedding":"` + base64Floats(1.5, -2, 0.125) + `"}]}`,
			n:    1, want: [][]float32{{1.5, -2, 0.125}},
		},
		{name: "not json", body: `<html>bad gateway</html>`, n: 1, wantErr: "decode response"},
		{name: "too few", body: `{"data":[{"index":0,"embedding":[1]}]}`, n: 2, wantErr: "1 embeddings for 2 inputs"},
		{name: "duplicate index", body: `{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[2]}]}`, n: 2, wantErr: "index 0"},
		{name: "index out of range", body: `{"data":[{"index":3,"embedding":[1]}]}`, n: 1, wantErr: "index 3"},
		{name: "ragged lengths", body: `{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[1,2]}]}`, n: 2, wantErr: "differ in length"},
		{name: "empty vector", body: `{"data":[{"index":0,"embedding":[]}]}`, n: 1, wantErr: "empty"},
		{name: "strings in array", body: `{"data":[{"index":0,"embedding":["a"]}]}`, n: 1, wantErr: "neither an array of numbers"},
		{name: "base64 not whole floats", body: `{"data":[{"index":0,"embedding":"AAAA AA=="}]}`, n: 1, wantErr: "base64"},
		{name: "base64 NaN", body: `{"data":[{"index":0,"embedding":"` + base64Floats(float32(math.NaN())) + `"}]}`, n: 1, wantErr: "NaN"},
		{name: "float32 overflow", body: `{"data":[{"index":0,"embedding":[1e300]}]}`, n: 1, wantErr: "neither an array of numbers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeResponse([]byte(tt.body), tt.n)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeResponse: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d vectors, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if len(got[i]) != len(tt.want[i]) {
					t.Fatalf("vector %d = %v, want %v", i, got[i], tt.want[i])
				}
				for j := range got[i] {
					if got[i][j] != tt.want[i][j] {
						t.Fatalf("vector %d = %v, want %v", i, got[i], tt.want[i])
					}
				}
			}
		})
	}
}

// FuzzDecodeResponse feeds arbitrary server responses to the parser: it must not panic, and
// whatever it accepts must be n finite vectors of one non-zero length.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"data":[{"index":0,"embedding":[0.5,-0.25]}]}`), 1)
	f.Add([]byte(`{"data":[{"index":1,"embedding":[2]},{"index":0,"embedding":[1]}]}`), 2)
	f.Add([]byte(`{"data":[{"index":0,"embedding":"`+base64Floats(1, 2)+`"}]}`), 1)
	f.Add([]byte(`{"error":{"message":"nope"}}`), 1)
	f.Add([]byte(`{"data":null}`), 0)
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n < 0 || n > 64 {
			return
		}
		got, err := decodeResponse(body, n)
		if err != nil {
			return
		}
		if len(got) != n {
			t.Fatalf("accepted %d vectors for %d inputs", len(got), n)
		}
		for i, v := range got {
			if len(v) == 0 || len(v) != len(got[0]) {
				t.Fatalf("accepted vector %d of length %d (first has %d)", i, len(v), len(got[0]))
			}
			for _, x := range v {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					t.Fatalf("accepted a non-finite value in vector %d", i)
				}
			}
		}
	})
}

func TestEndpointURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, base, want string
		wantErr          bool
	}{
		{name: "server root", base: "http://localhost:8000", want: "http://localhost:8000/v1/embeddings"},
		{name: "root with slash", base: "http://localhost:8000/", want: "http://localhost:8000/v1/embeddings"},
		{name: "openai base url", base: "https://api.openai.com/v1", want: "https://api.openai.com/v1/embeddings"},
		{name: "full endpoint", base: "http://tei:80/v1/embeddings", want: "http://tei:80/v1/embeddings"},
		{name: "prefix path", base: "http://gw/llm/v1/", want: "http://gw/llm/v1/embeddings"},
		{name: "query kept", base: "http://gw/v1?api-version=2", want: "http://gw/v1/embeddings?api-version=2"},
		{name: "no scheme", base: "localhost:8000", wantErr: true},
		{name: "other scheme", base: "ftp://host/v1", wantErr: true},
		{name: "empty", base: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, base, err := endpointURL(tt.base)
			if (err != nil) != tt.wantErr {
				t.Fatalf("endpointURL(%q) error = %v, want error %v", tt.base, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("endpointURL(%q) = %q, want %q", tt.base, got, tt.want)
			}
			if noQuery, _, _ := strings.Cut(got, "?"); err == nil && base+"embeddings" != noQuery {
				t.Errorf("endpointURL(%q): SDK base %q does not lead to %q", tt.base, base, noQuery)
			}
		})
	}
}

func TestServerMessage(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, want string }{
		{name: "openai", body: `{"error":{"message":"model not found","type":"invalid_request_error"}}`, want: "model not found"},
		{name: "tei", body: `{"error":"Input validation error","error_type":"Validation"}`, want: "Input validation error"},
		{name: "plain text", body: "upstream connect error\n", want: "upstream connect error"},
		{name: "empty", body: "", want: "no error message"},
		{name: "long text is cut at a rune", body: strings.Repeat("é", 150), want: strings.Repeat("é", 100) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := openai.ServerMessage([]byte(tt.body), maxMessageLen); got != tt.want {
				t.Errorf("serverMessage = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLimitedBody: a body of exactly the limit reads whole; one byte more fails with
// errTooLarge, which requestError reports as it is (rag.ErrUnavailable, "lower the batch size").
func TestLimitedBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size    int
		wantErr bool
	}{{0, false}, {99, false}, {100, false}, {101, true}, {5000, true}} {
		b := &limitedBody{rc: io.NopCloser(bytes.NewReader(make([]byte, tc.size))), left: 100}
		got, err := io.ReadAll(b)
		if tc.wantErr != errors.Is(err, errTooLarge) || (!tc.wantErr && len(got) != tc.size) {
			t.Errorf("body of %d bytes, limit 100: read %d, err %v", tc.size, len(got), err)
		}
	}
	var c Client
	err := c.requestError(t.Context(), fmt.Errorf("error reading response body: %w", errTooLarge))
	if !errors.Is(err, rag.ErrUnavailable) || !strings.Contains(err.Error(), "lower the batch size") {
		t.Errorf("requestError of a too large body: %v", err)
	}
}
