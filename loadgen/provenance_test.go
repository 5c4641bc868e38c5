package loadgen

import (
	"strings"
	"testing"
)

// TestProvenanceCommand checks config.command: credentials hidden (by redact.Args, whose own
// tests cover its rules), the command line bounded.
func TestProvenanceCommand(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 400) // 800 bytes
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing secret", []string{"ragtail", "bench", "--rate", "10"}, "ragtail bench --rate 10"},
		{"api key as next argument", []string{"ragtail", "bench", "--api-key", "sk-123", "--rate=5"}, "ragtail bench --api-key xxxxx --rate=5"},
		{"api key with =", []string{"ragtail", "-api-key=sk-123"}, "ragtail -api-key=xxxxx"},
		{"scrape token", []string{"ragtail", "--server-metrics-token", "t0k", "--admin-token=t1k"}, "ragtail --server-metrics-token xxxxx --admin-token=xxxxx"},
		{"header keeps its name", []string{"ragtail", "--header", "Authorization: Bearer x", "--header=X-Key: y"},
			"ragtail --header 'Authorization: xxxxx' '--header=X-Key: xxxxx'"},
		{"header without a colon", []string{"ragtail", "--header", "junk"}, "ragtail --header xxxxx"},
		{"a flag named like a value is not a secret", []string{"ragtail", "--model", "api-key"}, "ragtail --model api-key"},
		{"password in a URL", []string{"ragtail", "bench", "--url", "http://u:s3cret@h:8000/v1?api_key=k1"}, "ragtail bench --url 'http://u:xxxxx@h:8000/v1?api_key=xxxxx'"},
		{"long argument cut on a rune", []string{"ragtail", long}, "ragtail '" + strings.Repeat("é", 256) + "…'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := (RunInfo{}).WithProvenance("v", tt.args).Command; got != tt.want {
				t.Errorf("command of %q\n got %s\nwant %s", tt.args, got, tt.want)
			}
		})
	}
	many := make([]string, 1000)
	if got := strings.Count((RunInfo{}).WithProvenance("v", many).Command, "''"); got != maxCommandArgs {
		t.Errorf("kept %d arguments, want %d", got, maxCommandArgs)
	}
}

func TestShellJoin(t *testing.T) {
	t.Parallel()
	got := ShellJoin([]string{"ragtail", "bench", "--header", "Authorization: xxxxx", "--dataset=", "it's"})
	want := `ragtail bench --header 'Authorization: xxxxx' --dataset= 'it'\''s'`
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
