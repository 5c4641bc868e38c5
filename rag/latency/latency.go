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
type Law struct {
	Kind  LawKind
	Scale time.Duration // fixed value, uniform minimum, lognormal median, Pareto x_m
	Max   time.Duration // uniform maximum; cap for lognormal and Pareto (0: no cap)
	Shape float64       // lognormal sigma, Pareto alpha
}

// Fixed returns a law that always yields d.
func Fixed(d time.Duration) Law {
	if d <= 0 {
		return Law{Kind: LawNone}
	}
	return Law{Kind: LawFixed, Scale: d}
}

// Parse parses the text form of a latency law (see Law).
func Parse(s string) (Law, error) {
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

// UnmarshalText implements encoding.TextUnmarshaler.
func (l *Law) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
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
	switch l.Kind {
	case LawFixed:
		return l.Scale
	case LawUniform:
		return l.Scale + time.Duration(q*float64(l.Max-l.Scale))
	case LawLognormal:
		return time.Duration(float64(l.Scale) * math.Exp(l.Shape*math.Sqrt2*math.Erfinv(2*q-1)))
	case LawPareto:
		return time.Duration(float64(l.Scale) / math.Pow(1-q, 1/l.Shape))
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

// Sample draws one latency.
func (d *Delay) Sample() time.Duration {
	if d == nil || d.law.Kind == LawNone || d.law.Kind == "" {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.law.Sample(d.rng)
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
