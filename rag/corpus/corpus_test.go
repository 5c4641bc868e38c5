package corpus_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/corpus"
)

func TestBuiltinIsDeterministicAndSized(t *testing.T) {
	t.Parallel()
	a := corpus.Builtin(corpus.Options{Seed: 7})
	b := corpus.Builtin(corpus.Options{Seed: 7})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different corpus")
	}
	if c := corpus.Builtin(corpus.Options{Seed: 8}); reflect.DeepEqual(a[:10], c[:10]) {
		t.Fatal("different seeds, same corpus")
	}
	if len(a) < 3000 {
		t.Errorf("default corpus has %d chunks, want thousands", len(a))
	}
	ids := map[string]bool{}
	topics := map[string]bool{}
	var lengths []float64
	for _, c := range a {
		if ids[c.ID] {
			t.Fatalf("duplicate id %s", c.ID)
		}
		ids[c.ID] = true
		topics[c.Topic] = true
		if c.Tokens != rag.CountTokens(c.Text) || c.DocID == "" || c.Title == "" {
			t.Fatalf("bad chunk %+v", c)
		}
		lengths = append(lengths, float64(c.Tokens))
	}
	if len(topics) != len(corpus.Topics()) {
		t.Errorf("%d topics used of %d", len(topics), len(corpus.Topics()))
	}
	// Lengths are lognormal with median 220 tokens (then topped up to the end of a sentence,
	// about 12 tokens on average); the sample median of 3,600 chunks lies well within 10% of it.
	slices.Sort(lengths)
	if med := lengths[len(lengths)/2]; math.Abs(med-232) > 23 {
		t.Errorf("median chunk length %.0f tokens, want about 232", med)
	}
}

func TestQuestionsUseTopicTerms(t *testing.T) {
	t.Parallel()
	chunks := corpus.Builtin(corpus.Options{Docs: 80})
	qs := corpus.Questions(chunks, 50, 3)
	if len(qs) != 50 || !slices.Equal(qs, corpus.Questions(chunks, 50, 3)) {
		t.Fatal("questions are not deterministic")
	}
	for _, q := range qs {
		if !strings.HasSuffix(q, "?") && !strings.HasSuffix(q, ".") {
			t.Errorf("question %q", q)
		}
	}
}

func TestSplitOverlapAndBounds(t *testing.T) {
	t.Parallel()
	// Unique words (w0 w1 ...) so every chunk's position in the text is unambiguous.
	var sb strings.Builder
	for i := range 400 {
		sb.WriteString("w" + strconv.Itoa(i) + strings.Repeat("x", i%11))
		switch {
		case i%60 == 59:
			sb.WriteString(".\n\n")
		case i%9 == 8:
			sb.WriteString(". ")
		default:
			sb.WriteString(" ")
		}
	}
	text := sb.String()
	all := strings.Fields(text)
	index := map[string]int{}
	for i, w := range all {
		index[w] = i
	}
	o := corpus.ChunkOptions{Tokens: 64, Overlap: 16}
	chunks := corpus.Split("doc.md", "Doc", text, o)
	if len(chunks) < 5 {
		t.Fatalf("%d chunks", len(chunks))
	}
	prevStart, prevEnd := -1, -1
	for i, c := range chunks {
		if c.Tokens > o.Tokens {
			t.Errorf("chunk %d has %d tokens > %d", i, c.Tokens, o.Tokens)
		}
		if c.ID != "doc.md#"+strconv.Itoa(i) || c.DocID != "doc.md" || c.Title != "Doc" {
			t.Errorf("chunk %d header %+v", i, c)
		}
		f := strings.Fields(c.Text)
		first, last := index[f[0]], index[f[len(f)-1]]
		if !slices.Equal(f, all[first:last+1]) {
			t.Fatalf("chunk %d is not a contiguous run of the text", i)
		}
		switch {
		case i == 0 && first != 0:
			t.Errorf("first chunk starts at word %d", first)
		case i > 0 && (first <= prevStart || first > prevEnd+1):
			t.Errorf("chunk %d starts at word %d; previous chunk covered %d..%d", i, first, prevStart, prevEnd)
		case i > 0 && rag.CountTokens(strings.Join(all[first:prevEnd+1], " ")) > o.Overlap:
			t.Errorf("chunk %d overlaps the previous one by more than %d tokens", i, o.Overlap)
		}
		prevStart, prevEnd = first, last
	}
	if prevEnd != len(all)-1 {
		t.Errorf("chunks end at word %d of %d", prevEnd, len(all))
	}
	// Chunks end at a sentence or paragraph end whenever one lies in their last quarter.
	ends := 0
	for _, c := range chunks[:len(chunks)-1] {
		if strings.HasSuffix(c.Text, ".") {
			ends++
		}
	}
	if ends < len(chunks)-2 {
		t.Errorf("only %d of %d chunks end at a sentence", ends, len(chunks)-1)
	}
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.md", "# Paged attention\n\nBlocks of sixteen tokens.")
	write("sub/b.txt", "Plain text about caches.")
	write("sub/c.go", "package main")
	write(".hidden/d.md", "# secret")
	write("bin.txt", "\xff\xfe\x00bad")
	chunks, skipped, err := corpus.LoadDir(dir, corpus.ChunkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range chunks {
		ids = append(ids, c.ID)
	}
	if !slices.Equal(ids, []string{"a.md#0", "sub/b.txt#0"}) {
		t.Errorf("ids %v", ids)
	}
	if chunks[0].Title != "Paged attention" || chunks[1].Title != "b" {
		t.Errorf("titles %q %q", chunks[0].Title, chunks[1].Title)
	}
	if len(skipped) != 1 || skipped[0].Path != "bin.txt" {
		t.Errorf("skipped %v", skipped)
	}
	again, _, _ := corpus.LoadDir(dir, corpus.ChunkOptions{})
	if !reflect.DeepEqual(chunks, again) {
		t.Error("loading twice differs")
	}
	if _, _, err := corpus.LoadDir(t.TempDir(), corpus.ChunkOptions{}); !errors.Is(err, corpus.ErrEmpty) {
		t.Errorf("empty dir: %v", err)
	}
	if _, _, err := corpus.LoadDir(filepath.Join(dir, "nope"), corpus.ChunkOptions{}); err == nil {
		t.Error("missing dir: no error")
	}
	if _, _, err := corpus.LoadDir(dir, corpus.ChunkOptions{Tokens: 10, Overlap: 10}); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Errorf("overlap >= tokens: %v", err)
	}
}

func TestLoadDirTitles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content, want string
	}{
		{"heading", "intro\n## Paged attention ##\ntext", "Paged attention"},
		{"not a heading", "#include <stdio.h>\ntext", "file"},
		{"shebang", "#!/bin/sh\ntext", "file"},
		{"heading in code fence", "```\n# comment\n```\n# Real title\n", "Real title"},
		{"no heading", "just text", "file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "file.md"), []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			chunks, _, err := corpus.LoadDir(dir, corpus.ChunkOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if chunks[0].Title != tt.want {
				t.Errorf("title %q, want %q", chunks[0].Title, tt.want)
			}
		})
	}
}

func TestSplitWithoutOverlap(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("alpha beta gamma delta. ", 100)
	chunks := corpus.Split("d", "D", text, corpus.ChunkOptions{Tokens: 40, Overlap: -1})
	total := 0
	for _, c := range chunks {
		total += len(strings.Fields(c.Text))
	}
	if total != len(strings.Fields(text)) {
		t.Errorf("chunks hold %d words, text has %d: overlap -1 should mean none", total, len(strings.Fields(text)))
	}
}
