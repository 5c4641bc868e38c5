package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// responsesUsage is the usage of a response.
type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	OutputTokens       int `json:"output_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

// responsesObject is what a benchmark reads from a response, whole or as the lifecycle events
// carry it.
type responsesObject struct {
	Object string          `json:"object"`
	Status string          `json:"status"`
	Model  string          `json:"model"`
	Error  json.RawMessage `json:"error"`
	Usage  *responsesUsage `json:"usage"`
	Output []struct {
		Type      string `json:"type"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
}

// usage records the response's usage in rec: prompt, cached, output and reasoning tokens.
func (o *responsesObject) usage(s *eventStream) error {
	u := o.Usage
	if u == nil {
		return nil
	}
	s.rec.PromptTokens = max(u.InputTokens, 0)
	s.rec.CachedTokens = max(u.InputTokensDetails.CachedTokens, 0)
	s.rec.ReasoningTokens = max(u.OutputTokensDetails.ReasoningTokens, 0)
	return s.outputTokens(max(u.OutputTokens, 0))
}

// responsesEvent is what a benchmark reads from one event of a Responses stream.
type responsesEvent struct {
	Type        string          `json:"type"`
	OutputIndex int             `json:"output_index"`
	Delta       json.RawMessage `json:"delta"`
	Item        *struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Name   string `json:"name"`
	} `json:"item"`
	Response *responsesObject `json:"response"`
	Message  string           `json:"message"`
	Code     json.RawMessage  `json:"code"`
	Error    json.RawMessage  `json:"error"`
}

// responsesDelta is an event whose delta is text: an answer's, reasoning's or a function call's
// arguments.
type responsesDelta struct {
	Type        string `json:"type"`
	OutputIndex int    `json:"output_index"`
	Delta       string `json:"delta"`
}

// The kinds of text deltas.
const (
	deltaAnswer = iota + 1
	deltaReasoning
	deltaArguments
)

// textDeltas are the Responses events whose delta is text, by kind.
var textDeltas = map[string]int{
	"response.output_text.delta":             deltaAnswer,
	"response.refusal.delta":                 deltaAnswer,
	"response.reasoning_text.delta":          deltaReasoning,
	"response.reasoning_summary_text.delta":  deltaReasoning,
	"response.function_call_arguments.delta": deltaArguments,
}

// readResponsesStream reads a Responses stream. The first token is the first delta event with
// output: response.output_text.delta or response.refusal.delta (also the first answer token),
// a reasoning delta (response.reasoning_text.delta, response.reasoning_summary_text.delta) or
// response.function_call_arguments.delta. Each of those deltas is a chunk of one token. Output
// tokens are response.completed's (or response.incomplete's) usage.output_tokens, reasoning
// included, with output_tokens_details.reasoning_tokens as the reasoning tokens, else the number
// of deltas; prompt tokens are its usage.input_tokens, with input_tokens_details.cached_tokens
// as the cached ones. The stream must end with response.completed or response.incomplete (a
// response cut at max_output_tokens); response.failed and error events fail the request with
// their message.
func (c *Client) readResponsesStream(ctx context.Context, body io.Reader, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	var (
		ev responsesEvent
		d  responsesDelta
	)
	c.readEvents(ctx, body, req, origin, rec, "response.completed", func(s *eventStream, event, data []byte, offset time.Duration) error {
		if textDeltas[string(event)] != 0 { // most events: a lighter decode
			// An event this does not decode (a delta not a string) takes the general path.
			d = responsesDelta{}
			if json.Unmarshal(data, &d) == nil && (d.Type == "" || d.Type == string(event)) {
				if d.Delta == "" {
					return nil
				}
				switch textDeltas[string(event)] {
				case deltaAnswer:
					return s.content(offset, true, false, d.Delta)
				case deltaReasoning:
					return s.content(offset, false, true, "")
				}
				if err := s.toolCall(d.OutputIndex, "", "", d.Delta); err != nil {
					return err
				}
				return s.content(offset, false, false, "")
			}
		}
		ev = responsesEvent{}
		if err := decodeEvent(event, data, &ev); err != nil {
			return err
		}
		switch eventType(event, ev.Type) {
		case "response.created":
			if r := ev.Response; r != nil && c.cfg.tracing != nil && r.Model != "" {
				rec.ResponseModel = truncateTo(r.Model, maxAttrText)
			}
		case "response.output_item.added":
			if it := ev.Item; it != nil && it.Type == "function_call" {
				return s.toolCall(ev.OutputIndex, it.CallID, it.Name, "")
			}
		case "response.output_text.delta", "response.refusal.delta":
			if text := jsonString(ev.Delta); text != "" {
				return s.content(offset, true, false, text)
			}
		case "response.reasoning_text.delta", "response.reasoning_summary_text.delta":
			if jsonString(ev.Delta) != "" {
				return s.content(offset, false, true, "")
			}
		case "response.function_call_arguments.delta":
			if args := jsonString(ev.Delta); args != "" {
				if err := s.toolCall(ev.OutputIndex, "", "", args); err != nil {
					return err
				}
				return s.content(offset, false, false, "")
			}
		case "response.completed", "response.incomplete":
			s.finished = true
			if r := ev.Response; r != nil {
				return r.usage(s)
			}
		case "response.failed":
			msg := string(data)
			if r := ev.Response; r != nil && len(r.Error) > 0 && string(r.Error) != "null" {
				msg = rawMessage(r.Error)
			}
			return errorEvent(msg)
		case "error":
			msg := ev.Message
			if msg == "" {
				msg = anthropicErrorText(ev.Error, data)
			}
			return errorEvent(msg)
		}
		return nil
	})
}

// readResponse reads a non-streamed response: its usage, its answer text and function calls.
func (c *Client) readResponse(ctx context.Context, body io.Reader, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	rec.End = time.Since(origin)
	if err != nil {
		fail(rec, classifyRead(ctx, err), fmt.Errorf("read body: %w", err))
		return
	}
	var r responsesObject
	if err := json.Unmarshal(b, &r); err != nil {
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("response is not JSON: %s", truncate(string(b))))
		return
	}
	if len(r.Error) > 0 && string(r.Error) != "null" || r.Status == "failed" {
		fail(rec, loadgen.ErrKindStream, fmt.Errorf("error response: %s", truncate(anthropicErrorText(r.Error, b))))
		return
	}
	if r.Object != "response" {
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("response is not a Responses object: %s", truncate(string(b))))
		return
	}
	s := &eventStream{rec: rec, keep: req.KeepAnswer, maxTokens: c.maxTokensOf(req)}
	s.limit = c.outputLimitOf(s.maxTokens)
	if err := r.usage(s); err != nil {
		fail(rec, loadgen.ErrKindOverlong, err)
		return
	}
	rec.TokensFromUsage = s.usageSeen
	for i, it := range r.Output {
		switch it.Type {
		case "message":
			for _, part := range it.Content {
				if s.keep && part.Type == "output_text" {
					s.answer = appendLimited(s.answer, []byte(part.Text), maxAnswerBytes)
				}
			}
		case "reasoning":
			rec.Reasoned = true
		case "function_call":
			if err := s.toolCall(i, it.CallID, it.Name, it.Arguments); err != nil {
				failStream(rec, err)
				return
			}
		}
	}
	s.endUnary(c, r.Model)
}
