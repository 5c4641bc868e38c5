package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/ragtail/ragtail/internal/loadgen/bench"
	"github.com/ragtail/ragtail/loadgen/lab"
)

func runReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var o bench.ReportOptions
	fs := newFlagSet("report", "FILE... [flags]", `Renders a result file written by "ragtail bench --json", "ragtail sweep --json" or
"ragtail lab --json": as a terminal table (printed unless --quiet), as one self-contained HTML
page that needs no network (--html), or as JSON again (--json). Given several bench files, for
example from load generators on several hosts, it merges them exactly: the HDR histograms are
added and every percentile, confidence interval and tail fit is recomputed from them; counts add
up and throughputs are taken over the union of the runs' windows. The segments of a multi-host
run (bench --segment i/n) merge into the run they are parts of; report checks that all n are
there, once each, and says so. Sweep files render alone, except the segments of a multi-host
sweep (sweep --segment i/n), which merge point by point with the same check.
Flags may come before or after the files; "-" as an output writes it to standard output.

Examples:
  ragtail report r.json
  ragtail report r.json --html r.html
  ragtail report host1.json host2.json --json merged.json --html merged.html
  ragtail report seg-*.json --json run.json
  ragtail report a.json b.json --compare --html ab.html   (side by side, not merged)
  ragtail report --compare base.json new.json --fail-on-regression   (exit 99 when new is worse)
  ragtail report run.jsonl --csv run.csv       (the file of bench --save-detailed)`)
	o.RegisterFlags(fs)
	files, err := parseFlagsAndArgs(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "ragtail report: no result file given")
		fs.Usage()
		return errUsage
	}
	o.Files = files
	if lab.IsLabFile(files[0]) {
		return writeLab(o, stdout)
	}
	return bench.Report(o, stdout, stderr)
}

// writeLab renders the results of `ragtail lab --json` files, as the lab prints and pages them.
func writeLab(o bench.ReportOptions, stdout io.Writer) error {
	var results []*lab.Result
	for _, path := range o.Files {
		rs, err := lab.ReadFile(path)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	return lab.Render(stdout, results, o.JSONOut, o.HTMLOut, o.Quiet)
}

// parseFlagsAndArgs parses flags that may come before, between or after positional arguments
// (Go's flag package stops at the first positional one) and returns the positional ones. "--"
// ends the flags. Help and usage errors behave as in parseFlags.
func parseFlagsAndArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil, flag.ErrHelp
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
