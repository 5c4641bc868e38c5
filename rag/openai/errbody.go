package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxErrorBody bounds what ReadError reads of an error answer.
const MaxErrorBody = 64 << 10

// ErrorAnswer is an HTTP error answer of an OpenAI-compatible server, as ReadError reads it.
type ErrorAnswer struct {
	Status     int
	Message    string        // the server's message (ServerMessage), bounded and never empty
	RetryAfter time.Duration // from a Retry-After header in whole seconds; 0 if none
}

// ReadError reads the error answer resp, at most MaxErrorBody bytes of its body, and closes
// the body. Clients of OpenAI-compatible servers (rag/llm, rag/embed) read every error answer
// with it, whatever shape the server gave its body; the message is cut to limit bytes.
func ReadError(resp *http.Response, limit int) ErrorAnswer {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	_ = resp.Body.Close()
	a := ErrorAnswer{Status: resp.StatusCode, Message: ServerMessage(body, limit)}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		a.RetryAfter = time.Duration(s) * time.Second
	}
	return a
}

// ServerMessage extracts the error message from the error bodies OpenAI-compatible servers send,
// cut to at most limit bytes (at a rune boundary, "..." appended): OpenAI's and vLLM's
// {"error":{"message":...}}, Ollama's, TEI's and TGI's {"error":"..."}, vLLM's older top-level
// {"object":"error","message":...}, FastAPI's {"detail":...}; otherwise the start of the body
// with its whitespace collapsed (and its tags stripped when it is an HTML page, a proxy's 502).
// The result is safe to put in an error, a log line or a span: it is bounded and never empty.
func ServerMessage(body []byte, limit int) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		if len(e.Error) > 0 {
			var s string
			if json.Unmarshal(e.Error, &s) == nil && s != "" {
				return Truncate(s, limit)
			}
			var o struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(e.Error, &o) == nil && o.Message != "" {
				return Truncate(o.Message, limit)
			}
		}
		if e.Message != "" {
			return Truncate(e.Message, limit)
		}
		if e.Detail != nil {
			b, _ := json.Marshal(e.Detail)
			return Truncate(string(b), limit)
		}
	}
	text := string(body)
	if strings.HasPrefix(strings.TrimSpace(text), "<") {
		text = stripTags(text)
	}
	if s := strings.Join(strings.Fields(text), " "); s != "" {
		return Truncate(s, limit)
	}
	return "no error message"
}

// Truncate cuts s to at most limit bytes at a rune boundary, appending "..." when it cut.
func Truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := max(limit, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// stripTags drops the markup of an HTML error page, keeping its text.
func stripTags(html string) string {
	var b strings.Builder
	inTag := false
	for _, r := range html {
		switch {
		case r == '<':
			inTag = true
			b.WriteByte(' ')
		case r == '>':
			inTag = false
		case !inTag:
			b.WriteRune(r)
		}
	}
	return b.String()
}
