package report

import (
	"math"
	"testing"
	"time"
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
