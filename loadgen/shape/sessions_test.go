package shape

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

func TestPromptsCycle(t *testing.T) {
	t.Parallel()
	prompts := []dataset.Prompt{
		{Messages: []loadgen.Message{{Role: "user", Content: "a"}}},
		{Messages: []loadgen.Message{{Role: "user", Content: "b"}}},
		{Messages: []loadgen.Message{{Role: "user", Content: "c"}}, MaxTokens: 9},
	}
	src, err := Prompts(prompts, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Every pass holds each prompt exactly once.
	for pass := range 3 {
		seen := map[string]int{}
		for range 3 {
			req := src.Next()
			seen[req.Messages[0].Content]++
			if req.Messages[0].Content == "c" && req.MaxTokens != 9 {
				t.Errorf("max tokens of c = %d", req.MaxTokens)
			}
		}
		if len(seen) != 3 {
			t.Errorf("pass %d: %v", pass, seen)
		}
	}
	if _, err := Prompts(nil, 1); err == nil {
		t.Error("a source of no prompts")
	}
}

func TestSyntheticSessions(t *testing.T) {
	t.Parallel()
	keys, err := Keys(KeyConfig{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	src, err := SyntheticSessions(SessionConfig{Think: 2 * time.Second, MaxSteps: 8, Products: keys}, 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4000
	var searches, toProduct int
	var thinks []float64
	for range n {
		s, _ := src.Next()
		if len(s.Steps) == 0 || len(s.Steps) > 8 || !strings.HasPrefix(s.Steps[0].Request.Messages[0].Content, "Search") {
			t.Fatalf("session %+v", s)
		}
		for i, st := range s.Steps {
			if i > 0 {
				thinks = append(thinks, st.Think.Seconds())
			}
			// A search at the last allowed step cannot move on; every other one does.
			if i < 7 && len(st.Request.Messages) > 0 && strings.HasPrefix(st.Request.Messages[0].Content, "Search") {
				searches++
				if i+1 < len(s.Steps) && s.Steps[i+1].Request.Key != "" {
					toProduct++
				}
			}
		}
	}
	// After a search the next page is a product (a key lookup here) with probability 0.60:
	// Binomial, standard error sqrt(0.6 x 0.4 / searches).
	p := float64(toProduct) / float64(searches)
	if se := math.Sqrt(0.6 * 0.4 / float64(searches)); math.Abs(p-0.6) > 4.5*se {
		t.Errorf("search -> product %.3f of %d searches, want 0.60 +- %.3f", p, searches, 4.5*se)
	}
	// Think times are lognormal with median 2 s.
	below := 0
	for _, x := range thinks {
		if x < 2 {
			below++
		}
	}
	if frac, se := float64(below)/float64(len(thinks)), 0.5/math.Sqrt(float64(len(thinks))); math.Abs(frac-0.5) > 4.5*se {
		t.Errorf("%.3f of think times below the median", frac)
	}
}

// TestReplaySessions replays a sessions file: the first session by start comes first, at its
// start, with the rest of its steps to follow.
func TestReplaySessions(t *testing.T) {
	t.Parallel()
	in := `{"session":"u2","step":1,"think_ms":1500,"request":{"key":"doc-00042#0"}}
{"session":"u1","step":0,"start_ms":250,"request":{"prompt":"red shoes"}}
{"session":"u2","step":0,"start_ms":100,"request":{"prompt":"blue hat"}}
`
	got, err := dataset.ReadSessions(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	w := Sessions(nil, Replay(got))
	item, ok := w.Next()
	if !ok || item.At != 100*time.Millisecond || item.Session != "u2" || len(item.Then) != 1 || item.Then[0].Think != 1500*time.Millisecond {
		t.Errorf("first item %+v", item)
	}
	if item, ok = w.Next(); !ok || item.At != 250*time.Millisecond || item.Session != "u1" || len(item.Then) != 0 {
		t.Errorf("second item %+v", item)
	}
	if _, ok = w.Next(); ok {
		t.Error("a third item from two sessions")
	}
}
