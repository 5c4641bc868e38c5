package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Gates for CI: thresholds on the numbers of one bench result (bench --fail-on), and the
// regression check of one result against another (report --compare --fail-on-regression).
// Either one failing is a GateError, which the ragtail command turns into exit status
// GateExitStatus, so that CI can tell a breached gate from a run that could not be made.

// GateExitStatus is the exit status of a ragtail command whose gate failed (k6's, for a
// breached threshold): the results were written, and they are not good enough.
const GateExitStatus = 99

// GateError reports a failed gate: Failed of Checked thresholds breached, or metrics regressed.
type GateError struct {
	What    string // "thresholds" or "metrics regressed"
	Failed  int
	Checked int
}

func (e *GateError) Error() string {
	if e.What == gateRegressions {
		return fmt.Sprintf("%d of %d metrics regressed beyond sampling error", e.Failed, e.Checked)
	}
	return fmt.Sprintf("%d of %d thresholds of --fail-on failed", e.Failed, e.Checked)
}

const (
	gateThresholds  = "thresholds"
	gateRegressions = "metrics regressed"
)

// Threshold is a bound on a numeric key of the ragtail.bench/v1 JSON: p95_ttft_ms<500.
type Threshold struct {
	Key   string
	Op    string // <, <=, > or >=
	Limit float64
}

// String formats the threshold as ParseThresholds reads it.
func (t Threshold) String() string {
	return t.Key + t.Op + strconv.FormatFloat(t.Limit, 'g', -1, 64)
}

// PercentileOf splits a threshold on a percentile key (p95_ttft_ms) into its metric and
// percentile; ok is false for any other key (a mean, a count, a phase's).
func (t Threshold) PercentileOf() (metric string, p float64, ok bool) {
	metric, stat, ok := splitMetricKey(t.Key)
	if !ok || !validP(stat) || !slices.Contains(AllMetrics, metric) {
		return "", 0, false
	}
	p, _ = strconv.ParseFloat(stat[1:], 64)
	return metric, p, true
}

// Holds reports whether v meets the threshold.
func (t Threshold) Holds(v float64) bool { return t.holds(v) }

// holds reports whether v meets the threshold.
func (t Threshold) holds(v float64) bool {
	switch t.Op {
	case "<":
		return v < t.Limit
	case "<=":
		return v <= t.Limit
	case ">":
		return v > t.Limit
	default:
		return v >= t.Limit
	}
}

// runKeys are the numeric keys of every bench result, whatever its options.
var runKeys = []string{"completed", "failed", "error_rate", "duration_s", "total_input_tokens", "total_output_tokens",
	"request_throughput", "output_throughput", "total_token_throughput", "new_connections", "reused_connections"}

// goodputKeys are the numeric keys of a result with goodput SLOs.
var goodputKeys = []string{"goodput", "goodput_requests"}

// ParseThresholds reads comma-separated thresholds KEY OP NUMBER, OP one of <, <=, >, >=
// (p95_ttft_ms<500,error_rate<0.01,goodput>20). A key must be one GateKeys could give for some
// options: a run's count, rate or throughput, goodput, or mean_M_ms, median_M_ms, std_M_ms or
// pP_M_ms of a metric M; CheckThresholds checks it against the options of a run.
func ParseThresholds(s string) ([]Threshold, error) {
	var out []Threshold
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		i := strings.IndexAny(part, "<>")
		if i <= 0 {
			return nil, fmt.Errorf("%q: want KEY<NUMBER, KEY<=NUMBER, KEY>NUMBER or KEY>=NUMBER, e.g. p95_ttft_ms<500", part)
		}
		t := Threshold{Key: strings.TrimSpace(part[:i]), Op: part[i : i+1]}
		rest := part[i+1:]
		if after, ok := strings.CutPrefix(rest, "="); ok {
			t.Op, rest = t.Op+"=", after
		}
		limit, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil || math.IsNaN(limit) || math.IsInf(limit, 0) {
			return nil, fmt.Errorf("%q: %q is not a number", part, strings.TrimSpace(rest))
		}
		t.Limit = limit
		if !knownKey(t.Key) {
			return nil, fmt.Errorf("%q: unknown key %q: want one of %s", part, t.Key, keyHelp())
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("thresholds %q: none given", s)
	}
	return out, nil
}

// knownKey reports whether key is a numeric key of some bench result.
func knownKey(key string) bool {
	if slices.Contains(runKeys, key) || slices.Contains(goodputKeys, key) {
		return true
	}
	metric, p, ok := splitMetricKey(key)
	return ok && (slices.Contains(AllMetrics, metric) || slices.Contains(AllPhases, metric)) &&
		(p == "mean" || p == "median" || p == "std" || validP(p))
}

// splitMetricKey splits STAT_METRIC_ms into STAT (mean, median, std or pP) and METRIC.
func splitMetricKey(key string) (metric, stat string, ok bool) {
	rest, ok := strings.CutSuffix(key, "_ms")
	if !ok {
		return "", "", false
	}
	stat, metric, ok = strings.Cut(rest, "_")
	return metric, stat, ok
}

// validP reports whether s is pP with P a percentile in (0, 100).
func validP(s string) bool {
	num, ok := strings.CutPrefix(s, "p")
	if !ok {
		return false
	}
	p, err := strconv.ParseFloat(num, 64)
	return err == nil && p > 0 && p < 100 && formatP(p) == num
}

// keyHelp describes the keys ParseThresholds reads.
func keyHelp() string {
	return strings.Join(append(slices.Clone(runKeys), goodputKeys...), ", ") +
		" (with --goodput), or mean_M_ms, median_M_ms, std_M_ms, pP_M_ms for M in " + strings.Join(AllMetrics, ", ") +
		" and P in --metric-percentiles (p50_ttft_ms, p99.9_e2el_ms), and the same of the HTTP phases " + strings.Join(AllPhases, ", ") +
		" (p99_connect_ms)"
}

// GateKeys lists the numeric keys of the bench results that Summarize writes with o: the ones
// thresholds can bound.
func GateKeys(o Options) []string {
	o = o.withDefaults()
	keys := slices.Clone(runKeys)
	if len(o.Goodput) > 0 {
		keys = append(keys, goodputKeys...)
	}
	for _, m := range append(slices.Clone(o.Metrics), AllPhases...) {
		keys = append(keys, "mean_"+m+"_ms", "median_"+m+"_ms", "std_"+m+"_ms")
		for _, p := range o.Percentiles {
			keys = append(keys, "p"+formatP(p)+"_"+m+"_ms")
		}
	}
	return keys
}

// CheckThresholds fails, naming the key, when a threshold bounds a key that results
// summarised with o do not have (a metric left out of --percentile-metrics, a percentile not
// in --metric-percentiles, goodput without SLOs).
func CheckThresholds(ts []Threshold, o Options) error {
	keys := GateKeys(o)
	for _, t := range ts {
		if !slices.Contains(keys, t.Key) {
			return fmt.Errorf("%s: the result has no key %s with these flags: it has %s", t, t.Key, strings.Join(keys, ", "))
		}
	}
	return nil
}

// ThresholdResult is a threshold checked against a result.
type ThresholdResult struct {
	Threshold
	Value  float64 // as in the JSON; NaN when the key is null (no sample) or absent
	Passed bool    // a key without a value fails
}

// CheckBench checks the thresholds against the JSON of b: each against the value its key has
// in the file, as any reader of the file would. A key that is null (no sample) or absent (TTFO's,
// written only when the server reasoned; a phase's, only when some request had it; the
// connections', only when some were counted) fails its threshold.
func CheckBench(b *Bench, ts []Threshold) ([]ThresholdResult, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, err
	}
	out := make([]ThresholdResult, 0, len(ts))
	for _, t := range ts {
		r := ThresholdResult{Threshold: t, Value: math.NaN()}
		v, ok := keys[t.Key]
		if !ok { // TTFO's, a phase's or a count's, written only when they have a value
			out = append(out, r)
			continue
		}
		var f *float64
		if err := json.Unmarshal(v, &f); err != nil {
			return nil, fmt.Errorf("threshold %s: %s is not a number: %s", t, t.Key, v)
		}
		if f != nil {
			r.Value, r.Passed = *f, t.holds(*f)
		}
		out = append(out, r)
	}
	return out, nil
}

// WriteThresholds writes a line per threshold, passed or failed with the measured value, and
// returns a GateError when any failed.
func WriteThresholds(w io.Writer, rs []ThresholdResult) error {
	failed := 0
	fmt.Fprintf(w, "thresholds (--fail-on):\n")
	for _, r := range rs {
		verdict, value := "ok    ", strconv.FormatFloat(r.Value, 'g', -1, 64)
		if !r.Passed {
			verdict = "FAILED"
			failed++
		}
		if math.IsNaN(r.Value) {
			value = "none (no sample in the result)"
		}
		fmt.Fprintf(w, "  %s  %-32s measured %s\n", verdict, r.Key+" "+r.Op+" "+strconv.FormatFloat(r.Limit, 'g', -1, 64), value)
	}
	if failed > 0 {
		return &GateError{What: gateThresholds, Failed: failed, Checked: len(rs)}
	}
	return nil
}
