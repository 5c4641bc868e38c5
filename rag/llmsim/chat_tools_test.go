package llmsim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// searchToolJSON is the agentic pipeline's search tool as a request carries it.
func searchToolJSON(tb testing.TB) map[string]any {
	tb.Helper()
	var params map[string]any
	if err := json.Unmarshal([]byte(pipeline.SearchTool.Parameters), &params); err != nil {
		tb.Fatal(err)
	}
	return map[string]any{"type": "function", "function": map[string]any{
		"name": pipeline.SearchTool.Name, "description": pipeline.SearchTool.Description, "parameters": params}}
}

func toolBody(tb testing.TB, stream bool, extra map[string]any) string {
	tb.Helper()
	body := map[string]any{
		"model":      "ragtail-tiny",
		"messages":   []map[string]string{{"role": "user", "content": "What limits the batch size?"}},
		"max_tokens": 64,
		"stream":     stream,
		"tools":      []any{searchToolJSON(tb)},
	}
	if stream {
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	for k, v := range extra {
		body[k] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// toolCallShapes returns, for each tool_calls entry of a chat event stream, the shape of its
// JSON: its keys, and its function's keys, in sorted order.
func toolCallShapes(tb testing.TB, events []string) []string {
	tb.Helper()
	var shapes []string
	for _, ev := range events {
		var chunk struct {
			Choices []struct {
				Delta struct {
					ToolCalls []map[string]json.RawMessage `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if ev == "[DONE]" || json.Unmarshal([]byte(ev), &chunk) != nil || len(chunk.Choices) == 0 {
			continue
		}
		for _, tc := range chunk.Choices[0].Delta.ToolCalls {
			var fn map[string]json.RawMessage
			_ = json.Unmarshal(tc["function"], &fn)
			shapes = append(shapes, strings.Join(sortedKeys(tc), ",")+" function:"+strings.Join(sortedKeys(fn), ","))
		}
	}
	return shapes
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// A streamed tool call has the form vLLM streams (rag/llm/testdata/vllm_tool_calls.sse, a
// capture of vLLM's stream): a first tool_calls entry with index, id, type, and the function's
// name and empty arguments, then entries of index and argument pieces, one per chunk; the
// finish reason is tool_calls and usage counts the call's tokens. vLLM's metrics count the
// request as finished with reason stop, as vLLM's engine does.
func TestChatStreamsToolCallsAsVLLM(t *testing.T) {
	t.Parallel()
	law, _ := llmsim.ParseToolCallLaw("fixed:1")
	e := newEngine(t, profile(t, "tiny"), llmsim.WithToolCalls(law))
	srv := newServer(t, e)
	resp := post(t, t.Context(), srv.URL+"/v1/chat/completions", toolBody(t, true, nil))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	events := sseEvents(t, resp.Body)

	capture, err := os.Open("../llm/testdata/vllm_tool_calls.sse")
	if err != nil {
		t.Fatal(err)
	}
	defer capture.Close()
	vllm := toolCallShapes(t, sseEvents(t, capture))
	got := toolCallShapes(t, events)
	if len(got) < 3 || got[0] != vllm[0] {
		t.Fatalf("tool_calls entries %q, want a first entry shaped %q", got, vllm[0])
	}
	for i, s := range got[1:] {
		if s != vllm[1] {
			t.Errorf("entry %d shaped %q, want %q as vLLM's argument pieces", i+1, s, vllm[1])
		}
	}

	var first struct {
		Choices []struct {
			Delta struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Index    int    `json:"index"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
	}
	var args strings.Builder
	finish, completion := "", -1
	for _, ev := range events[1:] {
		if ev == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function struct{ Arguments string }
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if chunk.Usage != nil {
			completion = chunk.Usage.CompletionTokens
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		c := chunk.Choices[0]
		if c.Delta.Content != nil && *c.Delta.Content != "" {
			t.Errorf("content %q in a tool-calling answer", *c.Delta.Content)
		}
		for _, tc := range c.Delta.ToolCalls {
			args.WriteString(tc.Function.Arguments)
		}
		if c.FinishReason != nil {
			finish = *c.FinishReason
		}
		if first.Choices == nil && len(c.Delta.ToolCalls) > 0 {
			_ = json.Unmarshal([]byte(ev), &first)
		}
	}
	h := first.Choices[0].Delta.ToolCalls[0]
	if !strings.HasPrefix(h.ID, "chatcmpl-tool-") || h.Type != "function" || h.Function.Name != "search" || h.Index != 0 {
		t.Errorf("first tool-call piece %+v", h)
	}
	if want := `{"query": "What limits the batch size?"}`; args.String() != want {
		t.Errorf("arguments %q, want %q", args.String(), want)
	}
	if finish != "tool_calls" || completion != 1+rag.CountTokens(args.String()) {
		t.Errorf("finish %q, %d completion tokens; want tool_calls and %d", finish, completion, 1+rag.CountTokens(args.String()))
	}
	if events[len(events)-1] != "[DONE]" {
		t.Errorf("stream ends with %q", events[len(events)-1])
	}

	// vLLM's engine counts a request that ended in tool calls as "stop" (compared as parsed
	// series through client_golang's testutil).
	const want = `
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="abort",model_name="ragtail-tiny"} 0
vllm:request_success_total{finished_reason="length",model_name="ragtail-tiny"} 0
vllm:request_success_total{finished_reason="stop",model_name="ragtail-tiny"} 1
`
	if err := testutil.ScrapeAndCompare(srv.URL+"/metrics", strings.NewReader(want), "vllm:request_success_total"); err != nil {
		t.Error(err)
	}
}

// Non-streamed, the calls are in message.tool_calls and the content is null, as OpenAI sends
// it; parallel_tool_calls lets two calls out at once; tool_choice naming a function that the
// request does not offer is a 400.
func TestChatToolCallsNonStreaming(t *testing.T) {
	t.Parallel()
	law, _ := llmsim.ParseToolCallLaw("fixed:2")
	e := newEngine(t, profile(t, "tiny"), llmsim.WithToolCalls(law))
	srv := newServer(t, e)
	for _, tc := range []struct {
		name       string
		extra      map[string]any
		status     int
		wantCalls  int
		wantFinish string
		wantInBody string
	}{
		{name: "one call", status: 200, wantCalls: 1, wantFinish: "tool_calls", wantInBody: `"content":null`},
		{name: "parallel", extra: map[string]any{"parallel_tool_calls": true}, status: 200, wantCalls: 2, wantFinish: "tool_calls"},
		{name: "tool_choice none", extra: map[string]any{"tool_choice": "none"}, status: 200, wantFinish: "length"},
		{name: "named function", extra: map[string]any{"tool_choice": map[string]any{"type": "function", "function": map[string]string{"name": "search"}}},
			status: 200, wantCalls: 1, wantFinish: "tool_calls"},
		{name: "named function not offered", extra: map[string]any{"tool_choice": map[string]any{"type": "function", "function": map[string]string{"name": "lookup"}}},
			status: 400, wantInBody: `"param":"tool_choice"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := post(t, t.Context(), srv.URL+"/v1/chat/completions", toolBody(t, false, tc.extra))
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.wantInBody) {
				t.Fatalf("status %d, body %s; want %d with %s", resp.StatusCode, body, tc.status, tc.wantInBody)
			}
			if tc.status != 200 {
				return
			}
			var c openai.ChatCompletion
			if err := json.Unmarshal(body, &c); err != nil {
				t.Fatal(err)
			}
			m := c.Choices[0].Message
			if len(m.ToolCalls) != tc.wantCalls || c.Choices[0].FinishReason != tc.wantFinish {
				t.Fatalf("%d calls, finish %q; want %d and %q: %s", len(m.ToolCalls), c.Choices[0].FinishReason, tc.wantCalls, tc.wantFinish, body)
			}
			tokens := 0
			for i, call := range m.ToolCalls {
				if call.Type != "function" || call.Function.Name != "search" || !strings.HasPrefix(call.ID, "chatcmpl-tool-") || !json.Valid([]byte(call.Function.Arguments)) {
					t.Errorf("call %d: %+v", i, call)
				}
				tokens += 1 + rag.CountTokens(call.Function.Arguments)
			}
			if tc.wantCalls > 0 && c.Usage.CompletionTokens != int64(tokens) {
				t.Errorf("%d completion tokens, want the calls' %d", c.Usage.CompletionTokens, tokens)
			}
		})
	}
}

// The tool loop with the official SDK's tools API, streamed and not: the model calls search as
// many times as the law says for the question, the client answers each call by its
// tool_call_id, and the model then answers in text. From the second call on, the prompt
// extends the previous one and its blocks come from the prefix cache.
func TestChatToolLoopWithOpenAISDK(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "non-streaming", true: "streaming"}[stream], func(t *testing.T) {
			t.Parallel()
			law, _ := llmsim.ParseToolCallLaw("uniform:2,4")
			e := newEngine(t, prefixCaching(t, "tiny"), llmsim.WithToolCalls(law), llmsim.WithSeed(11))
			srv := newServer(t, e)
			client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			const question = "Why does a long prompt slow down the other requests in the batch?"
			want := law.Calls(11, question)
			var params map[string]any
			_ = json.Unmarshal([]byte(pipeline.SearchTool.Parameters), &params)
			p := openai.ChatCompletionNewParams{
				Model:     "ragtail-tiny",
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(pipeline.DefaultAgentPrompt), openai.UserMessage(question)},
				MaxTokens: openai.Int(32),
				Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
					Name: "search", Description: openai.String(pipeline.SearchTool.Description), Parameters: params})},
			}
			if stream {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			seen := map[string]bool{}
			for call := 0; ; call++ {
				if call > want {
					t.Fatalf("%d model calls and still no answer; the law says %d searches", call+1, want)
				}
				c := chatOnce(t, client, p, stream)
				if call > 0 && c.Usage.PromptTokensDetails.CachedTokens == 0 {
					t.Errorf("model call %d: no cached prompt tokens, though its prompt extends the previous one", call+1)
				}
				msg := c.Choices[0].Message
				if len(msg.ToolCalls) == 0 {
					if call != want || c.Choices[0].FinishReason != "length" || msg.Content == "" {
						t.Fatalf("text answer after %d searches (law: %d), finish %q, content %q", call, want, c.Choices[0].FinishReason, msg.Content)
					}
					return
				}
				if c.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 {
					t.Fatalf("model call %d: finish %q, %d calls", call+1, c.Choices[0].FinishReason, len(msg.ToolCalls))
				}
				tc := msg.ToolCalls[0]
				var args struct{ Query string }
				if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil || !strings.HasPrefix(args.Query, question) || seen[tc.ID] {
					t.Fatalf("call %+v (seen before: %v): want a fresh id and a query quoting the question", tc, seen[tc.ID])
				}
				seen[tc.ID] = true
				p.Messages = append(p.Messages, msg.ToParam(), openai.ToolMessage("[1] Prefill\nA long prompt's prefill takes whole steps.", tc.ID))
			}
		})
	}
}

// chatOnce makes one chat call, streamed (and accumulated) or not.
func chatOnce(tb *testing.T, client openai.Client, p openai.ChatCompletionNewParams, stream bool) openai.ChatCompletion {
	tb.Helper()
	if !stream {
		c, err := client.Chat.Completions.New(tb.Context(), p)
		if err != nil {
			tb.Fatal(err)
		}
		return *c
	}
	s := client.Chat.Completions.NewStreaming(tb.Context(), p)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		tb.Fatal(err)
	}
	return acc.ChatCompletion
}
