package shape

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Adjustable is an arrival process whose rate a controller changes while a run goes (bench
// --hold-slo): each gap is drawn at the rate in force at the previous arrival, and a change of
// rate at offset T restarts the draw at T, so Poisson arrivals (burstiness 1) stay an exact
// Poisson process of piecewise-constant rate (the exponential gap forgets the time already
// waited). Gamma gaps (burstiness other than 1) restart the same way, an approximation at each
// change; burstiness 0 spaces arrivals evenly. A rate of 0 ends the process.
//
// Like every process it reads no clock: a change names the offset it takes effect at. Unlike the
// others, it is safe for concurrent use: Switch is called by the controller while loadgen.Run
// calls Next.
type Adjustable struct {
	mu      sync.Mutex
	k       float64 // gamma shape; 0: even spacing
	rng     *rand.Rand
	rate    float64       // in force at last
	last    time.Duration // the last arrival handed out
	started bool
	steps   []pendingRate // changes still ahead, by offset
}

// RateStep is a rate that takes effect After the offset a Switch starts from; Rate 0 ends the
// process there.
type RateStep struct {
	After time.Duration
	Rate  float64
}

type pendingRate struct {
	at   time.Duration
	rate float64
}

// NewAdjustable returns an adjustable process starting at rate req/s, its first arrival at 0,
// with gamma gaps of shape burstiness (1: Poisson; 0: evenly spaced), seeded.
func NewAdjustable(rate, burstiness float64, seed uint64) (*Adjustable, error) {
	if err := checkRate(rate); err != nil {
		return nil, err
	}
	if burstiness < 0 || math.IsNaN(burstiness) || math.IsInf(burstiness, 0) {
		return nil, fmt.Errorf("burstiness must be 0 (even spacing) or a positive number, got %v", burstiness)
	}
	return &Adjustable{k: burstiness, rng: newRand(seed, streamArrivals), rate: rate}, nil
}

// Switch replaces the changes still ahead with steps, counted from offset at or from the last
// arrival handed out, whichever is later (an arrival already handed out keeps its time): the
// first step (After 0) takes effect there. It returns that offset. Rates must be positive and
// finite, or 0 for the end.
func (a *Adjustable) Switch(at time.Duration, steps ...RateStep) (time.Duration, error) {
	for _, s := range steps {
		if s.Rate != 0 {
			if err := checkRate(s.Rate); err != nil {
				return 0, err
			}
		}
		if s.After < 0 {
			return 0, fmt.Errorf("adjustable: negative step offset %s", s.After)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	from := max(at, a.last)
	a.steps = a.steps[:0]
	for _, s := range steps {
		a.steps = append(a.steps, pendingRate{at: from + s.After, rate: s.Rate})
	}
	return from, nil
}

// Next returns the offset of the next arrival, false once a rate of 0 took effect.
func (a *Adjustable) Next() (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		a.started = true
		a.apply(0)
		if a.rate == 0 {
			return 0, false
		}
		return 0, true
	}
	from := a.last
	for {
		if a.rate == 0 {
			return 0, false
		}
		at := from + seconds(a.gap()/a.rate)
		if len(a.steps) == 0 || a.steps[0].at > at {
			a.last = at
			return at, true
		}
		// A change comes before the drawn arrival: the draw restarts there at the new rate.
		from = a.steps[0].at
		a.apply(from)
	}
}

// apply puts in force every change at or before offset t.
func (a *Adjustable) apply(t time.Duration) {
	for len(a.steps) > 0 && a.steps[0].at <= t {
		a.rate = a.steps[0].rate
		a.steps = a.steps[1:]
	}
}

// gap draws a gap of mean 1 (seconds at rate 1).
func (a *Adjustable) gap() float64 {
	if a.k == 0 {
		return 1
	}
	return gammaVariate(a.rng, a.k) / a.k
}

// String describes the process for reports.
func (a *Adjustable) String() string {
	switch a.k {
	case 0:
		return "adjustable constant"
	case 1:
		return "adjustable poisson"
	}
	return "adjustable gamma(burstiness=" + formatFloat(a.k) + ")"
}
