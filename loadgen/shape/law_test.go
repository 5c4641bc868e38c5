package shape

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParseLaw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "", want: "none"},
		{in: "none", want: "none"},
		{in: "fixed:80ms", want: "fixed:80ms"},
		{in: "uniform:20ms, 200ms", want: "uniform:20ms,200ms"},
		{in: "exponential:80ms", want: "exponential:80ms"},
		{in: "exponential:80ms,1s", want: "exponential:80ms,1s"},
		{in: "lognormal:80ms,0.6", want: "lognormal:80ms,0.6"},
		{in: "lognormal:80ms,0.6,2s", want: "lognormal:80ms,0.6,2s"},
		{in: "fixed:-1ms", wantErr: "non-negative duration"},
		{in: "uniform:2s,1s", wantErr: "below min"},
		{in: "lognormal:80ms", wantErr: "want lognormal:MEDIAN,SIGMA[,CAP]"},
		{in: "lognormal:80ms,0", wantErr: "sigma"},
		{in: "lognormal:1s,5", wantErr: "give it a cap"},
		{in: "fixed:11m", wantErr: "above the 10m0s limit"},
		{in: "pareto:1ms,2", wantErr: "unknown kind"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			l, err := ParseLaw(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseLaw(%q) = %v, %v; want an error with %q", tc.in, l, err, tc.wantErr)
				}
				return
			}
			if err != nil || l.String() != tc.want {
				t.Fatalf("ParseLaw(%q) = %v, %v; want %s", tc.in, l, err, tc.want)
			}
		})
	}
}

// TestLawQuantiles draws n samples of each law with a fixed seed and checks the empirical CDF
// at the analytic quantiles: the share of samples at or below Quantile(q) is binomial(n, q)/n,
// so it lies within 4.5 standard errors sqrt(q(1-q)/n) of q (a chance under 1e-5 to fail by
// sampling alone). A capped law never draws past its cap.
func TestLawQuantiles(t *testing.T) {
	t.Parallel()
	const n = 20000
	for _, s := range []string{"lognormal:80ms,0.6", "exponential:80ms", "uniform:20ms,200ms"} {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			l, err := ParseLaw(s)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			draws := make([]time.Duration, n)
			for i := range draws {
				draws[i] = l.Sample(r)
			}
			for _, q := range []float64{0.1, 0.5, 0.9, 0.99} {
				at := l.Quantile(q)
				below := 0
				for _, d := range draws {
					if d <= at {
						below++
					}
				}
				share, se := float64(below)/n, math.Sqrt(q*(1-q)/n)
				if math.Abs(share-q) > 4.5*se {
					t.Errorf("%s: %.4f of draws at or below the analytic P%g %v, want %g ± %.4f", s, share, 100*q, at, q, 4.5*se)
				}
			}
		})
	}
	// The lognormal's median is its scale, and its P90 is scale·exp(sigma·z_0.9).
	l, _ := ParseLaw("lognormal:80ms,0.6")
	if got := l.Quantile(0.5); got != 80*time.Millisecond {
		t.Errorf("median %v, want 80ms", got)
	}
	if got, want := float64(l.Quantile(0.9)), 80e6*math.Exp(0.6*1.2815515655446004); math.Abs(got-want) > 1 {
		t.Errorf("P90 %v ns, want %v ns", got, want)
	}
	capped, _ := ParseLaw("lognormal:80ms,0.6,100ms")
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		if d := capped.Sample(r); d > 100*time.Millisecond || d < 0 {
			t.Fatalf("capped draw %v past the cap", d)
		}
	}
}

// FuzzParseLaw checks that a law read is written back as it reads, and draws within its cap
// and MaxLaw's bound on a cap.
func FuzzParseLaw(f *testing.F) {
	for _, s := range []string{"lognormal:80ms,0.6", "exponential:1s,2s", "uniform:1ms,2ms", "fixed:0", "none", "lognormal:1h,9,1s"} {
		f.Add(s)
	}
	r := rand.New(rand.NewPCG(5, 6))
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLaw(s)
		if err != nil {
			return
		}
		again, err := ParseLaw(l.String())
		if err != nil || again != l {
			t.Fatalf("%q read as %v, which reads back as %v, %v", s, l, again, err)
		}
		for range 10 {
			if d := l.Sample(r); d < 0 || (l.Max > 0 && d > l.Max) {
				t.Fatalf("%v drew %v", l, d)
			}
		}
	})
}
