package llmsim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// Reasoning tokens come first and cost decode steps like any token: the first token (TTFT)
// comes as early as without reasoning, the first answer token that many steps later, and the
// answer keeps max_tokens minus the reasoning.
func TestReasoningTokensBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	const prompt, maxTokens = 40, 24
	tests := []struct {
		name      string
		engine    int // WithReasoningTokens
		request   []llmsim.RequestOption
		reasoning int
	}{
		{name: "none", reasoning: 0},
		{name: "engine default", engine: 10, reasoning: 10},
		{name: "request overrides", engine: 10, request: []llmsim.RequestOption{llmsim.WithRequestReasoning(3)}, reasoning: 3},
		{name: "request turns it off", engine: 10, request: []llmsim.RequestOption{llmsim.WithRequestReasoning(0)}, reasoning: 0},
		{name: "reasoning takes the whole budget", engine: 100, reasoning: maxTokens},
	}
	p := profile(t, "tiny")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused(), llmsim.WithReasoningTokens(tt.engine))
			st := submitMsgs(t, e, "r", userPrompt(t, prompt), maxTokens, tt.request...)
			stepAll(t, e)
			var reasoning, answer strings.Builder
			var reasoningTokens, answerTokens int
			var usage *rag.Usage
			for {
				out, err := st.RecvOutput()
				if err != nil {
					break
				}
				if out.ReasoningTokens > 0 && answerTokens > 0 {
					t.Fatal("reasoning after the answer began")
				}
				reasoning.WriteString(out.Reasoning)
				answer.WriteString(out.Text)
				reasoningTokens += out.ReasoningTokens
				answerTokens += out.Tokens
				if out.Usage != nil {
					usage = out.Usage
				}
			}
			if reasoningTokens != tt.reasoning || answerTokens != maxTokens-tt.reasoning {
				t.Errorf("%d reasoning and %d answer tokens, want %d and %d", reasoningTokens, answerTokens, tt.reasoning, maxTokens-tt.reasoning)
			}
			if n := rag.CountTokens(reasoning.String()); n != tt.reasoning {
				t.Errorf("reasoning text counts %d tokens, want %d: %q", n, tt.reasoning, reasoning.String())
			}
			if n := rag.CountTokens(answer.String()); n != maxTokens-tt.reasoning || strings.HasPrefix(answer.String(), " ") {
				t.Errorf("answer %q counts %d tokens, want %d without a leading space", answer.String(), n, maxTokens-tt.reasoning)
			}
			if usage == nil || usage.CompletionTokens != maxTokens || usage.ReasoningTokens != tt.reasoning {
				t.Errorf("usage %+v, want %d completion tokens of which %d reasoning", usage, maxTokens, tt.reasoning)
			}
			tl := st.Timeline()
			if want := p.StepTime(prompt, 0, 0); tl.TTFT() != want {
				t.Errorf("TTFT %v, want the prefill %v whatever the reasoning", tl.TTFT(), want)
			}
			if tt.reasoning < maxTokens {
				var want = tl.FirstToken
				for k := 1; k <= tt.reasoning; k++ {
					want += p.StepTime(0, 1, prompt+k)
				}
				if tl.FirstAnswerToken != want {
					t.Errorf("first answer token at %v, want %v (%d decode steps after the first token)", tl.FirstAnswerToken, want, tt.reasoning)
				}
			}
			if got := e.Stats().ReasoningTokens; got != int64(tt.reasoning) {
				t.Errorf("engine counted %d reasoning tokens, want %d", got, tt.reasoning)
			}
		})
	}
}

// Recv, the pipeline's interface, delivers the answer only.
func TestRecvLeavesReasoningOut(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused(), llmsim.WithReasoningTokens(5))
	st := submit(t, e, "r", 30, 12)
	stepAll(t, e)
	r := drain(t, st)
	if r.tokens != 7 || rag.CountTokens(r.text) != 7 || r.last.Usage.CompletionTokens != 12 || r.last.Usage.ReasoningTokens != 5 {
		t.Errorf("Recv gave %d tokens %q, usage %+v; want the 7 answer tokens and usage 12 with 5 reasoning", r.tokens, r.text, r.last.Usage)
	}
}

// With the official SDK as client, reasoning_content deltas arrive before any content, the
// request's thinking_token_budget sets their number, and usage counts them.
func TestHandlerReasoningWithOpenAISDK(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithReasoningTokens(6))
	srv := newServer(t, e)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	const maxTokens = 30
	params := openai.ChatCompletionNewParams{
		Model:         "ragtail-tiny",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Reasoning models think before they answer."), openai.UserMessage("Do they?")},
		MaxTokens:     openai.Int(maxTokens),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for _, tt := range []struct {
		name      string
		opts      []option.RequestOption
		reasoning int
	}{
		{name: "server default", reasoning: 6},
		{name: "thinking_token_budget", opts: []option.RequestOption{option.WithJSONSet("thinking_token_budget", 11)}, reasoning: 11},
		{name: "no thinking", opts: []option.RequestOption{option.WithJSONSet("thinking_token_budget", 0)}, reasoning: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stream := client.Chat.Completions.NewStreaming(t.Context(), params, tt.opts...)
			defer stream.Close()
			var reasoning, content strings.Builder
			var usage openai.CompletionUsage
			for stream.Next() {
				chunk := stream.Current()
				if chunk.JSON.Usage.Valid() && chunk.Usage.TotalTokens > 0 {
					usage = chunk.Usage
				}
				if len(chunk.Choices) == 0 {
					continue
				}
				d := chunk.Choices[0].Delta
				if raw, ok := d.JSON.ExtraFields["reasoning_content"]; ok && raw.Raw() != "" { // an extension field: Valid is false for those
					var text string
					if err := json.Unmarshal([]byte(raw.Raw()), &text); err != nil {
						t.Fatalf("reasoning_content %s: %v", raw.Raw(), err)
					}
					if content.Len() > 0 {
						t.Fatalf("reasoning %q after content %q", text, content.String())
					}
					reasoning.WriteString(text)
				}
				content.WriteString(d.Content)
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if n := rag.CountTokens(reasoning.String()); n != tt.reasoning {
				t.Errorf("reasoning %q counts %d tokens, want %d", reasoning.String(), n, tt.reasoning)
			}
			if n := rag.CountTokens(content.String()); n != maxTokens-tt.reasoning {
				t.Errorf("content counts %d tokens, want %d", n, maxTokens-tt.reasoning)
			}
			if usage.CompletionTokens != maxTokens || usage.CompletionTokensDetails.ReasoningTokens != int64(tt.reasoning) {
				t.Errorf("usage %+v, want %d completion tokens of which %d reasoning", usage, maxTokens, tt.reasoning)
			}
		})
	}

	t.Run("non-streaming", func(t *testing.T) {
		p := params
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
		c, err := client.Chat.Completions.New(t.Context(), p, option.WithJSONSet("thinking_token_budget", 4))
		if err != nil {
			t.Fatal(err)
		}
		var text string
		if raw := c.Choices[0].Message.JSON.ExtraFields["reasoning_content"]; raw.Raw() != "" {
			_ = json.Unmarshal([]byte(raw.Raw()), &text)
		}
		if rag.CountTokens(text) != 4 || c.Usage.CompletionTokensDetails.ReasoningTokens != 4 || rag.CountTokens(c.Choices[0].Message.Content) != maxTokens-4 {
			t.Errorf("reasoning %q, content %q, usage %+v", text, c.Choices[0].Message.Content, c.Usage)
		}
	})
}

func TestHandlerRejectsBadThinkingBudget(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
	srv := newServer(t, e)
	for _, budget := range []string{"-1", `"lots"`, "2.5"} {
		t.Run(budget, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"ragtail-tiny","max_tokens":4,"thinking_token_budget":%s,"messages":[{"role":"user","content":"hi"}]}`, budget)
			resp := post(t, t.Context(), srv.URL+"/v1/chat/completions", body)
			defer resp.Body.Close()
			var errBody struct {
				Error struct {
					Param   string `json:"param"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&errBody); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest || errBody.Error.Param != "thinking_token_budget" {
				t.Errorf("status %d, error %+v; want 400 about thinking_token_budget", resp.StatusCode, errBody.Error)
			}
		})
	}
}
