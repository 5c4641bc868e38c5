package httpapi

import (
	"sync"
	"time"
)

// logLimiter rate-limits repeated log lines of one kind, so that a client sending a flood of bad
// requests cannot turn the log into the bottleneck: per key, burst lines pass at once, then one
// per interval; the line that passes after a pause says how many were suppressed. Keys must come
// from a closed set (a status code, not a model name). It is safe for concurrent use.
type logLimiter struct {
	burst    int
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[int]*logBucket
}

type logBucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// Defaults of the request-failure log limiter: ten lines at once, then one a second per status.
const (
	logBurst    = 10
	logInterval = time.Second
)

func newLogLimiter(burst int, interval time.Duration, now func() time.Time) *logLimiter {
	return &logLimiter{burst: burst, interval: interval, now: now, keys: make(map[int]*logBucket)}
}

// allow reports whether a line of kind key may be written now and, if so, how many lines of
// that kind were suppressed since the last one written.
func (l *logLimiter) allow(key int) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil {
		b = &logBucket{tokens: float64(l.burst), last: now}
		l.keys[key] = b
	}
	b.tokens = min(float64(l.burst), b.tokens+float64(now.Sub(b.last))/float64(l.interval))
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}
