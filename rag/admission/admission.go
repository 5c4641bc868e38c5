// Package admission bounds how many requests run the RAG pipeline at once. A Pool has a fixed
// number of worker slots, a FIFO queue in front of them, a queue timeout, and a policy for the
// moment the queue is full: shed the request at once (rag.ErrOverloaded, a 503 with Retry-After)
// or let it wait anyway. A queue target sizes the line from the measured service time, so that
// under sustained overload the excess is shed on arrival, or as soon as it has waited past the
// target, rather than after the queue timeout (Config.QueueTarget). An adaptive concurrency
// limit (Config.Adaptive) lowers the slots in use below the workers when the requests' latency,
// reported against their latency on an idle backend (Pool.Observe), shows a backlog behind the
// pool.
//
// It is the knob of PITFALLS.md §5 ("thread-pool configuration"): a bounded queue with a
// monitored rejection policy keeps the tail bounded under bursts, while a tiny pool, an
// unbounded queue or no timeout turn a burst into minutes of queueing. Every acquire reports how
// long it waited, and Stats exposes in-flight, queued and shed counts for the
// rag_admission_* metrics.
package admission

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// Policy says what happens to a request that finds every worker busy and the queue full.
type Policy string

// The queue-full policies.
const (
	// PolicyReject sheds the request at once with an error matching rag.ErrOverloaded. With a
	// bounded queue this is the setting PITFALLS.md §5 advises: overload shows up as a counted,
	// monitorable rejection rate instead of an ever-growing wait.
	PolicyReject Policy = "reject"
	// PolicyWait lets the request wait anyway, in the same FIFO line, as a blocked caller does:
	// QueueCapacity is then a soft bound that sheds nothing, and only QueueTimeout and the
	// request's context limit the wait. Overload is absorbed as latency rather than errors.
	PolicyWait Policy = "wait"
)

// Unbounded is the QueueCapacity of a queue without limit: the risky setting of PITFALLS.md §5,
// under which a burst larger than the pool can drain is queued in full and every later request
// inherits its wait.
const Unbounded = -1

// Config sizes a Pool. The zero value is not valid (it has no workers); start from
// DefaultConfig.
type Config struct {
	// Workers is the number of requests that may run at once (at least 1).
	Workers int
	// QueueCapacity is how many requests may wait for a worker: 0 means no queue (a request that
	// finds every worker busy is rejected, or waits under PolicyWait), Unbounded (-1) means no
	// limit.
	QueueCapacity int
	// QueueTimeout is the longest a request waits for a worker before it is shed with an error
	// matching rag.ErrOverloaded; 0 means it waits until its context is done.
	QueueTimeout time.Duration
	// Policy is what happens when the queue is full; "" means PolicyReject.
	Policy Policy
	// QueueTarget sizes the queue from measured service time (PolicyReject only): when every
	// worker is busy, an arriving request whose predicted wait (its place in line times the mean
	// service time, divided by Workers) exceeds QueueTarget is shed at once with an error
	// matching rag.ErrOverloaded, instead of being queued to time out QueueTimeout later.
	// AutoQueueTarget (the default) uses half the measured mean service time, at most
	// MaxAutoQueueTarget; QueueTargetOff (0) sheds only when the queue is full. A waiter that
	// has waited longer than the target when a slot frees is shed in favour of a younger one
	// (dispatchLocked). A pool that has not yet seen a request finish sheds nothing by target.
	QueueTarget time.Duration
	// Adaptive caps the requests running at once below Workers by the latency they are served
	// with (see Adaptive). With it on, "every worker busy" above means every slot of the limit.
	Adaptive Adaptive
}

// Queue target settings and bounds.
const (
	// QueueTargetOff turns the predicted-wait shedding off.
	QueueTargetOff time.Duration = 0
	// AutoQueueTarget sets the target to half the measured mean service time: under overload
	// an admitted request then waits about half a service time, so its end-to-end latency stays
	// within 1.5x of an unloaded one, and the excess learns at once that it is shed.
	AutoQueueTarget time.Duration = -1
	// MaxAutoQueueTarget caps the automatic target: a request shed from the line is shed after
	// waiting the target, and a 503 should come well within a second (the time its
	// Retry-After asks the client to wait).
	MaxAutoQueueTarget = 500 * time.Millisecond
	// MaxQueueTarget bounds a fixed QueueTarget.
	MaxQueueTarget = 10 * time.Minute
)

// Upper bounds of Config, so that a typo cannot make the pool hold unbounded memory or waits.
const (
	MaxWorkers       = 1 << 16
	MaxQueueCapacity = 1 << 20
	MaxQueueTimeout  = time.Hour
)

// ParseQueueTarget reads a queue target as FormatQueueTarget writes it: "auto", "off" (or "0")
// or a duration such as "250ms".
func ParseQueueTarget(s string) (time.Duration, error) {
	switch strings.TrimSpace(s) {
	case "auto":
		return AutoQueueTarget, nil
	case "off", "0":
		return QueueTargetOff, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: queue target %q: want auto, off or a positive duration such as 250ms", rag.ErrInvalidRequest, s)
	}
	return d, nil
}

// FormatQueueTarget writes d as ParseQueueTarget reads it.
func FormatQueueTarget(d time.Duration) string {
	switch d {
	case AutoQueueTarget:
		return "auto"
	case QueueTargetOff:
		return "off"
	}
	return d.String()
}

// DefaultConfig returns the configuration the service starts with:
//
//   - Workers 256: the pool sits in front of an LLM engine that batches up to 256 sequences
//     (vLLM's max-num-seqs, the engine setting PITFALLS.md §7 cites). Requests beyond that would
//     only wait inside the engine, where they can be neither seen nor shed; fewer would leave
//     batch slots idle. The "2 x CPUs" advice of §5 is for CPU-bound pools, and a pipeline
//     request spends nearly all its time waiting on the engine, not on a CPU.
//   - QueueCapacity 1024: four full batches. It absorbs a burst of a few seconds at the engine's
//     service rate, yet keeps the worst queueing delay bounded and the memory held by waiting
//     requests small.
//   - QueueTimeout 30 s: a request that has waited that long has already missed any interactive
//     latency objective; shedding it frees its place for one that can still make it, and the
//     client gets a 503 it can retry instead of a hung connection.
//   - PolicyReject: when the bounded queue is full, shed at once (§5's monitored rejection).
//   - QueueTarget AutoQueueTarget: the queue of 1024 holds minutes of work at the engine's
//     service rate, so under sustained overload every request would wait the whole 30 s and
//     then get a 503. Sizing the line from measured service time sheds the excess on arrival,
//     within milliseconds, while admitted requests wait about half a service time.
//   - Adaptive on, with its defaults: 256 requests at once are far more than an engine serves
//     in time when each brings a long prompt to prefill; the limit finds how many it does
//     (it takes effect only once requests report their latency, see Pool.Observe).
func DefaultConfig() Config {
	return Config{Workers: 256, QueueCapacity: 1024, QueueTimeout: 30 * time.Second, Policy: PolicyReject, QueueTarget: AutoQueueTarget,
		Adaptive: Adaptive{Enabled: true, Tolerance: DefaultTolerance, MinLimit: DefaultMinLimit}}
}

// Validate reports whether c is usable, with a message saying what to change.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1 || c.Workers > MaxWorkers:
		return fmt.Errorf("%w: admission workers must be at least 1 and at most %d, got %d", rag.ErrInvalidRequest, MaxWorkers, c.Workers)
	case c.QueueCapacity < Unbounded || c.QueueCapacity > MaxQueueCapacity:
		return fmt.Errorf("%w: admission queue capacity must be -1 (unbounded), 0 (no queue) or positive up to %d, got %d", rag.ErrInvalidRequest, MaxQueueCapacity, c.QueueCapacity)
	case c.QueueTimeout < 0 || c.QueueTimeout > MaxQueueTimeout:
		return fmt.Errorf("%w: admission queue timeout must be between 0 (waits until the request is cancelled) and %v, got %v", rag.ErrInvalidRequest, MaxQueueTimeout, c.QueueTimeout)
	case c.QueueTarget < AutoQueueTarget || c.QueueTarget > MaxQueueTarget:
		return fmt.Errorf("%w: admission queue target must be auto, off or a duration up to %v, got %v", rag.ErrInvalidRequest, MaxQueueTarget, c.QueueTarget)
	}
	switch c.Policy {
	case "", PolicyReject, PolicyWait:
	default:
		return fmt.Errorf("%w: admission policy %q: want reject or wait", rag.ErrInvalidRequest, c.Policy)
	}
	return c.Adaptive.validate()
}

func (c Config) withDefaults() Config {
	if c.Policy == "" {
		c.Policy = PolicyReject
	}
	c.Adaptive = c.Adaptive.withDefaults()
	return c
}

// Option configures a Pool.
type Option interface{ apply(*options) }

type options struct {
	now   func() time.Time
	timer func(time.Duration) (<-chan time.Time, func() bool)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithClock sets the clock queue waits are measured with (default time.Now), so that they line up
// with spans, profiles and Server-Timing on one clock.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(o *options) {
		if now != nil {
			o.now = now
		}
	})
}

// WithTimer sets how the pool waits for a queue timeout or target to pass: newTimer returns a
// channel that receives once d has passed on the pool's clock, and a func that stops it
// (default: time.NewTimer). With WithClock, it lets a test run the pool on a clock it moves by
// hand.
func WithTimer(newTimer func(d time.Duration) (c <-chan time.Time, stop func() bool)) Option {
	return optionFunc(func(o *options) {
		if newTimer != nil {
			o.timer = newTimer
		}
	})
}

func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Stats is a snapshot of a Pool's state and counters.
type Stats struct {
	Workers       int // configured worker slots
	QueueCapacity int // configured queue capacity (Unbounded for no limit)
	InFlight      int // requests holding a worker slot now
	Queued        int // requests waiting for a slot now

	// MeanService is the measured mean time a request holds its slot (an exponentially
	// weighted mean, 0 until one has finished), from which QueueTarget predicts waits.
	MeanService time.Duration

	// Limit is how many requests may run at once now: the adaptive limit when it is on, else
	// Workers. Slowdown is the mean slowdown (latency over unloaded latency) of the last
	// window of requests the adaptive limit saw (0 before the first).
	Limit    int
	Slowdown float64

	Admitted  uint64        // requests given a slot, in total
	Rejected  uint64        // requests shed by the queue target or on arrival to a full queue, in total
	TimedOut  uint64        // requests shed after waiting QueueTimeout, in total
	Cancelled uint64        // requests whose context ended before they got a slot, in total
	QueueWait time.Duration // total time admitted requests spent waiting, for the mean wait
}

// Pool is a bounded worker pool with a FIFO wait queue. It implements the pipeline's Admitter.
// It is safe for concurrent use; Resize may be called while requests wait.
type Pool struct {
	now   func() time.Time
	timer func(time.Duration) (<-chan time.Time, func() bool)

	mu       sync.Mutex
	cfg      Config
	inFlight int
	head     *waiter // oldest waiter; the queue is a doubly linked list so leaving is O(1)
	tail     *waiter
	queued   int

	admitted, rejected, timedOut, cancelled uint64
	queueWait                               atomic.Int64 // nanoseconds
	meanService                             time.Duration
	lim                                     limiter
}

// waiter is one queued request. ready is closed when it is granted a slot; granted is guarded by
// the pool's mutex.
type waiter struct {
	ready      chan struct{}
	enqueued   time.Time
	granted    bool
	shed       bool // taken out of the line because its predicted wait exceeds the target
	prev, next *waiter
}

// NewPool returns a pool configured by cfg.
func NewPool(cfg Config, opts ...Option) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{now: time.Now, timer: realTimer}
	for _, opt := range opts {
		opt.apply(&o)
	}
	p := &Pool{now: o.now, timer: o.timer, cfg: cfg.withDefaults()}
	p.lim.reset(p.cfg.Adaptive, p.now())
	return p, nil
}

// Config returns the pool's current configuration.
func (p *Pool) Config() Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// Resize replaces the pool's configuration at run time. More workers admit waiters at once, in
// FIFO order. Fewer workers take effect as running requests finish; none is interrupted. Requests
// already queued keep their place even if the new capacity is smaller, and keep the timeout they
// arrived with; the new capacity, timeout and policy apply to later arrivals. Turning the
// adaptive limit on starts it at InitialLimit; changing its settings or the workers keeps the
// limit reached (raised to a new minimum; the workers cap what runs, not the limit itself).
func (p *Pool) Resize(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.cfg.Adaptive.Enabled
	p.cfg = cfg.withDefaults()
	if p.cfg.Adaptive.Enabled && !was {
		p.lim.reset(p.cfg.Adaptive, p.now())
	}
	p.lim.atLeastMin(p.cfg.Adaptive)
	p.dispatchLocked()
	p.trimLocked()
	return nil
}

// Stats returns a snapshot of the pool's state and counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Workers: p.cfg.Workers, QueueCapacity: p.cfg.QueueCapacity,
		InFlight: p.inFlight, Queued: p.queued, MeanService: p.meanService,
		Limit: p.slotsLocked(), Slowdown: p.lim.slowdown,
		Admitted: p.admitted, Rejected: p.rejected, TimedOut: p.timedOut, Cancelled: p.cancelled,
		QueueWait: time.Duration(p.queueWait.Load()),
	}
}

// Acquire waits for a worker slot. It returns a release func to call when the request is done
// (calling it again does nothing), an error matching rag.ErrOverloaded if the request is shed,
// or ctx's error if ctx ends while it waits.
func (p *Pool) Acquire(ctx context.Context) (release func(), err error) {
	release, _, err = p.AcquireWait(ctx)
	return release, err
}

// AcquireWait is Acquire that also reports how long the request waited for its slot (or before
// it was shed or cancelled), for the admission stage timing and the queue-wait histogram.
func (p *Pool) AcquireWait(ctx context.Context) (release func(), wait time.Duration, err error) {
	if err := ctx.Err(); err != nil {
		p.mu.Lock()
		p.cancelled++
		p.mu.Unlock()
		return nil, 0, fmt.Errorf("wait for a worker: %w", err)
	}
	start := p.now()
	p.mu.Lock()
	// FIFO: a newcomer takes a free slot only if nobody is waiting. dispatchLocked keeps the
	// invariant that the queue is empty whenever a slot is free.
	if p.head == nil && p.inFlight < p.slotsLocked() {
		p.inFlight++
		p.admitted++
		p.mu.Unlock()
		return p.releaser(), p.now().Sub(start), nil
	}
	if p.cfg.Adaptive.Enabled && p.inFlight >= p.lim.slots() && p.lim.slots() < p.cfg.Workers {
		p.lim.hold(start) // the limit, not the workers, holds this request back
	}
	if p.cfg.Policy == PolicyReject && p.cfg.QueueCapacity != Unbounded && p.queued >= p.cfg.QueueCapacity {
		p.rejected++
		err := p.fullErrorLocked()
		p.mu.Unlock()
		return nil, p.now().Sub(start), err
	}
	target, predicted := p.predictLocked()
	if target > 0 && predicted > target {
		p.rejected++
		busy := p.busyLocked()
		p.mu.Unlock()
		return nil, p.now().Sub(start), fmt.Errorf("%w: %s and the predicted wait of %v exceeds the %v queue target: retry later, or raise the admission workers or queue_target", rag.ErrOverloaded, busy, predicted.Round(time.Millisecond), target.Round(time.Millisecond))
	}
	w := &waiter{ready: make(chan struct{}), enqueued: start}
	p.pushLocked(w)
	timeout := p.cfg.QueueTimeout
	p.mu.Unlock()

	// A waiter is shed once it has waited the queue target in force when it arrived, whether or
	// not a slot freed meanwhile: the target bounds the time to a 503 as well as the wait of
	// an admitted request, even while no request finishes (a burst before the first one does,
	// a limit that just shrank below the requests running).
	bound, why := timeout, abandonTimedOut
	if target > 0 && (bound == 0 || target < bound) {
		bound, why = target, abandonStale
	}
	var expired <-chan time.Time
	if bound > 0 {
		c, stop := p.timer(bound)
		defer stop()
		expired = c
	}
	select {
	case <-w.ready:
		if w.shed { // written before ready was closed
			return nil, p.now().Sub(start), p.shedError()
		}
		wait = p.now().Sub(start)
		p.queueWait.Add(int64(wait))
		return p.releaser(), wait, nil
	case <-expired:
		switch p.abandon(w, why) {
		case keptSlot:
			wait = p.now().Sub(start)
			p.queueWait.Add(int64(wait))
			return p.releaser(), wait, nil
		case wasShed:
			return nil, p.now().Sub(start), p.shedError()
		}
		return nil, p.now().Sub(start), fmt.Errorf("%w: no admission worker freed up within the %v queue timeout: retry later, or raise the admission workers or queue_timeout", rag.ErrOverloaded, timeout)
	case <-ctx.Done():
		if p.abandon(w, abandonCancelled) == wasShed {
			return nil, p.now().Sub(start), p.shedError()
		}
		return nil, p.now().Sub(start), fmt.Errorf("wait for a worker: %w", ctx.Err())
	}
}

func (p *Pool) shedError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	target, _ := p.predictLocked()
	return fmt.Errorf("%w: %s and the measured service time of %v predicts a wait beyond the %v queue target: retry later, or raise the admission workers or queue_target",
		rag.ErrOverloaded, p.busyLocked(), p.meanService.Round(time.Millisecond), target.Round(time.Millisecond))
}

// abandonment is what abandon found.
type abandonment int

const (
	left     abandonment = iota // w left the line
	keptSlot                    // w had been granted a slot and keeps it
	wasShed                     // w had been shed from the line
)

// abandonReason is why a waiter leaves the line before it was granted a slot.
type abandonReason int

const (
	abandonTimedOut  abandonReason = iota // its queue timeout fired
	abandonStale                          // it waited the queue target: shed
	abandonCancelled                      // its context ended
)

// abandon takes w out of the queue after its timeout or queue target fired, or its context
// ended. If a slot was granted to w in the meantime, a waiter whose time ran out keeps it (it
// did get a worker, so reporting overload would be false) and abandon returns keptSlot; a
// cancelled waiter hands the slot on to the next in line. A waiter that waited out the queue
// target is shed (wasShed), as dispatchLocked sheds one found stale at the head.
func (p *Pool) abandon(w *waiter, why abandonReason) abandonment {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.shed {
		return wasShed
	}
	if w.granted {
		if why != abandonCancelled {
			return keptSlot
		}
		p.admitted--
		p.inFlight--
		p.dispatchLocked()
	} else {
		p.removeLocked(w)
	}
	switch why {
	case abandonTimedOut:
		p.timedOut++
	case abandonStale:
		w.shed = true
		p.rejected++
		return wasShed
	default:
		p.cancelled++
	}
	return left
}

func (p *Pool) fullErrorLocked() error {
	if p.cfg.QueueCapacity == 0 {
		return fmt.Errorf("%w: %s and queueing is off: retry later, or raise the admission workers or queue_capacity", rag.ErrOverloaded, p.busyLocked())
	}
	return fmt.Errorf("%w: %s and the queue of %d is full: retry later, or raise the admission workers or queue_capacity", rag.ErrOverloaded, p.busyLocked(), p.cfg.QueueCapacity)
}

// slotsLocked is how many requests may run at once now: the adaptive limit when it is on (at
// most Workers), else Workers.
func (p *Pool) slotsLocked() int {
	if p.cfg.Adaptive.Enabled {
		return min(p.lim.slots(), p.cfg.Workers)
	}
	return p.cfg.Workers
}

// busyLocked says which slots are all taken, for the message of a 503.
func (p *Pool) busyLocked() string {
	if n := p.slotsLocked(); n < p.cfg.Workers {
		return fmt.Sprintf("all %d slots of the adaptive concurrency limit are taken (of %d workers; the limit grows while requests run within %gx their unloaded latency, and the last ones ran at %.1fx)",
			n, p.cfg.Workers, p.cfg.Adaptive.Tolerance, p.lim.slowdown)
	}
	return fmt.Sprintf("all %d admission workers are busy", p.cfg.Workers)
}

// Observe reports one request that has just finished: its latency, and what it would have been
// on an idle backend (the no-load baseline), for the adaptive limit; their ratio is the
// request's slowdown, and now minus latency its start. It does nothing when the limit is off
// or either duration is not positive. The service reports its simulated engine's requests;
// without reports the limit stays where it is.
func (p *Pool) Observe(latency, unloaded time.Duration) {
	if latency <= 0 || unloaded <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cfg.Adaptive.Enabled {
		return
	}
	now := p.now()
	if p.lim.observe(now.Add(-latency), float64(latency)/float64(unloaded), p.cfg.Adaptive, p.cfg.Workers, now) {
		p.dispatchLocked()
		p.trimLocked()
	}
}

// serviceWeight is the weight of the newest service time in the pool's mean: 1/8, so the mean
// follows a change of load within a few dozen requests without jumping at one slow one.
const serviceWeight = 8

// predictLocked returns the queue target in force and the predicted wait of a request joining
// the line now; a zero target means no prediction applies.
func (p *Pool) predictLocked() (target, predicted time.Duration) {
	if p.cfg.Policy != PolicyReject || p.meanService <= 0 {
		return 0, 0
	}
	target = p.cfg.QueueTarget
	if target == AutoQueueTarget {
		target = min(p.meanService/2, MaxAutoQueueTarget)
	}
	if target <= 0 {
		return 0, 0
	}
	// With every slot taken, slots free up at their number per mean service time on average, so
	// the request's place in line costs meanService/slots each.
	return target, time.Duration(p.queued+1) * p.meanService / time.Duration(p.slotsLocked())
}

// releaser returns the release func of one admitted request, which records how long it held
// the slot. It is idempotent: a second call must not free a slot held by someone else.
func (p *Pool) releaser() func() {
	var released atomic.Bool
	admitted := p.now()
	return func() {
		if !released.CompareAndSwap(false, true) {
			return
		}
		held := p.now().Sub(admitted)
		p.mu.Lock()
		if p.meanService == 0 {
			p.meanService = max(held, 1)
		} else {
			p.meanService += (held - p.meanService) / serviceWeight
			p.meanService = max(p.meanService, 1)
		}
		p.inFlight--
		p.dispatchLocked()
		p.trimLocked()
		p.mu.Unlock()
	}
}

// trimLocked sheds the newest waiters while the last one's predicted wait exceeds the target:
// the line built up before the service time was known, or while it was shorter, is cut to what
// the target allows, and those cut learn now rather than after QueueTimeout.
func (p *Pool) trimLocked() {
	for p.tail != nil {
		target, _ := p.predictLocked()
		if target <= 0 || time.Duration(p.queued)*p.meanService/time.Duration(p.slotsLocked()) <= target {
			return
		}
		w := p.tail
		p.removeLocked(w)
		w.shed = true
		p.rejected++
		close(w.ready)
	}
}

// dispatchLocked grants free slots to waiters, oldest first.
//
// A waiter that has already waited longer than the queue target is shed instead, as CoDel drops
// at dequeue: the line has stood for longer than the target, and serving the stale request
// would pass its lateness on to every one behind it, while the slot can serve a younger request
// in time. So no admitted request waits longer than the target once service time is known.
func (p *Pool) dispatchLocked() {
	target, _ := p.predictLocked()
	now := p.now()
	for p.head != nil && p.inFlight < p.slotsLocked() {
		w := p.head
		p.removeLocked(w)
		if target > 0 && now.Sub(w.enqueued) > target {
			w.shed = true
			p.rejected++
			close(w.ready)
			continue
		}
		w.granted = true
		p.inFlight++
		p.admitted++
		close(w.ready)
	}
}

func (p *Pool) pushLocked(w *waiter) {
	w.prev = p.tail
	if p.tail != nil {
		p.tail.next = w
	} else {
		p.head = w
	}
	p.tail = w
	p.queued++
}

func (p *Pool) removeLocked(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		p.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		p.tail = w.prev
	}
	w.prev, w.next = nil, nil
	p.queued--
}
