package llmsim

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	mathrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

// MaxToolCalls bounds the calls a ToolCallLaw may ask of one question.
const MaxToolCalls = 32

// DefaultToolCallLaw is the law of an engine given none: each question needs one search, and
// each search is the last with probability one half, up to five (a mean of 1.94 searches).
var DefaultToolCallLaw = ToolCallLaw{kind: lawGeometric, p: 0.5, max: 5}

// ToolCallLawUsage describes the syntax of ParseToolCallLaw, for flag usage.
const ToolCallLawUsage = "how many tool calls (searches) a question needs before the model answers, drawn from the seed and\n" +
	"the question: fixed:N, uniform:A,B (A to B, each as likely), geometric:P[,max=M] (1 + the failures before a\n" +
	"success of probability P, at most M, default 32), none (fixed:0); at most 32"

const (
	lawFixed     = "fixed"
	lawUniform   = "uniform"
	lawGeometric = "geometric"
)

// ToolCallLaw is the law of how many tool calls the simulated model makes for a question before
// it answers in text. The number is drawn from the engine's seed and the question (the last user
// message), so a question always needs the same number of calls on an engine. The zero value is
// DefaultToolCallLaw.
type ToolCallLaw struct {
	kind string
	n    int     // fixed: the count; uniform: the lowest count
	hi   int     // uniform: the highest count
	p    float64 // geometric: the probability that a search is the last
	max  int     // geometric: the highest count
}

// ParseToolCallLaw parses a law in the syntax of ToolCallLawUsage: "fixed:2", "uniform:1,3",
// "geometric:0.5,max=5" or "none".
func ParseToolCallLaw(s string) (ToolCallLaw, error) {
	kind, args, _ := strings.Cut(strings.TrimSpace(s), ":")
	bad := func(format string, a ...any) (ToolCallLaw, error) {
		return ToolCallLaw{}, fmt.Errorf("%w: tool-call law %.64q: %s", rag.ErrInvalidRequest, s, fmt.Sprintf(format, a...))
	}
	count := func(v string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		return n, err == nil && n >= 0 && n <= MaxToolCalls
	}
	parts := strings.Split(args, ",")
	switch kind {
	case "none":
		if args != "" {
			return bad("none takes no arguments")
		}
		return ToolCallLaw{kind: lawFixed}, nil
	case lawFixed:
		n, ok := count(args)
		if !ok || len(parts) != 1 {
			return bad("want fixed:N with N from 0 to %d", MaxToolCalls)
		}
		return ToolCallLaw{kind: lawFixed, n: n}, nil
	case lawUniform:
		if len(parts) != 2 {
			return bad("want uniform:A,B")
		}
		lo, okLo := count(parts[0])
		hi, okHi := count(parts[1])
		if !okLo || !okHi || lo > hi {
			return bad("want uniform:A,B with 0 <= A <= B <= %d", MaxToolCalls)
		}
		return ToolCallLaw{kind: lawUniform, n: lo, hi: hi}, nil
	case lawGeometric:
		p, err := strconv.ParseFloat(strings.TrimSpace(parts[0]), 64)
		if err != nil || !(p > 0 && p <= 1) {
			return bad("want geometric:P with 0 < P <= 1, the chance that a search is the last")
		}
		l := ToolCallLaw{kind: lawGeometric, p: p, max: MaxToolCalls}
		for _, opt := range parts[1:] {
			v, ok := strings.CutPrefix(strings.TrimSpace(opt), "max=")
			m, okM := count(v)
			if !ok || !okM || m < 1 {
				return bad("want max=M with M from 1 to %d after the probability", MaxToolCalls)
			}
			l.max = m
		}
		return l, nil
	}
	return bad("want fixed:N, uniform:A,B, geometric:P[,max=M] or none")
}

func (l ToolCallLaw) orDefault() ToolCallLaw {
	if l.kind == "" {
		return DefaultToolCallLaw
	}
	return l
}

// String returns the law in the syntax ParseToolCallLaw reads; "" for the zero value, which
// stands for DefaultToolCallLaw.
func (l ToolCallLaw) String() string {
	switch l.kind {
	case "":
		return ""
	case lawFixed:
		return "fixed:" + strconv.Itoa(l.n)
	case lawUniform:
		return fmt.Sprintf("uniform:%d,%d", l.n, l.hi)
	}
	return fmt.Sprintf("geometric:%s,max=%d", strconv.FormatFloat(l.p, 'g', -1, 64), l.max)
}

// Set parses v into l; with String it makes a ToolCallLaw a flag.Value.
func (l *ToolCallLaw) Set(v string) error {
	parsed, err := ParseToolCallLaw(v)
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// Max returns the most calls the law can ask for.
func (l ToolCallLaw) Max() int {
	l = l.orDefault()
	switch l.kind {
	case lawFixed:
		return l.n
	case lawUniform:
		return l.hi
	}
	return l.max
}

// Prob returns the probability that a question needs k calls.
func (l ToolCallLaw) Prob(k int) float64 {
	l = l.orDefault()
	switch l.kind {
	case lawFixed:
		if k == l.n {
			return 1
		}
		return 0
	case lawUniform:
		if k < l.n || k > l.hi {
			return 0
		}
		return 1 / float64(l.hi-l.n+1)
	}
	switch {
	case k < 1 || k > l.max:
		return 0
	case k == l.max:
		return math.Pow(1-l.p, float64(k-1)) // the tail above max, folded onto it
	}
	return l.p * math.Pow(1-l.p, float64(k-1))
}

// Calls returns how many calls question needs on an engine of the given seed: the law's
// quantile at a uniform number drawn from a hash of both.
func (l ToolCallLaw) Calls(seed uint64, question string) int {
	l = l.orDefault()
	h := fnv.New64a()
	_, _ = h.Write([]byte(strings.TrimSpace(question)))
	u := mathrand.New(mathrand.NewPCG(h.Sum64()^seed, seed^0x6a09e667f3bcc908)).Float64()
	switch l.kind {
	case lawFixed:
		return l.n
	case lawUniform:
		return l.n + int(u*float64(l.hi-l.n+1))
	}
	if l.p >= 1 {
		return 1
	}
	// Inverse of the geometric CDF: P(K <= k) = 1 - (1-p)^k on 1, 2, ...
	k := 1 + math.Floor(math.Log1p(-u)/math.Log1p(-l.p))
	return int(min(k, float64(l.max)))
}

// maxQueryBytes bounds the question text a simulated tool call quotes in its arguments.
const maxQueryBytes = 256

// maxArgumentFields bounds the required fields a simulated tool call fills in.
const maxArgumentFields = 16

// toolPlan is what a sequence that calls tools produces after its reasoning: one token after
// another, each a piece of a call or a part of one not delivered yet (the name's first tokens).
type toolPlan struct {
	tokens []toolToken
	next   int
}

// toolToken is one output token of a tool call. A token with deliver set completes piece, the
// part of the call the stream hands out; the others are held until the next such token.
type toolToken struct {
	piece   rag.ToolCallDelta
	deliver bool
}

// nextToken returns the plan's next token; past the end it returns a token delivering nothing.
func (t *toolPlan) nextToken() toolToken {
	if t.next >= len(t.tokens) {
		return toolToken{}
	}
	tok := t.tokens[t.next]
	t.next++
	return tok
}

// planToolCalls decides whether req is answered with tool calls and returns the tokens of those
// calls, or nil for a text answer. The model calls a tool when the request offers tools,
// tool_choice is not "none", and the conversation holds fewer tool answers after the question
// than the law asks of the question; tool_choice "required" (or a named tool) forces a call.
// The tool called is the named one, else the first. Two calls go out at once when parallel calls
// are allowed and the law asks for two or more further calls.
func (e *Engine) planToolCalls(req rag.GenRequest, rc requestConfig) (*toolPlan, error) {
	if len(req.Tools) == 0 || req.ToolChoice == "none" {
		return nil, nil
	}
	tool := req.Tools[0]
	if rc.tool != "" {
		i := slices.IndexFunc(req.Tools, func(t rag.Tool) bool { return t.Name == rc.tool })
		if i < 0 {
			return nil, &openai.HTTPError{Status: 400, Type: "invalid_request_error", Param: "tool_choice", Err: rag.ErrInvalidRequest,
				Message: fmt.Sprintf("tool_choice names the function %.64q, which is not one of the request's tools", rc.tool)}
		}
		tool = req.Tools[i]
	}
	question, answered := questionAndAnswers(req.Messages)
	remaining := e.ToolCalls().Calls(e.cfg.seed, question) - answered
	forced := req.ToolChoice == "required" || rc.tool != ""
	if remaining <= 0 && !forced {
		return nil, nil
	}
	calls := 1
	if rc.parallel && remaining >= 2 {
		calls = 2
	}
	plan := &toolPlan{}
	for i := range calls {
		args := toolArguments(tool, question, answered+i+1)
		header := rag.ToolCallDelta{Index: i, ID: newToolCallID(), Name: tool.Name}
		for range max(1, rag.CountTokens(tool.Name)) - 1 {
			plan.tokens = append(plan.tokens, toolToken{})
		}
		plan.tokens = append(plan.tokens, toolToken{piece: header, deliver: true})
		for _, p := range tokenPieces(args) {
			plan.tokens = append(plan.tokens, toolToken{piece: rag.ToolCallDelta{Index: i, Arguments: p}, deliver: true})
		}
	}
	return plan, nil
}

// questionAndAnswers returns the last user message's content and the number of tool messages
// after it: the searches already done for the question.
func questionAndAnswers(msgs []rag.Message) (question string, answered int) {
	for i := len(msgs) - 1; i >= 0; i-- {
		switch msgs[i].Role {
		case "user":
			return msgs[i].Content, answered
		case "tool":
			answered++
		}
	}
	return "", answered
}

// newToolCallID returns a fresh call id in vLLM's form, "chatcmpl-tool-" and 32 hex digits.
func newToolCallID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-tool-" + hex.EncodeToString(b[:])
}

// hopQuery is the text a call at hop (from 1) quotes: the question, its white space folded and
// cut to maxQueryBytes, with " (hop N)" after it from the second hop on.
func hopQuery(question string, hop int) string {
	q := strings.Join(strings.Fields(question), " ")
	if len(q) > maxQueryBytes {
		cut := maxQueryBytes
		for cut > 0 && !utf8.RuneStart(q[cut]) {
			cut--
		}
		q = strings.TrimSpace(q[:cut])
	}
	if q == "" {
		q = "the question"
	}
	if hop > 1 {
		q += " (hop " + strconv.Itoa(hop) + ")"
	}
	return q
}

// toolArguments returns the arguments of a call of t at hop, as JSON text in the form vLLM's
// tool parsers stream (", " and ": " separators): every required parameter (at most
// maxArgumentFields) gets a value of its type, strings the question as hopQuery quotes it,
// numbers the hop, booleans true, arrays and objects empty ones. Parameters that are not a JSON
// schema object give "{}".
func toolArguments(t rag.Tool, question string, hop int) string {
	var schema struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal([]byte(t.Parameters), &schema) != nil {
		return "{}"
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, name := range schema.Required[:min(len(schema.Required), maxArgumentFields)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(jsonText(name))
		b.WriteString(": ")
		switch schemaType(schema.Properties[name].Type) {
		case "integer", "number":
			b.WriteString(strconv.Itoa(hop))
		case "boolean":
			b.WriteString("true")
		case "array":
			b.WriteString("[]")
		case "object":
			b.WriteString("{}")
		case "null":
			b.WriteString("null")
		default:
			b.Write(jsonText(hopQuery(question, hop)))
		}
	}
	b.WriteByte('}')
	return b.String()
}

// schemaType returns a JSON schema's type: a string, or the first non-null one of a list.
func schemaType(raw json.RawMessage) string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		for _, t := range list {
			if t != "null" {
				return t
			}
		}
	}
	return ""
}

// jsonText encodes s as a JSON string without escaping HTML characters, as Python's json.dumps
// writes it.
func jsonText(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// tokenPieces cuts text into the tokens rag.CountTokens counts: a word's pieces of at most
// runesPerToken runes and each punctuation mark, each with the white space before it (the last
// with the white space after it too). The pieces join to text, and there are exactly
// rag.CountTokens(text) of them.
func tokenPieces(text string) []string {
	var pieces []string
	start, runes := 0, 0 // start of the piece being read; runes: its word runes so far
	inWord := false
	for i, r := range text {
		word := unicode.IsLetter(r) || unicode.IsDigit(r) || r == '\'' || r == '-' || r == '_'
		switch {
		case word && inWord && runes < runesPerToken:
			runes++
			continue
		case word && inWord:
			pieces = append(pieces, text[start:i])
			start, runes = i, 1
			continue
		case inWord:
			// the word ended: its last piece ends here, the white space or mark after it
			// begins the next piece
			pieces = append(pieces, text[start:i])
			start, inWord = i, false
		}
		switch {
		case word:
			inWord, runes = true, 1
		case !unicode.IsSpace(r):
			_, size := utf8.DecodeRuneInString(text[i:]) // 1 for a byte that is not UTF-8
			pieces = append(pieces, text[start:i+size])
			start = i + size
		}
	}
	switch {
	case inWord:
		pieces = append(pieces, text[start:])
	case start < len(text) && len(pieces) > 0:
		pieces[len(pieces)-1] += text[start:]
	}
	return pieces
}

// templated returns the messages of req as the engine's chat template lays them out, for the
// prompt's length and its prefix-cache blocks: the tools' definitions first (as vLLM's
// templates render them, whatever tool_choice says), then every message with an assistant's tool
// calls after its text. A request without tools or tool calls is its messages unchanged.
func templated(req rag.GenRequest) []rag.Message {
	calls := false
	for _, m := range req.Messages {
		calls = calls || len(m.ToolCalls) > 0
	}
	if len(req.Tools) == 0 && !calls {
		return req.Messages
	}
	out := make([]rag.Message, 0, len(req.Messages)+1)
	if len(req.Tools) > 0 {
		var b strings.Builder
		for _, t := range req.Tools {
			b.WriteString(`{"type": "function", "function": {"name": `)
			b.Write(jsonText(t.Name))
			b.WriteString(`, "description": `)
			b.Write(jsonText(t.Description))
			b.WriteString(`, "parameters": `)
			b.WriteString(cmp.Or(t.Parameters, "{}"))
			b.WriteString("}}\n")
		}
		out = append(out, rag.Message{Role: "tools", Content: b.String()})
	}
	for _, m := range req.Messages {
		if len(m.ToolCalls) > 0 {
			var b strings.Builder
			b.WriteString(m.Content)
			for _, c := range m.ToolCalls {
				b.WriteString("\n<tool_call>\n{\"name\": ")
				b.Write(jsonText(c.Name))
				b.WriteString(", \"arguments\": ")
				b.WriteString(cmp.Or(c.Arguments, "{}"))
				b.WriteString("}\n</tool_call>")
			}
			m.Content = b.String()
			m.ToolCalls = nil
		}
		out = append(out, m)
	}
	return out
}
