package lab

import (
	"math"

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
