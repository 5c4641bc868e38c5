package openai

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// NewCompletionID returns a fresh id in OpenAI's form, "chatcmpl-" and 24 hex digits.
func NewCompletionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

// ChatStream writes one streamed chat completion exactly as OpenAI does: a role chunk, content
// chunks, a finish chunk, a usage chunk with empty choices when usage was asked for, then
// "data: [DONE]". It is not safe for concurrent use.
type ChatStream struct {
	sse          *SSE
	id, model    string
	created      int64
	includeUsage bool
	started      bool
}

// NewChatStream returns a ChatStream writing to w. It sets the event-stream headers; they are
// sent with the first event.
func NewChatStream(w http.ResponseWriter, id, model string, includeUsage bool) *ChatStream {
	s := &ChatStream{sse: NewSSE(w), id: id, model: model, created: time.Now().Unix(), includeUsage: includeUsage}
	s.sse.SetHeaders(w.Header())
	return s
}

func (s *ChatStream) chunk(delta ChunkDelta, finish *string) ChatChunk {
	return ChatChunk{
		ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
		Choices: []ChunkChoice{{Index: 0, Delta: delta, FinishReason: finish}},
	}
}

// Start writes the role chunk if it has not been written yet.
func (s *ChatStream) Start() error {
	if s.started {
		return nil
	}
	s.started = true
	empty := ""
	return s.sse.Data(s.chunk(ChunkDelta{Role: "assistant", Content: &empty}, nil))
}

// Comment writes an SSE comment (ignored by OpenAI clients).
func (s *ChatStream) Comment(text string) error { return s.sse.Comment(text) }

// Content writes one content chunk, after the role chunk.
func (s *ChatStream) Content(text string) error {
	if err := s.Start(); err != nil {
		return err
	}
	return s.sse.Data(s.chunk(ChunkDelta{Content: &text}, nil))
}

// Reasoning writes one chunk of reasoning text, after the role chunk and before the content.
func (s *ChatStream) Reasoning(text string) error {
	if err := s.Start(); err != nil {
		return err
	}
	return s.sse.Data(s.chunk(ChunkDelta{ReasoningContent: text, Reasoning: text}, nil))
}

// ToolCalls writes the pieces of tool calls in calls, after the role chunk, one chunk per piece
// as vLLM streams them: a call's first piece with its index, id, type and function name and
// empty arguments, then pieces of its arguments under its index.
func (s *ChatStream) ToolCalls(calls []rag.ToolCallDelta) error {
	if err := s.Start(); err != nil {
		return err
	}
	for _, c := range calls {
		if err := s.sse.Data(s.chunk(ChunkDelta{ToolCalls: []ToolCall{ToolCallPiece(c)}}, nil)); err != nil {
			return err
		}
	}
	return nil
}

// ToolCallPiece is d on the wire: a streamed tool_calls entry.
func ToolCallPiece(d rag.ToolCallDelta) ToolCall {
	i := d.Index
	c := ToolCall{Index: &i, ID: d.ID, Function: FunctionCall{Name: d.Name, Arguments: d.Arguments}}
	if d.ID != "" {
		c.Type = "function"
	}
	return c
}

// WireToolCalls are calls on the wire, as an assistant message's tool_calls.
func WireToolCalls(calls []rag.ToolCall) []ToolCall {
	out := make([]ToolCall, len(calls))
	for i, c := range calls {
		out[i] = ToolCall{ID: c.ID, Type: "function", Function: FunctionCall{Name: c.Name, Arguments: c.Arguments}}
	}
	return out
}

// Finish writes the finish chunk, the usage chunk when usage was asked for, and [DONE].
// serverTiming, if not empty, is carried on the last chunk.
func (s *ChatStream) Finish(reason string, usage rag.Usage, serverTiming string) error {
	if err := s.Start(); err != nil {
		return err
	}
	fin := s.chunk(ChunkDelta{}, &reason)
	if !s.includeUsage {
		fin.ServerTiming = serverTiming
	}
	if err := s.sse.Data(fin); err != nil {
		return err
	}
	if s.includeUsage {
		u := UsageOf(usage)
		last := ChatChunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
			Choices: []ChunkChoice{}, Usage: &u, ServerTiming: serverTiming}
		if err := s.sse.Data(last); err != nil {
			return err
		}
	}
	return s.sse.Done()
}

// Fail reports an error that happened after the stream started: an error event in OpenAI's form
// (data: {"error":{...}}) followed by [DONE], so clients see why the stream ended early.
func (s *ChatStream) Fail(err error) error {
	if werr := s.sse.Data(ToHTTPError(err).Body()); werr != nil {
		return werr
	}
	return s.sse.Done()
}

// Completion builds a non-streamed response.
func Completion(id, model, content, finishReason string, usage rag.Usage) ChatCompletion {
	return ChatCompletion{
		ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: model,
		Choices: []ChatChoice{{Index: 0, Message: ResponseMessage{Role: "assistant", Content: content}, FinishReason: finishReason}},
		Usage:   UsageOf(usage),
	}
}

// ReasoningCompletion builds a non-streamed response of a reasoning model: Completion with the
// reasoning text in the message.
func ReasoningCompletion(id, model, reasoning, content, finishReason string, usage rag.Usage) ChatCompletion {
	c := Completion(id, model, content, finishReason, usage)
	c.Choices[0].Message.ReasoningContent, c.Choices[0].Message.Reasoning = reasoning, reasoning
	return c
}
