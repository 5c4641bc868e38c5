package stats

import (
	"context"
	"errors"
	"math"
	"testing"
)

func TestBisectMaxRate(t *testing.T) {
	t.Parallel()
	errProbe := errors.New("boom")
	tests := []struct {
		name      string
		lo, hi    float64
		capacity  float64 // the SLO holds at rates <= capacity
		probeErr  bool
		wantErr   error
		wantRate  float64 // 0: do not check
		maxProbes int
	}{
		// Bracket [10, 160] after 4 doublings, then bisect 150 down to 1: 8 halvings.
		{name: "bracket then bisect", lo: 10, hi: 20, capacity: 123.4, wantRate: 123.4, maxProbes: 1 + 5 + 8},
		{name: "inside the first bracket", lo: 1, hi: 1000, capacity: 517, wantRate: 517, maxProbes: 2 + 10},
		{name: "never met", lo: 10, hi: 20, capacity: 5, wantErr: ErrSLONeverMet, maxProbes: 1},
		{name: "always met", lo: 1, hi: 2, capacity: math.Inf(1), wantErr: ErrSLOAlwaysMet, maxProbes: 1 + 17},
		{name: "probe error", lo: 1, hi: 2, capacity: 100, probeErr: true, wantErr: errProbe, maxProbes: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probe := func(_ context.Context, rate float64) (bool, error) {
				if tt.probeErr {
					return false, errProbe
				}
				return rate <= tt.capacity, nil
			}
			rate, probes, err := BisectMaxRate(context.Background(), tt.lo, tt.hi, 1, probe)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if len(probes) > tt.maxProbes {
				t.Errorf("%d probes, want at most %d", len(probes), tt.maxProbes)
			}
			if tt.wantRate != 0 && (rate > tt.wantRate || rate < tt.wantRate-1) {
				t.Errorf("rate %g, want within 1 below %g", rate, tt.wantRate)
			}
			for _, p := range probes {
				if p.Meets != (p.Rate <= tt.capacity) {
					t.Errorf("probe %+v recorded wrongly", p)
				}
				if p.Meets && p.Rate > rate {
					t.Errorf("probe %+v met above the answer %g", p, rate)
				}
			}
		})
	}
}

func TestBisectMaxRateStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, probes, err := BisectMaxRate(ctx, 1, 2, 0.01, func(context.Context, float64) (bool, error) {
		calls++
		if calls == 3 {
			cancel()
		}
		return true, nil
	})
	if !errors.Is(err, context.Canceled) || len(probes) != 3 {
		t.Errorf("err %v after %d probes, want context.Canceled after 3", err, len(probes))
	}
	for _, bad := range [][3]float64{{0, 1, 1}, {2, 1, 1}, {1, 2, 0}, {1, math.Inf(1), 1}, {math.NaN(), 1, 1}} {
		if _, _, err := BisectMaxRate(context.Background(), bad[0], bad[1], bad[2], nil); err == nil {
			t.Errorf("accepted lo=%g hi=%g tol=%g", bad[0], bad[1], bad[2])
		}
	}
}

// TestBisectMaxUsers finds the capacity exactly, for every capacity of a range, within the
// probes a bracket and a bisection to one user take, and never probes the same count twice.
func TestBisectMaxUsers(t *testing.T) {
	t.Parallel()
	for capacity := 1; capacity <= 300; capacity++ {
		probe := func(_ context.Context, n int) (bool, error) { return n <= capacity, nil }
		got, probes, err := BisectMaxUsers(context.Background(), 1, 8, probe)
		if err != nil {
			t.Fatalf("capacity %d: %v", capacity, err)
		}
		if got != capacity {
			t.Fatalf("capacity %d: got %d", capacity, got)
		}
		// lo, doublings up to the first failing hi (8 << d > capacity), then log2 of the bracket.
		d := 0
		for 8<<d <= capacity {
			d++
		}
		lo := 1
		if d > 0 {
			lo = 8 << (d - 1)
		}
		if max := 1 + (d + 1) + int(math.Ceil(math.Log2(float64(8<<d-lo)))); len(probes) > max {
			t.Errorf("capacity %d: %d probes, want at most %d", capacity, len(probes), max)
		}
		seen := map[int]bool{}
		for _, p := range probes {
			if seen[p.Users] {
				t.Errorf("capacity %d: %d users probed twice", capacity, p.Users)
			}
			seen[p.Users] = true
			if p.Meets != (p.Users <= capacity) || p.Rate != 0 {
				t.Errorf("capacity %d: probe %+v recorded wrongly", capacity, p)
			}
		}
	}
	never := func(context.Context, int) (bool, error) { return false, nil }
	if _, _, err := BisectMaxUsers(context.Background(), 2, 4, never); !errors.Is(err, ErrSLONeverMet) {
		t.Errorf("never met: %v", err)
	}
	always := func(context.Context, int) (bool, error) { return true, nil }
	if n, _, err := BisectMaxUsers(context.Background(), 1, 2, always); !errors.Is(err, ErrSLOAlwaysMet) || n != 1<<17 {
		t.Errorf("always met: %d, %v", n, err)
	}
	if _, _, err := BisectMaxUsers(context.Background(), 4, 4, always); err == nil {
		t.Error("lo == hi accepted")
	}
}
