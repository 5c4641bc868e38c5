package report

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// Time slices (bench --slice): the run cut into fixed stretches, each summarised like a short
// run of its own, so that a drift (a cache warming, a queue building) shows with its intervals.
// A request belongs to the slice of its intended send time, as in the timeline; a slice's
// throughputs count the completions that ended in it. Slices are written to the JSON and read
// back as written; a merge of several files has none (their histograms are not kept).

// sliceMetrics are the metrics each slice summarises.
var sliceMetrics = []string{MetricTTFT, MetricE2EL}

// Slice is one stretch of a run.
type Slice struct {
	T, Width                            time.Duration // start, from the measured run's start, and width
	Sent, Completed, Failed             int64         // requests intended in the slice
	RequestThroughput, OutputThroughput float64       // completions (and their tokens) that ended in the slice, per second
	Stats                               []MetricStats // of sliceMetrics with samples
}

// sliceAcc accumulates one slice.
type sliceAcc struct {
	sent, completed, failed int64
	ended, endedTokens      int64
	hists                   map[string]*stats.Histogram
}

// slicesAcc accumulates the slices of a run: index i covers [i·width, (i+1)·width) on the
// run's clock.
type slicesAcc struct {
	width time.Duration
	acc   map[int]*sliceAcc
}

func newSlicesAcc(width time.Duration) *slicesAcc {
	if width <= 0 {
		return nil
	}
	return &slicesAcc{width: width, acc: map[int]*sliceAcc{}}
}

func (s *slicesAcc) at(off time.Duration) *sliceAcc {
	i := int(max(off, 0) / s.width)
	a := s.acc[i]
	if a == nil {
		a = &sliceAcc{hists: map[string]*stats.Histogram{}}
		for _, m := range sliceMetrics {
			a.hists[m] = stats.NewHistogram()
		}
		s.acc[i] = a
	}
	return a
}

// addFailed adds a measured request that failed.
func (s *slicesAcc) addFailed(r *loadgen.Record) {
	if s == nil {
		return
	}
	a := s.at(r.Intended)
	a.sent++
	a.failed++
}

// addCompleted adds a measured request that completed, with its latencies and output tokens.
func (s *slicesAcc) addCompleted(r *loadgen.Record, lat stats.RequestLatencies, out int) {
	if s == nil {
		return
	}
	a := s.at(r.Intended)
	a.sent++
	a.completed++
	a.hists[MetricE2EL].Record(lat.E2EL)
	if lat.HasTTFT {
		a.hists[MetricTTFT].Record(lat.TTFT)
	}
	e := s.at(r.End)
	e.ended++
	e.endedTokens += int64(out)
}

// finish returns the slices from off (the measured run's start) to end, with the percentiles
// ps at confidence conf.
func (s *slicesAcc) finish(off, end time.Duration, ps []float64, conf float64) []Slice {
	if s == nil {
		return nil
	}
	first, last := int(max(off, 0)/s.width), int(max(end-1, 0)/s.width)
	out := make([]Slice, 0, last-first+1)
	for i := first; i <= last; i++ {
		t := time.Duration(i) * s.width
		// The first slice starts at the measured run's start; the last ends at its end (the
		// last request's), so either may be narrower than the others: Width is what it covers.
		w := min(t+s.width, end) - max(t, off)
		sl := Slice{T: t - off, Width: max(w, 0)}
		if a := s.acc[i]; a != nil {
			sl.Sent, sl.Completed, sl.Failed = a.sent, a.completed, a.failed
			if w > 0 {
				sl.RequestThroughput = float64(a.ended) / w.Seconds()
				sl.OutputThroughput = float64(a.endedTokens) / w.Seconds()
			}
			for _, m := range sliceMetrics {
				if h := a.hists[m]; h.Count() > 0 {
					sl.Stats = append(sl.Stats, MetricStats{Metric: m, Count: h.Count(), Mean: h.Mean(), Median: h.Quantile(0.5),
						Std: h.StdDev(), Percentiles: percentiles(h, ps, conf)})
				}
			}
		}
		out = append(out, sl)
	}
	return out
}

// sliceStat is s's statistics of metric m; nil when it has no sample.
func (s *Slice) sliceStat(m string) *MetricStats {
	for i := range s.Stats {
		if s.Stats[i].Metric == m {
			return &s.Stats[i]
		}
	}
	return nil
}

// ---- JSON ----

// sliceJSON is an element of the "slices" array: the slice's counts and throughputs, then the
// keys of its metrics (mean_ttft_ms, p99_e2el_ms, p99_e2el_ms_ci, ...).
type sliceJSON struct {
	sliceHead
	metrics metricKeys
}

type sliceHead struct {
	TS                seconds `json:"t_s"`
	DtS               seconds `json:"dt_s"`
	Sent              count   `json:"sent"`
	Completed         count   `json:"completed"`
	Failed            count   `json:"failed"`
	RequestThroughput amount  `json:"request_throughput"`
	OutputThroughput  amount  `json:"output_throughput"`
}

func (s sliceJSON) MarshalJSON() ([]byte, error) {
	return members{s.sliceHead, s.metrics}.MarshalJSON()
}

func (s *sliceJSON) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &s.sliceHead); err != nil {
		return err
	}
	return s.metrics.UnmarshalJSON(b)
}

// slicesJSON are b's slices as the file keeps them.
func (b *Bench) slicesJSON() []sliceJSON {
	if len(b.Slices) == 0 {
		return nil
	}
	out := make([]sliceJSON, 0, len(b.Slices))
	for _, sl := range b.Slices {
		j := sliceJSON{sliceHead: sliceHead{TS: seconds(sl.T), DtS: seconds(sl.Width), Sent: count(sl.Sent), Completed: count(sl.Completed),
			Failed: count(sl.Failed), RequestThroughput: amount(sig(sl.RequestThroughput)), OutputThroughput: amount(sig(sl.OutputThroughput))}}
		for _, m := range sliceMetrics {
			s := sl.sliceStat(m)
			if s == nil {
				j.metrics = append(j.metrics, metricJSON{metric: m, percentiles: percentileKeys{metric: m, ps: b.Percentiles}})
				continue
			}
			j.metrics = append(j.metrics, metricJSON{metric: m, mean: ptr(millis(s.Mean)), median: ptr(millis(s.Median)), std: ptr(millis(s.Std)),
				percentiles: percentileKeys{metric: m, ps: b.Percentiles, stats: s.Percentiles}})
		}
		out = append(out, j)
	}
	return out
}

// readSlices reads the file's slices as written.
func (f *benchFile) readSlices(b *Bench) {
	for _, j := range f.Slices {
		sl := Slice{T: time.Duration(j.TS), Width: time.Duration(j.DtS), Sent: int64(j.Sent), Completed: int64(j.Completed),
			Failed: int64(j.Failed), RequestThroughput: float64(j.RequestThroughput), OutputThroughput: float64(j.OutputThroughput)}
		for _, m := range j.metrics {
			if len(m.percentiles.stats) == 0 || m.mean == nil {
				continue
			}
			st := MetricStats{Metric: m.metric, Mean: time.Duration(*m.mean), Percentiles: m.percentiles.stats}
			if m.median != nil {
				st.Median = time.Duration(*m.median)
			}
			if m.std != nil {
				st.Std = time.Duration(*m.std)
			}
			sl.Stats = append(sl.Stats, st)
		}
		b.Slices = append(b.Slices, sl)
	}
}

// ---- text and HTML ----

// sliceRows writes the slices to the text summary.
func (t *textWriter) sliceRows(b *Bench) {
	if len(b.Slices) == 0 {
		return
	}
	var width time.Duration
	for _, sl := range b.Slices {
		width = max(width, sl.Width)
	}
	t.rule(fmt.Sprintf("Slices of %s (by intended send; ms)", width), '-')
	t.printf("%8s %6s %6s %6s %8s %9s %9s %9s %9s\n", "t (s)", "sent", "ok", "failed", "req/s", "p50 TTFT", "p99 TTFT", "p50 E2EL", "p99 E2EL")
	partial := false
	for _, sl := range b.Slices {
		mark := " "
		if sl.Width < width {
			mark, partial = "*", true
		}
		t.printf("%8.1f %6d %6d %6d %7.2f%s %9s %9s %9s %9s\n", sl.T.Seconds(), sl.Sent, sl.Completed, sl.Failed, sl.RequestThroughput, mark,
			sl.quantileText(MetricTTFT, 50), sl.quantileText(MetricTTFT, 99), sl.quantileText(MetricE2EL, 50), sl.quantileText(MetricE2EL, 99))
	}
	if partial {
		t.printf("* a partial slice (the run's first or last stretch): its req/s rests on less time\n")
	}
}

// quantile is percentile p of metric m in the slice, and whether it has one.
func (s *Slice) quantile(m string, p float64) (PercentileStat, bool) {
	st := s.sliceStat(m)
	if st == nil {
		return PercentileStat{}, false
	}
	for _, ps := range st.Percentiles {
		if ps.P == p {
			return ps, true
		}
	}
	return PercentileStat{}, false
}

func (s *Slice) quantileText(m string, p float64) string {
	if ps, ok := s.quantile(m, p); ok {
		return fmtMS(ps.Value)
	}
	return "-"
}

// slicesBlocks is the HTML section of the slices: TTFT and E2EL percentiles over time, with
// the P50's interval as dashed lines.
func slicesBlocks(b *Bench) blocks {
	if len(b.Slices) == 0 {
		return blocks{Empty: "No slices: run bench with --slice 10s to summarise each stretch of the run."}
	}
	var v blocks
	for i, m := range sliceMetrics {
		var p50, lo, hi, p99 []pt
		for _, sl := range b.Slices {
			x := (sl.T + sl.Width/2).Seconds()
			y50, ylo, yhi, y99 := math.NaN(), math.NaN(), math.NaN(), math.NaN()
			if ps, ok := sl.quantile(m, 50); ok {
				y50 = durationMS(ps.Value)
				if ps.HasCI {
					ylo, yhi = durationMS(ps.Lo), durationMS(ps.Hi)
				}
			}
			if ps, ok := sl.quantile(m, 99); ok {
				y99 = durationMS(ps.Value)
			}
			p50, lo, hi, p99 = append(p50, pt{X: x, Y: y50}), append(lo, pt{X: x, Y: ylo}), append(hi, pt{X: x, Y: yhi}), append(p99, pt{X: x, Y: y99})
		}
		label := metricTitles[m][1]
		v.Charts = append(v.Charts, chart{Title: label + " by slice", XLabel: "seconds since start", YLabel: "ms", YFromZero: true,
			Series: []series{
				{Name: "P99 " + label, Mode: modeLine, Color: palette[1], Pts: p99},
				{Name: "P50 " + label, Mode: modeLine, Color: palette[i*2], Pts: p50},
				{Name: "P50 95% CI", Mode: modeLine, Color: palette[i*2], Dash: true, Pts: lo},
				{Name: "", Mode: modeLine, Color: palette[i*2], Dash: true, Pts: hi},
			}}.render())
	}
	v.Notes = []string{fmt.Sprintf("Each point summarises the requests intended in a slice of %s; a slice's P99 has an interval only "+
		"with enough samples (see the JSON's slices).", b.Slices[0].Width)}
	return v
}
