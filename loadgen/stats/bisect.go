package stats

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Probe is one trial of BisectMaxRate or BisectMaxUsers.
type Probe struct {
	Rate  float64 // offered rate tried, req/s (BisectMaxRate)
	Users int     // users of the closed loop tried (BisectMaxUsers)
	Meets bool    // whether the SLO held
}

// Errors of BisectMaxRate, matched with errors.Is.
var (
	// ErrSLONeverMet: the SLO failed already at the lowest rate.
	ErrSLONeverMet = errors.New("the SLO is not met even at the lowest rate")
	// ErrSLOAlwaysMet: the SLO still held at the highest rate tried while bracketing.
	ErrSLOAlwaysMet = errors.New("the SLO is still met at the highest rate tried")
)

// maxBracketDoublings bounds how far BisectMaxRate grows hi: 2^16 times the first guess.
const maxBracketDoublings = 16

// BisectMaxRate finds the highest rate in [lo, ∞) at which probe reports the SLO met, to within
// tol req/s, assuming that meeting it is monotone in the rate. It first checks lo, then brackets
// by doubling hi while the SLO holds at hi, then bisects the bracket. It returns the highest rate
// seen to meet the SLO and every probe in order. Errors: ErrSLONeverMet (with rate 0) when lo
// fails, ErrSLOAlwaysMet (with the highest rate tried) when hi was doubled 16 times and still
// met, a probe's error, or ctx's error; each comes with the probes made so far.
func BisectMaxRate(ctx context.Context, lo, hi, tol float64, probe func(ctx context.Context, rate float64) (bool, error)) (float64, []Probe, error) {
	if !(lo > 0) || !(hi > lo) || !(tol > 0) || math.IsInf(hi, 0) {
		return 0, nil, fmt.Errorf("bisect: need 0 < lo < hi < inf and tol > 0, got lo=%g hi=%g tol=%g", lo, hi, tol)
	}
	return bisectMax(ctx, lo, hi, tol, "req/s", probe, func(rate float64) Probe { return Probe{Rate: rate} })
}

// BisectMaxUsers finds the largest number of users of a closed loop in [lo, ∞) at which probe
// reports the SLO met, exactly, assuming that meeting it is monotone in the users: BisectMaxRate
// on the integers, bisecting until the bracket is one user wide. It returns the largest number
// seen to meet the SLO and every probe in order, with the errors of BisectMaxRate.
func BisectMaxUsers(ctx context.Context, lo, hi int, probe func(ctx context.Context, users int) (bool, error)) (int, []Probe, error) {
	if lo < 1 || hi <= lo || hi > math.MaxInt32 {
		return 0, nil, fmt.Errorf("bisect: need 1 <= lo < hi <= %d, got lo=%d hi=%d", math.MaxInt32, lo, hi)
	}
	return bisectMax(ctx, lo, hi, 1, "users", probe, func(n int) Probe { return Probe{Users: n} })
}

// bisectMax is the search of BisectMaxRate and BisectMaxUsers on loads of type T, in unit:
// check lo, double hi while the SLO holds there, then halve the bracket until it is at most tol
// wide. asProbe records a load as a Probe.
func bisectMax[T int | float64](ctx context.Context, lo, hi, tol T, unit string, probe func(context.Context, T) (bool, error), asProbe func(T) Probe) (T, []Probe, error) {
	var probes []Probe
	try := func(load T) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("bisect at %v %s: %w", load, unit, err)
		}
		ok, err := probe(ctx, load)
		if err != nil {
			return false, fmt.Errorf("probe %v %s: %w", load, unit, err)
		}
		p := asProbe(load)
		p.Meets = ok
		probes = append(probes, p)
		return ok, nil
	}
	ok, err := try(lo)
	if err != nil {
		return 0, probes, err
	}
	if !ok {
		return 0, probes, fmt.Errorf("bisect: %w (%v %s)", ErrSLONeverMet, lo, unit)
	}
	for doublings := 0; ; doublings++ {
		ok, err := try(hi)
		if err != nil {
			return lo, probes, err
		}
		if !ok {
			break
		}
		lo = hi
		if doublings == maxBracketDoublings {
			return lo, probes, fmt.Errorf("bisect: %w (%v %s)", ErrSLOAlwaysMet, lo, unit)
		}
		hi *= 2
	}
	for hi-lo > tol {
		mid := lo + (hi-lo)/2
		ok, err := try(mid)
		if err != nil {
			return lo, probes, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, probes, nil
}
