package bench

import (
	"errors"
	"fmt"
	"io"

	"github.com/ragtail/ragtail/loadgen/report"
)

// ReadResults reads the result files at paths (written by bench --json or sweep --json) as one
// document: a single file as it is (a bench or a sweep), several bench files merged exactly
// (their histograms added, every statistic recomputed), or the segments of a multi-host sweep
// (sweep --segment) merged point by point. The segments of a multi-host run must all be there,
// once each, unless partial; notes and warnings about them go to stderr.
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
	var sweeps []*report.Sweep
	for _, path := range paths {
		f, err := report.Read(path)
		if err != nil {
			return nil, err
		}
		if f.Sweep != nil {
			for _, p := range f.Sweep.Points {
				if len(p.Bench.Sources) == 0 {
					p.Bench.Sources = []string{path}
				}
			}
			sweeps = append(sweeps, f.Sweep)
			continue
		}
		if len(f.Bench.Sources) == 0 {
			f.Bench.Sources = []string{path}
		}
		benches = append(benches, f.Bench)
	}
	switch {
	case len(sweeps) > 0 && len(benches) > 0:
		return nil, errors.New("a sweep result does not merge with bench results: only bench results merge, or the segments of one multi-host sweep")
	case len(sweeps) > 0:
		return mergeSweeps(sweeps, partial, stderr)
	}
	return mergeSegments(benches, partial, stderr, "")
}

// mergeSegments merges benches, checking the segments of a multi-host run among them; label
// names the run in notes ("" for a bench, "point 2: " for a point of a sweep).
func mergeSegments(benches []*report.Bench, partial bool, stderr io.Writer, label string) (*report.Bench, error) {
	note, err := report.CheckSegments(benches)
	switch {
	case err != nil && !partial || err != nil && note == "":
		if note != "" {
			return nil, fmt.Errorf("%w (pass --partial to merge what is there)", err)
		}
		return nil, err
	case err != nil:
		fmt.Fprintf(stderr, "ragtail report: warning: %s%v\n", label, err)
	case note != "":
		fmt.Fprintf(stderr, "ragtail report: %s%s\n", label, note)
	}
	merged, err := report.Merge(benches...)
	if err != nil {
		return nil, fmt.Errorf("%s%w", label, err)
	}
	return merged, nil
}

// mergeSweeps merges the sweeps that several hosts ran together (sweep --segment): the k-th
// points of all are the segments of one schedule, checked and merged as bench segments are,
// and the knees and the max rate under the SLO are found again on the merged ladder. Only
// segments merge: sweeps of whole schedules are separate experiments.
func mergeSweeps(sweeps []*report.Sweep, partial bool, stderr io.Writer) (*report.Sweep, error) {
	first := sweeps[0]
	n := len(first.Points)
	for _, sw := range sweeps {
		if len(sw.Points) != n {
			return nil, fmt.Errorf("sweeps of %d and %d points: not the segments of one sweep", n, len(sw.Points))
		}
		for _, p := range sw.Points {
			if p.Bench.Config.Segment == nil {
				return nil, errors.New("a sweep result merges only with the other segments of a multi-host sweep (sweep --segment); only bench results merge otherwise: render a sweep alone")
			}
		}
	}
	points := make([]*report.Bench, n)
	for k := range n {
		benches := make([]*report.Bench, len(sweeps))
		for i, sw := range sweeps {
			benches[i] = sw.Points[k].Bench
		}
		m, err := mergeSegments(benches, partial, stderr, fmt.Sprintf("point %d: ", k+1))
		if err != nil {
			return nil, err
		}
		points[k] = m
	}
	return report.SummarizeSweep(points, report.SweepOptions{KneeThreshold: first.KneeThreshold, SLO: first.SLO}), nil
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
