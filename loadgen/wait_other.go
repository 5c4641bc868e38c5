//go:build !linux

package loadgen

import "time"

// fineWindow is 0 off Linux: waitUntil uses the Go timer alone.
const fineWindow = 0

func lockPacer() (unlock func()) { return func() {} }

// sleepFine is never reached with a zero fineWindow; it waits on a timer for completeness.
func sleepFine(d time.Duration) { <-time.NewTimer(d).C }
