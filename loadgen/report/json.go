package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// The JSON of a Bench is written by hand as an ordered object: its keys contain dots
// ("p99.9_ttft_ms", vLLM's spelling) and their order is part of what makes the file readable.
// Latencies are in milliseconds rounded to the microsecond (the histograms' resolution), other
// real numbers to six significant digits, so files are stable and diff well.
//
// RunInfo.RequestRate is +Inf for a closed loop, which JSON cannot hold: it is written as the
// string "inf" (as vLLM prints it), and "inf", "+inf", "infinity" and null are read back.

// field is one key of an ordered JSON object.
type field struct {
	key string
	val any
}

// object is a JSON object whose keys keep their order.
type object []field

// MarshalJSON writes the object in order, without HTML escaping.
func (o object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := encodeValue(&buf, f.key); err != nil {
			return nil, err
		}
		buf.WriteByte(':')
		if err := encodeValue(&buf, f.val); err != nil {
			return nil, fmt.Errorf("%s: %w", f.key, err)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func encodeValue(buf *bytes.Buffer, v any) error {
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		buf.WriteString("null")
		return nil
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	return nil
}

// writeIndented writes v as indented JSON followed by a newline, with short arrays of numbers
// or names (intervals, percentile lists) kept on one line.
func writeIndented(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	out := flatArrayRE.ReplaceAllFunc(buf.Bytes(), func(m []byte) []byte {
		items := flatItemRE.FindAll(m, -1)
		return append(append([]byte{'['}, bytes.Join(items, []byte(", "))...), ']')
	})
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// flatArrayRE matches an indented array whose items are all numbers or plain names. A raw
// newline cannot occur inside a JSON string, so it only ever matches structure.
var (
	flatArrayRE = regexp.MustCompile(`\[\n\s*(?:(?:-?[0-9][0-9.eE+-]*|"[A-Za-z0-9_.:-]*"),\n\s*)*(?:-?[0-9][0-9.eE+-]*|"[A-Za-z0-9_.:-]*")\n\s*\]`)
	flatItemRE  = regexp.MustCompile(`-?[0-9][0-9.eE+-]*|"[A-Za-z0-9_.:-]*"`)
)

// WriteJSON writes a Bench, a Sweep or any other value as indented JSON.
func WriteJSON(w io.Writer, v any) error { return writeIndented(w, v) }

// msv is a duration in ms rounded to the microsecond.
func msv(d time.Duration) float64 {
	return roundTo(durationMS(d), 3)
}

// msOrNull is msv(*d), or null.
func msOrNull(d *time.Duration) any {
	if d == nil {
		return nil
	}
	return msv(*d)
}

func roundTo(x float64, decimals int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', decimals, 64), 64)
	return v
}

// sig rounds x to six significant digits.
func sig(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 6, 64), 64)
	return v
}

func rateOrInf(r float64) any {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return sig(r)
}

func configObject(c loadgen.RunInfo) object {
	o := object{
		{"url", c.URL},
		{"model", c.Model},
		{"shape", c.Shape},
		{"request_rate", rateOrInf(c.RequestRate)},
		{"burstiness", sig(c.Burstiness)},
		{"concurrency", c.Concurrency},
		{"num_prompts", c.NumPrompts},
		{"max_tokens", c.MaxTokens},
		{"seed", c.Seed},
	}
	if c.Segment != nil {
		o = append(o, field{"segment", object{{"index", c.Segment.Index}, {"count", c.Segment.Count}}})
	}
	if c.ScheduleHash != "" {
		o = append(o, field{"schedule_hash", c.ScheduleHash})
	}
	if c.Interrupted {
		o = append(o, field{"interrupted", true})
	}
	return o
}

func percentileKey(p float64, metric string) string {
	if metric == "" {
		return "p" + formatP(p) + "_ms"
	}
	return "p" + formatP(p) + "_" + metric + "_ms"
}

// percentileFields appends pP_<metric>_ms and its _ci for each percentile in ps (null when the
// metric has no samples or no interval).
func percentileFields(o object, metric string, ps []float64, stats []PercentileStat) object {
	for _, p := range ps {
		key := percentileKey(p, metric)
		var val, ci any
		for _, s := range stats {
			if s.P == p {
				val = msv(s.Value)
				if s.HasCI {
					ci = []float64{msv(s.Lo), msv(s.Hi)}
				}
			}
		}
		o = append(o, field{key, val}, field{key + "_ci", ci})
	}
	return o
}

// MarshalJSON writes the ragtail.bench/v1 document.
func (b *Bench) MarshalJSON() ([]byte, error) {
	return append(object{{"schema", SchemaBench}}, b.fields()...).MarshalJSON()
}

func (b *Bench) fields() object {
	var goodput, stepLimit any
	if len(b.Goodput) > 0 {
		goodput = b.Goodput.String()
	}
	if b.SessionStepLimit > 0 {
		stepLimit = msv(b.SessionStepLimit)
	}
	o := object{
		{"start", b.Start.UTC().Format(time.RFC3339Nano)},
		{"config", configObject(b.Config)},
		{"options", object{
			{"percentiles", orEmpty(b.Percentiles)},
			{"metrics", orEmpty(b.Metrics)},
			{"confidence", b.Confidence},
			{"goodput", goodput},
			{"session_step_limit_ms", stepLimit},
		}},
	}
	if c := b.Clock; c != nil {
		o = append(o, field{"clock", object{
			{"offset_ms", msv(c.Offset)},
			{"uncertainty_ms", msv(c.Uncertainty)},
			{"samples", c.Samples},
			{"method", c.Method},
		}})
	}
	if b.MergedFrom > 1 {
		o = append(o, field{"merged_from", b.MergedFrom})
	}
	if len(b.Sources) > 0 {
		o = append(o, field{"sources", b.Sources})
	}
	var goodputRate any
	if b.GoodputRate != nil {
		goodputRate = sig(*b.GoodputRate)
	}
	o = append(o, field{"completed", b.Completed}, field{"failed", b.Failed})
	if b.Warmup > 0 {
		o = append(o, field{"warmup", b.Warmup})
	}
	o = append(o,
		field{"duration_s", roundTo(b.Duration.Seconds(), 6)},
		field{"total_input_tokens", b.InputTokens},
		field{"total_output_tokens", b.OutputTokens})
	o = append(o, b.tokenDetailFields()...)
	o = append(o,
		field{"request_throughput", sig(b.RequestThroughput)},
		field{"output_throughput", sig(b.OutputThroughput)},
		field{"total_token_throughput", sig(b.TotalTokenThroughput)},
		field{"goodput", goodputRate},
	)
	if len(b.Goodput) > 0 {
		o = append(o, field{"goodput_requests", b.GoodRequests})
	}
	for _, s := range b.Stats {
		var mean, median, std any
		if s.Count > 0 {
			mean, median, std = msv(s.Mean), msv(s.Median), msv(s.Std)
		}
		o = append(o,
			field{"mean_" + s.Metric + "_ms", mean},
			field{"median_" + s.Metric + "_ms", median},
			field{"std_" + s.Metric + "_ms", std})
		o = percentileFields(o, s.Metric, b.Percentiles, s.Percentiles)
	}

	stages := object{}
	for _, s := range b.Stages {
		so := object{{"count", s.Count}, {"mean_ms", msv(s.Mean)}}
		stages = append(stages, field{s.Stage, percentileFields(so, "", b.Percentiles, s.Percentiles)})
	}
	o = append(o, field{"stages", stages})

	tails := object{}
	for _, t := range b.Tails {
		tails = append(tails, field{t.Metric, tailObject(t.Tail)})
	}
	o = append(o, field{"tail", tails})

	if s := b.Sessions; s != nil {
		var limit any
		if s.StepLimit > 0 {
			limit = msv(s.StepLimit)
		}
		o = append(o, field{"sessions", object{
			{"count", s.Count},
			{"completed", s.Completed},
			{"interrupted", s.Interrupted},
			{"truncated", s.Truncated},
			{"completion_rate", sig(s.CompletionRate())},
			{"interruption_rate", sig(s.InterruptionRate())},
			{"first_steps", s.FirstSteps},
			{"first_steps_completed", s.FirstStepsGood},
			{"first_step_completion_rate", sig(s.FirstStepCompletionRate())},
			{"step_limit_ms", limit},
		}})
	}

	slow := make([]object, 0, len(b.Slowest))
	for _, s := range b.Slowest {
		so := object{{"index", s.Index}, {"trace_id", s.TraceID}}
		if s.Session != "" {
			so = append(so, field{"session", s.Session})
		}
		var ttft any
		if s.TTFT > 0 {
			ttft = msv(s.TTFT)
		}
		so = append(so, field{"intended_s", roundTo(s.Intended.Seconds(), 6)}, field{"e2el_ms", msv(s.E2EL)},
			field{"ttft_ms", ttft}, field{"status", s.Status})
		if s.ErrKind != "" {
			so = append(so, field{"error", s.ErrKind})
		}
		if len(s.ServerTiming) > 0 {
			so = append(so, field{"server_timing", serverTimingObject(s.ServerTiming)})
		}
		slow = append(slow, so)
	}
	o = append(o, field{"slowest", slow})

	tl := make([]object, 0, len(b.Timeline))
	for _, t := range b.Timeline {
		tl = append(tl, timelineObject(t))
	}
	o = append(o, field{"timeline", tl})

	errs, examples := object{}, object{}
	for _, e := range b.Errors {
		errs = append(errs, field{e.Kind, e.Count})
		if e.Example != "" {
			examples = append(examples, field{e.Kind, e.Example})
		}
	}
	o = append(o, field{"errors", errs}, field{"error_examples", examples})
	o = append(o, field{"token_lengths", tokenLengthsObject(b.TokenLengths)})
	if b.ServerMetrics != nil {
		o = append(o, field{"server_metrics", serverMetricsValue(b.ServerMetrics)})
	}

	hm, hs := object{}, object{}
	for _, m := range AllMetrics {
		if h := b.Histograms[m]; h != nil {
			hm = append(hm, field{m, h})
		}
	}
	for _, st := range stageOrder(b.StageHistograms) {
		hs = append(hs, field{st, b.StageHistograms[st]})
	}
	o = append(o, field{"histograms", object{{"metrics", hm}, {"stages", hs}}})
	return o
}

// serverTimingObject is the stages of one request in pipeline order, in ms to the microsecond.
func serverTimingObject(st map[string]float64) object {
	keys := make(map[string]*stats.Histogram, len(st))
	for k := range st {
		keys[k] = nil
	}
	o := make(object, 0, len(st))
	for _, k := range stageOrder(keys) {
		o = append(o, field{k, roundTo(st[k], 3)})
	}
	return o
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func timelineObject(t TimelineBin) object {
	meanOrNull := func(n int64, d time.Duration) any {
		if n == 0 {
			return nil
		}
		return msv(d)
	}
	return object{
		{"t_s", roundTo(t.T.Seconds(), 6)},
		{"dt_s", roundTo(t.Width.Seconds(), 6)},
		{"sent", t.Sent},
		{"completed", t.Completed},
		{"failed", t.Failed},
		{"n", t.N},
		{"mean_e2el_ms", meanOrNull(t.N, t.MeanE2EL)},
		{"max_e2el_ms", meanOrNull(t.N, t.MaxE2EL)},
		{"p50_e2el_ms", msOrNull(t.P50E2EL)},
		{"p99_e2el_ms", msOrNull(t.P99E2EL)},
		{"n_ttft", t.NTTFT},
		{"mean_ttft_ms", meanOrNull(t.NTTFT, t.MeanTTFT)},
		{"max_ttft_ms", meanOrNull(t.NTTFT, t.MaxTTFT)},
		{"p50_ttft_ms", msOrNull(t.P50TTFT)},
		{"p99_ttft_ms", msOrNull(t.P99TTFT)},
	}
}

func tailObject(t stats.Tail) object {
	var p99, hill, best any
	if t.N >= stats.MinTailSamples {
		p99 = msv(t.EmpiricalP99)
	}
	if h := t.Hill; h != nil {
		hill = object{{"alpha", sig(h.Alpha)}, {"se", sig(h.SE)}, {"k", h.K}, {"threshold_ms", msv(h.Threshold)}}
	}
	if t.Best != "" {
		best = t.Best
	}
	fits := make([]object, 0, len(t.Fits))
	for _, f := range t.Fits {
		params := object{}
		for _, p := range f.Params {
			params = append(params, field{p.Name, sig(p.Value)}, field{p.Name + "_se", sig(p.SE)})
		}
		fits = append(fits, object{
			{"model", f.Model},
			{"params", params},
			{"log_likelihood", sig(f.LogLikelihood)},
			{"aic", sig(f.AIC)},
			{"p99_ms", msv(f.P99)},
			{"p99_error_pct", roundTo(100*f.RelativeError(t.EmpiricalP99), 2)},
		})
	}
	return object{
		{"n", t.N},
		{"empirical_p99_ms", p99},
		{"hill", hill},
		{"fits", fits},
		{"best", best},
		{"verdict", t.Verdict()},
	}
}

// ---- decoding ----

// maxFileSize bounds what Read and Decode accept.
const maxFileSize = 256 << 20

// jobj is a decoded JSON object with a path for error messages.
type jobj struct {
	path string
	m    map[string]json.RawMessage
}

// decodeError collects the first error of a decode.
type decodeError struct{ err error }

func (d *decodeError) fail(path string, format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
	}
}

func (d *decodeError) failErr(path string, err error) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: %w", path, err)
	}
}

func isNull(raw json.RawMessage) bool { return raw == nil || string(bytes.TrimSpace(raw)) == "null" }

func (d *decodeError) object(path string, raw json.RawMessage) jobj {
	o := jobj{path: path}
	if isNull(raw) {
		return o
	}
	if err := json.Unmarshal(raw, &o.m); err != nil {
		d.fail(path, "want an object")
	}
	return o
}

func (o jobj) sub(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

// float reads a finite number; a missing or null key leaves *dst and returns false.
func (d *decodeError) float(o jobj, key string, dst *float64) bool {
	raw, ok := o.m[key]
	if !ok || isNull(raw) {
		return false
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		d.fail(o.sub(key), "want a number")
		return false
	}
	*dst = v
	return true
}

// maxNumber bounds every count, rate and time read from a file: nothing real comes near it,
// and it keeps arithmetic on hostile files finite.
const maxNumber = 1e15

// nonNeg reads a number in [0, maxNumber].
func (d *decodeError) nonNeg(o jobj, key string, dst *float64) bool {
	if !d.float(o, key, dst) {
		return false
	}
	if !(*dst >= 0 && *dst <= maxNumber) {
		d.fail(o.sub(key), "want a number between 0 and %g, got %g", maxNumber, *dst)
		return false
	}
	return true
}

func (d *decodeError) count(o jobj, key string, dst *int64) {
	var v float64
	if !d.nonNeg(o, key, &v) {
		return
	}
	if v != math.Trunc(v) {
		d.fail(o.sub(key), "want a whole number, got %g", v)
		return
	}
	*dst = int64(v)
}

func (d *decodeError) ms(o jobj, key string, dst *time.Duration) bool {
	var v float64
	if !d.nonNeg(o, key, &v) {
		return false
	}
	if v > durationMS(stats.HistogramHighest)*1e3 {
		d.fail(o.sub(key), "%g ms is out of range", v)
		return false
	}
	*dst = msDuration(v)
	return true
}

// maxStages bounds the stages of one request read from a file.
const maxStages = 64

// maxClockOffsetMS bounds a clock offset read from a file: a year.
const maxClockOffsetMS = 365 * 24 * 3600 * 1e3

// msSigned reads a duration in ms that may be negative (a clock offset), within a year.
func (d *decodeError) msSigned(o jobj, key string, dst *time.Duration) {
	var v float64
	if !d.float(o, key, &v) {
		return
	}
	if math.Abs(v) > maxClockOffsetMS {
		d.fail(o.sub(key), "%g ms is out of range", v)
		return
	}
	*dst = msDuration(v)
}

func (d *decodeError) optMS(o jobj, key string) *time.Duration {
	var v time.Duration
	if !d.ms(o, key, &v) {
		return nil
	}
	return &v
}

func (d *decodeError) str(o jobj, key string, dst *string) {
	raw, ok := o.m[key]
	if !ok || isNull(raw) {
		return
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		d.fail(o.sub(key), "want a string")
	}
}

func (d *decodeError) array(o jobj, key string) []json.RawMessage {
	raw, ok := o.m[key]
	if !ok || isNull(raw) {
		return nil
	}
	var out []json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		d.fail(o.sub(key), "want an array")
	}
	return out
}

// keys returns an object's keys sorted.
func (o jobj) keys() []string {
	out := make([]string, 0, len(o.m))
	for k := range o.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func decodeConfig(d *decodeError, o jobj) loadgen.RunInfo {
	var c loadgen.RunInfo
	d.str(o, "url", &c.URL)
	d.str(o, "model", &c.Model)
	d.str(o, "shape", &c.Shape)
	if raw, ok := o.m["request_rate"]; ok && !isNull(raw) {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			switch strings.ToLower(s) {
			case "inf", "+inf", "infinity", "+infinity":
				c.RequestRate = math.Inf(1)
			default:
				d.fail(o.sub("request_rate"), "want a number or \"inf\", got %q", s)
			}
		} else {
			d.nonNeg(o, "request_rate", &c.RequestRate)
		}
	}
	d.nonNeg(o, "burstiness", &c.Burstiness)
	var n int64
	d.count(o, "concurrency", &n)
	c.Concurrency = int(n)
	n = 0
	d.count(o, "num_prompts", &n)
	c.NumPrompts = int(n)
	n = 0
	d.count(o, "max_tokens", &n)
	c.MaxTokens = int(n)
	if raw, ok := o.m["seed"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &c.Seed); err != nil {
			d.fail(o.sub("seed"), "want a whole number >= 0")
		}
	}
	if raw, ok := o.m["interrupted"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &c.Interrupted); err != nil {
			d.fail(o.sub("interrupted"), "want true or false")
		}
	}
	if raw, ok := o.m["segment"]; ok && !isNull(raw) {
		so := d.object(o.sub("segment"), raw)
		var i, n int64
		d.count(so, "index", &i)
		d.count(so, "count", &n)
		seg := loadgen.SegmentOf{Index: int(min(i, 1<<30)), Count: int(min(n, 1<<30))}
		if err := seg.Validate(); err != nil {
			d.failErr(o.sub("segment"), err)
		} else {
			c.Segment = &seg
		}
	}
	d.str(o, "schedule_hash", &c.ScheduleHash)
	if len(c.ScheduleHash) > 64 {
		d.fail(o.sub("schedule_hash"), "longer than 64 characters")
		c.ScheduleHash = ""
	}
	return c
}

// percentileKeyRE matches pP_<metric>_ms[_ci] and pP_ms[_ci] (stages).
var percentileKeyRE = regexp.MustCompile(`^p([0-9]+(?:\.[0-9]+)?)_(?:([a-z0-9_]+?)_)?ms(_ci)?$`)

// decodePercentiles reads the percentile keys of one metric ("" for a stage object).
func decodePercentiles(d *decodeError, o jobj, metric string) []PercentileStat {
	var out []PercentileStat
	for _, k := range o.keys() {
		m := percentileKeyRE.FindStringSubmatch(k)
		if m == nil || m[2] != metric || m[3] != "" {
			continue
		}
		p, err := strconv.ParseFloat(m[1], 64)
		if err != nil || !(p > 0 && p < 100) {
			d.fail(o.sub(k), "percentile %q out of (0, 100)", m[1])
			continue
		}
		var v time.Duration
		if !d.ms(o, k, &v) {
			continue
		}
		ps := PercentileStat{P: p, Value: v}
		if raw, ok := o.m[k+"_ci"]; ok && !isNull(raw) {
			var ci []float64
			if err := json.Unmarshal(raw, &ci); err != nil || len(ci) != 2 || !(ci[0] >= 0 && ci[0] <= ci[1]) || ci[1] > 1e10 {
				d.fail(o.sub(k+"_ci"), "want [lo, hi] with 0 <= lo <= hi")
				continue
			}
			ps.Lo, ps.Hi, ps.HasCI = msDuration(ci[0]), msDuration(ci[1]), true
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b PercentileStat) int { return cmpFloat(a.P, b.P) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// decodeHistogram reads one histogram string.
func decodeHistogram(d *decodeError, path string, raw json.RawMessage) *stats.Histogram {
	h := stats.NewHistogram()
	if err := h.UnmarshalJSON(raw); err != nil {
		d.failErr(path, err)
		return nil
	}
	return h
}

// UnmarshalJSON reads a ragtail.bench/v1 document (the schema key may be absent, as in the
// points of a sweep, but must be right when present).
func (b *Bench) UnmarshalJSON(data []byte) error {
	d := &decodeError{}
	o := d.object("", data)
	if d.err != nil {
		return d.err
	}
	var schema string
	d.str(o, "schema", &schema)
	if schema != "" && schema != SchemaBench {
		return fmt.Errorf("schema %q is not %s", schema, SchemaBench)
	}
	nb := decodeBench(d, o)
	if d.err != nil {
		return d.err
	}
	*b = *nb
	return nil
}

func decodeBench(d *decodeError, o jobj) *Bench {
	b := &Bench{Histograms: map[string]*stats.Histogram{}, StageHistograms: map[string]*stats.Histogram{}}
	var start string
	d.str(o, "start", &start)
	if start != "" {
		t, err := time.Parse(time.RFC3339Nano, start)
		if err != nil {
			d.fail(o.sub("start"), "want an RFC 3339 time")
		}
		b.Start = t
	}
	b.Config = decodeConfig(d, d.object(o.sub("config"), o.m["config"]))

	opts := d.object(o.sub("options"), o.m["options"])
	if raw := opts.m["percentiles"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &b.Percentiles); err != nil {
			d.fail(opts.sub("percentiles"), "want an array of numbers")
		}
		for _, p := range b.Percentiles {
			if !(p > 0 && p < 100) {
				d.fail(opts.sub("percentiles"), "percentile %g out of (0, 100)", p)
			}
		}
	}
	if raw := opts.m["metrics"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &b.Metrics); err != nil {
			d.fail(opts.sub("metrics"), "want an array of names")
		}
	}
	d.float(opts, "confidence", &b.Confidence)
	if !(b.Confidence > 0 && b.Confidence < 1) {
		b.Confidence = DefaultConfidence
	}
	var goodput string
	d.str(opts, "goodput", &goodput)
	if slos, err := stats.ParseGoodput(goodput); err != nil {
		d.failErr(opts.sub("goodput"), err)
	} else {
		b.Goodput = slos
	}
	d.ms(opts, "session_step_limit_ms", &b.SessionStepLimit)

	if raw := o.m["clock"]; !isNull(raw) {
		co := d.object(o.sub("clock"), raw)
		c := &Clock{}
		var samples int64
		d.msSigned(co, "offset_ms", &c.Offset)
		d.ms(co, "uncertainty_ms", &c.Uncertainty)
		d.count(co, "samples", &samples)
		d.str(co, "method", &c.Method)
		c.Samples = int(min(samples, 1<<40))
		b.Clock = c
	}

	var merged int64
	d.count(o, "merged_from", &merged)
	b.MergedFrom = int(min(merged, 1<<30))
	if raw := o.m["sources"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &b.Sources); err != nil {
			d.fail(o.sub("sources"), "want an array of strings")
		}
	}
	d.count(o, "completed", &b.Completed)
	d.count(o, "failed", &b.Failed)
	d.count(o, "warmup", &b.Warmup)
	var secs float64
	if d.nonNeg(o, "duration_s", &secs) {
		if secs > 1e9 {
			d.fail(o.sub("duration_s"), "out of range")
		}
		b.Duration = time.Duration(math.Round(secs * 1e9))
	}
	d.count(o, "total_input_tokens", &b.InputTokens)
	d.count(o, "total_output_tokens", &b.OutputTokens)
	d.count(o, "total_cached_tokens", &b.CachedTokens)
	d.count(o, "total_reasoning_tokens", &b.ReasoningTokens)
	d.nonNeg(o, "request_throughput", &b.RequestThroughput)
	d.nonNeg(o, "output_throughput", &b.OutputThroughput)
	d.nonNeg(o, "total_token_throughput", &b.TotalTokenThroughput)
	var g float64
	if d.nonNeg(o, "goodput", &g) {
		b.GoodputRate = &g
	}
	d.count(o, "goodput_requests", &b.GoodRequests)

	hists := d.object(o.sub("histograms"), o.m["histograms"])
	hm := d.object(hists.sub("metrics"), hists.m["metrics"])
	for _, k := range hm.keys() {
		if slices.Contains(AllMetrics, k) {
			b.Histograms[k] = decodeHistogram(d, hm.sub(k), hm.m[k])
		}
	}
	hs := d.object(hists.sub("stages"), hists.m["stages"])
	for _, k := range hs.keys() {
		b.StageHistograms[k] = decodeHistogram(d, hs.sub(k), hs.m[k])
	}

	// Metrics: those listed in options, else those with keys.
	if len(b.Metrics) == 0 {
		for _, k := range o.keys() {
			for _, m := range AllMetrics {
				if k == "mean_"+m+"_ms" {
					b.Metrics = append(b.Metrics, m)
				}
			}
			if pm := percentileKeyRE.FindStringSubmatch(k); pm != nil && slices.Contains(AllMetrics, pm[2]) {
				b.Metrics = append(b.Metrics, pm[2])
			}
		}
	}
	b.Metrics = canonicalMetrics(b.Metrics)
	for _, m := range b.Metrics {
		s := MetricStats{Metric: m}
		if h := b.Histograms[m]; h != nil {
			s.Count = h.Count()
		}
		d.ms(o, "mean_"+m+"_ms", &s.Mean)
		d.ms(o, "median_"+m+"_ms", &s.Median)
		d.ms(o, "std_"+m+"_ms", &s.Std)
		s.Percentiles = decodePercentiles(d, o, m)
		b.Stats = append(b.Stats, s)
	}
	if len(b.Percentiles) == 0 && len(b.Stats) > 0 {
		for _, p := range b.Stats[0].Percentiles {
			b.Percentiles = append(b.Percentiles, p.P)
		}
	}

	stages := d.object(o.sub("stages"), o.m["stages"])
	stageSet := map[string]*stats.Histogram{}
	for _, k := range stages.keys() {
		stageSet[k] = nil
	}
	for _, k := range stageOrder(stageSet) {
		so := d.object(stages.sub(k), stages.m[k])
		s := StageStats{Stage: k}
		d.count(so, "count", &s.Count)
		d.ms(so, "mean_ms", &s.Mean)
		s.Percentiles = decodePercentiles(d, so, "")
		b.Stages = append(b.Stages, s)
	}

	tails := d.object(o.sub("tail"), o.m["tail"])
	tailKeys := tails.keys()
	slices.SortStableFunc(tailKeys, func(a, b string) int { return rankIn(TailMetrics, a) - rankIn(TailMetrics, b) })
	for _, k := range tailKeys {
		b.Tails = append(b.Tails, MetricTail{Metric: k, Tail: decodeTail(d, d.object(tails.sub(k), tails.m[k]))})
	}

	if raw := o.m["sessions"]; !isNull(raw) {
		so := d.object(o.sub("sessions"), raw)
		s := &Sessions{}
		d.count(so, "count", &s.Count)
		d.count(so, "completed", &s.Completed)
		d.count(so, "interrupted", &s.Interrupted)
		d.count(so, "truncated", &s.Truncated)
		d.count(so, "first_steps", &s.FirstSteps)
		d.count(so, "first_steps_completed", &s.FirstStepsGood)
		d.ms(so, "step_limit_ms", &s.StepLimit)
		b.Sessions = s
	}

	for i, raw := range d.array(o, "slowest") {
		so := d.object(fmt.Sprintf("%s[%d]", o.sub("slowest"), i), raw)
		var s SlowRequest
		var idx, status int64
		var intended float64
		d.count(so, "index", &idx)
		d.str(so, "trace_id", &s.TraceID)
		d.str(so, "session", &s.Session)
		if d.nonNeg(so, "intended_s", &intended) && intended < 1e9 {
			s.Intended = time.Duration(math.Round(intended * 1e9))
		}
		d.ms(so, "e2el_ms", &s.E2EL)
		d.ms(so, "ttft_ms", &s.TTFT)
		d.count(so, "status", &status)
		d.str(so, "error", &s.ErrKind)
		if raw := so.m["server_timing"]; !isNull(raw) {
			sto := d.object(so.sub("server_timing"), raw)
			if len(sto.m) > maxStages {
				d.fail(so.sub("server_timing"), "%d stages, more than %d", len(sto.m), maxStages)
			}
			s.ServerTiming = make(map[string]float64, len(sto.m))
			for _, k := range sto.keys() {
				var v float64
				if d.nonNeg(sto, k, &v) {
					s.ServerTiming[k] = v
				}
			}
		}
		s.Index, s.Status = int(min(idx, 1<<40)), int(min(status, 1000))
		b.Slowest = append(b.Slowest, s)
	}
	sortSlowest(b.Slowest)

	for i, raw := range d.array(o, "timeline") {
		to := d.object(fmt.Sprintf("%s[%d]", o.sub("timeline"), i), raw)
		b.Timeline = append(b.Timeline, decodeTimelineBin(d, to))
	}

	errs := d.object(o.sub("errors"), o.m["errors"])
	examples := d.object(o.sub("error_examples"), o.m["error_examples"])
	emap := map[string]*ErrorCount{}
	for _, k := range errs.keys() {
		e := &ErrorCount{Kind: k}
		d.count(errs, k, &e.Count)
		d.str(examples, k, &e.Example)
		emap[k] = e
	}
	b.Errors = sortErrors(emap)
	if raw := o.m["token_lengths"]; !isNull(raw) {
		b.TokenLengths = decodeTokenLengths(d, d.object(o.sub("token_lengths"), raw))
	}
	if raw := o.m["server_metrics"]; !isNull(raw) {
		b.ServerMetrics = decodeServerMetrics(d, o.sub("server_metrics"), raw)
	}
	return b
}

func rankIn(list []string, s string) int {
	if i := slices.Index(list, s); i >= 0 {
		return i
	}
	return len(list)
}

func decodeTimelineBin(d *decodeError, o jobj) TimelineBin {
	var t TimelineBin
	var ts, dt float64
	if d.nonNeg(o, "t_s", &ts) && ts < 1e9 {
		t.T = time.Duration(math.Round(ts * 1e9))
	}
	if d.nonNeg(o, "dt_s", &dt) && dt < 1e9 {
		t.Width = time.Duration(math.Round(dt * 1e9))
	}
	d.count(o, "sent", &t.Sent)
	d.count(o, "completed", &t.Completed)
	d.count(o, "failed", &t.Failed)
	d.count(o, "n", &t.N)
	d.ms(o, "mean_e2el_ms", &t.MeanE2EL)
	d.ms(o, "max_e2el_ms", &t.MaxE2EL)
	t.P50E2EL = d.optMS(o, "p50_e2el_ms")
	t.P99E2EL = d.optMS(o, "p99_e2el_ms")
	d.count(o, "n_ttft", &t.NTTFT)
	d.ms(o, "mean_ttft_ms", &t.MeanTTFT)
	d.ms(o, "max_ttft_ms", &t.MaxTTFT)
	t.P50TTFT = d.optMS(o, "p50_ttft_ms")
	t.P99TTFT = d.optMS(o, "p99_ttft_ms")
	return t
}

// modelParams lists each model's parameters in order.
var modelParams = map[string][]string{
	stats.ModelExponential: {"rate_per_ms"},
	stats.ModelLognormal:   {"mu", "sigma"},
	stats.ModelPareto:      {"xm_ms", "alpha"},
}

func decodeTail(d *decodeError, o jobj) stats.Tail {
	var t stats.Tail
	d.count(o, "n", &t.N)
	d.ms(o, "empirical_p99_ms", &t.EmpiricalP99)
	if raw := o.m["hill"]; !isNull(raw) {
		ho := d.object(o.sub("hill"), raw)
		h := &stats.Hill{}
		d.float(ho, "alpha", &h.Alpha)
		d.float(ho, "se", &h.SE)
		d.count(ho, "k", &h.K)
		d.ms(ho, "threshold_ms", &h.Threshold)
		t.Hill = h
	}
	for i, raw := range d.array(o, "fits") {
		fo := d.object(fmt.Sprintf("%s[%d]", o.sub("fits"), i), raw)
		var f stats.Fit
		d.str(fo, "model", &f.Model)
		names, ok := modelParams[f.Model]
		if !ok {
			d.fail(fo.sub("model"), "unknown model %q", f.Model)
			continue
		}
		po := d.object(fo.sub("params"), fo.m["params"])
		for _, n := range names {
			p := stats.Param{Name: n}
			d.float(po, n, &p.Value)
			d.float(po, n+"_se", &p.SE)
			f.Params = append(f.Params, p)
		}
		d.float(fo, "log_likelihood", &f.LogLikelihood)
		d.float(fo, "aic", &f.AIC)
		// A fitted model's P99 is an extrapolation: for a heavy tail it may lie far beyond the
		// histogram's range, and msDuration saturates instead of refusing it.
		if p99 := 0.0; d.nonNeg(fo, "p99_ms", &p99) {
			f.P99 = msDuration(p99)
		}
		t.Fits = append(t.Fits, f)
	}
	d.str(o, "best", &t.Best)
	return t
}

// Document is what WriteHTML renders and Decode reads: a *Bench, a *Sweep, or a *File that
// holds one of them; WriteHTML also renders a *Comparison.
type Document interface{ isDocument() }

func (*Bench) isDocument() {}
func (*Sweep) isDocument() {}
func (*File) isDocument()  {}

// File is a decoded result file: exactly one of Bench and Sweep is set.
type File struct {
	Path  string
	Bench *Bench
	Sweep *Sweep
}

// ErrUnknownSchema is returned for JSON that is not a ragtail result.
var ErrUnknownSchema = errors.New("not a ragtail result file")

// Decode reads a result file, telling a bench from a sweep by its schema key.
func Decode(r io.Reader) (*File, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("file larger than %d MiB", maxFileSize>>20)
	}
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("%w: invalid JSON: %w", ErrUnknownSchema, err)
	}
	switch head.Schema {
	case SchemaBench:
		b := &Bench{}
		if err := b.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("%s: %w", SchemaBench, err)
		}
		return &File{Bench: b}, nil
	case SchemaSweep:
		s := &Sweep{}
		if err := s.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("%s: %w", SchemaSweep, err)
		}
		return &File{Sweep: s}, nil
	case "":
		return nil, fmt.Errorf("%w: no \"schema\" key (want %s or %s)", ErrUnknownSchema, SchemaBench, SchemaSweep)
	default:
		return nil, fmt.Errorf("%w: schema %q (want %s or %s)", ErrUnknownSchema, head.Schema, SchemaBench, SchemaSweep)
	}
}
