package rag

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// CountTokens approximates how many tokens a BPE tokenizer (such as Llama 3's or OpenAI's) would
// produce for text: one token per word of up to six characters (common words are single tokens
// in 100k-entry vocabularies), one more per further six characters, and one per punctuation mark. English prose comes out at about 1.3 tokens per word,
// the usual figure. The service uses it wherever a real tokenizer would be used (prompt length,
// KV-cache size, usage), so counts are consistent across components.
func CountTokens(text string) int {
	n := 0
	for _, w := range Words(text) {
		n += wordTokens(w)
	}
	return n
}

func wordTokens(w string) int {
	r := utf8.RuneCountInString(w)
	return 1 + (r-1)/6
}

// Words splits text into words and punctuation marks, the units CountTokens counts and the
// simulated engine emits.
func Words(text string) []string {
	var out []string
	start := -1
	for i, r := range text {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '\'' || r == '-' || r == '_':
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
