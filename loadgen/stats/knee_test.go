package stats

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// hockey builds a latency curve flat at base until knee, then rising by steep ms per req/s; the
// achieved rate follows the offered one until capacity, then stays there.
func hockey(xs []float64, base time.Duration, knee, steep, capacity float64) []Point {
	out := make([]Point, len(xs))
	for i, x := range xs {
		p99 := base
		if x > knee {
			p99 += time.Duration((x - knee) * steep * float64(time.Millisecond))
		}
		out[i] = Point{X: x, Achieved: math.Min(x, capacity), P99: p99}
	}
	return out
}

func seq(from, to, step float64) []float64 {
	var out []float64
	for x := from; x <= to+1e-9; x += step {
		out = append(out, x)
	}
	return out
}

func TestKnee(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		points     []Point
		threshold  float64
		wantFound  bool
		wantX      float64
		robustX    float64 // 0: robust finds none
		robustSkip bool
	}{
		{
			name:   "hockey stick at 120",
			points: hockey(seq(10, 200, 10), 100*time.Millisecond, 120, 300, 1e9), threshold: DefaultKneeSlope,
			wantFound: true, wantX: 130, robustX: 120,
		},
		{
			name:   "gentle slope below threshold",
			points: hockey(seq(10, 200, 10), 100*time.Millisecond, 120, 50, 1e9), threshold: DefaultKneeSlope,
			wantFound: false, robustX: 120,
		},
		{
			name: "saturation: achieved stops growing", points: hockey(seq(10, 200, 10), 100*time.Millisecond, 150, 5, 150),
			threshold: DefaultKneeSlope, wantFound: true, wantX: 160, robustX: 150,
		},
		{
			name: "straight line", points: func() []Point {
				var ps []Point
				for _, x := range seq(1, 10, 1) {
					ps = append(ps, Point{X: x, Achieved: x, P99: time.Duration(x * float64(200*time.Millisecond))})
				}
				return ps
			}(),
			threshold: DefaultKneeSlope, wantFound: true, wantX: 2, robustX: 0,
		},
		{"one point", []Point{{X: 1, Achieved: 1, P99: time.Second}}, DefaultKneeSlope, false, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := Knee(tt.points, tt.threshold)
			if k.Found != tt.wantFound || (k.Found && k.X != tt.wantX) {
				t.Errorf("Knee = %+v, want found %v at %g", k, tt.wantFound, tt.wantX)
			}
			if k.Found && tt.points[k.Index].X != k.X {
				t.Errorf("index %d does not point at x %g", k.Index, k.X)
			}
			r := KneeRobust(tt.points)
			if (r.Found != (tt.robustX != 0)) || (r.Found && r.X != tt.robustX) {
				t.Errorf("KneeRobust = %+v, want %g", r, tt.robustX)
			}
		})
	}
}

// TestKneeNoisy adds independent noise of ±5% to the P99 and ±1% to the achieved rate of a
// hockey stick that leaves 200 ms at 100 req/s and then climbs 300 ms per req/s, given out of
// order. Noise on the flat part makes slopes of a few ms per req/s, far below 120, so the slope
// rule fires at 110, the end of the first steep segment (120 at most); the robust method stays
// within one step of 100.
func TestKneeNoisy(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 3))
	points := hockey(seq(10, 200, 10), 200*time.Millisecond, 100, 300, 1e9)
	for i := range points {
		points[i].P99 = time.Duration(float64(points[i].P99) * (1 + 0.1*(r.Float64()-0.5)))
		points[i].Achieved *= 1 + 0.02*(r.Float64()-0.5)
	}
	r.Shuffle(len(points), func(i, j int) { points[i], points[j] = points[j], points[i] })
	rk := KneeRobust(points)
	if !rk.Found || math.Abs(rk.X-100) > 10 {
		t.Errorf("KneeRobust = %+v, want 100 ± 10", rk)
	}
	k := Knee(points, DefaultKneeSlope)
	if !k.Found || k.X < 100 || k.X > 120 {
		t.Errorf("Knee = %+v, want 100..120", k)
	}
	if points[k.Index].X != k.X || points[rk.Index].X != rk.X {
		t.Error("index does not point at the reported point")
	}
}
