package corpus_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
)

// FuzzSplit feeds arbitrary file contents to Split, the parser of ingested files, and checks what
// every chunking must keep: chunks are contiguous runs of the text's words that cover all of them
// in order, each moves forward, leaves no gap, overlaps its predecessor by at most the overlap,
// reports its own token count, and stays within the token budget unless it is a single word
// longer than that.
func FuzzSplit(f *testing.F) {
	f.Add("# Title\n\nFirst paragraph. Second sentence!\n\n- a list\n- of items\n", 16, 4)
	f.Add(strings.Repeat("word ", 300), 8, 0)
	f.Add("supercalifragilisticexpialidocious antidisestablishmentarianism tiny", 8, 7)
	f.Add("a\u00a0b\u2003c\td\r\ne", 10, 3)
	f.Add("", 64, 16)
	f.Fuzz(func(t *testing.T, text string, tokens, overlap int) {
		if tokens < 8 || tokens > 512 || overlap < 1 || overlap >= tokens {
			return // 0 selects the defaults, which the table tests cover
		}
		o := corpus.ChunkOptions{Tokens: tokens, Overlap: overlap}
		chunks := corpus.Split("doc", "Doc", text, o)
		all := strings.Fields(text)
		if len(all) == 0 {
			if len(chunks) != 0 {
				t.Fatalf("blank text gave %d chunks", len(chunks))
			}
			return
		}
		// Words may repeat, so a chunk's position is ambiguous; track every start each chunk
		// can have given where the previous one can start.
		starts := map[int]bool{}
		prevLen := 0
		for i, c := range chunks {
			if c.Tokens != rag.CountTokens(c.Text) {
				t.Fatalf("chunk %d reports %d tokens, its text has %d", i, c.Tokens, rag.CountTokens(c.Text))
			}
			f := strings.Fields(c.Text)
			if len(f) == 0 {
				t.Fatalf("chunk %d is blank", i)
			}
			if c.Tokens > tokens && len(f) > 1 {
				t.Fatalf("chunk %d has %d tokens in %d words, budget %d", i, c.Tokens, len(f), tokens)
			}
			next := map[int]bool{}
			for s := 0; s+len(f) <= len(all); s++ {
				if !slices.Equal(all[s:s+len(f)], f) {
					continue
				}
				if i == 0 {
					next[s] = s == 0
					continue
				}
				for p := range starts {
					// After the previous start, no gap, and an overlap within the limit.
					if s > p && s <= p+prevLen && rag.CountTokens(strings.Join(all[s:p+prevLen], " ")) <= overlap {
						next[s] = true
					}
				}
			}
			for s, ok := range next {
				if !ok {
					delete(next, s)
				}
			}
			if len(next) == 0 {
				t.Fatalf("chunk %d cannot be placed: it must start after the previous chunk starts, leave no gap and overlap it by at most %d tokens", i, overlap)
			}
			starts, prevLen = next, len(f)
		}
		if !starts[len(all)-prevLen] {
			t.Fatalf("the last chunk does not end at the last word")
		}
	})
}
