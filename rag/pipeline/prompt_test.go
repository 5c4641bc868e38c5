package pipeline

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
)

func TestBuildMessagesChunkOrder(t *testing.T) {
	t.Parallel()
	chunk := func(id string) rag.Chunk { return rag.Chunk{ID: id, Title: "t" + id, Text: "text of " + id} }
	// Two requests that retrieve the same chunks with different scores.
	first := []rag.Chunk{chunk("doc-3#0"), chunk("doc-1#2"), chunk("doc-2#1")}
	second := []rag.Chunk{chunk("doc-2#1"), chunk("doc-3#0"), chunk("doc-1#2")}
	conv := []rag.Message{{Role: "user", Content: "q"}}
	for _, tc := range []struct {
		name      string
		order     ChunkOrder
		chunks    []rag.Chunk
		wantOrder []string
	}{
		{"score keeps rank order", ChunkOrderScore, first, []string{"doc-3#0", "doc-1#2", "doc-2#1"}},
		{"default is score", "", second, []string{"doc-2#1", "doc-3#0", "doc-1#2"}},
		{"stable sorts by id", ChunkOrderStable, first, []string{"doc-1#2", "doc-2#1", "doc-3#0"}},
		{"stable sorts any rank order alike", ChunkOrderStable, second, []string{"doc-1#2", "doc-2#1", "doc-3#0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := append([]rag.Chunk(nil), tc.chunks...)
			msgs := buildMessages("SYS", tc.order, tc.chunks, conv)
			if len(msgs) != 2 || msgs[0].Role != "system" || !reflect.DeepEqual(msgs[1], conv[0]) {
				t.Fatalf("messages %+v", msgs)
			}
			var want strings.Builder
			want.WriteString("SYS")
			for i, id := range tc.wantOrder {
				want.WriteString("\n\n[" + string(rune('1'+i)) + "] t" + id + "\ntext of " + id)
			}
			if msgs[0].Content != want.String() {
				t.Errorf("context message\n%q\nwant\n%q", msgs[0].Content, want.String())
			}
			for i := range before {
				if tc.chunks[i] != before[i] {
					t.Fatalf("buildMessages reordered the caller's chunks: %v", tc.chunks)
				}
			}
		})
	}
	a := buildMessages("SYS", ChunkOrderStable, first, conv)[0].Content
	b := buildMessages("SYS", ChunkOrderStable, second, conv)[0].Content
	if a != b {
		t.Error("stable order: the same chunks in another rank order made another prompt")
	}
}

func TestConfigChunkOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    ChunkOrder
		wantErr bool
	}{{"", ChunkOrderScore, false}, {"score", ChunkOrderScore, false}, {"stable", ChunkOrderStable, false}, {"id", "", true}, {"Stable", "", true}} {
		got, err := ParseChunkOrder(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseChunkOrder(%q) = %q, %v", tc.in, got, err)
		}
		if err := (Config{ChunkOrder: ChunkOrder(tc.in)}).Validate(); (err != nil) != tc.wantErr {
			t.Errorf("Validate with chunk order %q: %v", tc.in, err)
		}
	}
}
