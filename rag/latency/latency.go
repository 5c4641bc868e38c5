// Package latency holds the latency laws that every simulated backend draws its service times
// from (none, fixed, uniform, exponential, lognormal, Pareto, with an optional cap), their text
// form used by flags and /admin/config, and context-aware waiting. It imports rag alone.
package latency

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// LawKind names a latency distribution.
type LawKind string

// The latency distributions a Law can follow.
const (
	LawNone      LawKind = "none"      // always zero
	LawFixed     LawKind = "fixed"     // always Scale
	LawUniform   LawKind = "uniform"   // uniform on [Scale, Max]
	LawLognormal LawKind = "lognormal" // median Scale, log-space standard deviation Shape
	LawPareto    LawKind = "pareto"    // minimum Scale (x_m), tail index Shape (alpha)
)

// Law is a latency distribution. Its text form, accepted by Parse and produced by String, is
// one of:
//
//	none
//	fixed:5ms
//	uniform:2ms,8ms           (min, max)
//	lognormal:5ms,0.5         (median, sigma of the underlying normal)
//	pareto:10ms,1.5           (x_m, alpha)
//
// An optional third field on lognormal and pareto caps the sample ("pareto:10ms,1.5,2s"), which
// keeps a heavy tail from stalling a run for minutes. The zero Law is "none".
//
// Parse accepts only laws within Limit (see CheckLimit), and so do the flags and /admin/config,
// which check the laws they decode: every law given as text follows one rule.
type Law struct {
	Kind  LawKind
	Scale time.Duration // fixed value, uniform minimum, lognormal median, Pareto x_m
	Max   time.Duration // uniform maximum; cap for lognormal and Pareto (0: no cap)
	Shape float64       // lognormal sigma, Pareto alpha
}

// Limit bounds the latency any law given as text (a flag, /admin/config, a fault rule) may
// add to one call: a minute is far beyond any latency objective, yet lets a run finish.
const Limit = time.Minute

// TailQuantile is the quantile of an uncapped lognormal or Pareto law that must lie within the
// limit: such a law has no largest value, and pareto:10ms,0.1 put 17 of 20 requests over 20 s.
const TailQuantile = 0.999

// CheckLimit reports whether l keeps within limit: a fixed value, a uniform maximum, and the
// scale and cap of a lognormal or Pareto law at most limit, and for a lognormal or Pareto law
// without a cap, its P99.9 (TailQuantile) at most limit too. Delay cuts the rarer draws of such
// a law past Limit to Limit. The error, matching rag.ErrInvalidRequest, says the limit and how
// to meet it.
func (l Law) CheckLimit(limit time.Duration) error {
	over := func(what string, d time.Duration) error {
		return fmt.Errorf("%w: latency law %q: %s %v is above the %v limit of a simulated latency", rag.ErrInvalidRequest, l.String(), what, d, limit)
	}
	switch l.Kind {
	case LawFixed:
		if l.Scale > limit {
			return over("the value", l.Scale)
		}
	case LawUniform:
		if l.Max > limit {
			return over("the maximum", l.Max)
		}
	case LawLognormal, LawPareto:
		switch {
		case l.Scale > limit:
			return over("the scale", l.Scale)
		case l.Max > limit:
			return over("the cap", l.Max)
		case l.Max == 0:
			if tail := l.quantileNS(TailQuantile); !(tail <= float64(limit)) {
				return fmt.Errorf("%w: latency law %q: its P99.9 is %s, above the %v limit of a simulated latency: "+
					"give it a cap of at most %v (%s), or a smaller scale or a larger shape", rag.ErrInvalidRequest,
					l.String(), formatNS(tail), limit, limit, Law{Kind: l.Kind, Scale: l.Scale, Shape: l.Shape, Max: limit})
			}
		}
	}
	return nil
}

// formatNS writes a length of time in nanoseconds that may be past what a time.Duration holds.
func formatNS(ns float64) string {
	if ns < float64(math.MaxInt64) {
		return time.Duration(ns).String()
	}
	return strconv.FormatFloat(ns/1e9, 'g', 3, 64) + "s"
}

// Fixed returns a law that always yields d.
func Fixed(d time.Duration) Law {
	if d <= 0 {
		return Law{Kind: LawNone}
	}
	return Law{Kind: LawFixed, Scale: d}
}

// Parse parses the text form of a latency law (see Law), within Limit (see CheckLimit).
func Parse(s string) (Law, error) {
	l, err := parse(s)
	if err != nil {
		return Law{}, err
	}
	if err := l.CheckLimit(Limit); err != nil {
		return Law{}, err
	}
	return l, nil
}

func parse(s string) (Law, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" || s == "0" {
		return Law{Kind: LawNone}, nil
	}
	kind, args, _ := strings.Cut(s, ":")
	fields := strings.Split(args, ",")
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	bad := func(format string, a ...any) (Law, error) {
		return Law{}, fmt.Errorf("%w: latency law %q: %s", rag.ErrInvalidRequest, s, fmt.Sprintf(format, a...))
	}
	dur := func(f string) (time.Duration, error) {
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("%q is not a non-negative duration such as 5ms", f)
		}
		return d, nil
	}
	switch LawKind(kind) {
	case LawFixed:
		if len(fields) != 1 {
			return bad("want fixed:DURATION")
		}
		d, err := dur(fields[0])
		if err != nil {
			return bad("%v", err)
		}
		return Fixed(d), nil
	case LawUniform:
		if len(fields) != 2 {
			return bad("want uniform:MIN,MAX")
		}
		lo, err := dur(fields[0])
		if err != nil {
			return bad("%v", err)
		}
		hi, err := dur(fields[1])
		if err != nil {
			return bad("%v", err)
		}
		if hi < lo {
			return bad("max %v is below min %v", hi, lo)
		}
		return Law{Kind: LawUniform, Scale: lo, Max: hi}, nil
	case LawLognormal, LawPareto:
		if len(fields) != 2 && len(fields) != 3 {
			return bad("want %s:SCALE,SHAPE[,CAP]", kind)
		}
		scale, err := dur(fields[0])
		if err != nil {
			return bad("%v", err)
		}
		shape, err := strconv.ParseFloat(fields[1], 64)
		if err != nil || shape <= 0 || math.IsInf(shape, 0) {
			return bad("shape %q must be a positive number", fields[1])
		}
		l := Law{Kind: LawKind(kind), Scale: scale, Shape: shape}
		if len(fields) == 3 {
			if l.Max, err = dur(fields[2]); err != nil {
				return bad("%v", err)
			}
		}
		return l, nil
	}
	return bad("unknown kind %q: want none, fixed, uniform, lognormal or pareto", kind)
}

// String returns the text form of the law, which Parse accepts.
func (l Law) String() string {
	switch l.Kind {
	case LawFixed:
		return "fixed:" + l.Scale.String()
	case LawUniform:
		return "uniform:" + l.Scale.String() + "," + l.Max.String()
	case LawLognormal, LawPareto:
		s := string(l.Kind) + ":" + l.Scale.String() + "," + strconv.FormatFloat(l.Shape, 'g', -1, 64)
		if l.Max > 0 {
			s += "," + l.Max.String()
		}
		return s
	}
	return "none"
}

// MarshalText implements encoding.TextMarshaler so a Law reads naturally in JSON and flags.
func (l Law) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler. It reads the text form as Parse does but
// without the limit, which the document holding the law checks (CheckLimit) so that its error
// names the law's key.
func (l *Law) UnmarshalText(b []byte) error {
	v, err := parse(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Sample draws one latency from the law using r.
func (l Law) Sample(r *rand.Rand) time.Duration {
	var d time.Duration
	switch l.Kind {
	case LawFixed:
		return l.Scale
	case LawUniform:
		if l.Max <= l.Scale {
			return l.Scale
		}
		return l.Scale + time.Duration(r.Int64N(int64(l.Max-l.Scale)+1))
	case LawLognormal:
		d = time.Duration(float64(l.Scale) * math.Exp(l.Shape*r.NormFloat64()))
	case LawPareto:
		// Inverse CDF: x_m / U^(1/alpha) with U uniform on (0, 1].
		u := 1 - r.Float64()
		d = time.Duration(float64(l.Scale) / math.Pow(u, 1/l.Shape))
	default:
		return 0
	}
	if d < 0 || (l.Max > 0 && d > l.Max) {
		d = l.Max
	}
	return d
}

// Quantile returns the law's q-quantile (0 < q < 1), ignoring any cap. It is the analytic
// figure that sampled latencies are checked against.
func (l Law) Quantile(q float64) time.Duration {
	return time.Duration(l.quantileNS(q))
}

// quantileNS is Quantile in nanoseconds, as a float that a heavy tail may take past what a
// time.Duration holds.
func (l Law) quantileNS(q float64) float64 {
	switch l.Kind {
	case LawFixed:
		return float64(l.Scale)
	case LawUniform:
		return float64(l.Scale) + q*float64(l.Max-l.Scale)
	case LawLognormal:
		return float64(l.Scale) * math.Exp(l.Shape*math.Sqrt2*math.Erfinv(2*q-1))
	case LawPareto:
		return float64(l.Scale) / math.Pow(1-q, 1/l.Shape)
	}
	return 0
}

// Delay samples a Law with its own seeded random source. It is safe for concurrent use.
type Delay struct {
	law Law
	mu  sync.Mutex
	rng *rand.Rand
}

// NewDelay returns a Delay drawing from law with a source seeded by seed.
func NewDelay(law Law, seed uint64) *Delay {
	return &Delay{law: law, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Law returns the law the Delay samples.
func (d *Delay) Law() Law {
	if d == nil {
		return Law{Kind: LawNone}
	}
	return d.law
}

// Sample draws one latency, at most Limit: the rare draw of an uncapped heavy tail beyond it
// (CheckLimit keeps them under 0.1%) waits Limit.
func (d *Delay) Sample() time.Duration {
	if d == nil || d.law.Kind == LawNone || d.law.Kind == "" {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return min(d.law.Sample(d.rng), Limit)
}

// Wait draws one latency and waits for it, or until ctx is done. It returns the latency drawn and
// ctx.Err() if the wait was cut short.
func (d *Delay) Wait(ctx context.Context) (time.Duration, error) {
	delay := d.Sample()
	return delay, Sleep(ctx, delay)
}

// Sleep waits for d or until ctx is done, whichever comes first, and returns ctx.Err() in the
// second case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
