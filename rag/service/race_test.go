//go:build race

package service

// raceEnabled reports whether the race detector is on: it slows the service several times over,
// so latency figures measured under it say nothing about the service.
const raceEnabled = true
