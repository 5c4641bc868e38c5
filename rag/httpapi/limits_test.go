package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/httpapi"
)

// TestOversizedStringsAreRefusedBriefly sends client-controlled strings far beyond any real
// value: each gets a 400 in OpenAI's error JSON whose body stays under 4 KB and quotes at most a
// short prefix of what was sent.
func TestOversizedStringsAreRefusedBriefly(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	huge := strings.Repeat("x", 1_000_000) // 1 MB, within the 1 MiB body limit once in JSON
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name   string
		body   string
		header []string
		param  string
	}{
		{name: "1 MB model name", body: `{"model":"` + huge + `",` + msgs + `}`, param: "model"},
		{name: "model one byte too long", body: `{"model":"` + strings.Repeat("m", 257) + `",` + msgs + `}`, param: "model"},
		{name: "1 MB role", body: `{"model":"` + s.model + `","messages":[{"role":"` + huge + `","content":"hi"}]}`, param: "messages[0].role"},
		{name: "1 MB coupling", body: `{"model":"` + s.model + `",` + msgs + `,"rag":{"coupling":"` + huge + `"}}`, param: "rag.coupling"},
		{name: "100 KB X-User-ID", body: `{"model":"` + s.model + `",` + msgs + `}`, header: []string{"X-User-ID", huge[:100_000]}},
		{name: "X-User-ID one byte too long", body: `{"model":"` + s.model + `",` + msgs + `}`, header: []string{"X-User-ID", strings.Repeat("u", httpapi.MaxUserIDLen+1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, s.srv.URL+"/v1/chat/completions", tt.body, tt.header...)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 400 {
				t.Fatalf("status %d, want 400; body %.200s", resp.StatusCode, body)
			}
			if len(body) >= 4096 {
				t.Errorf("error body is %d bytes, want under 4096", len(body))
			}
			if strings.Contains(string(body), strings.Repeat("x", 100)) {
				t.Errorf("error body echoes the value: %.300s", body)
			}
			var eb struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Message == "" || eb.Error.Type != "invalid_request_error" {
				t.Fatalf("error body %s: %v", body, err)
			}
			if tt.param != "" && (eb.Error.Param == nil || *eb.Error.Param != tt.param) {
				t.Errorf("param = %v, want %q", eb.Error.Param, tt.param)
			}
		})
	}
}

// countingHandler counts the log records it receives and keeps their "suppressed" attribute.
type countingHandler struct {
	mu         sync.Mutex
	records    int
	suppressed []int64
}

func (h *countingHandler) Enabled(_ context.Context, _ slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *countingHandler) WithGroup(string) slog.Handler                { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "suppressed" {
			h.suppressed = append(h.suppressed, a.Value.Int64())
		}
		return true
	})
	return nil
}

// TestFailureLogsAreRateLimited floods the API with requests for an unknown model: the log gets
// the first lines of the burst and then about one a second, not one line per request, and the
// line after a pause says how many were left out.
func TestFailureLogsAreRateLimited(t *testing.T) {
	t.Parallel()
	h := &countingHandler{}
	s := newTestService(t, httpapi.WithLogger(slog.New(h)))
	const requests = 200
	body := `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`
	start := time.Now()
	for range requests {
		if resp := post(t, s.srv.URL+"/v1/chat/completions", body); resp.StatusCode != 404 {
			t.Fatalf("status %d, want 404", resp.StatusCode)
		}
	}
	elapsed := time.Since(start)
	h.mu.Lock()
	lines := h.records
	h.mu.Unlock()
	// 10 at once, then one per second of the flood (plus one for a partial second).
	if most := 10 + int(elapsed/time.Second) + 1; lines > most || lines < 10 {
		t.Fatalf("%d failure lines for %d failed requests in %v, want 10 to %d", lines, requests, elapsed, most)
	}
	time.Sleep(1100 * time.Millisecond)
	post(t, s.srv.URL+"/v1/chat/completions", body)
	h.mu.Lock()
	defer h.mu.Unlock()
	var total int64
	for _, n := range h.suppressed {
		total += n
	}
	if want := int64(requests + 1 - h.records); total != want {
		t.Errorf("lines say %d were suppressed, %d were", total, want)
	}
}

// TestUnknownRouteIsBrief: a 404 for an unknown path names the routes there are (the embeddings
// route only when the API serves it) and echoes at most a short prefix of the path.
func TestUnknownRouteIsBrief(t *testing.T) {
	t.Parallel()
	be := newTestBackends(t, 1)
	long := "/" + strings.Repeat("p", 8000)
	for _, tt := range []struct {
		name           string
		opts           []httpapi.Option
		wantEmbeddings bool
	}{
		{name: "chat only"},
		{name: "with embeddings", opts: []httpapi.Option{httpapi.WithEmbeddings(be.emb)}, wantEmbeddings: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestService(t, tt.opts...)
			resp, err := http.Get(s.srv.URL + long)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("status %d, want 404", resp.StatusCode)
			}
			if len(body) > 1024 {
				t.Errorf("404 body is %d bytes for an 8 KB path, want under 1 KB", len(body))
			}
			if !strings.Contains(string(body), "/v1/chat/completions") {
				t.Errorf("404 body does not name the chat route: %s", body)
			}
			if got := strings.Contains(string(body), "/v1/embeddings"); got != tt.wantEmbeddings {
				t.Errorf("404 body names /v1/embeddings: %v, want %v: %s", got, tt.wantEmbeddings, body)
			}
		})
	}
}
