package lab

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
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
