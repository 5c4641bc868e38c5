package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// bruteBinomialCDF sums the pmf from lgamma, term by term: slow, but independent of the
// recurrence under test.
func bruteBinomialCDF(k, n int64, p float64) float64 {
	lgn, _ := math.Lgamma(float64(n + 1))
	var s float64
	for j := int64(0); j <= k; j++ {
		a, _ := math.Lgamma(float64(j + 1))
		b, _ := math.Lgamma(float64(n - j + 1))
		s += math.Exp(lgn - a - b + float64(j)*math.Log(p) + float64(n-j)*math.Log1p(-p))
	}
	return s
}

func TestBinomialCDF(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n int64
		p float64
	}{{1, 0.5}, {10, 0.5}, {50, 0.9}, {400, 0.99}, {1000, 0.999}, {2000, 0.01}, {3000, 0.5}}
	for _, tt := range tests {
		for _, k := range []int64{0, tt.n / 4, tt.n / 2, int64(float64(tt.n) * tt.p), tt.n - 2, tt.n - 1} {
			if k < 0 || k >= tt.n {
				continue
			}
			got, want := BinomialCDF(k, tt.n, tt.p), bruteBinomialCDF(k, tt.n, tt.p)
			// The brute sum carries lgamma's relative error (~1e-13 at n = 3000) into each term.
			if math.Abs(got-want) > 1e-10 {
				t.Errorf("F(%d; %d, %g) = %.15g, want %.15g", k, tt.n, tt.p, got, want)
			}
		}
	}
	if BinomialCDF(-1, 10, 0.5) != 0 || BinomialCDF(10, 10, 0.5) != 1 {
		t.Error("CDF outside the support")
	}
}

func TestQuantileRanksThreshold(t *testing.T) {
	t.Parallel()
	// The upper rank u <= n needs F(n-1) = 1 - q^n >= 1 - tail, i.e. n >= ln(tail)/ln(q); the
	// lower rank l >= 1 needs F(0) = (1-q)^n <= tail, which holds long before for q >= 0.5.
	for _, q := range []float64{0.9, 0.95, 0.99, 0.999} {
		need := int64(math.Ceil(math.Log(0.025) / math.Log(q)))
		if _, _, ok := QuantileRanks(need-1, q, 0.95); ok {
			t.Errorf("q=%g: interval from %d samples, need %d", q, need-1, need)
		}
		l, u, ok := QuantileRanks(need, q, 0.95)
		if !ok {
			t.Errorf("q=%g: no interval from %d samples", q, need)
			continue
		}
		if c := QuantileCoverage(need, l, u, q); c < 0.95 {
			t.Errorf("q=%g n=%d: coverage %g < 0.95", q, need, c)
		}
	}
	for _, n := range []int64{10, 100, 1000, 100000, 10000000} {
		for _, q := range []float64{0.5, 0.9, 0.99} {
			l, u, ok := QuantileRanks(n, q, 0.95)
			if !ok {
				continue
			}
			k := NearestRank(n, q)
			if l >= u || l > k || u < k {
				t.Errorf("n=%d q=%g: ranks l=%d k=%d u=%d", n, q, l, k, u)
			}
			// Equal tails: each side misses by at most 2.5%; the whole by at most 5%.
			w := newBinomialWindow(n, q)
			if lo, hi := w.cdf(l-1), 1-w.cdf(u-1); lo > 0.025 || hi > 0.025 {
				t.Errorf("n=%d q=%g: tails %g, %g", n, q, lo, hi)
			}
		}
	}
}

func TestNearestRank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n    int64
		q    float64
		want int64
	}{{100, 0.99, 99}, {100, 0.5, 50}, {101, 0.5, 51}, {1000, 0.999, 999}, {10, 0, 1}, {10, 1, 10}, {0, 0.5, 0}}
	for _, tt := range tests {
		if got := NearestRank(tt.n, tt.q); got != tt.want {
			t.Errorf("NearestRank(%d, %g) = %d, want %d", tt.n, tt.q, got, tt.want)
		}
	}
}

// TestQuantileCICoverage draws many samples from an exponential distribution and counts how
// often the interval holds the true quantile -ln(1-q). The exact coverage c of the chosen ranks
// is known (>= 95%); the simulated rate over R repetitions is Binomial(R, c)/R with standard
// deviation sqrt(c(1-c)/R), about 0.0049 at R = 2000, and must lie within 4 of them.
func TestQuantileCICoverage(t *testing.T) {
	t.Parallel()
	const reps = 2000
	tests := []struct {
		name string
		n    int
		q    float64
	}{{"median n=101", 101, 0.5}, {"p90 n=400", 400, 0.9}, {"p99 n=1000", 1000, 0.99}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(10+i), 7))
			truth := time.Duration(-math.Log1p(-tt.q) * float64(time.Second))
			l, u, ok := QuantileRanks(int64(tt.n), tt.q, 0.95)
			if !ok {
				t.Fatal("no interval")
			}
			c := QuantileCoverage(int64(tt.n), l, u, tt.q)
			if c < 0.95 {
				t.Fatalf("exact coverage %g < 0.95", c)
			}
			sample := make([]time.Duration, tt.n)
			hits := 0
			for range reps {
				for j := range sample {
					sample[j] = time.Duration(r.ExpFloat64() * float64(time.Second))
				}
				slices.Sort(sample)
				_, lo, hi, ok := QuantileCI(sample, tt.q, 0.95)
				if !ok {
					t.Fatal("no interval")
				}
				if lo <= truth && truth <= hi {
					hits++
				}
			}
			got := float64(hits) / reps
			sd := math.Sqrt(c * (1 - c) / reps)
			if math.Abs(got-c) > 4*sd {
				t.Errorf("simulated coverage %.4f, exact %.4f ± %.4f", got, c, 4*sd)
			}
		})
	}
}

// paretoSamples draws n values of Pareto(xm, alpha) by inversion: xm · U^(-1/α), U in (0, 1].
func paretoSamples(tb testing.TB, seed uint64, n int, xm time.Duration, alpha float64) []time.Duration {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(float64(xm) * math.Pow(1-r.Float64(), -1/alpha))
	}
	return out
}

// TestParetoP99Interval is the acceptance check of PITFALLS.md 2: Pareto(10 ms, 1.5), whose P99
// is 10 ms · 100^(1/1.5) = 215.443 ms, analysed from a large sample, raw and through the
// histogram.
func TestParetoP99Interval(t *testing.T) {
	t.Parallel()
	truth := time.Duration(10 * math.Pow(100, 1/1.5) * float64(time.Millisecond))
	samples := paretoSamples(t, 42, 100000, 10*time.Millisecond, 1.5)
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	est, lo, hi, ok := QuantileCI(sorted, 0.99, 0.95)
	if !ok || lo > truth || hi < truth {
		t.Errorf("raw: P99 %v, 95%% CI [%v, %v] does not hold %v", est, lo, hi, truth)
	}
	h := NewHistogram()
	for _, s := range samples {
		h.Record(s)
	}
	hest, hlo, hhi, ok := h.QuantileCI(0.99, 0.95)
	if !ok || hlo > truth || hhi < truth || hest < hlo || hest > hhi {
		t.Errorf("histogram: P99 %v, 95%% CI [%v, %v] does not hold %v", hest, hlo, hhi, truth)
	}
	for _, pair := range [][2]time.Duration{{est, hest}, {lo, hlo}, {hi, hhi}} {
		if pair[1] < pair[0] || pair[1] > pair[0]+hdrSlack(pair[0]) {
			t.Errorf("histogram %v vs raw %v: beyond HDR precision", pair[1], pair[0])
		}
	}
}

func TestQuantileCITooFew(t *testing.T) {
	t.Parallel()
	sample := paretoSamples(t, 1, 50, time.Millisecond, 2)
	slices.Sort(sample)
	est, lo, hi, ok := QuantileCI(sample, 0.99, 0.95)
	if ok || lo != 0 || hi != 0 || est != sample[49] {
		t.Errorf("50 samples: est %v ci [%v %v] ok %v", est, lo, hi, ok)
	}
	if _, _, _, ok := QuantileCI(nil, 0.5, 0.95); ok {
		t.Error("interval from no samples")
	}
}
