package lab

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
)

// TestReadFileRoundTrip checks that what `lab --json` writes reads back into results that render
// the same text and page as the originals, for one result (an object) and for `lab all` (an
// array), and that other schemas are refused.
func TestReadFileRoundTrip(t *testing.T) {
	b := &report.Bench{Completed: 3, Duration: 2 * time.Second}
	one := &Result{Experiment: "coupling", Title: "t", Setup: "s", Rule: Rule{"a", "b", "c"},
		Variants: []Variant{{Name: "sync", Settings: &Settings{Coupling: ptr("sync")}, Bench: b, Counters: map[string]float64{"x": 1}}},
		Rows:     []Row{{"m", "c", "x"}}, Verdict: Verdict{Reproduced, "because"}}
	two := &Result{Experiment: "knee", Title: "k", Rows: []Row{{"n", "d", "y"}}, Verdict: Verdict{NotReproduced, "no"}}
	dir := t.TempDir()
	tests := []struct {
		name    string
		results []*Result
	}{
		{"one experiment", []*Result{one}},
		{"lab all", []*Result{one, two}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".json")
			if err := WriteFiles(tt.results, path, ""); err != nil {
				t.Fatal(err)
			}
			if !IsLabFile(path) {
				t.Fatalf("IsLabFile(%s) = false", path)
			}
			got, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.results) {
				t.Fatalf("%d results read, want %d", len(got), len(tt.results))
			}
			var want, have strings.Builder
			if err := Render(&want, tt.results, "", "", false); err != nil {
				t.Fatal(err)
			}
			if err := Render(&have, got, "", "", false); err != nil {
				t.Fatal(err)
			}
			if want.String() != have.String() {
				t.Errorf("text after the round trip:\n%s\nwant:\n%s", have.String(), want.String())
			}
			if len(tt.results) > 1 && !strings.Contains(have.String(), "== summary") {
				t.Errorf("no summary table for several results:\n%s", have.String())
			}
			want.Reset()
			have.Reset()
			if err := WriteHTML(&want, tt.results); err != nil {
				t.Fatal(err)
			}
			if err := WriteHTML(&have, got); err != nil {
				t.Fatal(err)
			}
			if want.String() != have.String() {
				t.Error("the HTML page differs after the round trip")
			}
		})
	}
	bench := filepath.Join(dir, "bench.json")
	if err := os.WriteFile(bench, []byte(`{"schema": "ragtail.bench/v1", "completed": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if IsLabFile(bench) {
		t.Error("a bench result taken for a lab result")
	}
	if _, err := ReadFile(bench); !errors.Is(err, ErrNotLab) {
		t.Errorf("ReadFile(bench result) = %v, want ErrNotLab", err)
	}
	if _, err := Decode([]byte(`[]`), "empty"); !errors.Is(err, ErrNotLab) {
		t.Errorf("Decode([]) = %v, want ErrNotLab", err)
	}
	var sb strings.Builder
	if err := Render(&sb, []*Result{one}, "-", "-", false); err == nil {
		t.Error("Render with --json - and --html - must fail")
	}
	sb.Reset()
	if err := Render(&sb, []*Result{one}, "-", "", false); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(sb.String()), &back); err != nil || back["schema"] != Schema {
		t.Errorf("--json - wrote %q (%v)", sb.String(), err)
	}
}
