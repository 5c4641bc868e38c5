package lab

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
)

// TestKneeSampleSize checks the sample size the rule states: at the default duration each rate
// of the Llama ladder expects more arrivals than a P99 interval needs, by at least 2.5 standard
// deviations of a Poisson count, and the split uses the whole ladder share.
func TestKneeSampleSize(t *testing.T) {
	n := kneeArrivals(kneeDefault)
	if n-2.5*math.Sqrt(n) < minP99Samples {
		t.Errorf("%.0f arrivals per rate: below %d with more than 0.6%% probability", n, minP99Samples)
	}
	var total time.Duration
	for _, r := range llamaLadder {
		total += time.Duration(n / r * float64(time.Second))
	}
	if d := total - ladderTime(kneeDefault); d > time.Millisecond || d < -time.Millisecond {
		t.Errorf("rates run %v in all, want the ladder's %v", total, ladderTime(kneeDefault))
	}
}

// TestJudgeKnee plants P99 curves on the Llama ladder (exponential latencies, 600 per rate,
// achieved rate = offered) and checks the verdict of the rule.
func TestJudgeKnee(t *testing.T) {
	flat := time.Second
	tests := []struct {
		name string
		p99  []time.Duration // per rate of llamaLadder
		n    int
		want string
		why  string
	}{
		{"knee at 26", []time.Duration{flat, flat, flat, 3 * flat, 6 * flat}, 600, Reproduced, "lies within the ladder"},
		{"steep from the first step", []time.Duration{flat, 3 * flat, 5 * flat, 7 * flat, 9 * flat}, 600, NotReproduced, "first step"},
		{"no knee", []time.Duration{flat, flat, flat, flat, flat}, 600, NotReproduced, "no knee within the ladder"},
		{"underpowered", []time.Duration{flat, flat, flat, 3 * flat, 6 * flat}, 200, NotReproduced, "underpowered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 1))
			var pts []kneePoint
			for i, r := range llamaLadder {
				mean := float64(tt.p99[i]) / math.Log(100)
				p := kneePoint{rate: r, bench: &report.Bench{RequestThroughput: r}}
				for range tt.n {
					p.e2el = append(p.e2el, time.Duration(rng.ExpFloat64()*mean))
				}
				pts = append(pts, p)
			}
			row, v, err := judgeKnee(pts)
			if err != nil {
				t.Fatal(err)
			}
			if v.Outcome != tt.want || !strings.Contains(v.Why, tt.why) {
				t.Errorf("verdict %+v, want %s (%q); row %q", v, tt.want, tt.why, row.Measured)
			}
		})
	}
}

// TestKVWaste checks the waste against its definition on a constant series: 1 - 3/4.
func TestKVWaste(t *testing.T) {
	p := kneePoint{}
	for range 40 {
		p.requested, p.allocated = append(p.requested, 300), append(p.allocated, 400)
	}
	w, lo, hi, ok := kvWaste(p)
	if !ok || math.Abs(w-0.25) > 1e-12 || math.Abs(lo-0.25) > 1e-12 || math.Abs(hi-0.25) > 1e-12 {
		t.Errorf("waste %v [%v, %v] ok %v, want 0.25 exactly", w, lo, hi, ok)
	}
}
