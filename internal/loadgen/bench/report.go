package bench

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ragtail/ragtail/loadgen"
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
	// FailOnRegression fails a --compare of two files (a *report.GateError) when the second is
	// worse than the first beyond sampling error and by more than Tolerance.
	FailOnRegression bool
	Tolerance        float64 // a fraction: 0.05 is 5%
	Quiet            bool    // no terminal table
	Partial          bool    // merge the segments of a multi-host run even when some are missing
}

// RegisterFlags registers the report command's flags on fs, filling o (all but Files).
func (o *ReportOptions) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.HTMLOut, "html", "", "write the HTML report to this file")
	fs.StringVar(&o.JSONOut, "json", "", "write the (merged) result JSON to this file")
	fs.StringVar(&o.CSVOut, "csv", "", "convert the per-request JSONL of bench --save-detailed (the one file given) to CSV in this file")
	fs.StringVar(&o.DebugURL, "debug-url", "",
		"origin of the target's /debug/traces and /debug/profiles for the HTML's slowest-request links (default the target URL's origin; ragtail serve answers them on --admin-addr)")
	fs.BoolVar(&o.Compare, "compare", false, "with several bench files and --html, show them side by side instead of merging them; with two\n"+
		"files BASE NEW and no --html, print a regression check of NEW against BASE (see --fail-on-regression);\n"+
		"two per-request files of bench --save-detailed add Mann-Whitney rank tests of TTFT, TPOT and E2EL")
	fs.BoolVar(&o.FailOnRegression, "fail-on-regression", false, "with --compare BASE NEW: exit with status 99 when NEW is worse than BASE beyond sampling error\n"+
		"(the 95% intervals apart, on the worse side) and by more than --regression-tolerance, in a percentile\n"+
		"of TTFT, TTFO, TPOT, ITL or E2EL, the request or output throughput, or the error rate")
	fs.Float64Var(&o.Tolerance, "regression-tolerance", report.DefaultRegressionTolerance, "with --compare BASE NEW: a latency or throughput change smaller than this fraction is no regression\n"+
		"(runs on a shared machine differ by a few percent that no interval of one run accounts for)")
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
	if o.FailOnRegression && !o.Compare {
		return errors.New("--fail-on-regression compares two files: give --compare BASE NEW")
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

// writeComparison renders several bench files side by side in HTML, and checks the second of
// two against the first for regressions, printing the check, unless writing the HTML page to
// standard output.
func (o *ReportOptions) writeComparison(stdout io.Writer) error {
	check := len(o.Files) == 2 && (o.FailOnRegression || o.HTMLOut == "")
	switch {
	case o.JSONOut != "":
		return errors.New("--compare writes an HTML page or a regression check, no --json (merge without --compare)")
	case o.FailOnRegression && len(o.Files) != 2:
		return fmt.Errorf("--fail-on-regression compares two files, BASE and NEW; got %d", len(o.Files))
	case !check && o.HTMLOut == "":
		return errors.New("--compare of more than two files writes an HTML page: give --html FILE (and no --json; merge without --compare)")
	case o.FailOnRegression && o.HTMLOut == "-":
		return errors.New("--fail-on-regression prints its check on standard output: write --html to a file")
	case !(o.Tolerance >= 0 && o.Tolerance < 1):
		return fmt.Errorf("--regression-tolerance %g: want a fraction from 0 to 1 (0.05 is 5%%)", o.Tolerance)
	}
	benches := make([]*report.Bench, 0, len(o.Files))
	var runs []*loadgen.Result // the runs of per-request files, for the rank tests
	for _, path := range o.Files {
		b, run, err := readCompared(path)
		if err != nil {
			return err
		}
		benches = append(benches, b)
		if run != nil {
			runs = append(runs, run)
		}
	}
	c, err := report.NewComparison(o.Files, benches)
	if err != nil {
		return err
	}
	if o.HTMLOut != "" {
		err := WriteOutput(o.HTMLOut, stdout, func(w io.Writer) error {
			return report.WriteHTMLWith(w, c, report.HTMLOptions{DebugURL: o.DebugURL})
		})
		if err != nil {
			return err
		}
	}
	if !check {
		return nil
	}
	rs := report.Regressions(benches[0], benches[1], o.Tolerance)
	regressed, checked := report.WriteRegressions(stdout, o.Files[0], o.Files[1], rs, o.Tolerance)
	if len(runs) == 2 {
		r, t := report.WriteRankTests(stdout, report.RankTests(runs[0], runs[1], o.Tolerance))
		regressed, checked = regressed+r, checked+t
	}
	fmt.Fprintf(stdout, "%d of %d figures regressed\n", regressed, checked)
	if !o.FailOnRegression {
		return nil
	}
	return report.RegressionError(regressed, checked)
}

// readCompared reads a file to compare: a bench result, or the per-request file of bench
// --save-detailed, summarised (with the default percentiles) and returned with its run too.
func readCompared(path string) (*report.Bench, *loadgen.Result, error) {
	if isRequestsFile(path) {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		defer func() { _ = f.Close() }() // read only
		run, err := report.ReadRequests(f)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		return report.Summarize(run, report.Options{}), run, nil
	}
	f, err := report.Read(path)
	if err != nil {
		return nil, nil, err
	}
	if f.Bench == nil {
		return nil, nil, fmt.Errorf("%s is a sweep result: --compare compares bench results", path)
	}
	return f.Bench, nil, nil
}

// isRequestsFile reports whether path starts with the ragtail.requests/v1 header.
func isRequestsFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }() // read only
	head := make([]byte, 64)
	n, _ := io.ReadFull(f, head)
	return bytes.Contains(head[:n], []byte(`"schema":"`+report.SchemaRequests+`"`))
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
