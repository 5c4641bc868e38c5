package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ragtail/ragtail/loadgen/bench"
	"github.com/ragtail/ragtail/loadgen/lab"
	"github.com/ragtail/ragtail/loadgen/report"
)

type reportOptions struct {
	html     string
	json     string
	csv      string
	debugURL string
	compare  bool
	quiet    bool
	partial  bool
	files    []string
}

func runReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var o reportOptions
	fs := newFlagSet("report", "FILE... [flags]", `Renders a result file written by "ragtail bench --json", "ragtail sweep --json" or "ragtail lab --json": as a
terminal table (printed unless --quiet), as one self-contained HTML page that needs no network
(--html), or as JSON again (--json). Given several bench files, for example from load generators
on several hosts, it merges them exactly: the HDR histograms are added and every percentile,
confidence interval and tail fit is recomputed from them; counts add up and throughputs are taken
over the union of the runs' windows. Sweep files render but do not merge. The segments of a
multi-host run (bench --segment i/n) merge into the run they are parts of; report checks that
all n are there, once each, and says so.
Flags may come before or after the files; "-" as an output writes it to standard output.

Examples:
  ragtail report r.json
  ragtail report r.json --html r.html
  ragtail report host1.json host2.json --json merged.json --html merged.html
  ragtail report seg-*.json --json run.json
  ragtail report a.json b.json --compare --html ab.html   (side by side, not merged)
  ragtail report run.jsonl --csv run.csv       (the file of bench --save-detailed)`)
	fs.StringVar(&o.html, "html", "", "write the HTML report to this file")
	fs.StringVar(&o.json, "json", "", "write the (merged) result JSON to this file")
	fs.StringVar(&o.csv, "csv", "", "convert the per-request JSONL of bench --save-detailed (the one file given) to CSV in this file")
	fs.StringVar(&o.debugURL, "debug-url", "",
		"origin of the target's /debug/traces and /debug/profiles for the HTML's slowest-request links (default the target URL's origin; ragtail serve answers them on --admin-addr)")
	fs.BoolVar(&o.compare, "compare", false, "with several bench files and --html, show them side by side instead of merging them")
	fs.BoolVar(&o.quiet, "quiet", false, "do not print the terminal table")
	fs.BoolVar(&o.partial, "partial", false, "merge the segments of a multi-host run even when some are missing")
	files, err := parseFlagsAndArgs(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	o.files = files
	if len(o.files) == 0 {
		fmt.Fprintln(stderr, "ragtail report: no result file given")
		fs.Usage()
		return errUsage
	}
	if o.csv != "" {
		return o.writeCSV(stdout)
	}
	if o.compare {
		return o.writeComparison(stdout)
	}
	if o.html != "" && o.html == o.json && o.html != "-" {
		return fmt.Errorf("--html and --json both name %s", o.html)
	}
	if o.html == "-" && o.json == "-" {
		return errors.New("--html and --json cannot both go to standard output")
	}
	if lab.IsLabFile(o.files[0]) {
		return o.writeLab(stdout)
	}

	doc, err := bench.ReadResults(o.files, o.partial, stderr)
	if err != nil {
		return err
	}
	return bench.WriteDocument(stdout, doc, o.json, o.html, o.quiet, report.HTMLOptions{DebugURL: o.debugURL})
}

// writeLab renders the results of `ragtail lab --json` files, as the lab prints and pages them.
func (o *reportOptions) writeLab(stdout io.Writer) error {
	var results []*lab.Result
	for _, path := range o.files {
		rs, err := lab.ReadFile(path)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	return lab.Render(stdout, results, o.json, o.html, o.quiet)
}

// writeComparison renders several bench files side by side.
func (o *reportOptions) writeComparison(stdout io.Writer) error {
	if o.html == "" || o.json != "" {
		return errors.New("--compare writes an HTML page: give --html FILE (and no --json; merge without --compare)")
	}
	benches := make([]*report.Bench, 0, len(o.files))
	for _, path := range o.files {
		f, err := report.Read(path)
		if err != nil {
			return err
		}
		if f.Bench == nil {
			return fmt.Errorf("%s is a sweep result: --compare compares bench results", path)
		}
		benches = append(benches, f.Bench)
	}
	c, err := report.NewComparison(o.files, benches)
	if err != nil {
		return err
	}
	return bench.WriteOutput(o.html, stdout, func(w io.Writer) error {
		return report.WriteHTMLWith(w, c, report.HTMLOptions{DebugURL: o.debugURL})
	})
}

// writeCSV converts the one per-request JSONL given to CSV.
func (o *reportOptions) writeCSV(stdout io.Writer) error {
	if len(o.files) != 1 {
		return fmt.Errorf("--csv converts one per-request file (bench --save-detailed), got %d files", len(o.files))
	}
	if o.html != "" || o.json != "" {
		return errors.New("--csv converts a per-request file: it does not combine with --html or --json")
	}
	in, err := os.Open(o.files[0])
	if err != nil {
		return fmt.Errorf("--csv: %w", err)
	}
	defer func() { _ = in.Close() }() // read only
	return bench.WriteOutput(o.csv, stdout, func(w io.Writer) error {
		if err := report.WriteCSV(w, in); err != nil {
			return fmt.Errorf("%s: %w", o.files[0], err)
		}
		return nil
	})
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
