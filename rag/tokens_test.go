package rag_test

import (
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/ragtail/ragtail/rag"
)

func TestWords(t *testing.T) {
	t.Parallel()
	got := rag.Words("The KV-cache's size: 16 blocks, paged.")
	want := []string{"The", "KV-cache's", "size", ":", "16", "blocks", ",", "paged", "."}
	if !slices.Equal(got, want) {
		t.Errorf("Words = %q, want %q", got, want)
	}
}

func TestCountTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"empty", "", 0},
		{"short words", "a cat sat", 3},
		{"long word", "internationalization", 4}, // 20 runes: 1 + 19/6
		{"punctuation", "hi, you.", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rag.CountTokens(tt.in); got != tt.want {
				t.Errorf("CountTokens(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
	// English prose comes out near the usual 1.3 tokens per word of BPE tokenizers.
	prose := "Retrieval augmented generation systems search a vector index for passages related to the question, " +
		"fetch their text from a document store, and hand them to a language model that writes the answer token by token."
	words := 0
	for _, w := range rag.Words(prose) {
		if len(w) > 1 || w[0] >= 'A' {
			words++
		}
	}
	ratio := float64(rag.CountTokens(prose)) / float64(words)
	if ratio < 1.1 || ratio > 1.6 {
		t.Errorf("%.2f tokens per word on prose, want about 1.3", ratio)
	}
}

// TestCountTokensMatchesWords checks that the allocation-free count agrees with counting the
// words Words returns, on text with every kind of rune the splitter tells apart.
func TestCountTokensMatchesWords(t *testing.T) {
	for _, in := range []string{
		"", "   ", "a", "Hello, world!", "KV-cache's state_of_the_art tokenization: 1234567890123.",
		"naïve café — über straße…", "日本語のテキスト、句読点。", "tabs\tand\nnewlines\r\n  end",
		"supercalifragilisticexpialidocious antidisestablishmentarianism",
	} {
		want := 0
		for _, w := range rag.Words(in) {
			want += 1 + (utf8.RuneCountInString(w)-1)/6
		}
		if got := rag.CountTokens(in); got != want {
			t.Errorf("CountTokens(%q) = %d, counting Words gives %d", in, got, want)
		}
	}
}
