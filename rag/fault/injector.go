// Package fault injects latency and failures into the RAG service by rule, to reproduce the
// tail-latency pitfalls of PITFALLS.md on demand: a share of the requests of a stage or an API
// route gets a delay drawn from a latency law (fixed, uniform, lognormal, Pareto), the article's
// relative delay max(100 ms, baseline x 1.8 + uniform(0, 200 ms)) with the baseline learned from
// the stage's own recent latency, an abort with an HTTP status, or a token stream cut after N
// tokens.
//
// An Injector holds a validated rule set that can be swapped atomically at run time (the admin
// API's GET|PUT /admin/config carries the rules as JSON, see Rule), decides per call which rules
// fire from a seed (reproducible, independent per rule), and counts per rule what it injected.
// The pipeline calls it once per stage and the HTTP layer once per request:
//
//	dec, err := inj.Apply(ctx, stage, route) // waits the delay; err is the abort, if any
//	... run the stage ...                    // generate: end the stream with dec.CutError() after dec.CutAfterTokens
//	inj.Observe(stage, took-dec.Delay)       // the stage's own latency feeds the relative rule
//
// and records dec.Fired as span events and dec.Delay as rag.fault.injected_ms. The package knows
// nothing of the pipeline or of telemetry.
package fault

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/openai"
)

// ErrInjected is matched (errors.Is) by every error a fault rule causes, so that callers can tell
// an injected failure from a real one. The same errors also match the rag sentinel of their
// status (see AbortError).
var ErrInjected = errors.New("fault injected")

// Defaults of the injector's options.
const (
	// DefaultBaselineWindow is how many recent observations of a stage the relative rule's
	// rolling median covers: enough that one outlier does not move it, few enough that it follows
	// a change of load within a second or two at the rates ragtail runs.
	DefaultBaselineWindow = 100
	// DefaultMaxDelay caps the delay one rule adds to one call: latency.Limit, the bound a rule's
	// law and relative terms are validated against. A relative rule's baseline times its factor,
	// or the rare draw of an uncapped heavy tail (under 0.1%), can still pass it; they are cut.
	DefaultMaxDelay = latency.Limit
)

// Option configures an Injector.
type Option interface{ apply(*config) }

type config struct {
	window   int
	maxDelay time.Duration
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithBaselineWindow sets how many recent observations of each stage (or route) the relative
// rule's rolling median covers (default DefaultBaselineWindow; at least 1).
func WithBaselineWindow(n int) Option { return optionFunc(func(c *config) { c.window = n }) }

// WithMaxDelay caps the delay a single rule adds to a single call (default DefaultMaxDelay;
// positive).
func WithMaxDelay(d time.Duration) Option { return optionFunc(func(c *config) { c.maxDelay = d }) }

// Injector decides, per call, which fault rules fire, and counts what they injected. It is safe
// for concurrent use, and its methods are safe on a nil *Injector, which injects nothing.
type Injector struct {
	seed      uint64
	maxDelay  time.Duration
	rules     atomic.Pointer[ruleSet]
	baselines *baselines

	mu       sync.Mutex           // serialises SetRules; guards counters
	counters map[string]*counters // by rule name; kept when a rule is removed, so counts only grow
}

// ruleSet is one installed, immutable set of rules.
type ruleSet struct {
	rules   []Rule
	byStage map[rag.Stage][]*compiled // rules by Stage, in set order; "" holds the route rules
}

// compiled is a rule ready for Decide.
type compiled struct {
	rule     Rule
	prob     float64 // Percent / 100
	fireBase uint64  // start of the rule's Bernoulli stream
	drawBase uint64  // start of the rule's stream of seeds for delay draws
	counts   *counters
}

// counters are one rule's counts. They live as long as the injector, across rule sets.
type counters struct {
	evaluated, fired, aborted, cut atomic.Uint64
	delay                          atomic.Int64 // nanoseconds
}

// NewInjector returns an injector with rules installed (see SetRules) and seed as the source
// of every random draw: the same seed, rules and order of calls give the same decisions.
func NewInjector(rules []Rule, seed uint64, opts ...Option) (*Injector, error) {
	cfg := config{window: DefaultBaselineWindow, maxDelay: DefaultMaxDelay}
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case cfg.window < 1:
		return nil, fmt.Errorf("%w: fault baseline window must be at least 1 observation, got %d", rag.ErrInvalidRequest, cfg.window)
	case cfg.maxDelay <= 0:
		return nil, fmt.Errorf("%w: fault max delay must be positive, got %v", rag.ErrInvalidRequest, cfg.maxDelay)
	}
	in := &Injector{seed: seed, maxDelay: cfg.maxDelay, baselines: newBaselines(cfg.window),
		counters: make(map[string]*counters)}
	if err := in.SetRules(rules); err != nil {
		return nil, err
	}
	return in, nil
}

// SetRules validates rules and, if every one is valid, installs them in place of the current set
// in one atomic step: a call sees either the old set or the new one, never a mix. Empty names
// become "rule-N" (N the 1-based position). A rule that keeps its name keeps its counters and its
// place in its random stream. On error nothing changes; the error lists every problem, each
// matching rag.ErrInvalidRequest. SetRules(nil) removes every rule.
func (in *Injector) SetRules(rules []Rule) error {
	if in == nil {
		return errors.New("fault: SetRules on a nil Injector")
	}
	if len(rules) > MaxRules {
		return fmt.Errorf("%w: %d fault rules, at most %d allowed", rag.ErrInvalidRequest, len(rules), MaxRules)
	}
	set := &ruleSet{rules: make([]Rule, len(rules)), byStage: make(map[rag.Stage][]*compiled)}
	var errs []error
	position := make(map[string]int, len(rules))
	for i, r := range rules {
		r = r.clone()
		r.normalize()
		if r.Name == "" {
			r.Name = fmt.Sprintf("rule-%d", i+1)
		}
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i+1, err))
		}
		if j, dup := position[r.Name]; dup {
			errs = append(errs, fmt.Errorf("%w: rules %d and %d are both named %q: names label counters and must be unique", rag.ErrInvalidRequest, j+1, i+1, r.Name))
		}
		position[r.Name] = i
		set.rules[i] = r
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range set.rules {
		c := in.counters[r.Name]
		if c == nil {
			c = new(counters)
			in.counters[r.Name] = c
		}
		key := nameHash(r.Name)
		set.byStage[r.Stage] = append(set.byStage[r.Stage], &compiled{
			rule: r, prob: r.Percent / 100, counts: c,
			fireBase: mix(in.seed ^ key ^ 0x5f1e_a3c2_7d4b_9e01),
			drawBase: mix(in.seed ^ key ^ 0xa24b_aed4_963e_e407),
		})
	}
	in.rules.Store(set)
	return nil
}

// Rules returns a copy of the installed rules, with their names filled in.
func (in *Injector) Rules() []Rule {
	if in == nil {
		return nil
	}
	set := in.rules.Load()
	out := make([]Rule, len(set.rules))
	for i, r := range set.rules {
		out[i] = r.clone()
	}
	return out
}

// Decision is what the rules decided for one call.
type Decision struct {
	// Delay is the latency to add: the sum of the delays of the rules that fired.
	Delay time.Duration
	// Err is the abort of the first rule that aborted, or nil. It is a *openai.HTTPError carrying
	// the rule's status (so openai.WriteError reports it as is) wrapping an *AbortError.
	Err error
	// CutAfterTokens is the smallest cut of the rules that fired, or 0 for no cut.
	CutAfterTokens int
	// Fired lists the rules that fired, in rule order; nil if none did.
	Fired []Firing

	stage   rag.Stage
	route   string
	cutRule string
}

// Firing is what one rule did to one call, for span events and logs.
type Firing struct {
	Rule           string        // the rule's name
	Delay          time.Duration // the delay it added (0 if none)
	Status         int           // its abort status, 0 if it did not abort
	CutAfterTokens int           // its cut, 0 if none
}

// Injected reports whether any rule fired.
func (d Decision) Injected() bool { return len(d.Fired) > 0 }

// AbortError is the error behind an injected abort or stream cut. It matches ErrInjected and the
// rag sentinel of its status: rag.ErrNotFound for 404, rag.ErrOverloaded for 429, rag.ErrTimeout
// for 504, rag.ErrUnavailable for other 5xx, rag.ErrInvalidRequest for other 4xx.
type AbortError struct {
	Rule    string    // the rule that fired
	Stage   rag.Stage // the stage it fired at ("" for a route rule)
	Route   string    // the route passed to Decide, if any
	Status  int       // the HTTP status
	Message string    // the rule's message, or the status text
	// CutAfterTokens is the cut, for an error ending a cut stream; 0 for an abort.
	CutAfterTokens int
}

func (e *AbortError) Error() string {
	if e.CutAfterTokens > 0 {
		return fmt.Sprintf("stream cut after %d tokens by fault rule %q", e.CutAfterTokens, e.Rule)
	}
	return fmt.Sprintf("%s (injected by fault rule %q)", e.Message, e.Rule)
}

// Unwrap returns ErrInjected and the rag sentinel of the status.
func (e *AbortError) Unwrap() []error { return []error{ErrInjected, abortSentinel(e.Status)} }

// httpError wraps e in the openai.HTTPError the HTTP layer reports as is.
func (e *AbortError) httpError() error {
	typ := "invalid_request_error"
	if e.Status >= 500 {
		typ = "server_error"
	}
	return &openai.HTTPError{Status: e.Status, Type: typ, Code: "fault_injected", Message: e.Error(), Err: e}
}

// CutError returns the error a stream cut by d ends with, or nil if d cuts nothing; the
// pipeline and the HTTP API end a stream with it at the decided count.
func (d Decision) CutError() error {
	if d.CutAfterTokens <= 0 {
		return nil
	}
	e := &AbortError{Rule: d.cutRule, Stage: d.stage, Route: d.route, Status: http.StatusServiceUnavailable,
		Message: http.StatusText(http.StatusServiceUnavailable), CutAfterTokens: d.CutAfterTokens}
	return e.httpError()
}

// Decide evaluates the rules that apply to a call at stage on route (see Rule for matching) and
// returns what they decided, without waiting. Rules are evaluated in order; each is an
// independent draw with its Percent. A rule that aborts ends the evaluation: later rules are not
// evaluated (nor counted) for this call, since the call fails there. Decide does not allocate
// unless a rule fires.
func (in *Injector) Decide(stage rag.Stage, route string) Decision {
	if in == nil {
		return Decision{}
	}
	set := in.rules.Load()
	candidates := set.byStage[stage]
	if len(candidates) == 0 {
		return Decision{}
	}
	dec := Decision{stage: stage, route: route}
	for _, c := range candidates {
		r := &c.rule
		if r.Route != "" && !matchRoute(r.Route, route) {
			continue
		}
		n := c.counts.evaluated.Add(1) - 1
		if uniform(mix(c.fireBase+(n+1)*golden)) >= c.prob {
			continue
		}
		c.counts.fired.Add(1)
		f := Firing{Rule: r.Name, CutAfterTokens: r.CutAfterTokens}
		if r.Delay != (latency.Law{}) || r.Relative != nil {
			f.Delay = in.draw(c, n, stage, route)
			c.counts.delay.Add(int64(f.Delay))
			dec.Delay += f.Delay
		}
		if r.CutAfterTokens > 0 {
			c.counts.cut.Add(1)
			if dec.CutAfterTokens == 0 || r.CutAfterTokens < dec.CutAfterTokens {
				dec.CutAfterTokens, dec.cutRule = r.CutAfterTokens, r.Name
			}
		}
		a := r.Abort
		if a != nil {
			c.counts.aborted.Add(1)
			f.Status = a.Status
			msg := a.Message
			if msg == "" {
				msg = http.StatusText(a.Status)
			}
			dec.Err = (&AbortError{Rule: r.Name, Stage: stage, Route: route, Status: a.Status, Message: msg}).httpError()
		}
		dec.Fired = append(dec.Fired, f)
		if a != nil {
			break
		}
	}
	return dec
}

// draw samples the delay of rule c at its n-th evaluation: its law plus its relative term, each
// capped at the injector's maximum. The random stream is seeded from (seed, rule, n), so the
// draw depends on nothing else.
func (in *Injector) draw(c *compiled, n uint64, stage rag.Stage, route string) time.Duration {
	s := samplers.Get().(*sampler)
	defer samplers.Put(s)
	s.pcg.Seed(mix(c.drawBase+(n+1)*golden), n)
	r := &c.rule
	var total time.Duration
	if r.Delay != (latency.Law{}) {
		total = min(r.Delay.Sample(s.rng), in.maxDelay)
	}
	if rel := r.Relative; rel != nil {
		baseline := rel.Baseline
		if baseline == 0 {
			baseline, _ = in.baselines.median(keyFor(stage, route))
		}
		d := float64(baseline) * rel.Factor
		if rel.Jitter > 0 {
			d += float64(s.rng.Int64N(int64(rel.Jitter) + 1))
		}
		d = math.Max(d, float64(rel.Floor))
		total += time.Duration(math.Min(d, float64(in.maxDelay)))
	}
	return total
}

// Apply decides as Decide does, waits the decided delay (or until ctx is done), and returns the
// decision with the abort error, if any. If ctx ends during the wait, it returns ctx.Err().
func (in *Injector) Apply(ctx context.Context, stage rag.Stage, route string) (Decision, error) {
	dec := in.Decide(stage, route)
	if dec.Delay > 0 {
		if err := latency.Sleep(ctx, dec.Delay); err != nil {
			return dec, err
		}
	}
	return dec, dec.Err
}

// Observe records one latency of stage, for the baseline of relative rules at that stage. d must
// be the stage's own latency, without the delay the injector added to it (Decision.Delay):
// feeding the injected delay back would raise the baseline, and with it the delay, on every call.
func (in *Injector) Observe(stage rag.Stage, d time.Duration) {
	if in == nil || stage == "" {
		return
	}
	in.baselines.observe(baselineKey{stage: stage}, d)
}

// ObserveRoute records one latency of requests on route (the value later passed to Decide with
// stage ""), for the baseline of relative route rules; as with Observe, without injected delay.
// Pass route patterns, not raw paths: baselines are kept for at most 256 stages and routes.
func (in *Injector) ObserveRoute(route string, d time.Duration) {
	if in == nil || route == "" {
		return
	}
	in.baselines.observe(baselineKey{route: route}, d)
}

// Baseline returns the baseline a relative rule would use for a Decide(stage, route) call: the
// rolling median of the stage's observations (of the route's when stage is ""), and how many
// observations it covers (0 means no baseline yet, which the rule takes as 0).
func (in *Injector) Baseline(stage rag.Stage, route string) (time.Duration, int) {
	if in == nil {
		return 0, 0
	}
	return in.baselines.median(keyFor(stage, route))
}

// RuleStats are one rule's counts since the injector was created.
type RuleStats struct {
	Active        bool          `json:"active"`            // the rule is in the installed set
	Evaluated     uint64        `json:"evaluated"`         // calls the rule applied to
	Fired         uint64        `json:"fired"`             // calls it fired on
	Aborted       uint64        `json:"aborted"`           // calls it failed
	Cut           uint64        `json:"cut"`               // streams it decided to cut (a shorter stream ends normally)
	InjectedDelay time.Duration `json:"injected_delay_ns"` // total delay it decided to add
}

// Stats returns the counts of every rule the injector has had, by name. Counts only grow: a rule
// removed from the set keeps its counts (Active false), and a rule put back under the same name
// continues them.
func (in *Injector) Stats() map[string]RuleStats {
	if in == nil {
		return nil
	}
	active := make(map[string]bool)
	for _, r := range in.rules.Load().rules {
		active[r.Name] = true
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]RuleStats, len(in.counters))
	for name, c := range in.counters {
		out[name] = RuleStats{Active: active[name], Evaluated: c.evaluated.Load(), Fired: c.fired.Load(),
			Aborted: c.aborted.Load(), Cut: c.cut.Load(), InjectedDelay: time.Duration(c.delay.Load())}
	}
	return out
}

// sampler is a reseedable random source for delay draws. Pooled, so that a draw neither
// allocates nor contends on a shared lock.
type sampler struct {
	pcg rand.PCG
	rng *rand.Rand
}

var samplers = sync.Pool{New: func() any {
	s := new(sampler)
	s.rng = rand.New(&s.pcg)
	return s
}}

// golden is SplitMix64's increment: 2^64 divided by the golden ratio.
const golden = 0x9e3779b97f4a7c15

// mix is SplitMix64's output function, a bijection of 64-bit words that passes BigCrush when
// applied to a counter stepping by golden. Each rule's stream is mix(base + k x golden), k = 1, 2, ...
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform maps a random word to [0, 1) with 53 bits of precision.
func uniform(x uint64) float64 { return float64(x>>11) * 0x1p-53 }

// nameHash is FNV-1a of name, which makes a rule's random stream depend on its name only.
func nameHash(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(name) {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}
