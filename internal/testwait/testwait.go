// Package testwait lets a test wait for a state that other goroutines bring about (a queue
// filled, a worker exited, a block released) instead of sleeping for a guessed time.
package testwait

import (
	"testing"
	"time"
)

// Timeout is how long For waits before it fails the test: long enough for a loaded CI machine
// running the race detector, since a test that passes never waits for it.
const Timeout = 10 * time.Second

// For polls cond every millisecond until it holds, and fails tb, naming what it waited for, if
// Timeout passes first.
func For(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", Timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}
