package stats

import (
	"math"
	"time"
)

// NearestRank is the 1-based rank of the q-quantile of n values by the nearest-rank rule,
// ceil(q*n), clamped to [1, n]. A tolerance of 1e-9 absorbs the rounding in q*n, so the 0.99
// quantile of 100 values is rank 99, not 100.
func NearestRank(n int64, q float64) int64 {
	if n <= 0 {
		return 0
	}
	k := int64(math.Ceil(q*float64(n) - 1e-9))
	return min(max(k, 1), n)
}

// QuantileRanks returns the 1-based ranks l < u of the order statistics whose interval
// [x_(l), x_(u)] holds the q-quantile of any continuous distribution with probability at least
// confidence, given n independent samples.
//
// The count B of samples at or below the true quantile is Binomial(n, q), and
// x_(l) <= ξ_q < x_(u) exactly when l <= B <= u-1, so the coverage is F(u-1) - F(l-1) with F the
// binomial CDF. The interval is equal-tailed: l is the largest rank with F(l-1) <= (1-c)/2 and
// u the smallest with F(u-1) >= 1-(1-c)/2. F is computed exactly (see binomialWindow), for any
// n, without a normal approximation. ok is false when n is too small for either tail, for
// example fewer than 367 samples for a 95% interval around the 99th percentile: there is then
// no honest interval to report.
func QuantileRanks(n int64, q, confidence float64) (l, u int64, ok bool) {
	if n < 2 || !(q > 0 && q < 1) || !(confidence > 0 && confidence < 1) {
		return 0, 0, false
	}
	tail := (1 - confidence) / 2
	w := newBinomialWindow(n, q)
	// F(k) for k below the window is below 1e-17 of the mode, and 1 above it.
	l = 0
	for k := w.lo; k <= w.hi; k++ {
		if w.cdf(k) > tail {
			break
		}
		l = k + 1 // F(l-1) = F(k) <= tail
	}
	if w.lo > 0 && l == 0 {
		l = w.lo // F(w.lo-1) is negligible
	}
	u = n + 1
	for k := w.lo; k <= w.hi; k++ {
		if w.cdf(k) >= 1-tail {
			u = k + 1
			break
		}
	}
	if l < 1 || u > n || l >= u {
		return 0, 0, false
	}
	return l, u, true
}

// QuantileCoverage is the exact probability that [x_(l), x_(u)] from n samples holds the
// q-quantile of a continuous distribution: F(u-1) - F(l-1) for B ~ Binomial(n, q).
func QuantileCoverage(n, l, u int64, q float64) float64 {
	w := newBinomialWindow(n, q)
	return w.cdf(u-1) - w.cdf(l-1)
}

// BinomialCDF is P(B <= k) for B ~ Binomial(n, p), exact to about 1e-15.
func BinomialCDF(k, n int64, p float64) float64 {
	switch {
	case k < 0:
		return 0
	case k >= n:
		return 1
	case p <= 0:
		return 1
	case p >= 1:
		return 0
	}
	return newBinomialWindow(n, p).cdf(k)
}

// binomialWindow holds the Binomial(n, p) distribution over the ranks [lo, hi] that carry all
// but a negligible part of its mass. The probabilities are built by the ratio recurrence
// p(k+1)/p(k) = (n-k)/(k+1) · p/(1-p) outward from the mode, where it is largest, until they fall
// below 1e-17 of the mode (beyond that the tails decay faster than geometrically, so what is left
// out is below 1e-15 in total), and normalised by their sum. No factorial or lgamma is needed,
// so it is exact for any n, and costs O(sqrt(n p (1-p))) terms.
type binomialWindow struct {
	lo, hi int64
	cum    []float64 // cum[i] = P(B <= lo+i)
}

func newBinomialWindow(n int64, p float64) *binomialWindow {
	mode := int64(math.Floor(float64(n+1) * p))
	mode = min(max(mode, 0), n)
	const cut = 1e-17
	ratio := p / (1 - p)
	var up []float64 // p(mode+1), p(mode+2), ... relative to p(mode)
	for k, v := mode, 1.0; k < n; k++ {
		v *= float64(n-k) / float64(k+1) * ratio
		if v < cut {
			break
		}
		up = append(up, v)
	}
	var down []float64 // p(mode-1), p(mode-2), ...
	for k, v := mode, 1.0; k > 0; k-- {
		v *= float64(k) / float64(n-k+1) / ratio
		if v < cut {
			break
		}
		down = append(down, v)
	}
	w := &binomialWindow{lo: mode - int64(len(down)), hi: mode + int64(len(up))}
	pmf := make([]float64, 0, len(down)+1+len(up))
	for i := len(down) - 1; i >= 0; i-- {
		pmf = append(pmf, down[i])
	}
	pmf = append(pmf, 1)
	pmf = append(pmf, up...)
	var total float64
	for i := range pmf {
		total += pmf[i]
	}
	w.cum = make([]float64, len(pmf))
	var acc float64
	for i, v := range pmf {
		acc += v / total
		w.cum[i] = acc
	}
	return w
}

// cdf is P(B <= k).
func (w *binomialWindow) cdf(k int64) float64 {
	switch {
	case k < w.lo:
		return 0
	case k >= w.hi:
		return 1
	}
	return min(w.cum[k-w.lo], 1)
}

// QuantileCI returns the nearest-rank q-quantile of sorted (ascending) samples and its
// distribution-free interval at the given confidence (see QuantileRanks). ok is false, and lo
// and hi are zero, when there are too few samples for the interval; est is still the
// nearest-rank estimate when there is at least one sample.
func QuantileCI(sorted []time.Duration, q, confidence float64) (est, lo, hi time.Duration, ok bool) {
	n := int64(len(sorted))
	if n == 0 {
		return 0, 0, 0, false
	}
	est = sorted[NearestRank(n, q)-1]
	l, u, ok := QuantileRanks(n, q, confidence)
	if !ok {
		return est, 0, 0, false
	}
	return est, sorted[l-1], sorted[u-1], true
}

// QuantileCI is QuantileCI over the recorded values: the same ranks, read from the histogram to
// HDR precision. Because the look-up is monotone in the rank, est always lies in [lo, hi], and a
// merged histogram gives the interval of the pooled samples.
func (h *Histogram) QuantileCI(q, confidence float64) (est, lo, hi time.Duration, ok bool) {
	n := h.Count()
	if n == 0 {
		return 0, 0, 0, false
	}
	est = h.ValueAtRank(NearestRank(n, q))
	l, u, ok := QuantileRanks(n, q, confidence)
	if !ok {
		return est, 0, 0, false
	}
	return est, h.ValueAtRank(l), h.ValueAtRank(u), true
}
