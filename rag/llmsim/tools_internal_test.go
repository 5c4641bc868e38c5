package llmsim

import (
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
)

// A tool call's arguments are generated token by token: the pieces join to the arguments and
// there are as many as rag.CountTokens counts, so usage and the prompt the call becomes agree.
func FuzzTokenPieces(f *testing.F) {
	f.Add(`{"query": "How does paged attention work? (hop 2)"}`)
	f.Add(`{"city": "Zürich", "days": 3, "metric": true}`)
	f.Add("  leading and trailing white space \n")
	f.Add("supercalifragilisticexpialidocious-word_with'marks")
	f.Add(`\"escaped\" \u00e9 ...`)
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		pieces := tokenPieces(text)
		if got := strings.Join(pieces, ""); got != text && strings.TrimSpace(text) != "" {
			t.Fatalf("pieces %q join to %q, not %q", pieces, got, text)
		}
		if len(pieces) != rag.CountTokens(text) {
			t.Fatalf("%d pieces %q, CountTokens says %d", len(pieces), pieces, rag.CountTokens(text))
		}
		for i, p := range pieces {
			if strings.TrimSpace(p) == "" {
				t.Fatalf("piece %d of %q is only white space", i, pieces)
			}
		}
	})
}

func TestHopQuery(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 200) // 400 bytes
	for _, tc := range []struct {
		name, question string
		hop            int
		want           string
	}{
		{name: "first hop", question: "what is a KV block?", hop: 1, want: "what is a KV block?"},
		{name: "later hop", question: "what is a KV block?", hop: 3, want: "what is a KV block? (hop 3)"},
		{name: "white space folded", question: "  what\n\tis  it ", hop: 1, want: "what is it"},
		{name: "no question", question: " ", hop: 2, want: "the question (hop 2)"},
		{name: "cut at a rune", question: long, hop: 1, want: strings.Repeat("é", maxQueryBytes/2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := hopQuery(tc.question, tc.hop); got != tc.want {
				t.Errorf("hopQuery(%.40q, %d) = %.60q, want %.60q", tc.question, tc.hop, got, tc.want)
			}
		})
	}
}

// A law that parses prints back to itself, and every count it draws is within its range.
func FuzzParseToolCallLaw(f *testing.F) {
	for _, s := range []string{"fixed:3", "uniform:1,4", "geometric:0.5,max=5", "geometric:1e-9", "none", "geometric:0.5,max=5,max=2", "uniform:,", ""} {
		f.Add(s, "what is a KV block?")
	}
	f.Fuzz(func(t *testing.T, s, question string) {
		law, err := ParseToolCallLaw(s)
		if err != nil {
			return
		}
		again, err := ParseToolCallLaw(law.String())
		if err != nil || again != law {
			t.Fatalf("%q parses to %q, which parses to %v, %v", s, law, again, err)
		}
		if k := law.Calls(1, question); k < 0 || k > law.Max() || law.Max() > MaxToolCalls || law.Prob(k) == 0 {
			t.Fatalf("%q: %d calls for %q, max %d, probability %v", law, k, question, law.Max(), law.Prob(k))
		}
	})
}
