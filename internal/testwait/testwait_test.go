package testwait_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
)

// TestForReturnsOnceCondHolds: For returns as soon as another goroutine makes cond hold, having
// polled more than once.
func TestForReturnsOnceCondHolds(t *testing.T) {
	t.Parallel()
	var done atomic.Bool
	var polls atomic.Int64
	time.AfterFunc(20*time.Millisecond, func() { done.Store(true) })
	testwait.For(t, "the flag", func() bool {
		polls.Add(1)
		return done.Load()
	})
	if polls.Load() < 2 {
		t.Errorf("cond polled %d times, want at least 2 (it held only after 20 ms)", polls.Load())
	}
}

// recorder is a testing.TB that records a failure instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r) // as t.Fatalf ends the goroutine, so For does not go on polling
}

// TestForFailsAfterTimeout: a cond that never holds fails the test once Timeout has passed,
// not before.
func TestForFailsAfterTimeout(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("For did not fail the test through Fatalf (recovered %v)", p)
			}
		}()
		testwait.For(r, "nothing", func() bool { return false })
	}()
	if waited := time.Since(start); waited < testwait.Timeout {
		t.Errorf("For failed after %v, before its timeout of %v", waited, testwait.Timeout)
	}
	if r.failed == "" {
		t.Error("For returned without failing")
	}
}
