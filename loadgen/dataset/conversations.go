package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/ragtail/ragtail/loadgen"
)

// Conversation is a dataset entry replayed turn by turn: each turn is sent after the answers
// the server actually gave to the turns before it, never the replies the dataset recorded.
type Conversation struct {
	ID    string         // the entry's "id" when it has one (bounded), else its number in the file
	Turns []Turn         // in order; at least one
	Extra map[string]any // other body fields of an OpenAI-messages entry, sent with every turn
}

// Turn is one user turn of a conversation.
type Turn struct {
	// Messages are what the turn adds to the conversation: the user message, after any system
	// messages that come before it.
	Messages []loadgen.Message
	// MaxTokens is the output length the dataset asks for: the recorded reply's estimated
	// tokens (or the entry's max_tokens); 0 if none.
	MaxTokens int
}

// maxConversationID bounds a conversation id taken from a file: it ends up in every record.
const maxConversationID = 64

// ReadConversations reads the conversations of a dataset file in the forms ReadDataset reads
// (ShareGPT JSON, OpenAI messages as JSONL or a JSON array, {"prompt": ...} entries), keeping
// every user turn instead of the first: a human (or user) message starts a turn, system
// messages join the turn after them, and a reply (gpt, assistant, or any other speaker) only
// sets the output length of the turn before it. A conversation is cut before its first empty
// user turn; entries with no usable turn are skipped, and a file with none is an error.
func ReadConversations(r io.Reader) ([]Conversation, error) {
	var out []Conversation
	err := readEntries(r, func(n int, raw json.RawMessage) error {
		c, ok, err := decodeConversation(raw)
		if err != nil {
			return fmt.Errorf("entry %d: %w", n, err)
		}
		if ok {
			if c.ID == "" {
				c.ID = fmt.Sprintf("c%d", n)
			}
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("dataset: no entry has a user turn (want ShareGPT conversations or OpenAI messages)")
	}
	return out, nil
}

// speech is one message of an entry, whatever its form.
type speech struct {
	role string // "user", "system", "reply" or "tool"
	text string
	ok   bool // text content (not images or audio)
}

// decodeConversation decodes one entry into its turns; ok is false for an entry without a
// usable user turn.
func decodeConversation(raw json.RawMessage) (Conversation, bool, error) {
	var e struct {
		ID            json.RawMessage `json:"id"`
		Conversations []struct {
			From    string          `json:"from"`
			Value   string          `json:"value"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"conversations"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Prompt *string `json:"prompt"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return Conversation{}, false, err
	}
	var said []speech
	switch {
	case len(e.Conversations) > 0:
		for _, t := range e.Conversations {
			text, ok := t.Value, true
			if text == "" && len(t.Content) > 0 {
				text, ok, _ = messageContent(t.Content)
			}
			said = append(said, speech{role: speakerRole(t.From + t.Role), text: text, ok: ok})
		}
	case len(e.Messages) > 0:
		for _, m := range e.Messages {
			text, ok, err := messageContent(m.Content)
			if err != nil {
				return Conversation{}, false, fmt.Errorf("message content: %w", err)
			}
			role := m.Role
			if role == "" {
				role = "user"
			}
			said = append(said, speech{role: speakerRole(role), text: text, ok: ok})
		}
	case e.Prompt != nil:
		said = []speech{{role: "user", text: *e.Prompt, ok: true}}
	}
	c := Conversation{Turns: splitTurns(said)}
	if len(c.Turns) == 0 {
		return Conversation{}, false, nil
	}
	// The entry's own output length and body fields are those of its single-turn reading.
	if p, ok, err := decodePrompt(raw); err == nil && ok {
		c.Extra = p.Extra
		if single := p.MaxTokens; single > 0 && hasMaxTokens(raw) {
			for i := range c.Turns {
				c.Turns[i].MaxTokens = single
			}
		}
	}
	c.ID = conversationID(e.ID)
	return c, true, nil
}

// speakerRole maps a ShareGPT speaker or an OpenAI role to user, system, tool (a tool's
// result, "tool" or the older "function") or reply.
func speakerRole(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "human", "user":
		return "user"
	case "system":
		return "system"
	case "tool", "function":
		return "tool"
	}
	return "reply"
}

// splitTurns groups what was said into user turns, cutting at the first empty user turn or
// content that is not text. A turn's output length is its first reply with text: an
// assistant message that only calls tools has none, and tool results are not replies.
func splitTurns(said []speech) []Turn {
	var turns []Turn
	var pending []loadgen.Message
	for _, s := range said {
		if !s.ok {
			break // images and audio: not for a text benchmark
		}
		switch s.role {
		case "system":
			pending = append(pending, loadgen.Message{Role: "system", Content: s.text})
		case "user":
			if strings.TrimSpace(s.text) == "" {
				return turns
			}
			turns = append(turns, Turn{Messages: append(pending, loadgen.Message{Role: "user", Content: s.text})})
			pending = nil
		case "tool":
			// A recorded tool result is no answer: the live loop (or the server) makes its own.
		default:
			if n := len(turns); n > 0 && turns[n-1].MaxTokens == 0 {
				turns[n-1].MaxTokens = EstimateTokens(s.text)
			}
		}
	}
	return turns
}

// hasMaxTokens reports whether the entry sets max_tokens or max_completion_tokens itself.
func hasMaxTokens(raw json.RawMessage) bool {
	var e struct {
		MaxTokens           *int `json:"max_tokens"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
	}
	return json.Unmarshal(raw, &e) == nil && (e.MaxTokens != nil && *e.MaxTokens > 0 ||
		e.MaxCompletionTokens != nil && *e.MaxCompletionTokens > 0)
}

// conversationID is an entry's "id" (a string or number), bounded and printable; "" if none.
func conversationID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) != nil {
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return ""
		}
		id = n.String()
	}
	id = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return r
		}
		return -1
	}, id)
	if len(id) > maxConversationID {
		id = truncateUTF8(id, maxConversationID)
	}
	return id
}

func truncateUTF8(s string, n int) string {
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
