package client

import (
	"context"
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

// endlessStream streams chunks made by chunk(i) until the client goes away: a server that
// ignores max_tokens, or never stops.
func endlessStream(chunk func(i int) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; r.Context().Err() == nil; i++ {
			if _, err := io.WriteString(w, "data: "+chunk(i)+"\n\n"); err != nil {
				return
			}
			if i%64 == 0 {
				f.Flush()
			}
		}
	})
}

func contentChunk(int) string {
	return `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}`
}

// TestOverlongStreamsAreCut streams far more than max_tokens (or forever): the client stops
// reading at OutputTokenLimit and records the request as overlong, with at most that many chunk
// records. Without the limit, a stream of 1 GB counted as a success and an endless one grew
// without bound.
func TestOverlongStreamsAreCut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		chunk  func(i int) string
		opts   []Option
		req    loadgen.Request
		limit  int
		chunks bool // the limit is on content chunks, so the records reach it
	}{
		{name: "max_tokens 5 from the client", chunk: contentChunk, opts: []Option{WithMaxTokens(5)}, req: question, limit: 69, chunks: true},
		{name: "max_tokens 100 from the request", chunk: contentChunk, req: loadgen.Request{Messages: question.Messages, MaxTokens: 100}, limit: 200, chunks: true},
		{name: "max_tokens from the extra body", chunk: contentChunk, opts: []Option{WithMaxTokens(500)},
			req: loadgen.Request{Messages: question.Messages, Extra: map[string]any{"max_tokens": 10}}, limit: 74, chunks: true},
		{name: "no max_tokens", chunk: contentChunk, req: question, limit: DefaultOutputTokenLimit, chunks: true},
		{name: "empty deltas", chunk: func(int) string { return `{"choices":[{"index":0,"delta":{}}]}` },
			opts: []Option{WithMaxTokens(5)}, req: question, limit: 69},
		{name: "usage past the limit", chunk: func(i int) string {
			return fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":%d}}`, 1+i*1000)
		}, opts: []Option{WithMaxTokens(5)}, req: question, limit: 69},
		{name: "a limit set by the caller", chunk: contentChunk, opts: []Option{WithMaxTokens(5), WithOutputTokenLimit(300)}, req: question, limit: 300, chunks: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(endlessStream(tt.chunk))
			defer srv.Close()
			c := newTestClient(t, srv, tt.opts...)
			// The old client read on until the deadline, and recorded a timeout.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req := tt.req
			var rec loadgen.Record
			start := time.Now()
			c.Do(ctx, &req, start, &rec)
			if rec.ErrKind != loadgen.ErrKindOverlong {
				t.Fatalf("err kind %q (%s) after %v, want %q", rec.ErrKind, rec.Err, time.Since(start), loadgen.ErrKindOverlong)
			}
			if got := c.outputLimitOf(c.maxTokensOf(&req)); got != tt.limit {
				t.Errorf("limit %d, want %d", got, tt.limit)
			}
			if len(rec.Chunks) > tt.limit || tt.chunks && len(rec.Chunks) != tt.limit {
				t.Errorf("%d chunk records, want at most the limit %d", len(rec.Chunks), tt.limit)
			}
			if !strings.Contains(rec.Err, fmt.Sprint(tt.limit)) {
				t.Errorf("error %q does not state the limit", rec.Err)
			}
		})
	}
}

// TestResponsesWithinTheLimit checks that a server counting a few tokens over max_tokens, as
// some do, is no failure, and that a non-streamed answer claiming far more than max_tokens is.
func TestResponsesWithinTheLimit(t *testing.T) {
	t.Parallel()
	pieces := strings.Split(strings.Repeat("a ", 69), " ")[:69]
	over := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, streamOf(pieces, ""))
	}))
	defer over.Close()
	rec := do(t, newTestClient(t, over, WithMaxTokens(5)), question)
	if rec.ErrKind != "" || len(rec.Chunks) != 69 {
		t.Errorf("69 tokens for max_tokens 5: %q %s, %d chunks", rec.ErrKind, rec.Err, len(rec.Chunks))
	}
	// An agent's usage sums its model calls: 136 tokens for max_tokens 32 a call is within a
	// limit the caller raised, and overlong without it.
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":136}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer agent.Close()
	if rec := do(t, newTestClient(t, agent, WithMaxTokens(32)), question); rec.ErrKind != loadgen.ErrKindOverlong {
		t.Errorf("usage 136 for max_tokens 32: %q, want overlong", rec.ErrKind)
	}
	if rec := do(t, newTestClient(t, agent, WithMaxTokens(32), WithOutputTokenLimit(5*32)), question); rec.ErrKind != "" {
		t.Errorf("usage 136 within a limit of 160: %q %s", rec.ErrKind, rec.Err)
	}

	claim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"message": map[string]any{"content": "hi"}, "finish_reason": "length"}},
			"usage":   map[string]any{"prompt_tokens": 3, "completion_tokens": 7_300_000},
		})
	}))
	defer claim.Close()
	rec = do(t, newTestClient(t, claim, WithMaxTokens(5), WithStream(false)), question)
	if rec.ErrKind != loadgen.ErrKindOverlong {
		t.Errorf("7.3 million tokens for max_tokens 5: %q %s", rec.ErrKind, rec.Err)
	}
}
