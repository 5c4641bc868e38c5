//go:build !unix

package loadgen

// openFileLimit is unknown off Unix: the ceiling alone applies.
func openFileLimit() (uint64, bool) { return 0, false }
