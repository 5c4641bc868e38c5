package stats_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// The P99 of Pareto(10 ms, 1.5) latencies is 215.44 ms; its interval from 20,000 samples holds
// it, and the tail analysis recognises the shape.
func ExampleHistogram_QuantileCI() {
	r := rand.New(rand.NewPCG(1, 2))
	h := stats.NewHistogram()
	for range 20000 {
		h.Record(time.Duration(10 * math.Pow(1-r.Float64(), -1/1.5) * float64(time.Millisecond)))
	}
	p99, lo, hi, ok := h.QuantileCI(0.99, 0.95)
	fmt.Println(ok, lo <= 215443*time.Microsecond && 215443*time.Microsecond <= hi, p99 > lo && p99 < hi)
	tail := h.FitTail()
	fmt.Println(tail.Best, tail.Hill.Alpha > 1.2 && tail.Hill.Alpha < 1.8)
	// Output:
	// true true true
	// pareto true
}

func ExampleQuantileRanks() {
	// The 95% interval around the median of 100 samples lies between the 40th and 61st values.
	l, u, ok := stats.QuantileRanks(100, 0.5, 0.95)
	fmt.Println(l, u, ok)
	// Too few samples for an interval around P99.
	_, _, ok = stats.QuantileRanks(300, 0.99, 0.95)
	fmt.Println(ok)
	// Output:
	// 40 61 true
	// false
}

func ExampleParseGoodput() {
	slos, err := stats.ParseGoodput("ttft:300,e2el:2000")
	if err != nil {
		panic(err)
	}
	fast := stats.RequestLatencies{TTFT: 120 * time.Millisecond, HasTTFT: true, E2EL: 1500 * time.Millisecond}
	slow := stats.RequestLatencies{TTFT: 420 * time.Millisecond, HasTTFT: true, E2EL: 1500 * time.Millisecond}
	fmt.Println(slos, slos.Meets(fast), slos.Meets(slow))
	// Output: ttft:300,e2el:2000 true false
}

func ExampleKnee() {
	var points []stats.Point
	for x := 10.0; x <= 100; x += 10 {
		p99 := 200 * time.Millisecond
		if x > 60 {
			p99 += time.Duration((x - 60) * 300 * float64(time.Millisecond))
		}
		points = append(points, stats.Point{X: x, Achieved: x, P99: p99})
	}
	k := stats.Knee(points, stats.DefaultKneeSlope)
	r := stats.KneeRobust(points)
	fmt.Println(k.X, k.Method, r.X, r.Method)
	// Output: 70 slope>120ms/rps 60 kneedle
}
