package shape

import (
	"math"
	"testing"
	"time"
)

// TestAdjustablePiecewiseRate switches a Poisson process through three rates and an end, and
// counts the arrivals of each stretch: a Poisson count of mean m has standard deviation
// sqrt(m), so each count lies within 4 of them of rate x length (a seeded run; the bound fails
// if a rate were applied late or to the wrong stretch, e.g. 100 req/s in a 10 req/s stretch).
func TestAdjustablePiecewiseRate(t *testing.T) {
	a, err := NewAdjustable(10, 1, 42)
	if err != nil {
		t.Fatal(err)
	}
	from, err := a.Switch(0, RateStep{0, 10}, RateStep{100 * time.Second, 100}, RateStep{110 * time.Second, 2}, RateStep{410 * time.Second, 0})
	if err != nil || from != 0 {
		t.Fatalf("switch from %s, err %v", from, err)
	}
	stretches := []struct {
		from, to time.Duration
		rate     float64
	}{{0, 100 * time.Second, 10}, {100 * time.Second, 110 * time.Second, 100}, {110 * time.Second, 410 * time.Second, 2}}
	counts := make([]int, len(stretches))
	var last time.Duration
	for {
		at, ok := a.Next()
		if !ok {
			break
		}
		if at < last {
			t.Fatalf("offset %s after %s", at, last)
		}
		last = at
		for i, s := range stretches {
			if at >= s.from && at < s.to {
				counts[i]++
			}
		}
		if at >= 410*time.Second {
			t.Fatalf("arrival at %s after the end at 410s", at)
		}
	}
	for i, s := range stretches {
		mean := s.rate * (s.to - s.from).Seconds()
		if d := math.Abs(float64(counts[i]) - mean); d > 4*math.Sqrt(mean) {
			t.Errorf("stretch %d (%g req/s): %d arrivals, want %g +- %.0f", i, s.rate, counts[i], mean, 4*math.Sqrt(mean))
		}
	}
}

// TestAdjustableSwitchKeepsHandedOut checks that a switch never moves an arrival already
// handed out: it takes effect at the later of its offset and the last arrival.
func TestAdjustableSwitchKeepsHandedOut(t *testing.T) {
	a, err := NewAdjustable(1, 0, 1) // evenly spaced: arrivals at 0, 1 s, 2 s
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		a.Next()
	}
	from, err := a.Switch(500*time.Millisecond, RateStep{0, 4})
	if err != nil {
		t.Fatal(err)
	}
	if from != 2*time.Second {
		t.Errorf("switch from %s, want 2s (the last arrival)", from)
	}
	if at, _ := a.Next(); at != 2250*time.Millisecond {
		t.Errorf("next arrival at %s, want 2.25s (a quarter second after the switch)", at)
	}
	if _, err := a.Switch(0, RateStep{0, -1}); err == nil {
		t.Error("a negative rate was accepted")
	}
}
