package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ragtail/ragtail/loadgen/bench"
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

	doc, err := bench.ReadResults(o.files, o.partial, stderr)
	if err != nil {
		return err
	}
	return bench.WriteDocument(stdout, doc, o.json, o.html, o.quiet)
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
