package report

import (
	"fmt"
	"math"
)

// Pricing is what the target's hardware costs: GPUs at USDPerGPUHour each, for as long as the
// run's measured window lasts. The zero Pricing prices nothing.
type Pricing struct {
	USDPerGPUHour float64
	GPUs          int
}

// MaxGPUs and MaxUSDPerGPUHour bound a Pricing.
const (
	MaxGPUs          = 1 << 16
	MaxUSDPerGPUHour = 1e4
)

// Validate reports what is wrong with p.
func (p Pricing) Validate() error {
	switch {
	case math.IsNaN(p.USDPerGPUHour) || p.USDPerGPUHour < 0 || p.USDPerGPUHour > MaxUSDPerGPUHour:
		return fmt.Errorf("GPU cost per hour must lie within 0 and %g USD, got %g", MaxUSDPerGPUHour, p.USDPerGPUHour)
	case p.GPUs < 0 || p.GPUs > MaxGPUs:
		return fmt.Errorf("GPUs must lie within 1 and %d, got %d", MaxGPUs, p.GPUs)
	}
	return nil
}

// priced reports whether p prices anything.
func (p Pricing) priced() bool { return p.USDPerGPUHour > 0 && p.GPUs > 0 }

// Cost is what a run cost on its Pricing, over its measured window: the whole cost, and that
// cost divided by the completed requests, by the million prompt tokens and by the million output
// tokens of the completed requests. Each per-unit figure charges the whole cost to that unit, as
// a price list does; they do not add up. A per-unit figure is NaN when there is no unit.
type Cost struct {
	USD, PerRequest, PerMillionInput, PerMillionOutput float64
}

// Cost returns the run's cost on its pricing; ok is false when the bench is not priced.
func (b *Bench) Cost() (c Cost, ok bool) {
	if !b.Pricing.priced() || b.Duration <= 0 {
		return Cost{}, false
	}
	c.USD = b.Pricing.USDPerGPUHour * float64(b.Pricing.GPUs) * b.Duration.Hours()
	per := func(n int64, scale float64) float64 {
		if n <= 0 {
			return math.NaN()
		}
		return c.USD / float64(n) * scale
	}
	c.PerRequest, c.PerMillionInput, c.PerMillionOutput = per(b.Completed, 1), per(b.InputTokens, 1e6), per(b.OutputTokens, 1e6)
	return c, true
}

// The dcgm-exporter series Energy reads.
const (
	EnergyMetric = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" // mJ since boot, a counter
	PowerMetric  = "DCGM_FI_DEV_POWER_USAGE"              // W, a gauge
)

// Energy is what the target's GPUs drew while the run was scraped, from dcgm-exporter's series
// in ServerMetrics, summed over devices: Joules in all, per output token of the completed
// requests, and the mean power over the scraped span. Source names the series it came from:
// the energy counter's increase from the first scrape to the last, or else the power gauge
// integrated over the scrapes (trapezoids).
type Energy struct {
	Joules, PerOutputToken, MeanWatts float64
	Seconds                           float64 // the scraped span
	Source                            string
}

// Energy returns the run's energy; ok is false without dcgm-exporter's energy or power series
// of at least two scrapes.
func (b *Bench) Energy() (e Energy, ok bool) {
	if b.ServerMetrics == nil {
		return Energy{}, false
	}
	for _, src := range []string{EnergyMetric, PowerMetric} {
		var joules, first, last float64
		first, found := math.Inf(1), false
		last = math.Inf(-1)
		for _, s := range b.ServerMetrics.Series {
			if s.Name != src || len(s.Points) < 2 {
				continue
			}
			pts := finitePoints(s.Points)
			if len(pts) < 2 {
				continue
			}
			found = true
			first, last = math.Min(first, pts[0][0]), math.Max(last, pts[len(pts)-1][0])
			if src == EnergyMetric {
				joules += math.Max(pts[len(pts)-1][1]-pts[0][1], 0) / 1000 // a counter reset would read as none
				continue
			}
			for i := 1; i < len(pts); i++ {
				joules += (pts[i][1] + pts[i-1][1]) / 2 * (pts[i][0] - pts[i-1][0])
			}
		}
		if !found || !(last > first) {
			continue
		}
		e = Energy{Joules: joules, Seconds: last - first, Source: src, PerOutputToken: math.NaN()}
		e.MeanWatts = joules / e.Seconds
		if b.OutputTokens > 0 {
			e.PerOutputToken = joules / float64(b.OutputTokens)
		}
		return e, true
	}
	return Energy{}, false
}

// finitePoints are the points of a series with a finite time and value, in time order as
// scraped.
func finitePoints(pts [][2]float64) [][2]float64 {
	out := make([][2]float64, 0, len(pts))
	for _, p := range pts {
		if !math.IsNaN(p[0]) && !math.IsInf(p[0], 0) && !math.IsNaN(p[1]) && !math.IsInf(p[1], 0) {
			out = append(out, p)
		}
	}
	return out
}

// costAndEnergy are the pricing options and the cost and energy keys of the bench's document.
func (b *Bench) costAndEnergy() (usd *amount, gpus *count, cost *derived[*costJSON], energy *derived[*energyJSON]) {
	opt := func(v float64) *amount {
		if math.IsNaN(v) {
			return nil
		}
		return ptr(amount(sig(v)))
	}
	if b.Pricing != (Pricing{}) {
		usd, gpus = ptr(amount(sig(b.Pricing.USDPerGPUHour))), ptr(count(b.Pricing.GPUs))
	}
	if c, ok := b.Cost(); ok {
		cost = &derived[*costJSON]{&costJSON{USD: amount(sig(c.USD)), USDPerRequest: opt(c.PerRequest),
			USDPerMillionInputTok: opt(c.PerMillionInput), USDPerMillionOutputTok: opt(c.PerMillionOutput)}}
	}
	if e, ok := b.Energy(); ok {
		energy = &derived[*energyJSON]{&energyJSON{Source: e.Source, Joules: amount(sig(e.Joules)),
			JoulesPerOutputTok: opt(e.PerOutputToken), MeanWatts: amount(sig(e.MeanWatts)), ScrapedSpanSeconds: amount(sig(e.Seconds))}}
	}
	return usd, gpus, cost, energy
}

// text says the cost as a report line does.
func (c Cost) text() string {
	f := func(v float64) string {
		if math.IsNaN(v) {
			return "n/a"
		}
		return fmt.Sprintf("$%.4g", v)
	}
	return fmt.Sprintf("$%.4g in all; %s per request, %s per 1M input tokens, %s per 1M output tokens",
		c.USD, f(c.PerRequest), f(c.PerMillionInput), f(c.PerMillionOutput))
}

// text says the energy as a report line does.
func (e Energy) text() string {
	per := "n/a per output token"
	if !math.IsNaN(e.PerOutputToken) {
		per = fmt.Sprintf("%.3g J per output token", e.PerOutputToken)
	}
	return fmt.Sprintf("%.4g J over %.0f s scraped, mean %.0f W (%s); %s", e.Joules, e.Seconds, e.MeanWatts, e.Source, per)
}
