//go:build unix

package loadgen

import "syscall"

// openFileLimit returns the soft limit on open files; false when there is none.
func openFileLimit() (uint64, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false
	}
	cur := uint64(rl.Cur) //nolint:unconvert // Rlimit.Cur is int64 on some Unixes
	return cur, cur != ^uint64(0)
}
