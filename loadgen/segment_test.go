package loadgen_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/shape"
)

func drain(w loadgen.Workload, limit int) []loadgen.Item {
	var out []loadgen.Item
	for limit <= 0 || len(out) < limit {
		item, ok := w.Next()
		if !ok {
			break
		}
		out = append(out, item)
	}
	return out
}

func poissonWorkload(tb testing.TB, rate float64, sessions bool) loadgen.Workload {
	tb.Helper()
	p, err := shape.Poisson(rate, 42)
	if err != nil {
		tb.Fatal(err)
	}
	if sessions {
		src, err := shape.SyntheticSessions(shape.SessionConfig{Think: time.Second}, 42)
		if err != nil {
			tb.Fatal(err)
		}
		return shape.Sessions(p, src)
	}
	src, err := shape.Synthetic([]shape.Length{{Min: 10, Max: 20}}, 42)
	if err != nil {
		tb.Fatal(err)
	}
	return shape.Open(p, src)
}

func TestSegmentsUnionIsTheSchedule(t *testing.T) {
	t.Parallel()
	// n hosts each build the seeded schedule and keep their share: merged back in order of
	// intended time, the shares are the single-host schedule item for item.
	const total = 5000
	for _, sessions := range []bool{false, true} {
		for _, n := range []int{1, 2, 3, 4, 7} {
			want := drain(poissonWorkload(t, 100, sessions), total)
			shares := make([][]loadgen.Item, n)
			for i := range n {
				shares[i] = drain(loadgen.Segment(poissonWorkload(t, 100, sessions), loadgen.SegmentOf{Index: i, Count: n}, total, 0), 0)
			}
			var got []loadgen.Item
			next := make([]int, n)
			for len(got) < total {
				best := -1
				for i := range n {
					if next[i] < len(shares[i]) && (best < 0 || shares[i][next[i]].At < shares[best][next[best]].At) {
						best = i
					}
				}
				if best < 0 {
					break
				}
				got = append(got, shares[best][next[best]])
				next[best]++
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("sessions %v, %d segments: the union of the shares (%d items) is not the schedule (%d)", sessions, n, len(got), len(want))
			}
			for i, s := range shares {
				// Each share holds about total/n items: binomial, sd sqrt(total p (1-p)).
				p := 1 / float64(n)
				if sd := math.Sqrt(total * p * (1 - p)); math.Abs(float64(len(s))-total*p) > 5*sd+0.5 {
					t.Errorf("sessions %v, segment %d/%d: %d items, want about %.0f", sessions, i, n, len(s), total*p)
				}
			}
		}
	}
}

func TestSegmentOfPoissonIsPoisson(t *testing.T) {
	t.Parallel()
	// A share of 1/4 of a Poisson process of rate 400 is Poisson of rate 100: its gaps have mean
	// 10 ms and a coefficient of variation of 1. With about 5,000 gaps, the standard error of
	// each is about 1.4%; allow 5 of them.
	items := drain(loadgen.Segment(poissonWorkload(t, 400, false), loadgen.SegmentOf{Index: 1, Count: 4}, 20000, 0), 0)
	var sum, sq float64
	for i := 1; i < len(items); i++ {
		g := (items[i].At - items[i-1].At).Seconds()
		sum += g
		sq += g * g
	}
	n := float64(len(items) - 1)
	mean := sum / n
	cv := math.Sqrt(sq/n-mean*mean) / mean
	if tol := 5 / math.Sqrt(n); math.Abs(mean/0.01-1) > tol || math.Abs(cv-1) > 2*tol {
		t.Errorf("gaps: mean %.4f s (want 0.01), CV %.3f (want 1), over %.0f gaps", mean, cv, n)
	}
}

func TestParseSegment(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in string
		ok bool
	}{{"0/4", true}, {"3/4", true}, {" 1 / 2 ", true}, {"4/4", false}, {"-1/4", false}, {"1/0", false}, {"1", false}, {"a/b", false}} {
		s, err := loadgen.ParseSegment(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseSegment(%q) = %v, %v", tt.in, s, err)
		}
	}
}

func TestNewRunInfo(t *testing.T) {
	t.Parallel()
	seg := &loadgen.SegmentOf{Index: 1, Count: 4}
	got := loadgen.NewRunInfo("http://h/v1/chat/completions", "m", "gamma(rate=5, shape=0.5)", 5, 7).
		WithLimits(8, 100, 256).WithBurstiness(0.5).WithSchedule("abc", seg)
	want := loadgen.RunInfo{URL: "http://h/v1/chat/completions", Model: "m", Shape: "gamma(rate=5, shape=0.5)",
		RequestRate: 5, Burstiness: 0.5, Concurrency: 8, NumPrompts: 100, MaxTokens: 256, Seed: 7,
		Segment: seg, ScheduleHash: "abc"}
	if got != want {
		t.Errorf("NewRunInfo:\n%+v\nwant\n%+v", got, want)
	}
}
