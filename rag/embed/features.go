package embed

import (
	"unicode"
	"unicode/utf8"
)

// FNV-1a over the case-folded runes of a word, then a finaliser, so that hashes are stable across
// processes and platforms (hash/maphash is seeded per process) and cost no allocation.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashFold(w string, seed uint64) uint64 {
	x := uint64(fnvOffset) ^ seed
	for _, r := range w {
		r = foldRune(r)
		if r < utf8.RuneSelf {
			x = (x ^ uint64(r)) * fnvPrime
			continue
		}
		var buf [utf8.UTFMax]byte
		n := utf8.EncodeRune(buf[:], r)
		for _, b := range buf[:n] {
			x = (x ^ uint64(b)) * fnvPrime
		}
	}
	return mix(x)
}

func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	return unicode.ToLower(r)
}

// mix is the splitmix64 finaliser: every output bit depends on every input bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func rotl(x uint64, k uint) uint64 { return x<<k | x>>(64-k) }

// isWord reports whether a token from rag.Words is a word (it has a letter or digit) rather than
// a punctuation mark or a lone hyphen.
func isWord(w string) bool {
	for _, r := range w {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return true
		}
	}
	return false
}

// stopWords holds the hashes (seed 0) of common English function words.
var stopWords = func() map[uint64]bool {
	words := []string{
		"a", "about", "above", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at",
		"be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
		"can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from",
		"further", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how",
		"i", "if", "in", "into", "is", "it", "it's", "its", "itself", "just", "me", "more", "most",
		"my", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our",
		"ours", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that",
		"the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those",
		"through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when",
		"where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
		"yours",
	}
	m := make(map[uint64]bool, len(words))
	for _, w := range words {
		m[hashFold(w, 0)] = true
	}
	return m
}()
