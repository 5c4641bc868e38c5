package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func ms(vs ...int) []time.Duration {
	out := make([]time.Duration, len(vs))
	for i, v := range vs {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

// TestMannWhitneyGreater checks the test against the formula worked by hand.
func TestMannWhitneyGreater(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		x, y []time.Duration
		want float64
	}{
		// U = 9, mean 4.5, variance 9/12·7: z = 4/sqrt(5.25) = 1.7457.
		{"apart", ms(1, 2, 3), ms(4, 5, 6), 0.0404278},
		// Mid-ranks 1.5, 3.5, 5.5 for three pairs of ties: U = 12.5, variance 16/12·(9 - 18/56).
		{"ties", ms(1, 1, 2, 4), ms(2, 3, 3, 5), 0.1198195},
		{"all alike", ms(2, 2), ms(2, 2), 1},
	}
	for _, tt := range tests {
		if got := mannWhitneyGreater(tt.x, tt.y); math.Abs(got-tt.want) > 1e-6 {
			t.Errorf("%s: p = %.7f, want %.7f", tt.name, got, tt.want)
		}
	}
}

func TestRankTests(t *testing.T) {
	t.Parallel()
	base := exponentialRun(1, 400, 0, 0)
	same := exponentialRun(2, 400, 0, 0)
	slower := exponentialRun(3, 400, 50*time.Millisecond, 0)
	regressed := func(ts []RankTest) []string {
		var out []string
		for _, t := range ts {
			if t.Regressed {
				out = append(out, t.Metric)
			}
		}
		return out
	}
	if got := regressed(RankTests(base, same, DefaultRegressionTolerance)); len(got) != 0 {
		t.Errorf("two runs of one distribution: %v regressed", got)
	}
	got := regressed(RankTests(base, slower, DefaultRegressionTolerance))
	if strings.Join(got, ",") != "ttft,e2el" {
		t.Errorf("50 ms slower TTFT: %v regressed, want ttft and e2el (TPOT does not move)", got)
	}

	// The per-request file reads back as the run it records.
	var buf bytes.Buffer
	if err := WriteDetailedJSONL(&buf, base); err != nil {
		t.Fatal(err)
	}
	back, err := ReadRequests(&buf)
	if err != nil {
		t.Fatal(err)
	}
	a, b := Summarize(base, Options{}), Summarize(back, Options{})
	if len(back.Records) != 400 || a.Completed != b.Completed || a.Stats[0].Percentiles[2] != b.Stats[0].Percentiles[2] {
		t.Errorf("read back %d records, %d completed (want %d), P95 TTFT %+v (want %+v)", len(back.Records), b.Completed, a.Completed,
			b.Stats[0].Percentiles[2], a.Stats[0].Percentiles[2])
	}
	if _, err := ReadRequests(strings.NewReader(`{"schema":"ragtail.bench/v1"}`)); err == nil {
		t.Error("a bench file read as requests")
	}
}
