package stats

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// expSamples draws n exponential latencies scaled so that their distribution's P99 is p99.
func expSamples(rng *rand.Rand, n int, p99 time.Duration) []time.Duration {
	mean := float64(p99) / math.Log(100)
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(rng.ExpFloat64() * mean)
	}
	return out
}

func TestBootstrapKnee(t *testing.T) {
	xs := seq(10, 100, 10)
	tests := []struct {
		name      string
		curve     []Point
		wantFound bool    // most draws find a knee
		wantX     float64 // which the interval must cover, when found
	}{
		// Flat at 500 ms to 60 req/s, then 400 ms per req/s: the first steep segment is 60 -> 70.
		{"planted knee", hockey(xs, 500*time.Millisecond, 60, 400, 1e9), true, 70},
		// 20 ms per req/s throughout: below the 120 ms threshold everywhere, by about five
		// standard deviations of a step's bootstrap slope at the top of the curve.
		{"linear", hockey(xs, 100*time.Millisecond, 0, 20, 1e9), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			samples := make([][]time.Duration, len(tt.curve))
			for i, p := range tt.curve {
				samples[i] = expSamples(rng, 1000, p.P99)
			}
			pts := make([]Point, len(tt.curve))
			for i, p := range tt.curve {
				pts[i] = Point{X: p.X} // no achieved rate: the slope is on X
			}
			k, err := BootstrapKnee(pts, samples, DefaultKneeSlope, 0.95, 500, 7)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.wantFound {
				if k.Found != 0 || !math.IsInf(k.Lo, 1) || !math.IsInf(k.Hi, 1) {
					t.Errorf("linear curve: %d of %d draws found a knee, interval [%v, %v]; want none", k.Found, k.Draws, k.Lo, k.Hi)
				}
				return
			}
			if float64(k.Found) < 0.95*float64(k.Draws) || !(k.Lo <= tt.wantX && tt.wantX <= k.Hi) || math.IsInf(k.Hi, 1) {
				t.Errorf("found in %d of %d draws, interval [%v, %v]; want most, covering %v", k.Found, k.Draws, k.Lo, k.Hi, tt.wantX)
			}
			var sum float64
			for _, s := range k.Share {
				sum += s
			}
			if math.Abs(sum-float64(k.Found)/float64(k.Draws)) > 1e-12 {
				t.Errorf("shares sum to %v, want %v", sum, float64(k.Found)/float64(k.Draws))
			}
		})
	}
}

// TestBootstrapKneeBinomial checks the share of draws finding a knee against the binomial law.
// The second point has 100 samples, two of them 10 s and the rest 100 ms like every sample of
// the first: a resample's nearest-rank P99 (rank 99 of 100) is 10 s, and the slope steep,
// exactly when it holds two or more of the slow samples, whose count is Binomial(100, 0.02):
// P = 1 - 0.98^100 - 100 * 0.02 * 0.98^99 = 0.5967.
func TestBootstrapKneeBinomial(t *testing.T) {
	fast, slow := 100*time.Millisecond, 10*time.Second
	second := make([]time.Duration, 100)
	for i := range second {
		second[i] = fast
	}
	second[0], second[1] = slow, slow
	first := []time.Duration{fast, fast, fast}
	const draws = 4000
	k, err := BootstrapKnee([]Point{{X: 1}, {X: 2}}, [][]time.Duration{first, second}, DefaultKneeSlope, 0.95, draws, 11)
	if err != nil {
		t.Fatal(err)
	}
	want := 1 - math.Pow(0.98, 100) - 100*0.02*math.Pow(0.98, 99)
	se := math.Sqrt(want * (1 - want) / draws)
	if got := float64(k.Found) / draws; math.Abs(got-want) > 4*se {
		t.Errorf("share with a knee %.4f, want %.4f ± %.4f", got, want, 4*se)
	}
	if k.Share[1] != float64(k.Found)/draws || k.Share[0] != 0 {
		t.Errorf("shares %v: the knee can only be the second point", k.Share)
	}
	// About 60% of draws find the knee at 2, the rest none: the 2.5% quantile is 2, the 97.5% beyond.
	if k.Lo != 2 || !math.IsInf(k.Hi, 1) {
		t.Errorf("interval [%v, %v], want [2, +Inf]", k.Lo, k.Hi)
	}
}

func TestBootstrapKneeErrors(t *testing.T) {
	one := [][]time.Duration{{time.Second}}
	tests := []struct {
		name    string
		points  []Point
		samples [][]time.Duration
		draws   int
	}{
		{"mismatched", []Point{{X: 1}, {X: 2}}, one, 10},
		{"empty point", []Point{{X: 1}}, [][]time.Duration{nil}, 10},
		{"no draws", []Point{{X: 1}}, one, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := BootstrapKnee(tt.points, tt.samples, DefaultKneeSlope, 0.95, tt.draws, 1); err == nil {
				t.Error("no error")
			}
		})
	}
}

// TestRatioCIIndependent checks the interval of a mean of independent Bernoulli(0.25) samples
// (den = 1) against the normal approximation: p ± 1.96 sqrt(p(1-p)/n), and its coverage of
// the true 0.25 over 200 series at 95%.
func TestRatioCIIndependent(t *testing.T) {
	const n, p, series = 1000, 0.25, 200
	rng := rand.New(rand.NewPCG(3, 4))
	den := make([]float64, n)
	for i := range den {
		den[i] = 1
	}
	covered := 0
	for s := range series {
		num := make([]float64, n)
		for i := range num {
			if rng.Float64() < p {
				num[i] = 1
			}
		}
		r, lo, hi, ok := RatioCI(num, den, 5, 0.95, 1000, uint64(s))
		if !ok {
			t.Fatal("no interval")
		}
		if lo <= p && p <= hi {
			covered++
		}
		if s == 0 {
			half := 1.96 * math.Sqrt(r*(1-r)/n)
			if math.Abs((hi-lo)/2-half) > 0.15*half || !(lo <= r && r <= hi) {
				t.Errorf("ratio %.4f [%.4f, %.4f], want a half-width near %.4f", r, lo, hi, half)
			}
		}
	}
	// Binomial(200, 0.95) lies within [180, 198] with probability above 0.999.
	if covered < 180 || covered > 198 {
		t.Errorf("covered the true ratio in %d of %d series, want about 95%%", covered, series)
	}
}

// TestRatioCIBlocks checks that blocks widen the interval of a correlated series: runs of 20
// equal samples carry the information of n/20 independent ones, so with blocks of 20 the
// half-width is near 1.96 sqrt(p(1-p)/(n/20)), about sqrt(20) times the independent one.
func TestRatioCIBlocks(t *testing.T) {
	const n, run, p = 2000, 20, 0.25
	rng := rand.New(rand.NewPCG(5, 6))
	num, den := make([]float64, n), make([]float64, n)
	for i := 0; i < n; i += run {
		v := 0.0
		if rng.Float64() < p {
			v = 1
		}
		for j := i; j < i+run; j++ {
			num[j], den[j] = v, 1
		}
	}
	r, lo, hi, ok := RatioCI(num, den, run, 0.95, 2000, 9)
	if !ok {
		t.Fatal("no interval")
	}
	half := 1.96 * math.Sqrt(r*(1-r)/(n/run))
	if math.Abs((hi-lo)/2-half) > 0.2*half {
		t.Errorf("ratio %.4f [%.4f, %.4f]: half-width %.4f, want near %.4f", r, lo, hi, (hi-lo)/2, half)
	}
}

func TestRatioCIUndefined(t *testing.T) {
	tests := []struct {
		name     string
		num, den []float64
		block    int
	}{
		{"shorter than two blocks", []float64{1, 2, 3}, []float64{1, 1, 1}, 2},
		{"no denominator", []float64{0, 0, 0, 0}, []float64{0, 0, 0, 0}, 1},
		{"mismatched", []float64{1, 2}, []float64{1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, _, ok := RatioCI(tt.num, tt.den, tt.block, 0.95, 100, 1); ok {
				t.Error("ok, want undefined")
			}
		})
	}
}
