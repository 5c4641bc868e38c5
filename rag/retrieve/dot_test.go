package retrieve

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDot(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	// Lengths around the unroll width exercise the unrolled body, the scalar tail and both.
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 384, 389} {
		a, b := make([]float32, n), make([]float32, n)
		var want float64
		for i := range n {
			a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			want += float64(a[i]) * float64(b[i])
		}
		// Float32 accumulation error is at most about n * 2^-24 times the sum of |a_i b_i|.
		var magnitude float64
		for i := range n {
			magnitude += math.Abs(float64(a[i]) * float64(b[i]))
		}
		tolerance := float64(n+1) * 0x1p-24 * magnitude
		if got := dot(a, b); math.Abs(float64(got)-want) > tolerance {
			t.Errorf("dot of length %d = %v, want %v ± %.3g", n, got, want, tolerance)
		}
	}
}

// BenchmarkDot384 measures the inner loop alone on cache-resident data, to separate compute
// from the memory traffic that dominates a scan of a large slab.
func BenchmarkDot384(b *testing.B) {
	r := rand.New(rand.NewPCG(13, 14))
	x, y := make([]float32, 384), make([]float32, 384)
	for i := range x {
		x[i], y[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	b.ReportAllocs()
	var sink float32
	for b.Loop() {
		sink += dot(x, y)
	}
	if math.IsNaN(float64(sink)) {
		b.Fatal("NaN")
	}
}
