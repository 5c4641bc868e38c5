package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	wire "github.com/ragtail/ragtail/rag/openai"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// testService is the API on real backends: hash embedder, 2-shard memory index, doc store, and
// the simulated engine on its tiny profile in real time.
type testService struct {
	srv    *httptest.Server
	engine *llmsim.Engine
	docs   *docstore.Store
	model  string
}

var testChunks = []rag.Chunk{
	{ID: "kv#0", DocID: "kv", Title: "KV cache", Text: "The KV cache stores keys and values of attention for every token of every running sequence."},
	{ID: "kv#1", DocID: "kv", Title: "KV cache", Text: "Paged attention allocates KV cache blocks of sixteen tokens on demand and preempts when blocks run out."},
	{ID: "bloom#0", DocID: "bloom", Title: "Bloom filters", Text: "A Bloom filter answers whether a key may exist; it has false positives but never false negatives."},
	{ID: "tail#0", DocID: "tail", Title: "Tail latency", Text: "Tail latency is the high percentile of response time: P99 is exceeded by one request in a hundred."},
	{ID: "shard#0", DocID: "shard", Title: "Sharding", Text: "A sharded index searches every shard and merges the results; the slowest shard sets the pace."},
}

// testBackends are the real backends the API tests run on: hash embedder, an in-memory index of
// testChunks, the doc store, the simulated engine on its tiny profile in real time, and an
// admission pool.
type testBackends struct {
	emb    *embed.Hash
	idx    *retrieve.Memory
	docs   *docstore.Store
	engine *llmsim.Engine
	pool   *admission.Pool
	model  string
}

func newTestBackends(tb testing.TB, shards int) *testBackends {
	tb.Helper()
	emb, err := embed.NewHash()
	if err != nil {
		tb.Fatal(err)
	}
	idx, err := retrieve.NewMemory(emb.Dimension(), shards)
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range testChunks {
		if err := idx.Add(c.ID, emb.Vector(c.Title+"\n"+c.Text)); err != nil {
			tb.Fatal(err)
		}
	}
	docs := docstore.New(testChunks)
	tb.Cleanup(func() { _ = docs.Close() })
	prof, err := llmsim.ProfileByName("tiny")
	if err != nil {
		tb.Fatal(err)
	}
	engine, err := llmsim.New(prof)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = engine.Close() })
	pool, err := admission.NewPool(admission.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	return &testBackends{emb: emb, idx: idx, docs: docs, engine: engine, pool: pool, model: prof.Model}
}

func newTestService(tb testing.TB, opts ...httpapi.Option) *testService {
	tb.Helper()
	be := newTestBackends(tb, 2)
	p, err := pipeline.New(be.emb, be.idx, be.docs, be.engine, pipeline.Config{TopK: 3}, pipeline.WithAdmitter(be.pool))
	if err != nil {
		tb.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(httpapi.New(p, append([]httpapi.Option{httpapi.WithDocuments(be.docs), httpapi.WithLogger(quiet)}, opts...)...))
	tb.Cleanup(srv.Close)
	return &testService{srv: srv, engine: be.engine, docs: be.docs, model: be.model}
}

func (s *testService) client() openai.Client {
	return openai.NewClient(option.WithBaseURL(s.srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func TestOpenAISDKStreamingWithUsage(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	client := s.client()
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         s.model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("How does paged attention use the KV cache?")},
		MaxTokens:     openai.Int(12),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(acc.Choices) != 1 {
		t.Fatalf("choices = %d, want 1", len(acc.Choices))
	}
	if got := acc.Choices[0].FinishReason; got != "length" {
		t.Errorf("finish_reason = %q, want length (max_tokens reached)", got)
	}
	if acc.Usage.CompletionTokens != 12 {
		t.Errorf("usage.completion_tokens = %d, want 12", acc.Usage.CompletionTokens)
	}
	if acc.Usage.PromptTokens <= int64(rag.CountTokens("How does paged attention use the KV cache?")) {
		t.Errorf("usage.prompt_tokens = %d: should include the retrieved context", acc.Usage.PromptTokens)
	}
	if strings.TrimSpace(acc.Choices[0].Message.Content) == "" {
		t.Error("empty answer")
	}
	// A role chunk, one or more content chunks (a reader that falls behind the engine gets the
	// tokens made meanwhile in one), the finish chunk and the usage chunk.
	if chunks < 4 {
		t.Errorf("%d chunks for 12 tokens, want role, content, finish and usage chunks", chunks)
	}
}

func TestOpenAISDKNonStreaming(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	client := s.client()
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     s.model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("What is a Bloom filter?")},
		MaxTokens: openai.Int(8),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "chat.completion" || len(resp.Choices) != 1 {
		t.Fatalf("unexpected response %+v", resp)
	}
	if resp.Choices[0].Message.Role != "assistant" || resp.Choices[0].Message.Content == "" {
		t.Errorf("message = %+v", resp.Choices[0].Message)
	}
	if resp.Usage.CompletionTokens != 8 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+8 {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestOpenAISDKUnknownModel(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	client := s.client()
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-nonexistent",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v (%T), want *openai.Error", err, err)
	}
	if apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || apiErr.Type != "invalid_request_error" {
		t.Errorf("got status %d code %q type %q", apiErr.StatusCode, apiErr.Code, apiErr.Type)
	}
	if !strings.Contains(apiErr.Message, s.model) {
		t.Errorf("message %q should name the served model", apiErr.Message)
	}
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	comment string
	data    string
}

func readSSE(tb testing.TB, r io.Reader) []sseEvent {
	tb.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != (sseEvent{}) {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ": "):
			cur.comment += strings.TrimPrefix(line, ": ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		default:
			tb.Fatalf("unexpected SSE line %q", line)
		}
	}
	if cur != (sseEvent{}) {
		tb.Fatalf("stream ended inside an event: %+v", cur)
	}
	return out
}

func post(tb testing.TB, url string, body string, header ...string) *http.Response {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestStreamWireFormat(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp := post(t, s.srv.URL+"/v1/chat/completions",
		`{"model":"`+s.model+`","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,
		  "messages":[{"role":"user","content":"Why is the slowest shard setting the pace?"}]}`, "traceparent", parent)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	tp, ok := httpapi.ParseTraceParent(resp.Header.Get("traceparent"))
	if !ok || tp.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || tp.SpanID == "00f067aa0ba902b7" {
		t.Errorf("traceparent = %q: want the caller's trace with a new span id", resp.Header.Get("traceparent"))
	}
	// Five tokens come as one to five content events: a reader that falls behind the engine gets
	// the tokens made meanwhile in one delta, as from vLLM.
	events := readSSE(t, resp.Body)
	if n := len(events); n < 1+1+1+1+1 || n > 1+5+1+1+1 {
		t.Fatalf("%d events, want role + 1 to 5 content + finish + usage + [DONE]: %+v", n, events)
	}
	var chunks []wire.ChatChunk
	for _, ev := range events[:len(events)-1] {
		var c wire.ChatChunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev.data, err)
		}
		if c.Object != "chat.completion.chunk" || c.Model != s.model || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Errorf("bad chunk header %+v", c)
		}
		chunks = append(chunks, c)
	}
	if events[len(events)-1].data != "[DONE]" {
		t.Errorf("last event %+v, want [DONE]", events[len(events)-1])
	}
	if d := chunks[0].Choices[0].Delta; d.Role != "assistant" {
		t.Errorf("first chunk delta %+v, want role assistant", d)
	}
	finish := len(chunks) - 2
	for _, c := range chunks[1:finish] {
		if c.Choices[0].Delta.Content == nil || *c.Choices[0].Delta.Content == "" || c.Choices[0].FinishReason != nil {
			t.Errorf("content chunk %+v", c.Choices[0])
		}
	}
	if fr := chunks[finish].Choices[0].FinishReason; fr == nil || *fr != "length" {
		t.Errorf("finish chunk %+v", chunks[finish].Choices[0])
	}
	last := chunks[finish+1]
	if len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens != 5 {
		t.Errorf("usage chunk %+v", last)
	}
	for _, stage := range []rag.Stage{rag.StageAdmission, rag.StageEmbed, rag.StageRetrieve, rag.StageFetch, rag.StageGenerate, rag.StageStream} {
		if !strings.Contains(last.ServerTiming, string(stage)+";dur=") {
			t.Errorf("final chunk server_timing %q lacks %s", last.ServerTiming, stage)
		}
	}
	if got := resp.Trailer.Get("Server-Timing"); got != last.ServerTiming {
		t.Errorf("Server-Timing trailer = %q, want the final chunk's %q", got, last.ServerTiming)
	}
}

func TestNonStreamServerTimingHeader(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	resp := post(t, s.srv.URL+"/v1/chat/completions",
		`{"model":"`+s.model+`","max_tokens":3,"messages":[{"role":"user","content":"tail latency"}],"rag":{"coupling":"fanout","top_k":2}}`)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	st := resp.Header.Get("Server-Timing")
	if !strings.Contains(st, "retrieve;dur=") || !strings.Contains(st, "generate;dur=") {
		t.Errorf("Server-Timing = %q", st)
	}
	if resp.Header.Get("traceparent") == "" {
		t.Error("no traceparent header")
	}
}

func TestAsyncStreamReportsRetrievalProgress(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	resp := post(t, s.srv.URL+"/v1/chat/completions",
		`{"model":"`+s.model+`","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"bloom filter"}],"rag":{"coupling":"async"}}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := readSSE(t, resp.Body)
	firstContent, lastComment := -1, -1
	for i, ev := range events {
		if ev.comment != "" {
			js, ok := strings.CutPrefix(ev.comment, "rag ")
			var p struct {
				Stage     string   `json:"stage"`
				Shard     *int     `json:"shard"`
				ElapsedMS *float64 `json:"elapsed_ms"`
				Message   string   `json:"message"`
			}
			if err := json.Unmarshal([]byte(js), &p); !ok || err != nil || p.Stage == "" || p.Shard == nil || p.ElapsedMS == nil || p.Message == "" {
				t.Errorf("progress comment %q: %v", ev.comment, err)
			}
			lastComment = i
		}
		if firstContent < 0 && strings.Contains(ev.data, `"content":"`) && !strings.Contains(ev.data, `"content":""`) {
			firstContent = i
		}
	}
	if lastComment < 0 || firstContent < 0 || lastComment > firstContent {
		t.Errorf("want retrieval progress comments before the first token; comment at %d, first token at %d", lastComment, firstContent)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name   string
		body   string
		status int
		code   string
		param  string
	}{
		{"invalid JSON", `{"model":`, 400, "", ""},
		{"not an object", `[1,2]`, 400, "", ""},
		{"trailing data", `{"model":"` + s.model + `",` + msgs + `} {}`, 400, "", ""},
		{"empty body", ``, 400, "", ""},
		{"unknown model", `{"model":"nope",` + msgs + `}`, 404, "model_not_found", "model"},
		{"missing model", `{` + msgs + `}`, 400, "", "model"},
		{"empty messages", `{"model":"` + s.model + `","messages":[]}`, 400, "", "messages"},
		{"no user message", `{"model":"` + s.model + `","messages":[{"role":"system","content":"x"}]}`, 400, "", "messages"},
		{"bad role", `{"model":"` + s.model + `","messages":[{"role":"robot","content":"x"}]}`, 400, "", "messages[0].role"},
		{"max_tokens zero", `{"model":"` + s.model + `","max_tokens":0,` + msgs + `}`, 400, "", "max_tokens"},
		{"max_tokens above cap", `{"model":"` + s.model + `","max_tokens":1000000,` + msgs + `}`, 400, "", "max_tokens"},
		{"temperature too high", `{"model":"` + s.model + `","temperature":3,` + msgs + `}`, 400, "", "temperature"},
		{"bad coupling", `{"model":"` + s.model + `",` + msgs + `,"rag":{"coupling":"psychic"}}`, 400, "", "rag.coupling"},
		{"bad top_k", `{"model":"` + s.model + `",` + msgs + `,"rag":{"top_k":1000}}`, 400, "", "rag.top_k"},
		{"2 MB body", `{"model":"` + s.model + `","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`, 413, "request_too_large", ""},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tt.name, stream), func(t *testing.T) {
				body := tt.body
				if stream && strings.HasPrefix(body, "{\"model\"") && tt.status != 413 {
					body = `{"stream":true,` + body[1:]
				}
				resp := post(t, s.srv.URL+"/v1/chat/completions", body)
				if resp.StatusCode != tt.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q", ct)
				}
				var eb struct {
					Error struct {
						Message string  `json:"message"`
						Type    string  `json:"type"`
						Param   *string `json:"param"`
						Code    *string `json:"code"`
					} `json:"error"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
					t.Fatalf("error body: %v", err)
				}
				if eb.Error.Message == "" || eb.Error.Type == "" {
					t.Errorf("error body %+v", eb)
				}
				if tt.code != "" && (eb.Error.Code == nil || *eb.Error.Code != tt.code) {
					t.Errorf("code = %v, want %q", eb.Error.Code, tt.code)
				}
				if tt.param != "" && (eb.Error.Param == nil || *eb.Error.Param != tt.param) {
					t.Errorf("param = %v, want %q", eb.Error.Param, tt.param)
				}
			})
		}
	}
}

func TestClientDisconnectMidStreamFreesEngine(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"model":"` + s.model + `","stream":true,"max_tokens":1500,"messages":[{"role":"user","content":"explain the KV cache"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Read a few content chunks so generation is certainly under way and holding KV blocks.
	br := bufio.NewReader(resp.Body)
	for n := 0; n < 6; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	if used := s.engine.Stats().BlocksUsed; used == 0 {
		t.Fatal("engine holds no blocks mid-stream")
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := s.engine.Stats()
		if st.BlocksUsed == 0 && st.Running == 0 && st.Waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine still busy 5 s after the client left: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := s.engine.Stats(); st.Aborted != 1 {
		t.Errorf("aborted = %d, want 1", st.Aborted)
	}
}

func TestModelsHealthAndDocuments(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	get := func(path string) (*http.Response, []byte) {
		resp, err := http.Get(s.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, b := get("/v1/models")
	var list wire.ModelList
	if err := json.Unmarshal(b, &list); err != nil || resp.StatusCode != 200 || len(list.Data) == 0 || list.Data[0].ID != s.model {
		t.Errorf("/v1/models: %d %s", resp.StatusCode, b)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, b := get(path); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	resp, b = get("/v1/documents/kv%231")
	var c rag.Chunk
	if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 || c.ID != "kv#1" || c.Text == "" {
		t.Errorf("document: %d %s", resp.StatusCode, b)
	}
	if !strings.HasPrefix(resp.Header.Get("Server-Timing"), "fetch;dur=") {
		t.Errorf("document Server-Timing %q", resp.Header.Get("Server-Timing"))
	}
	if resp, b := get("/v1/documents/no-such-doc"); resp.StatusCode != 404 || !bytes.Contains(b, []byte("document_not_found")) {
		t.Errorf("missing document: %d %s", resp.StatusCode, b)
	}
	if resp, b := get("/v1/nothing"); resp.StatusCode != 404 || !bytes.Contains(b, []byte(`"error"`)) {
		t.Errorf("unknown route: %d %s", resp.StatusCode, b)
	}
}

func TestReadinessReportsReason(t *testing.T) {
	t.Parallel()
	s := newTestService(t, httpapi.WithReadiness(func(context.Context) error { return errors.New("qdrant unreachable") }))
	resp, err := http.Get(s.srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !bytes.Contains(b, []byte("qdrant unreachable")) {
		t.Errorf("readyz: %d %s", resp.StatusCode, b)
	}
}

func TestParseTraceParent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"valid sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"valid unsampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"upper case", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"short", "00-4bf92f-00f067aa0ba902b7-01", false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"v00 with extra field", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx", false},
		{"future version with extra field", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx", true},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := httpapi.ParseTraceParent(tt.in); ok != tt.ok {
				t.Errorf("ParseTraceParent(%q) ok = %v, want %v", tt.in, ok, tt.ok)
			}
		})
	}
}

func TestDocumentIDsWithSlashes(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	if err := s.docs.Put(rag.Chunk{ID: "guides/kv.md#0", DocID: "guides/kv.md", Title: "KV", Text: "paged blocks"}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.srv.URL + "/v1/documents/guides/kv.md%230")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c rag.Chunk
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 || c.ID != "guides/kv.md#0" {
		t.Errorf("status %d, chunk %+v, %v", resp.StatusCode, c, err)
	}
}
