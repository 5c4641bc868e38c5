package bench

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// The options that are more than a number or a string are read when the flag set reads the
// command line: each flag below is a flag.Value holding a pointer to its typed field of the
// options, so a bad value stops the command before anything starts, with the flag's name
// (invalid value "p99_ttft:abc" for flag -goodput: ...).

// Shape is an arrival shape (--shape): an arrival process of shape.ParseProcessSpec, or the
// article's shaper. The zero Shape is Poisson arrivals.
type Shape struct {
	Article bool
	Process shape.ProcessSpec // when not Article
}

// ParseShape reads a --shape: poisson, gamma, constant, ramp:FROM,TO,DURATION,
// step:RATE@DURATION,... or article.
func ParseShape(s string) (Shape, error) {
	name, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	if name == "article" {
		return Shape{Article: true}, nil
	}
	p, err := shape.ParseProcessSpec(s)
	if err != nil {
		return Shape{}, err
	}
	return Shape{Process: p}, nil
}

// String returns the shape as --shape reads it.
func (s Shape) String() string {
	if s.Article {
		return "article"
	}
	return s.Process.String()
}

// profiled reports whether the shape is a rate profile (a ramp or steps): it sets the rate.
func (s Shape) profiled() bool { return !s.Article && s.Process.Profiled() }

// shapeValue is the --shape flag.
type shapeValue struct{ s *Shape }

func (v shapeValue) String() string {
	if v.s == nil {
		return ""
	}
	return v.s.String()
}

func (v shapeValue) Set(s string) error {
	sh, err := ParseShape(s)
	if err == nil {
		*v.s = sh
	}
	return err
}

// Dataset is what --dataset names: synthetic prompt lengths, a prompts file, key lookups
// (keys[:FILE]) or a trace replayed on its timestamps (mooncake:FILE, azure:FILE or
// burstgpt:FILE). The zero Dataset is the synthetic mix of short, medium and long prompts.
type Dataset struct {
	Lengths []shape.Length      // synthetic prompt lengths; nil with a File
	File    string              // the prompts, keys or trace file; "" for synthetic prompts and built keys
	Keys    bool                // key lookups (GET /v1/documents/{id}), of File's keys or built ones
	Trace   dataset.TraceFormat // the format of a trace File; "" for the others
	spec    string              // as given
}

// ParseDataset reads a --dataset: keys[:FILE], FORMAT:FILE for a trace format, synthetic:SPEC,
// an existing file, or synthetic lengths (short, medium, long, mixed, N, MIN-MAX). A name that
// is both a file and a length is the file.
func ParseDataset(s string) (Dataset, error) {
	d := Dataset{spec: s}
	if s == "keys" {
		d.Keys = true
		return d, nil
	}
	if file, ok := strings.CutPrefix(s, "keys:"); ok {
		if file == "" {
			return d, errors.New("want keys, or keys:FILE with a file of keys")
		}
		d.Keys, d.File = true, file
		return d, nil
	}
	if name, file, ok := strings.Cut(s, ":"); ok {
		if f, err := dataset.ParseTraceFormat(name); err == nil {
			d.Trace, d.File = f, file
			return d, nil
		}
	}
	if spec, ok := strings.CutPrefix(s, "synthetic:"); ok {
		var err error
		d.Lengths, err = shape.ParseLengths(spec)
		return d, err
	}
	if _, err := os.Stat(s); err == nil {
		d.File = s
		return d, nil
	}
	lengths, err := shape.ParseLengths(s)
	if err != nil {
		return d, errors.New("neither a file nor short, medium, long, mixed, N, MIN-MAX or keys[:FILE]")
	}
	d.Lengths = lengths
	return d, nil
}

// String returns the dataset as --dataset reads it ("" for the zero Dataset).
func (d Dataset) String() string { return d.spec }

// lengths are the synthetic prompt lengths: Lengths, or the mix of short, medium and long.
func (d Dataset) lengths() []shape.Length {
	if d.Lengths == nil {
		return []shape.Length{shape.Short, shape.Medium, shape.Long}
	}
	return d.Lengths
}

// isPrompts reports whether the dataset is a file of prompts (ShareGPT JSON or OpenAI-messages
// JSONL): not synthetic, not keys, not a trace.
func (d Dataset) isPrompts() bool { return d.File != "" && !d.Keys && d.Trace == "" }

// datasetValue is the --dataset flag.
type datasetValue struct{ d *Dataset }

func (v datasetValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v datasetValue) Set(s string) error {
	d, err := ParseDataset(s)
	if err == nil {
		*v.d = d
	}
	return err
}

// rateValue is a request rate flag that accepts "inf".
type rateValue struct{ v *float64 }

func (r rateValue) String() string {
	if r.v == nil {
		return ""
	}
	if math.IsInf(*r.v, 1) {
		return "inf"
	}
	return strconv.FormatFloat(*r.v, 'g', -1, 64)
}

func (r rateValue) Set(s string) error {
	if strings.EqualFold(s, "inf") {
		*r.v = math.Inf(1)
		return nil
	}
	f, err := parseRate(s)
	if err != nil {
		return errors.New("want a positive number of requests per second or inf")
	}
	*r.v = f
	return nil
}

// parseRate reads a positive, finite rate.
func parseRate(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a positive rate", s)
	}
	return f, nil
}

// goodputValue is the --goodput flag (stats.ParseGoodput).
type goodputValue struct{ v *stats.SLOs }

func (g goodputValue) String() string {
	if g.v == nil {
		return ""
	}
	return g.v.String()
}

func (g goodputValue) Set(s string) error {
	slos, err := stats.ParseGoodput(s)
	if err == nil {
		*g.v = slos
	}
	return err
}

// metricsValue is the --percentile-metrics flag (report.ParseMetrics).
type metricsValue struct{ v *[]string }

func (m metricsValue) String() string {
	switch {
	case m.v == nil:
		return ""
	case slices.Equal(*m.v, report.AllMetrics):
		return "all"
	}
	return strings.Join(*m.v, ",")
}

func (m metricsValue) Set(s string) error {
	metrics, err := report.ParseMetrics(s)
	if err == nil {
		*m.v = metrics
	}
	return err
}

// percentilesValue is the --metric-percentiles flag (report.ParsePercentiles).
type percentilesValue struct{ v *[]float64 }

func (p percentilesValue) String() string {
	if p.v == nil {
		return ""
	}
	return formatFloats(*p.v)
}

func (p percentilesValue) Set(s string) error {
	ps, err := report.ParsePercentiles(s)
	if err == nil {
		*p.v = ps
	}
	return err
}

func formatFloats(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// jsonObjectValue is the --extra-body flag: a JSON object.
type jsonObjectValue struct{ v *map[string]any }

func (j jsonObjectValue) String() string {
	if j.v == nil || *j.v == nil {
		return ""
	}
	b, err := json.Marshal(*j.v)
	if err != nil {
		return ""
	}
	return string(b)
}

func (j jsonObjectValue) Set(s string) error {
	var body map[string]any
	if err := json.Unmarshal([]byte(s), &body); err != nil {
		return fmt.Errorf("want a JSON object: %w", err)
	}
	*j.v = body
	return nil
}

// choiceValue is a string flag that takes one of a few values.
type choiceValue struct {
	v       *string
	choices []string
}

func (c choiceValue) String() string {
	if c.v == nil {
		return ""
	}
	return *c.v
}

func (c choiceValue) Set(s string) error {
	if !slices.Contains(c.choices, s) {
		return fmt.Errorf("want %s", strings.Join(c.choices, " or "))
	}
	*c.v = s
	return nil
}

// segmentValue is the --segment flag: i/n, nil when not given.
type segmentValue struct{ v **loadgen.SegmentOf }

func (s segmentValue) String() string {
	if s.v == nil || *s.v == nil {
		return ""
	}
	return (*s.v).String()
}

func (s segmentValue) Set(v string) error {
	seg, err := loadgen.ParseSegment(v)
	if err == nil {
		*s.v = &seg
	}
	return err
}

// wallTimeValue is the --start-at flag: a wall-clock time to come, zero when not given.
type wallTimeValue struct{ v *time.Time }

func (w wallTimeValue) String() string {
	if w.v == nil || w.v.IsZero() {
		return ""
	}
	return w.v.Format(time.RFC3339Nano)
}

func (w wallTimeValue) Set(s string) error {
	t, err := parseWallTime(s)
	if err != nil {
		return err
	}
	if wait := time.Until(t); wait < 0 {
		return fmt.Errorf("that was %s ago: give a time to come", (-wait).Round(time.Millisecond))
	}
	*w.v = t
	return nil
}

// parseWallTime reads an RFC 3339 time or Unix seconds.
func parseWallTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && f < 1e11 {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)), nil
	}
	return time.Time{}, errors.New("want an RFC 3339 time (2026-05-01T12:00:00Z) or Unix seconds")
}

// ratesValue is the --rates flag: increasing request rates.
type ratesValue struct{ v *[]float64 }

func (r ratesValue) String() string {
	if r.v == nil {
		return ""
	}
	return formatFloats(*r.v)
}

func (r ratesValue) Set(s string) error {
	var rates []float64
	for f := range strings.SplitSeq(s, ",") {
		rate, err := parseRate(f)
		if err != nil {
			return err
		}
		rates = append(rates, rate)
	}
	if !increasing(rates) {
		return errors.New("the ladder's rates must increase")
	}
	*r.v = rates
	return nil
}

// usersValue is the --concurrencies flag: increasing counts of closed-loop users.
type usersValue struct{ v *[]int }

func (u usersValue) String() string {
	if u.v == nil {
		return ""
	}
	parts := make([]string, len(*u.v))
	for i, n := range *u.v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (u usersValue) Set(s string) error {
	var users []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive count", f)
		}
		if err := loadgen.CheckConcurrency(n, true); err != nil {
			return err
		}
		users = append(users, n)
	}
	if !increasing(users) {
		return errors.New("the ladder's concurrencies must increase")
	}
	*u.v = users
	return nil
}

// sloValue is the --slo flag (ParseSLO), nil when not given.
type sloValue struct{ v **report.PercentileSLO }

func (s sloValue) String() string {
	if s.v == nil || *s.v == nil {
		return ""
	}
	return (*s.v).String()
}

func (s sloValue) Set(v string) error {
	slo, err := ParseSLO(v)
	if err == nil {
		*s.v = &slo
	}
	return err
}

// increasing reports whether every value is above the one before it.
func increasing[T cmp.Ordered](xs []T) bool {
	for i := 1; i < len(xs); i++ {
		if xs[i] <= xs[i-1] {
			return false
		}
	}
	return true
}

// thresholdsValue is the --fail-on flag (report.ParseThresholds).
type thresholdsValue struct{ v *[]report.Threshold }

func (t thresholdsValue) String() string {
	if t.v == nil {
		return ""
	}
	parts := make([]string, len(*t.v))
	for i, th := range *t.v {
		parts[i] = th.String()
	}
	return strings.Join(parts, ",")
}

func (t thresholdsValue) Set(s string) error {
	ts, err := report.ParseThresholds(s)
	if err == nil {
		*t.v = ts
	}
	return err
}

// cancelValue is the --cancel flag.
type cancelValue struct{ c *loadgen.Cancellations }

func (v cancelValue) String() string {
	if v.c == nil {
		return ""
	}
	return v.c.String()
}

func (v cancelValue) Set(s string) error {
	c, err := loadgen.ParseCancellations(s)
	if err == nil {
		*v.c = c
	}
	return err
}
