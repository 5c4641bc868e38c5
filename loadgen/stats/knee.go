package stats

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// DefaultKneeSlope is the article's knee threshold: P99 growing by more than 120 ms per extra
// request per second.
const DefaultKneeSlope = 120.0

// Point is one step of a sweep.
type Point struct {
	X        float64       // the controlled variable: offered rate (req/s) or concurrency
	Achieved float64       // achieved throughput, completed requests per second; 0 if unknown
	P99      time.Duration // P99 end-to-end latency at this step
}

// KneeResult is where a latency curve turns up.
type KneeResult struct {
	Found  bool
	Index  int           // index of the knee in the points as given
	X      float64       // the point's X
	P99    time.Duration // the point's P99
	Method string        // how it was found, for reports
}

// byX returns the indices of points ordered by X.
func byX(points []Point) []int {
	idx := make([]int, len(points))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return points[idx[a]].X < points[idx[b]].X })
	return idx
}

// Knee applies the article's rule: walking the points in order of X, the knee is the first
// point at which the P99 grew by more than threshold milliseconds per extra request per second
// since the previous point. "Per extra request per second" is measured on the achieved
// throughput when every point has one (so a concurrency sweep, whose X is not a rate, is judged
// in QPS as the article does, and a saturated step, where the offered rate rises but the
// achieved one does not, counts as an infinite slope), otherwise on X. The knee is the upper
// end of the first steep segment; the point before it is the last one on the flat part.
func Knee(points []Point, threshold float64) KneeResult {
	res := KneeResult{Method: fmt.Sprintf("slope>%gms/rps", threshold)}
	if len(points) < 2 {
		return res
	}
	useAchieved := true
	for _, p := range points {
		if !(p.Achieved > 0) {
			useAchieved = false
		}
	}
	idx := byX(points)
	for j := 1; j < len(idx); j++ {
		prev, cur := points[idx[j-1]], points[idx[j]]
		dq := cur.X - prev.X
		if useAchieved {
			dq = cur.Achieved - prev.Achieved
		}
		dms := durationToMS(cur.P99 - prev.P99)
		var slope float64
		switch {
		case dms <= 0:
			continue
		case dq <= 0:
			slope = math.Inf(1)
		default:
			slope = dms / dq
		}
		if slope > threshold {
			res.Found, res.Index, res.X, res.P99 = true, idx[j], cur.X, cur.P99
			return res
		}
	}
	return res
}

// MinKneeBend is how far (on axes normalised to [0, 1]) the curve must sag below its chord
// for KneeRobust to call the furthest point a knee. A straight line, or a curve that bends by
// less than this, has no knee.
const MinKneeBend = 0.1

// KneeRobust finds the knee as the point furthest below the chord from the first to the last
// point, on axes normalised to [0, 1] (Kneedle, Satopää et al. 2011, for a convex increasing
// curve). It needs no threshold in ms/QPS, so it does not depend on the units or the scale of
// the service, and a single noisy step does not trigger it: the knee is a property of the whole
// curve. The P99 is first made non-decreasing with a running maximum (latency at a higher load
// is not lower; a dip is sampling noise). X is the controlled variable. It needs at least three
// points and a bend of at least MinKneeBend.
func KneeRobust(points []Point) KneeResult {
	res := KneeResult{Method: "kneedle"}
	if len(points) < 3 {
		return res
	}
	idx := byX(points)
	x0, x1 := points[idx[0]].X, points[idx[len(idx)-1]].X
	ys := make([]float64, len(idx))
	run := math.Inf(-1)
	for j, i := range idx {
		run = math.Max(run, durationToMS(points[i].P99))
		ys[j] = run
	}
	y0, y1 := ys[0], ys[len(ys)-1]
	if !(x1 > x0) || !(y1 > y0) {
		return res
	}
	best, bestJ := 0.0, -1
	for j, i := range idx {
		xn := (points[i].X - x0) / (x1 - x0)
		yn := (ys[j] - y0) / (y1 - y0)
		if d := xn - yn; d > best {
			best, bestJ = d, j
		}
	}
	if bestJ < 0 || best < MinKneeBend {
		return res
	}
	i := idx[bestJ]
	res.Found, res.Index, res.X, res.P99 = true, i, points[i].X, points[i].P99
	return res
}
