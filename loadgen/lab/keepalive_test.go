package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
)

func TestKeepalivePairs(t *testing.T) {
	ms := time.Millisecond
	arm := func(rtt, age time.Duration) KeepaliveArm { return KeepaliveArm{LinkRTT: rtt, MaxConnectionAge: age} }
	tests := []struct {
		name string
		arms []KeepaliveArm
		want []keepalivePair
	}{
		{"none", nil, nil},
		{"one complete pair", []KeepaliveArm{arm(20*ms, 2*time.Second), arm(20*ms, 0)}, []keepalivePair{{20 * ms, 0, 1}}},
		{"pairs sorted by round trip", []KeepaliveArm{arm(20*ms, 0), arm(20*ms, time.Second), arm(2*ms, time.Second), arm(2*ms, 0)},
			[]keepalivePair{{2 * ms, 2, 3}, {20 * ms, 1, 0}}},
		{"an arm without its partner is left out", []KeepaliveArm{arm(2*ms, time.Second), arm(20*ms, time.Second), arm(20*ms, 0)},
			[]keepalivePair{{20 * ms, 1, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := keepalivePairs(tt.arms)
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("pair %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestKeepaliveWhy: the verdict text follows the numbers, and says when the mechanism did not
// engage (no GOAWAY) rather than blaming the effect.
func TestKeepaliveWhy(t *testing.T) {
	ms := time.Millisecond
	ci := func(v, lo, hi time.Duration) report.PercentileStat {
		return report.PercentileStat{P: 99, Value: v, Lo: lo, Hi: hi, HasCI: true}
	}
	arms := []KeepaliveArm{{Name: "20ms link, max-age 2s", LinkRTT: 20 * ms, MaxConnectionAge: 2 * time.Second}, {Name: "20ms link, no max-age", LinkRTT: 20 * ms}}
	pairs := keepalivePairs(arms)
	withGoAways := map[string]float64{"connections": 15, "goaway_max_age": 15, "tls_handshakes": 15, "tls_handshake_ms": 600}
	tests := []struct {
		name     string
		maxAge   report.PercentileStat
		counters map[string]float64
		want     []string
		// underpowered: the arms held fewer requests than the rule's n
		underpowered bool
	}{
		{"reproduced", ci(400*ms, 350*ms, 450*ms), withGoAways, []string{"forced reconnects raised the tail", "+300.0 ms", "40.0 ms mean over 15 handshakes"}, false},
		{"overlap", ci(120*ms, 90*ms, 150*ms), withGoAways, []string{"no difference beyond the intervals although the reconnects happened", "+20.0 ms"}, false},
		{"no interval", report.PercentileStat{P: 99, Value: 400 * ms}, withGoAways, []string{"too few samples for both P99 intervals"}, false},
		{"no goaway", ci(100*ms, 90*ms, 110*ms), map[string]float64{}, []string{"sent no GOAWAY", "handshake none"}, false},
		{"underpowered", ci(400*ms, 350*ms, 450*ms), withGoAways, []string{"measured over the 20ms link", "+300.0 ms"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := []keepaliveArmResult{
				{variant: &Variant{Counters: tt.counters}, p99: tt.maxAge},
				{variant: &Variant{Counters: map[string]float64{}}, p99: ci(100*ms, 95*ms, 105*ms)},
			}
			out := compare(res[0].p99, res[1].p99)
			if tt.underpowered {
				out = Underpowered
			}
			why := keepaliveWhy(out, arms, res, pairs)
			for _, w := range tt.want {
				if !strings.Contains(why, w) {
					t.Errorf("%q does not say %q", why, w)
				}
			}
		})
	}
}
