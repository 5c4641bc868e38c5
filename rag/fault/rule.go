package fault

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// The article's relative rule, PITFALLS.md §6: max(100 ms, baseline x 1.8 + uniform(0, 200 ms)).
const (
	DefaultFloor  = 100 * time.Millisecond // Relative.Floor of DefaultRelative
	DefaultFactor = 1.8                    // Relative.Factor of DefaultRelative
	DefaultJitter = 200 * time.Millisecond // Relative.Jitter of DefaultRelative
)

// Limits on a rule set, so that a mistyped admin call cannot make every request scan thousands of
// rules or put unbounded text into counters and span events.
const (
	MaxRules       = 256  // rules in one set
	maxNameLen     = 64   // bytes of a rule name
	maxRouteLen    = 256  // bytes of a route pattern
	maxMessageLen  = 1024 // bytes of an abort message
	maxCutTokens   = 1 << 30
	defaultPercent = 100
)

// Rule is one fault injection rule: where it applies (a pipeline stage, an API route, or a stage
// on requests to a route), how often (Percent), and what it does (Delay, Relative, Abort,
// CutAfterTokens — any combination, at least one).
//
// Matching: a rule applies to a Decide(stage, route) call when its Stage equals stage exactly and,
// if it has a Route, the route matches it. A rule with only a Route (Stage "") therefore applies
// to the calls the HTTP layer makes with stage "", and never to the pipeline's per-stage calls; a
// rule with both applies at that stage only to requests on that route.
//
// Rules marshal to JSON with snake_case keys (the admin API's form):
//
//	{"name":"slow-retrieve","stage":"retrieve","percent":10,"delay":"pareto:10ms,1.5"}
//	{"name":"session","stage":"retrieve","percent":100,"relative":{"floor":"100ms","factor":1.8,"jitter":"200ms"}}
//	{"name":"flaky","route":"/v1/chat/completions","percent":1,"abort":{"status":503}}
//	{"name":"cut","stage":"generate","percent":5,"cut_after_tokens":20}
//
// A missing "percent" means 100. ParseRule also accepts a compact form for flags (see String).
type Rule struct {
	// Name identifies the rule in counters, span events and errors: 1 to 64 letters, digits,
	// '_', '-' or '.'. An empty name is replaced by "rule-N" (N its 1-based position) when the
	// rule set is installed. Names are unique within a set.
	Name string `json:"name"`
	// Stage is the pipeline stage the rule applies to, or "" for a rule on an API route.
	Stage rag.Stage `json:"stage,omitempty"`
	// Route is an API route pattern such as "/v1/chat/completions" or "/v1/documents/*": a
	// segment "*" at the end matches the rest of the path (at least one more segment, as in chi),
	// a segment "*" or "{name}" elsewhere matches exactly one segment, any other segment matches
	// itself.
	Route string `json:"route,omitempty"`
	// Percent is the share of matching calls the rule fires on, 0 to 100. Each call is an
	// independent Bernoulli trial drawn from the injector's seed, the rule's name and the call's
	// sequence number, so a run is reproducible and rules fire independently of each other.
	Percent float64 `json:"percent"`
	// Delay is latency added when the rule fires, drawn from a law ("fixed:50ms",
	// "uniform:10ms,50ms", "lognormal:20ms,0.5", "pareto:10ms,1.5[,cap]"). The zero Law adds none.
	Delay latency.Law `json:"delay,omitzero"`
	// Relative adds the article's relative delay, computed from the stage's (or route's) own
	// recent latency; it adds to Delay when both are set.
	Relative *Relative `json:"relative,omitempty"`
	// Abort fails the call with an HTTP status, after any delay of the rules that fired with it.
	Abort *Abort `json:"abort,omitempty"`
	// CutAfterTokens, when positive, ends the token stream with an error (Decision.CutError)
	// once that many tokens have been delivered: at the generate stage, the engine's stream; on
	// the route /v1/chat/completions, what the client receives.
	CutAfterTokens int `json:"cut_after_tokens,omitempty"`
}

// Relative is the article's relative delay rule (PITFALLS.md §6):
//
//	delay = max(Floor, baseline x Factor + uniform(0, Jitter))
//
// where baseline is the rolling median of the last observations of the stage the rule applies to
// (or of the route, for route rules), which the injector learns from Observe and ObserveRoute.
// Until the first observation the baseline is 0, so the delay is max(Floor, uniform(0, Jitter)).
//
// In JSON, durations are strings ("100ms"); keys left out take the article's values (so
// "relative":{} is the article's rule), and an explicit 0 stays 0. A Relative built in Go takes
// its fields as they are: start from DefaultRelative for the article's values.
type Relative struct {
	Floor  time.Duration // the least delay, 100 ms in the article
	Factor float64       // multiplies the baseline, 1.8 in the article
	Jitter time.Duration // upper end of the uniform term, 200 ms in the article
	// Baseline, when positive, is used instead of the learned one: for a stage that is not
	// observed, or to pin a reproduction to a figure.
	Baseline time.Duration
}

// DefaultRelative returns the article's rule: max(100 ms, baseline x 1.8 + uniform(0, 200 ms)).
func DefaultRelative() *Relative {
	return &Relative{Floor: DefaultFloor, Factor: DefaultFactor, Jitter: DefaultJitter}
}

// Abort makes a rule fail the call with an HTTP status.
type Abort struct {
	// Status is the HTTP status to fail with, 400 to 599.
	Status int `json:"status"`
	// Message is the error message the client sees; empty means the status text.
	Message string `json:"message,omitempty"`
}

// relativeJSON is Relative's JSON form: durations as text, absent keys as nil.
type relativeJSON struct {
	Floor    *string  `json:"floor,omitempty"`
	Factor   *float64 `json:"factor,omitempty"`
	Jitter   *string  `json:"jitter,omitempty"`
	Baseline *string  `json:"baseline,omitempty"`
}

// MarshalJSON writes the durations as text ("100ms") and leaves out a zero Baseline.
func (r Relative) MarshalJSON() ([]byte, error) {
	floor, jitter := r.Floor.String(), r.Jitter.String()
	v := relativeJSON{Floor: &floor, Factor: &r.Factor, Jitter: &jitter}
	if r.Baseline != 0 {
		b := r.Baseline.String()
		v.Baseline = &b
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads the form MarshalJSON writes; keys left out take the article's values.
func (r *Relative) UnmarshalJSON(b []byte) error {
	var v relativeJSON
	if err := decodeStrict(b, &v); err != nil {
		return fmt.Errorf("relative: %w", err)
	}
	out := *DefaultRelative()
	for _, f := range []struct {
		key string
		in  *string
		out *time.Duration
	}{{"floor", v.Floor, &out.Floor}, {"jitter", v.Jitter, &out.Jitter}, {"baseline", v.Baseline, &out.Baseline}} {
		if f.in == nil {
			continue
		}
		d, err := parseDuration(*f.in)
		if err != nil {
			return fmt.Errorf("%w: relative %s: %w", rag.ErrInvalidRequest, f.key, err)
		}
		*f.out = d
	}
	if v.Factor != nil {
		out.Factor = *v.Factor
	}
	*r = out
	return nil
}

// ruleJSON is Rule without its methods, with Percent a pointer so that a missing key can mean 100.
type ruleJSON struct {
	Name           string      `json:"name"`
	Stage          rag.Stage   `json:"stage,omitempty"`
	Route          string      `json:"route,omitempty"`
	Percent        *float64    `json:"percent"`
	Delay          latency.Law `json:"delay,omitzero"`
	Relative       *Relative   `json:"relative,omitempty"`
	Abort          *Abort      `json:"abort,omitempty"`
	CutAfterTokens int         `json:"cut_after_tokens,omitempty"`
}

// UnmarshalJSON reads a rule strictly (an unknown key is an error, so a typo is not silently
// ignored); a missing "percent" means 100. It does not validate: SetRules and ParseRule do.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var v ruleJSON
	if err := decodeStrict(b, &v); err != nil {
		return err
	}
	*r = Rule{Name: v.Name, Stage: v.Stage, Route: v.Route, Percent: defaultPercent, Delay: v.Delay,
		Relative: v.Relative, Abort: v.Abort, CutAfterTokens: v.CutAfterTokens}
	if v.Percent != nil {
		r.Percent = *v.Percent
	}
	r.normalize()
	return nil
}

// decodeStrict decodes one JSON value into v, rejecting unknown keys and trailing data, and makes
// the error match rag.ErrInvalidRequest.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON value")
	}
	return invalid(err)
}

// invalid makes err match rag.ErrInvalidRequest, unless it is nil or already does.
func invalid(err error) error {
	if err == nil || errors.Is(err, rag.ErrInvalidRequest) {
		return err
	}
	return fmt.Errorf("%w: %w", rag.ErrInvalidRequest, err)
}

// normalize puts a rule in the one form both parsers produce, so that equal rules compare equal:
// a law that adds nothing is the zero Law.
func (r *Rule) normalize() {
	if r.Delay.Kind == latency.LawNone || r.Delay.Kind == "" || (r.Delay.Kind == latency.LawFixed && r.Delay.Scale == 0) {
		r.Delay = latency.Law{}
	}
}

// clone returns a deep copy of r, so that a caller cannot change an installed rule.
func (r Rule) clone() Rule {
	if r.Relative != nil {
		rel := *r.Relative
		r.Relative = &rel
	}
	if r.Abort != nil {
		a := *r.Abort
		r.Abort = &a
	}
	return r
}

// label names the rule in error messages.
func (r Rule) label() string {
	if r.Name == "" {
		return "fault rule"
	}
	return fmt.Sprintf("fault rule %q", r.Name)
}

// Validate reports every problem with r, each as an error matching rag.ErrInvalidRequest that
// says what to change. An empty Name is allowed here (the set fills it in); uniqueness of names
// is checked by SetRules.
func (r Rule) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", rag.ErrInvalidRequest, r.label(), fmt.Sprintf(format, a...)))
	}
	if r.Name != "" {
		if err := checkName(r.Name); err != nil {
			bad("%v", err)
		}
	}
	switch {
	case r.Stage == rag.StageStream:
		bad("stage stream (writing to the client) takes no rules: a rule on the route /v1/chat/completions delays, aborts or cuts (cut_after_tokens) what the client receives")
	case r.Stage != "" && !slices.Contains(Stages, r.Stage):
		bad("unknown stage %q: want one of %s", r.Stage, stageList())
	}
	if r.Stage == "" && r.Route == "" {
		bad("set stage (one of %s) or route (an API route such as /v1/chat/completions)", stageList())
	}
	if r.Route != "" {
		if err := checkRoute(r.Route); err != nil {
			bad("route %q: %v", r.Route, err)
		}
	}
	if math.IsNaN(r.Percent) || r.Percent < 0 || r.Percent > 100 {
		bad("percent must be between 0 and 100, got %v", r.Percent)
	}
	if err := checkLaw(r.Delay); err != nil {
		bad("delay: %v", err)
	}
	if rel := r.Relative; rel != nil {
		switch {
		case rel.Floor < 0 || rel.Jitter < 0 || rel.Baseline < 0:
			bad("relative floor, jitter and baseline must not be negative")
		case math.IsNaN(rel.Factor) || math.IsInf(rel.Factor, 0) || rel.Factor < 0:
			bad("relative factor must be a non-negative number, got %v", rel.Factor)
		case rel.Floor == 0 && rel.Factor == 0 && rel.Jitter == 0:
			bad("relative rule adds no delay (floor, factor and jitter are all 0); leave them out for the article's max(100ms, baseline x 1.8 + uniform(0, 200ms))")
		case rel.Floor > latency.Limit || rel.Jitter > latency.Limit || rel.Baseline > latency.Limit:
			bad("relative floor, jitter and baseline must be at most the %v limit of a simulated latency", latency.Limit)
		}
	}
	if a := r.Abort; a != nil {
		if a.Status < 400 || a.Status > 599 {
			bad("abort status must be an HTTP error status, 400 to 599, got %d", a.Status)
		}
		switch {
		case len(a.Message) > maxMessageLen:
			bad("abort message is %d bytes, at most %d allowed", len(a.Message), maxMessageLen)
		case !utf8.ValidString(a.Message):
			bad("abort message is not valid UTF-8")
		}
	}
	switch {
	case r.CutAfterTokens < 0 || r.CutAfterTokens > maxCutTokens:
		bad("cut_after_tokens must be between 0 (off) and %d, got %d", maxCutTokens, r.CutAfterTokens)
	case r.CutAfterTokens > 0 && r.Stage != "" && r.Stage != rag.StageGenerate:
		bad("cut_after_tokens cuts a token stream: it needs stage generate (or a route rule on /v1/chat/completions), not %s", r.Stage)
	}
	if r.Delay == (latency.Law{}) && r.Relative == nil && r.Abort == nil && r.CutAfterTokens == 0 {
		bad("the rule does nothing: give it a delay, relative, abort or cut_after_tokens")
	}
	return errors.Join(errs...)
}

// Stages are the pipeline stages fault rules act on: each calls the injector when it starts.
// The stream stage is writing to the client; route rules act on that side.
var Stages = []rag.Stage{rag.StageAdmission, rag.StageEmbed, rag.StageRetrieve, rag.StageFetch, rag.StageGenerate}

func stageList() string {
	names := make([]string, len(Stages))
	for i, s := range Stages {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func checkName(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("name is %d bytes, at most %d allowed", len(name), maxNameLen)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("name %q: use only letters, digits, '_', '-' and '.'", name)
		}
	}
	return nil
}

func checkRoute(route string) error {
	if !strings.HasPrefix(route, "/") {
		return errors.New("must start with /")
	}
	if len(route) > maxRouteLen {
		return fmt.Errorf("is %d bytes, at most %d allowed", len(route), maxRouteLen)
	}
	for _, c := range route {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`;"?#\`, c) {
			return fmt.Errorf("contains %q: a route pattern is a URL path without spaces, query or fragment", c)
		}
	}
	segs := strings.Split(route[1:], "/")
	for i, seg := range segs {
		switch {
		case seg == "*":
		case strings.Contains(seg, "*"):
			return errors.New("* must be a whole segment")
		case strings.ContainsAny(seg, "{}") && !(len(seg) > 2 && seg[0] == '{' && seg[len(seg)-1] == '}' && !strings.ContainsAny(seg[1:len(seg)-1], "{}")):
			return fmt.Errorf("segment %d %q: a parameter is a whole segment such as {id}", i+1, seg)
		}
	}
	return nil
}

// checkLaw reports whether a law built in Go (not through latency.Parse) is one the injector can
// sample.
func checkLaw(l latency.Law) error {
	switch l.Kind {
	case "", latency.LawNone:
		return nil
	case latency.LawFixed, latency.LawUniform, latency.LawLognormal, latency.LawPareto:
	default:
		return fmt.Errorf("unknown law %q: want none, fixed, uniform, lognormal or pareto", l.Kind)
	}
	if l.Scale < 0 || l.Max < 0 {
		return fmt.Errorf("%s: durations must not be negative", l)
	}
	switch l.Kind {
	case latency.LawUniform:
		if l.Max < l.Scale {
			return fmt.Errorf("%s: max %v is below min %v", l, l.Max, l.Scale)
		}
	case latency.LawLognormal, latency.LawPareto:
		if math.IsNaN(l.Shape) || math.IsInf(l.Shape, 0) || l.Shape <= 0 {
			return fmt.Errorf("%s: shape must be a positive number, got %v", l, l.Shape)
		}
		if l.Scale == 0 {
			return fmt.Errorf("%s: scale must be positive", l)
		}
		if l.Max != 0 && l.Max < l.Scale {
			return fmt.Errorf("%s: cap %v is below scale %v, which would make every delay the cap", l, l.Max, l.Scale)
		}
	}
	if err := l.CheckLimit(latency.Limit); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), rag.ErrInvalidRequest.Error()+": "))
	}
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a non-negative duration such as 100ms", s)
	}
	return d, nil
}

// matchRoute reports whether route matches pattern (see Rule.Route). It does not allocate.
func matchRoute(pattern, route string) bool {
	if pattern == route {
		return true
	}
	if !strings.HasPrefix(route, "/") {
		return false
	}
	p, r := pattern[1:], route[1:]
	for {
		pseg, prest, pmore := strings.Cut(p, "/")
		rseg, rrest, rmore := strings.Cut(r, "/")
		if pseg == "*" && !pmore {
			return true // the trailing wildcard takes the rest, even an empty last segment
		}
		wild := pseg == "*" || (len(pseg) > 2 && pseg[0] == '{')
		if wild && rseg == "" || !wild && pseg != rseg || pmore != rmore {
			return false
		}
		if !pmore {
			return true
		}
		p, r = prest, rrest
	}
}

// Compact form: keys of a rule, in the order String writes them.
const (
	keyName     = "name"
	keyStage    = "stage"
	keyRoute    = "route"
	keyPercent  = "percent"
	keyDelay    = "delay"
	keyRelative = "relative"
	keyFloor    = "floor"
	keyFactor   = "factor"
	keyJitter   = "jitter"
	keyBaseline = "baseline"
	keyAbort    = "abort"
	keyMessage  = "message"
	keyCut      = "cut_after_tokens"
)

var compactKeys = []string{keyName, keyStage, keyRoute, keyPercent, keyDelay, keyRelative, keyFloor,
	keyFactor, keyJitter, keyBaseline, keyAbort, keyMessage, keyCut}

// FlagUsage documents the compact rule syntax, for a flag's help text.
const FlagUsage = `fault injection rule, repeatable: KEY=VALUE pairs separated by ';' (or a JSON rule or array).
Keys: name, stage (admission|embed|retrieve|fetch|generate) and/or route (/v1/chat/completions,
/v1/models, /v1/documents/*), percent (0-100, default 100), delay (fixed:50ms, uniform:10ms,50ms,
lognormal:20ms,0.5, pareto:10ms,1.5[,cap]), relative (the article's max(100ms, baseline x 1.8 +
uniform(0,200ms)); floor=, factor=, jitter=, baseline= change its terms), abort=STATUS with
message="...", cut_after_tokens=N. Example: 'stage=retrieve;percent=10;delay=pareto:10ms,1.5'`

// String returns the rule in the compact form ParseRule reads: KEY=VALUE pairs separated by ';',
// for example
//
//	name=slow;stage=retrieve;percent=10;delay=pareto:10ms,1.5
//	stage=retrieve;relative;floor=100ms;factor=1.8;jitter=200ms
//	route=/v1/chat/completions;percent=1;abort=503;message="injected outage"
//
// Laws contain commas, so pairs are separated by ';'. A value may be a Go-quoted string, which is
// how String writes messages.
func (r Rule) String() string {
	var b strings.Builder
	add := func(key, val string) {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(key)
		if val != "" {
			b.WriteByte('=')
			b.WriteString(val)
		}
	}
	if r.Name != "" {
		add(keyName, r.Name)
	}
	if r.Stage != "" {
		add(keyStage, string(r.Stage))
	}
	if r.Route != "" {
		add(keyRoute, r.Route)
	}
	add(keyPercent, strconv.FormatFloat(r.Percent, 'g', -1, 64))
	if r.Delay != (latency.Law{}) {
		add(keyDelay, r.Delay.String())
	}
	if rel := r.Relative; rel != nil {
		add(keyRelative, "")
		add(keyFloor, rel.Floor.String())
		add(keyFactor, strconv.FormatFloat(rel.Factor, 'g', -1, 64))
		add(keyJitter, rel.Jitter.String())
		if rel.Baseline != 0 {
			add(keyBaseline, rel.Baseline.String())
		}
	}
	if a := r.Abort; a != nil {
		add(keyAbort, strconv.Itoa(a.Status))
		if a.Message != "" {
			add(keyMessage, strconv.Quote(a.Message))
		}
	}
	if r.CutAfterTokens != 0 {
		add(keyCut, strconv.Itoa(r.CutAfterTokens))
	}
	return b.String()
}

// ParseRule parses one rule, in the compact form String writes or as a JSON object, and
// validates it. Errors match rag.ErrInvalidRequest.
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	var r Rule
	var err error
	if strings.HasPrefix(s, "{") {
		err = json.Unmarshal([]byte(s), &r)
		err = invalid(err)
	} else {
		r, err = parseCompact(s)
	}
	if err != nil {
		return Rule{}, err
	}
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// ParseRules parses a JSON array of rules, a single rule as a JSON object, or a single rule in
// the compact form, and validates each rule (not the set: SetRules does). Errors match
// rag.ErrInvalidRequest.
func ParseRules(s string) ([]Rule, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") {
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		return []Rule{r}, nil
	}
	var rules []Rule
	if err := decodeStrict([]byte(s), &rules); err != nil {
		return nil, fmt.Errorf("fault rules: %w", err)
	}
	var errs []error
	for i, r := range rules {
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i+1, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rules, nil
}

// parseCompact parses the compact form (see Rule.String) without validating the result.
func parseCompact(s string) (Rule, error) {
	r := Rule{Percent: defaultPercent}
	bad := func(format string, a ...any) (Rule, error) {
		return Rule{}, fmt.Errorf("%w: fault rule %q: %s", rag.ErrInvalidRequest, s, fmt.Sprintf(format, a...))
	}
	if s == "" {
		return bad("empty: want KEY=VALUE pairs separated by ';', such as stage=retrieve;percent=10;delay=fixed:50ms")
	}
	seen := make(map[string]bool, 8)
	var message *string
	rest := s
	for rest != "" {
		var key, val string
		hasVal := false
		i := strings.IndexAny(rest, "=;")
		switch {
		case i < 0:
			key, rest = rest, ""
		case rest[i] == ';':
			key, rest = rest[:i], rest[i+1:]
		default:
			key, rest, hasVal = rest[:i], rest[i+1:], true
			if t := strings.TrimLeft(rest, " \t"); strings.HasPrefix(t, `"`) {
				q, err := strconv.QuotedPrefix(t)
				if err != nil {
					return bad("%s: unterminated or invalid quoted value", strings.TrimSpace(key))
				}
				val, _ = strconv.Unquote(q)
				after := strings.TrimLeft(t[len(q):], " \t")
				if after != "" && after[0] != ';' {
					return bad("%s: unexpected %q after the quoted value: separate pairs with ';'", strings.TrimSpace(key), after)
				}
				rest = strings.TrimPrefix(after, ";")
			} else {
				val, rest, _ = strings.Cut(rest, ";")
				val = strings.TrimSpace(val)
			}
		}
		key = strings.ToLower(strings.TrimSpace(key))
		if key == "" {
			if hasVal {
				return bad("a value without a key")
			}
			continue // empty pair, as in a trailing ';'
		}
		if !slices.Contains(compactKeys, key) {
			return bad("unknown key %q: want one of %s", key, strings.Join(compactKeys, ", "))
		}
		if seen[key] {
			return bad("%s is given twice", key)
		}
		seen[key] = true
		if !hasVal && key != keyRelative {
			return bad("%s needs a value (%s=...)", key, key)
		}
		relative := func() *Relative {
			if r.Relative == nil {
				r.Relative = DefaultRelative()
			}
			return r.Relative
		}
		var err error
		switch key {
		case keyName:
			r.Name = val
		case keyStage:
			r.Stage = rag.Stage(strings.ToLower(val))
		case keyRoute:
			r.Route = val
		case keyPercent:
			r.Percent, err = strconv.ParseFloat(strings.TrimSuffix(val, "%"), 64)
			if err != nil {
				return bad("percent %q is not a number between 0 and 100", val)
			}
		case keyDelay:
			if r.Delay, err = latency.Parse(val); err != nil {
				return Rule{}, fmt.Errorf("fault rule %q: delay: %w", s, err)
			}
		case keyRelative:
			switch strings.ToLower(val) {
			case "", "true", "on", "yes", "1":
				relative()
			default:
				return bad("relative takes no value (or true): its terms are floor=, factor=, jitter= and baseline=")
			}
		case keyFloor, keyJitter, keyBaseline:
			d, err := parseDuration(val)
			if err != nil {
				return bad("%s: %v", key, err)
			}
			rel := relative()
			switch key {
			case keyFloor:
				rel.Floor = d
			case keyJitter:
				rel.Jitter = d
			default:
				rel.Baseline = d
			}
		case keyFactor:
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return bad("factor %q is not a number", val)
			}
			relative().Factor = f
		case keyAbort:
			status, err := strconv.Atoi(val)
			if err != nil {
				return bad("abort %q is not an HTTP status such as 503", val)
			}
			r.Abort = &Abort{Status: status}
		case keyMessage:
			message = &val
		case keyCut:
			if r.CutAfterTokens, err = strconv.Atoi(val); err != nil {
				return bad("cut_after_tokens %q is not a whole number", val)
			}
		}
	}
	if message != nil {
		if r.Abort == nil {
			return bad("message is the text of an abort: give abort=STATUS too")
		}
		r.Abort.Message = *message
	}
	r.normalize()
	return r, nil
}

// Rules is a list of rules that works as a repeatable flag.Value: each Set parses a rule in the
// compact form, a JSON rule or a JSON array (see ParseRules) and appends it. Use FlagUsage as the
// help text.
type Rules []Rule

// Set parses s and appends its rules.
func (rs *Rules) Set(s string) error {
	parsed, err := ParseRules(s)
	if err != nil {
		return err
	}
	*rs = append(*rs, parsed...)
	return nil
}

// String returns the rules in the compact form, separated by spaces.
func (rs *Rules) String() string {
	if rs == nil {
		return ""
	}
	parts := make([]string, len(*rs))
	for i, r := range *rs {
		parts[i] = "'" + r.String() + "'"
	}
	return strings.Join(parts, " ")
}

// abortSentinel is the rag error an abort with status wraps, so that code matching errors.Is sees
// what the status means.
func abortSentinel(status int) error {
	switch {
	case status == http.StatusNotFound:
		return rag.ErrNotFound
	case status == http.StatusTooManyRequests:
		return rag.ErrOverloaded
	case status == http.StatusGatewayTimeout:
		return rag.ErrTimeout
	case status >= 500:
		return rag.ErrUnavailable
	}
	return rag.ErrInvalidRequest
}
