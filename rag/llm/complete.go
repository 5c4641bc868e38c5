package llm

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/ragtail/ragtail/rag"
)

// Completion is a whole, non-streamed answer.
type Completion struct {
	Model        string         // the model that answered, as the server names it
	Text         string         // the answer
	ToolCalls    []rag.ToolCall // the tools the model called, when it called any
	FinishReason string         // "stop", "length", "tool_calls", ...
	Usage        *rag.Usage     // nil if the server did not report usage
}

// Complete asks for a whole completion (stream false). It retries like Generate, since nothing
// has reached the caller before the answer is complete, and the first-token timeout bounds the
// whole call.
func (c *Client) Complete(ctx context.Context, req rag.GenRequest) (Completion, error) {
	if err := c.checkModel(req.Model); err != nil {
		return Completion{}, err
	}
	params, err := c.params(req, false)
	if err != nil {
		return Completion{}, err
	}
	deadline := time.Now().Add(c.cfg.firstTokenTimeout)
	for attempt := 0; ; attempt++ {
		comp, retryable, err := c.completeOnce(ctx, params, deadline)
		if err == nil {
			return comp, nil
		}
		if !retryable || attempt >= c.cfg.retries || !c.waitRetry(ctx, attempt+1, err, deadline) {
			c.failures.Add(1)
			return Completion{}, err
		}
	}
}

// completeOnce makes one attempt and says whether its failure may be retried.
func (c *Client) completeOnce(parent context.Context, params openai.ChatCompletionNewParams, deadline time.Time) (Completion, bool, error) {
	ctx, cancel := context.WithDeadlineCause(parent, deadline, errFirstToken)
	defer cancel()
	resp, err := c.oai.Chat.Completions.New(ctx, params)
	if err != nil {
		err = c.requestError(ctx, "chat", err)
		return Completion{}, context.Cause(ctx) == nil && retryableError(err), err
	}
	if len(resp.Choices) == 0 {
		return Completion{}, true, fmt.Errorf("chat: %w: llm server answered without choices", rag.ErrUnavailable)
	}
	msg := resp.Choices[0].Message
	comp := Completion{Model: resp.Model, Text: msg.Content, FinishReason: resp.Choices[0].FinishReason}
	for _, tc := range msg.ToolCalls {
		comp.ToolCalls = append(comp.ToolCalls, rag.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	if resp.JSON.Usage.Valid() {
		comp.Usage = usageOf(resp.Usage)
	}
	if comp.FinishReason == "" {
		comp.FinishReason = "stop"
	}
	return comp, false, nil
}

// completionStream hands a whole completion over as one delta.
type completionStream struct {
	delta rag.Delta
	sent  bool
}

func newCompletionStream(c Completion) *completionStream {
	tokens := rag.CountTokens(c.Text)
	if c.Usage != nil {
		tokens = c.Usage.CompletionTokens
	}
	d := rag.Delta{Text: c.Text, Tokens: tokens, FinishReason: c.FinishReason, Usage: c.Usage}
	for i, tc := range c.ToolCalls {
		d.ToolCalls = append(d.ToolCalls, rag.ToolCallDelta{Index: i, ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
	}
	return &completionStream{delta: d}
}

func (s *completionStream) Recv() (rag.Delta, error) {
	if s.sent {
		return rag.Delta{}, io.EOF
	}
	s.sent = true
	return s.delta, nil
}

func (s *completionStream) Close() error {
	s.sent = true
	return nil
}

// usageOf converts the SDK's usage, with the prompt tokens the server's prefix cache held and the
// completion tokens spent reasoning when it reports them.
func usageOf(u openai.CompletionUsage) *rag.Usage {
	return &rag.Usage{PromptTokens: int(u.PromptTokens), CompletionTokens: int(u.CompletionTokens),
		CachedTokens: int(u.PromptTokensDetails.CachedTokens), ReasoningTokens: int(u.CompletionTokensDetails.ReasoningTokens)}
}
