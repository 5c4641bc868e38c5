package dataset

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ragtail/ragtail/loadgen"
)

func user(s string) loadgen.Message { return loadgen.Message{Role: "user", Content: s} }

func system(s string) loadgen.Message { return loadgen.Message{Role: "system", Content: s} }

func TestReadConversations(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  []Conversation
		error string
	}{
		{
			name: "sharegpt turns, recorded replies set the lengths",
			in: `[{"id": "a1", "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "` +
				strings.Repeat("x", 40) + `"}, {"from": "human", "value": "q2"}, {"from": "gpt", "value": "abcd"}]}]`,
			want: []Conversation{{ID: "a1", Turns: []Turn{{Messages: []loadgen.Message{user("q1")}, MaxTokens: 10},
				{Messages: []loadgen.Message{user("q2")}, MaxTokens: 1}}}},
		},
		{
			name: "an agent's recorded tool exchange sets no length: the final answer does",
			in: `{"id": "t1", "messages": [{"role": "user", "content": "q1"},` +
				`{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},` +
				`{"role": "tool", "tool_call_id": "c1", "content": "` + strings.Repeat("y", 400) + `"},` +
				`{"role": "assistant", "content": "abcdefgh"}, {"role": "user", "content": "q2"}]}` + "\n",
			want: []Conversation{{ID: "t1", Turns: []Turn{{Messages: []loadgen.Message{user("q1")}, MaxTokens: 2},
				{Messages: []loadgen.Message{user("q2")}}}}},
		},
		{
			name: "system joins the next turn; a conversation ending on a question keeps it",
			in:   `[{"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q1"}, {"from": "chatgpt", "value": "r"}, {"from": "human", "value": "q2"}]}]`,
			want: []Conversation{{ID: "c1", Turns: []Turn{{Messages: []loadgen.Message{system("s"), user("q1")}, MaxTokens: 1},
				{Messages: []loadgen.Message{user("q2")}}}}},
		},
		{
			name: "cut before an empty user turn; an entry with none is skipped",
			in: `[{"conversations": [{"from": "human", "value": " "}]},` +
				`{"conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "r"}, {"from": "human", "value": ""}, {"from": "human", "value": "q3"}]}]`,
			want: []Conversation{{ID: "c2", Turns: []Turn{{Messages: []loadgen.Message{user("q1")}, MaxTokens: 1}}}},
		},
		{
			name: "openai messages with max_tokens and body fields",
			in:   `{"id": 7, "messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "r1"}, {"role": "user", "content": [{"type": "text", "text": "q2"}]}], "max_tokens": 5, "top_p": 0.5}`,
			want: []Conversation{{ID: "7", Extra: map[string]any{"top_p": json.RawMessage("0.5")},
				Turns: []Turn{{Messages: []loadgen.Message{user("q1")}, MaxTokens: 5}, {Messages: []loadgen.Message{user("q2")}, MaxTokens: 5}}}},
		},
		{
			name: "an image part ends the conversation",
			in:   `{"messages": [{"role": "user", "content": "q1"}, {"role": "user", "content": [{"type": "image_url"}]}]}`,
			want: []Conversation{{ID: "c1", Turns: []Turn{{Messages: []loadgen.Message{user("q1")}}}}},
		},
		{
			name: "prompt entry and a hostile id",
			in:   `{"id": "` + strings.Repeat("é", 40) + "\\n\\u0000" + `", "prompt": "p"}`,
			want: []Conversation{{ID: strings.Repeat("é", 32), Turns: []Turn{{Messages: []loadgen.Message{user("p")}}}}},
		},
		{name: "no user turn", in: `[{"conversations": [{"from": "gpt", "value": "r"}]}]`, error: "no entry has a user turn"},
		{name: "malformed", in: "{\"messages\": [}\n", error: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadConversations(strings.NewReader(tt.in))
			if tt.error != "" {
				if err == nil || !strings.Contains(err.Error(), tt.error) {
					t.Fatalf("err %v, want one containing %q", err, tt.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func FuzzReadConversations(f *testing.F) {
	f.Add([]byte(`[{"conversations":[{"from":"human","value":"q"},{"from":"gpt","value":"a"},{"from":"human","value":"q2"}]}]`))
	f.Add([]byte(`{"id":"x","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"max_tokens":3}` + "\n" + `{"prompt":"p"}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		convs, err := ReadConversations(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		if len(convs) == 0 {
			t.Fatal("no error and no conversations")
		}
		for _, c := range convs {
			if c.ID == "" || len(c.ID) > maxConversationID || !utf8.ValidString(c.ID) && utf8.ValidString(string(b)) {
				t.Fatalf("conversation id %q", c.ID)
			}
			if len(c.Turns) == 0 {
				t.Fatalf("conversation %q has no turn", c.ID)
			}
			for _, turn := range c.Turns {
				last := turn.Messages[len(turn.Messages)-1]
				if last.Role != "user" || strings.TrimSpace(last.Content) == "" || turn.MaxTokens < 0 {
					t.Fatalf("turn %+v", turn)
				}
			}
		}
	})
}

// TestReadConversationsSample reads the ShareGPT-format sample docs/loadgen.md replays.
func TestReadConversationsSample(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/sharegpt_multiturn.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	convs, err := ReadConversations(f)
	if err != nil {
		t.Fatal(err)
	}
	turns := 0
	for _, c := range convs {
		if len(c.Turns) < 3 || len(c.Turns) > 5 {
			t.Errorf("conversation %s has %d turns, want 3 to 5", c.ID, len(c.Turns))
		}
		for _, tr := range c.Turns {
			if tr.MaxTokens < 40 {
				t.Errorf("conversation %s: a turn's recorded reply gives %d tokens", c.ID, tr.MaxTokens)
			}
		}
		turns += len(c.Turns)
	}
	if len(convs) != 40 || turns != 159 {
		t.Errorf("%d conversations of %d turns, want 40 of 159 (the run docs/loadgen.md shows)", len(convs), turns)
	}
}
