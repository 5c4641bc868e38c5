package openai_test

import (
	"bufio"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

func TestUsageOfDetails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		usage rag.Usage
		want  string
	}{
		{name: "plain", usage: rag.Usage{PromptTokens: 10, CompletionTokens: 5},
			want: `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`},
		{name: "cached prompt tokens", usage: rag.Usage{PromptTokens: 100, CompletionTokens: 5, CachedTokens: 96},
			want: `{"prompt_tokens":100,"completion_tokens":5,"total_tokens":105,"prompt_tokens_details":{"cached_tokens":96}}`},
		{name: "reasoning tokens", usage: rag.Usage{PromptTokens: 10, CompletionTokens: 40, ReasoningTokens: 32},
			want: `{"prompt_tokens":10,"completion_tokens":40,"total_tokens":50,"completion_tokens_details":{"reasoning_tokens":32}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(openai.UsageOf(tt.usage))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("UsageOf(%+v) = %s, want %s", tt.usage, b, tt.want)
			}
		})
	}
}

// Reasoning chunks carry the text under both names clients read, before any content.
func TestChatStreamReasoning(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	cs := openai.NewChatStream(rec, "chatcmpl-1", "m", false)
	if err := cs.Reasoning("Let me think"); err != nil {
		t.Fatal(err)
	}
	if err := cs.Content("Answer"); err != nil {
		t.Fatal(err)
	}
	if err := cs.Finish("length", rag.Usage{PromptTokens: 3, CompletionTokens: 4, ReasoningTokens: 3}, ""); err != nil {
		t.Fatal(err)
	}
	var deltas []openai.ChunkDelta
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var c openai.ChatChunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, c.Choices[0].Delta)
	}
	if len(deltas) != 4 {
		t.Fatalf("%d chunks, want role, reasoning, content, finish", len(deltas))
	}
	if r := deltas[1]; r.ReasoningContent != "Let me think" || r.Reasoning != "Let me think" || r.Content != nil {
		t.Errorf("reasoning chunk %+v", r)
	}
	if c := deltas[2]; c.Content == nil || *c.Content != "Answer" || c.ReasoningContent != "" {
		t.Errorf("content chunk %+v", c)
	}
	comp := openai.ReasoningCompletion("id", "m", "thought", "answer", "stop", rag.Usage{ReasoningTokens: 1, CompletionTokens: 2})
	if m := comp.Choices[0].Message; m.ReasoningContent != "thought" || m.Reasoning != "thought" || m.Content != "answer" {
		t.Errorf("non-streamed message %+v", m)
	}
}
