// Package report turns load-generator runs into the numbers and pictures people read: the
// ragtail.bench/v1 and ragtail.sweep/v1 JSON (vLLM's key spelling, plus 95%
// confidence intervals, the tail analysis, sessions, the slowest requests, a timeline, errors
// and the HDR histograms that make results mergeable), a terminal table, per-request JSONL, and a
// self-contained HTML report with inline SVG charts that needs no network.
//
// Every percentile, interval and tail fit in a Bench is computed from its HDR histograms, so
// Merge of the results of several generators (on several hosts) recomputes all of them exactly
// as if one generator had measured every request. Values are not safe for concurrent mutation.
package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// Schemas of the result files.
const (
	SchemaBench = "ragtail.bench/v1"
	SchemaSweep = "ragtail.sweep/v1"
)

// Metric names, as in the JSON keys (mean_ttft_ms, p99_e2el_ms, ...). Definitions (vLLM's
// where vLLM has them), over completed requests:
//   - ttft: first content token - intended send time.
//   - ttfo: first output token - intended send time: the first answer content, reasoning
//     (reasoning_content) excluded; TTFT for a server that does not reason aloud. It is
//     reported when some response reasoned (Bench.ReasoningRequests), and always recorded.
//   - tpot: (e2el - ttft) / (output tokens - 1), for requests with at least two output tokens.
//   - itl: every gap between consecutive content chunks, pooled over requests.
//   - e2el: last byte - intended send time.
//   - service_e2el: last byte - actual send time (what a closed-loop tool would report).
//   - send_lag: actual - intended send time (the generator's own lateness, or the wait for a
//     concurrency slot).
const (
	MetricTTFT        = "ttft"
	MetricTTFO        = "ttfo"
	MetricTPOT        = "tpot"
	MetricITL         = "itl"
	MetricE2EL        = "e2el"
	MetricServiceE2EL = "service_e2el"
	MetricSendLag     = "send_lag"
)

// AllMetrics lists the metrics in report order.
var AllMetrics = []string{MetricTTFT, MetricTTFO, MetricTPOT, MetricITL, MetricE2EL, MetricServiceE2EL, MetricSendLag}

// TailMetrics are the metrics that get a tail analysis.
var TailMetrics = []string{MetricE2EL, MetricTTFT}

// DefaultPercentiles are vLLM's --metric-percentiles plus 95 and 99.9, in percent.
var DefaultPercentiles = []float64{50, 90, 95, 99, 99.9}

// DefaultConfidence is the coverage of the percentile intervals.
const DefaultConfidence = 0.95

// DefaultSlowest is how many of the slowest requests a Bench lists.
const DefaultSlowest = 10

// maxTimelineBins bounds the timeline: a longer run gets wider bins.
const maxTimelineBins = 600

// Options tune Summarize. The zero value gives the defaults.
type Options struct {
	Goodput     stats.SLOs // request-level SLOs for goodput; none: goodput is not reported
	Percentiles []float64  // in percent, each in (0, 100); default DefaultPercentiles
	Metrics     []string   // which metrics get keys in the JSON and rows in the table; default AllMetrics
	Confidence  float64    // coverage of the percentile intervals; default 0.95
	Slowest     int        // how many slowest requests to list; default 10
	// SessionStepLimit is the latency (e2el) above which a session step counts as a failure that
	// interrupts the session, as a user gives up on a slow page. 0 takes the goodput e2el SLO
	// when there is one; otherwise only failed steps interrupt.
	SessionStepLimit time.Duration
	// Agent summarises every session as an agent's conversation (Bench.Agents): loadgen.Agent
	// drove the run.
	Agent bool
	// Pricing is what the target's GPUs cost, for the run's cost (Bench.Cost); zero: not priced.
	Pricing Pricing
	// TimelineBin is the width of a timeline bin; 0 means 1 s, widened so that a long run has at
	// most 600 bins.
	TimelineBin time.Duration
	// Slice is the width of the time slices each summarised on its own (Bench.Slices); 0: none.
	Slice time.Duration
}

func (o Options) withDefaults() Options {
	if len(o.Percentiles) == 0 {
		o.Percentiles = DefaultPercentiles
	}
	o.Percentiles = slices.Clone(o.Percentiles)
	slices.Sort(o.Percentiles)
	o.Percentiles = slices.Compact(o.Percentiles)
	if len(o.Metrics) == 0 {
		o.Metrics = AllMetrics
	}
	o.Metrics = canonicalMetrics(o.Metrics)
	if !(o.Confidence > 0 && o.Confidence < 1) {
		o.Confidence = DefaultConfidence
	}
	if o.Slowest <= 0 {
		o.Slowest = DefaultSlowest
	}
	if o.SessionStepLimit <= 0 {
		if d, ok := o.Goodput.Limit(stats.SLOE2EL); ok {
			o.SessionStepLimit = d
		}
	}
	return o
}

// canonicalMetrics returns the known metrics among ms, in AllMetrics order, once each.
func canonicalMetrics(ms []string) []string {
	var out []string
	for _, m := range AllMetrics {
		if slices.Contains(ms, m) {
			out = append(out, m)
		}
	}
	return out
}

// ParsePercentiles parses vLLM's --metric-percentiles: comma-separated percentages in (0, 100),
// e.g. "50,90,99,99.9".
func ParsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || !(p > 0 && p < 100) {
			return nil, fmt.Errorf("percentile %q: want a number between 0 and 100 (exclusive)", f)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("percentiles %q: none given", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ParseMetrics parses vLLM's --percentile-metrics: comma-separated metric names from
// AllMetrics, or "all".
func ParseMetrics(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		switch {
		case f == "":
			continue
		case f == "all":
			return slices.Clone(AllMetrics), nil
		case !slices.Contains(AllMetrics, f):
			return nil, fmt.Errorf("metric %q: want one of %s or all", f, strings.Join(AllMetrics, ", "))
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("metrics %q: none given", s)
	}
	return canonicalMetrics(out), nil
}

// PercentileSLO bounds a percentile of a metric over a whole run, e.g. the article's "P95 of the
// end-to-end latency at most 2 s", which defines the max RPS of a sweep.
type PercentileSLO struct {
	Metric     string
	Percentile float64 // in percent
	Limit      time.Duration
}

// ParsePercentileSLO parses METRIC:pP:MS, e.g. "e2el:p95:2000".
func ParsePercentileSLO(s string) (PercentileSLO, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 3 {
		return PercentileSLO{}, fmt.Errorf("slo %q: want METRIC:pP:MS, e.g. e2el:p95:2000", s)
	}
	m := strings.ToLower(parts[0])
	if !slices.Contains(AllMetrics, m) {
		return PercentileSLO{}, fmt.Errorf("slo %q: unknown metric %q (want one of %s)", s, m, strings.Join(AllMetrics, ", "))
	}
	p, err := strconv.ParseFloat(strings.TrimPrefix(strings.ToLower(parts[1]), "p"), 64)
	if err != nil || !(p > 0 && p < 100) {
		return PercentileSLO{}, fmt.Errorf("slo %q: percentile %q: want p followed by a number in (0, 100), e.g. p95", s, parts[1])
	}
	ms, err := strconv.ParseFloat(parts[2], 64)
	if err != nil || !(ms > 0) || ms > float64(stats.HistogramHighest/time.Millisecond) {
		return PercentileSLO{}, fmt.Errorf("slo %q: limit %q: want a positive number of milliseconds up to one hour", s, parts[2])
	}
	return PercentileSLO{Metric: m, Percentile: p, Limit: msDuration(ms)}, nil
}

// String formats the SLO as ParsePercentileSLO reads it.
func (s PercentileSLO) String() string {
	return fmt.Sprintf("%s:p%s:%s", s.Metric, formatP(s.Percentile), strconv.FormatFloat(durationMS(s.Limit), 'f', -1, 64))
}

// Met reports whether the bench meets the SLO, with the measured value. A bench with no sample
// of the metric does not meet it.
func (s PercentileSLO) Met(b *Bench) (bool, time.Duration) {
	h := b.Histograms[s.Metric]
	if h == nil || h.Count() == 0 {
		return false, 0
	}
	v := h.Quantile(s.Percentile / 100)
	return v <= s.Limit, v
}

// formatP formats a percentile as in the JSON keys: 99.9 -> "99.9", 50 -> "50".
func formatP(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

func durationMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msDuration(ms float64) time.Duration {
	ns := ms * float64(time.Millisecond)
	switch {
	case math.IsNaN(ns):
		return 0
	case ns >= math.MaxInt64:
		return time.Duration(math.MaxInt64)
	case ns <= math.MinInt64:
		return time.Duration(math.MinInt64)
	}
	return time.Duration(math.Round(ns))
}
