package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ragtail/ragtail/loadgen/report"
)

// ReportOptions configure the rendering of result files (the report command's flags).
type ReportOptions struct {
	Files    []string // bench or sweep result files; with CSVOut, one per-request JSONL file
	HTMLOut  string   // "-" for stdout
	JSONOut  string   // the (merged) result JSON, "-" for stdout
	CSVOut   string   // the per-request JSONL converted to CSV
	DebugURL string   // origin of the target's /debug/traces and /debug/profiles for the HTML links
	Compare  bool     // several bench files side by side in the HTML instead of merged
	Quiet    bool     // no terminal table
	Partial  bool     // merge the segments of a multi-host run even when some are missing
}

// RegisterFlags registers the report command's flags on fs, filling o (all but Files).
func (o *ReportOptions) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.HTMLOut, "html", "", "write the HTML report to this file")
	fs.StringVar(&o.JSONOut, "json", "", "write the (merged) result JSON to this file")
	fs.StringVar(&o.CSVOut, "csv", "", "convert the per-request JSONL of bench --save-detailed (the one file given) to CSV in this file")
	fs.StringVar(&o.DebugURL, "debug-url", "",
		"origin of the target's /debug/traces and /debug/profiles for the HTML's slowest-request links (default the target URL's origin; ragtail serve answers them on --admin-addr)")
	fs.BoolVar(&o.Compare, "compare", false, "with several bench files and --html, show them side by side instead of merging them")
	fs.BoolVar(&o.Quiet, "quiet", false, "do not print the terminal table")
	fs.BoolVar(&o.Partial, "partial", false, "merge the segments of a multi-host run even when some are missing")
}

// Report renders o.Files as o says: converted to CSV, compared side by side, or read as one
// document (merged, for several bench files) and written as JSON, HTML and the terminal table.
// Notes on a merge go to stderr.
func Report(o ReportOptions, stdout, stderr io.Writer) error {
	if len(o.Files) == 0 {
		return errors.New("no result file given")
	}
	if o.CSVOut != "" {
		return o.writeCSV(stdout)
	}
	if o.Compare {
		return o.writeComparison(stdout)
	}
	if err := o.CheckOutputs(); err != nil {
		return err
	}
	doc, err := ReadResults(o.Files, o.Partial, stderr)
	if err != nil {
		return err
	}
	return WriteDocument(stdout, doc, o.JSONOut, o.HTMLOut, o.Quiet, report.HTMLOptions{DebugURL: o.DebugURL})
}

// CheckOutputs refuses --html and --json naming one file, or both standard output.
func (o *ReportOptions) CheckOutputs() error {
	if o.HTMLOut != "" && o.HTMLOut == o.JSONOut && o.HTMLOut != "-" {
		return fmt.Errorf("--html and --json both name %s", o.HTMLOut)
	}
	if o.HTMLOut == "-" && o.JSONOut == "-" {
		return errors.New("--html and --json cannot both go to standard output")
	}
	return nil
}

// writeComparison renders several bench files side by side.
func (o *ReportOptions) writeComparison(stdout io.Writer) error {
	if o.HTMLOut == "" || o.JSONOut != "" {
		return errors.New("--compare writes an HTML page: give --html FILE (and no --json; merge without --compare)")
	}
	benches := make([]*report.Bench, 0, len(o.Files))
	for _, path := range o.Files {
		f, err := report.Read(path)
		if err != nil {
			return err
		}
		if f.Bench == nil {
			return fmt.Errorf("%s is a sweep result: --compare compares bench results", path)
		}
		benches = append(benches, f.Bench)
	}
	c, err := report.NewComparison(o.Files, benches)
	if err != nil {
		return err
	}
	return WriteOutput(o.HTMLOut, stdout, func(w io.Writer) error {
		return report.WriteHTMLWith(w, c, report.HTMLOptions{DebugURL: o.DebugURL})
	})
}

// writeCSV converts the one per-request JSONL given to CSV.
func (o *ReportOptions) writeCSV(stdout io.Writer) error {
	if len(o.Files) != 1 {
		return fmt.Errorf("--csv converts one per-request file (bench --save-detailed), got %d files", len(o.Files))
	}
	if o.HTMLOut != "" || o.JSONOut != "" {
		return errors.New("--csv converts a per-request file: it does not combine with --html or --json")
	}
	in, err := os.Open(o.Files[0])
	if err != nil {
		return fmt.Errorf("--csv: %w", err)
	}
	defer func() { _ = in.Close() }() // read only
	return WriteOutput(o.CSVOut, stdout, func(w io.Writer) error {
		if err := report.WriteCSV(w, in); err != nil {
			return fmt.Errorf("%s: %w", o.Files[0], err)
		}
		return nil
	})
}
