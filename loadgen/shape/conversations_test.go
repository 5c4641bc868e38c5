package shape

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

func TestConversationSessions(t *testing.T) {
	convs := []dataset.Conversation{
		{ID: "a", Turns: []dataset.Turn{{Messages: []loadgen.Message{user("a1")}, MaxTokens: 3}, {Messages: []loadgen.Message{user("a2")}}}},
		{ID: "b", Turns: []dataset.Turn{{Messages: []loadgen.Message{system("sys"), user("b1")}}}},
	}
	src, err := ConversationSessions(convs, 1500*time.Millisecond, 42)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for n := range 6 { // three passes over both conversations
		s, ok := src.Next()
		if !ok {
			t.Fatal("the source ended")
		}
		conv, draw, _ := strings.Cut(s.ID, ".")
		if draw != strconv.Itoa(n) {
			t.Errorf("session %d id %q: want the draw number %d after the conversation id", n, s.ID, n)
		}
		seen[conv]++
		want := convs[0]
		if conv == "b" {
			want = convs[1]
		}
		if len(s.Steps) != len(want.Turns) {
			t.Fatalf("session %q has %d steps, want %d", s.ID, len(s.Steps), len(want.Turns))
		}
		for k, st := range s.Steps {
			r := st.Request
			if !reflect.DeepEqual(r.Messages, want.Turns[k].Messages) || r.MaxTokens != want.Turns[k].MaxTokens {
				t.Errorf("session %q step %d: %+v", s.ID, k, r)
			}
			if r.Continues != (k > 0) || (k > 0) != (st.Think == 1500*time.Millisecond) {
				t.Errorf("session %q step %d: continues %v, think %v", s.ID, k, r.Continues, st.Think)
			}
		}
	}
	if seen["a"] != 3 || seen["b"] != 3 {
		t.Errorf("draws per conversation %v: want every conversation once a pass", seen)
	}
	if _, err := ConversationSessions(nil, 0, 1); err == nil {
		t.Error("no error for no conversations")
	}
	if _, err := ConversationSessions(convs, -time.Second, 1); err == nil {
		t.Error("no error for a negative think time")
	}
}

func TestContinueConversations(t *testing.T) {
	in := `{"session":"u","step":0,"request":{"prompt":"first"}}
{"session":"u","step":1,"think_ms":5,"request":{"key":"doc-1"}}
{"session":"u","step":2,"request":{"messages":[{"role":"user","content":"then"}]}}`
	sessions, err := dataset.ReadSessions(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	ContinueConversations(sessions)
	var got []bool
	for _, st := range sessions[0].Steps {
		got = append(got, st.Request.Continues)
	}
	if !reflect.DeepEqual(got, []bool{false, false, true}) {
		t.Errorf("continues by step %v: want only the later chat step", got)
	}
}

func user(s string) loadgen.Message   { return loadgen.Message{Role: "user", Content: s} }
func system(s string) loadgen.Message { return loadgen.Message{Role: "system", Content: s} }
