package rag

import (
	"strings"
	"unicode"
)

// CountTokens approximates how many tokens a BPE tokenizer (such as Llama 3's or OpenAI's) would
// produce for text: one token per word of up to six characters (common words are single tokens
// in 100k-entry vocabularies), one more per further six characters, and one per punctuation mark. English prose comes out at about 1.3 tokens per word,
// the usual figure. The service uses it wherever a real tokenizer would be used (prompt length,
// KV-cache size, usage), so counts are consistent across components.
func CountTokens(text string) int {
	// The same count as counting 1 + (runes-1)/6 tokens for each of Words(text), without building the words: this
	// runs on every request.
	n, runes := 0, 0 // runes: of the word being read
	for _, r := range text {
		if isWordRune(r) {
			runes++
			continue
		}
		if runes > 0 {
			n += 1 + (runes-1)/6
			runes = 0
		}
		if !unicode.IsSpace(r) {
			n++ // a punctuation mark is a word of one rune
		}
	}
	if runes > 0 {
		n += 1 + (runes-1)/6
	}
	return n
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '\'' || r == '-' || r == '_'
}

// Words splits text into words and punctuation marks, the units CountTokens counts and the
// simulated engine emits.
func Words(text string) []string {
	var out []string
	start := -1
	for i, r := range text {
		switch {
		case isWordRune(r):
			if start < 0 {
				start = i
			}
		default:
			if start >= 0 {
				out = append(out, text[start:i])
				start = -1
			}
			if !unicode.IsSpace(r) {
				out = append(out, string(r))
			}
		}
	}
	if start >= 0 {
		out = append(out, text[start:])
	}
	return out
}

// PromptTokens counts the tokens of a chat prompt as chat templates do: the content of every
// message plus a few tokens of framing per message.
func PromptTokens(msgs []Message) int {
	const perMessage = 4 // role and delimiters in a chat template
	n := 1
	for _, m := range msgs {
		n += perMessage + CountTokens(m.Content)
	}
	return n
}

// Normalize lower-cases text and folds runs of white space, the form embedders and hashes use.
func Normalize(text string) string {
	return strings.Join(strings.Fields(strings.ToLower(text)), " ")
}
