package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
)

// chunkInfo is what a benchmark needs from one chat.completion(.chunk) object.
type chunkInfo struct {
	content          bool   // a choice carries non-empty content, reasoning or text
	output           bool   // a choice carries non-empty answer content or text (not reasoning)
	reasoning        bool   // a choice carries non-empty reasoning_content or reasoning
	text             []byte // the raw JSON string of the last answer content or text seen
	textEscaped      bool   // text holds escapes
	finished         bool   // a choice carries a finish reason
	hasUsage         bool   // a usage object was present
	promptTokens     int    // usage.prompt_tokens, when hasUsage
	completionTokens int    // usage.completion_tokens, when hasUsage
	cachedTokens     int    // usage.prompt_tokens_details.cached_tokens, when hasUsage
	reasoningTokens  int    // usage.completion_tokens_details.reasoning_tokens, when hasUsage
	isError          bool   // an "error" member, or "object": "error"
	errRaw           []byte // the raw "error" value, or the raw "message" of an error object
	serverTiming     []byte // the raw (quoted) "server_timing" string
	model            []byte // the raw (quoted) top-level "model" string
	objectIsError    bool
	message          []byte // raw "message" string at the top level
	// toolCalls are the pieces of tool calls the choices' deltas (or messages) carry, in order:
	// a stream hands out each call in pieces that share its index.
	toolCalls []toolCallPiece
}

// toolCallPiece is one element of a delta's or message's tool_calls: the raw JSON strings of
// whichever of its id, function name and argument fragment it carries.
type toolCallPiece struct {
	index     int  // the "index" member; the element's position when it has none
	hasIndex  bool // an "index" member was read
	position  int  // the element's position in its array
	id        []byte
	name      []byte
	arguments []byte
}

// errBadJSON is returned by scanChunk for input that is not one valid JSON value.
var errBadJSON = errors.New("invalid JSON")

// scanChunk reads the members ragtail needs from a chunk in one pass, validating the JSON
// (what encoding/json.Valid accepts) without allocating: encoding/json's reflection costs
// about ten allocations and several microseconds per chunk, which at tens of thousands of
// tokens per second would take a core from the generator.
//
// Member names match exactly, and when a name repeats in one object the last one counts, as
// when decoding into a map. Values of unexpected types are ignored: a content that is not a
// string is no content, token counts that are not non-negative integers are absent.
func scanChunk(b []byte, out *chunkInfo) error {
	*out = chunkInfo{toolCalls: out.toolCalls[:0]} // the pieces' array is reused
	s := scanner{b: b}
	s.ws()
	if err := s.value(ctxTop, out); err != nil {
		return err
	}
	s.ws()
	if s.i != len(s.b) {
		return errBadJSON
	}
	for i := range out.toolCalls {
		if p := &out.toolCalls[i]; nonEmptyString(p.id) || nonEmptyString(p.name) || nonEmptyString(p.arguments) {
			out.content = true // a tool call's pieces are output tokens, as text is
			break
		}
	}
	if out.objectIsError {
		out.isError = true
		if out.errRaw == nil {
			out.errRaw = out.message
		}
	}
	return nil
}

// Contexts of the scanner: where in the chunk a value sits.
type scanCtx uint8

const (
	ctxOther         scanCtx = iota // skipped
	ctxTop                          // the chunk object
	ctxChoices                      // the choices array
	ctxChoice                       // one choice
	ctxDelta                        // a choice's delta or message
	ctxUsage                        // the usage object
	ctxPromptDetails                // usage.prompt_tokens_details
	ctxOutputDetails                // usage.completion_tokens_details
	ctxToolCalls                    // a delta's or message's tool_calls array
	ctxToolCall                     // one element of it
	ctxFunction                     // its function object
)

type scanner struct {
	b     []byte
	i     int
	depth int
}

// maxDepth bounds nesting, so a hostile chunk cannot exhaust the stack.
const maxDepth = 256

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one value in context c, filling out where the context calls for it.
func (s *scanner) value(c scanCtx, out *chunkInfo) error {
	if s.i >= len(s.b) {
		return errBadJSON
	}
	switch s.b[s.i] {
	case '{':
		return s.object(c, out)
	case '[':
		return s.array(c, out)
	case '"':
		_, _, err := s.str()
		return err
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		_, err := s.num()
		return err
	}
}

func (s *scanner) lit(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return errBadJSON
	}
	s.i += len(word)
	return nil
}

// str scans a string and returns its raw bytes (quotes included) and whether it has escapes.
func (s *scanner) str() (raw []byte, escaped bool, err error) {
	start := s.i
	s.i++ // opening quote
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start:s.i], escaped, nil
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return nil, false, errBadJSON
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return nil, false, errBadJSON
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !isHexDigit(h) {
						return nil, false, errBadJSON
					}
				}
				s.i += 6
			default:
				return nil, false, errBadJSON
			}
		case c < 0x20:
			return nil, false, errBadJSON
		default:
			s.i++
		}
	}
	return nil, false, errBadJSON
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// num scans a number and returns its raw bytes.
func (s *scanner) num() ([]byte, error) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
	default:
		return nil, errBadJSON
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return nil, errBadJSON
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return nil, errBadJSON
		}
	}
	return s.b[start:s.i], nil
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *scanner) array(c scanCtx, out *chunkInfo) error {
	if s.depth++; s.depth > maxDepth {
		return errBadJSON
	}
	defer func() { s.depth-- }()
	elem := ctxOther
	switch c {
	case ctxChoices:
		elem = ctxChoice
	case ctxToolCalls:
		elem = ctxToolCall
	}
	s.i++ // [
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for position := 0; ; position++ {
		s.ws()
		if elem == ctxToolCall && s.i < len(s.b) && s.b[s.i] == '{' {
			if len(out.toolCalls) >= maxToolCallPieces {
				return errTooManyToolCalls
			}
			out.toolCalls = append(out.toolCalls, toolCallPiece{index: position, position: position})
		}
		if err := s.value(elem, out); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return errBadJSON
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return errBadJSON
		}
	}
}

func (s *scanner) object(c scanCtx, out *chunkInfo) error {
	if s.depth++; s.depth > maxDepth {
		return errBadJSON
	}
	defer func() { s.depth-- }()
	s.i++ // {
	var delta struct{ content, reasoningContent, reasoning bool }
	var choice struct{ text, finished bool }
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return errBadJSON
		}
		rawKey, escaped, err := s.str()
		if err != nil {
			return err
		}
		key := rawKey[1 : len(rawKey)-1]
		if escaped {
			var k string
			if json.Unmarshal(rawKey, &k) != nil {
				return errBadJSON
			}
			key = []byte(k)
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errBadJSON
		}
		s.i++
		s.ws()
		if err := s.member(c, string(key), out, &delta.content, &delta.reasoningContent, &delta.reasoning, &choice.text, &choice.finished); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return errBadJSON
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			if c == ctxDelta && (delta.content || delta.reasoningContent || delta.reasoning) {
				out.content = true
			}
			if c == ctxDelta && delta.content {
				out.output = true
			}
			if c == ctxDelta && (delta.reasoningContent || delta.reasoning) {
				out.reasoning = true
			}
			if c == ctxChoice {
				out.content = out.content || choice.text
				out.output = out.output || choice.text
				out.finished = out.finished || choice.finished
			}
			return nil
		default:
			return errBadJSON
		}
	}
}

// member scans the value of member key of an object in context c. The flags are the current
// object's: they take the last value of a repeated name.
func (s *scanner) member(c scanCtx, key string, out *chunkInfo, content, reasoningContent, reasoning, text, finished *bool) error {
	if s.i >= len(s.b) {
		return errBadJSON
	}
	switch c {
	case ctxTop:
		switch key {
		case "choices":
			// a repeated "choices": the last one counts
			out.content, out.finished, out.output, out.reasoning = false, false, false, false
			return s.value(ctxChoices, out)
		case "usage":
			if s.b[s.i] == '{' {
				out.hasUsage, out.promptTokens, out.completionTokens = true, 0, 0
				out.cachedTokens, out.reasoningTokens = 0, 0
				return s.value(ctxUsage, out)
			}
			out.hasUsage = false
			return s.value(ctxOther, out)
		case "error":
			start := s.i
			if err := s.value(ctxOther, out); err != nil {
				return err
			}
			raw := s.b[start:s.i]
			switch {
			case raw[0] == '{' || (raw[0] == '"' && len(raw) > 2):
				out.isError, out.errRaw = true, raw
			default:
				out.isError, out.errRaw = false, nil
			}
			return nil
		case "object":
			return s.stringFlag(&out.objectIsError, isErrorString)
		case "message":
			if s.b[s.i] == '"' {
				raw, _, err := s.str()
				out.message = raw
				return err
			}
			out.message = nil
			return s.value(ctxOther, out)
		case "server_timing":
			if s.b[s.i] == '"' {
				raw, _, err := s.str()
				out.serverTiming = raw
				return err
			}
			out.serverTiming = nil
			return s.value(ctxOther, out)
		case "model":
			if s.b[s.i] == '"' {
				raw, _, err := s.str()
				out.model = raw
				return err
			}
			out.model = nil
			return s.value(ctxOther, out)
		}
	case ctxChoice:
		switch key {
		case "delta", "message":
			return s.value(ctxDelta, out)
		case "text":
			return s.textFlag(text, out)
		case "finish_reason":
			return s.stringFlag(finished, nonEmptyString)
		}
	case ctxDelta:
		switch key {
		case "content":
			return s.textFlag(content, out)
		case "reasoning_content":
			return s.stringFlag(reasoningContent, nonEmptyString)
		case "reasoning":
			return s.stringFlag(reasoning, nonEmptyString)
		case "tool_calls":
			return s.value(ctxToolCalls, out)
		}
	case ctxToolCall:
		p := &out.toolCalls[len(out.toolCalls)-1]
		switch key {
		case "index":
			n := -1
			if c := s.b[s.i]; c == '-' || c >= '0' && c <= '9' {
				raw, err := s.num()
				if err != nil {
					return err
				}
				if v, err := strconv.Atoi(string(raw)); err == nil && v >= 0 {
					n = v
				}
			} else if err := s.value(ctxOther, out); err != nil {
				return err
			}
			if n < 0 {
				return errBadToolCallIndex
			}
			p.index, p.hasIndex = n, true
			return nil
		case "id":
			return s.rawString(&p.id)
		case "function":
			return s.value(ctxFunction, out)
		}
	case ctxFunction:
		p := &out.toolCalls[len(out.toolCalls)-1]
		switch key {
		case "name":
			return s.rawString(&p.name)
		case "arguments":
			return s.rawString(&p.arguments)
		}
	case ctxUsage:
		switch key {
		case "prompt_tokens":
			return s.count(&out.promptTokens)
		case "completion_tokens":
			return s.count(&out.completionTokens)
		case "prompt_tokens_details":
			out.cachedTokens = 0
			return s.value(ctxPromptDetails, out)
		case "completion_tokens_details":
			out.reasoningTokens = 0
			return s.value(ctxOutputDetails, out)
		}
	case ctxPromptDetails:
		if key == "cached_tokens" {
			return s.count(&out.cachedTokens)
		}
	case ctxOutputDetails:
		if key == "reasoning_tokens" {
			return s.count(&out.reasoningTokens)
		}
	}
	return s.value(ctxOther, out)
}

// maxToolCallPieces bounds the tool call pieces one chunk may carry.
const maxToolCallPieces = 64

// Errors of a chunk's tool calls.
var (
	errTooManyToolCalls = errors.New("more than 64 tool calls in one chunk")
	errBadToolCallIndex = errors.New("a tool call's index is not a non-negative integer")
)

// rawString scans a value into *raw when it is a string (quotes included), nil otherwise.
func (s *scanner) rawString(raw *[]byte) error {
	if s.b[s.i] != '"' {
		*raw = nil
		return s.value(ctxOther, &chunkInfo{})
	}
	r, _, err := s.str()
	*raw = r
	return err
}

// stringFlag scans a value and sets *flag to test(raw) for a string, false for anything else.
func (s *scanner) stringFlag(flag *bool, test func(raw []byte) bool) error {
	if s.b[s.i] != '"' {
		*flag = false
		return s.value(ctxOther, &chunkInfo{})
	}
	raw, _, err := s.str()
	*flag = err == nil && test(raw)
	return err
}

// textFlag scans answer content (a delta's or message's content, a choice's text): *flag is
// whether it is a non-empty string, and a non-empty string is kept as out.text.
func (s *scanner) textFlag(flag *bool, out *chunkInfo) error {
	if s.b[s.i] != '"' {
		*flag = false
		return s.value(ctxOther, &chunkInfo{})
	}
	raw, escaped, err := s.str()
	*flag = err == nil && nonEmptyString(raw)
	if *flag {
		out.text, out.textEscaped = raw, escaped
	}
	return err
}

// appendText appends the answer text of the chunk to dst, unescaped, up to limit bytes in all.
func (ch *chunkInfo) appendText(dst []byte, limit int) []byte {
	if !ch.output || len(ch.text) < 2 || len(dst) >= limit {
		return dst
	}
	if !ch.textEscaped {
		return appendLimited(dst, ch.text[1:len(ch.text)-1], limit)
	}
	var str string
	if json.Unmarshal(ch.text, &str) != nil {
		return dst
	}
	return appendLimited(dst, []byte(str), limit)
}

func appendLimited(dst, b []byte, limit int) []byte {
	if room := limit - len(dst); len(b) > room {
		for room > 0 && b[room]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			room--
		}
		b = b[:room]
	}
	return append(dst, b...)
}

func nonEmptyString(raw []byte) bool { return len(raw) > 2 }

// isErrorString reports whether a raw JSON string is "error".
func isErrorString(raw []byte) bool {
	if string(raw) == `"error"` {
		return true
	}
	if len(raw) < 8 || bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	var str string
	return json.Unmarshal(raw, &str) == nil && str == "error"
}

// count scans a value into *n when it is a non-negative integer that fits, and 0 otherwise.
func (s *scanner) count(n *int) error {
	*n = 0
	c := s.b[s.i]
	if c != '-' && (c < '0' || c > '9') {
		return s.value(ctxOther, &chunkInfo{})
	}
	raw, err := s.num()
	if err != nil {
		return err
	}
	f, perr := strconv.ParseFloat(string(raw), 64)
	if perr == nil && f >= 0 && f <= 1<<53 && f == math.Trunc(f) {
		*n = int(f)
	}
	return nil
}
