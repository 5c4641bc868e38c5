package latency_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

func TestParseRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"none", "none", "none"},
		{"empty", "", "none"},
		{"fixed", "fixed:5ms", "fixed:5ms"},
		{"fixed zero", "fixed:0s", "none"},
		{"uniform", "uniform:2ms,8ms", "uniform:2ms,8ms"},
		{"lognormal", "lognormal:5ms,0.5", "lognormal:5ms,0.5"},
		{"pareto capped", "pareto:10ms, 1.5, 2s", "pareto:10ms,1.5,2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := latency.Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := l.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			again, err := latency.Parse(l.String())
			if err != nil || again != l {
				t.Errorf("round trip: %+v, %v", again, err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"gauss:5ms", "fixed", "fixed:-5ms", "fixed:5", "uniform:8ms,2ms", "uniform:2ms",
		"lognormal:5ms", "lognormal:5ms,0", "pareto:10ms,-1", "pareto:10ms,abc", "pareto:10ms,1.5,x"} {
		t.Run(in, func(t *testing.T) {
			if _, err := latency.Parse(in); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Errorf("Parse(%q) error = %v, want ErrInvalidRequest", in, err)
			}
		})
	}
}

// TestLawSamplesMatchQuantiles checks each sampler against the analytic quantile function: the
// fraction of n samples at or below Quantile(p) is binomial(n, p)/n, with standard error
// sqrt(p(1-p)/n). With n = 200000 that is 0.00022 at p = 0.99; the test allows 5 standard
// errors, which a correct sampler exceeds with probability below 1e-6 (and, with a fixed seed,
// deterministically never).
func TestLawSamplesMatchQuantiles(t *testing.T) {
	t.Parallel()
	const n = 200000
	laws := []string{"uniform:2ms,8ms", "lognormal:5ms,0.5", "pareto:10ms,1.5", "pareto:1ms,3"}
	for _, s := range laws {
		t.Run(s, func(t *testing.T) {
			law, err := latency.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(7, 11))
			samples := make([]time.Duration, n)
			for i := range samples {
				samples[i] = law.Sample(r)
			}
			for _, p := range []float64{0.5, 0.9, 0.99} {
				q := law.Quantile(p)
				below := 0
				for _, x := range samples {
					if x <= q {
						below++
					}
				}
				se := math.Sqrt(p * (1 - p) / n)
				if got := float64(below) / n; math.Abs(got-p) > 5*se {
					t.Errorf("P(X <= Q(%v) = %v) = %.5f, want %v +- %.5f", p, q, got, p, 5*se)
				}
			}
		})
	}
}

func TestParetoQuantilesOfThePitfall(t *testing.T) {
	t.Parallel()
	// PITFALLS.md section 2: Pareto(x_m = 10 ms, alpha = 1.5) has median 15.87 ms, P95 73.68 ms,
	// P99 215.44 ms and P99.9 1000 ms.
	law := latency.Law{Kind: latency.LawPareto, Scale: 10 * time.Millisecond, Shape: 1.5}
	for _, tt := range []struct {
		p    float64
		want float64 // ms
	}{{0.5, 15.874}, {0.95, 73.681}, {0.99, 215.443}, {0.999, 1000}} {
		got := float64(law.Quantile(tt.p)) / 1e6
		if math.Abs(got-tt.want) > 0.01 {
			t.Errorf("Q(%v) = %.3f ms, want %.3f", tt.p, got, tt.want)
		}
	}
}

func TestLawCap(t *testing.T) {
	t.Parallel()
	law, _ := latency.Parse("pareto:10ms,0.5,50ms")
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		if d := law.Sample(r); d < 10*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("sample %v outside [10ms, 50ms]", d)
		}
	}
}

func TestDelayWaitCancels(t *testing.T) {
	t.Parallel()
	d := latency.NewDelay(latency.Fixed(time.Hour), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := d.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("wait not cut short by the context")
	}
}

func BenchmarkDelaySample(b *testing.B) {
	d := latency.NewDelay(latency.Law{Kind: latency.LawLognormal, Scale: 5 * time.Millisecond, Shape: 0.5}, 1)
	b.ReportAllocs()
	for b.Loop() {
		_ = d.Sample()
	}
}

// TestCheckLimit holds every law given as text to one rule: none may add more than Limit, and
// an uncapped heavy tail is judged by its P99.9. pareto:10ms,0.1 (P99.9 of 10^28 s) put 17 of
// 20 requests over 20 s, and fixed:1000000h was accepted as a fault's delay.
func TestCheckLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		law  string
		want string // "" accepts; else in the error
	}{
		{law: "none"},
		{law: "fixed:1m"},
		{law: "fixed:1000000h", want: "the value 1000000h0m0s is above the 1m0s limit"},
		{law: "uniform:1ms,1m"},
		{law: "uniform:1ms,61s", want: "the maximum 1m1s is above the 1m0s limit"},
		{law: "lognormal:5ms,0.5"},
		{law: "lognormal:1s,1.5", want: "P99.9 is 1m43"},
		{law: "lognormal:1s,1.5,1m"},
		{law: "lognormal:5ms,0.5,2m", want: "the cap 2m0s is above the 1m0s limit"},
		{law: "pareto:10ms,1.5"},
		{law: "pareto:10ms,0.1", want: "P99.9 is 1e+28s, above the 1m0s limit of a simulated latency: give it a cap of at most 1m0s (pareto:10ms,0.1,1m0s)"},
		{law: "pareto:10ms,0.1,1m"},
		{law: "pareto:2m,3", want: "the scale 2m0s is above"},
	}
	for _, tt := range tests {
		t.Run(tt.law, func(t *testing.T) {
			t.Parallel()
			law, err := latency.Parse(tt.law)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Parse(%q) = %v", tt.law, err)
				}
				if err := law.CheckLimit(latency.Limit); err != nil {
					t.Fatalf("CheckLimit = %v", err)
				}
				return
			}
			if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%q) = %v; want an error containing %q", tt.law, err, tt.want)
			}
			var unchecked latency.Law
			if err := unchecked.UnmarshalText([]byte(tt.law)); err != nil {
				t.Fatalf("UnmarshalText: %v", err)
			}
			if err := unchecked.CheckLimit(latency.Limit); err == nil || err.Error() != mustErr(latency.Parse(tt.law)).Error() {
				t.Errorf("CheckLimit = %v, Parse said otherwise", err)
			}
		})
	}
}

func mustErr(_ latency.Law, err error) error { return err }

// TestDelayStaysWithinLimit draws from a law built in Go, which no CheckLimit saw: Delay still
// never waits past Limit.
func TestDelayStaysWithinLimit(t *testing.T) {
	t.Parallel()
	law := latency.Law{Kind: latency.LawPareto, Scale: 10 * time.Second, Shape: 3} // P99.9 of 100 s
	d := latency.NewDelay(law, 7)
	cut := 0
	for range 1000 {
		if v := d.Sample(); v > latency.Limit {
			t.Fatalf("sample %v above the limit", v)
		} else if v == latency.Limit {
			cut++
		}
	}
	// P(X > 60 s) = (10/60)^3 = 0.46%: about 5 of 1000.
	if cut == 0 {
		t.Fatal("no draw reached the limit, so the test tests nothing")
	}
}
