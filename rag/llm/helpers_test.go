package llm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llm"
)

// checkGoroutines fails the test if goroutines started during it are still running once its
// other cleanups have run. Call it first, so that its cleanup runs last. Tests that use it must
// not run in parallel.
func checkGoroutines(tb testing.TB) {
	tb.Helper()
	before := runtime.NumGoroutine()
	tb.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				tb.Errorf("%d goroutines before the test, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// transcript reads testdata/name.
func transcript(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// events splits an SSE transcript into its events, each with its blank line.
func events(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			return append(out, b)
		}
		out = append(out, b[:i+2])
		b = b[i+2:]
	}
	return out
}

// llmServer is an OpenAI-compatible test server. Each request is answered by the next handler
// in answers (the last one repeats); it records requests.
type llmServer struct {
	*httptest.Server
	mu       sync.Mutex
	answers  []http.HandlerFunc
	requests []recorded
	done     chan struct{} // receives after each handler returns
}

type recorded struct {
	header http.Header
	body   map[string]any
}

func newLLMServer(tb testing.TB, answers ...http.HandlerFunc) *llmServer {
	tb.Helper()
	s := &llmServer{answers: answers, done: make(chan struct{}, 100)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { s.done <- struct{}{} }()
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		s.mu.Lock()
		s.requests = append(s.requests, recorded{header: r.Header.Clone(), body: body})
		h := s.answers[min(len(s.requests), len(s.answers))-1]
		s.mu.Unlock()
		h(w, r)
	}))
	tb.Cleanup(s.Close)
	return s
}

func (s *llmServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func (s *llmServer) request(i int) recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[i]
}

// waitHandlers waits until n handlers have returned: the server noticed the client left.
func (s *llmServer) waitHandlers(tb testing.TB, n int) {
	tb.Helper()
	for range n {
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			tb.Fatal("the server's handler is still running: the client did not close the request")
		}
	}
}

// replay answers with an SSE transcript, flushing after each event.
func replay(data []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range events(data) {
			if _, err := w.Write(ev); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
}

// stall writes the first n events of data, then waits until the client goes away.
func stall(data []byte, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range events(data)[:n] {
			_, _ = w.Write(ev)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

// die writes the first n events of data, then drops the connection.
func die(data []byte, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range events(data)[:n] {
			_, _ = w.Write(ev)
		}
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}
}

// status answers with an HTTP error.
func status(code int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func newClient(tb testing.TB, url string, opts ...llm.Option) *llm.Client {
	tb.Helper()
	opts = append([]llm.Option{llm.WithModels("m"), llm.WithRetryBackoff(time.Millisecond)}, opts...)
	c, err := llm.New(url, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func genRequest() rag.GenRequest {
	return rag.GenRequest{ID: "r1", Model: "m", MaxTokens: 64, Temperature: 0.7, Messages: []rag.Message{
		{Role: "system", Content: "Answer from the context."}, {Role: "user", Content: "What is paged attention?"}}}
}

// drain reads a stream to its end.
func drain(s rag.TokenStream) (deltas []rag.Delta, err error) {
	defer s.Close()
	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return deltas, nil
		}
		if err != nil {
			return deltas, err
		}
		deltas = append(deltas, d)
	}
}

func text(deltas []rag.Delta) string {
	var b strings.Builder
	for _, d := range deltas {
		b.WriteString(d.Text)
	}
	return b.String()
}

const answer = "Paged attention splits the KV cache into fixed-size blocks."

// roundTrip serves every request from memory, for fuzzing and benchmarks without sockets.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func memoryClient(tb testing.TB, body []byte, opts ...llm.Option) *llm.Client {
	tb.Helper()
	hc := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body)
			_ = r.Body.Close()
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
	})}
	opts = append([]llm.Option{llm.WithHTTPClient(hc)}, opts...)
	return newClient(tb, "http://llm.invalid/v1", opts...)
}
