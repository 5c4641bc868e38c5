package shape

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// LawKind names the distribution of a Law.
type LawKind string

// The distributions a Law can follow.
const (
	LawNone        LawKind = "none"        // always zero
	LawFixed       LawKind = "fixed"       // always Scale
	LawUniform     LawKind = "uniform"     // uniform on [Scale, Max]
	LawExponential LawKind = "exponential" // mean Scale
	LawLognormal   LawKind = "lognormal"   // median Scale, log-space standard deviation Shape
)

// MaxLaw bounds any duration a Law given as text may draw: its fixed value, uniform maximum,
// cap, or (for a law without a cap) its P99.9. A tool that answers after more than ten minutes
// is a timeout, not a latency to simulate.
const MaxLaw = 10 * time.Minute

// Law is a distribution of durations, such as the latency of the tools an agent calls
// between its steps. Its text form, read by ParseLaw and written by String, is one of
//
//	none
//	fixed:80ms
//	uniform:20ms,200ms             (min, max)
//	exponential:80ms[,CAP]         (mean)
//	lognormal:80ms,0.6[,CAP]       (median, sigma of the underlying normal)
//
// where CAP bounds a draw. The service's simulated backends have a law of their own
// (rag/latency), with the same syntax for the kinds both know; the load generator does not
// import the service's packages. The zero Law is "none".
type Law struct {
	Kind  LawKind
	Scale time.Duration // fixed value, uniform minimum, exponential mean, lognormal median
	Max   time.Duration // uniform maximum; cap of an exponential or lognormal law (0: none)
	Shape float64       // lognormal sigma
}

// LawUsage describes the syntax of ParseLaw, for flag usage.
const LawUsage = "none, fixed:D, uniform:MIN,MAX, exponential:MEAN[,CAP] or lognormal:MEDIAN,SIGMA[,CAP]"

// ParseLaw parses the text form of a law (see Law). A law that may draw more than MaxLaw is
// refused, with a cap to give it.
func ParseLaw(s string) (Law, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == string(LawNone) || s == "0" {
		return Law{Kind: LawNone}, nil
	}
	kind, args, _ := strings.Cut(s, ":")
	fields := strings.Split(args, ",")
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	bad := func(format string, a ...any) (Law, error) {
		return Law{}, fmt.Errorf("law %q: %s", s, fmt.Sprintf(format, a...))
	}
	durs := make([]time.Duration, 0, len(fields))
	dur := func(i int) error {
		d, err := time.ParseDuration(fields[i])
		if err != nil || d < 0 {
			return fmt.Errorf("%q is not a non-negative duration such as 80ms", fields[i])
		}
		durs = append(durs, d)
		return nil
	}
	var l Law
	switch LawKind(kind) {
	case LawFixed:
		if len(fields) != 1 {
			return bad("want fixed:DURATION")
		}
		if err := dur(0); err != nil {
			return bad("%v", err)
		}
		l = Law{Kind: LawFixed, Scale: durs[0]}
	case LawUniform:
		if len(fields) != 2 {
			return bad("want uniform:MIN,MAX")
		}
		for i := range 2 {
			if err := dur(i); err != nil {
				return bad("%v", err)
			}
		}
		if durs[1] < durs[0] {
			return bad("max %v is below min %v", durs[1], durs[0])
		}
		l = Law{Kind: LawUniform, Scale: durs[0], Max: durs[1]}
	case LawExponential:
		if len(fields) != 1 && len(fields) != 2 {
			return bad("want exponential:MEAN[,CAP]")
		}
		for i := range fields {
			if err := dur(i); err != nil {
				return bad("%v", err)
			}
		}
		l = Law{Kind: LawExponential, Scale: durs[0]}
		if len(durs) == 2 {
			l.Max = durs[1]
		}
	case LawLognormal:
		if len(fields) != 2 && len(fields) != 3 {
			return bad("want lognormal:MEDIAN,SIGMA[,CAP]")
		}
		if err := dur(0); err != nil {
			return bad("%v", err)
		}
		sigma, err := strconv.ParseFloat(fields[1], 64)
		if err != nil || !(sigma > 0) || math.IsInf(sigma, 0) {
			return bad("sigma %q must be a positive number", fields[1])
		}
		l = Law{Kind: LawLognormal, Scale: durs[0], Shape: sigma}
		if len(fields) == 3 {
			if err := dur(2); err != nil {
				return bad("%v", err)
			}
			l.Max = durs[1]
		}
	default:
		return bad("unknown kind %q: want %s", kind, LawUsage)
	}
	if top := l.top(); !(top <= float64(MaxLaw)) {
		return bad("it draws up to %s, above the %v limit: give it a cap (a last field) of at most %v", formatNS(top), MaxLaw, MaxLaw)
	}
	return l, nil
}

// top is the largest draw that counts against MaxLaw, in nanoseconds: the cap of a capped law,
// the P99.9 of an uncapped one.
func (l Law) top() float64 {
	if l.Max > 0 {
		return float64(l.Max)
	}
	return l.quantileNS(0.999)
}

// formatNS writes nanoseconds that may be past what a time.Duration holds.
func formatNS(ns float64) string {
	if ns < float64(math.MaxInt64) {
		return time.Duration(ns).String()
	}
	return strconv.FormatFloat(ns/1e9, 'g', 3, 64) + "s"
}

// String returns the text form of the law, which ParseLaw reads.
func (l Law) String() string {
	capped := func(s string) string {
		if l.Max > 0 {
			s += "," + l.Max.String()
		}
		return s
	}
	switch l.Kind {
	case LawFixed:
		return "fixed:" + l.Scale.String()
	case LawUniform:
		return "uniform:" + l.Scale.String() + "," + l.Max.String()
	case LawExponential:
		return capped("exponential:" + l.Scale.String())
	case LawLognormal:
		return capped("lognormal:" + l.Scale.String() + "," + strconv.FormatFloat(l.Shape, 'g', -1, 64))
	}
	return string(LawNone)
}

// Set parses v into l; with String it makes a *Law a flag.Value.
func (l *Law) Set(v string) error {
	parsed, err := ParseLaw(v)
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// Sample draws one duration from the law with r.
func (l Law) Sample(r *rand.Rand) time.Duration {
	var ns float64
	switch l.Kind {
	case LawFixed:
		return l.Scale
	case LawUniform:
		if l.Max <= l.Scale {
			return l.Scale
		}
		return l.Scale + time.Duration(r.Int64N(int64(l.Max-l.Scale)+1))
	case LawExponential:
		ns = float64(l.Scale) * r.ExpFloat64()
	case LawLognormal:
		ns = float64(l.Scale) * math.Exp(l.Shape*r.NormFloat64())
	default:
		return 0
	}
	if l.Max > 0 && ns > float64(l.Max) {
		return l.Max
	}
	return time.Duration(min(ns, float64(math.MaxInt64)))
}

// Quantile returns the law's q-quantile (0 < q < 1), ignoring any cap: the analytic figure
// sampled durations are checked against.
func (l Law) Quantile(q float64) time.Duration {
	return time.Duration(min(l.quantileNS(q), float64(math.MaxInt64)))
}

func (l Law) quantileNS(q float64) float64 {
	switch l.Kind {
	case LawFixed:
		return float64(l.Scale)
	case LawUniform:
		return float64(l.Scale) + q*float64(l.Max-l.Scale)
	case LawExponential:
		return -float64(l.Scale) * math.Log1p(-q)
	case LawLognormal:
		return float64(l.Scale) * math.Exp(l.Shape*math.Sqrt2*math.Erfinv(2*q-1))
	}
	return 0
}
