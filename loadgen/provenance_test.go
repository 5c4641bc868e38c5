package loadgen

import (
	"slices"
	"strings"
	"testing"
)

func TestRedactArgs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 400) // 800 bytes
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"nothing secret", []string{"ragtail", "bench", "--rate", "10"}, []string{"ragtail", "bench", "--rate", "10"}},
		{"api key as next argument", []string{"ragtail", "bench", "--api-key", "sk-123", "--rate=5"},
			[]string{"ragtail", "bench", "--api-key", Redacted, "--rate=5"}},
		{"api key with =", []string{"-api-key=sk-123"}, []string{"-api-key=" + Redacted}},
		{"scrape token", []string{"--server-metrics-token", "t0k", "--admin-token=t1k"}, []string{"--server-metrics-token", Redacted, "--admin-token=" + Redacted}},
		{"header keeps its name", []string{"--header", "Authorization: Bearer x", "--header=X-Key: y"},
			[]string{"--header", "Authorization: " + Redacted, "--header=X-Key: " + Redacted}},
		{"header without a colon", []string{"--header", "junk"}, []string{"--header", Redacted}},
		{"a flag named like a value is not a secret", []string{"--model", "api-key"}, []string{"--model", "api-key"}},
		{"long argument cut on a rune", []string{long}, []string{strings.Repeat("é", 256) + "…"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := RedactArgs(tt.args); !slices.Equal(got, tt.want) {
				t.Errorf("RedactArgs(%q) = %q, want %q", tt.args, got, tt.want)
			}
		})
	}
	many := make([]string, 1000)
	if got := len(RedactArgs(many)); got != maxCommandArgs {
		t.Errorf("kept %d arguments, want %d", got, maxCommandArgs)
	}
}

func TestShellJoin(t *testing.T) {
	t.Parallel()
	got := ShellJoin([]string{"ragtail", "bench", "--header", "Authorization: " + Redacted, "--dataset=", "it's"})
	want := `ragtail bench --header 'Authorization: [redacted]' --dataset= 'it'\''s'`
	if got != want {
		t.Errorf("ShellJoin = %s, want %s", got, want)
	}
}

func TestWithRequestsCopies(t *testing.T) {
	t.Parallel()
	temp := 0.7
	i := NewRunInfo("http://x", "m", "poisson", 1, 3).WithRequests("sharegpt.json", true, &temp)
	temp = 2
	if i.Dataset != "sharegpt.json" || i.Stream == nil || !*i.Stream || i.Temperature == nil || *i.Temperature != 0.7 {
		t.Errorf("%+v", i)
	}
	if v := BuildVersion(); v == "" {
		t.Error("empty build version")
	}
}
