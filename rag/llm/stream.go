package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/ragtail/ragtail/rag"
)

// Generate starts a streamed completion and returns once its first content token has arrived
// (or the stream ended without any, for an empty answer), so that every error before the first
// token is returned here and may be retried: failures to connect, error statuses 408, 429, 500,
// 502, 503 and 504, and streams that break or report an error before their first token. The
// first token must arrive within the first-token timeout of the call, retries included.
//
// The stream's deltas carry one content chunk each (Tokens 1: vLLM, llama.cpp and Ollama stream
// a token per chunk). The last delta carries the finish reason and, when the server reported
// it, the usage. A stream whose server fails, falls silent for the idle timeout or closes the
// connection early ends with an error matching rag.ErrUnavailable or rag.ErrTimeout; cancelling
// ctx ends it with ctx's error. Close releases the connection at once.
func (c *Client) Generate(ctx context.Context, req rag.GenRequest) (rag.TokenStream, error) {
	if err := c.checkModel(req.Model); err != nil {
		return nil, err
	}
	if c.cfg.noStream {
		comp, err := c.Complete(ctx, req)
		if err != nil {
			return nil, err
		}
		return newCompletionStream(comp), nil
	}
	params, err := c.params(req, true)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(c.cfg.firstTokenTimeout)
	for attempt := 0; ; attempt++ {
		s := c.open(ctx, params, deadline)
		if s.err == nil {
			return s, nil
		}
		if !s.retryable || attempt >= c.cfg.retries || !c.waitRetry(ctx, attempt+1, s.err, deadline) {
			c.failures.Add(1)
			return nil, s.err
		}
	}
}

// stream is a running streamed completion.
type stream struct {
	c       *Client
	sse     *ssestream.Stream[openai.ChatCompletionChunk]
	ctx     context.Context // the request's; cancelled with a cause by the timers and Close
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	started atomic.Bool // a content token has arrived: the timer now guards idle gaps

	queue     []rag.Delta
	final     *rag.Delta // the finish chunk, held back until the usage that may follow it
	usage     *rag.Usage
	timings   *rag.Usage // llama.cpp's counts, used when no usage chunk comes
	tokens    int        // content chunks received
	err       error      // set when the stream failed; returned once the queue is drained
	retryable bool       // err happened before the first token and may be retried
	ended     bool
	closeOnce sync.Once
}

// open sends the request and reads until the first content token or the end of the stream.
func (c *Client) open(parent context.Context, params openai.ChatCompletionNewParams, deadline time.Time) *stream {
	ctx, cancel := context.WithCancelCause(parent)
	s := &stream{c: c, ctx: ctx, cancel: cancel}
	s.timer = time.AfterFunc(time.Until(deadline), func() {
		if s.started.Load() {
			cancel(errIdle)
		} else {
			cancel(errFirstToken)
		}
	})
	s.sse = c.oai.Chat.Completions.NewStreaming(ctx, params)
	for len(s.queue) == 0 && !s.ended {
		s.step()
	}
	return s
}

// Recv returns the next delta, io.EOF after the last one, or the error that ended the stream.
func (s *stream) Recv() (rag.Delta, error) {
	for len(s.queue) == 0 && !s.ended {
		s.step()
	}
	if len(s.queue) > 0 {
		d := s.queue[0]
		s.queue = s.queue[1:]
		return d, nil
	}
	if s.err != nil {
		return rag.Delta{}, s.err
	}
	return rag.Delta{}, io.EOF
}

// Close stops the generation: the request is cancelled and the connection closed, which a
// server such as vLLM takes as an abort that frees the sequence's KV cache. It is idempotent.
func (s *stream) Close() error {
	s.release()
	if !s.ended {
		s.ended = true
		if s.err == nil {
			s.err = fmt.Errorf("llm stream: %w", errClosed)
		}
		s.queue = nil
	}
	return nil
}

func (s *stream) release() {
	s.closeOnce.Do(func() {
		s.timer.Stop()
		s.cancel(errClosed)
		_ = s.sse.Close()
	})
}

// step reads one event and handles it, or handles the end of the stream.
func (s *stream) step() {
	if !s.sse.Next() {
		s.end(s.sse.Err())
		return
	}
	if s.started.Load() {
		s.timer.Reset(s.c.cfg.idleTimeout)
	}
	s.handle(s.sse.Current())
}

// handle takes in one chunk.
func (s *stream) handle(chunk openai.ChatCompletionChunk) {
	if chunk.JSON.Usage.Valid() {
		s.usage = usageOf(chunk.Usage)
	}
	// The SDK marks fields it does not know as invalid but keeps their raw JSON.
	if t, ok := chunk.JSON.ExtraFields["timings"]; ok && t.Raw() != "" && t.Raw() != "null" {
		var timings struct {
			PromptN    *int `json:"prompt_n"`
			PredictedN *int `json:"predicted_n"`
		}
		if json.Unmarshal([]byte(t.Raw()), &timings) == nil && timings.PromptN != nil && timings.PredictedN != nil {
			s.timings = &rag.Usage{PromptTokens: *timings.PromptN, CompletionTokens: *timings.PredictedN}
		}
	}
	if len(chunk.Choices) == 0 {
		// vLLM before 0.10 reported errors inside a stream as a bare error object,
		// {"object":"error","message":...}, which the SDK decodes as a chunk without choices.
		if m, ok := chunk.JSON.ExtraFields["message"]; ok && !chunk.JSON.Usage.Valid() {
			var msg string
			_ = json.Unmarshal([]byte(m.Raw()), &msg)
			s.fail(fmt.Errorf("%w: llm server reported an error in the stream: %s", rag.ErrUnavailable, truncate(msg)))
		}
		return
	}
	if s.final != nil {
		return // nothing follows the finish but usage
	}
	choice := chunk.Choices[0]
	var calls []rag.ToolCallDelta
	for _, tc := range choice.Delta.ToolCalls {
		calls = append(calls, rag.ToolCallDelta{Index: int(tc.Index), ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	if text := choice.Delta.Content; text != "" || len(calls) > 0 {
		if !s.started.Load() {
			s.started.Store(true)
			s.timer.Reset(s.c.cfg.idleTimeout)
		}
		s.tokens++
		s.queue = append(s.queue, rag.Delta{Text: text, Tokens: 1, ToolCalls: calls})
	}
	if choice.FinishReason != "" {
		s.final = &rag.Delta{FinishReason: choice.FinishReason}
	}
}

// fail ends the stream with err.
func (s *stream) fail(err error) {
	s.end(err)
}

// end closes the stream after its last event (err nil) or a failure, and decides what the
// caller gets: the held-back finish delta, or an error saying what happened.
func (s *stream) end(err error) {
	if s.ended {
		return
	}
	cause := context.Cause(s.ctx)
	s.ended = true
	s.release()
	if s.final != nil {
		// The answer is complete; whatever happened after the finish chunk does not matter.
		final := *s.final
		final.Usage = s.usage
		if final.Usage == nil {
			final.Usage = s.timings
		}
		s.queue = append(s.queue, final)
		return
	}
	s.retryable = false
	switch {
	case errors.Is(cause, errFirstToken):
		s.c.firstTokenTimeouts.Add(1)
		s.err = fmt.Errorf("%w: no token from %s within %v", rag.ErrTimeout, s.c.baseURL, s.c.cfg.firstTokenTimeout)
	case errors.Is(cause, errIdle):
		s.c.idleTimeouts.Add(1)
		s.err = fmt.Errorf("%w: llm stream went silent for %v after %d tokens", rag.ErrTimeout, s.c.cfg.idleTimeout, s.tokens)
	case errors.Is(cause, errClosed):
		s.err = fmt.Errorf("llm stream: %w", errClosed)
	case cause != nil:
		// The caller's context: its deadline is a timeout, a cancellation is its own business.
		if errors.Is(cause, context.DeadlineExceeded) {
			s.err = fmt.Errorf("llm stream: %w (%w)", rag.ErrTimeout, cause)
		} else {
			s.err = fmt.Errorf("llm stream: %w", cause)
		}
	case err == nil:
		s.err = fmt.Errorf("%w: llm stream ended after %d tokens without a finish reason: the server closed it early", rag.ErrUnavailable, s.tokens)
		s.retryable = s.tokens == 0
	default:
		s.err = s.streamError(err)
		s.retryable = s.tokens == 0 && retryableError(err)
	}
	if s.tokens > 0 {
		s.c.failures.Add(1) // failures before the first token are counted by Generate
	}
}

// streamError describes an error the SDK reported while reading the stream.
func (s *stream) streamError(err error) error {
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: llm server reported an error after %d tokens: %s", rag.ErrUnavailable, s.tokens, serverMessage(se.Event.Data))
	}
	var status *StatusError
	if errors.As(err, &status) || errors.Is(err, rag.ErrUnavailable) || errors.Is(err, rag.ErrTimeout) || errors.Is(err, rag.ErrInvalidRequest) {
		return err
	}
	if s.tokens == 0 {
		return s.c.requestError(context.Background(), "chat", err)
	}
	return fmt.Errorf("%w: llm stream broke after %d tokens: %w", rag.ErrUnavailable, s.tokens, err)
}

// retryableError reports whether a failure before the first token may be retried.
func retryableError(err error) bool {
	var status *StatusError
	if errors.As(err, &status) {
		return status.retryable()
	}
	return !errors.Is(err, rag.ErrInvalidRequest)
}
