package stats

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func exponentialSamples(tb testing.TB, seed uint64, n int, mean time.Duration) []time.Duration {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 5))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(r.ExpFloat64() * float64(mean))
	}
	return out
}

// within fails unless got is within k standard errors of want.
func within(tb testing.TB, name string, got, want, se, k float64) {
	tb.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > k*se {
		tb.Errorf("%s = %.5g, want %.5g ± %.3g (%g SE of %.3g)", name, got, want, k*se, k, se)
	}
}

// TestFitTail checks each maximum-likelihood estimate against the parameter the samples were
// drawn with. Tolerances are 4 asymptotic standard errors (a 4-SE miss has probability 6e-5
// for a random seed): rate λ/√n; μ σ/√n and σ σ/√(2n); Pareto α α/√n, and x_m, the sample
// minimum, which exceeds x_m by more than t·x_m with probability (1+t)^(-nα) ≈ e^(-nαt), so by
// at most 10·x_m/(nα) except with probability e^-10.
func TestFitTail(t *testing.T) {
	t.Parallel()
	const n = 20000
	nf := float64(n)
	t.Run("exponential", func(t *testing.T) {
		t.Parallel()
		tail := FitTail(exponentialSamples(t, 1, n, 50*time.Millisecond))
		f, ok := tail.Fit(ModelExponential)
		if !ok {
			t.Fatal("no exponential fit")
		}
		within(t, "rate_per_ms", f.Param("rate_per_ms"), 0.02, 0.02/math.Sqrt(nf), 4)
		if tail.Best != ModelExponential {
			t.Errorf("best = %s, want exponential (AICs %v)", tail.Best, aics(tail))
		}
	})
	t.Run("lognormal", func(t *testing.T) {
		t.Parallel()
		const sigma = 0.5
		tail := FitTail(lognormalSamples(t, 2, n, 100*time.Millisecond, sigma))
		f, ok := tail.Fit(ModelLognormal)
		if !ok {
			t.Fatal("no lognormal fit")
		}
		within(t, "mu", f.Param("mu"), math.Log(100), sigma/math.Sqrt(nf), 4)
		within(t, "sigma", f.Param("sigma"), sigma, sigma/math.Sqrt(2*nf), 4)
		if tail.Best != ModelLognormal {
			t.Errorf("best = %s, want lognormal (AICs %v)", tail.Best, aics(tail))
		}
		// Its P99 is exp(μ + σ z99) = 319.9 ms; propagate the errors of μ and σ.
		truth := 100 * math.Exp(sigma*z99)
		se := truth * math.Hypot(sigma/math.Sqrt(nf), z99*sigma/math.Sqrt(2*nf))
		within(t, "lognormal P99 ms", durationToMS(f.P99), truth, se, 4)
	})
	t.Run("pareto", func(t *testing.T) {
		t.Parallel()
		const alpha = 1.5
		tail := FitTail(paretoSamples(t, 3, n, 10*time.Millisecond, alpha))
		f, ok := tail.Fit(ModelPareto)
		if !ok {
			t.Fatal("no pareto fit")
		}
		within(t, "alpha", f.Param("alpha"), alpha, alpha/math.Sqrt(nf), 4)
		if xm := f.Param("xm_ms"); xm < 10 || xm > 10*(1+10/(nf*alpha)) {
			t.Errorf("xm_ms = %g, want in [10, %g]", xm, 10*(1+10/(nf*alpha)))
		}
		if tail.Best != ModelPareto {
			t.Errorf("best = %s, want pareto (AICs %v)", tail.Best, aics(tail))
		}
		// P99 = x_m·100^(1/α); dP99/dα = -P99·ln(100)/α².
		truth := 10 * math.Pow(100, 1/alpha)
		se := truth * math.Log(100) / (alpha * alpha) * alpha / math.Sqrt(nf)
		within(t, "pareto P99 ms", durationToMS(f.P99), truth, se, 4)
		// The exponential with the same mean (30 ms) says 138 ms: it understates by about 36%.
		exp, _ := tail.Fit(ModelExponential)
		if e := exp.RelativeError(tail.EmpiricalP99); e > -0.2 {
			t.Errorf("exponential P99 error %+.2f, want well below zero", e)
		}
		if v := tail.Verdict(); !strings.Contains(v, "heavy tail") || !strings.Contains(v, "pareto") {
			t.Errorf("verdict %q", v)
		}
	})
}

// TestHill: on exact Pareto(10 ms, 1.5) samples the Hill estimator has no bias and standard
// error α/√k; it must land within 3 of them (a 0.3% chance to miss for a random seed), from
// the raw samples and from the histogram alike.
func TestHill(t *testing.T) {
	t.Parallel()
	const alpha = 1.5
	for _, n := range []int{10000, 100000} {
		samples := paretoSamples(t, uint64(n), n, 10*time.Millisecond, alpha)
		raw := FitTail(samples)
		if raw.Hill == nil {
			t.Fatalf("n=%d: no Hill estimate", n)
		}
		k := math.Ceil(math.Sqrt(float64(n)))
		if float64(raw.Hill.K) != k {
			t.Errorf("k = %d, want %g", raw.Hill.K, k)
		}
		within(t, "hill alpha (raw)", raw.Hill.Alpha, alpha, alpha/math.Sqrt(k), 3)
		within(t, "hill SE", raw.Hill.SE, alpha/math.Sqrt(k), alpha/math.Sqrt(k)*3/math.Sqrt(k), 1)

		h := NewHistogram()
		for _, s := range samples {
			h.Record(s)
		}
		ht := h.FitTail()
		if ht.Hill == nil {
			t.Fatalf("n=%d: no Hill estimate from the histogram", n)
		}
		within(t, "hill alpha (histogram)", ht.Hill.Alpha, alpha, alpha/math.Sqrt(k), 3)
		// Binning moves each value by under 0.1%, so the estimates agree far inside their SE.
		within(t, "hill histogram vs raw", ht.Hill.Alpha, raw.Hill.Alpha, raw.Hill.SE, 0.1)
		for _, f := range raw.Fits {
			hf, ok := ht.Fit(f.Model)
			if !ok {
				t.Fatalf("histogram lacks the %s fit", f.Model)
			}
			for i, p := range f.Params {
				// A fifth of the parameter's SE, or HDR's relative precision (10^-3) where
				// the SE is smaller (x_m's, which shrinks as 1/n).
				tol := math.Max(0.2*p.SE, 1e-3*math.Abs(p.Value))
				within(t, f.Model+" "+p.Name+" histogram vs raw", hf.Params[i].Value, p.Value, tol, 1)
			}
		}
		if ht.Best != raw.Best {
			t.Errorf("best: histogram %s, raw %s", ht.Best, raw.Best)
		}
	}
}

func TestFitQuantileMatchesP99(t *testing.T) {
	t.Parallel()
	tail := FitTail(lognormalSamples(t, 9, 1000, 20*time.Millisecond, 0.8))
	if len(tail.Fits) != 3 {
		t.Fatalf("%d fits", len(tail.Fits))
	}
	for _, f := range tail.Fits {
		q := f.Quantile(0.99)
		if d := q - f.P99; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: Quantile(0.99) %v, P99 %v", f.Model, q, f.P99)
		}
		if f.Quantile(0.5) >= q || f.Quantile(0) != 0 || f.Quantile(1) != 0 {
			t.Errorf("%s: quantile function not increasing or not bounded", f.Model)
		}
	}
}

func TestFitTailDegenerate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		samples   []time.Duration
		wantFits  int
		wantHill  bool
		wantWords string
	}{
		{"too few", exponentialSamples(t, 1, MinTailSamples-1, time.Millisecond), 0, false, "too few"},
		{"all equal", repeat(5*time.Millisecond, 500), 1, false, "exponential"},
		{"zeros are floored", append(repeat(0, 50), exponentialSamples(t, 2, 200, time.Millisecond)...), 3, true, "Best fit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tail := FitTail(tt.samples)
			if len(tail.Fits) != tt.wantFits || (tail.Hill != nil) != tt.wantHill {
				t.Errorf("fits %d hill %v, want %d %v", len(tail.Fits), tail.Hill != nil, tt.wantFits, tt.wantHill)
			}
			for _, f := range tail.Fits {
				if math.IsNaN(f.AIC) || math.IsInf(f.AIC, 0) {
					t.Errorf("%s: AIC %g", f.Model, f.AIC)
				}
			}
			if !strings.Contains(tail.Verdict(), tt.wantWords) {
				t.Errorf("verdict %q lacks %q", tail.Verdict(), tt.wantWords)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func aics(t Tail) map[string]float64 {
	m := map[string]float64{}
	for _, f := range t.Fits {
		m[f.Model] = f.AIC
	}
	return m
}
