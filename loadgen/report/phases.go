package report

import (
	"encoding/json"
	"fmt"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// The HTTP phases of the requests (loadgen.Record's DNS, Connect, TLSHandshake and TTFB), as
// the transport's httptrace hooks saw them. A request on a kept-alive connection has no DNS
// lookup, connect or handshake: those phases are summarised over the requests that had them
// (NewConns counts the requests that opened a connection, ReusedConns the others), TTFB over
// every request that got a response. Their keys follow the metrics' (mean_connect_ms,
// p99_connect_ms, p99_connect_ms_ci, ...), for the phases that have samples.

// Phase names, as in the JSON keys.
const (
	PhaseDNS     = "dns"     // DNS lookup of a new connection (none for an IP address)
	PhaseConnect = "connect" // TCP connect of a new connection
	PhaseTLS     = "tls"     // TLS handshake of a new https:// connection
	PhaseTTFB    = "ttfb"    // first response byte - actual send (Record.TTFB)
)

// AllPhases lists the phases in report order.
var AllPhases = []string{PhaseDNS, PhaseConnect, PhaseTLS, PhaseTTFB}

// addPhases records r's phases; r was sent (failed requests included: a connect that failed
// late is still a connect).
func (b *Bench) addPhases(r *loadgen.Record) {
	switch {
	case r.NewConn:
		b.NewConns++
	case r.ConnReused:
		b.ReusedConns++
	}
	if r.DNS > 0 {
		b.PhaseHistograms[PhaseDNS].Record(r.DNS)
	}
	if r.Connect > 0 {
		b.PhaseHistograms[PhaseConnect].Record(r.Connect)
	}
	if r.TLSHandshake > 0 {
		b.PhaseHistograms[PhaseTLS].Record(r.TLSHandshake)
	}
	if ttfb, ok := r.TTFB(); ok {
		b.PhaseHistograms[PhaseTTFB].Record(ttfb)
	}
}

// finishPhases computes the phases' statistics from their histograms.
func (b *Bench) finishPhases() {
	b.Phases = b.Phases[:0]
	for _, p := range AllPhases {
		h := b.PhaseHistograms[p]
		if h == nil || h.Count() == 0 {
			continue
		}
		b.Phases = append(b.Phases, MetricStats{Metric: p, Count: h.Count(), Mean: h.Mean(), Median: h.Quantile(0.5), Std: h.StdDev(),
			Percentiles: percentiles(h, b.Percentiles, b.Confidence)})
	}
}

// newPhaseHistograms are empty histograms of every phase.
func newPhaseHistograms() map[string]*stats.Histogram {
	m := make(map[string]*stats.Histogram, len(AllPhases))
	for _, p := range AllPhases {
		m[p] = stats.NewHistogram()
	}
	return m
}

// mergePhases adds o's phases to b's (a file from before the phases has none).
func (b *Bench) mergePhases(o *Bench) {
	b.NewConns += o.NewConns
	b.ReusedConns += o.ReusedConns
	for p, h := range o.PhaseHistograms {
		if h != nil && b.PhaseHistograms[p] != nil {
			b.PhaseHistograms[p].Merge(h)
		}
	}
}

// phaseKeys are the keys of b's phases.
func (b *Bench) phaseKeys() metricKeys {
	out := make(metricKeys, 0, len(b.Phases))
	for _, s := range b.Phases {
		out = append(out, metricJSON{metric: s.Metric, mean: ptr(millis(s.Mean)), median: ptr(millis(s.Median)), std: ptr(millis(s.Std)),
			percentiles: percentileKeys{metric: s.Metric, ps: b.Percentiles, stats: s.Percentiles}})
	}
	return out
}

// phaseHistogramsJSON are the phases' histograms as the file keeps them.
func (b *Bench) phaseHistogramsJSON() (keyed[json.RawMessage], error) {
	var out keyed[json.RawMessage]
	for _, p := range AllPhases {
		h := b.PhaseHistograms[p]
		if h == nil || h.Count() == 0 {
			continue
		}
		raw, err := h.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("histograms.phases.%s: %w", p, err)
		}
		out = append(out, entry[json.RawMessage]{p, raw})
	}
	return out, nil
}

// readPhases reads the phases' counts and histograms of the file (none in a file from before
// them) and computes their statistics.
func (f *benchFile) readPhases(c *checker, b *Bench) {
	b.NewConns, b.ReusedConns = int64(f.NewConnections), int64(f.ReusedConnections)
	b.PhaseHistograms = newPhaseHistograms()
	for _, e := range f.Histograms.Phases {
		if _, ok := b.PhaseHistograms[e.key]; ok {
			if h := readHistogram(c, "histograms.phases."+e.key, e.value); h != nil {
				b.PhaseHistograms[e.key] = h
			}
		}
	}
	b.finishPhases()
}

// phaseRows writes the phases to the text summary: the connections opened and reused, then a
// row per phase with its count, mean and percentiles.
func (t *textWriter) phaseRows(b *Bench) {
	if len(b.Phases) == 0 {
		return
	}
	t.rule(fmt.Sprintf("HTTP phases (ms; %d new connections, %d reused)", b.NewConns, b.ReusedConns), '-')
	head := fmt.Sprintf("%-12s %7s %9s", "phase", "n", "mean")
	for _, p := range b.Percentiles {
		head += fmt.Sprintf(" %9s", "p"+formatP(p))
	}
	t.printf("%s\n", head)
	for _, s := range b.Phases {
		line := fmt.Sprintf("%-12s %7d %9s", s.Metric, s.Count, fmtMS(s.Mean))
		for _, p := range s.Percentiles {
			line += fmt.Sprintf(" %9s", fmtMS(p.Value))
		}
		t.printf("%s\n", line)
	}
}

// phasesBlocks is the HTML section of the phases: a row per phase with its count, mean and
// percentiles with their intervals.
func phasesBlocks(b *Bench) blocks {
	if len(b.Phases) == 0 {
		return blocks{Empty: "No HTTP phases were recorded (a result file from before they were)."}
	}
	t := table{Heads: []string{"phase", "n", "mean"}}
	for _, p := range b.Percentiles {
		t.Heads = append(t.Heads, "p"+formatP(p)+" [95% CI]")
	}
	for _, s := range b.Phases {
		cells := []string{s.Metric, fmt.Sprint(s.Count), fmtMS(s.Mean)}
		for _, p := range s.Percentiles {
			cell := fmtMS(p.Value)
			if p.HasCI {
				cell += " [" + fmtMS(p.Lo) + ", " + fmtMS(p.Hi) + "]"
			}
			cells = append(cells, cell)
		}
		t.row(cells...)
	}
	return blocks{Tables: []table{t}, Notes: []string{fmt.Sprintf("Milliseconds, from the transport's httptrace hooks. "+
		"%d requests opened a connection and %d reused a kept-alive one: DNS, connect and TLS are over the requests "+
		"that opened one (DNS only for a host name, TLS only over TLS); TTFB, the first response byte after the "+
		"send, over every request that got a response.", b.NewConns, b.ReusedConns)}}
}
