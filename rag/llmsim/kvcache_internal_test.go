package llmsim

import (
	"slices"
	"testing"

	"github.com/ragtail/ragtail/rag"
)

// The prefix cache's tokens are the ones rag.PromptTokens counts, so a prompt has exactly
// PromptTokens/blockSize full blocks; and a prompt extended by more messages keeps the hashes
// of the full blocks before the extension.
func FuzzPromptBlockHashes(f *testing.F) {
	f.Add("You answer from the context.", "Why are KV-cache blocks fixed-size?", "Because paging needs fixed pages.", 16)
	f.Add("", "", "", 1)
	f.Add("Ünïcödé wörds, supercalifragilistic and punctuation!?", "a-b_c'd ... ???", "\x00\xff", 7)
	f.Fuzz(func(t *testing.T, system, user, more string, blockSize int) {
		if blockSize < 1 || blockSize > 256 {
			return
		}
		msgs := []rag.Message{{Role: "system", Content: system}, {Role: "user", Content: user}}
		hashes := promptBlockHashes(msgs, blockSize)
		if want := rag.PromptTokens(msgs) / blockSize; len(hashes) != want {
			t.Fatalf("%d block hashes, want PromptTokens %d / %d = %d", len(hashes), rag.PromptTokens(msgs), blockSize, want)
		}
		longer := promptBlockHashes(append(slices.Clone(msgs), rag.Message{Role: "assistant", Content: more}), blockSize)
		if !slices.Equal(longer[:len(hashes)], hashes) {
			t.Fatal("appending a message changed the hashes of the blocks before it")
		}
		if !slices.Equal(promptBlockHashes(msgs, blockSize), hashes) {
			t.Fatal("hashes differ between two calls")
		}
	})
}

// A change anywhere in a block changes its hash and those of every block after it, not the
// ones before.
func TestPromptBlockHashesChain(t *testing.T) {
	t.Parallel()
	base := []rag.Message{{Role: "user", Content: "alpha bravo charly delta echo foxtrot golf hotel india juliet kilo lima"}}
	changed := []rag.Message{{Role: "user", Content: "alpha bravo charly delta echo foxtrot golf hotel india JULIET kilo lima"}}
	const blockSize = 4 // tokens: BOS, 3 of header, then the words: "juliet" is token 13, in block 3
	a, b := promptBlockHashes(base, blockSize), promptBlockHashes(changed, blockSize)
	if len(a) != len(b) || len(a) != rag.PromptTokens(base)/blockSize {
		t.Fatalf("%d and %d blocks, want %d", len(a), len(b), rag.PromptTokens(base)/blockSize)
	}
	for i := range a {
		if same := a[i] == b[i]; same != (i < 3) {
			t.Errorf("block %d: equal hashes %v, want %v", i, same, i < 3)
		}
	}
	other := promptBlockHashes([]rag.Message{{Role: "system", Content: base[0].Content}}, blockSize)
	if other[0] == a[0] {
		t.Error("the role does not change the first block's hash")
	}
}
