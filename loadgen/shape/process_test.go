package shape

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// take returns the first n offsets of p (fewer if it ends).
func take(tb testing.TB, p Process, n int) []time.Duration {
	tb.Helper()
	var out []time.Duration
	for range n {
		at, ok := p.Next()
		if !ok {
			break
		}
		out = append(out, at)
	}
	return out
}

// must returns p, panicking on a construction error (test setup only).
func must(p Process, err error) Process {
	if err != nil {
		panic(err)
	}
	return p
}

func TestDeterministicProcesses(t *testing.T) {
	t.Parallel()
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	constant, err := Constant(4)
	if err != nil {
		t.Fatal(err)
	}
	// 10 -> 100 req/s over 10 s: Lambda(t) = 10t + 4.5t^2, so the k-th evenly spaced arrival
	// (Lambda = k) is at t = (-10 + sqrt(100 + 18k)) / 9: 0, 0.0995 s, 0.198 s ...
	ramp := must(Ramp(10, 100, 10*time.Second, 0, 1))
	rampWant := make([]time.Duration, 4)
	for k := range rampWant {
		rampWant[k] = time.Duration((-10 + math.Sqrt(100+18*float64(k))) / 9 * float64(time.Second))
	}
	tests := []struct {
		name string
		p    Process
		n    int
		want []time.Duration
	}{
		{"constant", constant, 5, ms(0, 250, 500, 750, 1000)},
		{"infinite", Infinite(), 3, ms(0, 0, 0)},
		{"ramp, even spacing", ramp, 4, rampWant},
		// 10/s for 1 s (arrivals at Lambda = 0..10), a pause, 20/s for 1 s (Lambda 11..30),
		// then the profile ends: 31 arrivals.
		{"steps with a pause", must(Steps([]float64{10, 0, 20}, []time.Duration{time.Second, time.Second, time.Second}, 0, 1)), 100,
			append(append(ms(0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000), ms(2050, 2100, 2150, 2200, 2250, 2300, 2350, 2400, 2450, 2500)...),
				ms(2550, 2600, 2650, 2700, 2750, 2800, 2850, 2900, 2950, 3000)...)},
		{"profile from zero starts one unit in", must(Steps([]float64{0, 4}, []time.Duration{time.Second, time.Second}, 0, 1)), 10,
			ms(1250, 1500, 1750, 2000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := take(t, tt.p, tt.n)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d arrivals %v, want %d %v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if (got[i] - tt.want[i]).Abs() > time.Microsecond {
					t.Fatalf("arrival %d at %v, want %v (all: %v)", i, got[i], tt.want[i], got)
				}
			}
		})
	}
}

// gapStats returns the mean and squared coefficient of variation of the gaps of n arrivals.
func gapStats(tb testing.TB, p Process, n int) (mean, cv2 float64) {
	tb.Helper()
	at := take(tb, p, n+1)
	var sum, sumSq float64
	for i := 1; i < len(at); i++ {
		g := (at[i] - at[i-1]).Seconds()
		if g < 0 {
			tb.Fatalf("arrival %d goes back in time", i)
		}
		sum += g
		sumSq += g * g
	}
	mean = sum / float64(n)
	variance := sumSq/float64(n) - mean*mean
	return mean, variance / (mean * mean)
}

func TestRenewalProcesses(t *testing.T) {
	t.Parallel()
	const n = 20000
	tests := []struct {
		name       string
		rate, k    float64
		wantString string
	}{
		{"poisson", 50, 1, "poisson(rate=50)"},
		{"bursty gamma", 50, 0.25, "gamma(rate=50,burstiness=0.25)"},
		{"regular gamma", 200, 4, "gamma(rate=200,burstiness=4)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := must(Gamma(tt.rate, tt.k, 42))
			if p.String() != tt.wantString {
				t.Errorf("String() = %q, want %q", p.String(), tt.wantString)
			}
			mean, cv2 := gapStats(t, p, n)
			// Gaps are Gamma(k, 1/(k rate)): mean 1/rate, CV^2 = 1/k. The sample mean's
			// standard error is (1/rate) sqrt(CV^2 / n); the sample CV^2's relative standard
			// error is about sqrt((kurtosis - 1) / n) with kurtosis 3 + 6/k, plus twice the
			// mean's relative error. Tolerances are 4.5 standard errors.
			wantMean, wantCV2 := 1/tt.rate, 1/tt.k
			if se := wantMean * math.Sqrt(wantCV2/n); math.Abs(mean-wantMean) > 4.5*se {
				t.Errorf("mean gap %.6f s, want %.6f +- %.6f", mean, wantMean, 4.5*se)
			}
			relSE := math.Hypot(math.Sqrt((2+6/tt.k)/n), 2*math.Sqrt(wantCV2/n))
			if math.Abs(cv2-wantCV2) > 4.5*relSE*wantCV2 {
				t.Errorf("CV^2 of the gaps %.3f, want %.3f +- %.3f", cv2, wantCV2, 4.5*relSE*wantCV2)
			}
		})
	}
}

func TestSeedsReproduce(t *testing.T) {
	t.Parallel()
	a := take(t, must(Poisson(10, 7)), 100)
	b := take(t, must(Poisson(10, 7)), 100)
	c := take(t, must(Poisson(10, 8)), 100)
	if !slices.Equal(a, b) {
		t.Error("the same seed gave different arrivals")
	}
	if slices.Equal(a, c) {
		t.Error("different seeds gave the same arrivals")
	}
}

func TestPoissonRamp(t *testing.T) {
	t.Parallel()
	// An inhomogeneous Poisson process with rate 10 -> 100 over 10 s: the count in [5 s, 10 s]
	// is Poisson with mean Lambda(10) - Lambda(5) = 550 - 162.5 = 387.5 (sd 19.7), and the
	// process ends at 10 s.
	p := must(Ramp(10, 100, 10*time.Second, 1, 3))
	at := take(t, p, 10000)
	if last := at[len(at)-1]; last > 10*time.Second {
		t.Fatalf("arrival at %v after the ramp ended", last)
	}
	second := 0
	for _, a := range at {
		if a >= 5*time.Second {
			second++
		}
	}
	if math.Abs(float64(second)-387.5) > 4.5*math.Sqrt(387.5) {
		t.Errorf("%d arrivals in the second half, want 387.5 +- %.0f", second, 4.5*math.Sqrt(387.5))
	}
	if math.Abs(float64(len(at))-551) > 4.5*math.Sqrt(550) {
		t.Errorf("%d arrivals in all, want about 551", len(at))
	}
}

func TestParseProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec       string
		rate, k    float64
		wantString string
		wantErr    string
	}{
		{"", 5, 1, "poisson(rate=5)", ""},
		{"poisson", 5, 0.5, "poisson(rate=5)", ""},
		{"gamma", 5, 0.5, "gamma(rate=5,burstiness=0.5)", ""},
		{"constant", 5, 1, "constant(rate=5)", ""},
		{"Constant", 5, 0.5, "constant(rate=5)", ""},
		{"Poisson", 5, 0.5, "poisson(rate=5)", ""},
		{"poisson", math.Inf(1), 1, "infinite", ""},
		{"ramp:1,50,60s", 0, 1, "profile(1->50@1m0s;poisson)", ""},
		{"step:5@10s,10@10s", 0, 0, "profile(5@10s,10@10s;even)", ""},
		{"ramp:1,50", 0, 1, "", "want ramp:FROM,TO,DURATION"},
		{"ramp:a,50,1s", 0, 1, "", "invalid syntax"},
		{"step:5", 0, 1, "", "want step:RATE@DURATION"},
		{"step:-5@1s", 0, 1, "", "not negative"},
		{"step:0@1s", 0, 1, "", "every rate is 0"},
		{"poisson", 0, 1, "", "positive, finite"},
		{"gamma", 5, 0, "", "burstiness must be a positive"},
		{"sawtooth", 5, 1, "", "unknown shape"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			p, err := ParseProcess(tt.spec, tt.rate, tt.k, 1)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.String() != tt.wantString {
				t.Errorf("String() = %q, want %q", p.String(), tt.wantString)
			}
		})
	}
}

// TestParseProcessSpec reads --shape values without a rate: a profile is checked as it is read,
// names in any case, and the spec is kept as given.
func TestParseProcessSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec, name string
		profile    []Segment
		process    string // at 5 req/s, burstiness 0.5
		err        string
	}{
		{spec: "", name: "", process: "poisson(rate=5)"},
		{spec: "Constant", name: ProcessConstant, process: "constant(rate=5)"},
		{spec: " POISSON ", name: ProcessPoisson, process: "poisson(rate=5)"},
		{spec: "Gamma", name: ProcessGamma, process: "gamma(rate=5,burstiness=0.5)"},
		{spec: "steps:5@1s,0@1s", name: ProcessStep, profile: []Segment{{5, 5, time.Second}, {0, 0, time.Second}},
			process: "profile(5@1s,0@1s;gamma(burstiness=0.5))"},
		{spec: "ramp:1,2,1m", name: ProcessRamp, profile: []Segment{{1, 2, time.Minute}}, process: "profile(1->2@1m0s;gamma(burstiness=0.5))"},
		{spec: "ramp:1,2,0s", err: "duration must be positive"},
		{spec: "step:0@1s,0@2s", err: "every rate is 0"},
		{spec: "step:nan@1s", err: "finite"},
		{spec: "step:", err: "want step:RATE@DURATION"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			s, err := ParseProcessSpec(tt.spec)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || s.Name != tt.name || !slices.Equal(s.Profile, tt.profile) || s.String() != tt.spec {
				t.Fatalf("got %+v, %v", s, err)
			}
			p, err := s.Process(5, 0.5, 1)
			if err != nil || p.String() != tt.process {
				t.Errorf("process %v, %v; want %s", p, err, tt.process)
			}
		})
	}
}

func TestVariates(t *testing.T) {
	t.Parallel()
	const n = 40000
	t.Run("gamma", func(t *testing.T) {
		for _, k := range []float64{0.3, 1, 2.5, 9} {
			r := newRand(1, uint64(k*10))
			var sum, sumSq float64
			for range n {
				x := gammaVariate(r, k)
				sum += x
				sumSq += x * x
			}
			mean, variance := sum/n, sumSq/n-(sum/n)*(sum/n)
			// Gamma(k, 1): mean k, variance k; the mean's standard error is sqrt(k/n), the
			// variance's about k sqrt((2 + 6/k)/n).
			if math.Abs(mean-k) > 4.5*math.Sqrt(k/n) {
				t.Errorf("k=%v: mean %.4f", k, mean)
			}
			if math.Abs(variance-k) > 4.5*k*math.Sqrt((2+6/k)/n) {
				t.Errorf("k=%v: variance %.4f", k, variance)
			}
		}
	})
	t.Run("poisson", func(t *testing.T) {
		for _, l := range []float64{0.5, 2.75, 30, 100} {
			r := newRand(2, uint64(l*10))
			var sum, sumSq float64
			for range n {
				x := float64(poissonVariate(r, l))
				sum += x
				sumSq += x * x
			}
			mean, variance := sum/n, sumSq/n-(sum/n)*(sum/n)
			// Poisson(l): mean = variance = l; sd of the sample variance ~ l sqrt((2 + 1/l)/n).
			if math.Abs(mean-l) > 4.5*math.Sqrt(l/n) {
				t.Errorf("lambda=%v: mean %.4f", l, mean)
			}
			if math.Abs(variance-l) > 4.5*l*math.Sqrt((2+1/l)/n) {
				t.Errorf("lambda=%v: variance %.4f", l, variance)
			}
		}
	})
	t.Run("zipf", func(t *testing.T) {
		z, err := newZipf(100, 1.2)
		if err != nil {
			t.Fatal(err)
		}
		// P(k) = k^-1.2 / H where H = sum over 1..100 of k^-1.2.
		h := 0.0
		for k := 1; k <= 100; k++ {
			h += math.Pow(float64(k), -1.2)
		}
		r := newRand(3, 3)
		counts := make([]int, 101)
		for range n {
			counts[z.rank(r)]++
		}
		for k := 1; k <= 10; k++ {
			p := math.Pow(float64(k), -1.2) / h
			if math.Abs(z.prob(k)-p) > 1e-12 {
				t.Errorf("prob(%d) = %v, want %v", k, z.prob(k), p)
			}
			// Binomial(n, p): standard error sqrt(n p (1-p)).
			if se := math.Sqrt(n * p * (1 - p)); math.Abs(float64(counts[k])-n*p) > 4.5*se {
				t.Errorf("rank %d drawn %d times, want %.0f +- %.0f", k, counts[k], n*p, 4.5*se)
			}
		}
		if counts[0] != 0 {
			t.Error("rank 0 drawn")
		}
		if _, err := newZipf(0, 1); err == nil {
			t.Error("zipf over no ranks")
		}
		if _, err := newZipf(10, 0); err == nil {
			t.Error("zipf with alpha 0")
		}
	})
}

func BenchmarkPoissonNext(b *testing.B) {
	p := must(Poisson(1000, 1))
	b.ReportAllocs()
	for b.Loop() {
		p.Next()
	}
}
