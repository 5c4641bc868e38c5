package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
)

// writeBenchFile summarises a deterministic run of n requests at 20 req/s and writes it as a
// bench file.
func writeBenchFile(tb testing.TB, dir, name string, seed uint64, n int) string {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	res := &loadgen.Result{Start: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Config: loadgen.RunInfo{URL: "http://127.0.0.1:8000/v1/chat/completions", Shape: "poisson(rate=20)", RequestRate: 20, Seed: seed}}
	var t time.Duration
	for i := range n {
		t += time.Duration(r.ExpFloat64() / 20 * float64(time.Second))
		ttft := time.Duration((50 + 100*r.ExpFloat64()) * float64(time.Millisecond))
		rec := loadgen.Record{Index: i, Intended: t, Sent: t, FirstToken: t + ttft, End: t + 2*ttft, Status: 200,
			OutputTokens: 8, TraceID: fmt.Sprintf("%032x", i+1),
			Chunks: []loadgen.Chunk{{At: t + ttft, Tokens: 4}, {At: t + 2*ttft, Tokens: 4}}}
		res.Records = append(res.Records, rec)
		res.Duration = max(res.Duration, rec.End)
	}
	path := filepath.Join(dir, name)
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, report.Summarize(res, report.Options{})); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

func TestReportRender(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writeBenchFile(t, dir, "a.json", 1, 300)
	htmlOut, jsonOut := filepath.Join(dir, "a.html"), filepath.Join(dir, "copy.json")
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"report", a, "--html", htmlOut, "--json", jsonOut}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "ragtail bench result") || !strings.Contains(stdout.String(), "P99 E2EL") {
		t.Errorf("text:\n%s", stdout.String())
	}
	page, err := os.ReadFile(htmlOut)
	if err != nil || !bytes.Contains(page, []byte(`id="percentile-spectrum"`)) {
		t.Errorf("html: %v", err)
	}
	orig, _ := os.ReadFile(a)
	again, _ := os.ReadFile(jsonOut)
	if !bytes.Equal(orig, again) {
		t.Error("--json of one file does not reproduce it")
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestReportMerge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writeBenchFile(t, dir, "a.json", 1, 300)
	b := writeBenchFile(t, dir, "b.json", 2, 200)
	var stdout bytes.Buffer
	// Flags before, between and after the files; JSON to stdout.
	err := run(context.Background(), []string{"report", "--quiet", a, "--json", "-", b}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Schema     string   `json:"schema"`
		Completed  int      `json:"completed"`
		MergedFrom int      `json:"merged_from"`
		Sources    []string `json:"sources"`
		RPS        float64  `json:"request_throughput"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
	}
	if m.Schema != report.SchemaBench || m.Completed != 500 || m.MergedFrom != 2 || len(m.Sources) != 2 {
		t.Errorf("merged: %+v", m)
	}
}

func TestReportErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeBenchFile(t, dir, "good.json", 1, 50)
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"schema": "something/else"}`), 0o644)
	notJSON := filepath.Join(dir, "notjson.json")
	_ = os.WriteFile(notJSON, []byte("p99 = 12 ms"), 0o644)
	var sweepBuf bytes.Buffer
	f, err := report.Read(good)
	if err != nil {
		t.Fatal(err)
	}
	_ = report.WriteJSON(&sweepBuf, report.SummarizeSweep([]*report.Bench{f.Bench}, report.SweepOptions{}))
	sweep := filepath.Join(dir, "sweep.json")
	_ = os.WriteFile(sweep, sweepBuf.Bytes(), 0o644)

	tests := []struct {
		name string
		args []string
		is   error
		msg  string
	}{
		{"no file", []string{}, errUsage, "no result file"},
		{"missing file", []string{filepath.Join(dir, "nope.json")}, os.ErrNotExist, "nope.json"},
		{"other schema", []string{bad}, report.ErrUnknownSchema, "something/else"},
		{"not json", []string{notJSON}, report.ErrUnknownSchema, "invalid JSON"},
		{"sweeps do not merge", []string{good, sweep}, nil, "only bench results merge"},
		{"unknown flag", []string{good, "--pdf", "x"}, errUsage, ""},
		{"same output twice", []string{good, "--html", "x", "--json", "x"}, nil, "both name"},
		{"csv of a bench file", []string{good, "--csv", filepath.Join(dir, "x.csv")}, nil, "not a ragtail.requests/v1 header"},
		{"csv of two files", []string{good, good, "--csv", "-"}, nil, "one per-request file"},
		{"compare one file", []string{good, "--compare", "--html", "-"}, nil, "at least two"},
		{"compare three without html", []string{good, good, good, "--compare"}, nil, "give --html"},
		{"regression without compare", []string{good, good, "--fail-on-regression"}, nil, "give --compare BASE NEW"},
		{"regression of three", []string{good, good, good, "--compare", "--fail-on-regression"}, nil, "two files, BASE and NEW; got 3"},
		{"regression with html on stdout", []string{good, good, "--compare", "--fail-on-regression", "--html", "-"}, nil, "write --html to a file"},
		{"regression tolerance", []string{good, good, "--compare", "--regression-tolerance", "5"}, nil, "--regression-tolerance 5: want a fraction"},
		{"csv with html", []string{good, "--csv", "-", "--html", "x"}, nil, "does not combine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), append([]string{"report"}, tt.args...), io.Discard, &stderr)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error()+stderr.String(), tt.msg) {
				t.Errorf("error %q (stderr %q) does not say %q", err, stderr.String(), tt.msg)
			}
		})
	}
}

func TestReportCSVAndDebugLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := &loadgen.Result{Start: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Config: loadgen.RunInfo{URL: "http://127.0.0.1:8000/v1/chat/completions", Shape: "constant(rate=10)", RequestRate: 10}}
	for i := range 20 {
		at := time.Duration(i) * 100 * time.Millisecond
		res.Records = append(res.Records, loadgen.Record{Index: i, Intended: at, Sent: at, FirstToken: at + 40*time.Millisecond,
			End: at + 90*time.Millisecond, Status: 200, OutputTokens: 1, TraceID: fmt.Sprintf("%032x", i+1),
			ServerTiming: map[string]float64{"retrieve": 12.5, "generate": 70}})
		res.Duration = max(res.Duration, at+90*time.Millisecond)
	}
	jsonl := filepath.Join(dir, "r.jsonl")
	var buf bytes.Buffer
	if err := report.WriteDetailedJSONL(&buf, res); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jsonl, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var csvOut bytes.Buffer
	if err := run(context.Background(), []string{"report", jsonl, "--csv", "-"}, &csvOut, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
	if len(lines) != 21 || !strings.HasPrefix(lines[0], "i,") || !strings.HasSuffix(lines[1], "generate=70;retrieve=12.5") {
		t.Fatalf("csv has %d lines, first two %q", len(lines), lines[:min(2, len(lines))])
	}

	benchPath := filepath.Join(dir, "r.json")
	buf.Reset()
	if err := report.WriteJSON(&buf, report.Summarize(res, report.Options{})); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(benchPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	err := run(context.Background(), []string{"report", benchPath, "--html", "-", "--debug-url", "http://127.0.0.1:9464"},
		&page, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := `href="http://127.0.0.1:9464/debug/profiles?trace_id=` + fmt.Sprintf("%032x", 1) + `"` // equal latencies: the lowest index first
	if !strings.Contains(page.String(), want) {
		t.Errorf("page lacks %s", want)
	}
}

func TestReportCompare(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writeBenchFile(t, dir, "a.json", 1, 200)
	b := writeBenchFile(t, dir, "b.json", 2, 300)
	var page bytes.Buffer
	if err := run(context.Background(), []string{"report", a, b, "--compare", "--html", "-"}, &page, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ragtail bench comparison (2 runs)", `id="compare-summary"`, `id="compare-spectrum"`,
		"a.json", "b.json", "<td class=\"n\">200</td><td class=\"n\">300</td>"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

func TestReportSweepRenders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := report.Read(writeBenchFile(t, dir, "p.json", 3, 120))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_ = report.WriteJSON(&buf, report.SummarizeSweep([]*report.Bench{f.Bench}, report.SweepOptions{}))
	path := filepath.Join(dir, "s.json")
	_ = os.WriteFile(path, buf.Bytes(), 0o644)
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"report", "--quiet", "--", "--html"}, &stdout, io.Discard); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file named --html after -- : err = %v", err)
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"report", path}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "ragtail sweep result") {
		t.Errorf("sweep text:\n%s", stdout.String())
	}
}
