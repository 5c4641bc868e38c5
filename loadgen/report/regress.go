package report

import (
	"fmt"
	"io"
	"math"
	"slices"
)

// DefaultRegressionTolerance is the change below which a difference is not a regression,
// however sure: two runs on a shared machine differ by a few percent from its other load, which
// no interval of one run accounts for.
const DefaultRegressionTolerance = 0.05

// regressionMetrics are the latency metrics whose percentiles the regression check compares.
var regressionMetrics = []string{MetricTTFT, MetricTTFO, MetricTPOT, MetricITL, MetricE2EL}

// Estimate is a figure of one run with its 95% interval.
type Estimate struct {
	Value, Lo, Hi float64
	HasCI         bool // false when the samples support no interval
}

// Regression is one figure of two runs compared: whether the new run is worse beyond
// sampling error, and by more than the tolerance.
type Regression struct {
	Key           string // the figure's JSON key: p95_ttft_ms, request_throughput, error_rate
	Base, New     Estimate
	HigherIsWorse bool
	Regressed     bool
	Note          string // why it was not compared, when it was not
}

// Change is the relative change of the new value from the base one.
func (r Regression) Change() float64 { return r.New.Value/r.Base.Value - 1 }

// Regressions compares new against base, figure by figure: each percentile of TTFT, TTFO
// (when both runs reasoned), TPOT, ITL and E2EL both runs report, the request and output
// throughputs, and the error rate. A figure regressed when new's 95% interval lies wholly on
// the worse side of base's (non-overlap: a test at well under 1% for intervals of like widths,
// which keeps false alarms rare over the twenty-odd figures compared) and, for latencies and
// throughputs, the change exceeds tolerance (a fraction; 0.05 is 5%).
//
// The percentiles' intervals are the distribution-free ones of the files. A throughput's
// interval treats the completed requests as a Poisson count over the run's duration (exact for
// an open loop's Poisson arrivals); the output throughput's takes the same relative width. The
// error rate's is Wilson's score interval.
func Regressions(base, new *Bench, tolerance float64) []Regression {
	var out []Regression
	for _, m := range regressionMetrics {
		if m == MetricTTFO && (base.ReasoningRequests == 0 || new.ReasoningRequests == 0) {
			continue
		}
		bs, ns := base.metricStats(m), new.metricStats(m)
		if bs == nil || ns == nil {
			continue
		}
		for _, bp := range bs.Percentiles {
			i := slices.IndexFunc(ns.Percentiles, func(p PercentileStat) bool { return p.P == bp.P })
			if i < 0 {
				continue
			}
			r := Regression{Key: "p" + formatP(bp.P) + "_" + m + "_ms", HigherIsWorse: true,
				Base: percentileEstimate(bp, bs.Count), New: percentileEstimate(ns.Percentiles[i], ns.Count)}
			out = append(out, r.judge(tolerance))
		}
	}
	out = append(out,
		Regression{Key: "request_throughput", Base: throughputEstimate(base, base.RequestThroughput),
			New: throughputEstimate(new, new.RequestThroughput)}.judge(tolerance),
		Regression{Key: "output_throughput", Base: throughputEstimate(base, base.OutputThroughput),
			New: throughputEstimate(new, new.OutputThroughput)}.judge(tolerance),
		Regression{Key: "error_rate", HigherIsWorse: true, Base: errorRateEstimate(base), New: errorRateEstimate(new)}.judge(0))
	return out
}

// metricStats is b's summary of metric m; nil when b has none or no sample.
func (b *Bench) metricStats(m string) *MetricStats {
	for i := range b.Stats {
		if b.Stats[i].Metric == m && b.Stats[i].Count > 0 {
			return &b.Stats[i]
		}
	}
	return nil
}

func percentileEstimate(p PercentileStat, n int64) Estimate {
	return Estimate{Value: durationMS(p.Value), Lo: durationMS(p.Lo), Hi: durationMS(p.Hi), HasCI: p.HasCI && n > 0}
}

// throughputEstimate is rate with the interval of a Poisson count of b's completed requests.
func throughputEstimate(b *Bench, rate float64) Estimate {
	n := float64(b.Completed)
	if n == 0 || b.Duration <= 0 {
		return Estimate{Value: rate}
	}
	half := zConfidence() / math.Sqrt(n)
	return Estimate{Value: rate, Lo: rate * math.Max(0, 1-half), Hi: rate * (1 + half), HasCI: true}
}

// errorRateEstimate is b's error rate with its Wilson score interval.
func errorRateEstimate(b *Bench) Estimate {
	n := float64(b.Completed + b.Failed)
	if n == 0 {
		return Estimate{Value: math.NaN()}
	}
	p := float64(b.Failed) / n
	z := zConfidence()
	center := (p + z*z/(2*n)) / (1 + z*z/n)
	half := z / (1 + z*z/n) * math.Sqrt(p*(1-p)/n+z*z/(4*n*n))
	return Estimate{Value: p, Lo: math.Max(0, center-half), Hi: math.Min(1, center+half), HasCI: true}
}

// judge decides r: regressed when both have intervals, new's lies beyond base's on the worse
// side, and the change exceeds tolerance.
func (r Regression) judge(tolerance float64) Regression {
	switch {
	case !r.Base.HasCI || !r.New.HasCI:
		r.Note = "too few samples for an interval"
		return r
	case r.HigherIsWorse:
		r.Regressed = r.New.Lo > r.Base.Hi && r.New.Value > r.Base.Value*(1+tolerance)
	default:
		r.Regressed = r.New.Hi < r.Base.Lo && r.New.Value < r.Base.Value*(1-tolerance)
	}
	return r
}

// WriteRegressions writes a line per figure compared, with both values and intervals, and
// returns how many regressed and how many were compared.
func WriteRegressions(w io.Writer, baseName, newName string, rs []Regression, tolerance float64) (regressed, checked int) {
	fmt.Fprintf(w, "regression check: %s against %s (95%% intervals apart on the worse side, by more than %g%%)\n",
		newName, baseName, 100*tolerance)
	fmt.Fprintf(w, "  %-9s  %-24s %-30s %-30s %s\n", "verdict", "figure", "base [95% CI]", "new [95% CI]", "change")
	for _, r := range rs {
		verdict := "ok"
		switch {
		case r.Note != "":
			verdict = "n/a"
		case r.Regressed:
			verdict = "REGRESSED"
		}
		if r.Note == "" {
			checked++
		}
		if r.Regressed {
			regressed++
		}
		line := fmt.Sprintf("  %-9s  %-24s %-30s %-30s %s", verdict, r.Key, r.Base.format(r.Key), r.New.format(r.Key), r.changeText())
		if r.Note != "" {
			line += "  (" + r.Note + ")"
		}
		fmt.Fprintln(w, line)
	}
	return regressed, checked
}

// RegressionError is the GateError of a regression check in which regressed of checked
// figures regressed; nil when none did.
func RegressionError(regressed, checked int) error {
	if regressed == 0 {
		return nil
	}
	return &GateError{What: gateRegressions, Failed: regressed, Checked: checked}
}

func (r Regression) changeText() string {
	if r.Key == "error_rate" {
		return fmt.Sprintf("%+.2f pts", 100*(r.New.Value-r.Base.Value))
	}
	c := r.Change()
	if math.IsNaN(c) || math.IsInf(c, 0) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*c)
}

func (e Estimate) format(key string) string {
	f := func(v float64) string { return fmt.Sprintf("%.4g", v) }
	if key == "error_rate" {
		f = func(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }
	}
	if math.IsNaN(e.Value) {
		return "-"
	}
	if !e.HasCI {
		return f(e.Value) + " [n/a]"
	}
	return fmt.Sprintf("%s [%s, %s]", f(e.Value), f(e.Lo), f(e.Hi))
}

// zConfidence is the standard normal quantile of a two-sided interval at DefaultConfidence
// (1.96 for 95%).
func zConfidence() float64 { return math.Sqrt2 * math.Erfinv(DefaultConfidence) }
