package loadgen

import (
	"context"
	"time"
)

// pacerQuantum is the shortest time between two wake-ups of the open loop's pacer: a request
// due sooner after the last wake-up than that waits for the quantum to pass and goes out with
// the others due by then, at most pacerQuantum late (its send lag, counted in its latency like
// any other). Waking for every request costs a precise sleep and a thread hand-off each: at
// 10,000 req/s (gaps of 100 us) the quantum halves the wake-ups and cuts the scheduler's CPU
// per request by about a third, while below 1/pacerQuantum = 5,000 req/s of even arrivals it
// never applies.
const pacerQuantum = 200 * time.Microsecond

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
