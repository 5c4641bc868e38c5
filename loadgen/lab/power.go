package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// verdictPower is the probability with which a rule's sample size detects the effect it names:
// the n per arm is the smallest at which the intervals separate at least this often.
const verdictPower = 0.90

// verdictConfidence is the confidence of every interval a verdict compares.
const verdictConfidence = 0.95

// maxPowerN bounds the sample-size searches: a rule needing more than this many samples per
// arm cannot be run on one machine in the lab's minutes, and reports so.
const maxPowerN = 50_000

// tailSeparationPower is the probability that the order-statistic interval (at confidence) of
// the q-quantile of n samples lies entirely above the same interval of an arm without slow
// samples, when each sample is slow with probability slowShare and every slow sample exceeds
// every fast one. The slow arm's interval [x_(l), x_(u)] lies above the fast arm's when its
// lower end x_(l) is slow, that is when the count S ~ Binomial(n, slowShare) of slow samples is
// at least n - l + 1; the fast arm's upper end is then a fast value. It is a lower bound: the
// slow samples also push the mixed arm's fast order statistics up, which can separate the
// intervals without them. It is 0 when n is too small for the interval.
func tailSeparationPower(n int64, slowShare, q, confidence float64) float64 {
	l, _, ok := stats.QuantileRanks(n, q, confidence)
	if !ok {
		return 0
	}
	return 1 - stats.BinomialCDF(n-l, n, slowShare)
}

// tailSamplesNeeded is the smallest n at which tailSeparationPower reaches power, and false
// when no n up to maxPowerN does.
func tailSamplesNeeded(slowShare, q, confidence, power float64) (int64, bool) {
	if !(slowShare > 1-q) {
		return 0, false // the slow samples cannot reach the quantile on average
	}
	return smallestN(func(n int64) float64 { return tailSeparationPower(n, slowShare, q, confidence) }, power)
}

// rateSeparationPower is the probability that the Wilson interval (at confidence) of k1 ~
// Binomial(n, p1) lies entirely above that of k0 ~ Binomial(n, p0), summed exactly over k0.
func rateSeparationPower(n int64, p0, p1, confidence float64) float64 {
	if n < 1 {
		return 0
	}
	z := zOf(confidence)
	nf := float64(n)
	pmf0, pmf1 := binomialPMF(n, p0), binomialPMF(n, p1)
	// tail1[k] = P(k1 >= k)
	tail1 := make([]float64, n+2)
	for k := n; k >= 0; k-- {
		tail1[k] = tail1[k+1] + pmf1[k]
	}
	var total float64
	k1 := int64(0) // the least k1 whose lower end exceeds the upper end of k0: rises with k0
	for k0 := int64(0); k0 <= n; k0++ {
		_, hi0 := wilson(float64(k0), nf, z)
		for k1 <= n {
			if lo1, _ := wilson(float64(k1), nf, z); lo1 > hi0 {
				break
			}
			k1++
		}
		if k1 > n {
			break
		}
		total += pmf0[k0] * tail1[k1]
	}
	return min(total, 1)
}

// binomialPMF is P(B = k) for k = 0..n, B ~ Binomial(n, p), from log-gamma.
func binomialPMF(n int64, p float64) []float64 {
	out := make([]float64, n+1)
	switch {
	case p <= 0:
		out[0] = 1
		return out
	case p >= 1:
		out[n] = 1
		return out
	}
	lgN, _ := math.Lgamma(float64(n) + 1)
	lp, lq := math.Log(p), math.Log1p(-p)
	for k := int64(0); k <= n; k++ {
		lk, _ := math.Lgamma(float64(k) + 1)
		lnk, _ := math.Lgamma(float64(n-k) + 1)
		out[k] = math.Exp(lgN - lk - lnk + float64(k)*lp + float64(n-k)*lq)
	}
	return out
}

// rateSamplesNeeded is the smallest n per arm at which rateSeparationPower reaches power, and
// false when no n up to maxPowerN does.
func rateSamplesNeeded(p0, p1, confidence, power float64) (int64, bool) {
	if !(p1 > p0) || p0 < 0 || p1 > 1 {
		return 0, false
	}
	return smallestN(func(n int64) float64 { return rateSeparationPower(n, p0, p1, confidence) }, power)
}

// smallestN returns the least n from which f stays at or above power up to 2n (at most
// maxPowerN). f rises with n but saw-tooths as integer ranks jump, so the least n at which it
// first reaches power would not hold for an arm a few samples larger; the rule's n must.
// Doubling brackets the first crossing, a scan of the bracket finds it, and a walk to twice the
// candidate moves it past every later dip.
func smallestN(f func(int64) float64, power float64) (int64, bool) {
	hi := int64(1)
	for f(hi) < power {
		if hi >= maxPowerN {
			return 0, false
		}
		hi = min(2*hi, maxPowerN)
	}
	n := hi
	for m := hi/2 + 1; m < hi; m++ {
		if f(m) >= power {
			n = m
			break
		}
	}
	for m := n + 1; m <= 2*n; m++ {
		if m > maxPowerN {
			return 0, false
		}
		if f(m) < power {
			n = m + 1
			for f(n) < power {
				if n++; n > maxPowerN {
					return 0, false
				}
			}
			m = n
		}
	}
	return n, true
}

// wilson is the Wilson interval of k successes in n trials at normal quantile z.
func wilson(k, n, z float64) (lo, hi float64) {
	p := k / n
	den := 1 + z*z/n
	c := (p + z*z/(2*n)) / den
	h := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / den
	return math.Max(0, c-h), math.Min(1, c+h)
}

// zOf is the two-sided normal quantile of confidence: 1.96 for 95%.
func zOf(confidence float64) float64 {
	return math.Sqrt2 * math.Erfinv(confidence)
}

// maxSeparationThresholds bounds the thresholds quantileSeparation sums over: fewer make the
// bound only a little looser (it stays a lower bound), and the calculation runs at the start of
// an experiment.
const maxSeparationThresholds = 128

// quantileSeparation holds two arms' distributions at increasing thresholds t_1 < ... < t_k:
// fa[i] = P(X <= t_i) for arm A, fb[i] = P(Y <= t_i) for arm B, the arm claimed to be slower.
type quantileSeparation struct {
	fa, fb []float64
}

// power is a lower bound on the probability that the order-statistic interval (at confidence)
// of B's q-quantile lies entirely above A's, each arm holding n independent samples. With the
// ranks l < u of stats.QuantileRanks, A's upper end x_(u) is at most t exactly when
// Binomial(n, F_A(t)) >= u, and B's lower end y_(l) exceeds t exactly when
// Binomial(n, F_B(t)) <= l-1. For each threshold the events {t_(i-1) < x_(u) <= t_i} and
// {y_(l) > t_i} together imply separation, the arms are independent, and the events of
// different thresholds are disjoint, so
//
//	sum_i [P(x_(u) <= t_i) - P(x_(u) <= t_(i-1))] P(y_(l) > t_i)
//
// is a lower bound. It is at least the best single threshold's P(x_(u) <= t) P(y_(l) > t)
// (P(y_(l) > t) falls as t rises), and it closes on the exact probability as the thresholds fill
// the region where the two order statistics lie. It is 0 when n is too small for the interval.
func (s quantileSeparation) power(n int64, q, confidence float64) float64 {
	l, u, ok := stats.QuantileRanks(n, q, confidence)
	if !ok {
		return 0
	}
	const negligible = 1e-15
	var total, below float64 // below = P(x_(u) <= t_(i-1))
	for i := range s.fa {
		upA := 1 - stats.BinomialCDF(u-1, n, s.fa[i]) // P(x_(u) <= t_i)
		if upA-below <= negligible {
			continue
		}
		aboveB := stats.BinomialCDF(l-1, n, s.fb[i]) // P(y_(l) > t_i), falling with i
		if aboveB <= negligible {
			break
		}
		total += (upA - below) * aboveB
		below = upA
	}
	return min(total, 1)
}

// samplesNeeded is the least n per arm from which power reaches verdictPower (see smallestN),
// and false when no n up to maxPowerN does.
func (s quantileSeparation) samplesNeeded(q float64) (int64, bool) {
	if len(s.fa) == 0 {
		return 0, false
	}
	return smallestN(func(n int64) float64 { return s.power(n, q, verdictConfidence) }, verdictPower)
}

// pilotSeparation is the quantileSeparation of two pilots' empirical distributions, a of the arm
// claimed faster and b of the one claimed slower (each sorted ascending), at the values of both
// pilots from a's q-quantile up to b's, at most maxSeparationThresholds of them evenly by rank:
// that is where A's upper order statistic and B's lower one meet. It holds no threshold, and no n
// separates the arms, when b's q-quantile is not above a's: the pilots show no effect to size.
func pilotSeparation(a, b []time.Duration, q float64) quantileSeparation {
	if len(a) == 0 || len(b) == 0 {
		return quantileSeparation{}
	}
	lo, hi := quantileOf(a, q), quantileOf(b, q)
	if hi <= lo {
		return quantileSeparation{}
	}
	var ts []time.Duration
	for _, x := range [][]time.Duration{a, b} {
		for _, v := range x {
			if v >= lo && v <= hi {
				ts = append(ts, v)
			}
		}
	}
	slices.Sort(ts)
	ts = slices.Compact(ts)
	if len(ts) > maxSeparationThresholds {
		picked := make([]time.Duration, maxSeparationThresholds)
		for i := range picked {
			picked[i] = ts[i*(len(ts)-1)/(maxSeparationThresholds-1)]
		}
		ts = picked
	}
	s := quantileSeparation{fa: make([]float64, len(ts)), fb: make([]float64, len(ts))}
	for i, t := range ts {
		s.fa[i], s.fb[i] = empiricalCDF(a, t), empiricalCDF(b, t)
	}
	return s
}

// empiricalCDF is the share of sorted values at most t.
func empiricalCDF(sorted []time.Duration, t time.Duration) float64 {
	k, _ := slices.BinarySearch(sorted, t+1) // the first value above t
	return float64(k) / float64(len(sorted))
}

// paretoLaw is a Pareto latency law with minimum scale and tail index alpha, capped, as the
// service's fault rules draw it ("pareto:10ms,1.5,10s": x_m / U^(1/alpha), U uniform on (0, 1],
// the cap taken when the draw exceeds it).
type paretoLaw struct {
	scale, cap time.Duration
	alpha      float64
}

func (p paretoLaw) sample(r *rand.Rand) time.Duration {
	d := time.Duration(float64(p.scale) / math.Pow(1-r.Float64(), 1/p.alpha))
	if d < 0 || d > p.cap {
		d = p.cap
	}
	return d
}

// The Monte Carlo of the p99-model experiment's sample size: replicates per candidate n, its
// fixed seed, and the step of the grid of candidates.
const (
	p99ModelReplicates = 400
	p99ModelSeed       = 0x70393921
	p99ModelGridStep   = 1.05
)

// exponentialBelowPower is the share of replicates runs of n draws from law in which the
// exponential fitted to the draws (rate 1/mean, as stats.FitTail fits it, so its P99 is
// ln(100) x mean) has its P99 below the lower end of the order-statistic interval (at
// confidence) of the draws' P99. Replicate i draws from a source seeded (seed, i) whatever n, so
// candidates share their first draws and the estimate moves smoothly with n. It is 0 when n is
// too small for the interval.
func exponentialBelowPower(law paretoLaw, n int64, replicates int, seed uint64, confidence float64) float64 {
	l, _, ok := stats.QuantileRanks(n, 0.99, confidence)
	if !ok {
		return 0
	}
	draws := make([]time.Duration, n)
	hits := 0
	for i := range replicates {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		var sum float64
		for j := range draws {
			draws[j] = law.sample(r)
			sum += float64(draws[j])
		}
		slices.Sort(draws)
		if math.Log(100)*sum/float64(n) < float64(draws[l-1]) {
			hits++
		}
	}
	return float64(hits) / float64(replicates)
}

// exponentialBelowSamplesNeeded is the least n, on a grid that starts at the least n with a 95%
// interval of the P99 and grows by p99ModelGridStep, at which exponentialBelowPower (with
// p99ModelReplicates replicates) reaches verdictPower, with the power there; false when no n up
// to maxPowerN does.
func exponentialBelowSamplesNeeded(law paretoLaw) (int64, float64, bool) {
	n := int64(2)
	for _, _, ok := stats.QuantileRanks(n, 0.99, verdictConfidence); !ok; _, _, ok = stats.QuantileRanks(n, 0.99, verdictConfidence) {
		n++
	}
	for ; n <= maxPowerN; n = int64(math.Ceil(float64(n) * p99ModelGridStep)) {
		if p := exponentialBelowPower(law, n, p99ModelReplicates, p99ModelSeed, verdictConfidence); p >= verdictPower {
			return n, p, true
		}
	}
	return 0, 0, false
}

// sampleMargin is how many more requests than a rule's n an arm is run for: Poisson counts
// vary, and a few requests may fail.
const sampleMargin = 1.1

// latenciesOf is the sorted metric of the completed requests of records (warmup and unsent ones
// left out), the samples a percentile of the run's summary rests on.
func latenciesOf(recs []loadgen.Record, metric func(*loadgen.Record) (time.Duration, bool)) []time.Duration {
	var out []time.Duration
	for i := range recs {
		r := &recs[i]
		if r.Warmup || r.NotSent || !r.OK() {
			continue
		}
		if d, ok := metric(r); ok {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// e2elOf and ttftOf are the metrics latenciesOf reads.
func e2elOf(r *loadgen.Record) (time.Duration, bool) { return r.E2EL(), true }
func ttftOf(r *loadgen.Record) (time.Duration, bool) { return r.TTFT() }

// armDuration is how long an arm driven at rate runs to hold need samples: need x
// sampleMargin / rate, at least floor and at most ceiling; ceiling when no n was found (the
// outcome is then underpowered whatever the arms hold).
func armDuration(need int64, powered bool, rate float64, floor, ceiling time.Duration) time.Duration {
	if !powered {
		return ceiling
	}
	d := time.Duration(sampleMargin * float64(need) / rate * float64(time.Second))
	return min(max(d, floor), ceiling).Round(100 * time.Millisecond)
}

// sizeNote formats a rule's n, counted in unit ("requests per arm"), and how long the runs that
// must hold it last for a Row.
func sizeNote(need int64, powered bool, armDur time.Duration, rate float64, unit string) string {
	if !powered {
		return fmt.Sprintf("none: no n up to %d %s resolves the calibration's effect with %.0f%% power (runs of %v)", maxPowerN, unit, 100*verdictPower, armDur)
	}
	return fmt.Sprintf("%d %s (runs of %v at %g/s)", need, unit, armDur, rate)
}

// underpowered is the opening of an underpowered verdict: the n the rule needs, counted in unit
// ("requests per arm"), and the fewest samples what holder names ("a compared arm") held.
func underpowered(need int64, powered bool, got int, unit, holder string) string {
	if !powered {
		return fmt.Sprintf("underpowered: no n up to %d %s separates the intervals with %.0f%% power at the calibration's distributions; ", maxPowerN, unit, 100*verdictPower)
	}
	return fmt.Sprintf("underpowered: the rule needs %d %s and %s held %d (run longer, --duration): ", need, unit, holder, got)
}

// quantileOf is the nearest-rank q-quantile of sorted values, zero when there are none.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[stats.NearestRank(int64(len(sorted)), q)-1]
}

// pilotsNote is a Row's figure for two pilots: each one's q-quantile (nearest rank) and how many
// samples it rests on, and how long each pilot ran.
func pilotsNote(a, b []time.Duration, q float64, each time.Duration) string {
	return fmt.Sprintf("%s ms over %d / %s ms over %d (%v each)", msStr(quantileOf(a, q)), len(a), msStr(quantileOf(b, q)), len(b), each.Round(100*time.Millisecond))
}

// separationRuleText states pilotSeparation's bound in a rule's words: quantile names the
// statistic ("P99"), faster and slower the arms whose intervals are compared.
func separationRuleText(quantile, faster, slower string) string {
	return fmt.Sprintf("a distribution-free lower bound: the sum, over thresholds t_i at the pilots' values between their %ss, "+
		"of the probability that the %s upper order statistic lies in (t_(i-1), t_i] times the probability that the %s lower one lies above t_i, "+
		"each from a binomial count of samples at most t_i", quantile, faster, slower)
}
