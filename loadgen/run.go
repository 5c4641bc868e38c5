package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// errDrain is the cancellation cause of requests still running when the drain timeout expired.
var errDrain = errors.New("drain timeout expired")

// Run drives cfg.Workload through cfg.Client and returns a Record for every request that came
// due. It owns the clock: one monotonic clock whose zero is Result.Start, every intended time
// an absolute offset on it (waits never accumulate drift), and every record measured from its
// intended send time.
//
// Open loop (the default): each item is handed at its intended time to an idle sender goroutine,
// or to a new one when all are busy, and at most Concurrency requests are in flight
// (DefaultMaxInFlight when Concurrency is 0): a due request that finds every slot taken waits
// for one, and the wait counts into its latency (it shows as send lag). When a few items wait
// (maxBacklog, or as many as there are slots), the pacer holds the next ones back, their
// intended times unchanged, so a target that falls behind costs bounded memory. The pacer wakes
// at most every 200 us: requests due closer together go out in small batches, each at most that
// late (see pacerQuantum).
// Closed loop (ClosedLoop): Concurrency users each send their next item when the previous one
// ended.
//
// Sending stops after NumItems items, at Duration (both counted after the warmup), when the
// workload ends, when Stop is closed, or when ctx is done. Run then waits for the requests in
// flight up to DrainTimeout; those still running are cancelled and recorded with ErrKindDrain.
// Closing Stop (a first Ctrl-C) stops sending and drains the same way, and marks the Result
// Interrupted. When ctx is done (a second Ctrl-C), requests in flight are cancelled and recorded
// with ErrKindCanceled and the Result is marked Interrupted. A session step still in its think
// time when the run gives up on it is recorded with NotSent. Run always returns what it
// measured; it fails only on a configuration it cannot run.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	switch {
	case cfg.Workload == nil:
		return nil, ErrNoWorkload
	case cfg.Client == nil:
		return nil, ErrNoClient
	case cfg.ClosedLoop && cfg.Concurrency < 1:
		return nil, ErrClosedLoopNeedsUsers
	case cfg.ClosedLoop && cfg.NumItems <= 0 && cfg.Duration <= 0:
		return nil, ErrUnbounded
	case cfg.Concurrency < 0:
		return nil, errors.New("loadgen: negative concurrency")
	case cfg.Warmup < 0 || cfg.WarmupDuration < 0:
		return nil, ErrNegativeWarmup
	}
	if err := CheckConcurrency(cfg.Concurrency, cfg.ClosedLoop); err != nil {
		return nil, err
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = time.Second
	}
	r := newRunner(ctx, cfg)
	defer r.cancel(nil)

	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	if cfg.Stop != nil {
		go func() {
			select {
			case <-cfg.Stop:
				r.stopped.Store(true)
				stopSending()
			case <-sendCtx.Done():
			}
		}()
	}
	r.sendCtx = sendCtx
	if wait := time.Until(r.start); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-sendCtx.Done():
		}
		t.Stop()
	}

	stopProgress := r.startProgress()
	if cfg.ClosedLoop {
		r.closedLoop(sendCtx)
	} else {
		r.openLoop(sendCtx)
	}
	r.drain(ctx)
	stopProgress()
	return r.result(), nil
}

// runner is the state of one Run.
type runner struct {
	cfg      Config
	duration time.Duration // Duration plus the warmup duration; 0 for no limit
	start    time.Time
	reqCtx   context.Context // requests run under it: cancelled by the parent or by the drain
	cancel   context.CancelCauseFunc
	sendCtx  context.Context // done when sending stops early: ctx done or Stop closed
	stopped  atomic.Bool     // Stop was closed
	sem      chan struct{}   // slots of requests in flight; nil in a closed loop
	wg       sync.WaitGroup

	// The open loop's backlog: items handed to a sender whose first request has no slot yet.
	// The pacer hands over no more while it is full, so that a target that falls behind costs
	// a bounded number of goroutines; the items it holds back keep their intended times.
	waiting    atomic.Int64
	freed      chan struct{} // poked when a waiting item got its slot
	defaultCap bool          // the cap is DefaultMaxInFlight, not Concurrency
	slotWaits  atomic.Int64  // requests that waited for a slot

	items        atomic.Int64 // items started, numbering their agent loops
	measuredFrom atomic.Int64 // intended time of the first measured item, in ns; -1 until one
	warmups      atomic.Int64 // records of warmup requests

	seq          atomic.Int64 // creation order of records, to break ties of intended times
	sent, done   atomic.Int64
	failed       atomic.Int64
	queued       atomic.Int64  // due and waiting for a slot
	unsent       atomic.Int64  // recorded without being sent: stopped while queued
	sendingEnded time.Duration // when sending stopped; set before the drain
	interrupted  atomic.Bool

	recordsMu sync.Mutex     // guards the fields below, and serialises Stream calls
	records   [][]itemRecord // in chunks, so that growing never copies what is stored
	nrecords  int
	last      time.Duration // the latest end of a record
	streamBuf []Record

	progressMu       sync.Mutex              // guards the fields below
	e2el             *hdrhistogram.Histogram // microseconds, for the running P99
	lastProgressDone int64
	lastProgressAt   time.Duration

	closedMu       sync.Mutex // guards the closed loop's claims
	claimed        int        // items handed out
	measured       int        // of those, items that are not warmup
	claimsOver     bool
	claimsDone     chan struct{} // closed when the closed loop's users may claim no more
	claimsDoneOnce sync.Once
}

func newRunner(ctx context.Context, cfg Config) *runner {
	r := &runner{cfg: cfg, start: cfg.Start, claimsDone: make(chan struct{}), sendCtx: ctx}
	if r.start.IsZero() {
		r.start = time.Now()
	}
	if cfg.Duration > 0 {
		r.duration = cfg.Duration + cfg.WarmupDuration
	}
	r.measuredFrom.Store(-1)
	r.reqCtx, r.cancel = context.WithCancelCause(ctx)
	if !cfg.ClosedLoop {
		n := cfg.Concurrency
		if n == 0 {
			n, r.defaultCap = DefaultMaxInFlight(), true
		}
		r.sem, r.freed = make(chan struct{}, n), make(chan struct{}, 1)
	}
	// 1 us to 1 h at 2 significant digits: ~1% resolution, enough for a progress line.
	r.e2el = hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 2)
	return r
}

// chunkRecords is the size of a chunk of stored records: appending to one big slice would copy
// every record stored so far at each growth, a cost the hot path does not need.
const chunkRecords = 1024

// since is the run's clock: the offset of now from the start.
func (r *runner) since() time.Duration { return time.Since(r.start) }

// openLoop sends every item at its intended time until a stop condition holds.
func (r *runner) openLoop(ctx context.Context) {
	unlock := lockPacer()
	defer unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var giveUp <-chan time.Time // when a run by Duration stops waiting for its backlog
	if r.duration > 0 && r.cfg.DrainTimeout > 0 {
		t := time.NewTimer(time.Until(r.start.Add(r.duration + r.cfg.DrainTimeout)))
		defer t.Stop()
		giveUp = t.C
	}
	work := make(chan openItem) // unbuffered: an item goes only to a sender waiting for it
	var woke time.Time          // the last wake-up's target (see pacerQuantum)
	for n, measured := 0, 0; r.cfg.NumItems <= 0 || measured < r.cfg.NumItems; n++ {
		item, ok := r.cfg.Workload.Next()
		if !ok || (r.duration > 0 && item.At >= r.duration) {
			break
		}
		at := r.start.Add(item.At)
		if next := woke.Add(pacerQuantum); at.Before(next) && time.Until(at) > 0 {
			at = next // too soon after the last wake-up: it goes with the next batch
		}
		slept := time.Until(at) > 0
		if !waitUntil(ctx, timer, at) {
			// Due when sending stopped, and held back by a full backlog whatever the order of
			// the checks: it leaves a record, as do the later due ones. An item merely due a
			// moment before the stop, with room in the backlog, was not held back: it has none.
			if item.At <= r.since() && r.backlogFull() {
				warm := r.isWarmup(n, item.At)
				if !warm {
					measured++
				}
				r.dropDue(item, warm, n+1, measured)
			}
			break
		}
		if slept {
			woke = at
		}
		warm := r.isWarmup(n, item.At)
		if !warm {
			measured++
		}
		if !r.awaitBacklog(ctx, giveUp) {
			r.dropDue(item, warm, n+1, measured)
			break
		}
		r.waiting.Add(1)
		r.dispatch(work, openItem{item: item, warm: warm})
	}
	close(work)
	r.sendingEnded = r.since()
}

// maxBacklog bounds the backlog: items handed to a sender that wait for a slot. Each holds a
// goroutine (its stack grown on the way through the HTTP client), and a few suffice to take
// every slot the moment it frees; the pacer holds the others back at no cost.
const maxBacklog = 64

// awaitBacklog waits while the backlog is full: min(slots, maxBacklog) items wait for a slot.
// It reports false when sending stopped (ctx done) or giveUp fired first.
func (r *runner) awaitBacklog(ctx context.Context, giveUp <-chan time.Time) bool {
	for r.backlogFull() {
		select {
		case <-r.freed:
		case <-ctx.Done():
			return false
		case <-giveUp:
			r.cancel(errDrain) // the drain's deadline passed with due items still held back
			return false
		}
	}
	return true
}

// backlogFull reports whether min(slots, maxBacklog) items wait for a slot.
func (r *runner) backlogFull() bool { return r.waiting.Load() >= int64(min(cap(r.sem), maxBacklog)) }

// dropDue records, once sending stopped with a full backlog, the item the pacer held (warm if
// warmup) and every later one already due: n items were planned before those, measured of
// them measured. Each leaves one record of its first request, not sent, of the stop's kind.
func (r *runner) dropDue(item Item, warm bool, n, measured int) {
	now := r.since()
	kind := r.stopKind()
	for {
		if warm {
			r.warmups.Add(1)
		}
		rec := Record{Intended: item.At, Sent: now, End: now, Session: item.Session, Key: item.Request.Key,
			Warmup: warm, ErrKind: kind, Err: "not sent: the run stopped while every slot and the backlog were full"}
		r.unsent.Add(1)
		r.finish(&rec)
		r.deliver([]itemRecord{{rec: rec, seq: r.seq.Add(1)}})
		if r.cfg.NumItems > 0 && measured >= r.cfg.NumItems {
			return
		}
		var ok bool
		if item, ok = r.cfg.Workload.Next(); !ok || item.At > now || (r.duration > 0 && item.At >= r.duration) {
			return
		}
		if warm = r.isWarmup(n, item.At); !warm {
			measured++
		}
		n++
	}
}

// openItem is a due item handed from the pacer to a sender.
type openItem struct {
	item Item
	warm bool
}

// dispatch hands a due item to an idle sender, or starts one when every sender is busy (the
// backlog, not the number of senders, bounds how many there are). Senders
// are reused rather than started per request: a new goroutine grows its stack anew (copying it
// each time) on the way through the HTTP client, a cost a reused one paid once.
func (r *runner) dispatch(work chan openItem, it openItem) {
	select {
	case work <- it:
	default:
		r.wg.Add(1)
		go r.sender(work, it)
	}
}

// sender sends its first item, then every item handed to it, until the pacer closes work.
func (r *runner) sender(work <-chan openItem, first openItem) {
	defer r.wg.Done()
	r.runItem(first.item, first.item.At, first.warm)
	for it := range work {
		r.runItem(it.item, it.item.At, it.warm)
	}
}

// closedLoop runs Concurrency users until the claims run out, Duration passes or ctx is done.
//
// The duration runs from the run's start, and users start one after another while sending
// goes on: with many users, starting them all first took longer than the duration itself
// (10 million users and --duration 2s ran 22.5 s).
func (r *runner) closedLoop(ctx context.Context) {
	var durationC <-chan time.Time
	if r.duration > 0 {
		t := time.NewTimer(time.Until(r.start.Add(r.duration)))
		defer t.Stop()
		durationC = t.C
	}
	started := make(chan struct{}) // closed when no more users will start
	go func() {
		defer close(started)
		for range r.cfg.Concurrency {
			if ctx.Err() != nil || r.claimsEnded() {
				return
			}
			r.wg.Add(1)
			go r.user()
		}
	}()
	allDone := make(chan struct{})
	go func() { <-started; r.wg.Wait(); close(allDone) }()
	select {
	case <-r.claimsDone:
	case <-durationC:
	case <-ctx.Done():
	case <-allDone:
	}
	r.endClaims()
	<-started // the drain waits for the users: none may start after it began
	r.sendingEnded = r.since()
}

// claimsEnded reports whether the closed loop's users may claim no more items.
func (r *runner) claimsEnded() bool {
	select {
	case <-r.claimsDone:
		return true
	default:
		return false
	}
}

// user is one closed-loop user: it sends its next item when the previous one ended.
func (r *runner) user() {
	defer r.wg.Done()
	intended := r.since()
	for {
		item, warm, ok := r.claim(intended)
		if !ok {
			return
		}
		intended = r.runItem(item, intended, warm)
	}
}

// isWarmup reports whether the n-th item (from 0), intended at intended, is a warmup item, and
// notes where the measured run begins at the first one that is not.
func (r *runner) isWarmup(n int, intended time.Duration) bool {
	if n < r.cfg.Warmup || intended < r.cfg.WarmupDuration {
		return true
	}
	from := intended
	if r.cfg.Warmup == 0 {
		from = r.cfg.WarmupDuration
	}
	r.measuredFrom.CompareAndSwap(-1, int64(from))
	return false
}

// claim hands the next item to a closed-loop user whose slot freed at intended.
func (r *runner) claim(intended time.Duration) (item Item, warm, ok bool) {
	r.closedMu.Lock()
	defer r.closedMu.Unlock()
	if r.claimsOver || r.sendCtx.Err() != nil || (r.duration > 0 && intended >= r.duration) {
		return Item{}, false, false
	}
	item, ok = r.cfg.Workload.Next()
	if !ok {
		r.endClaimsLocked()
		return Item{}, false, false
	}
	warm = r.isWarmup(r.claimed, intended)
	r.claimed++
	if !warm {
		r.measured++
	}
	if r.cfg.NumItems > 0 && r.measured >= r.cfg.NumItems {
		r.endClaimsLocked()
	}
	return item, warm, true
}

func (r *runner) endClaims() {
	r.closedMu.Lock()
	defer r.closedMu.Unlock()
	r.endClaimsLocked()
}

func (r *runner) endClaimsLocked() {
	r.claimsOver = true
	r.claimsDoneOnce.Do(func() { close(r.claimsDone) })
}

// runItem sends an item's request, intended at intended, then the later steps of its session
// (those that continue the conversation carry its history, see conversation), and with an
// Agent the steps that answer each response's tool calls (see Agent), hands the item's records
// over, and returns when the last request it sent ended.
func (r *runner) runItem(item Item, intended time.Duration, warm bool) (end time.Duration) {
	var one [1]itemRecord
	recs := one[:0]
	defer func() { r.deliver(recs) }()
	var conv conversation
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	n := r.items.Add(1) - 1
	loop := newAgentLoop(r.cfg.Agent, n)
	session := item.Session
	if loop != nil && session == "" {
		session = "agent-" + strconv.FormatInt(n, 10)
	}
	step := 0
	// turn sends req, due at due, and the steps answering its tool calls; it reports whether
	// the session goes on.
	turn := func(req *Request, later []Step, due time.Duration) bool {
		req = loop.keep(conv.request(req, later))
		var wait time.Duration
		for {
			if step > 0 {
				if timer == nil {
					timer = time.NewTimer(time.Hour)
				}
				if !r.await(timer, due) {
					recs = append(recs, r.notSent(session, step, due, req, warm))
					return false
				}
			}
			rec, ok := r.send(req, session, step, due, warm)
			rec.rec.ToolWait = wait
			step++
			if loop != nil {
				loop.steps++
			}
			next, w, more := loop.next(req, &rec.rec)
			conv.answered(req, &rec.rec)
			ok = ok && r.patient(&rec.rec)
			recs = append(recs, rec)
			end = rec.rec.End
			if !ok || !more {
				return ok
			}
			req, wait, due = next, w, end+w
		}
	}
	if !turn(&item.Request, item.Then, intended) {
		return end
	}
	for k := range item.Then {
		st := &item.Then[k]
		if !turn(&st.Request, item.Then[k+1:], end+st.Think) {
			break // the user gave up after a failed or too slow step, or the run stopped
		}
	}
	return end
}

// await waits until due, an offset on the run's clock, for a session's next step, and reports
// false when the run gave up on the step first: interrupted, or drained. Session steps wait
// on the Go timer alone: their lateness (up to about a millisecond) is measured as send lag
// like any other. A graceful stop ends the thinking too.
func (r *runner) await(timer *time.Timer, due time.Duration) bool {
	cut := r.reqCtx.Err() != nil || r.stopped.Load()
	if d := time.Until(r.start.Add(due)); d > 0 && !cut {
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-r.reqCtx.Done():
			cut = true
		case <-r.sendCtx.Done():
			cut = r.stopped.Load() || r.reqCtx.Err() != nil
			if !cut { // sending ended by Duration: the session goes on
				<-timer.C
			}
		}
	}
	return !cut
}

// patient reports whether a session's user waits on after the step rec: its E2EL is within
// Config.SessionStepLimit, or there is no limit.
func (r *runner) patient(rec *Record) bool {
	return r.cfg.SessionStepLimit <= 0 || rec.E2EL() <= r.cfg.SessionStepLimit
}

// itemRecord is a finished record and its creation order.
type itemRecord struct {
	rec Record
	seq int64
}

// notSent records a session step the run gave up on while its user was thinking.
func (r *runner) notSent(session string, step int, due time.Duration, req *Request, warm bool) itemRecord {
	now := r.since()
	kind := ErrKindCanceled
	if errors.Is(context.Cause(r.reqCtx), errDrain) {
		kind = ErrKindDrain
	}
	// Its times are all when the run gave up on it, so that no offset runs past the run's end.
	return itemRecord{seq: r.seq.Add(1), rec: Record{Intended: now, Sent: now, End: now, Session: session, Step: step,
		Key: req.Key, Warmup: warm, NotSent: true, ErrKind: kind,
		Err: fmt.Sprintf("not sent: the run stopped while the user was thinking (the step was due at %.3f s)", due.Seconds())}}
}

// send sends one request intended at intended and records it. It reports whether it
// succeeded.
func (r *runner) send(req *Request, session string, step int, intended time.Duration, warm bool) (itemRecord, bool) {
	seq := r.seq.Add(1)
	rec := Record{Intended: intended, Session: session, Step: step, Key: req.Key, Warmup: warm, CancelPlanned: req.Cancel != nil}
	if warm {
		r.warmups.Add(1)
	}
	if r.sem != nil && !r.acquire(step == 0) {
		now := r.since()
		rec.Sent, rec.End = now, now
		rec.ErrKind = r.stopKind()
		rec.Err = "still waiting for a concurrency slot when the run stopped"
		r.unsent.Add(1)
		r.finish(&rec)
		return itemRecord{rec: rec, seq: seq}, false
	}
	r.sent.Add(1)
	r.cfg.Client.Do(r.reqCtx, req, r.start, &rec)
	if r.sem != nil {
		<-r.sem
	}
	if rec.ErrKind != "" && r.reqCtx.Err() != nil {
		rec.ErrKind = r.stopKind()
	}
	if rec.End < rec.Sent {
		rec.End = rec.Sent
	}
	r.finish(&rec)
	return itemRecord{rec: rec, seq: seq}, rec.OK()
}

// acquire takes a slot for a request, waiting while every slot is taken, and reports false
// when the run stopped first. first marks an open-loop item's first request, which leaves the
// backlog then.
func (r *runner) acquire(first bool) bool {
	if first {
		defer r.leaveBacklog()
	}
	if r.reqCtx.Err() != nil {
		return false // a slot freed by a cancelled request is no reason to send
	}
	select {
	case r.sem <- struct{}{}:
		return true
	default:
	}
	r.slotWaits.Add(1)
	r.queued.Add(1)
	defer r.queued.Add(-1)
	select {
	case r.sem <- struct{}{}:
		return true
	case <-r.reqCtx.Done():
		return false
	}
}

// leaveBacklog counts an item out of the backlog and wakes the pacer if it waits for room.
func (r *runner) leaveBacklog() {
	r.waiting.Add(-1)
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// stopKind is the error kind of a request the run stopped: drained or cancelled.
func (r *runner) stopKind() string {
	if errors.Is(context.Cause(r.reqCtx), errDrain) {
		return ErrKindDrain
	}
	return ErrKindCanceled
}

// finish counts a finished request for the progress reports.
func (r *runner) finish(rec *Record) {
	r.done.Add(1)
	ok := rec.OK()
	if !ok && !rec.Cancelled {
		r.failed.Add(1)
	}
	if ok && !rec.Warmup {
		r.progressMu.Lock()
		_ = r.e2el.RecordValue(max(1, int64(rec.E2EL()/time.Microsecond)))
		r.progressMu.Unlock()
	}
}

// deliver hands an item's records to the Stream, or stores them.
func (r *runner) deliver(recs []itemRecord) {
	r.recordsMu.Lock()
	defer r.recordsMu.Unlock()
	for i := range recs {
		r.last = max(r.last, recs[i].rec.End)
	}
	if r.cfg.Stream != nil {
		r.streamBuf = r.streamBuf[:0]
		for i := range recs {
			rec := recs[i].rec
			rec.Index = int(recs[i].seq - 1)
			r.streamBuf = append(r.streamBuf, rec)
		}
		r.cfg.Stream(r.streamBuf)
		clear(r.streamBuf)
		return
	}
	for i := range recs {
		if n := len(r.records); n == 0 || len(r.records[n-1]) == chunkRecords {
			r.records = append(r.records, make([]itemRecord, 0, chunkRecords))
		}
		last := &r.records[len(r.records)-1]
		*last = append(*last, recs[i])
		r.nrecords++
	}
}

// drain waits for the requests in flight, at most the drain timeout after sending stopped (or
// after Duration, when sending stopped earlier), and cancels the rest.
func (r *runner) drain(ctx context.Context) {
	if ctx.Err() != nil || r.stopped.Load() {
		r.interrupted.Store(true)
	}
	allDone := make(chan struct{})
	go func() { r.wg.Wait(); close(allDone) }()
	var timeoutC <-chan time.Time
	if r.cfg.DrainTimeout > 0 {
		wait := r.cfg.DrainTimeout
		if r.duration > r.sendingEnded && !r.stopped.Load() {
			wait += r.duration - r.sendingEnded
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		timeoutC = t.C
	}
	select {
	case <-allDone:
	case <-timeoutC:
		r.cancel(errDrain)
		<-allDone
	case <-ctx.Done():
		r.interrupted.Store(true)
		<-allDone
	}
}

// result sorts the records by intended time and numbers them.
func (r *runner) result() *Result {
	r.recordsMu.Lock()
	defer r.recordsMu.Unlock()
	type key struct {
		intended time.Duration
		seq      int64
		at       *Record
	}
	order := make([]key, 0, r.nrecords)
	for _, chunk := range r.records {
		for i := range chunk {
			order = append(order, key{chunk[i].rec.Intended, chunk[i].seq, &chunk[i].rec})
		}
	}
	slices.SortFunc(order, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.intended, b.intended), cmp.Compare(a.seq, b.seq))
	})
	var recs []Record
	if len(order) > 0 {
		recs = make([]Record, len(order))
	}
	for i, k := range order {
		recs[i] = *k.at
		recs[i].Index = i
	}
	r.records = nil
	last := r.last
	if r.seq.Load() == 0 {
		last = r.since()
	}
	info := r.cfg.Info
	info.Interrupted = info.Interrupted || r.interrupted.Load()
	if r.cfg.ClosedLoop && info.RequestRate == 0 {
		info.RequestRate = math.Inf(1)
	}
	if info.Concurrency == 0 {
		info.Concurrency = r.cfg.Concurrency
	}
	if r.defaultCap {
		info.InFlightCap = cap(r.sem)
	}
	if info.NumPrompts == 0 {
		info.NumPrompts = r.cfg.NumItems
	}
	res := &Result{Start: r.start, Duration: last, Records: recs, Config: info, Warmup: int(r.warmups.Load()),
		SlotWaits: int(r.slotWaits.Load())}
	if r.cfg.Warmup > 0 || r.cfg.WarmupDuration > 0 {
		// Without a measured item the measured run is empty: it begins where the run ended.
		res.MeasuredFrom = max(last, r.cfg.WarmupDuration)
		if from := r.measuredFrom.Load(); from >= 0 {
			res.MeasuredFrom = time.Duration(from)
		}
	}
	return res
}

// startProgress calls cfg.Progress every interval until the returned stop is called, which
// makes the final call.
func (r *runner) startProgress() (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(r.cfg.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				r.cfg.Progress(r.snapshot(false))
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
		r.cfg.Progress(r.snapshot(true))
	}
}

func (r *runner) snapshot(final bool) Progress {
	now := r.since()
	r.progressMu.Lock()
	defer r.progressMu.Unlock()
	p := Progress{
		Elapsed: now, Sent: int(r.sent.Load()), Done: int(r.done.Load()), Failed: int(r.failed.Load()),
		Queued: int(r.queued.Load()), Final: final,
	}
	p.InFlight = max(0, p.Sent-(p.Done-int(r.unsent.Load())))
	if dt := now - r.lastProgressAt; dt > 0 {
		p.Rate = float64(int64(p.Done)-r.lastProgressDone) / dt.Seconds()
	}
	r.lastProgressAt, r.lastProgressDone = now, int64(p.Done)
	// A P99 needs at least a hundred samples to rest on one beyond it.
	if r.e2el.TotalCount() >= 100 {
		p.P99E2EL = time.Duration(r.e2el.ValueAtQuantile(99)) * time.Microsecond
	}
	return p
}
