package llmsim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/pipeline"
)

var _ pipeline.Generator = (*llmsim.Engine)(nil)

var _ rag.TokenStream = (*llmsim.Stream)(nil)

// newEngine returns an engine closed when the test ends.
func newEngine(tb testing.TB, p llmsim.Profile, opts ...llmsim.Option) *llmsim.Engine {
	tb.Helper()
	e, err := llmsim.New(p, opts...)
	if err != nil {
		tb.Fatalf("new engine: %v", err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return e
}

func profile(tb testing.TB, name string) llmsim.Profile {
	tb.Helper()
	p, err := llmsim.ProfileByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// userPrompt returns a one-message conversation of exactly promptTokens tokens as
// rag.PromptTokens counts them: 1 + 4 of chat framing, then one token per short word.
func userPrompt(tb testing.TB, promptTokens int) []rag.Message {
	tb.Helper()
	const framing = 1 + 4
	if promptTokens <= framing {
		tb.Fatalf("prompt of %d tokens is shorter than the chat framing", promptTokens)
	}
	msgs := []rag.Message{{Role: "user", Content: strings.TrimSpace(strings.Repeat("why ", promptTokens-framing))}}
	if got := rag.PromptTokens(msgs); got != promptTokens {
		tb.Fatalf("userPrompt: %d tokens, want %d", got, promptTokens)
	}
	return msgs
}

// submit queues one request of the given prompt length and output length.
func submit(tb testing.TB, e *llmsim.Engine, id string, promptTokens, maxTokens int) *llmsim.Stream {
	tb.Helper()
	st, err := e.Submit(context.Background(), rag.GenRequest{
		ID: id, Model: e.Profile().Model, Messages: userPrompt(tb, promptTokens), MaxTokens: maxTokens, Temperature: 1,
	})
	if err != nil {
		tb.Fatalf("submit %s: %v", id, err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

// stepAll steps a paused virtual-time engine until it has nothing left to do.
func stepAll(tb testing.TB, e *llmsim.Engine) []llmsim.StepInfo {
	tb.Helper()
	var steps []llmsim.StepInfo
	for {
		info, err := e.Step()
		if err != nil {
			tb.Fatalf("step: %v", err)
		}
		if info.Seqs == 0 {
			return steps
		}
		steps = append(steps, info)
		if len(steps) > 1_000_000 {
			tb.Fatal("engine does not go idle")
		}
	}
}

// result is everything a stream delivered.
type result struct {
	text   string
	deltas int
	tokens int // sum of Delta.Tokens
	last   rag.Delta
}

// drain reads st to io.EOF and fails the test on any other error.
func drain(tb testing.TB, st rag.TokenStream) result {
	tb.Helper()
	r, err := read(st)
	if err != nil {
		tb.Fatalf("recv: %v", err)
	}
	return r
}

func read(st rag.TokenStream) (result, error) {
	var r result
	var text strings.Builder
	for {
		d, err := st.Recv()
		if errors.Is(err, io.EOF) {
			r.text = text.String()
			if r.last.FinishReason == "" {
				return r, errors.New("EOF before a finish reason")
			}
			return r, nil
		}
		if err != nil {
			r.text = text.String()
			return r, err
		}
		if r.last.FinishReason != "" {
			return r, fmt.Errorf("delta %+v after the finish delta", d)
		}
		text.WriteString(d.Text)
		r.deltas++
		r.tokens += d.Tokens
		r.last = d
	}
}

// decodeTime is the modelled time of the decode steps of a batch of `batch` identical
// sequences with prompts of promptTokens, from the first token to the last of maxTokens: in
// decode step k (k = 1..maxTokens-1) each sequence has promptTokens+k tokens of context.
func decodeTime(p llmsim.Profile, batch, promptTokens, maxTokens int) time.Duration {
	var d time.Duration
	for k := 1; k < maxTokens; k++ {
		d += p.StepTime(0, batch, batch*(promptTokens+k))
	}
	return d
}
