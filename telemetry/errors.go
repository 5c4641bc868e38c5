package telemetry

import (
	"log/slog"
	"sync"
	"time"
)

// ErrorLimiter is an otel.ErrorHandler that logs at most one line per interval, so a telemetry
// backend that is down costs one log line, not one per failed export. The line counts the
// errors suppressed since the previous one. It is safe for concurrent use.
type ErrorLimiter struct {
	logger   *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
	total      int
}

// NewErrorLimiter returns an ErrorLimiter logging to logger at most once per interval, reading
// time from now.
func NewErrorLimiter(logger *slog.Logger, interval time.Duration, now func() time.Time) *ErrorLimiter {
	return &ErrorLimiter{logger: logger, interval: interval, now: now}
}

// Handle implements otel.ErrorHandler.
func (h *ErrorLimiter) Handle(err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	h.total++
	now := h.now()
	if !h.last.IsZero() && now.Sub(h.last) < h.interval {
		h.suppressed++
		h.mu.Unlock()
		return
	}
	suppressed := h.suppressed
	h.suppressed = 0
	h.last = now
	h.mu.Unlock()
	h.logger.Warn("telemetry export failing; requests are not affected, spans and metrics are dropped",
		"err", err, "suppressed_since_last_report", suppressed, "next_report_in", h.interval)
}

// Errors returns how many errors Handle has been given.
func (h *ErrorLimiter) Errors() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}
