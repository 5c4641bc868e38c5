package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ragtail/ragtail/loadgen"
)

// Besides OpenAI's chat completions, the client speaks two other generation APIs, told apart by
// the URL's path: Anthropic's Messages API (a URL ending in /messages, such as
// http://host:8000/v1/messages) and OpenAI's Responses API (a URL ending in /responses). Each
// request is translated from loadgen.Request's chat messages, and each stream is read from its
// own events into the same loadgen.Record (see readMessagesStream and readResponsesStream for
// what marks the first token and where the token counts come from).

// api is the generation API a client's endpoint speaks.
type api uint8

const (
	apiChat      api = iota // OpenAI chat completions (or legacy completions)
	apiMessages             // Anthropic Messages: POST /v1/messages
	apiResponses            // OpenAI Responses: POST /v1/responses
)

// The APIs' names, as API returns them.
const (
	APIChatCompletions = "chat-completions"
	APICompletions     = "completions"
	APIEmbeddings      = "embeddings"
	APIMessages        = "anthropic-messages"
	APIResponses       = "openai-responses"
)

// anthropicVersion is the anthropic-version header every Messages request carries, as
// Anthropic's SDKs send it.
const anthropicVersion = "2023-06-01"

// apiOf is the API a resolved endpoint path speaks.
func apiOf(path string) api {
	switch {
	case strings.HasSuffix(path, "/messages"):
		return apiMessages
	case strings.HasSuffix(path, "/responses"):
		return apiResponses
	}
	return apiChat
}

// API names the API the client's endpoint speaks: APIChatCompletions, APICompletions,
// APIEmbeddings, APIMessages or APIResponses.
func (c *Client) API() string {
	switch {
	case c.api == apiMessages:
		return APIMessages
	case c.api == apiResponses:
		return APIResponses
	case c.embeddings:
		return APIEmbeddings
	case c.completions:
		return APICompletions
	}
	return APIChatCompletions
}

// errNoMaxTokens is the error of a Messages request without max_tokens, which Anthropic requires.
var errNoMaxTokens = errors.New("the Anthropic Messages API requires max_tokens: set it (bench: --max-tokens)")

// anthropicBody is the JSON of a Messages request.
type anthropicBody struct {
	Model       string          `json:"model,omitempty"`
	MaxTokens   int             `json:"max_tokens"`
	System      string          `json:"system,omitempty"`
	Messages    []anthropicTurn `json:"messages"`
	Temperature *float64        `json:"temperature,omitempty"`
	Stream      bool            `json:"stream"`
}

// anthropicTurn is one message of a Messages request: text, or content blocks when it carries
// tool calls or tool results.
type anthropicTurn struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // a string or []map[string]any
}

// encodeMessages writes req as a Messages request: system (and developer) messages are joined
// into the top-level system, an assistant message's tool calls become tool_use blocks, and tool
// messages become tool_result blocks of a user turn (consecutive ones in one turn).
func (c *Client) encodeMessages(req *loadgen.Request, buf *bytes.Buffer) error {
	maxTokens := c.maxTokensOf(req)
	if maxTokens <= 0 {
		return errNoMaxTokens
	}
	b := anthropicBody{Model: c.cfg.model, MaxTokens: maxTokens, Temperature: c.cfg.temperature, Stream: c.cfg.stream, Messages: []anthropicTurn{}}
	var system []string
	for _, m := range req.Messages {
		switch m.Role {
		case "system", "developer":
			system = append(system, m.Content)
		case "tool":
			block := map[string]any{"type": "tool_result", "tool_use_id": m.ToolCallID, "content": m.Content}
			if n := len(b.Messages); n > 0 && b.Messages[n-1].Role == "user" {
				if blocks, ok := b.Messages[n-1].Content.([]map[string]any); ok && len(blocks) > 0 && blocks[0]["type"] == "tool_result" {
					b.Messages[n-1].Content = append(blocks, block)
					continue
				}
			}
			b.Messages = append(b.Messages, anthropicTurn{Role: "user", Content: []map[string]any{block}})
		case "assistant":
			if len(m.ToolCalls) == 0 {
				b.Messages = append(b.Messages, anthropicTurn{Role: "assistant", Content: m.Content})
				continue
			}
			var blocks []map[string]any
			if m.Content != "" {
				blocks = append(blocks, map[string]any{"type": "text", "text": m.Content})
			}
			for _, tc := range m.ToolCalls {
				input := json.RawMessage(tc.Function.Arguments)
				if !json.Valid(input) || !bytes.HasPrefix(bytes.TrimSpace(input), []byte("{")) {
					input = json.RawMessage("{}") // tool_use input must be an object
				}
				blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": input})
			}
			b.Messages = append(b.Messages, anthropicTurn{Role: "assistant", Content: blocks})
		default:
			b.Messages = append(b.Messages, anthropicTurn{Role: "user", Content: m.Content})
		}
	}
	b.System = strings.Join(system, "\n\n")
	return encodeJSON(buf, b)
}

// responsesBody is the JSON of a Responses request.
type responsesBody struct {
	Model           string           `json:"model,omitempty"`
	Input           []map[string]any `json:"input"`
	MaxOutputTokens int              `json:"max_output_tokens,omitempty"`
	Temperature     *float64         `json:"temperature,omitempty"`
	Stream          bool             `json:"stream"`
	Store           bool             `json:"store"`
}

// encodeResponses writes req as a Responses request: the messages become input items (role and
// text), an assistant message's tool calls function_call items and tool messages
// function_call_output items; store is false, as a benchmark keeps nothing on the server.
func (c *Client) encodeResponses(req *loadgen.Request, buf *bytes.Buffer) error {
	b := responsesBody{Model: c.cfg.model, MaxOutputTokens: c.maxTokensOf(req), Temperature: c.cfg.temperature, Stream: c.cfg.stream, Input: []map[string]any{}}
	for _, m := range req.Messages {
		switch {
		case m.Role == "tool":
			b.Input = append(b.Input, map[string]any{"type": "function_call_output", "call_id": m.ToolCallID, "output": m.Content})
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			if m.Content != "" {
				b.Input = append(b.Input, map[string]any{"role": "assistant", "content": m.Content})
			}
			for _, tc := range m.ToolCalls {
				b.Input = append(b.Input, map[string]any{"type": "function_call", "call_id": tc.ID, "name": tc.Function.Name, "arguments": tc.Function.Arguments})
			}
		default:
			b.Input = append(b.Input, map[string]any{"role": m.Role, "content": m.Content})
		}
	}
	return encodeJSON(buf, b)
}

func encodeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode body: %w", err)
	}
	return nil
}
