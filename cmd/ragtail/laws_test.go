package main

import (
	"math/rand/v2"
	"testing"

	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/rag/latency"
)

// TestLawsAgree: the load generator's law of tool latencies (loadgen/shape) is its own, since
// loadgen never imports the service's packages, but it reads the kinds it shares with the
// service's latency laws (rag/latency) in the same syntax and means the same distribution:
// the same parsed text, the same quantiles, and, from one seeded source, the same draws.
func TestLawsAgree(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"none", "fixed:80ms", "uniform:20ms,200ms", "lognormal:80ms,0.6",
		"lognormal:80ms,0.6,300ms", "lognormal:2ms,1.2,1s"} {
		gen, err := shape.ParseLaw(text)
		if err != nil {
			t.Fatalf("shape.ParseLaw(%q): %v", text, err)
		}
		svc, err := latency.Parse(text)
		if err != nil {
			t.Fatalf("latency.Parse(%q): %v", text, err)
		}
		if gen.String() != svc.String() {
			t.Errorf("%q reads as %q in loadgen, %q in the service", text, gen, svc)
		}
		for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
			if g, s := gen.Quantile(q), svc.Quantile(q); g != s {
				t.Errorf("%s: quantile %g is %v in loadgen, %v in the service", text, q, g, s)
			}
		}
		rg, rs := rand.New(rand.NewPCG(7, 9)), rand.New(rand.NewPCG(7, 9))
		for i := range 1000 {
			if g, s := gen.Sample(rg), svc.Sample(rs); g != s {
				t.Fatalf("%s: draw %d is %v in loadgen, %v in the service", text, i, g, s)
			}
		}
	}
}
