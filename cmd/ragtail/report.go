package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ragtail/ragtail/loadgen/bench"
	"github.com/ragtail/ragtail/loadgen/report"
)

type reportOptions struct {
	html    string
	json    string
	quiet   bool
	partial bool
	files   []string
}

func runReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var o reportOptions
	fs := newFlagSet("report", "FILE... [flags]", `Renders a result file written by "ragtail bench --json" or "ragtail sweep --json": as a
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
  ragtail report seg-*.json --json run.json`)
	fs.StringVar(&o.html, "html", "", "write the HTML report to this file")
	fs.StringVar(&o.json, "json", "", "write the (merged) result JSON to this file")
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
	if o.html != "" && o.html == o.json && o.html != "-" {
		return fmt.Errorf("--html and --json both name %s", o.html)
	}
	if o.html == "-" && o.json == "-" {
		return errors.New("--html and --json cannot both go to standard output")
	}

	var doc report.Document // *report.Bench or *report.Sweep
	if len(o.files) == 1 {
		f, err := report.Read(o.files[0])
		if err != nil {
			return err
		}
		doc = f.Bench
		if f.Sweep != nil {
			doc = f.Sweep
		}
	} else {
		benches := make([]*report.Bench, 0, len(o.files))
		for _, path := range o.files {
			f, err := report.Read(path)
			if err != nil {
				return err
			}
			if f.Bench == nil {
				return fmt.Errorf("%s is a sweep result: only bench results merge (render it alone)", path)
			}
			if len(f.Bench.Sources) == 0 {
				f.Bench.Sources = []string{path}
			}
			benches = append(benches, f.Bench)
		}
		note, err := report.CheckSegments(benches)
		switch {
		case err != nil && !o.partial || err != nil && note == "":
			if note != "" {
				return fmt.Errorf("%w (pass --partial to merge what is there)", err)
			}
			return err
		case err != nil:
			fmt.Fprintf(stderr, "ragtail report: warning: %v\n", err)
		case note != "":
			fmt.Fprintf(stderr, "ragtail report: %s\n", note)
		}
		merged, err := report.Merge(benches...)
		if err != nil {
			return err
		}
		doc = merged
	}

	if o.json != "" {
		if err := bench.WriteOutput(o.json, stdout, func(w io.Writer) error { return report.WriteJSON(w, doc) }); err != nil {
			return err
		}
	}
	if o.html != "" {
		if err := bench.WriteOutput(o.html, stdout, func(w io.Writer) error { return report.WriteHTML(w, doc) }); err != nil {
			return err
		}
	}
	if o.quiet || o.json == "-" || o.html == "-" {
		return nil
	}
	switch d := doc.(type) {
	case *report.Bench:
		return report.WriteText(stdout, d)
	case *report.Sweep:
		return report.WriteSweepText(stdout, d)
	}
	return nil
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
