package loadgen

import (
	"context"
	"time"
)

// waitUntil blocks until target on the monotonic clock and reports true, or false when ctx is
// done first. It waits on the Go timer until fineWindow before target, then hands the last
// stretch to sleepFine: the runtime's timers can fire up to a millisecond late (the netpoller
// waits in whole milliseconds), which would be all of the send-lag budget, while a precise
// sleep costs one blocked thread for at most fineWindow. Neither phase spins.
func waitUntil(ctx context.Context, timer *time.Timer, target time.Time) bool {
	for {
		d := time.Until(target)
		if d <= 0 {
			return ctx.Err() == nil
		}
		if d <= fineWindow {
			sleepFine(d)
			continue
		}
		timer.Reset(d - fineWindow)
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
		}
	}
}
