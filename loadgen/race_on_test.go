//go:build race

package loadgen_test

// raceEnabled reports whether the race detector is on: it slows every request about tenfold,
// so the tests against real servers lower their load to stay within what the machine can send.
const raceEnabled = true
