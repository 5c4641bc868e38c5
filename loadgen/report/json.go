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

// The JSON of a Bench is written from tagged structs for its static keys; the keys named after
// a metric, a percentile, a stage or an error kind ("p99.9_ttft_ms", vLLM's spelling) are an
// ordered object, because their order is part of what makes the file readable. Latencies are in
// milliseconds rounded to the microsecond (the histograms' resolution), other real numbers to
// six significant digits, so files are stable and diff well. A real number that is not finite
// (a rate over nothing) is written null.
//
// RunInfo.RequestRate is +Inf for a closed loop, which JSON cannot hold: it is written as the
// string "inf" (as vLLM prints it), and "inf", "+inf", "infinity" and null are read back.

// field is one key of an ordered JSON object. A field whose val is a splice has no key of its
// own: the members of the object it holds are written in its place.
type field struct {
	key string
	val any
}

// splice splices the members of v, which must encode as a JSON object, into an object.
type splice struct{ v any }

// object is a JSON object whose keys keep their order.
type object []field

// MarshalJSON writes the object in order, without HTML escaping.
func (o object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	n := 0
	for _, f := range o {
		if s, ok := f.val.(splice); ok {
			if err := spliceMembers(&buf, s.v, &n); err != nil {
				return nil, err
			}
			continue
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
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

// spliceMembers writes the members of v's JSON object into buf, after n members already there.
func spliceMembers(buf *bytes.Buffer, v any, n *int) error {
	var inner bytes.Buffer
	if err := encodeValue(&inner, v); err != nil {
		return err
	}
	b := bytes.TrimSpace(inner.Bytes())
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return fmt.Errorf("splice %T: not a JSON object", v)
	}
	members := bytes.TrimSpace(b[1 : len(b)-1])
	if len(members) == 0 {
		return nil
	}
	if *n > 0 {
		buf.WriteByte(',')
	}
	buf.Write(members)
	*n++
	return nil
}

// marshalJSON is json.Marshal without HTML escaping: the files are read by people and tools,
// and the HTML report escapes what it shows itself.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := encodeValue(&buf, v); err != nil {
		return nil, err
	}
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

// jnum is a real number in a file: a JSON number, or null when it is NaN or infinite.
type jnum float64

// MarshalJSON writes the number as encoding/json writes a float64, or null.
func (r jnum) MarshalJSON() ([]byte, error) {
	f := float64(r)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// msv is a duration in ms rounded to the microsecond.
func msv(d time.Duration) float64 {
	return roundTo(durationMS(d), 3)
}

// msOrNull is msv(*d), or nil (null).
func msOrNull(d *time.Duration) *jnum {
	if d == nil {
		return nil
	}
	return realPtr(msv(*d))
}

// msWhen is msv(d) when ok, else nil (null).
func msWhen(ok bool, d time.Duration) *jnum {
	if !ok {
		return nil
	}
	return realPtr(msv(d))
}

func realPtr(x float64) *jnum {
	r := jnum(x)
	return &r
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

// rate is a request rate in a file: six significant digits, or "inf" for +Inf.
type rate float64

// MarshalJSON writes the rate.
func (r rate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"inf"`), nil
	}
	return jnum(sig(float64(r))).MarshalJSON()
}

// configJSON is the file form of loadgen.RunInfo.
type configJSON struct {
	URL          string       `json:"url"`
	Model        string       `json:"model"`
	Shape        string       `json:"shape"`
	RequestRate  rate         `json:"request_rate"`
	Burstiness   jnum         `json:"burstiness"`
	Concurrency  int          `json:"concurrency"`
	NumPrompts   int          `json:"num_prompts"`
	MaxTokens    int          `json:"max_tokens"`
	Seed         uint64       `json:"seed"`
	InFlightCap  int          `json:"in_flight_cap,omitempty"` // the open loop's default cap, when it applied
	Segment      *segmentJSON `json:"segment,omitempty"`
	ScheduleHash string       `json:"schedule_hash,omitempty"`
	Interrupted  bool         `json:"interrupted,omitempty"`
	Dataset      string       `json:"dataset,omitempty"`
	Stream       *bool        `json:"stream,omitempty"`
	Temperature  *jnum        `json:"temperature,omitempty"`
	Version      string       `json:"version,omitempty"`
	Command      string       `json:"command,omitempty"`
	HTTPClient   string       `json:"http_client,omitempty"`
}

type segmentJSON struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

func configObject(c loadgen.RunInfo) configJSON {
	o := configJSON{
		URL: c.URL, Model: c.Model, Shape: c.Shape, RequestRate: rate(c.RequestRate), Burstiness: jnum(sig(c.Burstiness)),
		Concurrency: c.Concurrency, NumPrompts: c.NumPrompts, MaxTokens: c.MaxTokens, Seed: c.Seed,
		ScheduleHash: c.ScheduleHash, Interrupted: c.Interrupted,
		Dataset: c.Dataset, Stream: c.Stream, Version: c.Version, Command: c.Command, HTTPClient: c.HTTPClient,
	}
	if c.Temperature != nil {
		o.Temperature = realPtr(sig(*c.Temperature))
	}
	o.InFlightCap = c.InFlightCap
	if c.Segment != nil {
		o.Segment = &segmentJSON{Index: c.Segment.Index, Count: c.Segment.Count}
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
		var val *jnum
		var ci []float64
		for _, s := range stats {
			if s.P == p {
				val = realPtr(msv(s.Value))
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

// benchHead is the run's description and counts, the first keys of a bench document.
type benchHead struct {
	Start             string      `json:"start"`
	Config            configJSON  `json:"config"`
	Options           optionsJSON `json:"options"`
	Clock             *clockJSON  `json:"clock,omitempty"`
	MergedFrom        int         `json:"merged_from,omitempty"` // written from 2 runs on
	Sources           []string    `json:"sources,omitempty"`
	Completed         int64       `json:"completed"`
	Failed            int64       `json:"failed"`
	Warmup            int64       `json:"warmup,omitempty"`
	DurationS         jnum        `json:"duration_s"`
	TotalInputTokens  int64       `json:"total_input_tokens"`
	TotalOutputTokens int64       `json:"total_output_tokens"`
}

type optionsJSON struct {
	Percentiles        []float64 `json:"percentiles"`
	Metrics            []string  `json:"metrics"`
	Confidence         jnum      `json:"confidence"`
	Goodput            *string   `json:"goodput"`
	SessionStepLimitMS *jnum     `json:"session_step_limit_ms"`
}

type clockJSON struct {
	OffsetMS      jnum   `json:"offset_ms"`
	UncertaintyMS jnum   `json:"uncertainty_ms"`
	Samples       int    `json:"samples"`
	Method        string `json:"method"`
}

// benchRates are the throughputs, after the token counts.
type benchRates struct {
	RequestThroughput    jnum   `json:"request_throughput"`
	OutputThroughput     jnum   `json:"output_throughput"`
	TotalTokenThroughput jnum   `json:"total_token_throughput"`
	Goodput              *jnum  `json:"goodput"`
	GoodputRequests      *int64 `json:"goodput_requests,omitempty"`
}

// benchAnalysis is what follows the per-metric keys: stages, tails and sessions.
type benchAnalysis struct {
	Stages   object        `json:"stages"`
	Tail     object        `json:"tail"`
	Sessions *sessionsJSON `json:"sessions,omitempty"`
}

// benchBody is the rest of the document: the requests, the timeline, the errors, the
// distributions and the histograms.
type benchBody struct {
	Slowest       []slowJSON         `json:"slowest"`
	Timeline      []timelineJSON     `json:"timeline"`
	Errors        object             `json:"errors"`
	ErrorExamples object             `json:"error_examples"`
	TokenLengths  tokenLengthsJSON   `json:"token_lengths"`
	ServerMetrics *serverMetricsJSON `json:"server_metrics,omitempty"`
	Histograms    histogramsJSON     `json:"histograms"`
}

type histogramsJSON struct {
	Metrics object `json:"metrics"`
	Stages  object `json:"stages"`
}

type sessionsJSON struct {
	Count                   int64 `json:"count"`
	Completed               int64 `json:"completed"`
	Interrupted             int64 `json:"interrupted"`
	Truncated               int64 `json:"truncated"`
	CompletionRate          jnum  `json:"completion_rate"`
	InterruptionRate        jnum  `json:"interruption_rate"`
	FirstSteps              int64 `json:"first_steps"`
	FirstStepsCompleted     int64 `json:"first_steps_completed"`
	FirstStepCompletionRate jnum  `json:"first_step_completion_rate"`
	StepLimitMS             *jnum `json:"step_limit_ms"`
}

type slowJSON struct {
	Index        int    `json:"index"`
	TraceID      string `json:"trace_id"`
	Session      string `json:"session,omitempty"`
	IntendedS    jnum   `json:"intended_s"`
	E2ELMS       jnum   `json:"e2el_ms"`
	TTFTMS       *jnum  `json:"ttft_ms"`
	Status       int    `json:"status"`
	Error        string `json:"error,omitempty"`
	ServerTiming object `json:"server_timing,omitempty"`
}

type timelineJSON struct {
	TS         jnum  `json:"t_s"`
	DtS        jnum  `json:"dt_s"`
	Sent       int64 `json:"sent"`
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed"`
	Output     int64 `json:"output_tokens"`
	N          int64 `json:"n"`
	MeanE2ELMS *jnum `json:"mean_e2el_ms"`
	MaxE2ELMS  *jnum `json:"max_e2el_ms"`
	P50E2ELMS  *jnum `json:"p50_e2el_ms"`
	P99E2ELMS  *jnum `json:"p99_e2el_ms"`
	NTTFT      int64 `json:"n_ttft"`
	MeanTTFTMS *jnum `json:"mean_ttft_ms"`
	MaxTTFTMS  *jnum `json:"max_ttft_ms"`
	P50TTFTMS  *jnum `json:"p50_ttft_ms"`
	P99TTFTMS  *jnum `json:"p99_ttft_ms"`
}

type tailJSON struct {
	N              int64     `json:"n"`
	EmpiricalP99MS *jnum     `json:"empirical_p99_ms"`
	Hill           *hillJSON `json:"hill"`
	Fits           []fitJSON `json:"fits"`
	Best           *string   `json:"best"`
	Verdict        string    `json:"verdict"`
}

type hillJSON struct {
	Alpha       jnum  `json:"alpha"`
	SE          jnum  `json:"se"`
	K           int64 `json:"k"`
	ThresholdMS jnum  `json:"threshold_ms"`
}

type fitJSON struct {
	Model         string `json:"model"`
	Params        object `json:"params"`
	LogLikelihood jnum   `json:"log_likelihood"`
	AIC           jnum   `json:"aic"`
	P99MS         jnum   `json:"p99_ms"`
	P99ErrorPct   jnum   `json:"p99_error_pct"`
}

// stageJSON is a stage's count and mean; its percentile keys follow.
type stageJSON struct {
	Count  int64 `json:"count"`
	MeanMS jnum  `json:"mean_ms"`
}

// metricJSON is a metric's mean, median and standard deviation (null without samples); its
// percentile keys follow.
func metricFields(s MetricStats) object {
	has := s.Count > 0
	return object{
		{"mean_" + s.Metric + "_ms", msWhen(has, s.Mean)},
		{"median_" + s.Metric + "_ms", msWhen(has, s.Median)},
		{"std_" + s.Metric + "_ms", msWhen(has, s.Std)},
	}
}

func (b *Bench) head() benchHead {
	h := benchHead{
		Start:  b.Start.UTC().Format(time.RFC3339Nano),
		Config: configObject(b.Config),
		Options: optionsJSON{
			Percentiles: orEmpty(b.Percentiles), Metrics: orEmpty(b.Metrics), Confidence: jnum(b.Confidence),
			SessionStepLimitMS: msWhen(b.SessionStepLimit > 0, b.SessionStepLimit),
		},
		Sources: b.Sources, Completed: b.Completed, Failed: b.Failed, Warmup: max(b.Warmup, 0),
		DurationS:         jnum(roundTo(b.Duration.Seconds(), 6)),
		TotalInputTokens:  b.InputTokens,
		TotalOutputTokens: b.OutputTokens,
	}
	if len(b.Goodput) > 0 {
		g := b.Goodput.String()
		h.Options.Goodput = &g
	}
	if c := b.Clock; c != nil {
		h.Clock = &clockJSON{OffsetMS: jnum(msv(c.Offset)), UncertaintyMS: jnum(msv(c.Uncertainty)), Samples: c.Samples, Method: c.Method}
	}
	if b.MergedFrom > 1 {
		h.MergedFrom = b.MergedFrom
	}
	return h
}

func (b *Bench) rates() benchRates {
	r := benchRates{
		RequestThroughput:    jnum(sig(b.RequestThroughput)),
		OutputThroughput:     jnum(sig(b.OutputThroughput)),
		TotalTokenThroughput: jnum(sig(b.TotalTokenThroughput)),
	}
	if b.GoodputRate != nil {
		r.Goodput = realPtr(sig(*b.GoodputRate))
	}
	if len(b.Goodput) > 0 {
		r.GoodputRequests = &b.GoodRequests
	}
	return r
}

func (b *Bench) analysis() benchAnalysis {
	a := benchAnalysis{Stages: object{}, Tail: object{}}
	for _, s := range b.Stages {
		so := object{{val: splice{stageJSON{Count: s.Count, MeanMS: jnum(msv(s.Mean))}}}}
		a.Stages = append(a.Stages, field{s.Stage, percentileFields(so, "", b.Percentiles, s.Percentiles)})
	}
	for _, t := range b.Tails {
		a.Tail = append(a.Tail, field{t.Metric, tailObject(t.Tail)})
	}
	if s := b.Sessions; s != nil {
		a.Sessions = &sessionsJSON{
			Count: s.Count, Completed: s.Completed, Interrupted: s.Interrupted, Truncated: s.Truncated,
			CompletionRate: jnum(sig(s.CompletionRate())), InterruptionRate: jnum(sig(s.InterruptionRate())),
			FirstSteps: s.FirstSteps, FirstStepsCompleted: s.FirstStepsGood,
			FirstStepCompletionRate: jnum(sig(s.FirstStepCompletionRate())),
			StepLimitMS:             msWhen(s.StepLimit > 0, s.StepLimit),
		}
	}
	return a
}

func (b *Bench) body() benchBody {
	body := benchBody{
		Slowest:  make([]slowJSON, 0, len(b.Slowest)),
		Timeline: make([]timelineJSON, 0, len(b.Timeline)), Errors: object{}, ErrorExamples: object{},
		TokenLengths: tokenLengthsObject(b.TokenLengths),
		Histograms:   histogramsJSON{Metrics: object{}, Stages: object{}},
	}
	for _, s := range b.Slowest {
		sj := slowJSON{Index: s.Index, TraceID: s.TraceID, Session: s.Session,
			IntendedS: jnum(roundTo(s.Intended.Seconds(), 6)), E2ELMS: jnum(msv(s.E2EL)),
			TTFTMS: msWhen(s.TTFT > 0, s.TTFT), Status: s.Status, Error: s.ErrKind}
		if len(s.ServerTiming) > 0 {
			sj.ServerTiming = serverTimingObject(s.ServerTiming)
		}
		body.Slowest = append(body.Slowest, sj)
	}
	for _, t := range b.Timeline {
		body.Timeline = append(body.Timeline, timelineObject(t))
	}
	for _, e := range b.Errors {
		body.Errors = append(body.Errors, field{e.Kind, e.Count})
		if e.Example != "" {
			body.ErrorExamples = append(body.ErrorExamples, field{e.Kind, e.Example})
		}
	}
	if b.ServerMetrics != nil {
		sm := serverMetricsValue(b.ServerMetrics)
		body.ServerMetrics = &sm
	}
	for _, m := range AllMetrics {
		if h := b.Histograms[m]; h != nil {
			body.Histograms.Metrics = append(body.Histograms.Metrics, field{m, h})
		}
	}
	for _, st := range stageOrder(b.StageHistograms) {
		body.Histograms.Stages = append(body.Histograms.Stages, field{st, b.StageHistograms[st]})
	}
	return body
}

// fields are the members of the bench document after its schema: the static parts as structs,
// the per-metric keys in between.
func (b *Bench) fields() object {
	o := object{{val: splice{b.head()}}}
	o = append(o, b.tokenDetailFields()...)
	o = append(o, b.workloadFields()...)
	o = append(o, field{val: splice{b.rates()}})
	for _, s := range b.Stats {
		o = append(o, metricFields(s)...)
		o = percentileFields(o, s.Metric, b.Percentiles, s.Percentiles)
	}
	o = append(o, field{val: splice{b.analysis()}})
	o = append(o, b.turnsField()...)
	return append(o, field{val: splice{b.body()}})
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

func timelineObject(t TimelineBin) timelineJSON {
	return timelineJSON{
		TS: jnum(roundTo(t.T.Seconds(), 6)), DtS: jnum(roundTo(t.Width.Seconds(), 6)),
		Sent: t.Sent, Completed: t.Completed, Failed: t.Failed, Output: t.OutputTokens, N: t.N,
		MeanE2ELMS: msWhen(t.N > 0, t.MeanE2EL), MaxE2ELMS: msWhen(t.N > 0, t.MaxE2EL),
		P50E2ELMS: msOrNull(t.P50E2EL), P99E2ELMS: msOrNull(t.P99E2EL),
		NTTFT:      t.NTTFT,
		MeanTTFTMS: msWhen(t.NTTFT > 0, t.MeanTTFT), MaxTTFTMS: msWhen(t.NTTFT > 0, t.MaxTTFT),
		P50TTFTMS: msOrNull(t.P50TTFT), P99TTFTMS: msOrNull(t.P99TTFT),
	}
}

func tailObject(t stats.Tail) tailJSON {
	out := tailJSON{N: t.N, EmpiricalP99MS: msWhen(t.N >= stats.MinTailSamples, t.EmpiricalP99),
		Fits: make([]fitJSON, 0, len(t.Fits)), Verdict: t.Verdict()}
	if h := t.Hill; h != nil {
		out.Hill = &hillJSON{Alpha: jnum(sig(h.Alpha)), SE: jnum(sig(h.SE)), K: h.K, ThresholdMS: jnum(msv(h.Threshold))}
	}
	if t.Best != "" {
		out.Best = &t.Best
	}
	for _, f := range t.Fits {
		params := object{}
		for _, p := range f.Params {
			params = append(params, field{p.Name, sig(p.Value)}, field{p.Name + "_se", sig(p.SE)})
		}
		out.Fits = append(out.Fits, fitJSON{
			Model: f.Model, Params: params, LogLikelihood: jnum(sig(f.LogLikelihood)), AIC: jnum(sig(f.AIC)),
			P99MS: jnum(msv(f.P99)), P99ErrorPct: jnum(roundTo(100*f.RelativeError(t.EmpiricalP99), 2)),
		})
	}
	return out
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
	d.count(o, "in_flight_cap", &n)
	c.InFlightCap = int(min(n, 1<<30))
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
	decodeSettings(d, o, &c)
	return c
}

// Bounds on the recorded settings read from a file: what loadgen.RunInfo.WithProvenance keeps,
// with room to spare.
const (
	maxSettingBytes = 4 << 10
	maxCommandBytes = 128 << 10
)

// decodeSettings reads what the requests sent and what made the run.
func decodeSettings(d *decodeError, o jobj, c *loadgen.RunInfo) {
	d.boundedStr(o, "dataset", &c.Dataset, maxSettingBytes)
	d.boundedStr(o, "version", &c.Version, maxSettingBytes)
	d.boundedStr(o, "command", &c.Command, maxCommandBytes)
	d.boundedStr(o, "http_client", &c.HTTPClient, maxSettingBytes)
	if raw, ok := o.m["stream"]; ok && !isNull(raw) {
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			d.fail(o.sub("stream"), "want true or false")
		}
		c.Stream = &v
	}
	var t float64
	if d.float(o, "temperature", &t) {
		if !(t >= 0 && t <= 100) {
			d.fail(o.sub("temperature"), "want a number between 0 and 100, got %g", t)
		}
		c.Temperature = &t
	}
}

// boundedStr reads a string of at most limit bytes.
func (d *decodeError) boundedStr(o jobj, key string, dst *string, limit int) {
	d.str(o, key, dst)
	if len(*dst) > limit {
		d.fail(o.sub(key), "longer than %d bytes", limit)
		*dst = ""
	}
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
	decodeWorkloads(d, o, b)
	for _, m := range b.Metrics {
		if !b.reports(m) {
			continue
		}
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
	checkCounts(d, o, b)
	if d.err != nil {
		return b
	}
	b.finishTurns()
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
	d.count(o, "output_tokens", &t.OutputTokens)
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
