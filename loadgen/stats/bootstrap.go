package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// KneeInterval is the bootstrap distribution of the knee the article's slope rule finds.
type KneeInterval struct {
	Draws int       // resamples drawn
	Found int       // draws in which the rule found a knee
	Share []float64 // per point, as given: the share of draws whose knee is that point
	// Lo and Hi are the equal-tailed percentile interval of the knee's X over the draws; a draw
	// without a knee counts as +Inf (beyond the ladder), so Hi is +Inf when more than the upper
	// tail's share of the draws found none, and both are +Inf when most of them did.
	Lo, Hi float64
}

// BootstrapKnee resamples each point's samples with replacement, takes each resample's P99 by
// the nearest-rank rule, applies Knee with threshold to the points with those P99s (X and
// Achieved as given), and returns the distribution of the knee over draws resamples drawn
// from a generator seeded with seed. The interval is at the given confidence. Every point
// needs at least one sample.
func BootstrapKnee(points []Point, samples [][]time.Duration, threshold, confidence float64, draws int, seed uint64) (KneeInterval, error) {
	switch {
	case len(points) != len(samples):
		return KneeInterval{}, errors.New("bootstrap knee: one sample set per point")
	case draws < 1 || !(confidence > 0 && confidence < 1):
		return KneeInterval{}, errors.New("bootstrap knee: want draws >= 1 and confidence in (0, 1)")
	}
	for _, s := range samples {
		if len(s) == 0 {
			return KneeInterval{}, errors.New("bootstrap knee: a point has no samples")
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x6b6e6565))
	res := KneeInterval{Draws: draws, Share: make([]float64, len(points))}
	pts := slices.Clone(points)
	xs := make([]float64, draws)
	var buf []time.Duration
	for d := range draws {
		for i, s := range samples {
			buf = buf[:0]
			for range s {
				buf = append(buf, s[rng.IntN(len(s))])
			}
			slices.Sort(buf)
			pts[i].P99 = buf[NearestRank(int64(len(buf)), 0.99)-1]
		}
		xs[d] = math.Inf(1)
		if k := Knee(pts, threshold); k.Found {
			xs[d] = k.X
			res.Found++
			res.Share[k.Index]++
		}
	}
	for i := range res.Share {
		res.Share[i] /= float64(draws)
	}
	res.Lo, res.Hi = percentileInterval(xs, confidence)
	return res, nil
}

// RatioCI is the ratio sum(num)/sum(den) of a series of paired samples taken in time order,
// with an equal-tailed percentile interval from a moving-block bootstrap: each resample
// strings together blocks of block consecutive pairs starting at uniformly drawn positions
// until it is as long as the series, so that the correlation between neighbouring samples
// (a queue's state changes slowly) stays inside the blocks. ok is false when the series is
// shorter than two blocks or sum(den) is not positive.
func RatioCI(num, den []float64, block int, confidence float64, draws int, seed uint64) (ratio, lo, hi float64, ok bool) {
	n := len(num)
	if n != len(den) || block < 1 || n < 2*block || draws < 1 || !(confidence > 0 && confidence < 1) {
		return math.NaN(), math.NaN(), math.NaN(), false
	}
	var sn, sd float64
	for i := range num {
		sn, sd = sn+num[i], sd+den[i]
	}
	if !(sd > 0) {
		return math.NaN(), math.NaN(), math.NaN(), false
	}
	rng := rand.New(rand.NewPCG(seed, 0x726174696f))
	rs := make([]float64, 0, draws)
	for range draws {
		var bn, bd float64
		for taken := 0; taken < n; {
			start := rng.IntN(n - block + 1)
			for j := start; j < start+block && taken < n; j++ {
				bn, bd = bn+num[j], bd+den[j]
				taken++
			}
		}
		if bd > 0 {
			rs = append(rs, bn/bd)
		}
	}
	if len(rs) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), false
	}
	lo, hi = percentileInterval(rs, confidence)
	return sn / sd, lo, hi, true
}

// percentileInterval sorts xs and returns its equal-tailed percentile interval at confidence.
func percentileInterval(xs []float64, confidence float64) (lo, hi float64) {
	slices.Sort(xs)
	tail := (1 - confidence) / 2
	n := float64(len(xs))
	l := min(max(int(math.Floor(tail*n)), 0), len(xs)-1)
	h := min(max(int(math.Ceil((1-tail)*n))-1, 0), len(xs)-1)
	return xs[l], xs[h]
}
