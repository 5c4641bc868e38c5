package loadgen

import "fmt"

// MaxInFlightCeiling is the most requests the open loop keeps in flight by default (when
// Config.Concurrency is 0). Each one holds a sender goroutine and a connection (a file
// descriptor, buffers, two transport goroutines and the GC's headroom over them: about 100 KB
// of RSS; 113 to 134 MB peak with the 1,024 in flight at 10,000 req/s), so when the target
// falls behind the ceiling bounds the generator's memory, instead of letting it grow with the
// backlog until the machine runs out of memory or descriptors.
const MaxInFlightCeiling = 1024

// fdReserve is the descriptors left for everything else a run opens: its result files, DNS,
// the preflight and the runtime's own.
const fdReserve = 64

// DefaultMaxInFlight is the open loop's default cap on requests in flight: MaxInFlightCeiling,
// or fewer when the process's open-file limit (RLIMIT_NOFILE, which Go raises to its hard limit
// at start) leaves less room, keeping fdReserve descriptors aside; at least 1.
func DefaultMaxInFlight() int { return maxInFlightFor(openFileLimit()) }

// maxInFlightFor is the default cap under an open-file limit (known tells whether there is one).
func maxInFlightFor(limit uint64, known bool) int {
	if !known || limit >= MaxInFlightCeiling+fdReserve {
		return MaxInFlightCeiling
	}
	return int(max(limit, fdReserve+1) - fdReserve)
}

// MaxConcurrency is the most requests a run may keep in flight, or closed-loop users it may run,
// when Concurrency is given: one connection, so one file descriptor, each, under the process's
// open-file limit (RLIMIT_NOFILE) less fdReserve; no bound when the limit is unknown. Past it,
// requests fail to connect ("too many open files") instead of measuring the server.
func MaxConcurrency() (n int, limit uint64, known bool) {
	limit, known = openFileLimit()
	return maxConcurrencyFor(limit, known), limit, known
}

// maxConcurrencyFor is MaxConcurrency under an open-file limit (known tells whether there is one).
func maxConcurrencyFor(limit uint64, known bool) int {
	if !known || limit > 1<<40 {
		return 1 << 40
	}
	return int(max(limit, fdReserve+1) - fdReserve)
}

// CheckConcurrency refuses a Concurrency past MaxConcurrency with ErrTooConcurrent, saying the
// cap and why; closedLoop names the count as users rather than requests in flight.
func CheckConcurrency(concurrency int, closedLoop bool) error {
	n, limit, _ := MaxConcurrency()
	if concurrency <= n {
		return nil
	}
	what := "requests in flight"
	if closedLoop {
		what = "closed-loop users"
	}
	return fmt.Errorf("%w: %d %s need a connection, and so a file descriptor, each; the open-file limit (RLIMIT_NOFILE) is %d, "+
		"%d of them kept for files and DNS, so at most %d: give fewer, or raise the limit (ulimit -n)",
		ErrTooConcurrent, concurrency, what, limit, fdReserve, n)
}
