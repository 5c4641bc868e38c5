package report

import (
	"fmt"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// checkCounts refuses a bench whose counts contradict each other, before anything sized by them
// runs (a percentile's interval costs memory and time that grow with its histogram's count).
// Every completed request records one e2el, service_e2el and send_lag value, at most one TTFT,
// TTFO and TPOT (TTFT also one of each abandoned request), at most one value per server stage, and belongs to at most one turn; goodput
// counts completed requests. A histogram a file leaves out is not checked.
func checkCounts(c *checker, b *Bench) {
	if c.err != nil {
		return
	}
	for _, m := range []string{MetricE2EL, MetricServiceE2EL, MetricSendLag} {
		if h := b.Histograms[m]; h != nil && h.Count() != b.Completed {
			c.fail("histograms.metrics."+m, "holds %d values but completed is %d: every completed request records one", h.Count(), b.Completed)
			return
		}
	}
	for _, m := range []string{MetricTTFT, MetricTTFO, MetricTPOT} {
		limit, what := b.Completed, "completed"
		if m == MetricTTFT && b.Cancellations != nil {
			limit, what = b.Completed+b.Cancellations.Done, "completed and cancelled"
		}
		if h := b.Histograms[m]; h != nil && h.Count() > limit {
			c.fail("histograms.metrics."+m, "holds %d values, more than the %d %s requests", h.Count(), limit, what)
			return
		}
	}
	for _, st := range stageOrder(b.StageHistograms) {
		if h := b.StageHistograms[st]; h != nil && h.Count() > b.Completed {
			c.fail("histograms.stages."+st, "holds %d values, more than the %d completed requests", h.Count(), b.Completed)
			return
		}
	}
	var turns int64
	for i, t := range b.Turns {
		if t.TTFT != nil && t.TTFT.Count() > t.Count {
			c.fail(fmt.Sprintf("turns[%d].histogram", i), "holds %d values, more than the turn's count %d", t.TTFT.Count(), t.Count)
			return
		}
		turns += t.Count
	}
	if turns > b.Completed {
		c.fail("turns", "counts %d requests, more than the %d completed", turns, b.Completed)
		return
	}
	if b.GoodRequests > b.Completed {
		c.fail("goodput_requests", "%d, more than the %d completed requests", b.GoodRequests, b.Completed)
	}
}

// checkMergedCount refuses a merge whose histograms would hold more than stats.MaxCount values
// in all: every file may be within the bound and their sum not.
func checkMergedCount(benches []*Bench) error {
	for _, m := range AllMetrics {
		var total int64
		for i, b := range benches {
			h := b.Histograms[m]
			if h == nil {
				continue
			}
			n := h.Count()
			if n > stats.MaxCount-total {
				return fmt.Errorf("merge: %s: histograms.metrics.%s: %w: the benches' %s values add up to more than %d",
					benchName(b, i), m, stats.ErrHistogramCount, m, int64(stats.MaxCount))
			}
			total += n
		}
	}
	return nil
}

// benchName names bench i of a merge by its file when it has one.
func benchName(b *Bench, i int) string {
	if len(b.Sources) == 1 {
		return b.Sources[0]
	}
	return fmt.Sprintf("bench %d", i+1)
}
