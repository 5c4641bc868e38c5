package dataset

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

func TestReadDataset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []Prompt
		wantErr string
	}{
		{
			name: "sharegpt",
			in: `[{"id":"a","conversations":[{"from":"human","value":"What is a KV cache?"},{"from":"gpt","value":"It stores keys and values."}]},
			      {"id":"b","conversations":[{"from":"system","value":"be brief"},{"from":"human","value":"Hi"}]},
			      {"id":"c","conversations":[{"from":"gpt","value":"no human turn"}]},
			      {"id":"d","conversations":[]}]`,
			want: []Prompt{
				{Messages: []loadgen.Message{{Role: "user", Content: "What is a KV cache?"}}, MaxTokens: EstimateTokens("It stores keys and values.")},
				{Messages: []loadgen.Message{{Role: "user", Content: "Hi"}}},
			},
		},
		{
			name: "openai messages jsonl",
			in: "\ufeff{\"messages\":[{\"role\":\"system\",\"content\":\"ctx\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],\"max_tokens\":64,\"temperature\":0.2}\n" +
				"\n" +
				`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a reference answer"}],"model":"ignored"}` + "\n" +
				`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}` + "\n" +
				`{"prompt":"plain"}` + "\r\n",
			want: []Prompt{
				{Messages: []loadgen.Message{{Role: "system", Content: "ctx"}, {Role: "user", Content: "ab"}}, MaxTokens: 64, Extra: map[string]any{"temperature": json.RawMessage("0.2")}},
				{Messages: []loadgen.Message{{Role: "user", Content: "q"}}, MaxTokens: EstimateTokens("a reference answer")},
				{Messages: []loadgen.Message{{Role: "user", Content: "plain"}}},
			},
		},
		{
			name: "openai messages array",
			in:   `  [{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":7}]`,
			want: []Prompt{{Messages: []loadgen.Message{{Role: "user", Content: "x"}}, MaxTokens: 7}},
		},
		{name: "bad line", in: "{\"prompt\":\"ok\"}\n{\"prompt\": nope}\n", wantErr: "line 2"},
		{name: "bad element", in: `[{"prompt":"ok"}, {"prompt":]`, wantErr: "element 2"},
		{name: "wrong type", in: `{"messages":"hello"}`, wantErr: "line 1"},
		{name: "bad content", in: `{"messages":[{"role":"user","content":5}]}`, wantErr: "content"},
		{name: "nothing usable", in: `[{"conversations":[]}]`, wantErr: "no entry has a prompt"},
		{name: "empty", in: "", wantErr: "no entry has a prompt"},
		{name: "trailing data", in: `[{"prompt":"x"}] [1]`, wantErr: "after the array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ReadDataset(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tt.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("ReadDataset =\n%s\nwant\n%s", gotJSON, wantJSON)
			}
		})
	}
}

// FuzzReadDataset reads arbitrary files: no panic, and every prompt it accepts has messages
// with a role.
func FuzzReadDataset(f *testing.F) {
	f.Add([]byte(`[{"conversations":[{"from":"human","value":"q"},{"from":"gpt","value":"a"}]}]`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"q"}],"max_tokens":3}` + "\n" + `{"prompt":"p"}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null}]}`))
	f.Add([]byte("\ufeff[]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		prompts, err := ReadDataset(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		if len(prompts) == 0 {
			t.Fatal("no error and no prompts")
		}
		for _, p := range prompts {
			if len(p.Messages) == 0 || p.MaxTokens < 0 {
				t.Fatalf("prompt %+v", p)
			}
			for _, m := range p.Messages {
				if m.Role == "" {
					t.Fatalf("message without a role in %+v", p)
				}
			}
		}
	})
}

func TestReadSessions(t *testing.T) {
	t.Parallel()
	in := `{"session":"u2","step":1,"think_ms":1500,"request":{"key":"doc-00042#0"}}
{"session":"u1","step":0,"start_ms":250,"request":{"messages":[{"role":"user","content":"red shoes"}]}}
{"session":"u2","step":0,"start_ms":100,"request":{"prompt":"blue hat"}}
{"session":"u1","step":5,"think_ms":800.5,"request":{"path":"/v1/documents/doc-00007%230"}}
{"session":7,"step":0,"start_ms":300,"request":{"prompt":"numbered"}}
`
	got, err := ReadSessions(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != "u2" || got[1].ID != "u1" || got[2].ID != "7" {
		t.Fatalf("sessions %+v: want u2, u1, 7 in order of start", got)
	}
	u2, u1 := got[0], got[1]
	if !u2.HasStart || u2.Start != 100*time.Millisecond || len(u2.Steps) != 2 {
		t.Fatalf("u2 = %+v", u2)
	}
	if s := u2.Steps[1]; s.Think != 1500*time.Millisecond || s.Request.Key != "doc-00042#0" || s.Request.Path != "/v1/documents/doc-00042%230" {
		t.Errorf("u2 step 1 = %+v", s)
	}
	if s := u1.Steps[1]; s.Think != 800500*time.Microsecond || s.Request.Path != "/v1/documents/doc-00007%230" {
		t.Errorf("u1 step 1 = %+v", s)
	}

	for _, tt := range []struct{ name, in, wantErr string }{
		{"duplicate step", `{"session":"a","step":0,"request":{"prompt":"x"}}` + "\n" + `{"session":"a","step":0,"request":{"prompt":"y"}}`, "step 0 twice"},
		{"some starts", `{"session":"a","step":0,"start_ms":1,"request":{"prompt":"x"}}` + "\n" + `{"session":"b","step":0,"request":{"prompt":"y"}}`, "1 of 2 sessions"},
		{"no step", `{"session":"a","request":{"prompt":"x"}}`, `"step"`},
		{"negative think", `{"session":"a","step":1,"think_ms":-5,"request":{"prompt":"x"}}`, "think_ms"},
		{"no session", `{"step":0,"request":{"prompt":"x"}}`, `"session" is missing`},
		{"no request", `{"session":"a","step":0}`, "request: missing"},
		{"empty request", `{"session":"a","step":0,"request":{}}`, "no prompt, key or path"},
		{"relative path", `{"session":"a","step":0,"request":{"path":"v1/x"}}`, "absolute path"},
		{"not json", `{"session":`, "line 1"},
		{"empty", ``, "no steps"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ReadSessions(strings.NewReader(tt.in)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// FuzzReadSessions reads arbitrary session files: no panic, and every session it accepts has
// steps with a request and non-negative think times, in order of start.
func FuzzReadSessions(f *testing.F) {
	f.Add([]byte(`{"session":"a","step":0,"start_ms":5,"request":{"prompt":"x"}}` + "\n" + `{"session":"a","step":2,"think_ms":10,"request":{"key":"k"}}`))
	f.Add([]byte(`{"session":1,"step":0,"request":{"messages":[{"role":"user","content":"hi"}]}}`))
	f.Add([]byte(`{"session":"b","step":3,"request":{"path":"/v1/documents/x"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sessions, err := ReadSessions(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		for i, s := range sessions {
			if s.ID == "" || len(s.Steps) == 0 {
				t.Fatalf("session %+v", s)
			}
			if i > 0 && s.HasStart && s.Start < sessions[i-1].Start {
				t.Fatal("sessions out of order")
			}
			for _, st := range s.Steps {
				if st.Think < 0 || (st.Request.Path == "" && len(st.Request.Messages) == 0) {
					t.Fatalf("step %+v", st)
				}
			}
		}
	})
}
