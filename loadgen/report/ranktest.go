package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// RankAlpha is the one-sided level of the rank tests of report --compare on per-request files:
// a metric regressed when the Mann-Whitney test says NEW's values are larger with p below it
// (and the median moved by more than the tolerance). It is low because requests of one run are
// not independent (a burst slows its neighbours), which makes any test's p too small.
const RankAlpha = 0.001

// ReadRequests reads the per-request JSONL of bench --save-detailed (ragtail.requests/v1) as
// the run it records: its start, config and records, the duration to the last end, and the
// measured run from the first measured request when warmup requests are there. Summarize reads
// the result as it reads a live run's.
func ReadRequests(r io.Reader) (*loadgen.Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxJSONLLine)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read requests: %w", err)
		}
		return nil, errors.New("read requests: empty file")
	}
	var head requestsHead
	if err := json.Unmarshal(sc.Bytes(), &head); err != nil || head.Schema != SchemaRequests {
		return nil, fmt.Errorf("read requests: line 1 is not a %s header (want the file of bench --save-detailed)", SchemaRequests)
	}
	c := &checker{}
	res := &loadgen.Result{Config: head.Config.runInfo(c)}
	if c.err != nil {
		return nil, fmt.Errorf("read requests: %w", c.err)
	}
	if head.Start != "" {
		start, err := time.Parse(time.RFC3339Nano, head.Start)
		if err != nil {
			return nil, fmt.Errorf("read requests: start %q: %w", head.Start, err)
		}
		res.Start = start
	}
	warmup, firstMeasured := false, time.Duration(math.MaxInt64)
	for line := 2; sc.Scan(); line++ {
		var rec loadgen.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("read requests: line %d: %w", line, err)
		}
		if rec.End < 0 || rec.Intended < 0 || rec.End > 1e9*time.Second {
			return nil, fmt.Errorf("read requests: line %d: times out of range", line)
		}
		res.Duration = max(res.Duration, rec.End)
		if rec.Warmup {
			warmup = true
		} else if !rec.NotSent {
			firstMeasured = min(firstMeasured, rec.Intended)
		}
		res.Records = append(res.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read requests: %w", err)
	}
	if warmup && firstMeasured < math.MaxInt64 {
		res.MeasuredFrom = firstMeasured
	}
	return res, nil
}

// RankTest is a Mann-Whitney test of one metric of two runs' requests: are NEW's values larger?
type RankTest struct {
	Metric                string
	BaseN, NewN           int
	BaseMedian, NewMedian time.Duration
	P                     float64 // one-sided; NaN when either run has fewer than 20 values
	Regressed             bool
}

// rankMetrics are the per-request metrics the rank tests compare.
var rankMetrics = []string{MetricTTFT, MetricTPOT, MetricE2EL}

// RankTests compares the completed requests of two runs metric by metric (TTFT, TPOT, E2EL)
// with a one-sided Mann-Whitney U test (normal approximation, ties and continuity corrected):
// a metric regressed when p < RankAlpha and NEW's median exceeds BASE's by more than tolerance.
func RankTests(base, new *loadgen.Result, tolerance float64) []RankTest {
	out := make([]RankTest, 0, len(rankMetrics))
	for _, m := range rankMetrics {
		x, y := metricValues(base, m), metricValues(new, m)
		t := RankTest{Metric: m, BaseN: len(x), NewN: len(y), P: math.NaN()}
		if len(x) > 0 && len(y) > 0 {
			t.BaseMedian, t.NewMedian = median(x), median(y)
		}
		if len(x) >= 20 && len(y) >= 20 {
			t.P = mannWhitneyGreater(x, y)
			t.Regressed = t.P < RankAlpha && float64(t.NewMedian) > float64(t.BaseMedian)*(1+tolerance)
		}
		out = append(out, t)
	}
	return out
}

// metricValues are metric m of res's completed, measured requests.
func metricValues(res *loadgen.Result, m string) []time.Duration {
	var out []time.Duration
	for i := range res.Records {
		r := &res.Records[i]
		if r.Warmup || r.NotSent || !r.OK() || r.Intended < res.MeasuredFrom {
			continue
		}
		lat := latencies(r, outputTokens(r))
		switch {
		case m == MetricE2EL:
			out = append(out, lat.E2EL)
		case m == MetricTTFT && lat.HasTTFT:
			out = append(out, lat.TTFT)
		case m == MetricTPOT && lat.HasTPOT:
			out = append(out, lat.TPOT)
		}
	}
	return out
}

func median(v []time.Duration) time.Duration {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// mannWhitneyGreater is the one-sided p-value of the Mann-Whitney U test that y is
// stochastically larger than x: U of y from the pooled mid-ranks, its null mean nx·ny/2 and
// variance nx·ny/12·((n+1) - Σ(t³-t)/(n(n-1))) over the ties' sizes t, a continuity
// correction of 1/2, and the normal tail.
func mannWhitneyGreater(x, y []time.Duration) float64 {
	type obs struct {
		v   time.Duration
		isY bool
	}
	all := make([]obs, 0, len(x)+len(y))
	for _, v := range x {
		all = append(all, obs{v, false})
	}
	for _, v := range y {
		all = append(all, obs{v, true})
	}
	slices.SortFunc(all, func(a, b obs) int { return int(min(max(a.v-b.v, -1), 1)) })
	n, nx, ny := float64(len(all)), float64(len(x)), float64(len(y))
	var rankY, ties float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		mid := float64(i+j+1) / 2 // ranks i+1 .. j
		for k := i; k < j; k++ {
			if all[k].isY {
				rankY += mid
			}
		}
		if t := float64(j - i); t > 1 {
			ties += t*t*t - t
		}
		i = j
	}
	u := rankY - ny*(ny+1)/2
	variance := nx * ny / 12 * ((n + 1) - ties/(n*(n-1)))
	if variance <= 0 {
		return 1 // every value alike
	}
	z := (u - nx*ny/2 - 0.5) / math.Sqrt(variance)
	return 0.5 * math.Erfc(z/math.Sqrt2)
}

// WriteRankTests writes a line per rank test and returns how many regressed and were tested.
func WriteRankTests(w io.Writer, ts []RankTest) (regressed, tested int) {
	fmt.Fprintf(w, "rank tests on the per-request files (Mann-Whitney, one-sided, regressed at p < %g):\n", RankAlpha)
	for _, t := range ts {
		verdict := "ok"
		switch {
		case math.IsNaN(t.P):
			verdict = "n/a"
		case t.Regressed:
			verdict = "REGRESSED"
		}
		if !math.IsNaN(t.P) {
			tested++
		}
		if t.Regressed {
			regressed++
		}
		fmt.Fprintf(w, "  %-9s  %-24s base median %s ms (n=%d)  new median %s ms (n=%d)  p = %.3g\n", verdict, t.Metric,
			fmtMS(t.BaseMedian), t.BaseN, fmtMS(t.NewMedian), t.NewN, t.P)
	}
	return regressed, tested
}
