package llmsim

import (
	"context"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// Timeline is what happened to one request, on the engine clock (Engine.Now).
type Timeline struct {
	Arrived    time.Duration // Generate was called
	Scheduled  time.Duration // first admitted to the running batch (valid when Admissions > 0)
	FirstToken time.Duration // end of the step that produced the first token, reasoning or not (valid when OutputTokens > 0)
	// FirstAnswerToken is the end of the step that produced the first token after the
	// reasoning (valid when OutputTokens exceeds the reasoning tokens).
	FirstAnswerToken time.Duration
	Finished         time.Duration // end of the step that produced the last token (valid when Done)
	Admissions       int           // times admitted: 1 + re-admissions after preemptions
	Preemptions      int           // times preempted
	OutputTokens     int           // tokens produced so far
	Done             bool          // all tokens produced
	// PromptTokens is the prompt's length, and CachedTokens the part of it found in the prefix
	// cache at the first admission, which was not prefilled.
	PromptTokens, CachedTokens int
	// ModelledE2E is the request's end-to-end latency on the cost model (valid when Done): the
	// modelled durations of the steps the engine ran from its arrival to its last token. It
	// equals E2E in virtual time; in real time it leaves out how late the host's timers woke the
	// engine, so it measures the engine's queueing and batching alone, whatever else loads the
	// machine. Profile.UnloadedE2E is the same request's latency in an idle engine.
	ModelledE2E time.Duration
}

// Slowdown is ModelledE2E over the request's latency in an idle engine (Profile.UnloadedE2E):
// 1 when nothing else ran, and the factor by which the other requests' queueing and batching
// slowed it down otherwise. It is 0 until the request is done.
func (t Timeline) Slowdown(p Profile) float64 {
	unloaded := p.UnloadedE2E(t.PromptTokens, t.CachedTokens, t.OutputTokens)
	if !t.Done || unloaded <= 0 {
		return 0
	}
	return float64(t.ModelledE2E) / float64(unloaded)
}

// TTFT is the time to first token: FirstToken - Arrived.
func (t Timeline) TTFT() time.Duration { return t.FirstToken - t.Arrived }

// QueueTime is the time spent waiting before the first admission: Scheduled - Arrived.
func (t Timeline) QueueTime() time.Duration { return t.Scheduled - t.Arrived }

// TPOT is the mean time per output token after the first, (Finished - FirstToken) /
// (OutputTokens - 1), as vLLM's benchmark defines it; 0 for fewer than two tokens.
func (t Timeline) TPOT() time.Duration {
	if t.OutputTokens < 2 {
		return 0
	}
	return (t.Finished - t.FirstToken) / time.Duration(t.OutputTokens-1)
}

// E2E is the request's end-to-end latency: Finished - Arrived.
func (t Timeline) E2E() time.Duration { return t.Finished - t.Arrived }

// Stream is one running generation; it implements rag.TokenStream. Recv is for one goroutine
// at a time; Close and Timeline are safe to call from any goroutine.
type Stream struct {
	e         *Engine
	seq       *sequence
	ctx       context.Context
	stopAbort func() bool
	closing   sync.Once
}

// Output is one delta of a stream with its reasoning: Reasoning holds the reasoning tokens
// produced since the last call (ReasoningTokens of them), which come before the answer's
// tokens in the embedded Delta.
type Output struct {
	rag.Delta
	Reasoning       string
	ReasoningTokens int
}

// Recv returns the answer's tokens produced since the last call as one delta (Tokens > 1 when
// the reader fell behind the engine), waiting for at least one; reasoning tokens are left out
// (see RecvOutput). The tokens of tool calls come as ToolCalls pieces: a call's first piece
// (its index, id and name) always starts a piece of its own, and the argument pieces that
// follow it are joined into one. The last delta carries the finish reason and usage; after it Recv returns
// io.EOF. If the context given to Generate is done, Recv returns its error; if the engine
// closed first, ErrClosed.
func (s *Stream) Recv() (rag.Delta, error) {
	for {
		out, err := s.RecvOutput()
		if err != nil {
			return rag.Delta{}, err
		}
		if out.Tokens > 0 || out.FinishReason != "" {
			return out.Delta, nil
		}
	}
}

// RecvOutput is Recv with the reasoning: it returns every token produced since the last call,
// reasoning and answer, waiting for at least one.
func (s *Stream) RecvOutput() (Output, error) {
	o := &s.seq.out
	for {
		if err := s.ctx.Err(); err != nil {
			return Output{}, err
		}
		o.mu.Lock()
		if o.tokens > 0 || o.reasoningTokens > 0 || (o.finished && !o.delivered) {
			out := Output{Delta: rag.Delta{Text: string(o.buf), Tokens: o.tokens},
				Reasoning: string(o.reasoning), ReasoningTokens: o.reasoningTokens}
			if len(o.calls) > 0 {
				out.ToolCalls = slices.Clone(o.calls)
				o.calls = o.calls[:0]
			}
			o.buf, o.tokens = o.buf[:0], 0
			o.reasoning, o.reasoningTokens = o.reasoning[:0], 0
			if o.finished {
				u := o.usage
				out.FinishReason, out.Usage = o.reason, &u
				o.delivered = true
			}
			o.mu.Unlock()
			return out, nil
		}
		delivered, err := o.delivered, o.err
		o.mu.Unlock()
		switch {
		case delivered:
			return Output{}, io.EOF
		case err != nil:
			return Output{}, err
		}
		select {
		case <-o.notify:
		case <-s.ctx.Done():
		}
	}
}

// Close removes the sequence from the engine and frees its KV-cache blocks at once, if it has
// not finished. It is idempotent and returns nil.
func (s *Stream) Close() error {
	s.closing.Do(func() {
		if s.stopAbort != nil {
			s.stopAbort()
		}
		s.e.abort(s.seq, errStreamClosed)
	})
	return nil
}

// Timeline returns the request's timeline so far.
func (s *Stream) Timeline() Timeline {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.seq.timeline
}

// outbox is a sequence's queue of produced tokens. The engine loop appends without ever
// blocking; the reader takes everything queued at once.
type outbox struct {
	mu        sync.Mutex
	buf       []byte // text of the queued answer tokens
	tokens    int
	reasoning []byte // text of the queued reasoning tokens
	// reasoningTokens counts the tokens in reasoning
	reasoningTokens int
	calls           []rag.ToolCallDelta // tool-call pieces queued, counted in tokens
	heldTokens      int                 // tool-call tokens whose piece is not complete yet
	finished        bool                // the last token is queued; reason and usage are set
	reason          string
	usage           rag.Usage
	delivered       bool  // the last delta was returned
	err             error // the stream failed
	notify          chan struct{}
}

func (o *outbox) wake() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

func (o *outbox) push(w *wordSource, reasoning bool) {
	o.mu.Lock()
	if reasoning {
		o.reasoning = w.next(o.reasoning)
		o.reasoningTokens++
	} else {
		o.buf = w.next(o.buf)
		o.tokens++
	}
	o.mu.Unlock()
	o.wake()
}

// pushTool queues one token of a tool call: a token that completes a piece queues the piece,
// joined to the last one queued when both are arguments of the same call.
func (o *outbox) pushTool(tok toolToken) {
	o.mu.Lock()
	if !tok.deliver {
		o.heldTokens++
		o.mu.Unlock()
		return
	}
	o.tokens += 1 + o.heldTokens
	o.heldTokens = 0
	if n := len(o.calls); n > 0 && tok.piece.ID == "" && o.calls[n-1].ID == "" && o.calls[n-1].Index == tok.piece.Index {
		o.calls[n-1].Arguments += tok.piece.Arguments
	} else {
		o.calls = append(o.calls, tok.piece)
	}
	o.mu.Unlock()
	o.wake()
}

func (o *outbox) finish(reason string, u rag.Usage) {
	o.mu.Lock()
	o.tokens += o.heldTokens // a call cut short in its name: its tokens count all the same
	o.heldTokens = 0
	o.finished, o.reason, o.usage = true, reason, u
	o.mu.Unlock()
	o.wake()
}

// fail ends the stream with err unless it already finished.
func (o *outbox) fail(err error) {
	o.mu.Lock()
	if !o.finished && o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
	o.wake()
}
