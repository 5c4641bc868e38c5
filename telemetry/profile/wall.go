package profile

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"
)

// The wall-clock view: a sampler takes labelled goroutine snapshots and keeps, per window, where
// the goroutines of requests were, running or parked.
const (
	// DefaultWallRate is the wall sampler's nominal rate: a snapshot every 50 ms. A snapshot
	// costs about 0.2 ms with 10 labelled goroutines, 0.7 ms with 100 and 5 ms with 1000
	// (BenchmarkWallSnapshot, 2-core machine); past 5% of a core the sampler skips ticks, down to
	// one snapshot per 100 ms, and weights each snapshot by the interval it stands for. A
	// snapshot also costs the goroutines it watches: it stops the world twice and suspends the
	// running ones to record their stacks, so that on a 2-core machine kept busy by requests
	// (BenchmarkPipelineTelemetry's profiler-wall50 and profiler-nowall arms) the sampler at
	// 50 Hz costs the process 1 to 2% of its CPU. 20 Hz costs less than half that, for a
	// resolution of 50 ms against 20, finer than a request's stages need.
	DefaultWallRate = 20
	// maxWallCoreShare is the share of one core the wall sampler may take: past it, it skips
	// ticks (and weights each snapshot by the time since the previous one, so none is lost).
	maxWallCoreShare = 0.05
	// MaxWallInterval is the longest the budget may stretch the interval between snapshots:
	// the coarsest resolution of the wall-clock view while the sampler gets a core when due (on a
	// saturated machine its goroutine waits for the CPU like any other: WallStats.MaxIntervalSec).
	MaxWallInterval = 100 * time.Millisecond
	// MaxWallRate bounds Config.WallRate: above it the snapshots' cost dominates what they show.
	MaxWallRate = 1000
	// DefaultStoreWindow is the length of the store's windows: about the life of one request.
	DefaultStoreWindow = time.Second
)

// ProfileWall is the profile type of the wall-clock view: goroutine-nanoseconds spent in each
// stack by labelled goroutines, running or parked.
const ProfileWall = "wall"

// labelSet is the (trace_id, span_id, rag_stage) of a labelled goroutine.
type labelSet struct{ traceID, spanID, stage string }

// anySpan stands for every span of a trace and stage in presence counts: a stage whose shards
// run in child spans is present once per snapshot, not once per span.
const anySpan = "*"

// wallSampler takes a goroutine profile (runtime/pprof "goroutine", which carries every
// goroutine's pprof labels) every period, keeps the samples of labelled goroutines and closes a
// window into the store every window. It counts, per label set, the snapshots in which at least
// one goroutine carried it (presence): a stage fanned out to four goroutines for 100 ms is
// present 100 ms, while its stacks account for 400 goroutine-ms.
type wallSampler struct {
	store  *Store
	now    func() time.Time
	period time.Duration
	window time.Duration

	mu      sync.Mutex
	open    *wallWindow
	prev    time.Time // the last snapshot's time
	started time.Time // set before the sampler's goroutine starts
	symbols map[uintptr][]runtime.Frame

	snapshots atomic.Uint64
	costNanos atomic.Int64 // time spent taking, parsing and merging snapshots
	// maxHalfCollect is the largest half-length of a snapshot's collection: the uncertainty of
	// the time a snapshot is stamped with.
	maxHalfCollect atomic.Int64
	// maxInterval is the longest interval a snapshot stood for: the worst resolution seen.
	maxInterval atomic.Int64

	stop chan struct{}
	done chan struct{}
}

// wallWindow is the window being filled.
type wallWindow struct {
	from      time.Time
	last      time.Time
	snapshots int64
	counts    map[stackKey]wallCount // per stack and label set, summed over snapshots
	// maxInterval is the longest interval a snapshot of the window stood for.
	maxInterval time.Duration
	presence    map[labelSet]seen
}

// wallCount is how many goroutines a window's snapshots saw on a stack, and those goroutines
// weighted by the time each snapshot stands for (the interval since the previous one).
type wallCount struct{ goroutines, nanos int64 }

// seen is how many snapshots saw a label set, the time they stand for, and when the first and
// the last of them were taken.
type seen struct {
	snapshots   int64
	nanos       int64
	first, last time.Time
}

func newWallSampler(store *Store, now func() time.Time, rate float64, window time.Duration) *wallSampler {
	return &wallSampler{
		store: store, now: now,
		period: time.Duration(float64(time.Second) / rate),
		window: window, symbols: make(map[uintptr][]runtime.Frame),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

func (w *wallSampler) start() {
	w.started = time.Now()
	w.mu.Lock()
	w.open = w.newWindow(w.now())
	w.mu.Unlock()
	w.store.setOpen(KindWall, w.openWindow)
	w.store.setWallStats(w.stats)
	go w.run()
}

func (w *wallSampler) newWindow(from time.Time) *wallWindow {
	return &wallWindow{from: from.Round(0), last: from.Round(0),
		counts: make(map[stackKey]wallCount), presence: make(map[labelSet]seen)}
}

func (w *wallSampler) run() {
	defer close(w.done)
	// The sampler's own goroutine carries no request's labels, whatever started it.
	pprof.SetGoroutineLabels(context.Background())
	tick := time.NewTicker(w.period)
	defer tick.Stop()
	var (
		buf    bytes.Buffer
		skip   int
		budget = time.Duration(maxWallCoreShare * float64(w.period))
		// maxSkip keeps a snapshot at least every MaxWallInterval, whatever it costs.
		maxSkip = max(int(MaxWallInterval/w.period)-1, 0)
	)
	for {
		select {
		case <-w.stop:
			w.mu.Lock()
			w.closeLocked(w.now())
			w.mu.Unlock()
			return
		case <-tick.C:
			if skip > 0 {
				skip--
				continue
			}
			cost := w.sample(&buf)
			// Past the budget, skip ticks until the snapshots' cost is back within it: with
			// thousands of goroutines one snapshot can take tens of milliseconds.
			skip = min(int(cost/max(budget, 1)), maxSkip)
		}
	}
}

// stopAndFlush stops the sampler and closes its last window into the store.
func (w *wallSampler) stopAndFlush() {
	w.store.setOpen(KindWall, nil)
	w.store.setWallStats(nil)
	close(w.stop)
	<-w.done
}

// sample takes one snapshot and adds it to the open window, closing the window first when its
// time is up.
func (w *wallSampler) sample(buf *bytes.Buffer) time.Duration {
	began := time.Now()
	if at, err := w.snapshot(buf); err == nil {
		w.add(buf.Bytes(), at)
	}
	cost := time.Since(began)
	w.snapshots.Add(1)
	w.costNanos.Add(int64(cost))
	return cost
}

// snapshot writes one goroutine profile in its text form into buf, stamped on the shared clock at
// the middle of the runtime's collection (its half-length is the stamp's uncertainty). The text
// form (debug=1) carries each stack's program counters and labels; the proto form would cost ten
// times more, reading /proc/self/maps and gzipping on every call.
func (w *wallSampler) snapshot(buf *bytes.Buffer) (time.Time, error) {
	buf.Reset()
	before := w.now()
	if err := pprof.Lookup("goroutine").WriteTo(buf, 1); err != nil {
		return time.Time{}, fmt.Errorf("goroutine profile: %w", err)
	}
	after := w.now()
	half := after.Sub(before) / 2
	if int64(half) > w.maxHalfCollect.Load() {
		w.maxHalfCollect.Store(int64(half)) // only the sampler's goroutine writes it
	}
	return before.Add(half).Round(0), nil
}

// stackKey is one distinct stack and label set of a window: the "@ 0x..." line of the goroutine
// profile's text form and the labels.
type stackKey struct {
	pcs    string
	labels labelSet
}

// add counts the labelled stacks of a text goroutine profile into the open window.
func (w *wallSampler) add(text []byte, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.Sub(w.open.from) >= w.window {
		w.closeLocked(at)
	}
	win := w.open
	win.snapshots++
	win.last = at
	// Each snapshot stands for the time since the previous one, so a tick the ticker dropped or
	// the budget skipped is not lost time.
	interval := w.period
	if !w.prev.IsZero() {
		interval = min(max(at.Sub(w.prev), 0), w.window)
	}
	win.maxInterval = max(win.maxInterval, interval)
	if int64(interval) > w.maxInterval.Load() {
		w.maxInterval.Store(int64(interval)) // written under w.mu only
	}
	w.prev = at
	present := make(map[labelSet]bool)
	forEachStack(text, func(count int64, pcs string, ls labelSet) {
		if ls == (labelSet{}) {
			return
		}
		c := win.counts[stackKey{pcs, ls}]
		c.goroutines += count
		c.nanos += count * int64(interval)
		win.counts[stackKey{pcs, ls}] = c
		present[ls] = true
		present[labelSet{ls.traceID, anySpan, ls.stage}] = true
	})
	for ls := range present {
		sn := win.presence[ls]
		if sn.snapshots == 0 {
			sn.first = at
		}
		sn.snapshots++
		sn.nanos += int64(interval)
		sn.last = at
		win.presence[ls] = sn
	}
}

// forEachStack calls f for each stack of a goroutine profile in its text form:
//
//	3 @ 0x483a2e 0x4168ee 0x531c79
//	# labels: {"rag_stage":"retrieve", "trace_id":"0123..."}
//	#	0x531c78	main.f+0x18	/src/main.go:7
//
// with the stack's count, its program counters as written, and its labels of interest.
func forEachStack(text []byte, f func(count int64, pcs string, ls labelSet)) {
	var (
		count int64
		pcs   string
		ls    labelSet
	)
	flush := func() {
		if pcs != "" {
			f(count, pcs, ls)
		}
		count, pcs, ls = 0, "", labelSet{}
	}
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		switch {
		case bytes.HasPrefix(line, []byte("# labels: ")):
			ls = parseLabels(string(line[len("# labels: "):]))
		case len(line) > 0 && line[0] >= '0' && line[0] <= '9':
			flush()
			n, rest, ok := strings.Cut(string(line), " @ ")
			if !ok {
				continue
			}
			c, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				continue
			}
			count, pcs = c, rest
		}
	}
	flush()
}

// parseLabels reads the labels of interest from {"k":"v", "k2":"v2"}, keys and values quoted as
// Go strings.
func parseLabels(s string) labelSet {
	var ls labelSet
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	for s != "" {
		s = strings.TrimLeft(s, ", ")
		kq, err := strconv.QuotedPrefix(s)
		if err != nil {
			return ls
		}
		s = strings.TrimPrefix(s[len(kq):], ":")
		vq, err := strconv.QuotedPrefix(s)
		if err != nil {
			return ls
		}
		s = s[len(vq):]
		k, _ := strconv.Unquote(kq)
		v, _ := strconv.Unquote(vq)
		switch k {
		case LabelTraceID:
			ls.traceID = v
		case LabelSpanID:
			ls.spanID = v
		case LabelStage:
			ls.stage = v
		}
	}
	return ls
}

// closeLocked stores the open window as [from, until] and opens the next at until. It is called
// with w.mu held.
func (w *wallSampler) closeLocked(until time.Time) {
	win := w.open
	w.open = w.newWindow(until)
	if win.snapshots == 0 {
		return
	}
	data, err := w.encode(win, until)
	if err != nil {
		return
	}
	_ = w.store.addWall(win.from, until.Round(0), data, win.presence, win.maxInterval)
}

// encode writes a window as a pprof profile with sample types samples (goroutines seen, one per
// snapshot) and wall (those times the period, in nanoseconds), symbolizing its program counters.
// A window of only unlabelled goroutines still gets an (empty) profile, so that queries tell "no
// request was running" from "no window". It is called with w.mu held (the symbol cache is w's).
func (w *wallSampler) encode(win *wallWindow, until time.Time) ([]byte, error) {
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: ProfileWall, Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: ProfileWall, Unit: "nanoseconds"},
		Period:        int64(w.period),
		TimeNanos:     win.from.UnixNano(),
		DurationNanos: until.Sub(win.from).Nanoseconds(),
	}
	locs := make(map[uintptr]*profile.Location)
	funcs := make(map[string]*profile.Function)
	for key, n := range win.counts {
		smp := &profile.Sample{Value: []int64{n.goroutines, n.nanos}, Label: key.labels.pprof()}
		for _, field := range strings.Fields(key.pcs) {
			pc, err := strconv.ParseUint(strings.TrimPrefix(field, "0x"), 16, 64)
			if err != nil {
				continue
			}
			loc, ok := locs[uintptr(pc)]
			if !ok {
				loc = &profile.Location{ID: uint64(len(locs) + 1), Address: pc}
				for _, fr := range w.frames(uintptr(pc)) {
					fn, ok := funcs[fr.Function]
					if !ok {
						fn = &profile.Function{ID: uint64(len(funcs) + 1), Name: fr.Function, SystemName: fr.Function, Filename: fr.File}
						funcs[fr.Function] = fn
						p.Function = append(p.Function, fn)
					}
					loc.Line = append(loc.Line, profile.Line{Function: fn, Line: int64(fr.Line)})
				}
				locs[uintptr(pc)] = loc
				p.Location = append(p.Location, loc)
			}
			smp.Location = append(smp.Location, loc)
		}
		p.Sample = append(p.Sample, smp)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		return nil, fmt.Errorf("encode wall window: %w", err)
	}
	return buf.Bytes(), nil
}

// frames returns the functions at a return address, innermost (inlined) first, cached: a
// service's stacks repeat. It is called with w.mu held.
func (w *wallSampler) frames(pc uintptr) []runtime.Frame {
	if fr, ok := w.symbols[pc]; ok {
		return fr
	}
	var out []runtime.Frame
	frames := runtime.CallersFrames([]uintptr{pc})
	for {
		fr, more := frames.Next()
		if fr.Function != "" {
			out = append(out, fr)
		}
		if !more {
			break
		}
	}
	if len(w.symbols) < maxSymbols {
		w.symbols[pc] = out
	}
	return out
}

// maxSymbols bounds the symbol cache; past it, program counters are symbolized on every encode.
const maxSymbols = 1 << 16

func (ls labelSet) pprof() map[string][]string {
	out := make(map[string][]string, 3)
	for _, l := range [][2]string{{LabelTraceID, ls.traceID}, {LabelSpanID, ls.spanID}, {LabelStage, ls.stage}} {
		if l[1] != "" {
			out[l[0]] = []string{l[1]}
		}
	}
	return out
}

// openWindow returns the window being filled as a stored window, so that a query sees the last
// snapshots, not only the closed windows; nil when it holds no snapshot.
func (w *wallSampler) openWindow() *window {
	w.mu.Lock()
	defer w.mu.Unlock()
	win := w.open
	if win.snapshots == 0 {
		return nil
	}
	data, err := w.encode(win, win.last)
	if err != nil {
		return nil
	}
	presence := maps.Clone(win.presence)
	return &window{
		info: WindowInfo{Kind: KindWall, ProfileTypes: KindWall.ProfileTypes(), From: win.from,
			Until: win.last, Bytes: len(data), Open: true},
		data: data, presence: presence, maxInterval: win.maxInterval,
	}
}

// WallStats are the wall sampler's counters: how many snapshots it took and what they cost.
type WallStats struct {
	RateHz float64 `json:"rate_hz"`
	// EffectiveRateHz is the snapshots taken per second since the start: below RateHz when
	// snapshots cost more than the sampler's budget (5% of a core) and ticks were skipped.
	EffectiveRateHz float64 `json:"effective_rate_hz"`
	Snapshots       uint64  `json:"snapshots"`
	MeanCostSec     float64 `json:"mean_cost_seconds"`
	// CoreShare is the share of one core the snapshots took since the start.
	CoreShare float64 `json:"core_share"`
	// StampUncertaintySec is the largest half-length of a snapshot's collection: a snapshot's
	// time stamp is within it of the instant each goroutine's stack was recorded.
	StampUncertaintySec float64 `json:"stamp_uncertainty_seconds"`
	// MaxIntervalSec is the longest interval between two snapshots: a stage's wall time is
	// within it at each of the stage's ends.
	MaxIntervalSec float64 `json:"max_interval_seconds"`
}

func (w *wallSampler) stats() WallStats {
	n := w.snapshots.Load()
	st := WallStats{RateHz: float64(time.Second) / float64(w.period), Snapshots: n,
		StampUncertaintySec: time.Duration(w.maxHalfCollect.Load()).Seconds(),
		MaxIntervalSec:      time.Duration(w.maxInterval.Load()).Seconds()}
	if n > 0 {
		st.MeanCostSec = float64(w.costNanos.Load()) / float64(n) / 1e9
		if elapsed := time.Since(w.started); !w.started.IsZero() && elapsed > 0 {
			st.CoreShare = float64(w.costNanos.Load()) / float64(elapsed)
			st.EffectiveRateHz = float64(n) / elapsed.Seconds()
		}
	}
	return st
}
