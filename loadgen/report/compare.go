package report

import (
	"errors"
	"fmt"
	"math"
)

// Comparison is several bench results shown side by side, not merged: one column per run.
type Comparison struct {
	Names   []string // one per bench, e.g. the file names
	Benches []*Bench
}

// NewComparison pairs names with benches; it needs at least two of each, as many names as benches.
func NewComparison(names []string, benches []*Bench) (*Comparison, error) {
	if len(benches) < 2 {
		return nil, errors.New("compare: need at least two results")
	}
	if len(names) != len(benches) {
		return nil, fmt.Errorf("compare: %d names for %d results", len(names), len(benches))
	}
	return &Comparison{Names: names, Benches: benches}, nil
}

func (*Comparison) isDocument() {}

// compareRows are the figures of the side-by-side table: a label and how to read it from a bench.
var compareRows = []struct {
	label string
	value func(b *Bench) string
}{
	{"target", func(b *Bench) string { return b.Config.URL }},
	{"model", func(b *Bench) string { return b.Config.Model }},
	{"load", func(b *Bench) string { return b.Config.Shape }},
	{"seed", func(b *Bench) string { return fmt.Sprint(b.Config.Seed) }},
	{"completed", func(b *Bench) string { return fmt.Sprint(b.Completed) }},
	{"failed", func(b *Bench) string { return fmt.Sprint(b.Failed) }},
	{"duration s", func(b *Bench) string { return fmt.Sprintf("%.1f", b.Duration.Seconds()) }},
	{"requests/s", func(b *Bench) string { return fmt.Sprintf("%.3g", b.RequestThroughput) }},
	{"output tokens/s", func(b *Bench) string { return fmt.Sprintf("%.4g", b.OutputThroughput) }},
	{"TTFT p50 ms", quantileCell(MetricTTFT, 0.5)},
	{"TTFT p99 ms", quantileCell(MetricTTFT, 0.99)},
	{"TTFO p50 ms", reasoningCell(quantileCell(MetricTTFO, 0.5))},
	{"TTFO p99 ms", reasoningCell(quantileCell(MetricTTFO, 0.99))},
	{"TPOT p50 ms", quantileCell(MetricTPOT, 0.5)},
	{"E2EL p50 ms", quantileCell(MetricE2EL, 0.5)},
	{"E2EL p99 ms", quantileCell(MetricE2EL, 0.99)},
}

// quantileCell reads quantile q of metric m from a bench's histogram: "-" when empty, n/a
// when too few samples support a 95% interval around it (as the terminal report does).
func quantileCell(m string, q float64) func(b *Bench) string {
	return func(b *Bench) string {
		h := b.Histograms[m]
		if h == nil || h.Count() == 0 {
			return "-"
		}
		if need := minSamplesForCI(q, DefaultConfidence); h.Count() < need {
			return fmt.Sprintf("n/a (n=%d < %d)", h.Count(), need)
		}
		return fmtMS(h.Quantile(q))
	}
}

// reasoningCell shows cell only for a run whose responses reasoned: without reasoning the
// first output token is the first token, and its row would repeat TTFT's.
func reasoningCell(cell func(b *Bench) string) func(b *Bench) string {
	return func(b *Bench) string {
		if b.ReasoningRequests == 0 {
			return "- (no reasoning)"
		}
		return cell(b)
	}
}

func comparePage(c *Comparison) (page, error) {
	p := page{Title: fmt.Sprintf("ragtail bench comparison (%d runs)", len(c.Benches)), Subtitle: c.Names}
	var s sections
	s.add("compare-summary", "Side by side", "blocks", compareTable(c))
	s.add("compare-spectrum", "Latency by percentile, run against run", "blocks", compareSpectrum(c))
	p.Sections = s.list
	return p, s.err
}

func compareTable(c *Comparison) blocks {
	t := table{Heads: append([]string{"figure"}, c.Names...)}
	for _, r := range compareRows {
		cells := []string{r.label}
		for _, b := range c.Benches {
			cells = append(cells, r.value(b))
		}
		t.row(cells...)
	}
	return blocks{Tables: []table{t}, Notes: []string{"Percentiles are read from each run's HDR histogram, and given only " +
		"where the samples support a 95% interval; the terminal report of each file prints the intervals."}}
}

func compareSpectrum(c *Comparison) blocks {
	var v blocks
	for _, m := range []string{MetricTTFT, MetricE2EL} {
		var ss []series
		maxX := 10.0
		for i, b := range c.Benches {
			hist := b.Histograms[m]
			if hist == nil || hist.Count() == 0 {
				continue
			}
			ss = append(ss, series{Name: c.Names[i], Mode: modeLine, Color: palette[i%len(palette)], Pts: spectrumPoints(hist)})
			maxX = math.Max(maxX, float64(hist.Count()))
		}
		if len(ss) == 0 {
			continue
		}
		v.Charts = append(v.Charts, chart{Title: metricTitles[m][1] + " by percentile", XLabel: "percentile (log scale of 1/(1-q))",
			YLabel: "ms (log)", XLog: true, YLog: true, Series: ss, XTicks: spectrumTicks(maxX)}.render())
	}
	if len(v.Charts) == 0 {
		v.Empty = "No latency samples in these files."
	}
	return v
}
