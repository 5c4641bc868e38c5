package loadgen_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// sleeper answers every request after d, or when ctx ends.
type sleeper struct{ d time.Duration }

func (s sleeper) Do(ctx context.Context, _ *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	rec.Sent = time.Since(origin)
	t := time.NewTimer(s.d)
	defer t.Stop()
	select {
	case <-t.C:
		rec.Status = 200
	case <-ctx.Done():
		rec.ErrKind, rec.Err = loadgen.ErrKindCanceled, ctx.Err().Error()
	}
	rec.End = time.Since(origin)
}

func closedLoopConfig(tb testing.TB, users int, duration time.Duration) loadgen.Config {
	tb.Helper()
	prompts, err := shape.Synthetic([]shape.Length{shape.Short}, 1)
	if err != nil {
		tb.Fatal(err)
	}
	arrivals, err := shape.Constant(1e9)
	if err != nil {
		tb.Fatal(err)
	}
	return loadgen.Config{Workload: shape.Open(arrivals, prompts), Client: sleeper{20 * time.Millisecond},
		ClosedLoop: true, Concurrency: users, Duration: duration, DrainTimeout: 300 * time.Millisecond}
}

// TestClosedLoopUsersWithinTheOpenFileLimit asks for ten million closed-loop users for 2 s: the
// run is refused at once, saying the open-file limit and the most users it allows (it used to
// start every user before the duration's timer, run 22.5 s and hold 20,000 descriptors). As
// many users as the limit allows (20,000 at most here) run, and stop at the duration.
func TestClosedLoopUsersWithinTheOpenFileLimit(t *testing.T) {
	most, limit, known := loadgen.MaxConcurrency()
	if !known {
		t.Skip("no open-file limit on this platform")
	}
	t.Run("ten million users", func(t *testing.T) {
		start := time.Now()
		_, err := loadgen.Run(context.Background(), closedLoopConfig(t, max(10_000_000, most+1), 2*time.Second))
		if !errors.Is(err, loadgen.ErrTooConcurrent) {
			t.Fatalf("Run = %v, want %v", err, loadgen.ErrTooConcurrent)
		}
		for _, want := range []string{"RLIMIT_NOFILE", fmt.Sprintf("is %d", limit), fmt.Sprintf("at most %d", most), "ulimit -n"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("refusing took %v", d)
		}
	})
	t.Run("as many users as allowed", func(t *testing.T) {
		const duration = 500 * time.Millisecond
		users := min(most, 20_000)
		start := time.Now()
		res, err := loadgen.Run(context.Background(), closedLoopConfig(t, users, duration))
		if err != nil {
			t.Fatal(err)
		}
		// The duration, the drain of 300 ms, and a second for a busy machine.
		if d := time.Since(start); d > duration+300*time.Millisecond+time.Second {
			t.Errorf("%d users for %v ran %v", users, duration, d)
		}
		for _, r := range res.Records {
			if r.Intended >= duration {
				t.Fatalf("request %d intended at %v, after the duration", r.Index, r.Intended)
			}
		}
	})
}
