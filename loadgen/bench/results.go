package bench

import (
	"fmt"
	"io"

	"github.com/ragtail/ragtail/loadgen/report"
)

// ReadResults reads the result files at paths (written by bench --json or sweep --json) as one
// document: a single file as it is (a bench or a sweep), several bench files merged exactly
// (their histograms added, every statistic recomputed). The segments of a multi-host run must
// all be there, once each, unless partial; notes and warnings about them go to stderr.
func ReadResults(paths []string, partial bool, stderr io.Writer) (report.Document, error) {
	if len(paths) == 1 {
		f, err := report.Read(paths[0])
		if err != nil {
			return nil, err
		}
		if f.Sweep != nil {
			return f.Sweep, nil
		}
		return f.Bench, nil
	}
	benches := make([]*report.Bench, 0, len(paths))
	for _, path := range paths {
		f, err := report.Read(path)
		if err != nil {
			return nil, err
		}
		if f.Bench == nil {
			return nil, fmt.Errorf("%s is a sweep result: only bench results merge (render it alone)", path)
		}
		if len(f.Bench.Sources) == 0 {
			f.Bench.Sources = []string{path}
		}
		benches = append(benches, f.Bench)
	}
	note, err := report.CheckSegments(benches)
	switch {
	case err != nil && !partial || err != nil && note == "":
		if note != "" {
			return nil, fmt.Errorf("%w (pass --partial to merge what is there)", err)
		}
		return nil, err
	case err != nil:
		fmt.Fprintf(stderr, "ragtail report: warning: %v\n", err)
	case note != "":
		fmt.Fprintf(stderr, "ragtail report: %s\n", note)
	}
	merged, err := report.Merge(benches...)
	if err != nil {
		return nil, err
	}
	return merged, nil
}

// WriteDocument writes doc as the report command does: the JSON and HTML files asked for
// ("-" for stdout), then the text report on stdout unless quiet or stdout took a file.
func WriteDocument(stdout io.Writer, doc report.Document, jsonOut, htmlOut string, quiet bool, htmlOpts report.HTMLOptions) error {
	if jsonOut != "" {
		if err := WriteOutput(jsonOut, stdout, func(w io.Writer) error { return report.WriteJSON(w, doc) }); err != nil {
			return err
		}
	}
	if htmlOut != "" {
		if err := WriteOutput(htmlOut, stdout, func(w io.Writer) error { return report.WriteHTMLWith(w, doc, htmlOpts) }); err != nil {
			return err
		}
	}
	if quiet || jsonOut == "-" || htmlOut == "-" {
		return nil
	}
	return writeText(stdout, doc)
}

// writeText prints the terminal table of doc.
func writeText(w io.Writer, doc report.Document) error {
	switch d := doc.(type) {
	case *report.Bench:
		return report.WriteText(w, d)
	case *report.Sweep:
		return report.WriteSweepText(w, d)
	}
	return nil
}
