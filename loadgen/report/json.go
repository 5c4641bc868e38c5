package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// The JSON of a Bench (ragtail.bench/v1, benchjson.go) and of a Sweep (ragtail.sweep/v1,
// sweep.go) is written and read through tagged structs and encoding/json, with the value types
// of this file. Only keys named after data are written by hand: a metric's and a percentile's
// (percentileKeys, metricKeys: "p99.9_ttft_ms", vLLM's spelling), and the objects keyed by a
// stage, a metric or an error kind (keyed), in an order that is part of what makes a file
// readable; members joins an object's static and named parts. Latencies are in milliseconds
// rounded to the microsecond (the histograms' resolution), other real numbers to six
// significant digits, so files are stable and diff well. A real number that is not finite (a
// rate over nothing) is written null.
//
// RunInfo.RequestRate is +Inf for a closed loop, which JSON cannot hold: it is written as the
// string "inf" (as vLLM prints it), and "inf", "+inf", "infinity" and null are read back.
//
// Reading is bounded and checks what it reads: each number by its type as it is decoded (a
// count is a whole number from 0 to maxNumber, a latency within the histograms' range, ...),
// and what ties fields together (a segment, the counts against the histograms) when the file
// becomes a Bench; errors name the key. Keys that are not ragtail's are ignored.

// ---- values ----

// maxNumber bounds every count, rate and time read from a file: nothing real comes near it,
// and it keeps arithmetic on hostile files finite.
const maxNumber = 1e15

// Bounds on latencies read from a file: a latency within the histograms' range (with room),
// and a clock offset within a year.
const (
	maxMillis        = float64(stats.HistogramHighest/time.Millisecond) * 1e3
	maxClockOffsetMS = 365 * 24 * 3600 * 1e3
	maxSeconds       = 1e9
)

// number is a real number: written as encoding/json writes a float64, or null when it is NaN or
// infinite; read as any number.
type number float64

func (n number) MarshalJSON() ([]byte, error) { return marshalReal(float64(n)) }

func marshalReal(f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// sixDigits is a real number written to six significant digits, and read so: what is read
// writes back the same, and so does what is derived from it (a tail's verdict).
type sixDigits float64

func (n sixDigits) MarshalJSON() ([]byte, error) { return marshalReal(sig(float64(n))) }

func (n *sixDigits) UnmarshalJSON(b []byte) error {
	return readNumber(b, n, func(float64) bool { return true }, func(v float64) sixDigits { return sixDigits(sig(v)) })
}

// amount is a real number read from 0 to maxNumber: a rate, a mean count of tokens.
type amount float64

func (a amount) MarshalJSON() ([]byte, error) { return marshalReal(float64(a)) }

func (a *amount) UnmarshalJSON(b []byte) error {
	return readNumber(b, a, func(v float64) bool { return v >= 0 && v <= maxNumber }, func(v float64) amount { return amount(v) })
}

func (amount) want() string { return "a number from 0 to 1e+15" }

// count is a whole number read from 0 to maxNumber.
type count int64

func (c *count) UnmarshalJSON(b []byte) error {
	return readNumber(b, c, func(v float64) bool { return v >= 0 && v <= maxNumber && v == math.Trunc(v) },
		func(v float64) count { return count(v) })
}

func (count) want() string { return "a whole number from 0 to 1e+15" }

// millis is a latency in milliseconds: written and read rounded to the microsecond, read
// within the histograms' range.
type millis time.Duration

func (m millis) MarshalJSON() ([]byte, error) { return json.Marshal(msv(time.Duration(m))) }

func (m *millis) UnmarshalJSON(b []byte) error {
	return readNumber(b, m, func(v float64) bool { return v >= 0 && v <= maxMillis }, func(v float64) millis { return millis(msDuration(roundTo(v, 3))) })
}

func (millis) want() string { return fmt.Sprintf("milliseconds from 0 to %g", maxMillis) }

// offsetMillis is a clock offset in milliseconds, rounded to the microsecond, read within a
// year either way.
type offsetMillis time.Duration

func (m offsetMillis) MarshalJSON() ([]byte, error) { return json.Marshal(msv(time.Duration(m))) }

func (m *offsetMillis) UnmarshalJSON(b []byte) error {
	return readNumber(b, m, func(v float64) bool { return math.Abs(v) <= maxClockOffsetMS },
		func(v float64) offsetMillis { return offsetMillis(msDuration(roundTo(v, 3))) })
}

func (offsetMillis) want() string {
	return fmt.Sprintf("milliseconds within %g either way", maxClockOffsetMS)
}

// seconds is a time in seconds: written and read rounded to the microsecond, read from 0 to
// maxSeconds.
type seconds time.Duration

func (s seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(roundTo(time.Duration(s).Seconds(), 6))
}

func (s *seconds) UnmarshalJSON(b []byte) error {
	return readNumber(b, s, func(v float64) bool { return v >= 0 && v <= maxSeconds },
		func(v float64) seconds { return seconds(math.Round(roundTo(v, 6) * 1e9)) })
}

func (seconds) want() string { return fmt.Sprintf("seconds from 0 to %g", float64(maxSeconds)) }

// rate is a request rate: six significant digits, or "inf" for +Inf.
type rate float64

func (r rate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"inf"`), nil
	}
	return marshalReal(sig(float64(r)))
}

func (r *rate) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch strings.ToLower(s) {
		case "inf", "+inf", "infinity", "+infinity":
			*r = rate(math.Inf(1))
			return nil
		}
	}
	return readNumber(b, r, func(v float64) bool { return v >= 0 && v <= maxNumber }, func(v float64) rate { return rate(v) })
}

func (rate) want() string { return `a number from 0 to 1e+15 or "inf"` }

// timestamp is a wall-clock time in RFC 3339 (UTC when written); "" is the zero time.
type timestamp time.Time

func (t timestamp) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Time(t).UTC().Format(time.RFC3339Nano))
}

func (t *timestamp) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[timestamp]()}
	}
	if s == "" {
		return nil
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[timestamp]()}
	}
	*t = timestamp(v)
	return nil
}

func (timestamp) want() string { return "an RFC 3339 time" }

// interval is a percentile's interval in milliseconds, [lo, hi] with 0 <= lo <= hi.
type interval [2]float64

func (iv *interval) UnmarshalJSON(b []byte) error {
	var v []float64
	if err := json.Unmarshal(b, &v); err != nil || len(v) != 2 || !(v[0] >= 0 && v[0] <= v[1]) || v[1] > 1e10 {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[interval]()}
	}
	*iv = interval(v)
	return nil
}

func (interval) want() string { return "[lo, hi] in milliseconds with 0 <= lo <= hi" }

// derived is a figure written for the file's readers and derived again from the rest when it is
// read (a rate, a verdict, a knee): whatever the file holds there is not read.
type derived[T any] struct{ v T }

func (d derived[T]) MarshalJSON() ([]byte, error) { return marshalJSON(d.v) }

func (d *derived[T]) UnmarshalJSON([]byte) error { return nil }

// readNumber reads the number in b into *dst when ok accepts it; null leaves *dst. A value
// that is not a number, or that ok refuses, is a *json.UnmarshalTypeError, which encoding/json
// completes with the path of its key.
func readNumber[T any](b []byte, dst *T, ok func(float64) bool, set func(float64) T) error {
	if string(b) == "null" {
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil || !ok(v) {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[T]()}
	}
	*dst = set(v)
	return nil
}

// jsonKind describes a JSON value for an error, as encoding/json does: "number -1", "string".
func jsonKind(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number " + string(b[:min(len(b), 32)])
}

// readable rewrites an error of encoding/json about a value as "key.path: want ..., got ...".
func readable(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err
	}
	want := te.Type.String()
	if w, ok := reflect.Zero(te.Type).Interface().(interface{ want() string }); ok {
		want = w.want()
	} else if w, ok := kindWants[te.Type.Kind()]; ok {
		want = w
	}
	// The path holds the names of the embedded structs the keys belong to: not keys.
	path := slices.DeleteFunc(strings.Split(te.Field, "."), func(k string) bool { return embeddedStructs[k] })
	if len(path) == 0 || te.Field == "" {
		return fmt.Errorf("want %s, got %s", want, te.Value)
	}
	return fmt.Errorf("%s: want %s, got %s", strings.Join(path, "."), want, te.Value)
}

var kindWants = map[reflect.Kind]string{reflect.Float64: "a number", reflect.Int: "a whole number", reflect.Int64: "a whole number",
	reflect.Uint64: "a whole number from 0", reflect.String: "a string", reflect.Bool: "true or false", reflect.Slice: "an array",
	reflect.Array: "an array", reflect.Map: "an object", reflect.Struct: "an object"}

// embeddedStructs are the structs embedded in others below, whose names encoding/json puts in
// the path of an error.
var embeddedStructs = map[string]bool{"benchHead": true, "benchRest": true, "tokenDetailsJSON": true, "workloadJSON": true,
	"stageHead": true, "turnHead": true, "pointJSON": true}

// withKey puts key before the path of a *json.UnmarshalTypeError, for a value read by hand
// under that key.
func withKey(key string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			te.Field = key
		} else {
			te.Field = key + "." + te.Field
		}
	}
	return err
}

func ptr[T any](v T) *T { return &v }

// msv is a duration in ms rounded to the microsecond.
func msv(d time.Duration) float64 {
	return roundTo(durationMS(d), 3)
}

// msWhen is d as millis when ok, else nil (null).
func msWhen(ok bool, d time.Duration) *millis {
	if !ok {
		return nil
	}
	return ptr(millis(d))
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

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// ---- objects ----

// keyed is a JSON object keyed by data (a stage, a metric, an error kind): written in the
// order of its entries, read in the order of its keys.
type keyed[V any] []entry[V]

type entry[V any] struct {
	key   string
	value V
}

// MarshalJSON writes the entries in order.
func (k keyed[V]) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, e := range k {
		if i > 0 {
			buf.WriteByte(',')
		}
		key, err := marshalJSON(e.key)
		if err != nil {
			return nil, err
		}
		value, err := marshalJSON(e.value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.key, err)
		}
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(value)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the entries, sorted by key; null is none.
func (k *keyed[V]) UnmarshalJSON(b []byte) error {
	var raws map[string]json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return err
	}
	if raws == nil {
		*k = nil
		return nil
	}
	*k = make(keyed[V], 0, len(raws))
	for _, key := range slices.Sorted(maps.Keys(raws)) {
		var v V
		if err := json.Unmarshal(raws[key], &v); err != nil {
			return withKey(key, err)
		}
		*k = append(*k, entry[V]{key, v})
	}
	return nil
}

// members is one JSON object made of the members of its parts, each an object, in order:
// tagged structs for the static keys, percentileKeys or metricKeys for the named ones.
type members []any

// MarshalJSON writes the members of every part in order.
func (m members) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for _, part := range m {
		b, err := marshalJSON(part)
		if err != nil {
			return nil, err
		}
		if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
			return nil, fmt.Errorf("%T is not a JSON object", part)
		}
		if inner := bytes.TrimSpace(b[1 : len(b)-1]); len(inner) > 0 {
			if buf.Len() > 1 {
				buf.WriteByte(',')
			}
			buf.Write(inner)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// percentileKeyRE matches pP_<metric>_ms[_ci] and pP_ms[_ci] (stages).
var percentileKeyRE = regexp.MustCompile(`^p([0-9]+(?:\.[0-9]+)?)_(?:([a-z0-9_]+?)_)?ms(_ci)?$`)

// percentileKeys are the keys of a metric's percentiles, named after them: pP_<metric>_ms
// (pP_ms in a stage's object) and its interval pP_<metric>_ms_ci, [lo, hi] or null without
// enough samples for one; both are null for a percentile without a value.
type percentileKeys struct {
	metric string           // "" for a stage's
	ps     []float64        // the percentiles written
	stats  []PercentileStat // their values; read: those in the file, by percentile
}

func percentileKey(p float64, metric string) string {
	if metric == "" {
		return "p" + formatP(p) + "_ms"
	}
	return "p" + formatP(p) + "_" + metric + "_ms"
}

// entries are the keys in order.
func (p percentileKeys) entries() keyed[any] {
	out := make(keyed[any], 0, 2*len(p.ps))
	for _, pc := range p.ps {
		key := percentileKey(pc, p.metric)
		var val *millis
		var ci []float64
		for _, s := range p.stats {
			if s.P == pc {
				val = ptr(millis(s.Value))
				if s.HasCI {
					ci = []float64{msv(s.Lo), msv(s.Hi)}
				}
			}
		}
		out = append(out, entry[any]{key, val}, entry[any]{key + "_ci", ci})
	}
	return out
}

// MarshalJSON writes the keys in order.
func (p percentileKeys) MarshalJSON() ([]byte, error) { return p.entries().MarshalJSON() }

// readPercentiles reads the percentile keys of metric ("" for a stage's) among keys; a key
// whose value is null has no value.
func readPercentiles[R ~[]byte](keys map[string]R, metric string) ([]PercentileStat, error) {
	var out []PercentileStat
	for k, raw := range keys {
		m := percentileKeyRE.FindStringSubmatch(k)
		if m == nil || m[2] != metric || m[3] != "" {
			continue
		}
		p, err := strconv.ParseFloat(m[1], 64)
		if err != nil || !(p > 0 && p < 100) {
			return nil, &json.UnmarshalTypeError{Value: "key " + k, Type: reflect.TypeFor[percentileKeys](), Field: k}
		}
		var v *millis
		if err := unmarshalKept(raw, &v); err != nil {
			return nil, withKey(k, err)
		}
		if v == nil {
			continue
		}
		ps := PercentileStat{P: p, Value: time.Duration(*v)}
		var ci *interval
		if err := unmarshalKept(keys[k+"_ci"], &ci); err != nil {
			return nil, withKey(k+"_ci", err)
		}
		if ci != nil {
			ps.Lo, ps.Hi, ps.HasCI = msDuration(ci[0]), msDuration(ci[1]), true
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b PercentileStat) int { return cmpFloat(a.P, b.P) })
	return out, nil
}

func (percentileKeys) want() string { return "a percentile from 0 to 100 (exclusive) in the key" }

// unmarshalKept decodes a value kept by hand: none (a missing key) is null.
func unmarshalKept[R ~[]byte](raw R, v any) error {
	if raw == nil {
		return nil
	}
	return json.Unmarshal(raw, v)
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

// metricKeys are a bench document's keys named after its metrics, in order: for each metric,
// mean_<m>_ms, median_<m>_ms and std_<m>_ms (null without samples), then its percentiles.
type metricKeys []metricJSON

type metricJSON struct {
	metric            string
	mean, median, std *millis
	percentiles       percentileKeys
}

// MarshalJSON writes the keys of every metric in order.
func (m metricKeys) MarshalJSON() ([]byte, error) {
	var out keyed[any]
	for _, s := range m {
		out = append(out, entry[any]{"mean_" + s.metric + "_ms", s.mean}, entry[any]{"median_" + s.metric + "_ms", s.median},
			entry[any]{"std_" + s.metric + "_ms", s.std})
		out = append(out, s.percentiles.entries()...)
	}
	return out.MarshalJSON()
}

// UnmarshalJSON reads the keys of every metric of AllMetrics a document has, from the whole
// document.
func (m *metricKeys) UnmarshalJSON(b []byte) error {
	var keys map[string]smallValue
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	*m = nil
	for _, metric := range AllMetrics {
		s := metricJSON{metric: metric}
		var err error
		if s.percentiles.stats, err = readPercentiles(keys, metric); err != nil {
			return err
		}
		found := len(s.percentiles.stats) > 0
		for _, kv := range []struct {
			name string
			dst  **millis
		}{{"mean", &s.mean}, {"median", &s.median}, {"std", &s.std}} {
			key := kv.name + "_" + metric + "_ms"
			raw, ok := keys[key]
			found = found || ok
			if err := unmarshalKept(raw, kv.dst); err != nil {
				return withKey(key, err)
			}
		}
		if found {
			*m = append(*m, s)
		}
	}
	return nil
}

// smallValue is the value of a document's key as metricKeys reads it: the bytes of a short
// value (a number, null, an interval), not kept for a long one (an object, a long array).
type smallValue []byte

// UnmarshalJSON keeps a short value; a long one reads as a string, which no metric key takes.
func (v *smallValue) UnmarshalJSON(b []byte) error {
	if len(b) > 256 {
		*v = smallValue(`"a long value"`)
		return nil
	}
	*v = append(smallValue(nil), b...)
	return nil
}

// ---- writing ----

// marshalJSON is json.Marshal without HTML escaping: the files are read by people and tools,
// and the HTML report escapes what it shows itself.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
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

// ---- documents ----

// maxFileSize bounds what Read and Decode accept.
const maxFileSize = 256 << 20

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
