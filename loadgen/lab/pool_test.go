package lab

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
)

// TestOutcomeOf checks goodput and the P99 over all offered requests: a shed request misses the
// SLO and counts as infinitely slow, so that a pool cannot improve its tail by dropping users.
func TestOutcomeOf(t *testing.T) {
	ms := time.Millisecond
	ok := func(d time.Duration) loadgen.Record { return loadgen.Record{Status: 200, End: d} }
	shed := loadgen.Record{Status: 503, ErrKind: "status", End: ms}
	var recs []loadgen.Record
	for i := range 300 {
		recs = append(recs, ok(time.Duration(i+1)*ms)) // 1..300 ms
	}
	t.Run("all answered", func(t *testing.T) {
		o := outcomeOf(recs, 150*ms)
		if o.offered != 300 || o.good != 150 {
			t.Errorf("offered %d good %d, want 300 and 150", o.offered, o.good)
		}
		if o.p99.Value != 297*ms { // nearest rank ceil(0.99*300) = 297
			t.Errorf("P99 %v, want 297ms", o.p99.Value)
		}
	})
	t.Run("shed ones count", func(t *testing.T) {
		with := slices.Clone(recs)
		for range 10 {
			with = append(with, shed)
		}
		o := outcomeOf(with, 150*ms)
		if o.offered != 310 || o.good != 150 {
			t.Errorf("offered %d good %d, want 310 and 150", o.offered, o.good)
		}
		if o.p99.Value != infSlow {
			t.Errorf("P99 %v: with 3%% shed the P99 falls on a shed request", o.p99.Value)
		}
		if got := fmtOffered(o.p99); !strings.HasPrefix(got, "∞ ms") {
			t.Errorf("fmtOffered = %q", got)
		}
	})
	t.Run("warmup and unsent steps are not offered", func(t *testing.T) {
		o := outcomeOf([]loadgen.Record{{Status: 200, Warmup: true}, {NotSent: true}, ok(ms)}, 10*ms)
		if o.offered != 1 || o.good != 1 {
			t.Errorf("offered %d good %d, want 1 and 1", o.offered, o.good)
		}
	})
}

func TestPoolArms(t *testing.T) {
	arms := poolArms(2)
	if len(arms) != 3 {
		t.Fatalf("%d arms", len(arms))
	}
	if *arms[0].adm.Workers != 1 || *arms[0].adm.Queue != -1 {
		t.Errorf("risky arm %+v: want core 1 with an unbounded queue", arms[0].adm)
	}
	if *arms[1].adm.Workers != 4 || *arms[1].adm.Queue != 4 || *arms[1].adm.Policy != "reject" {
		t.Errorf("advice arm %+v: want 2 x 2 CPUs workers, a queue of as many, reject", arms[1].adm)
	}
}

// TestKeyQuantile checks that the hot keys' P99 is read from the hot keys' requests alone, and
// the P99.5 of all keys from all of them.
func TestKeyQuantile(t *testing.T) {
	hot := hotSet()
	if len(hot) != hotKeys || !hot["doc-00000#0"] || hot[fmt.Sprintf("doc-%05d#0", hotKeys)] {
		t.Fatalf("hot set %d keys, want the first %d", len(hot), hotKeys)
	}
	var recs []loadgen.Record
	for i := range 400 {
		recs = append(recs, loadgen.Record{Status: 200, Key: "doc-00001#0", End: time.Millisecond * time.Duration(1+i%10)})
		recs = append(recs, loadgen.Record{Status: 200, Key: "doc-00500#0", End: time.Second})
	}
	got, n := keyQuantile(recs, func(k string) bool { return hot[k] }, 0.99)
	if !got.HasCI || n != 400 || got.P != 99 || got.Value != 10*time.Millisecond || got.Hi > 10*time.Millisecond {
		t.Errorf("hot P99 %+v of %d: want 10ms from the 400 hot requests only", got, n)
	}
	// Half the 800 requests are cold and take 1 s: the P99.5 and its interval are cold ones.
	all, n := keyQuantile(recs, func(string) bool { return true }, 0.995)
	if !all.HasCI || n != 800 || all.Lo != time.Second {
		t.Errorf("P99.5 %+v of %d: want 1s from all 800 requests", all, n)
	}
}

// TestMissCost checks Little's law on the calibration: lookups at once over lookups per second.
func TestMissCost(t *testing.T) {
	tests := []struct {
		slots, capacity float64
		want            time.Duration
	}{
		{2, 88, 22727272 * time.Nanosecond},                       // 2 slots busy: 2/88 s
		{0, 160, 100 * time.Millisecond},                          // no slots: all 16 users at once
		{64, 320, time.Duration(float64(calibUsers) / 320 * 1e9)}, // more slots than users
	}
	for _, tt := range tests {
		if got := missCost(tt.slots, tt.capacity); got != tt.want {
			t.Errorf("missCost(%v, %v) = %v, want %v", tt.slots, tt.capacity, got, tt.want)
		}
	}
}

func TestGuardHeld(t *testing.T) {
	off := map[string]float64{"store_missing_lookups": 250}
	tests := []struct {
		name string
		on   map[string]float64
		want bool
	}{
		{"none pass", map[string]float64{"store_missing_lookups": 0, "bloom_blocked": 250}, true},
		{"one false positive in 250", map[string]float64{"store_missing_lookups": 1, "bloom_blocked": 249}, true},
		{"a tenth pass", map[string]float64{"store_missing_lookups": 25, "bloom_blocked": 225}, false},
		{"no invalid key offered", map[string]float64{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := guardHeld(tt.on, off, 0.01); got != tt.want {
				t.Errorf("guardHeld = %v, want %v", got, tt.want)
			}
		})
	}
	if guardHeld(map[string]float64{"bloom_blocked": 250}, map[string]float64{}, 0.01) {
		t.Error("guard held although no invalid key reached the store with it off")
	}
}

// TestKeyRate checks the pre-registered load rule of cache-penetration: the cold share of the
// 10%-cold arms alone takes half the calibrated store capacity, within [minKeyRate, maxKeyRate].
func TestKeyRate(t *testing.T) {
	tests := []struct {
		capacity, want float64
	}{
		{80, 400},   // 0.5 x 80 / 0.10
		{88.4, 442}, // rounded to a whole rate
		{1000, 500}, // a fast store: at most maxKeyRate
		{1, 10},     // a store of 1 lookup/s: at least minKeyRate
		{0, 10},     // nothing completed
		{math.NaN(), 10},
	}
	for _, tt := range tests {
		if got := keyRate(tt.capacity); got != tt.want {
			t.Errorf("keyRate(%v) = %v, want %v", tt.capacity, got, tt.want)
		}
	}
}

// TestCacheVerdictPower checks that the cold-key verdict is given only over the requests the
// power calculation asked for, and otherwise reads underpowered.
func TestCacheVerdictPower(t *testing.T) {
	ms := time.Millisecond
	stat := func(v, lo, hi time.Duration) report.PercentileStat {
		return report.PercentileStat{P: 99.5, Value: v, Lo: lo, Hi: hi, HasCI: true}
	}
	guardOn := map[string]float64{"store_missing_lookups": 1, "bloom_blocked": 249}
	guardOff := map[string]float64{"store_missing_lookups": 250}
	arms := func(n int) []*cacheRun {
		runs := make([]*cacheRun, len(cacheArms))
		for i := range runs {
			runs[i] = &cacheRun{v: &Variant{Name: cacheArms[i].name, Counters: map[string]float64{}}, tail: stat(ms, ms, 2*ms), n: n}
		}
		runs[armCold1].tail = stat(20*ms, 15*ms, 30*ms)
		runs[armGuardOn].v.Counters, runs[armGuardOff].v.Counters = guardOn, guardOff
		return runs
	}
	tests := []struct {
		name string
		n    int
		want string
	}{
		{"enough requests", 3268, Reproduced},
		{"one request short", 3267, Underpowered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, why := cacheVerdict(arms(tt.n), 3268, 25*ms); got != tt.want {
				t.Errorf("outcome %q (%s), want %q", got, why, tt.want)
			}
		})
	}
}
