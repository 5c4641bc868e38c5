package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ragtail/ragtail/loadgen"
)

// maxDatasetLine bounds one JSONL line (and one array element) of a dataset or sessions file.
const maxDatasetLine = 16 << 20

// ReadDataset reads prompts from a dataset file in either of the forms LLM benchmarks use:
//
//   - ShareGPT JSON: an array of {"conversations": [{"from": "human", "value": ...},
//     {"from": "gpt", "value": ...}, ...]}. As in vLLM's benchmark, the first human turn is the
//     prompt and the reply after it sets the output length (its estimated tokens).
//   - OpenAI messages, as JSONL (one object a line) or a JSON array: {"messages": [...],
//     "max_tokens": N, ...}. A trailing assistant message is the reference answer: it is dropped
//     and sets the output length when max_tokens does not. Other body fields (temperature,
//     top_p, ...) are sent with the prompt; model and stream are the client's.
//
// A line or element may also be {"prompt": "text"}. Entries with no usable prompt are skipped;
// a file with none is an error, and so is malformed JSON (with its line or element number).
func ReadDataset(r io.Reader) ([]Prompt, error) {
	var out []Prompt
	err := readEntries(r, func(n int, raw json.RawMessage) error {
		p, ok, err := decodePrompt(raw)
		if err != nil {
			return fmt.Errorf("entry %d: %w", n, err)
		}
		if ok {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("dataset: no entry has a prompt (want ShareGPT conversations or OpenAI messages)")
	}
	return out, nil
}

// readEntries calls fn with each object of a JSON array or of a JSONL stream, numbered from 1
// (array elements) or by line.
func readEntries(r io.Reader, fn func(n int, raw json.RawMessage) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	// Skip a UTF-8 byte-order mark and leading space to see which form this is.
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte{0xEF, 0xBB, 0xBF}) {
		_, _ = br.Discard(3)
	}
	for {
		b, err := br.Peek(1)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n' {
			_, _ = br.Discard(1)
			continue
		}
		if b[0] == '[' {
			return readArray(br, fn)
		}
		return readLines(br, fn)
	}
}

func readArray(r io.Reader, fn func(int, json.RawMessage) error) error {
	dec := json.NewDecoder(r)
	if _, err := dec.Token(); err != nil { // [
		return fmt.Errorf("dataset: %w", err)
	}
	for n := 1; dec.More(); n++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("dataset element %d: %w", n, err)
		}
		if len(raw) > maxDatasetLine {
			return fmt.Errorf("dataset element %d: larger than %d bytes", n, maxDatasetLine)
		}
		if err := fn(n, raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // ]
		return fmt.Errorf("dataset: %w", err)
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("dataset: unexpected %v after the array", tok)
	}
	return nil
}

func readLines(r io.Reader, fn func(int, json.RawMessage) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxDatasetLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return fmt.Errorf("line %d: not a JSON value", n)
		}
		if err := fn(n, json.RawMessage(line)); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

// messageContent decodes OpenAI message content: a string, null, or an array of parts whose
// text parts are joined. ok is false for content with parts that are not text.
func messageContent(raw json.RawMessage) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return "", true, nil
	case raw[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err == nil, err
	case raw[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", false, err
		}
		var sb strings.Builder
		for _, p := range parts {
			if p.Type != "text" {
				return "", false, nil
			}
			sb.WriteString(p.Text)
		}
		return sb.String(), true, nil
	}
	return "", false, errors.New("message content must be a string or an array of parts")
}

// standardFields are the body fields a dataset entry may carry that the client sets itself.
var standardFields = map[string]bool{
	"messages": true, "conversations": true, "prompt": true, "model": true, "stream": true,
	"stream_options": true, "max_tokens": true, "max_completion_tokens": true, "id": true,
}

// decodePrompt decodes one dataset entry; ok is false for an entry with no usable prompt. The
// messages of an OpenAI-messages entry keep their tool calls, the ids the tool messages answer
// and their names, so that an agent's recorded steps replay as they were.
func decodePrompt(raw json.RawMessage) (Prompt, bool, error) {
	var e struct {
		Conversations []struct {
			From    string          `json:"from"`
			Value   string          `json:"value"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"conversations"`
		Messages []struct {
			Role       string             `json:"role"`
			Content    json.RawMessage    `json:"content"`
			Name       string             `json:"name"`
			ToolCalls  []loadgen.ToolCall `json:"tool_calls"`
			ToolCallID string             `json:"tool_call_id"`
		} `json:"messages"`
		Prompt              *string `json:"prompt"`
		MaxTokens           *int    `json:"max_tokens"`
		MaxCompletionTokens *int    `json:"max_completion_tokens"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return Prompt{}, false, err
	}
	var p Prompt
	switch {
	case len(e.Conversations) > 0:
		// ShareGPT: the first human turn, and the reply after it for the output length.
		for i, turn := range e.Conversations {
			from := strings.ToLower(turn.From + turn.Role)
			if from != "human" && from != "user" {
				continue
			}
			text := turn.Value
			if text == "" && len(turn.Content) > 0 {
				text, _, _ = messageContent(turn.Content)
			}
			if strings.TrimSpace(text) == "" {
				return Prompt{}, false, nil
			}
			p.Messages = []loadgen.Message{{Role: "user", Content: text}}
			if i+1 < len(e.Conversations) {
				next := e.Conversations[i+1]
				reply := next.Value
				if reply == "" && len(next.Content) > 0 {
					reply, _, _ = messageContent(next.Content)
				}
				p.MaxTokens = EstimateTokens(reply)
			}
			break
		}
	case len(e.Messages) > 0:
		msgs := e.Messages
		last := msgs[len(msgs)-1]
		if strings.EqualFold(last.Role, "assistant") && len(msgs) > 1 {
			if reply, ok, _ := messageContent(last.Content); ok {
				p.MaxTokens = EstimateTokens(reply)
			}
			msgs = msgs[:len(msgs)-1]
		}
		for _, m := range msgs {
			text, ok, err := messageContent(m.Content)
			if err != nil {
				return Prompt{}, false, fmt.Errorf("message content: %w", err)
			}
			if !ok {
				return Prompt{}, false, nil // images and audio: not for a text benchmark
			}
			role := m.Role
			if role == "" {
				role = "user"
			}
			p.Messages = append(p.Messages, loadgen.Message{Role: role, Content: text, Name: m.Name,
				ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID})
		}
	case e.Prompt != nil && strings.TrimSpace(*e.Prompt) != "":
		p.Messages = []loadgen.Message{{Role: "user", Content: *e.Prompt}}
	default:
		return Prompt{}, false, nil
	}
	if len(p.Messages) == 0 {
		return Prompt{}, false, nil
	}
	switch {
	case e.MaxTokens != nil && *e.MaxTokens > 0:
		p.MaxTokens = *e.MaxTokens
	case e.MaxCompletionTokens != nil && *e.MaxCompletionTokens > 0:
		p.MaxTokens = *e.MaxCompletionTokens
	}
	if len(e.Messages) > 0 {
		var all map[string]json.RawMessage
		if err := json.Unmarshal(raw, &all); err == nil {
			for k, v := range all {
				if standardFields[k] {
					continue
				}
				if p.Extra == nil {
					p.Extra = map[string]any{}
				}
				p.Extra[k] = v
			}
		}
	}
	return p, true, nil
}

// Prompt is one entry of a dataset.
type Prompt struct {
	Messages  []loadgen.Message
	MaxTokens int            // the output length the dataset asks for (ShareGPT: the reply's estimated tokens); 0 if none
	Extra     map[string]any // other body fields of an OpenAI-messages line
}
