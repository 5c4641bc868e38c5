// Command telab compares telemetry's cost in two builds, side by side: it runs
// BenchmarkPipelineTelemetry from two compiled telemetry test binaries (A, the code before; B,
// the code after) in fresh processes taking turns, pair after pair, A first in one pair and B
// first in the next (ABBA), and reports each build's figure, the paired differences, and a sign
// test of them. The order alternates because the run that comes first in a pair can read lower
// than the one after it whichever build it is, by a few points on a 2-core machine.
//
// The verdict is the sign test's (two-sided, exact binomial, ties dropped): B differs from A at
// p < 0.05, which takes at least six pairs all the same way. The same test on the differences
// second-run-less-first-run reports the order effect.
//
//	go test -c -o a.test ./telemetry/   # at the base commit
//	go test -c -o b.test ./telemetry/   # at the change
//	go run ./tools/telab -a a.test -b b.test -pairs 8 -corpus tiny -arms all
//
// make bench-telemetry-ab BASE=<commit> builds both and runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	a := flag.String("a", "", "the telemetry test binary of the code before (go test -c ./telemetry/)")
	b := flag.String("b", "", "the telemetry test binary of the code after")
	pairs := flag.Int("pairs", 8, "pairs of runs, A and B in turn, the order reversed every other pair")
	corpus := flag.String("corpus", "tiny", "the benchmark's corpus: tiny or default")
	requests := flag.Int("requests", 0, "requests a run (-test.benchtime Nx; 0: 120000 on the tiny corpus, 12000 on the default, as make bench-telemetry)")
	arms := flag.String("arms", "all", "-telemetry.arms of each run (off always runs)")
	metric := flag.String("metric", "", "the figure compared, a unit of the benchmark's output line (default: loss_% when -arms has all, else the loss of its first arm, loss_<arm>_%)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: telab -a A.test -b B.test [flags]\n\n"+
			"Runs BenchmarkPipelineTelemetry from two telemetry test binaries in fresh processes taking\n"+
			"turns (ABBA) and reports each build's figure, the paired differences B-A and a sign test.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *a == "" || *b == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	n := *requests
	if n == 0 {
		n = map[string]int{"tiny": 120000, "default": 12000}[*corpus]
	}
	if n <= 0 || *pairs < 1 {
		fmt.Fprintln(os.Stderr, "telab: -corpus must be tiny or default (or -requests set), and -pairs at least 1")
		os.Exit(2)
	}
	if *metric == "" {
		*metric = defaultMetric(*arms)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := []string{"-test.run", "^$", "-test.bench", "PipelineTelemetry/corpus=" + *corpus + "$",
		"-test.benchtime", strconv.Itoa(n) + "x", "-test.benchmem", "-telemetry.arms=" + *arms}
	runs, err := runPairs(ctx, os.Stderr, [2]string{*a, *b}, args, *pairs, *metric)
	if len(runs) > 0 {
		report(os.Stdout, runs, *metric)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "telab:", err)
		os.Exit(1)
	}
}

// defaultMetric is the figure compared when -metric is not given: everything on's loss (loss_%)
// when arms has the all arm, otherwise the loss of its first arm, which the benchmark reports as
// loss_<arm>_%.
func defaultMetric(arms string) string {
	names := strings.Split(arms, ",")
	if slices.Contains(names, "all") || names[0] == "" {
		return "loss_%"
	}
	return "loss_" + names[0] + "_%"
}

// run is one pair's figures: A's and B's, and whether A ran first.
type run struct {
	a, b    float64
	aFirst  bool
	extraA  map[string]float64
	extraB  map[string]float64
	pairNum int
}

// order returns which build runs first in pair i: A in even pairs, B in odd ones.
func order(i int) (aFirst bool) { return i%2 == 0 }

// runPairs runs the pairs, logging each run to log, and returns the pairs completed (all of
// them, or those before an error or an interrupt).
func runPairs(ctx context.Context, log io.Writer, bins [2]string, args []string, pairs int, metric string) ([]run, error) {
	var done []run
	for i := range pairs {
		r := run{aFirst: order(i), pairNum: i + 1}
		seq := []int{0, 1}
		if !r.aFirst {
			seq = []int{1, 0}
		}
		for _, which := range seq {
			figs, err := runOnce(ctx, bins[which], args)
			if err != nil {
				return done, fmt.Errorf("pair %d, %s: %w", i+1, "AB"[which:which+1], err)
			}
			v, ok := figs[metric]
			if !ok {
				return done, fmt.Errorf("pair %d, %s: no %q in the benchmark's output", i+1, "AB"[which:which+1], metric)
			}
			if which == 0 {
				r.a, r.extraA = v, figs
			} else {
				r.b, r.extraB = v, figs
			}
			fmt.Fprintf(log, "pair %d/%d  %s  %s %.2f\n", i+1, pairs, "AB"[which:which+1], metric, v)
		}
		done = append(done, r)
	}
	return done, nil
}

// runOnce runs one benchmark process and returns the figures of its result line.
func runOnce(ctx context.Context, bin string, args []string) (map[string]float64, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s: %w: %s", bin, err, lastLines(out.String()+stderr.String(), 5))
	}
	figs, err := parseResult(out.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	return figs, nil
}

// parseResult reads the figures of the BenchmarkPipelineTelemetry line in a test binary's
// output: "BenchmarkPipelineTelemetry/corpus=tiny-2  120000  15988 ns/op  26.60 loss_% ...", as
// unit -> value.
func parseResult(out string) (map[string]float64, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkPipelineTelemetry/") {
			continue
		}
		figs := make(map[string]float64)
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark line: %q is not a number", f[i])
			}
			figs[f[i+1]] = v
		}
		return figs, nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("no BenchmarkPipelineTelemetry result line in the output")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// signTest returns the two-sided exact p-value of the sign test of diffs: the probability,
// under a fair coin, of a split of the non-zero differences at least as uneven as theirs. Zero
// differences are dropped; with none left it is 1.
func signTest(diffs []float64) (pos, neg int, p float64) {
	for _, d := range diffs {
		switch {
		case d > 0:
			pos++
		case d < 0:
			neg++
		}
	}
	n, k := pos+neg, min(pos, neg)
	if n == 0 {
		return pos, neg, 1
	}
	tail := 0.0
	for i := 0; i <= k; i++ {
		tail += binom(n, i)
	}
	return pos, neg, math.Min(1, 2*tail/math.Exp2(float64(n)))
}

// binom returns n choose k.
func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// report prints the pairs and the summary.
func report(w io.Writer, runs []run, metric string) {
	fmt.Fprintf(w, "%-5s %-6s %10s %10s %10s\n", "pair", "first", "A", "B", "B-A")
	var as, bs, diffs, orderDiffs []float64
	for _, r := range runs {
		first, second := r.a, r.b
		firstName := "A"
		if !r.aFirst {
			first, second, firstName = r.b, r.a, "B"
		}
		fmt.Fprintf(w, "%-5d %-6s %10.2f %10.2f %+10.2f\n", r.pairNum, firstName, r.a, r.b, r.b-r.a)
		as, bs = append(as, r.a), append(bs, r.b)
		diffs = append(diffs, r.b-r.a)
		orderDiffs = append(orderDiffs, second-first)
	}
	fmt.Fprintf(w, "%s: A median %.2f (%.2f to %.2f), B median %.2f (%.2f to %.2f), %d pairs\n", metric,
		median(as), slices.Min(as), slices.Max(as), median(bs), slices.Min(bs), slices.Max(bs), len(runs))
	for _, unit := range []string{"on_allocs/req", "all_B/req"} {
		var ua, ub []float64
		for _, r := range runs {
			if v, ok := r.extraA[unit]; ok {
				ua = append(ua, v)
			}
			if v, ok := r.extraB[unit]; ok {
				ub = append(ub, v)
			}
		}
		if len(ua) > 0 && len(ub) > 0 {
			fmt.Fprintf(w, "%s: A median %.2f, B median %.2f\n", unit, median(ua), median(ub))
		}
	}
	pos, neg, p := signTest(diffs)
	fmt.Fprintf(w, "B-A: median %+.2f; %d pairs higher, %d lower; sign test p = %.3f\n", median(diffs), pos, neg, p)
	opos, oneg, op := signTest(orderDiffs)
	fmt.Fprintf(w, "order (second run less first): median %+.2f; %d higher, %d lower; sign test p = %.3f\n",
		median(orderDiffs), opos, oneg, op)
	switch {
	case p >= 0.05:
		fmt.Fprintf(w, "verdict: no difference between A and B detected (p >= 0.05)\n")
	case pos > neg:
		fmt.Fprintf(w, "verdict: B's %s is higher than A's (p < 0.05)\n", metric)
	default:
		fmt.Fprintf(w, "verdict: B's %s is lower than A's (p < 0.05)\n", metric)
	}
}
