package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stream is a go test -json run of one package (as cmd/test2json writes it): a passing test
// that logs, a failing one with a passing and a failing subtest, a skipped one, a skipped
// subtest, and the package's summary line.
const stream = `{"Action":"start","Package":"example.com/p"}
{"Action":"run","Package":"example.com/p","Test":"TestPass"}
{"Action":"output","Package":"example.com/p","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"example.com/p","Test":"TestPass","Output":"    p_test.go:9: figure 42 ms\n"}
{"Action":"output","Package":"example.com/p","Test":"TestPass","Output":"--- PASS: TestPass (0.00s)\n"}
{"Action":"pass","Package":"example.com/p","Test":"TestPass","Elapsed":0}
{"Action":"run","Package":"example.com/p","Test":"TestFail"}
{"Action":"output","Package":"example.com/p","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"run","Package":"example.com/p","Test":"TestFail/ok"}
{"Action":"output","Package":"example.com/p","Test":"TestFail/ok","Output":"    p_test.go:20: fine\n"}
{"Action":"pass","Package":"example.com/p","Test":"TestFail/ok","Elapsed":0}
{"Action":"run","Package":"example.com/p","Test":"TestFail/bad"}
{"Action":"output","Package":"example.com/p","Test":"TestFail/bad","Output":"    p_test.go:22: got 3, want 4\n"}
{"Action":"output","Package":"example.com/p","Test":"TestFail/bad","Output":"    --- FAIL: TestFail/bad (0.00s)\n"}
{"Action":"fail","Package":"example.com/p","Test":"TestFail/bad","Elapsed":0}
{"Action":"output","Package":"example.com/p","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"example.com/p","Test":"TestFail","Elapsed":0}
{"Action":"run","Package":"example.com/p","Test":"TestSkip"}
{"Action":"output","Package":"example.com/p","Test":"TestSkip","Output":"    p_test.go:30: promtool is not installed\n"}
{"Action":"output","Package":"example.com/p","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"example.com/p","Test":"TestSkip","Elapsed":0}
{"Action":"run","Package":"example.com/p","Test":"TestSome/linux"}
{"Action":"output","Package":"example.com/p","Test":"TestSome/linux","Output":"    --- SKIP: TestSome/linux (0.00s)\n"}
{"Action":"skip","Package":"example.com/p","Test":"TestSome/linux","Elapsed":0}
{"Action":"pass","Package":"example.com/p","Test":"TestSome","Elapsed":0}
{"Action":"output","Package":"example.com/p","Output":"FAIL\n"}
{"Action":"output","Package":"example.com/p","Output":"FAIL\texample.com/p\t0.01s\n"}
{"Action":"fail","Package":"example.com/p","Elapsed":0.01}
not json: a line go test printed itself
`

func TestSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		verbose         bool
		want, wantNot   []string
		passed, skipped int
	}{
		{
			name: "failures only",
			want: []string{"p_test.go:22: got 3, want 4", "--- FAIL: TestFail (0.00s)", "FAIL\texample.com/p\t0.01s",
				"not json: a line go test printed itself", "tests: 3 passed, 2 failed, 2 skipped",
				"skipped: example.com/p TestSkip: p_test.go:30: promtool is not installed", "skipped: example.com/p TestSome/linux: (no reason given)"},
			wantNot: []string{"figure 42 ms", "=== RUN", "--- SKIP"},
		},
		{
			name:    "verbose",
			verbose: true,
			want:    []string{"figure 42 ms", "--- PASS: TestPass", "got 3, want 4", "tests: 3 passed, 2 failed, 2 skipped"},
			wantNot: []string{"=== RUN"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			s := newSummary(&out, tt.verbose)
			if err := s.read(strings.NewReader(stream)); err != nil {
				t.Fatal(err)
			}
			s.report()
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
			// The failed test's output comes in the order it was written.
			if i, j := strings.Index(out.String(), "fine"), strings.Index(out.String(), "got 3"); i < 0 || j < i {
				t.Errorf("subtest output out of order:\n%s", out.String())
			}
		})
	}
}

// TestExitStatus: the command's failure is testsum's, and so is a failed test in a command that
// exited 0; a clean run exits 0.
func TestExitStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	failing := file("failing.jsonl", `{"Action":"fail","Package":"p","Test":"TestX"}`+"\n")
	clean := file("clean.jsonl", `{"Action":"pass","Package":"p","Test":"TestX"}`+"\n")
	for _, tt := range []struct {
		name string
		argv []string
		want int
	}{
		{"clean", []string{"cat", clean}, 0},
		{"a test failed", []string{"cat", failing}, 1},
		{"the command failed", []string{"sh", "-c", "cat " + clean + "; exit 3"}, 3},
		{"no such command", []string{filepath.Join(dir, "missing")}, 2},
	} {
		var out, errOut bytes.Buffer
		if got := run(context.Background(), tt.argv, false, &out, &errOut); got != tt.want {
			t.Errorf("%s: exit %d, want %d (%s%s)", tt.name, got, tt.want, out.String(), errOut.String())
		}
	}
}
