//go:build race

package main

// raceEnabled tells tests that the race detector slows the code they time or load: the
// profiles test then plants less CPU work so that the machine is not saturated.
const raceEnabled = true
