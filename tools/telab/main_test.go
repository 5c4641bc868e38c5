package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSignTest holds the sign test to the exact binomial law: the two-sided p of k or fewer of n
// signs the same way is 2·sum_{i<=k} C(n,i)/2^n, capped at 1, zeros dropped.
func TestSignTest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		diffs    []float64
		pos, neg int
		p        float64
	}{
		{"eight of eight higher", []float64{1, 2, 3, 4, 5, 6, 7, 8}, 8, 0, 2.0 / 256},
		{"seven of eight lower", []float64{-1, -2, -3, -4, -5, -6, -7, 8}, 1, 7, 2.0 * 9 / 256},
		{"even split", []float64{1, -1, 2, -2}, 2, 2, 1},
		{"ties dropped", []float64{1, 1, 1, 1, 1, 1, 0}, 6, 0, 2.0 / 64},
		{"six of six", []float64{-1, -1, -1, -1, -1, -1}, 0, 6, 2.0 / 64},
		{"five of six", []float64{-1, -1, -1, -1, -1, 1}, 1, 5, 2.0 * 7 / 64},
		{"nothing", nil, 0, 0, 1},
	} {
		pos, neg, p := signTest(tc.diffs)
		if pos != tc.pos || neg != tc.neg || math.Abs(p-tc.p) > 1e-12 {
			t.Errorf("%s: %d higher, %d lower, p = %v; want %d, %d, %v", tc.name, pos, neg, p, tc.pos, tc.neg, tc.p)
		}
	}
}

// TestOrder checks the ABBA order: A first in even pairs, B in odd ones, so that each build
// runs first in half the pairs.
func TestOrder(t *testing.T) {
	first := 0
	for i := range 8 {
		if order(i) {
			first++
		}
		if order(i) == order(i+1) {
			t.Errorf("pairs %d and %d start with the same build", i, i+1)
		}
	}
	if first != 4 {
		t.Errorf("A first in %d of 8 pairs, want 4", first)
	}
}

// TestDefaultMetric: everything on's loss when the arms have all, else the first arm's.
func TestDefaultMetric(t *testing.T) {
	for arms, want := range map[string]string{
		"all":               "loss_%",
		"":                  "loss_%",
		"spans,all,aa":      "loss_%",
		"spans":             "loss_spans_%",
		"spans-floor,spans": "loss_spans-floor_%",
		"all-labels,aa":     "loss_all-labels_%",
	} {
		if got := defaultMetric(arms); got != want {
			t.Errorf("defaultMetric(%q) = %q, want %q", arms, got, want)
		}
	}
}

// TestParseResult reads a result line as the telemetry test binary prints it.
func TestParseResult(t *testing.T) {
	out := "goos: linux\ngoarch: amd64\npkg: github.com/ragtail/ragtail/telemetry\n" +
		"BenchmarkPipelineTelemetry/corpus=tiny-2         \t  120000\t     15305 ns/op\t     13019 aa_B/req\t" +
		"        30.19 aa_allocs/req\t         1.645 loss_aa_%\t        24.91 loss_%\t    6509 B/op\t      15 allocs/op\nPASS\n"
	figs, err := parseResult(out)
	if err != nil {
		t.Fatal(err)
	}
	for unit, want := range map[string]float64{"ns/op": 15305, "loss_%": 24.91, "loss_aa_%": 1.645, "aa_allocs/req": 30.19, "allocs/op": 15} {
		if figs[unit] != want {
			t.Errorf("%s = %v, want %v", unit, figs[unit], want)
		}
	}
	if _, err := parseResult("PASS\n"); err == nil {
		t.Error("no result line: no error")
	}
	if _, err := parseResult("BenchmarkPipelineTelemetry/corpus=tiny-2 10 x ns/op\n"); err == nil {
		t.Error("a figure that is not a number: no error")
	}
}

// TestRunPairs runs the real benchmark from the real telemetry test binary, as A and as B, in
// two short pairs, and checks the report: every pair's figures, the ABBA order, the summary and
// a verdict. An interrupted run returns what was done and the context's error.
func TestRunPairs(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "telemetry.test")
	build := exec.CommandContext(t.Context(), "go", "test", "-c", "-o", bin, "github.com/ragtail/ragtail/telemetry")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	args := []string{"-test.run", "^$", "-test.bench", "PipelineTelemetry/corpus=tiny$", "-test.benchtime", "1200x",
		"-test.benchmem", "-telemetry.arms=all", "-telemetry.rounds=2"}
	var log bytes.Buffer
	runs, err := runPairs(t.Context(), &log, [2]string{bin, bin}, args, 2, "loss_%")
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(runs) != 2 || !runs[0].aFirst || runs[1].aFirst {
		t.Fatalf("runs %+v, want two pairs, A first in the first", runs)
	}
	for _, r := range runs {
		if r.extraA["on_allocs/req"] <= 0 || r.extraB["on_allocs/req"] <= 0 {
			t.Errorf("pair %d: on_allocs/req %v and %v", r.pairNum, r.extraA["on_allocs/req"], r.extraB["on_allocs/req"])
		}
	}
	if got := strings.Count(log.String(), "loss_%"); got != 4 {
		t.Errorf("progress: %d runs logged, want 4:\n%s", got, log.String())
	}
	var out bytes.Buffer
	report(&out, runs, "loss_%")
	for _, want := range []string{"loss_%: A median", "on_allocs/req: A median", "B-A: median", "order (second run less first)", "verdict: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	runs, err = runPairs(ctx, &log, [2]string{bin, bin}, args, 2, "loss_%")
	if len(runs) != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %d runs, %v; want none and context.Canceled", len(runs), err)
	}
	if _, err := runPairs(t.Context(), &log, [2]string{bin, bin}, args, 1, "no_such_%"); err == nil || !strings.Contains(err.Error(), "no_such_%") {
		t.Errorf("a metric the output lacks: %v", err)
	}
}
