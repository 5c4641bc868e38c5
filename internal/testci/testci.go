// Package testci decides what a test that cannot run does: on a developer's machine it skips,
// with the reason; under CI (the environment variable CI is true, as CI systems set it) it
// fails with the reason, since CI installs every peer a test needs and gives the timing tests
// the machine to themselves, so a skip there would hide a check that did not run.
package testci

import (
	"os"
	"strconv"
	"testing"
)

// Running reports whether the tests run under CI: CI is set to a true value (true, 1, ...).
func Running() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// Skip skips tb with the formatted reason, or under CI fails it with that reason.
func Skip(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if Running() {
		tb.Fatalf("would skip, but a skip under CI (CI=true) is a failure: "+format, args...)
		return
	}
	tb.Skipf(format, args...)
}
