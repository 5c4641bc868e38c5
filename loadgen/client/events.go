package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// eventStream is the state of one Messages or Responses stream being read into a record. The
// parsers decode each event with encoding/json: these APIs send one event per token as chat
// completions do, but wrap it in more structure, and a typed decode keeps their parsers short
// (the delta events, most of a stream, are decoded into a small struct of their own). It costs
// seven to ten allocations a token where the chat parser makes none (BenchmarkMessagesParse,
// BenchmarkResponsesParse and BenchmarkSSEParse measure both).
type eventStream struct {
	rec       *loadgen.Record
	keep      bool // keep the answer and the tool calls (req.KeepAnswer)
	maxTokens int
	limit     int // OutputTokenLimit(maxTokens)
	tokens    int // content events counted as tokens
	events    int // events read
	usageSeen bool
	finished  bool // the stream's final event came (message_stop, response.completed)
	answer    []byte
	calls     toolCallAcc
	piece     [1]toolCallPiece
}

// streamError is a failure of a stream, with its error kind.
type streamError struct {
	kind string
	err  error
}

func (e *streamError) Error() string { return e.err.Error() }

// failStream fails rec with err's kind when it is a *streamError, as a protocol error otherwise.
func failStream(rec *loadgen.Record, err error) {
	var se *streamError
	if errors.As(err, &se) {
		fail(rec, se.kind, se.err)
		return
	}
	fail(rec, loadgen.ErrKindProtocol, err)
}

func protocolError(format string, args ...any) error {
	return &streamError{loadgen.ErrKindProtocol, fmt.Errorf(format, args...)}
}

func errorEvent(msg string) error {
	return &streamError{loadgen.ErrKindStream, fmt.Errorf("error event: %s", truncate(msg))}
}

// content records one event carrying output: a chunk of one token at offset, the first token
// (any output, reasoning included) and the first answer token (text, not reasoning or a tool
// call's arguments), and the answer's text when it is kept.
func (s *eventStream) content(offset time.Duration, answer, reasoning bool, text string) error {
	if s.tokens++; s.tokens > s.limit {
		return &streamError{loadgen.ErrKindOverlong, overlong(s.tokens, "tokens", s.maxTokens, s.limit)}
	}
	rec := s.rec
	if rec.FirstToken == 0 {
		rec.FirstToken = offset
	}
	if answer && rec.FirstOutput == 0 {
		rec.FirstOutput = offset
	}
	rec.Reasoned = rec.Reasoned || reasoning
	if s.keep && answer {
		s.answer = appendLimited(s.answer, []byte(text), maxAnswerBytes)
	}
	rec.Chunks = append(rec.Chunks, loadgen.Chunk{At: offset, Tokens: 1})
	return nil
}

// outputTokens records the output tokens a usage reports.
func (s *eventStream) outputTokens(n int) error {
	if n > s.limit {
		return &streamError{loadgen.ErrKindOverlong, overlong(n, "tokens by its usage", s.maxTokens, s.limit)}
	}
	s.usageSeen = true
	s.rec.OutputTokens = n
	return nil
}

// toolCall adds a piece of the tool call at index: its id and name, or a fragment of its
// arguments.
func (s *eventStream) toolCall(index int, id, name, arguments string) error {
	p := &s.piece[0]
	*p = toolCallPiece{index: index, hasIndex: true}
	if s.keep {
		p.id, p.name, p.arguments = quoteJSON(id), quoteJSON(name), quoteJSON(arguments)
	}
	if err := s.calls.add(s.piece[:], s.keep); err != nil {
		return &streamError{loadgen.ErrKindProtocol, err}
	}
	return nil
}

func quoteJSON(s string) []byte {
	if s == "" {
		return nil
	}
	b, _ := json.Marshal(s)
	return b
}

// readEvents reads the SSE stream of a Messages or Responses request, handing each event's type
// and data to handle with its arrival offset, and finishes rec: output tokens from the usage
// the stream reported, else one per content event; a stream that ended before its final event
// failed.
func (c *Client) readEvents(ctx context.Context, body io.Reader, req *loadgen.Request, origin time.Time, rec *loadgen.Record,
	final string, handle func(s *eventStream, event, data []byte, offset time.Duration) error) {
	sr := c.readers.Get().(*sseReader)
	sr.reset(body)
	defer func() {
		sr.reset(nil)
		c.readers.Put(sr)
	}()
	s := &eventStream{rec: rec, keep: req.KeepAnswer, maxTokens: c.maxTokensOf(req)}
	s.limit = c.outputLimitOf(s.maxTokens)
	defer func() {
		if s.keep {
			rec.Answer = string(s.answer)
		}
		s.calls.record(rec, s.keep)
	}()
	for {
		event, data, at, err := sr.next()
		if err != nil {
			rec.End = time.Since(origin)
			if errors.Is(err, io.EOF) {
				break
			}
			fail(rec, classifyRead(ctx, err), fmt.Errorf("read stream: %w", err))
			return
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 || bytes.Equal(data, []byte("[DONE]")) {
			continue
		}
		offset := at.Sub(origin)
		if s.events++; s.events > 2*s.limit+16 { // a few lifecycle events per response besides the deltas
			rec.End = offset
			fail(rec, loadgen.ErrKindOverlong, overlong(s.events, "events", s.maxTokens, s.limit))
			return
		}
		if err := handle(s, event, data, offset); err != nil {
			rec.End = offset
			failStream(rec, err)
			return
		}
	}
	if s.usageSeen {
		rec.TokensFromUsage = true
	} else {
		rec.OutputTokens = s.tokens
	}
	if !s.finished {
		fail(rec, loadgen.ErrKindStream, fmt.Errorf("stream ended without %s", final))
	}
}

// eventType is an event's type: the "type" member of its data, else the SSE event name.
func eventType(event []byte, typ string) string {
	if typ != "" {
		return typ
	}
	return string(event)
}

// decodeEvent decodes an event's data into v; an event named error whose data is not JSON is
// an error event.
func decodeEvent(event, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		if string(event) == "error" {
			return errorEvent(string(data))
		}
		return protocolError("event is not JSON: %s", truncate(string(data)))
	}
	return nil
}

// jsonString is the text of a raw JSON value when it is a string, else "".
func jsonString(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// endUnary ends a non-streamed answer of the Messages or Responses API: the model that answered
// (when tracing), the answer if kept, and the tool calls.
func (s *eventStream) endUnary(c *Client, model string) {
	if c.cfg.tracing != nil && model != "" {
		s.rec.ResponseModel = truncateTo(model, maxAttrText)
	}
	if s.keep {
		s.rec.Answer = string(s.answer)
	}
	s.calls.record(s.rec, s.keep)
}
