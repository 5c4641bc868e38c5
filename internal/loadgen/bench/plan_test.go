package bench

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ragtail/ragtail/loadgen"
)

// TestPlanWorkloadIsRepeatable checks that a plan reads its files once and builds the same
// seeded workload each time: the schedule's hash, the preflight request and the run must all
// see one schedule.
func TestPlanWorkloadIsRepeatable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	sharegpt := write("sharegpt.json", `[{"conversations":[{"from":"human","value":"What is a KV cache?"},{"from":"gpt","value":"Keys and values."},
		{"from":"human","value":"Why does it grow?"}]},{"conversations":[{"from":"human","value":"Why do tails matter?"}]}]`)
	sessions := write("sessions.jsonl", `{"session":"u1","step":0,"request":{"prompt":"red shoes"}}
{"session":"u1","step":1,"think_ms":100,"request":{"key":"doc-00001#0"}}
{"session":"u2","step":0,"request":{"prompt":"blue shoes"}}
`)
	keys := write("keys.txt", "doc-00001#0\ndoc-00002#0\n")
	tests := []struct {
		name string
		args []string
		rate float64
	}{
		{"synthetic poisson", []string{"--dataset", "mixed"}, 20},
		{"gamma ramp", []string{"--shape", "ramp:1,50,10s", "--burstiness", "0.5"}, math.Inf(1)},
		{"prompts file, max tokens", []string{"--dataset", sharegpt, "--max-tokens", "32"}, 5},
		{"conversations", []string{"--dataset", sharegpt, "--multi-turn"}, 5},
		{"sessions file", []string{"--sessions", sessions}, 5},
		{"synthetic sessions of keys", []string{"--sessions", "synthetic", "--dataset", "keys"}, 5},
		{"key lookups from a file", []string{"--dataset", "keys:" + keys, "--hot-keys", "1"}, 5},
		{"article", []string{"--shape", "article"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var o Options
			fs := flag.NewFlagSet("bench", flag.ContinueOnError)
			o.RegisterFlags(fs)
			if err := fs.Parse(append(tt.args, "--seed", "7")); err != nil {
				t.Fatal(err)
			}
			o.FlagsParsed(fs)
			p, err := o.Load.plan(tt.rate, 0)
			if err != nil {
				t.Fatal(err)
			}
			first := items(t, p, 50)
			if second := items(t, p, 50); second != first {
				t.Errorf("a second workload differs from the first:\n%s\n%s", second, first)
			}
		})
	}
}

// items is the JSON of the first n items of a fresh workload of p.
func items(t *testing.T, p plan, n int) string {
	t.Helper()
	w, err := p.workload()
	if err != nil {
		t.Fatal(err)
	}
	var out []loadgen.Item
	for range n {
		item, ok := w.Next()
		if !ok {
			break
		}
		out = append(out, item)
	}
	if len(out) == 0 {
		t.Fatal("no item")
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPlanReadsItsFilesOnce builds workloads of a plan whose dataset and sessions files are
// gone: they were read when the plan was made.
func TestPlanReadsItsFilesOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataset, sessions := filepath.Join(dir, "prompts.jsonl"), filepath.Join(dir, "sessions.jsonl")
	if err := os.WriteFile(dataset, []byte(`{"messages":[{"role":"user","content":"hello"}]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sessions, []byte(`{"session":"u1","step":0,"request":{"prompt":"hi"}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--dataset", dataset}, {"--sessions", sessions}} {
		var o Options
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		o.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		p, err := o.Load.plan(10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(args[1]); err != nil {
			t.Fatal(err)
		}
		items(t, p, 3)
	}
}
