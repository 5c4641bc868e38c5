package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
)

// demoBench is a bench whose TTFT and E2EL have the given P50 and P95.
func demoBench(p50, p95 report.PercentileStat) *report.Bench {
	p50.P, p95.P = 50, 95
	var stats []report.MetricStats
	for _, m := range []string{report.MetricTTFT, report.MetricE2EL} {
		stats = append(stats, report.MetricStats{Metric: m, Count: 100, Percentiles: []report.PercentileStat{p50, p95}})
	}
	return &report.Bench{Stats: stats}
}

func TestDemoConclusion(t *testing.T) {
	ms := time.Millisecond
	ci := func(v, lo, hi time.Duration) report.PercentileStat {
		return report.PercentileStat{Value: v, Lo: lo, Hi: hi, HasCI: true}
	}
	tests := []struct {
		name           string
		sync, async    [2]report.PercentileStat // P50, P95
		wantGap        time.Duration
		wantLo, wantHi time.Duration
		wantOverlap    bool
		wantText       string
	}{
		{"apart", [2]report.PercentileStat{ci(400*ms, 350*ms, 450*ms), ci(900*ms, 800*ms, 1000*ms)},
			[2]report.PercentileStat{ci(200*ms, 180*ms, 230*ms), ci(400*ms, 350*ms, 480*ms)},
			200 * ms, 120 * ms, 270 * ms, false, "the intervals do not overlap: sync is slower, beyond sampling error"},
		{"overlap", [2]report.PercentileStat{ci(400*ms, 300*ms, 500*ms), ci(900*ms, 800*ms, 1000*ms)},
			[2]report.PercentileStat{ci(380*ms, 320*ms, 450*ms), ci(850*ms, 700*ms, 950*ms)},
			20 * ms, -150 * ms, 180 * ms, true, "the intervals overlap, so this run cannot tell the two apart"},
		{"async slower", [2]report.PercentileStat{ci(200*ms, 180*ms, 230*ms), ci(400*ms, 350*ms, 480*ms)},
			[2]report.PercentileStat{ci(400*ms, 350*ms, 450*ms), ci(900*ms, 800*ms, 1000*ms)},
			-200 * ms, -270 * ms, -120 * ms, false, "async is slower"},
		{"no interval", [2]report.PercentileStat{{Value: 400 * ms}, {Value: 900 * ms}},
			[2]report.PercentileStat{ci(200*ms, 180*ms, 230*ms), ci(400*ms, 350*ms, 480*ms)},
			200 * ms, 0, 0, false, "too few samples for an interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &DemoResult{Modes: []DemoMode{
				{Coupling: "sync", Bench: demoBench(tt.sync[0], tt.sync[1])},
				{Coupling: "fanout", Bench: demoBench(tt.sync[0], tt.sync[1])},
				{Coupling: "async", Bench: demoBench(tt.async[0], tt.async[1])},
			}}
			gaps := r.Gaps()
			if len(gaps) != 4 {
				t.Fatalf("%d gaps, want TTFT and E2EL at P50 and P95", len(gaps))
			}
			g := gaps[0]
			if g.Metric != report.MetricTTFT || g.P != 50 || g.Gap != tt.wantGap || g.GapLo != tt.wantLo || g.GapHi != tt.wantHi || g.Overlap != tt.wantOverlap {
				t.Errorf("gap %+v, want %v [%v, %v] overlap %v", g, tt.wantGap, tt.wantLo, tt.wantHi, tt.wantOverlap)
			}
			lines := r.Conclusion()
			if len(lines) != 4 || !strings.HasPrefix(lines[0], "TTFT P50: sync") || !strings.Contains(lines[0], tt.wantText) {
				t.Errorf("conclusion %q: want its first line about TTFT P50 to say %q", lines, tt.wantText)
			}
			var out strings.Builder
			if err := WriteDemo(&out, r); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "Conclusion") || !strings.Contains(out.String(), lines[3]) {
				t.Errorf("WriteDemo does not end with the conclusion:\n%s", out.String())
			}
		})
	}
}

func TestDemoConclusionWithoutAsync(t *testing.T) {
	sync := DemoMode{Coupling: "sync", Bench: demoBench(report.PercentileStat{}, report.PercentileStat{})}
	r := &DemoResult{Modes: []DemoMode{sync, {Coupling: "fanout"}, {Coupling: "async"}}} // the async run failed
	if got := r.Conclusion(); len(got) != 1 || !strings.HasPrefix(got[0], "No conclusion") {
		t.Errorf("conclusion %q, want no conclusion", got)
	}
	one := &DemoResult{Modes: []DemoMode{sync}} // --coupling sync
	if got := one.Conclusion(); len(got) != 1 || !strings.HasPrefix(got[0], "One coupling mode driven (sync)") {
		t.Errorf("conclusion of one mode %q", got)
	}
}

func TestDemoConfigCouplings(t *testing.T) {
	ok := DemoConfig{Rate: 3, Duration: time.Second, MaxTokens: 8}
	for _, tt := range []struct {
		modes   []string
		wantErr bool
	}{
		{nil, false}, {[]string{"async"}, false}, {[]string{"sync", "async"}, false},
		{[]string{"eventual"}, true}, {[]string{"sync", "sync"}, true},
	} {
		c := ok
		c.Couplings = tt.modes
		if err := c.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("couplings %q: %v", tt.modes, err)
		}
	}
}
