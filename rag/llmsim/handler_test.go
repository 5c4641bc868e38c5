package llmsim_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/internal/testwait"
	wire "github.com/ragtail/ragtail/rag/openai"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// newServer serves e's handler on a loopback test server.
func newServer(tb testing.TB, e *llmsim.Engine, opts ...llmsim.HandlerOption) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(llmsim.NewHandler(e, opts...))
	tb.Cleanup(srv.Close)
	return srv
}

func post(tb testing.TB, ctx context.Context, url, body string) *http.Response {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

func chatBody(tb testing.TB, model string, maxTokens int, stream, includeUsage bool) string {
	tb.Helper()
	body := map[string]any{
		"model": model,
		"messages": []map[string]string{
			{"role": "system", "content": "Chunked prefill splits long prompts into pieces that share steps with decodes."},
			{"role": "user", "content": "What does chunked prefill do?"},
		},
		"max_tokens": maxTokens,
		"stream":     stream,
		"rag":        map[string]any{"coupling": "nonsense"}, // ignored by the bare engine
	}
	if includeUsage {
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// sseEvents splits an event stream into the data of its events.
func sseEvents(tb testing.TB, r io.Reader) []string {
	tb.Helper()
	var events []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "data: "):
			events = append(events, strings.TrimPrefix(line, "data: "))
		default:
			tb.Fatalf("unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return events
}

func TestHandlerStreaming(t *testing.T) {
	t.Parallel()
	const maxTokens = 17
	tests := []struct {
		name         string
		includeUsage bool
	}{
		{name: "with usage", includeUsage: true},
		{name: "without usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
			srv := newServer(t, e)
			resp := post(t, t.Context(), srv.URL+"/v1/chat/completions", chatBody(t, "ragtail-tiny", maxTokens, true, tt.includeUsage))
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := sseEvents(t, resp.Body)
			if len(events) < 4 || events[len(events)-1] != "[DONE]" {
				t.Fatalf("events %q: want role, content..., finish, [usage], [DONE]", events)
			}
			events = events[:len(events)-1]
			chunks := make([]wire.ChatChunk, len(events))
			for i, ev := range events {
				if err := json.Unmarshal([]byte(ev), &chunks[i]); err != nil {
					t.Fatalf("event %d %q: %v", i, ev, err)
				}
				if chunks[i].Object != "chat.completion.chunk" || chunks[i].Model != "ragtail-tiny" || chunks[i].ID != chunks[0].ID {
					t.Errorf("event %d: object %q model %q id %q", i, chunks[i].Object, chunks[i].Model, chunks[i].ID)
				}
			}
			if d := chunks[0].Choices[0].Delta; d.Role != "assistant" || d.Content == nil || *d.Content != "" {
				t.Errorf("first chunk delta %+v, want the assistant role with empty content", d)
			}
			if tt.includeUsage {
				last := chunks[len(chunks)-1]
				if !strings.Contains(events[len(events)-1], `"choices":[]`) || last.Usage == nil {
					t.Fatalf("last event %s: want a usage chunk with empty choices", events[len(events)-1])
				}
				if last.Usage.CompletionTokens != maxTokens || last.Usage.TotalTokens != last.Usage.PromptTokens+maxTokens {
					t.Errorf("usage %+v, want %d completion tokens", last.Usage, maxTokens)
				}
				chunks = chunks[:len(chunks)-1]
			}
			fin := chunks[len(chunks)-1]
			if fr := fin.Choices[0].FinishReason; fr == nil || *fr != "length" || fin.Choices[0].Delta.Content != nil || fin.Usage != nil {
				t.Errorf("finish chunk %+v, want finish_reason length and an empty delta", fin)
			}
			var text strings.Builder
			for i, c := range chunks[1 : len(chunks)-1] {
				if len(c.Choices) != 1 || c.Choices[0].Delta.Content == nil || c.Choices[0].FinishReason != nil {
					t.Fatalf("content chunk %d: %+v", i, c)
				}
				text.WriteString(*c.Choices[0].Delta.Content)
			}
			if n := rag.CountTokens(text.String()); n != maxTokens {
				t.Errorf("streamed text counts %d tokens, want %d: %q", n, maxTokens, text.String())
			}
		})
	}
}

func TestHandlerNonStreaming(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
	srv := newServer(t, e)
	resp := post(t, t.Context(), srv.URL+"/v1/chat/completions", chatBody(t, "ragtail-tiny", 9, false, false))
	defer resp.Body.Close()
	var c wire.ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || c.Object != "chat.completion" || len(c.Choices) != 1 {
		t.Fatalf("status %d, body %+v", resp.StatusCode, c)
	}
	ch := c.Choices[0]
	if ch.FinishReason != "length" || ch.Message.Role != "assistant" || rag.CountTokens(ch.Message.Content) != 9 || c.Usage.CompletionTokens != 9 {
		t.Errorf("choice %+v usage %+v: want 9 tokens, finish length", ch, c.Usage)
	}
}

func TestHandlerErrors(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
	srv := newServer(t, e)
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantCode   any
		wantType   string
	}{
		{name: "unknown model", method: http.MethodPost, path: "/v1/chat/completions", body: chatBody(t, "gpt-9", 5, true, false),
			wantStatus: http.StatusNotFound, wantCode: "model_not_found", wantType: "invalid_request_error"},
		{name: "invalid JSON", method: http.MethodPost, path: "/v1/chat/completions", body: `{"model":`,
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error"},
		{name: "no messages", method: http.MethodPost, path: "/v1/chat/completions", body: `{"model":"ragtail-tiny","messages":[]}`,
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error"},
		{name: "context too long", method: http.MethodPost, path: "/v1/chat/completions",
			body:       fmt.Sprintf(`{"model":"ragtail-tiny","max_tokens":2000,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("why ", 100)),
			wantStatus: http.StatusBadRequest, wantCode: "context_length_exceeded", wantType: "invalid_request_error"},
		{name: "body too large", method: http.MethodPost, path: "/v1/chat/completions",
			body:       `{"model":"ragtail-tiny","messages":[{"role":"user","content":"` + strings.Repeat("a", wire.MaxBodyBytes) + `"}]}`,
			wantStatus: http.StatusRequestEntityTooLarge, wantCode: "request_too_large", wantType: "invalid_request_error"},
		{name: "wrong method", method: http.MethodGet, path: "/v1/chat/completions",
			wantStatus: http.StatusMethodNotAllowed, wantType: "invalid_request_error"},
		{name: "unknown route", method: http.MethodGet, path: "/v1/embeddings",
			wantStatus: http.StatusNotFound, wantCode: "not_found", wantType: "not_found_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body wire.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("decode error body: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || body.Error.Type != tt.wantType || body.Error.Code != tt.wantCode || body.Error.Message == "" {
				t.Errorf("status %d, error %+v; want %d, type %q, code %v", resp.StatusCode, body.Error, tt.wantStatus, tt.wantType, tt.wantCode)
			}
		})
	}
}

func TestHandlerModelsAndHealth(t *testing.T) {
	t.Parallel()
	e, err := llmsim.New(profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithModelNames("tiny-alias"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	srv := newServer(t, e)
	get := func(path string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := get("/v1/models")
	var list wire.ModelList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "ragtail-tiny" || list.Data[1].ID != "tiny-alias" || list.Data[0].Object != "model" {
		t.Errorf("models %+v", list)
	}
	resp = get("/health")
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health %d, want 200", resp.StatusCode)
	}
	_ = e.Close()
	resp = get("/health")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("health of a closed engine %d, want 503", resp.StatusCode)
	}
}

func TestHandlerMetrics(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
	reg := prometheus.NewRegistry()
	srv := newServer(t, e, llmsim.WithRegistry(reg))
	resp := post(t, t.Context(), srv.URL+"/v1/chat/completions", chatBody(t, "ragtail-tiny", 8, false, false))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	prompt := rag.PromptTokens([]rag.Message{
		{Role: "system", Content: "Chunked prefill splits long prompts into pieces that share steps with decodes."},
		{Role: "user", Content: "What does chunked prefill do?"},
	})
	for _, want := range []string{
		`vllm:num_requests_running{model_name="ragtail-tiny"} 0`,
		`vllm:num_requests_waiting{model_name="ragtail-tiny"} 0`,
		`vllm:gpu_cache_usage_perc{model_name="ragtail-tiny"} 0`,
		`vllm:num_preemptions_total{model_name="ragtail-tiny"} 0`,
		fmt.Sprintf(`vllm:prompt_tokens_total{model_name="ragtail-tiny"} %d`, prompt),
		`vllm:generation_tokens_total{model_name="ragtail-tiny"} 8`,
		`vllm:request_success_total{finished_reason="length",model_name="ragtail-tiny"} 1`,
		`vllm:time_to_first_token_seconds_count{model_name="ragtail-tiny"} 1`,
		`vllm:time_per_output_token_seconds_count{model_name="ragtail-tiny"} 7`,
		`vllm:e2e_request_latency_seconds_count{model_name="ragtail-tiny"} 1`,
	} {
		if !bytes.Contains(text, []byte(want+"\n")) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The same collector can go on the RAG service's own registry too.
	other := prometheus.NewRegistry()
	if err := other.Register(e.Collector()); err != nil {
		t.Fatalf("register on a second registry: %v", err)
	}
	if _, err := other.Gather(); err != nil {
		t.Errorf("gather: %v", err)
	}
}

// A client that goes away mid-stream aborts its sequence and frees its blocks.
func TestHandlerClientDisconnectFreesBlocks(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"))
	srv := newServer(t, e)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := post(t, ctx, srv.URL+"/v1/chat/completions", chatBody(t, "ragtail-tiny", 1500, true, true))
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	contentChunks := 0
	for contentChunks < 2 && sc.Scan() {
		if strings.Contains(sc.Text(), `"content":"`) && !strings.Contains(sc.Text(), `"role"`) {
			contentChunks++
		}
	}
	if contentChunks < 2 {
		t.Fatalf("stream ended before two content chunks: %v", sc.Err())
	}
	if used := e.Stats().BlocksUsed; used == 0 {
		t.Fatal("no blocks held mid-stream")
	}
	cancel()
	testwait.For(t, "blocks freed after disconnect", func() bool {
		s := e.Stats()
		return s.BlocksUsed == 0 && s.Running == 0 && s.Aborted == 1
	})
}

// The official OpenAI SDK talks to the handler as to any OpenAI-compatible server.
func TestHandlerWithOpenAISDK(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
	srv := newServer(t, e)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	const maxTokens = 24
	system := "KV cache blocks hold sixteen tokens each and are allocated on demand."
	params := openai.ChatCompletionNewParams{
		Model:     "ragtail-tiny",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage("How big is a block?")},
		MaxTokens: openai.Int(maxTokens),
	}
	promptTokens := int64(rag.PromptTokens([]rag.Message{{Role: "system", Content: system}, {Role: "user", Content: "How big is a block?"}}))

	t.Run("streaming with usage", func(t *testing.T) {
		p := params
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(t.Context(), p)
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		var content strings.Builder
		var usage openai.CompletionUsage
		finish := ""
		for stream.Next() {
			chunk := stream.Current()
			acc.AddChunk(chunk)
			if len(chunk.Choices) > 0 {
				content.WriteString(chunk.Choices[0].Delta.Content)
				if chunk.Choices[0].FinishReason != "" {
					finish = chunk.Choices[0].FinishReason
				}
			}
			if chunk.JSON.Usage.Valid() && chunk.Usage.TotalTokens > 0 {
				usage = chunk.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if finish != "length" || usage.CompletionTokens != maxTokens || usage.PromptTokens != promptTokens {
			t.Errorf("finish %q, usage %+v; want length, %d completion and %d prompt tokens", finish, usage, maxTokens, promptTokens)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != content.String() || rag.CountTokens(content.String()) != maxTokens {
			t.Errorf("accumulated %+v, streamed %q", acc.Choices, content.String())
		}
	})

	t.Run("non-streaming", func(t *testing.T) {
		c, err := client.Chat.Completions.New(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != maxTokens ||
			c.Usage.PromptTokens != promptTokens || rag.CountTokens(c.Choices[0].Message.Content) != maxTokens {
			t.Errorf("completion %+v", c)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		p := params
		p.Model = "gpt-9"
		_, err := client.Chat.Completions.New(t.Context(), p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
			t.Errorf("error %v, want a 404 model_not_found API error", err)
		}
	})

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != "ragtail-tiny" {
			t.Errorf("models %+v", page.Data)
		}
	})
}

// An engine that goes away mid-stream ends the stream with an OpenAI error event and [DONE].
func TestHandlerFailsStreamOnEngineClose(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"))
	srv := newServer(t, e)
	resp := post(t, t.Context(), srv.URL+"/v1/chat/completions", chatBody(t, "ragtail-tiny", 1500, true, true))
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sawContent := false
	for !sawContent && sc.Scan() {
		line := sc.Text()
		sawContent = strings.Contains(line, `"content":"`) && !strings.Contains(line, `"role"`)
	}
	if !sawContent {
		t.Fatalf("stream ended before a content chunk: %v", sc.Err())
	}
	_ = e.Close()
	var events []string
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			events = append(events, strings.TrimPrefix(line, "data: "))
		}
	}
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events after close %q: want an error event and [DONE]", events)
	}
	var body wire.ErrorBody
	if err := json.Unmarshal([]byte(events[len(events)-2]), &body); err != nil || body.Error.Code != "backend_unavailable" || body.Error.Type != "server_error" {
		t.Errorf("error event %q (%v): want a server_error with code backend_unavailable", events[len(events)-2], err)
	}
}
