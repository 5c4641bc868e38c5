package telemetry

import "time"

// NewClock returns the service's clock: wall-clock time read once, at the call, and advanced by
// the monotonic clock from then on. Its readings are therefore
//
//   - comparable across the process: every span timestamp, profile window bound, Server-Timing
//     duration and X-Ragtail-Time header is a reading of the same clock, so a trace's window
//     selects exactly the profile samples taken during it;
//   - immune to wall-clock steps (NTP corrections, an operator's date -s) after start, which
//     would otherwise open gaps or overlaps between spans and profile windows;
//   - Unix times, so they can be compared with another host's clock once the offset between the
//     two is estimated (see the X-Ragtail-Time header).
//
// The readings carry Go's monotonic reading too, so differences between them are exact. Parts
// of the process that read time.Now directly (the end of the HTTP server span, timers inside
// libraries) agree with this clock to within microseconds unless the wall clock is stepped
// while the service runs. The clock is safe for concurrent use.
func NewClock() func() time.Time {
	anchor := time.Now()
	return func() time.Time { return anchor.Add(time.Since(anchor)) }
}
