package loadgen

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// CancelPoint is where the generator abandons a request, the way a user closes a tab: Delay
// after the send, Delay after the first content token (AfterFirstToken), or once Tokens output
// tokens have come (Tokens > 0). The client cancels the request's context there, which closes
// its connection; the server sees the client go.
type CancelPoint struct {
	Tokens          int           // abandon once this many output tokens came; 0: by time
	AfterFirstToken bool          // Delay counts from the first content token, not from the send
	Delay           time.Duration // how long after the send (or the first token) to abandon
}

// ParseCancelPoint reads a cancel point: DURATION (after the send, e.g. 200ms), ttft+DURATION
// (after the first token; ttft alone is ttft+0s) or tokens:N.
func ParseCancelPoint(s string) (CancelPoint, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutPrefix(s, "tokens:"); ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			return CancelPoint{}, fmt.Errorf("tokens:%s: want tokens:N with N >= 1", n)
		}
		return CancelPoint{Tokens: v}, nil
	}
	p := CancelPoint{}
	if rest, ok := strings.CutPrefix(s, "ttft"); ok {
		p.AfterFirstToken = true
		if rest == "" {
			return p, nil
		}
		d, ok := strings.CutPrefix(rest, "+")
		if !ok {
			return CancelPoint{}, fmt.Errorf("%q: want ttft+DURATION, e.g. ttft+200ms", s)
		}
		s = d
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return CancelPoint{}, fmt.Errorf("%q: want DURATION (after the send), ttft+DURATION or tokens:N", s)
	}
	p.Delay = d
	return p, nil
}

// String returns the point as ParseCancelPoint reads it.
func (p CancelPoint) String() string {
	switch {
	case p.Tokens > 0:
		return "tokens:" + strconv.Itoa(p.Tokens)
	case p.AfterFirstToken:
		return "ttft+" + p.Delay.String()
	default:
		return p.Delay.String()
	}
}

// Cancellations says which requests a run abandons mid-way, and where: a Fraction of them, at
// After. Which ones is decided by a hash of the seed and of the request's place in the
// workload (its item, and its step within a session), never by timing, so that the same seed
// abandons the same requests in every run. The zero Cancellations abandons none.
type Cancellations struct {
	Fraction float64 // share of the requests abandoned, from 0 to 1
	After    CancelPoint
}

// ParseCancellations reads fraction=F,after=POINT (e.g. fraction=0.1,after=ttft+200ms); see
// ParseCancelPoint for the points.
func ParseCancellations(s string) (Cancellations, error) {
	var c Cancellations
	var haveFraction, haveAfter bool
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Cancellations{}, fmt.Errorf("%q: want fraction=F,after=POINT", kv)
		}
		switch k {
		case "fraction":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(f) || f <= 0 || f > 1 {
				return Cancellations{}, fmt.Errorf("fraction=%s: want a number in (0, 1]", v)
			}
			c.Fraction, haveFraction = f, true
		case "after":
			p, err := ParseCancelPoint(v)
			if err != nil {
				return Cancellations{}, fmt.Errorf("after: %w", err)
			}
			c.After, haveAfter = p, true
		default:
			return Cancellations{}, fmt.Errorf("unknown key %q: want fraction=F,after=POINT", k)
		}
	}
	if !haveFraction || !haveAfter {
		return Cancellations{}, errors.New("want both fraction=F and after=POINT, e.g. fraction=0.1,after=ttft+200ms")
	}
	return c, nil
}

// String returns c as ParseCancellations reads it; "" for the zero Cancellations.
func (c Cancellations) String() string {
	if c.Fraction == 0 {
		return ""
	}
	return "fraction=" + strconv.FormatFloat(c.Fraction, 'g', -1, 64) + ",after=" + c.After.String()
}

// Chosen reports whether the step-th request of the item-th item (both from 0) of a run
// seeded with seed is abandoned: a hash of the three, uniform in [0, 1), below Fraction.
func (c Cancellations) Chosen(seed uint64, item, step int) bool {
	if c.Fraction <= 0 {
		return false
	}
	h := splitMix(seed ^ splitMix(uint64(item)^splitMix(uint64(step)+0x63616e63656c)))
	return float64(h>>11)/(1<<53) < c.Fraction
}

// WithCancellations returns w with the chosen requests (see Cancellations.Chosen) marked to be
// abandoned at c.After (Request.Cancel). Run calls Next from one goroutine at a time, so the
// items are counted in the workload's own order.
func WithCancellations(w Workload, c Cancellations, seed uint64) Workload {
	if c.Fraction <= 0 {
		return w
	}
	return &cancelWorkload{w: w, c: c, seed: seed}
}

type cancelWorkload struct {
	w    Workload
	c    Cancellations
	seed uint64
	n    int
}

func (cw *cancelWorkload) Next() (Item, bool) {
	item, ok := cw.w.Next()
	if !ok {
		return item, false
	}
	n := cw.n
	cw.n++
	if cw.c.Chosen(cw.seed, n, 0) {
		item.Request.Cancel = &cw.c.After
	}
	if len(item.Then) > 0 {
		item.Then = append([]Step(nil), item.Then...)
		for i := range item.Then {
			if cw.c.Chosen(cw.seed, n, i+1) {
				item.Then[i].Request.Cancel = &cw.c.After
			}
		}
	}
	return item, true
}
