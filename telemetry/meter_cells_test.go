package telemetry

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// seededMeterProvider returns a provider of ragtail's whose exemplar sampling draws from a fixed
// seed, so that the statistical tests below are reproducible.
func seededMeterProvider(seed uint64) *MeterProvider {
	p := newMeterProvider(true, time.Now)
	p.filter = func(context.Context) bool { return true } // every measurement offered
	p.rng = rand.New(rand.NewPCG(seed, seed+1))
	return p
}

// TestSeriesCellsAddUp records measurements into several cells of one histogram series and
// requires the collected point to be their aggregate: count, sum, minimum, maximum and buckets.
func TestSeriesCellsAddUp(t *testing.T) {
	p := seededMeterProvider(1)
	a := newAgg[float64](p, instID{name: "h", kind: kindHistogram, float: true}, []float64{1, 10})
	a.cells = 4
	s := a.series(*attribute.EmptySet())
	values := []float64{0.5, 3, 12, -2, 10, 7.25, 1, 40}
	for i, v := range values {
		s.recordIn(context.Background(), a, v, i%a.cells)
	}
	m, ok := a.collect(time.Now())
	if !ok {
		t.Fatal("no data")
	}
	dp := m.Data.(metricdata.Histogram[float64]).DataPoints[0]
	var sum float64
	for _, v := range values {
		sum += v
	}
	lo, hi := slices.Min(values), slices.Max(values)
	if dp.Count != uint64(len(values)) || dp.Sum != sum {
		t.Errorf("count %d, sum %v; want %d, %v", dp.Count, dp.Sum, len(values), sum)
	}
	if v, _ := dp.Min.Value(); v != lo {
		t.Errorf("min %v, want %v", v, lo)
	}
	if v, _ := dp.Max.Value(); v != hi {
		t.Errorf("max %v, want %v", v, hi)
	}
	if want := []uint64{3, 3, 2}; !slices.Equal(dp.BucketCounts, want) { // <=1, (1,10], >10
		t.Errorf("buckets %v, want %v", dp.BucketCounts, want)
	}
	if len(dp.Exemplars) != 3 {
		t.Errorf("%d exemplars, want one per bucket", len(dp.Exemplars))
	}
}

// binomialBound returns how far a Binomial(n, q) count may stray from its mean before a test
// calls it wrong: six standard deviations, which a correct sampler exceeds with a probability
// of about 2e-9 per count (normal approximation; every count below has a mean of 100 or more).
func binomialBound(n int, q float64) float64 { return 6 * math.Sqrt(float64(n)*q*(1-q)) }

// TestExemplarsUniformAcrossCells checks that the exemplars collected from a series' cells are
// a uniform sample of all its measurements since the last collection, as one reservoir would
// keep: over many collections, each measurement is kept with probability k/N (a sum's reservoir
// of k) or 1/N (a histogram bucket's), however unevenly the measurements were spread over the
// cells; and that exemplars of an earlier collection (stale) never displace fresh ones.
func TestExemplarsUniformAcrossCells(t *testing.T) {
	const rounds = 5000

	t.Run("sum", func(t *testing.T) {
		p := seededMeterProvider(2)
		a := newAgg[int64](p, instID{name: "c", kind: kindCounter}, nil)
		a.k, a.cells = 4, 4
		s := a.series(*attribute.EmptySet())
		// 20 measurements, valued 1 to 20, spread 12, 5 and 3 over three cells; a fourth cell
		// has measurements (valued 1000 and up) only before the first collection counted.
		per := []int{12, 5, 3}
		const n = 20
		for v := range int64(6) {
			s.recordIn(context.Background(), a, 1000+v, 3)
		}
		a.collect(time.Now())
		kept := make(map[int64]int)
		for range rounds {
			v := int64(1)
			for c, m := range per {
				for range m {
					s.recordIn(context.Background(), a, v, c)
					v++
				}
			}
			m, _ := a.collect(time.Now())
			ex := m.Data.(metricdata.Sum[int64]).DataPoints[0].Exemplars
			if len(ex) != a.k {
				t.Fatalf("%d exemplars, want %d", len(ex), a.k)
			}
			seen := make(map[int64]bool)
			for _, e := range ex {
				if e.Value > n {
					t.Fatalf("a stale exemplar (%d) displaced a fresh one", e.Value)
				}
				if seen[e.Value] {
					t.Fatalf("measurement %d kept twice", e.Value)
				}
				seen[e.Value] = true
				kept[e.Value]++
			}
		}
		q := float64(a.k) / n
		bound := binomialBound(rounds, q)
		for v := int64(1); v <= n; v++ {
			if d := math.Abs(float64(kept[v]) - rounds*q); d > bound {
				t.Errorf("measurement %d kept %d times in %d collections, want %.0f ± %.0f", v, kept[v], rounds, rounds*q, bound)
			}
		}
	})

	t.Run("histogram bucket", func(t *testing.T) {
		p := seededMeterProvider(3)
		a := newAgg[float64](p, instID{name: "h", kind: kindHistogram, float: true}, []float64{100})
		a.cells = 4
		s := a.series(*attribute.EmptySet())
		// 40 measurements in the first bucket, spread 30 and 10 over two cells; the third
		// cell has one in the second bucket, so that its bucket has an exemplar of its own.
		per := []int{30, 10}
		const n = 40
		kept := make(map[float64]int)
		for range rounds {
			v := 1.0
			for c, m := range per {
				for range m {
					s.recordIn(context.Background(), a, v, c)
					v++
				}
			}
			s.recordIn(context.Background(), a, 500, 2)
			m, _ := a.collect(time.Now())
			ex := m.Data.(metricdata.Histogram[float64]).DataPoints[0].Exemplars
			if len(ex) != 2 || ex[1].Value != 500 {
				t.Fatalf("exemplars %v, want one of the first bucket and 500", ex)
			}
			kept[ex[0].Value]++
		}
		q := 1.0 / n
		bound := binomialBound(rounds, q)
		for v := 1.0; v <= n; v++ {
			if d := math.Abs(float64(kept[v]) - rounds*q); d > bound {
				t.Errorf("measurement %v kept %d times in %d collections, want %.0f ± %.0f", v, kept[v], rounds, rounds*q, bound)
			}
		}
	})
}

// exemplarValues returns the values of the exemplars of m's first point, a sum's or a histogram's.
func exemplarValues[N int64 | float64](m metricdata.Metrics) []N {
	var ex []metricdata.Exemplar[N]
	switch d := m.Data.(type) {
	case metricdata.Sum[N]:
		ex = d.DataPoints[0].Exemplars
	case metricdata.Histogram[N]:
		ex = d.DataPoints[0].Exemplars
	}
	out := make([]N, len(ex))
	for i, e := range ex {
		out[i] = e.Value
	}
	return out
}

// TestExemplarsKeptAcrossCollections checks that a series' exemplars carry over from one
// collection to the next as they do in the SDK's one reservoir, whichever cells the measurements
// went to: the new ones take the first slots, the last collection's survive in the slots after
// them, and with nothing new the last collection's are reported again.
func TestExemplarsKeptAcrossCollections(t *testing.T) {
	p := seededMeterProvider(4)
	a := newAgg[int64](p, instID{name: "c", kind: kindCounter}, nil)
	a.k, a.cells = 4, 4
	s := a.series(*attribute.EmptySet())
	values := func() []int64 { m, _ := a.collect(time.Now()); return exemplarValues[int64](m) }
	for v := range int64(3) {
		s.recordIn(context.Background(), a, 1+v, 0)
	}
	if got := values(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("first collection: %v, want [1 2 3]", got)
	}
	s.recordIn(context.Background(), a, 10, 2) // another cell: it takes the first slot
	if got := values(); !slices.Equal(got, []int64{10, 2, 3}) {
		t.Errorf("second collection: %v, want [10 2 3]", got)
	}
	if got := values(); !slices.Equal(got, []int64{10, 2, 3}) {
		t.Errorf("with nothing new: %v, want the last ones again, [10 2 3]", got)
	}
	h := newAgg[float64](p, instID{name: "h", kind: kindHistogram, float: true}, []float64{100})
	h.cells = 4
	hs := h.series(*attribute.EmptySet())
	bucket := func() []float64 { m, _ := h.collect(time.Now()); return exemplarValues[float64](m) }
	hs.recordIn(context.Background(), h, 1, 0)
	bucket()
	hs.recordIn(context.Background(), h, 2, 1) // the same bucket, another cell
	if got := bucket(); !slices.Equal(got, []float64{2}) {
		t.Errorf("histogram bucket: %v, want the new measurement alone, [2]", got)
	}
}
