package shape

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

func drain(t *testing.T, w loadgen.Workload) []loadgen.Item {
	t.Helper()
	var items []loadgen.Item
	for {
		it, ok := w.Next()
		if !ok {
			return items
		}
		items = append(items, it)
	}
}

// TestTraceSchedule checks that the replay sends each request of the window at its trace time,
// less the window's start, divided by the speedup.
func TestTraceSchedule(t *testing.T) {
	reqs := readSample(t, "mooncake_sample.jsonl", dataset.Mooncake)
	tests := []struct {
		name string
		w    TraceWindow
		want []float64 // intended send offsets, ms
	}{
		{"whole", TraceWindow{}, []float64{0, 0, 27482, 30535, 32312, 35669, 41004, 41004}},
		{"speedup 4", TraceWindow{Speedup: 4}, []float64{0, 0, 6870.5, 7633.75, 8078, 8917.25, 10251, 10251}},
		{"window", TraceWindow{Start: 30 * time.Second, Length: 10 * time.Second}, []float64{535, 2312, 5669}},
		{"window speedup 2", TraceWindow{Start: 30 * time.Second, Speedup: 2}, []float64{267.5, 1156, 2834.5, 5502, 5502}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Trace(reqs, tt.w, 1)
			if err != nil {
				t.Fatal(err)
			}
			items := drain(t, w)
			if len(items) != len(tt.want) {
				t.Fatalf("%d items, want %d", len(items), len(tt.want))
			}
			for i, it := range items {
				if want := time.Duration(tt.want[i] * float64(time.Millisecond)); it.At != want {
					t.Errorf("item %d at %v, want %v", i, it.At, want)
				}
			}
		})
	}
	if _, err := Trace(reqs, TraceWindow{Start: time.Hour}, 1); err == nil {
		t.Error("a window past the trace's end is not an error")
	}
	if _, err := Trace(reqs, TraceWindow{Speedup: -1}, 1); err == nil {
		t.Error("a negative speedup is not an error")
	}
}

// TestTraceSpeedupRange replays a trace of 41 s at speedups that no replay can honour: each is
// refused with the range, where 1e-300 used to turn offsets past a time.Duration's range and
// send one request of three without a word. The ends of the range replay every request.
func TestTraceSpeedupRange(t *testing.T) {
	reqs := readSample(t, "mooncake_sample.jsonl", dataset.Mooncake)
	tests := []struct {
		name    string
		w       TraceWindow
		wantErr string
	}{
		{"1e-300", TraceWindow{Speedup: 1e-300}, "speedup 1e-300 is outside 0.001 to 1e+06"},
		{"2e6", TraceWindow{Speedup: 2e6}, "outside"},
		{"the slowest", TraceWindow{Speedup: MinTraceSpeedup}, ""},
		{"the fastest", TraceWindow{Speedup: MaxTraceSpeedup}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Trace(reqs, tt.w, 1)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Trace = %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			items := drain(t, w)
			if len(items) != len(reqs) {
				t.Fatalf("%d of %d requests replayed", len(items), len(reqs))
			}
			for i, it := range items {
				if want := time.Duration(float64(reqs[i].At) / tt.w.Speedup); it.At != want || it.At < 0 {
					t.Errorf("item %d at %v, want %v", i, it.At, want)
				}
			}
		})
	}
	// A trace of two days slowed a thousand times would last five years.
	long := []dataset.TraceRequest{{At: 0, InputTokens: 1, OutputTokens: 1}, {At: 48 * time.Hour, InputTokens: 1, OutputTokens: 1}}
	if _, err := Trace(long, TraceWindow{Speedup: MinTraceSpeedup}, 1); err == nil || !strings.Contains(err.Error(), "a year at most") {
		t.Errorf("a replay of five years: %v", err)
	}
}

// TestTracePrefixSharing checks that Mooncake requests sharing hash ids share exactly that
// many blocks of prompt text, and that prompts have InputTokens words.
func TestTracePrefixSharing(t *testing.T) {
	reqs := readSample(t, "mooncake_sample.jsonl", dataset.Mooncake)
	w, err := Trace(reqs, TraceWindow{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	items := drain(t, w)
	words := make([][]string, len(items))
	for i, it := range items {
		words[i] = strings.Fields(it.Request.Messages[0].Content)
		if len(words[i]) != reqs[i].InputTokens || it.Request.PromptTokens != reqs[i].InputTokens {
			t.Errorf("request %d: %d words, PromptTokens %d, want %d", i, len(words[i]), it.Request.PromptTokens, reqs[i].InputTokens)
		}
		if it.Request.MaxTokens != reqs[i].OutputTokens {
			t.Errorf("request %d: max_tokens %d, want %d", i, it.Request.MaxTokens, reqs[i].OutputTokens)
		}
	}
	common := func(a, b []string) int {
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		return n
	}
	tests := []struct {
		a, b   int
		blocks int // shared leading hash ids
	}{
		{0, 1, 12}, {0, 2, 12}, {1, 3, 12}, {0, 4, 0}, {6, 7, 2},
	}
	for _, tt := range tests {
		got := common(words[tt.a], words[tt.b])
		lo, hi := tt.blocks*dataset.MooncakeBlockTokens, (tt.blocks+1)*dataset.MooncakeBlockTokens
		if got < lo || got >= hi {
			t.Errorf("requests %d and %d share %d words, want %d blocks (%d..%d words)", tt.a, tt.b, got, tt.blocks, lo, hi-1)
		}
	}
}

// TestTraceCSVPromptsDiffer checks that CSV traces (no block ids) get prompts of their own,
// the same for the same seed.
func TestTraceCSVPromptsDiffer(t *testing.T) {
	reqs := readSample(t, "azure_sample.csv", dataset.Azure)
	prompts := func(seed uint64) []string {
		w, err := Trace(reqs, TraceWindow{}, seed)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range drain(t, w) {
			out = append(out, it.Request.Messages[0].Content)
		}
		return out
	}
	a, b, c := prompts(1), prompts(1), prompts(2)
	seen := map[string]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("request %d: different prompts for one seed", i)
		}
		if a[i] == c[i] {
			t.Errorf("request %d: the same prompt for two seeds", i)
		}
		head := strings.Join(strings.Fields(a[i])[:8], " ")
		if seen[head] {
			t.Errorf("request %d: prompt starts like an earlier one: %q", i, head)
		}
		seen[head] = true
		if n := len(strings.Fields(a[i])); n != reqs[i].InputTokens {
			t.Errorf("request %d: %d words, want %d", i, n, reqs[i].InputTokens)
		}
	}
}

// readSample reads one of the sample traces that loadgen/dataset's tests read.
func readSample(t *testing.T, name string, f dataset.TraceFormat) []dataset.TraceRequest {
	t.Helper()
	file, err := os.Open("../dataset/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = file.Close() }()
	reqs, err := dataset.ReadTrace(file, f)
	if err != nil {
		t.Fatalf("ReadTrace(%s): %v", name, err)
	}
	return reqs
}

func FuzzReadTrace(f *testing.F) {
	for _, name := range []string{"mooncake_sample.jsonl", "azure_sample.csv", "burstgpt_sample.csv"} {
		b, err := os.ReadFile("../dataset/testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"timestamp": -5, "input_length": 3, "output_length": 0, "hash_ids": [9]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, format := range []dataset.TraceFormat{dataset.Mooncake, dataset.Azure, dataset.BurstGPT} {
			reqs, err := dataset.ReadTrace(strings.NewReader(string(b)), format)
			if err != nil {
				continue
			}
			for i, r := range reqs {
				if r.At < 0 || (i > 0 && r.At < reqs[i-1].At) {
					t.Fatalf("%s: request %d at %v out of order", format, i, r.At)
				}
				if r.InputTokens < 1 || r.InputTokens > dataset.MaxTraceTokens || r.OutputTokens < 1 || r.OutputTokens > dataset.MaxTraceTokens {
					t.Fatalf("%s: request %d with %d/%d tokens", format, i, r.InputTokens, r.OutputTokens)
				}
			}
			if len(reqs[0].HashIDs) == 0 && reqs[0].InputTokens > 4096 {
				continue // keep each input cheap
			}
			w, err := Trace(reqs[:1], TraceWindow{}, 1)
			if err != nil {
				t.Fatalf("%s: %v", format, err)
			}
			it, _ := w.Next()
			if n := len(strings.Fields(it.Request.Messages[0].Content)); n != reqs[0].InputTokens {
				t.Fatalf("%s: %d words, want %d", format, n, reqs[0].InputTokens)
			}
		}
	})
}
