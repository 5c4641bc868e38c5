package llmsim_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// anthropicStream runs one streamed message and returns its events' types in order, the
// message accumulated from them, and the text of its text deltas.
func anthropicStream(tb *testing.T, client anthropic.Client, p anthropic.MessageNewParams) ([]string, anthropic.Message, string) {
	tb.Helper()
	s := client.Messages.NewStreaming(tb.Context(), p)
	defer s.Close()
	var types []string
	var msg anthropic.Message
	var text strings.Builder
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			tb.Fatalf("accumulate %s: %v", ev.Type, err)
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	if err := s.Err(); err != nil {
		tb.Fatal(err)
	}
	return types, msg, text.String()
}

// compact folds runs of the same event type into one, so that an event order reads the same
// whatever the number of deltas.
func compact(types []string) string {
	var out []string
	for i, t := range types {
		if i == 0 || types[i-1] != t {
			out = append(out, t)
		}
	}
	return strings.Join(out, " ")
}

// namedEvents reads an event stream of named events and returns their names in order, and the
// data of each; it fails on an event whose data's "type" is not its name.
func namedEvents(tb testing.TB, r io.Reader) (names []string, data []string) {
	tb.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			d := strings.TrimPrefix(line, "data: ")
			var typed struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal([]byte(d), &typed); err != nil || typed.Type != name {
				tb.Fatalf("event %q has data %s", name, d)
			}
			names, data = append(names, name), append(data, d)
			name = ""
		case line == "":
		default:
			tb.Fatalf("unexpected line %q", line)
		}
	}
	return names, data
}

// The official Anthropic SDK as the client of llm-sim's Messages API: streamed (events in
// Anthropic's order, accumulated by the SDK) and not, with usage from the engine (input tokens
// less those read from the prefix cache, output tokens as generated), extended thinking as a
// thinking block before the text, a tool conversation replayed as prompt, and errors in
// Anthropic's shape. vLLM's metrics count the requests like chat completions.
func TestMessagesWithAnthropicSDK(t *testing.T) {
	t.Parallel()
	e := newEngine(t, prefixCaching(t, "tiny"))
	srv := newServer(t, e)
	client := anthropic.NewClient(anthropicopt.WithBaseURL(srv.URL), anthropicopt.WithAPIKey("unused"), anthropicopt.WithMaxRetries(0))
	const maxTokens = 24
	system := "A KV cache block holds sixteen tokens and is allocated when a sequence needs it."
	params := anthropic.MessageNewParams{
		Model:     "ragtail-tiny",
		MaxTokens: maxTokens,
		System:    []anthropic.TextBlockParam{{Text: system}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("How big is a KV block?"))},
	}
	prompt := int64(rag.PromptTokens([]rag.Message{{Role: "system", Content: system}, {Role: "user", Content: "How big is a KV block?"}}))
	checkUsage := func(t *testing.T, u anthropic.Usage) {
		t.Helper()
		if u.InputTokens+u.CacheReadInputTokens != prompt || u.OutputTokens != maxTokens || u.CacheCreationInputTokens != 0 {
			t.Errorf("usage: %d input + %d cache read, %d output; want %d prompt and %d output tokens", u.InputTokens, u.CacheReadInputTokens, u.OutputTokens, prompt, maxTokens)
		}
	}

	t.Run("streaming", func(t *testing.T) {
		types, msg, text := anthropicStream(t, client, params)
		// The SDK drops pings; the raw stream has one after the first block's start.
		want := "message_start content_block_start content_block_delta content_block_stop message_delta message_stop"
		if got := compact(types); got != want {
			t.Errorf("events %s\nwant %s", got, want)
		}
		body, _ := json.Marshal(map[string]any{"model": "ragtail-tiny", "max_tokens": maxTokens, "stream": true,
			"system": system, "messages": []map[string]any{{"role": "user", "content": "How big is a KV block?"}}})
		resp := post(t, t.Context(), srv.URL+"/v1/messages", string(body))
		raw, _ := namedEvents(t, resp.Body)
		resp.Body.Close()
		if got, want := compact(raw), "message_start content_block_start ping content_block_delta content_block_stop message_delta message_stop"; got != want {
			t.Errorf("raw events %s\nwant %s", got, want)
		}
		if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != text || rag.CountTokens(text) != maxTokens {
			t.Errorf("content %+v, streamed text %q of %d tokens", msg.Content, text, rag.CountTokens(text))
		}
		if msg.StopReason != anthropic.StopReasonMaxTokens || !strings.HasPrefix(msg.ID, "msg_") || msg.Model != "ragtail-tiny" || msg.Role != "assistant" {
			t.Errorf("message %s: stop %q, model %q, role %q", msg.ID, msg.StopReason, msg.Model, msg.Role)
		}
		checkUsage(t, msg.Usage)
	})

	t.Run("non-streaming", func(t *testing.T) {
		msg, err := client.Messages.New(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Content) != 1 || rag.CountTokens(msg.Content[0].Text) != maxTokens || msg.StopReason != anthropic.StopReasonMaxTokens {
			t.Errorf("message %+v", msg)
		}
		checkUsage(t, msg.Usage)
	})

	t.Run("prefix cache", func(t *testing.T) {
		for range 2 {
			msg, err := client.Messages.New(t.Context(), params)
			if err != nil {
				t.Fatal(err)
			}
			checkUsage(t, msg.Usage)
			if msg.Usage.CacheReadInputTokens == 0 {
				t.Errorf("a repeated prompt read nothing from the prefix cache: %+v", msg.Usage)
			}
		}
	})

	t.Run("thinking", func(t *testing.T) {
		p := params
		p.Thinking = anthropic.ThinkingConfigParamOfEnabled(5)
		types, msg, text := anthropicStream(t, client, p)
		want := "message_start content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop"
		if got := compact(types); got != want {
			t.Errorf("events %s\nwant %s", got, want)
		}
		if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[0].Signature == "" || rag.CountTokens(msg.Content[0].Thinking) != 5 ||
			msg.Content[1].Type != "text" || msg.Content[1].Text != text || rag.CountTokens(text) != maxTokens-5 {
			t.Errorf("content %+v", msg.Content)
		}
		checkUsage(t, msg.Usage)
	})

	t.Run("tool conversation", func(t *testing.T) {
		p := params
		p.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "search",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"query": map[string]string{"type": "string"}}}}}}
		p.Messages = append(p.Messages,
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]string{"query": "KV block size"}, "search")),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "[1] Blocks hold sixteen tokens.", false)))
		msg, err := client.Messages.New(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.StopReason != anthropic.StopReasonMaxTokens {
			t.Errorf("message %+v: want a text answer", msg)
		}
		if in := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens; in <= prompt+int64(rag.CountTokens("[1] Blocks hold sixteen tokens.")) {
			t.Errorf("%d input tokens: the tools, the tool use and its result do not count in the prompt of %d", in, prompt)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		p := params
		p.Model = "claude-9"
		_, err := client.Messages.New(t.Context(), p)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || !strings.Contains(apiErr.RawJSON(), `"type":"not_found_error"`) {
			t.Errorf("error %v, want a 404 not_found_error", err)
		}
	})
}

// Requests the Messages API refuses, each with Anthropic's error JSON and the right status.
func TestMessagesErrors(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
	srv := newServer(t, e)
	for _, tc := range []struct {
		name, body string
		status     int
		kind, msg  string
	}{
		{name: "empty body", body: ``, status: 400, kind: "invalid_request_error", msg: "model, max_tokens and messages"},
		{name: "no max_tokens", body: `{"model":"ragtail-tiny","messages":[{"role":"user","content":"hi"}]}`, status: 400, kind: "invalid_request_error", msg: "max_tokens is required"},
		{name: "max_tokens too large", body: `{"model":"ragtail-tiny","max_tokens":99999,"messages":[{"role":"user","content":"hi"}]}`, status: 400, kind: "invalid_request_error", msg: "between 1 and 2048"},
		{name: "no messages", body: `{"model":"ragtail-tiny","max_tokens":8,"messages":[]}`, status: 400, kind: "invalid_request_error", msg: "non-empty"},
		{name: "bad role", body: `{"model":"ragtail-tiny","max_tokens":8,"messages":[{"role":"system","content":"hi"}]}`, status: 400, kind: "invalid_request_error", msg: "not user or assistant"},
		{name: "image block", body: `{"model":"ragtail-tiny","max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`,
			status: 400, kind: "invalid_request_error", msg: `messages[0].content[0] has type "image"`},
		{name: "temperature above 1", body: `{"model":"ragtail-tiny","max_tokens":8,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, kind: "invalid_request_error", msg: "between 0 and 1"},
		{name: "thinking budget over max_tokens", body: `{"model":"ragtail-tiny","max_tokens":8,"thinking":{"type":"enabled","budget_tokens":8},"messages":[{"role":"user","content":"hi"}]}`,
			status: 400, kind: "invalid_request_error", msg: "less than max_tokens"},
		{name: "server tool", body: `{"model":"ragtail-tiny","max_tokens":8,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`,
			status: 400, kind: "invalid_request_error", msg: "only custom tools"},
		{name: "unknown model", body: `{"model":"nope","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, status: 404, kind: "not_found_error", msg: `"nope" does not exist`},
		{name: "prompt over the context", body: `{"model":"ragtail-tiny","max_tokens":2048,"messages":[{"role":"user","content":"hi"}]}`, status: 400, kind: "invalid_request_error", msg: "maximum context length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := post(t, t.Context(), srv.URL+"/v1/messages", tc.body)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != tc.status || got.Type != "error" || got.Error.Type != tc.kind || !strings.Contains(got.Error.Message, tc.msg) {
				t.Errorf("status %d, body %s; want %d, %s containing %q", resp.StatusCode, b, tc.status, tc.kind, tc.msg)
			}
		})
	}
}
