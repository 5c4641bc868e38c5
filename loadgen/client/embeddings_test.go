package client

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// embeddingsServer answers like OpenAI's /v1/embeddings, with one embedding per input unless
// drop says how many to leave out, and keeps the last body it read.
func embeddingsServer(t *testing.T, drop int, usage bool, last *map[string]any) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Accept") != "application/json" {
			http.Error(w, "wrong route or accept "+r.URL.Path+" "+r.Header.Get("Accept"), http.StatusNotFound)
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		*last = body
		inputs, _ := body["input"].([]any)
		var data []string
		for i := range len(inputs) - drop {
			data = append(data, fmt.Sprintf(`{"object":"embedding","index":%d,"embedding":[0.25,-0.5,1e-3]}`, i))
		}
		u := ""
		if usage {
			u = fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"total_tokens":%d}`, 5*len(inputs), 5*len(inputs))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","model":"e","data":[`+strings.Join(data, ",")+`]`+u+`}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDoEmbeddings(t *testing.T) {
	t.Parallel()
	batch := loadgen.Request{Input: []string{"alpha", "beta \"quoted\"", "gamma"}, PromptTokens: 4}
	tests := []struct {
		name    string
		drop    int
		usage   bool
		wantErr string
		tokens  int
	}{
		{name: "one embedding per input, usage counts the tokens", usage: true, tokens: 15},
		{name: "no usage: the source's estimate", tokens: 4},
		{name: "an embedding missing", drop: 1, usage: true, wantErr: "returned 2 embeddings for 3 inputs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var body map[string]any
			srv := embeddingsServer(t, tt.drop, tt.usage, &body)
			c, err := New(srv.URL+"/v1/embeddings", WithModel("e"), WithMaxTokens(64), WithBody(map[string]any{"user": "bench"}))
			if err != nil {
				t.Fatal(err)
			}
			if !c.IsEmbeddings() {
				t.Fatal("not an embeddings client")
			}
			rec := do(t, c, batch)
			if tt.wantErr != "" {
				if rec.ErrKind != loadgen.ErrKindProtocol || !strings.Contains(rec.Err, tt.wantErr) {
					t.Fatalf("record %+v, want a protocol error %q", rec, tt.wantErr)
				}
				return
			}
			if !rec.OK() || rec.Inputs != 3 || rec.PromptTokens != tt.tokens || rec.FirstToken != 0 || rec.End < rec.FirstByte {
				t.Fatalf("record %+v", rec)
			}
			want := map[string]any{"model": "e", "input": []any{"alpha", "beta \"quoted\"", "gamma"}, "encoding_format": "float", "user": "bench"}
			if fmt.Sprint(body) != fmt.Sprint(want) {
				t.Errorf("body %v, want %v (no max_tokens, no stream)", body, want)
			}
		})
	}
}

func TestEmbeddingsEndpointMismatch(t *testing.T) {
	t.Parallel()
	var body map[string]any
	srv := embeddingsServer(t, 0, true, &body)
	emb, err := New(srv.URL + "/v1/embeddings")
	if err != nil {
		t.Fatal(err)
	}
	if rec := do(t, emb, question); rec.ErrKind != loadgen.ErrKindProtocol || !strings.Contains(rec.Err, "needs requests with Input") {
		t.Errorf("chat request to an embeddings URL: %+v", rec)
	}
	chat, err := New(srv.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	if rec := do(t, chat, loadgen.Request{Input: []string{"x"}}); rec.ErrKind != loadgen.ErrKindProtocol || !strings.Contains(rec.Err, "needs an /embeddings URL") {
		t.Errorf("embeddings request to a chat URL: %+v", rec)
	}
}

// FuzzReadEmbeddings feeds arbitrary bodies to the embeddings reader: it must not panic, and a
// record it accepts has one embedding per input.
func FuzzReadEmbeddings(f *testing.F) {
	f.Add([]byte(`{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":"AAAA"}],"usage":{"prompt_tokens":3,"total_tokens":3}}`))
	f.Add([]byte(`{"data":[],"usage":null}`))
	f.Add([]byte(`{"data":[{}, {}],"usage":{"prompt_tokens":-1}}`))
	c, err := New("http://127.0.0.1:1/v1/embeddings")
	if err != nil {
		f.Fatal(err)
	}
	req := loadgen.Request{Input: []string{"a", "b"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var rec loadgen.Record
		c.readEmbeddings(t.Context(), strings.NewReader(string(body)), &req, time.Now(), &rec)
		if rec.ErrKind == "" && (rec.Inputs != 2 || rec.PromptTokens < 0) {
			t.Fatalf("accepted %q as %+v", body, rec)
		}
		if rec.ErrKind != "" && len(rec.Err) > maxErrText+3 {
			t.Fatalf("error of %d bytes", len(rec.Err))
		}
	})
}
