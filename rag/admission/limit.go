package admission

import (
	"fmt"
	"math"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// Adaptive configures the adaptive concurrency limit: a cap on the requests running at once,
// below Workers, that follows the latency the backend behind the pool delivers. Requests report
// their latency and the latency they would have had on an idle backend (Pool.Observe); when the
// ratio of the two, the slowdown, exceeds Tolerance, the limit shrinks in proportion, and while
// it stays below and the limit is what holds requests back, the limit grows, as the gradient
// algorithms of Envoy's adaptive concurrency filter and Netflix's concurrency-limits do.
//
// It is what lets admission see a backlog that forms behind it: a pool of 256 workers in front
// of an LLM engine never queues, while every request it admits slows every other inside the
// engine. With the limit the excess waits in the pool's line, where the queue target sheds it
// within the target, and the engine runs as many requests as it serves within Tolerance times
// their unloaded latency. See docs/shedding.md.
type Adaptive struct {
	// Enabled caps the requests running at once by the adaptive limit (always at most
	// Workers). Off, Workers alone caps them.
	Enabled bool
	// Tolerance is the slowdown the limit aims at: the mean, over a window of finished requests,
	// of each one's latency divided by its latency on an idle backend. 0 means
	// DefaultTolerance.
	Tolerance float64
	// MinLimit is the lowest the limit goes; above Workers it means Workers. 0 means
	// DefaultMinLimit.
	MinLimit int
}

// Defaults and bounds of Adaptive.
const (
	// DefaultTolerance lets requests take up to 4 times their unloaded latency on average
	// before the limit shrinks. An LLM engine batches: a few requests at once cost each other
	// little, and its throughput keeps growing with the batch well past 2x. On the simulated
	// A100 with RAG prompts, 4x is about 14 requests at once and 85% of the engine's ceiling;
	// the rest of it would take four times the latency again (docs/shedding.md has the
	// figures). At the default serve's capacity (3 req/s of 64-token answers) requests run at
	// about 2x on average, so the limit leaves that load alone but for its bursts.
	DefaultTolerance = 4.0
	// MinTolerance bounds Tolerance from below: under 1.5 the limit would shed requests only
	// for sharing a batch.
	MinTolerance = 1.5
	// MaxTolerance bounds Tolerance from above: beyond 100 the limit would never act.
	MaxTolerance = 100.0
	// DefaultMinLimit keeps a few requests running whatever the latencies say, so that a
	// backend that is slow for another reason is still probed.
	DefaultMinLimit = 4
	// InitialLimit is where the limit starts (what runs is at most Workers): Netflix
	// concurrency-limits' initial limit. It grows while arrivals keep finding it full and the
	// requests run within the tolerance.
	InitialLimit = 20
)

// Tuning of the limit's updates.
const (
	// limitWindowSamples and limitWindow close a window of samples: at least this many
	// requests finished and at least this long since the window opened.
	limitWindowSamples = 8
	limitWindow        = 250 * time.Millisecond
	// limitMinGradient and limitMaxGradient bound one window's change: at most halved, at
	// most doubled (Envoy's bounds).
	limitMinGradient, limitMaxGradient = 0.5, 2.0
	// limitSmoothing is the share of the gradient's step taken when the limit grows: growth
	// is a probe, and a step too far costs every request admitted before the next window.
	limitSmoothing = 0.5
)

// withDefaults fills the zero fields of a.
func (a Adaptive) withDefaults() Adaptive {
	if a.Tolerance == 0 {
		a.Tolerance = DefaultTolerance
	}
	if a.MinLimit == 0 {
		a.MinLimit = DefaultMinLimit
	}
	return a
}

// validate reports what is wrong with a.
func (a Adaptive) validate() error {
	switch {
	case math.IsNaN(a.Tolerance) || (a.Tolerance != 0 && (a.Tolerance < MinTolerance || a.Tolerance > MaxTolerance)):
		return fmt.Errorf("%w: adaptive limit tolerance must be between %g and %g (0: the default %g), got %g", rag.ErrInvalidRequest, MinTolerance, MaxTolerance, DefaultTolerance, a.Tolerance)
	case a.MinLimit < 0 || a.MinLimit > MaxWorkers:
		return fmt.Errorf("%w: adaptive limit min_limit must be between 1 and %d (0: the default %d), got %d", rag.ErrInvalidRequest, MaxWorkers, DefaultMinLimit, a.MinLimit)
	}
	return nil
}

// limiter is the state of the adaptive limit. Its fields are guarded by the pool's mutex.
type limiter struct {
	// limit is the limit, at least the minimum; requests may run up to floor(limit), and no
	// more than the workers. It is kept apart from the workers, so that lowering them for a
	// while and raising them again leaves it where it was.
	limit   float64
	changed time.Time // when the limit last changed: requests that started before ran under another

	// heldSince is when the limit began holding arrivals back (every window since had one
	// turned away or queued by the limit), or zero.
	heldSince time.Time

	windowStart time.Time
	samples     int
	sum         float64   // of the window's slowdowns
	earliest    time.Time // start of the earliest request of the window
	held        bool      // an arrival of the window found every slot of the limit taken

	slowdown float64 // mean slowdown of the last closed window, 0 before one closed
}

// reset starts the limit over at its initial value.
func (l *limiter) reset(a Adaptive, now time.Time) {
	*l = limiter{limit: float64(max(InitialLimit, a.MinLimit)), changed: now, windowStart: now}
}

// atLeastMin raises the limit to a's minimum.
func (l *limiter) atLeastMin(a Adaptive) { l.limit = max(l.limit, float64(a.MinLimit)) }

// slots is the number of requests the limit lets run at once.
func (l *limiter) slots() int { return max(int(l.limit), 1) }

// hold records that an arrival found every slot of the limit taken.
func (l *limiter) hold(now time.Time) {
	l.held = true
	if l.heldSince.IsZero() {
		l.heldSince = now
	}
}

// observe adds the slowdown of one request that started at start to the window and, when the
// window is complete, moves the limit by the gradient tolerance / mean slowdown. It reports
// whether the limit changed.
//
//   - Only requests that started under the limit in force count: one admitted before the last
//     change says how the old limit served, and counting it would move the limit twice for one
//     cause (after a cut, the requests admitted before it are still slow).
//   - Down, whenever the mean exceeds the tolerance, by the whole gradient (at most halving):
//     the requests are late, and every one admitted meanwhile adds to it.
//   - Up, by half the gradient (at most doubling, at least one), only when the limit has held
//     arrivals back since before the window's requests started: a limit nobody reaches says
//     nothing about whether a higher one would be served in time, and requests admitted
//     before it filled up ran under a lighter load than the one now waiting (the last
//     requests of a light load, finishing as an overload begins, must not open the gate to
//     it).
func (l *limiter) observe(start time.Time, slowdown float64, a Adaptive, workers int, now time.Time) bool {
	if start.Before(l.changed) {
		return false
	}
	if l.samples == 0 || start.Before(l.earliest) {
		l.earliest = start
	}
	l.samples++
	l.sum += slowdown
	if l.samples < limitWindowSamples || now.Sub(l.windowStart) < limitWindow {
		return false
	}
	mean := l.sum / float64(l.samples)
	heldThroughout := l.held && !l.heldSince.IsZero() && !l.earliest.Before(l.heldSince)
	if !l.held {
		l.heldSince = time.Time{}
	}
	l.slowdown = mean
	l.windowStart, l.samples, l.sum, l.held = now, 0, 0, false
	gradient := min(max(a.Tolerance/mean, limitMinGradient), limitMaxGradient)
	before := l.slots()
	switch {
	case gradient < 1:
		l.limit = max(l.limit*gradient, float64(a.MinLimit))
	case gradient > 1 && heldThroughout:
		// Held means the limit, not the workers, turned arrivals away: it is below them.
		l.limit = min(max(l.limit+limitSmoothing*(l.limit*gradient-l.limit), float64(before+1)), float64(workers))
	default:
		return false
	}
	if l.slots() == before {
		return false
	}
	l.changed = now
	return true
}
