package llmsim

import (
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ragtail/ragtail/rag"
)

// runesPerToken matches rag.CountTokens: a word of r runes counts as ceil(r/6) tokens, so the
// engine emits it as pieces of at most six runes and the text it produces counts, with
// rag.CountTokens, exactly as many tokens as the engine reports in its usage.
const runesPerToken = 6

// continueProb is the chance that the next word is the one following the current word in the
// context rather than a random jump: answers read as runs of phrases taken from the context.
const continueProb = 0.8

// fallbackWords is the vocabulary of a prompt without a single word.
var fallbackWords = strings.Fields("the answer depends on the context given in the question")

// wordSource produces the output tokens of one sequence: words of the context (the system
// messages, where the RAG pipeline puts the retrieved chunks, and the tool messages, where an
// agent's searches put them; else the whole prompt), walked
// in order with random jumps, each word cut into pieces of runesPerToken runes. It is owned
// by the engine loop.
type wordSource struct {
	words   []string
	rng     *rand.Rand
	pos     int
	rest    string // the part of the current word not emitted yet
	started bool
}

// newWordSource seeds the walk with a hash of the prompt, the engine seed and, unless the
// request asks for greedy decoding (temperature 0), its id: the same greedy request gives the
// same answer, as a real model would.
func newWordSource(req rag.GenRequest, seed uint64) *wordSource {
	h := fnv.New64a()
	var context strings.Builder
	for _, m := range req.Messages {
		_, _ = h.Write([]byte(m.Role))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(m.Content))
		_, _ = h.Write([]byte{0})
		if m.Role == "system" || m.Role == "developer" || m.Role == "tool" {
			context.WriteString(m.Content)
			context.WriteByte('\n')
		}
	}
	if req.Temperature != 0 {
		_, _ = h.Write([]byte(req.ID))
		_, _ = h.Write([]byte(strconv.FormatFloat(req.Temperature, 'g', -1, 64)))
	}
	words := wordsOf(context.String())
	if len(words) == 0 {
		var all strings.Builder
		for _, m := range req.Messages {
			all.WriteString(m.Content)
			all.WriteByte('\n')
		}
		words = wordsOf(all.String())
	}
	if len(words) == 0 {
		words = fallbackWords
	}
	sum := h.Sum64()
	return &wordSource{words: words, rng: rand.New(rand.NewPCG(sum^seed, seed+0x9e3779b97f4a7c15))}
}

// wordsOf returns the words of text, leaving out punctuation marks.
func wordsOf(text string) []string {
	all := rag.Words(text)
	words := all[:0]
	for _, w := range all {
		r, _ := utf8.DecodeRuneInString(w)
		if unicode.IsLetter(r) || unicode.IsDigit(r) || utf8.RuneCountInString(w) > 1 {
			words = append(words, w)
		}
	}
	return words
}

// next appends the next token's text to dst.
func (w *wordSource) next(dst []byte) []byte {
	if w.rest == "" {
		if w.started && w.rng.Float64() < continueProb {
			w.pos = (w.pos + 1) % len(w.words)
		} else {
			w.pos = w.rng.IntN(len(w.words))
		}
		if w.started {
			dst = append(dst, ' ')
		}
		w.started = true
		w.rest = w.words[w.pos]
	}
	i, n := 0, 0
	for i < len(w.rest) && n < runesPerToken {
		_, size := utf8.DecodeRuneInString(w.rest[i:])
		i += size
		n++
	}
	dst = append(dst, w.rest[:i]...)
	w.rest = w.rest[i:]
	return dst
}

// startAnswer makes the next token begin a new word without a leading space: the answer after
// the reasoning is a text of its own.
func (w *wordSource) startAnswer() { w.started, w.rest = false, "" }
