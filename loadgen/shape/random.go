package shape

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Streams of one seed: each part of a plan draws from its own, so adding a prompt source does
// not change the arrival times of the same seed.
const (
	streamArrivals uint64 = 0xa7717a15
	streamPrompts  uint64 = 0x9707975
	streamKeys     uint64 = 0x6e75
	streamArticle  uint64 = 0xa271c1e
	streamSessions uint64 = 0x5e5510
)

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// gammaVariate draws from Gamma(shape k, scale 1) by Marsaglia and Tsang's method (2000); for
// k < 1 it draws Gamma(k+1) and scales by U^(1/k).
func gammaVariate(r *rand.Rand, k float64) float64 {
	if k < 1 {
		u := r.Float64()
		for u == 0 {
			u = r.Float64()
		}
		return gammaVariate(r, k+1) * math.Pow(u, 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// poissonVariate draws from Poisson(lambda) by multiplying uniforms (Knuth), fine for the
// small lambdas of bursts; large lambdas use the normal approximation.
func poissonVariate(r *rand.Rand, lambda float64) int {
	if lambda <= 0 {
		return 0
	}
	if lambda > 60 {
		return max(0, int(math.Round(lambda+math.Sqrt(lambda)*r.NormFloat64())))
	}
	limit := math.Exp(-lambda)
	n, p := 0, r.Float64()
	for p > limit {
		n++
		p *= r.Float64()
	}
	return n
}

// maxZipfRanks bounds the table of a Zipf sampler (8 bytes a rank).
const maxZipfRanks = 10_000_000

// zipf draws ranks 1..n with P(rank k) proportional to k^-alpha, for any alpha > 0, by
// inverting a table of the cumulative distribution (exact, one binary search per draw).
type zipf struct {
	cdf []float64
}

func newZipf(n int, alpha float64) (*zipf, error) {
	if n < 1 || n > maxZipfRanks {
		return nil, fmt.Errorf("zipf: ranks must be between 1 and %d, got %d", maxZipfRanks, n)
	}
	if !(alpha > 0) || math.IsInf(alpha, 0) {
		return nil, fmt.Errorf("zipf: alpha must be a positive number, got %v", alpha)
	}
	cdf := make([]float64, n)
	sum := 0.0
	for k := 1; k <= n; k++ {
		sum += math.Pow(float64(k), -alpha)
		cdf[k-1] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	cdf[n-1] = 1
	return &zipf{cdf: cdf}, nil
}

// rank draws a rank in 1..n.
func (z *zipf) rank(r *rand.Rand) int {
	u := r.Float64()
	return sort.SearchFloat64s(z.cdf, u) + 1
}

// prob returns P(rank k).
func (z *zipf) prob(k int) float64 {
	if k == 1 {
		return z.cdf[0]
	}
	return z.cdf[k-1] - z.cdf[k-2]
}
