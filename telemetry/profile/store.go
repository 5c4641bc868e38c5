package profile

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"github.com/grafana/pyroscope-go"
)

// Kind is what a profile window holds. pyroscope-go uploads one window per kind and period: a
// CPU profile, a heap profile carrying the four memory sample types, a goroutine snapshot, and so
// on.
type Kind string

// The kinds of windows a pyroscope-go session produces.
const (
	KindCPU           Kind = "cpu"
	KindMemory        Kind = "memory"
	KindGoroutine     Kind = "goroutine"
	KindMutex         Kind = "mutex"
	KindBlock         Kind = "block"
	KindGoroutineLeak Kind = "goroutine_leak"
	// KindWall windows come from the package's own wall sampler, not from pyroscope-go: the
	// labelled goroutines of each snapshot, by stack and labels, with their presence counts.
	KindWall Kind = "wall"
)

// Labels the store filters samples by. otel-profiling-go sets trace_id and span_id; the pipeline
// sets rag_stage with pprof.Do around each stage.
const (
	LabelTraceID = "trace_id"
	LabelSpanID  = "span_id"
	LabelStage   = "rag_stage"
)

// Defaults of the store's bounds.
const (
	DefaultKeep     = 600 // ten minutes of 1 s windows
	DefaultMaxBytes = 64 << 20
)

// Errors of Query, matched with errors.Is.
var (
	// ErrNoWindows means no window of the asked type overlaps the asked time range.
	ErrNoWindows = errors.New("no profile window in range")
	// ErrNoSamples means windows overlap the range, but none of their samples carries the asked labels.
	ErrNoSamples = errors.New("no samples match")
	// ErrUnknownType means the asked profile type is not one pyroscope-go produces.
	ErrUnknownType = errors.New("unknown profile type")
)

// sampleSource tells, for a profile type, which window kind holds it and under which pprof sample
// type name.
type sampleSource struct {
	kind       Kind
	sampleType string
}

// profileTypes maps pyroscope-go's profile type names to the windows and sample types holding
// them. The CPU type reads the "samples" count (one sample per 10 ms of CPU at pyroscope's 100 Hz).
var profileTypes = map[pyroscope.ProfileType]sampleSource{
	pyroscope.ProfileCPU:           {KindCPU, "samples"},
	pyroscope.ProfileAllocObjects:  {KindMemory, "alloc_objects"},
	pyroscope.ProfileAllocSpace:    {KindMemory, "alloc_space"},
	pyroscope.ProfileInuseObjects:  {KindMemory, "inuse_objects"},
	pyroscope.ProfileInuseSpace:    {KindMemory, "inuse_space"},
	pyroscope.ProfileGoroutines:    {KindGoroutine, "goroutine"},
	pyroscope.ProfileMutexCount:    {KindMutex, "contentions"},
	pyroscope.ProfileMutexDuration: {KindMutex, "delay"},
	pyroscope.ProfileBlockCount:    {KindBlock, "contentions"},
	pyroscope.ProfileBlockDuration: {KindBlock, "delay"},
	pyroscope.ProfileGoroutineLeak: {KindGoroutineLeak, "goroutineleak"},
	ProfileWall:                    {KindWall, ProfileWall},
}

// ProfileTypes returns the profile types a window of kind k holds, in a fixed order.
func (k Kind) ProfileTypes() []pyroscope.ProfileType {
	var out []pyroscope.ProfileType
	for t, src := range profileTypes {
		if src.kind == k {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

func (k Kind) valid() bool {
	for _, src := range profileTypes {
		if src.kind == k {
			return true
		}
	}
	return false
}

// WindowInfo describes one stored profile window. From and Until are on the profiler's clock
// (Config.Now), the clock span timestamps use, so a span's start and end select the windows that
// saw it.
type WindowInfo struct {
	ID           uint64                  `json:"id"`
	Kind         Kind                    `json:"type"`
	ProfileTypes []pyroscope.ProfileType `json:"profile_types"`
	From         time.Time               `json:"from"`
	Until        time.Time               `json:"until"`
	Bytes        int                     `json:"bytes"`
	// Open marks the window still being filled (the wall sampler's current window).
	Open bool `json:"open,omitempty"`
}

// StoreStats are the store's counters and bounds.
type StoreStats struct {
	Windows  int    `json:"windows"`
	Bytes    int64  `json:"bytes"`
	Keep     int    `json:"keep"`
	MaxBytes int64  `json:"max_bytes"`
	Added    uint64 `json:"added"`
	Evicted  uint64 `json:"evicted"`
	// Rejected counts the windows Add refused (invalid, or larger than MaxBytes).
	Rejected uint64 `json:"rejected"`
}

// Query selects and filters samples. Zero fields do not filter.
type Query struct {
	// From and Until bound the time range; windows overlapping [From, Until] are merged.
	From, Until time.Time
	// Type is the profile type, one of pyroscope-go's names (cpu, alloc_space, goroutine, ...);
	// empty means cpu.
	Type pyroscope.ProfileType
	// TraceID, SpanID and Stage keep only the samples labelled trace_id, span_id and rag_stage
	// with these values.
	TraceID, SpanID, Stage string
}

// Store is a bounded ring of profile windows: at most Keep windows of each kind and MaxBytes of
// raw (gzipped pprof) data in all, the oldest evicted first. Windows are kept as the bytes
// pyroscope-go produced and parsed only when queried, so an idle store costs only its raw bytes.
// A Store is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	keep     int
	maxBytes int64
	bytes    int64
	nextID   uint64
	windows  []*window // in insertion order, oldest first
	perKind  map[Kind]int
	added    uint64
	evicted  uint64
	rejected uint64
	// open returns, per kind, the window still being filled (nil when there is none), so that
	// queries include the last second.
	open map[Kind]func() *window
	// wallStats reports the wall sampler's counters while one runs.
	wallStats func() WallStats
}

type window struct {
	info WindowInfo
	data []byte
	// presence and maxInterval are set for wall windows: per label set, the snapshots that saw
	// at least one goroutine carrying it, and the longest interval a snapshot stood for.
	presence    map[labelSet]seen
	maxInterval time.Duration
}

// NewStore returns a store keeping at most keep windows of each kind and maxBytes of profile data
// in all; zero or negative values take DefaultKeep and DefaultMaxBytes.
func NewStore(keep int, maxBytes int64) *Store {
	if keep <= 0 {
		keep = DefaultKeep
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Store{keep: keep, maxBytes: maxBytes, perKind: make(map[Kind]int), open: make(map[Kind]func() *window)}
}

// setOpen registers (or, with nil, removes) the source of kind k's open window.
func (s *Store) setOpen(k Kind, open func() *window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if open == nil {
		delete(s.open, k)
		return
	}
	s.open[k] = open
}

func (s *Store) setWallStats(f func() WallStats) {
	s.mu.Lock()
	s.wallStats = f
	s.mu.Unlock()
}

// WallStats returns the counters of the wall sampler filling s, and false when none runs.
func (s *Store) WallStats() (WallStats, bool) {
	s.mu.Lock()
	f := s.wallStats
	s.mu.Unlock()
	if f == nil {
		return WallStats{}, false
	}
	return f(), true
}

// addWall stores a closed wall window with its presence counts.
func (s *Store) addWall(from, until time.Time, data []byte, presence map[labelSet]seen, maxInterval time.Duration) error {
	return s.add(KindWall, from, until, data, func(w *window) { w.presence, w.maxInterval = presence, maxInterval })
}

// Add stores a window of kind k covering [from, until] whose profile is data, a pprof profile
// (gzipped or not). The store keeps data without copying it; the caller must not modify it. Add
// does not parse data: a corrupt window is reported by the queries that read it. A window larger
// than the store's byte cap is rejected.
func (s *Store) Add(k Kind, from, until time.Time, data []byte) error {
	return s.add(k, from, until, data, nil)
}

func (s *Store) add(k Kind, from, until time.Time, data []byte, fill func(*window)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	switch {
	case !k.valid():
		err = fmt.Errorf("add window: unknown kind %q", k)
	case len(data) == 0:
		err = errors.New("add window: empty profile")
	case until.Before(from):
		err = fmt.Errorf("add window: until %s before from %s", until.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano))
	case int64(len(data)) > s.maxBytes:
		err = fmt.Errorf("add window: %d bytes exceed the store's cap of %d", len(data), s.maxBytes)
	}
	if err != nil {
		s.rejected++
		return err
	}
	s.nextID++
	s.added++
	w := &window{
		info: WindowInfo{
			ID:           s.nextID,
			Kind:         k,
			ProfileTypes: k.ProfileTypes(),
			From:         from.Round(0),
			Until:        until.Round(0),
			Bytes:        len(data),
		},
		data: data,
	}
	if fill != nil {
		fill(w)
	}
	s.windows = append(s.windows, w)
	s.perKind[k]++
	s.bytes += int64(len(data))
	for s.perKind[k] > s.keep {
		s.evictOldest(func(w *window) bool { return w.info.Kind == k })
	}
	for s.bytes > s.maxBytes {
		s.evictOldest(func(*window) bool { return true })
	}
	return nil
}

// evictOldest removes the oldest window matching match. It is called with s.mu held.
func (s *Store) evictOldest(match func(*window) bool) {
	i := slices.IndexFunc(s.windows, match)
	if i < 0 {
		return
	}
	w := s.windows[i]
	s.windows = slices.Delete(s.windows, i, i+1)
	s.perKind[w.info.Kind]--
	s.bytes -= int64(w.info.Bytes)
	s.evicted++
}

// Windows lists the stored windows ordered by start time.
func (s *Store) Windows() []WindowInfo {
	s.mu.Lock()
	out := make([]WindowInfo, len(s.windows))
	for i, w := range s.windows {
		out[i] = w.info
		out[i].ProfileTypes = slices.Clone(w.info.ProfileTypes)
	}
	s.mu.Unlock()
	slices.SortStableFunc(out, func(a, b WindowInfo) int { return a.From.Compare(b.From) })
	return out
}

// Stats returns the store's counters and bounds.
func (s *Store) Stats() StoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StoreStats{
		Windows: len(s.windows), Bytes: s.bytes, Keep: s.keep, MaxBytes: s.maxBytes,
		Added: s.added, Evicted: s.evicted, Rejected: s.rejected,
	}
}

// Query merges the windows of q.Type that overlap [q.From, q.Until] into one pprof profile,
// keeping only the samples whose labels match q's trace, span and stage. The profile's
// DefaultSampleType names the sample type of q.Type; its TimeNanos and DurationNanos span the
// merged windows. Query returns ErrNoWindows when no window overlaps the range and ErrNoSamples
// when no sample matches.
func (s *Store) Query(q Query) (*profile.Profile, error) {
	r, err := s.query(q)
	if err != nil {
		return nil, err
	}
	return r.profile, nil
}

// queryResult is a merged profile with what the JSON summary reports about it.
type queryResult struct {
	profile     *profile.Profile
	sampleType  string
	windows     int
	from, until time.Time
	// stageNanos is the time per rag_stage ("" for labelled samples outside a stage): CPU time
	// for the CPU view, and for the wall view the time the stage was present (snapshots that saw
	// at least one of its goroutines, times the period), so a stage fanned out to several
	// goroutines counts its wall time once.
	stageNanos map[string]int64
	// maxInterval is the longest interval between snapshots in the wall windows merged: the
	// resolution of the wall view's stage times (zero for other views).
	maxInterval time.Duration
}

func (s *Store) query(q Query) (queryResult, error) {
	if q.Type == "" {
		q.Type = pyroscope.ProfileCPU
	}
	src, ok := profileTypes[q.Type]
	if !ok {
		return queryResult{}, fmt.Errorf("%w %q", ErrUnknownType, q.Type)
	}
	if !q.From.IsZero() && !q.Until.IsZero() && q.Until.Before(q.From) {
		return queryResult{}, fmt.Errorf("query: until %s before from %s",
			q.Until.Format(time.RFC3339Nano), q.From.Format(time.RFC3339Nano))
	}
	selected := s.overlapping(src.kind, q.From, q.Until)
	if len(selected) == 0 {
		return queryResult{}, fmt.Errorf("%s %s: %w", q.Type, describeRange(q.From, q.Until), ErrNoWindows)
	}

	// Parse outside the lock: parsing costs milliseconds per window and must not stall the
	// profiler's uploads.
	var (
		matched   []*profile.Profile
		parseErrs []error
		res       = queryResult{sampleType: src.sampleType, stageNanos: make(map[string]int64)}
	)
	for _, w := range selected {
		p, err := profile.ParseData(w.data)
		if err != nil {
			parseErrs = append(parseErrs, fmt.Errorf("window %d: %w", w.info.ID, err))
			continue
		}
		p.Sample = slices.DeleteFunc(p.Sample, func(smp *profile.Sample) bool { return !q.matches(smp) })
		if len(p.Sample) == 0 {
			continue
		}
		if w.presence != nil {
			res.maxInterval = max(res.maxInterval, w.maxInterval)
			for ls, sn := range w.presence {
				if q.matchesSet(ls) {
					res.stageNanos[ls.stage] += sn.nanos
				}
			}
		} else {
			addStageNanos(res.stageNanos, p)
		}
		matched = append(matched, p)
		res.windows++
		if res.from.IsZero() || w.info.From.Before(res.from) {
			res.from = w.info.From
		}
		if w.info.Until.After(res.until) {
			res.until = w.info.Until
		}
	}
	if len(matched) == 0 {
		if len(parseErrs) == len(selected) {
			return queryResult{}, fmt.Errorf("parse profile: %w", errors.Join(parseErrs...))
		}
		return queryResult{}, fmt.Errorf("%s %s%s: %w", q.Type, describeRange(q.From, q.Until), q.describeLabels(), ErrNoSamples)
	}
	merged, err := profile.Merge(matched)
	if err != nil {
		return queryResult{}, fmt.Errorf("merge %d windows: %w", len(matched), err)
	}
	merged.DefaultSampleType = src.sampleType
	merged.TimeNanos = res.from.UnixNano()
	merged.DurationNanos = res.until.Sub(res.from).Nanoseconds()
	res.profile = merged
	return res, nil
}

// addStageNanos adds the CPU nanoseconds of p's samples to their rag_stage; a profile without a
// nanoseconds sample type counts samples times its period.
func addStageNanos(stages map[string]int64, p *profile.Profile) {
	idx, scale := -1, int64(1)
	for i, st := range p.SampleType {
		if st.Unit == "nanoseconds" {
			idx = i
			break
		}
	}
	if idx < 0 {
		idx, scale = 0, max(p.Period, 1)
	}
	for _, smp := range p.Sample {
		if idx >= len(smp.Value) {
			continue
		}
		stage := ""
		if v := smp.Label[LabelStage]; len(v) > 0 {
			stage = v[0]
		}
		stages[stage] += smp.Value[idx] * scale
	}
}

// overlapping returns the windows of kind k overlapping [from, until]; a zero bound is open.
func (s *Store) overlapping(k Kind, from, until time.Time) []*window {
	s.mu.Lock()
	windows := slices.Clone(s.windows)
	open := s.open[k]
	s.mu.Unlock()
	// The open window's source takes its own lock, under which it may add to the store: call it
	// without s.mu held.
	if open != nil {
		if w := open(); w != nil {
			windows = append(windows, w)
		}
	}
	var out []*window
	for _, w := range windows {
		if w.info.Kind != k {
			continue
		}
		if !from.IsZero() && w.info.Until.Before(from) {
			continue
		}
		if !until.IsZero() && w.info.From.After(until) {
			continue
		}
		out = append(out, w)
	}
	return out
}

func (q Query) matches(s *profile.Sample) bool {
	return (q.TraceID == "" || s.HasLabel(LabelTraceID, q.TraceID)) &&
		(q.SpanID == "" || s.HasLabel(LabelSpanID, q.SpanID)) &&
		(q.Stage == "" || s.HasLabel(LabelStage, q.Stage))
}

// matchesSet tells whether a wall window's presence count is the one to add for q: the exact
// span's when q names one, else the count over all spans of the trace and stage.
func (q Query) matchesSet(ls labelSet) bool {
	span := cmp.Or(q.SpanID, anySpan)
	return (q.TraceID == "" || ls.traceID == q.TraceID) && ls.spanID == span &&
		(q.Stage == "" || ls.stage == q.Stage)
}

func (q Query) describeLabels() string {
	var out string
	for _, l := range [][2]string{{LabelTraceID, q.TraceID}, {LabelSpanID, q.SpanID}, {LabelStage, q.Stage}} {
		if l[1] != "" {
			out += " " + l[0] + "=" + l[1]
		}
	}
	return out
}

func describeRange(from, until time.Time) string {
	f, u := "-inf", "+inf"
	if !from.IsZero() {
		f = from.Format(time.RFC3339Nano)
	}
	if !until.IsZero() {
		u = until.Format(time.RFC3339Nano)
	}
	return "in [" + f + ", " + u + "]"
}
