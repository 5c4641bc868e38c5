package report

import (
	"math"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// TestCostAndEnergy: the cost is the price of the GPUs over the measured window, charged whole
// to each unit; the energy is the energy counter's increase over the scrapes, summed over
// devices, or the power gauge integrated when there is no counter.
func TestCostAndEnergy(t *testing.T) {
	t.Parallel()
	b := &Bench{Duration: 90 * time.Minute, Completed: 300, InputTokens: 2_000_000, OutputTokens: 500_000,
		Pricing: Pricing{USDPerGPUHour: 2.5, GPUs: 2}}
	c, ok := b.Cost()
	if !ok || c.USD != 7.5 || c.PerRequest != 0.025 || c.PerMillionInput != 3.75 || c.PerMillionOutput != 15 {
		t.Errorf("cost %+v, %v: want $7.5, $0.025 per request, $3.75 and $15 per million", c, ok)
	}
	if _, ok := (&Bench{Duration: time.Minute, Pricing: Pricing{GPUs: 1}}).Cost(); ok {
		t.Error("priced without a price")
	}
	for _, p := range []Pricing{{USDPerGPUHour: -1, GPUs: 1}, {USDPerGPUHour: math.NaN(), GPUs: 1}, {USDPerGPUHour: 1, GPUs: MaxGPUs + 1}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}

	// Two devices' energy counters (mJ), over 10 s of scrapes: 3000 J and 1000 J.
	b.ServerMetrics = &ServerMetrics{Interval: time.Second, Series: []ServerSeries{
		{Name: EnergyMetric, Labels: map[string]string{"gpu": "0"}, Points: [][2]float64{{0, 5e6}, {5, 6e6}, {10, 8e6}}},
		{Name: EnergyMetric, Labels: map[string]string{"gpu": "1"}, Points: [][2]float64{{0, 1e6}, {10, 2e6}}},
		{Name: PowerMetric, Labels: map[string]string{"gpu": "0"}, Points: [][2]float64{{0, 100}, {10, 100}}},
	}}
	e, ok := b.Energy()
	if !ok || e.Source != EnergyMetric || e.Joules != 4000 || e.Seconds != 10 || e.MeanWatts != 400 || e.PerOutputToken != 4000.0/500_000 {
		t.Errorf("energy %+v, %v: want 4000 J over 10 s from the counters", e, ok)
	}
	// Power alone: a ramp from 100 to 300 W over 4 s and flat 300 W for 2 s: 800 + 600 J.
	b.ServerMetrics.Series = []ServerSeries{{Name: PowerMetric, Points: [][2]float64{{1, 100}, {3, 200}, {5, 300}, {7, 300}, {8, math.NaN()}}}}
	e, ok = b.Energy()
	if !ok || e.Source != PowerMetric || math.Abs(e.Joules-1400) > 1e-9 || e.Seconds != 6 {
		t.Errorf("energy %+v, %v: want 1400 J over 6 s from the power gauge", e, ok)
	}
	b.ServerMetrics.Series = []ServerSeries{{Name: PowerMetric, Points: [][2]float64{{1, 100}}}}
	if e, ok := b.Energy(); ok {
		t.Errorf("energy from one scrape: %+v", e)
	}
}

// TestBracketSLO: the interval of the max load under an SLO runs from the highest load whose
// whole percentile interval meets the limit to the lowest whose whole interval misses it; a
// point that straddles the limit, or has too few samples for an interval, bounds nothing. On the
// rate axis the low side is an achieved rate and the high side an offered one.
func TestBracketSLO(t *testing.T) {
	t.Parallel()
	slo := PercentileSLO{Metric: MetricE2EL, Percentile: 50, Limit: 100 * time.Millisecond}
	// point makes a bench offered rate, achieving achieved, whose e2el samples spread evenly
	// around center (±10 ms), n of them.
	point := func(rate, achieved float64, users, n int, center time.Duration) *Bench {
		h := stats.NewHistogram()
		for i := range n {
			h.Record(center - 10*time.Millisecond + time.Duration(i)*20*time.Millisecond/time.Duration(n))
		}
		b := &Bench{RequestThroughput: achieved, Histograms: map[string]*stats.Histogram{MetricE2EL: h}}
		b.Config.RequestRate, b.Config.Concurrency = rate, users
		return b
	}
	benches := []*Bench{
		point(40, 39, 4, 400, 120*time.Millisecond),   // misses beyond sampling error
		point(10, 9.9, 1, 400, 50*time.Millisecond),   // meets beyond it
		point(20, 19.5, 2, 400, 100*time.Millisecond), // straddles: bounds nothing
		point(30, 29, 3, 3, 20*time.Millisecond),      // too few samples: bounds nothing
	}
	if got, want := BracketSLO(slo, AxisRate, benches), (SLOInterval{Lo: 9.9, Hi: 40, HasLo: true, HasHi: true}); got != want {
		t.Errorf("rate axis: %+v, want %+v", got, want)
	}
	if got, want := BracketSLO(slo, AxisConcurrency, benches), (SLOInterval{Lo: 1, Hi: 4, HasLo: true, HasHi: true}); got != want {
		t.Errorf("concurrency axis: %+v, want %+v", got, want)
	}
	// A point that surely meets the SLO above one that surely misses it does not raise the low side.
	benches = append(benches, point(50, 48, 5, 400, 50*time.Millisecond))
	if got := BracketSLO(slo, AxisRate, benches); got.Lo != 9.9 || got.Hi != 40 {
		t.Errorf("with a meeting point past a missing one: %+v", got)
	}
	if got := BracketSLO(slo, AxisRate, benches[2:4]); got.HasLo || got.HasHi {
		t.Errorf("straddling and small points bound nothing: %+v", got)
	}
}
