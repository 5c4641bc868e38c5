// Package shape plans load: arrival processes that say when each request is due, prompt
// sources that say what it sends, and workloads combining the two for loadgen.Run. Nothing here
// reads a clock: a process is a seeded sequence of offsets from the run's start, so the same
// seed gives the same plan and tests are tables without sleeps.
//
// Arrival processes: Constant (evenly spaced), Poisson, Gamma with vLLM's burstiness (shape k,
// mean gap 1/rate: k = 1 is Poisson, k < 1 burstier, k > 1 more regular), Infinite (everything
// at once), and rate profiles (Ramp, Steps) whose arrivals are a unit-rate renewal process mapped
// through the inverse of the cumulative rate (time rescaling), so a ramp of Poisson arrivals is
// an inhomogeneous Poisson process. Article is the article's shaper (Zipf popularity, context
// growing with rank, Poisson bursts); Sessions replays user sessions. The files a load replays
// (datasets, conversations, sessions, traces) are read by loadgen/dataset.
//
// Processes, sources and workloads are not safe for concurrent use; loadgen.Run calls them from
// one goroutine.
package shape

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Process is an arrival process: each call to Next returns the intended offset of the next
// request from the run's start (never decreasing), false when the process has ended.
type Process interface {
	Next() (time.Duration, bool)
	// String describes the process for reports, e.g. "poisson(rate=10)".
	String() string
}

// maxOffset bounds offsets so that conversions to time.Duration cannot overflow.
const maxOffset = float64(100 * 365 * 24 * time.Hour)

// seconds converts s seconds to a Duration, saturating.
func seconds(s float64) time.Duration {
	return time.Duration(math.Min(s*float64(time.Second), maxOffset))
}

// Infinite returns a process that makes every request due at once, at offset 0: vLLM's
// --request-rate inf without a concurrency cap.
func Infinite() Process { return infinite{} }

type infinite struct{}

func (infinite) Next() (time.Duration, bool) { return 0, true }
func (infinite) String() string              { return "infinite" }

// Constant returns a process with requests evenly spaced at rate per second, the first at 0.
// Each offset is computed from its index, so no rounding accumulates.
func Constant(rate float64) (Process, error) {
	if err := checkRate(rate); err != nil {
		return nil, err
	}
	return &constant{rate: rate}, nil
}

type constant struct {
	rate float64
	i    int
}

func (c *constant) Next() (time.Duration, bool) {
	at := seconds(float64(c.i) / c.rate)
	c.i++
	return at, true
}

func (c *constant) String() string { return "constant(rate=" + formatFloat(c.rate) + ")" }

// Poisson returns a Poisson process of rate per second: exponential gaps, the first request at 0.
func Poisson(rate float64, seed uint64) (Process, error) { return Gamma(rate, 1, seed) }

// Gamma returns a renewal process with Gamma-distributed gaps of mean 1/rate and shape
// burstiness, as vLLM's benchmark draws them (theta = 1/(rate*burstiness)): burstiness 1 is a
// Poisson process, below 1 arrivals clump (the squared coefficient of variation of the gaps is
// 1/burstiness), above 1 they are more regular. The first request is at 0.
func Gamma(rate, burstiness float64, seed uint64) (Process, error) {
	if err := checkRate(rate); err != nil {
		return nil, err
	}
	if !(burstiness > 0) || math.IsInf(burstiness, 0) {
		return nil, fmt.Errorf("burstiness must be a positive number, got %v", burstiness)
	}
	return &gamma{rate: rate, k: burstiness, rng: newRand(seed, streamArrivals)}, nil
}

type gamma struct {
	rate, k float64
	rng     *rand.Rand
	t       float64 // seconds
	started bool
}

func (g *gamma) Next() (time.Duration, bool) {
	if g.started {
		g.t += gammaVariate(g.rng, g.k) / g.k / g.rate
	}
	g.started = true
	return seconds(g.t), true
}

func (g *gamma) String() string {
	if g.k == 1 {
		return "poisson(rate=" + formatFloat(g.rate) + ")"
	}
	return "gamma(rate=" + formatFloat(g.rate) + ",burstiness=" + formatFloat(g.k) + ")"
}

func checkRate(rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("rate must be a positive, finite number of requests per second, got %v", rate)
	}
	return nil
}

// Segment is one piece of a rate profile: the rate moves linearly from From to To requests
// per second over For. Rates may be 0 (a pause).
type Segment struct {
	From, To float64
	For      time.Duration
}

// Ramp returns a process whose rate moves linearly from from to to over the given time, then
// ends. Gaps are drawn as by Gamma with the given burstiness in rescaled time; burstiness 0
// spaces arrivals evenly in rescaled time.
func Ramp(from, to float64, over time.Duration, burstiness float64, seed uint64) (Process, error) {
	return Profile([]Segment{{From: from, To: to, For: over}}, burstiness, seed)
}

// Steps returns a process that holds each rate for its duration in turn, then ends; see Ramp
// for burstiness.
func Steps(rates []float64, durations []time.Duration, burstiness float64, seed uint64) (Process, error) {
	if len(rates) != len(durations) {
		return nil, errors.New("steps: one duration per rate")
	}
	segs := make([]Segment, len(rates))
	for i := range rates {
		segs[i] = Segment{From: rates[i], To: rates[i], For: durations[i]}
	}
	return Profile(segs, burstiness, seed)
}

// Profile returns a process following a piecewise-linear rate profile, ending with it. The
// arrivals are a unit-rate renewal process u_1, u_2, ... mapped through the inverse of the
// cumulative rate Lambda(t): t_i = Lambda^-1(u_i). With burstiness 1 that is an inhomogeneous
// Poisson process; with burstiness 0 the arrivals are evenly spaced in Lambda, so exactly one
// falls in each unit of expected count.
func Profile(segs []Segment, burstiness float64, seed uint64) (Process, error) {
	if len(segs) == 0 {
		return nil, errors.New("rate profile: no segments")
	}
	if err := checkSegments(segs); err != nil {
		return nil, err
	}
	if burstiness < 0 || math.IsNaN(burstiness) || math.IsInf(burstiness, 0) {
		return nil, fmt.Errorf("burstiness must be 0 (even spacing) or positive, got %v", burstiness)
	}
	return &profile{segs: segs, k: burstiness, rng: newRand(seed, streamArrivals)}, nil
}

// checkSegments checks the segments of a rate profile: finite rates, not negative and not all
// 0, and positive durations.
func checkSegments(segs []Segment) error {
	total := 0.0
	for i, s := range segs {
		if s.From < 0 || s.To < 0 || math.IsNaN(s.From+s.To) || math.IsInf(s.From+s.To, 0) {
			return fmt.Errorf("rate profile segment %d: rates must be finite and not negative", i+1)
		}
		if s.For <= 0 {
			return fmt.Errorf("rate profile segment %d: duration must be positive", i+1)
		}
		total += (s.From + s.To) / 2 * s.For.Seconds()
	}
	if len(segs) > 0 && total <= 0 {
		return errors.New("rate profile: every rate is 0")
	}
	return nil
}

type profile struct {
	segs    []Segment
	k       float64
	rng     *rand.Rand
	u       float64 // operational time: expected arrivals so far
	started bool
	seg     int     // segment holding u
	segBase float64 // Lambda at the start of seg
	segT0   float64 // seconds at the start of seg
}

func (p *profile) Next() (time.Duration, bool) {
	if p.started {
		if p.k == 0 {
			p.u++
		} else {
			p.u += gammaVariate(p.rng, p.k) / p.k
		}
	} else if p.segs[0].From == 0 {
		// A profile starting from rate 0 has its first arrival one unit in, not at 0.
		p.u = 1
		if p.k > 0 {
			p.u = gammaVariate(p.rng, p.k) / p.k
		}
	}
	p.started = true
	for p.seg < len(p.segs) {
		s := p.segs[p.seg]
		d := s.For.Seconds()
		mass := (s.From + s.To) / 2 * d
		v := p.u - p.segBase
		if v <= mass {
			return seconds(p.segT0 + invertLinear(s.From, s.To, d, v)), true
		}
		p.seg++
		p.segBase += mass
		p.segT0 += d
	}
	return 0, false
}

// invertLinear returns the t in [0, d] at which the integral of a rate moving linearly from a
// to b over d reaches v: a t + (b-a) t^2 / (2d) = v, solved in the form that stays accurate
// when b is close to a.
func invertLinear(a, b, d, v float64) float64 {
	if v <= 0 {
		return 0
	}
	k := (b - a) / (2 * d)
	disc := a*a + 4*k*v
	if disc < 0 {
		disc = 0
	}
	den := a + math.Sqrt(disc)
	if den <= 0 {
		return d
	}
	return math.Min(2*v/den, d)
}

func (p *profile) String() string {
	var parts []string
	for _, s := range p.segs {
		if s.From == s.To {
			parts = append(parts, formatFloat(s.From)+"@"+s.For.String())
		} else {
			parts = append(parts, formatFloat(s.From)+"->"+formatFloat(s.To)+"@"+s.For.String())
		}
	}
	spacing := "poisson"
	switch {
	case p.k == 0:
		spacing = "even"
	case p.k != 1:
		spacing = "gamma(burstiness=" + formatFloat(p.k) + ")"
	}
	return "profile(" + strings.Join(parts, ",") + ";" + spacing + ")"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// ParseProcess builds the process a --shape flag names, given --request-rate and
// --burstiness:
//
//	poisson              Poisson arrivals at rate (the default)
//	gamma                Gamma gaps with the given burstiness (vLLM)
//	constant             evenly spaced at rate
//	ramp:FROM,TO,OVER    rate moving linearly from FROM to TO req/s over OVER (e.g. ramp:1,50,60s)
//	step:R1@D1,R2@D2,... each rate held for its duration (e.g. step:5@10s,10@10s,20@10s)
//
// A rate of +Inf (with poisson, gamma or constant) makes every request due at once. Ramps and
// steps draw Gamma gaps with the given burstiness in rescaled time (1 is Poisson; 0 spaces them
// evenly) and end with their profile. It is ParseProcessSpec and ProcessSpec.Process in one.
func ParseProcess(spec string, rate, burstiness float64, seed uint64) (Process, error) {
	s, err := ParseProcessSpec(spec)
	if err != nil {
		return nil, err
	}
	return s.Process(rate, burstiness, seed)
}

// ProcessSpec is an arrival process as a --shape flag names it (see ParseProcess), read before
// the rate, the burstiness and the seed that make it a Process. The zero ProcessSpec is Poisson.
type ProcessSpec struct {
	// Name is poisson, gamma, constant, ramp or step ("" is poisson).
	Name string
	// Profile is the rate profile of a ramp (one segment) or of steps; nil for the others.
	Profile []Segment
	spec    string // as given
}

// Process names of a ProcessSpec.
const (
	ProcessPoisson  = "poisson"
	ProcessGamma    = "gamma"
	ProcessConstant = "constant"
	ProcessRamp     = "ramp"
	ProcessStep     = "step"
)

// ParseProcessSpec reads a --shape (see ParseProcess); a ramp's or steps' profile is checked
// as Profile checks it.
func ParseProcessSpec(spec string) (ProcessSpec, error) {
	name, args, _ := strings.Cut(strings.TrimSpace(spec), ":")
	out := ProcessSpec{Name: strings.ToLower(name), spec: spec}
	switch out.Name {
	case "", ProcessPoisson, ProcessGamma, ProcessConstant:
		return out, nil
	case ProcessRamp:
		parts := strings.Split(args, ",")
		if len(parts) != 3 {
			return out, fmt.Errorf("shape %q: want ramp:FROM,TO,DURATION, e.g. ramp:1,50,60s", spec)
		}
		from, err1 := strconv.ParseFloat(strings.TrimSpace(parts[0]), 64)
		to, err2 := strconv.ParseFloat(strings.TrimSpace(parts[1]), 64)
		over, err3 := time.ParseDuration(strings.TrimSpace(parts[2]))
		if err := errors.Join(err1, err2, err3); err != nil {
			return out, fmt.Errorf("shape %q: %w", spec, err)
		}
		out.Profile = []Segment{{From: from, To: to, For: over}}
	case ProcessStep, "steps":
		out.Name = ProcessStep
		for part := range strings.SplitSeq(args, ",") {
			r, d, ok := strings.Cut(strings.TrimSpace(part), "@")
			if !ok {
				return out, fmt.Errorf("shape %q: want step:RATE@DURATION,..., e.g. step:5@10s,10@10s", spec)
			}
			rv, err1 := strconv.ParseFloat(r, 64)
			dv, err2 := time.ParseDuration(d)
			if err := errors.Join(err1, err2); err != nil {
				return out, fmt.Errorf("shape %q: %w", spec, err)
			}
			out.Profile = append(out.Profile, Segment{From: rv, To: rv, For: dv})
		}
	default:
		return out, fmt.Errorf("unknown shape %q: want poisson, gamma, constant, ramp:FROM,TO,DURATION, step:RATE@DURATION,... or article", spec)
	}
	return out, checkSegments(out.Profile)
}

// Profiled reports whether the spec is a rate profile (a ramp or steps), which sets its own
// rate.
func (s ProcessSpec) Profiled() bool { return s.Profile != nil }

// String returns the spec as it was given ("" for the zero ProcessSpec).
func (s ProcessSpec) String() string { return s.spec }

// Process builds the process of the spec at rate (ignored by a profile) with the given
// burstiness (ignored by poisson and constant) and seed.
func (s ProcessSpec) Process(rate, burstiness float64, seed uint64) (Process, error) {
	if s.Profiled() {
		return Profile(s.Profile, burstiness, seed)
	}
	if math.IsInf(rate, 1) {
		return Infinite(), nil
	}
	switch s.Name {
	case ProcessConstant:
		return Constant(rate)
	case "", ProcessPoisson:
		burstiness = 1
	}
	return Gamma(rate, burstiness, seed)
}
