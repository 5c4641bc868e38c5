// Package dashboard serves a live view of a running bench or sweep (bench --dashboard): a
// self-contained page that polls a JSON endpoint every second and draws per-second series of
// throughput, TTFT and E2E latency percentiles over a sliding window, requests in flight,
// errors by kind and the server's scraped gauges, and that ends on the run's final report.
//
// A Store turns what the run streams (records as they finish, progress snapshots, the
// scraper's latest values) into those series, one point per Tick, and keeps at most
// MaxPoints of them: its memory does not grow with the run's length. A Server serves a Store
// over HTTP. Both are safe for concurrent use.
package dashboard

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ragtail/ragtail/internal/loadgen/scrape"
	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// Defaults and bounds of a Store.
const (
	// DefaultWindow is the stretch of finished requests each point's percentiles cover.
	DefaultWindow = 10 * time.Second
	// DefaultMaxPoints is how many points a Store keeps: an hour at one point a second.
	DefaultMaxPoints = 3600
	// MaxErrorKinds bounds the error kinds a Store tells apart; later kinds count as "other".
	MaxErrorKinds = 16
	// MaxServerSeries bounds the server gauges a Store keeps; later series are counted as
	// dropped. The gauges of preferredGauges come first.
	MaxServerSeries = 16
)

// preferredGauges are the server gauges kept first when a target exposes more than
// MaxServerSeries: vLLM's engine state, its KV cache, GPU memory and ragtail's own in-flight
// gauge.
var preferredGauges = []string{
	"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
	"vllm:gpu_cache_usage_perc", scrape.MemoryMetric, "rag_inflight_requests",
}

// Percentiles are a latency's percentiles over a Store's window, in milliseconds, and the
// count of requests they were taken over (0: none, and the percentiles are absent).
type Percentiles struct {
	N   int64    `json:"n"`
	P50 *float64 `json:"p50,omitempty"`
	P95 *float64 `json:"p95,omitempty"`
	P99 *float64 `json:"p99,omitempty"`
}

// Point is one second of a run, as the page draws it.
type Point struct {
	Seq   int64   `json:"seq"`             // increasing from 0; the page asks for the points after the last it has
	T     float64 `json:"t"`               // seconds from the Store's start
	Phase string  `json:"phase,omitempty"` // the sweep's point (or probe) under way; "" for a bench
	// Completed and Failed count the requests that ended since the previous point (warmup
	// requests, cancelled ones and session steps never sent are in neither); RPS is both per
	// second of the interval, OutputTPS the completed requests' output tokens per second.
	Completed int     `json:"completed"`
	Failed    int     `json:"failed"`
	RPS       float64 `json:"rps"`
	OutputTPS float64 `json:"output_tps"`
	// InFlight and Queued are the run's last progress snapshot: requests sent and not ended,
	// and requests due but waiting for a concurrency slot.
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
	// TTFT and E2EL are the percentiles of the requests that completed in the last Window.
	TTFT Percentiles `json:"ttft_ms"`
	E2EL Percentiles `json:"e2el_ms"`
	// Errors counts the failures since the previous point by kind.
	Errors map[string]int `json:"errors,omitempty"`
	// Server is the last scraped value of each kept server gauge, by Store key
	// (name{label="value",...}).
	Server map[string]float64 `json:"server,omitempty"`
}

// Totals count the whole run so far.
type Totals struct {
	Sent      int `json:"sent"` // from the last progress snapshot of the current bench run or sweep point
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Warmup    int `json:"warmup"`
	// DroppedServerSeries counts server gauges left out past MaxServerSeries.
	DroppedServerSeries int `json:"dropped_server_series,omitempty"`
}

// State is what the JSON endpoint returns: the points after the one the page asked from, and
// the run's state.
type State struct {
	Title     string    `json:"title"`
	Started   time.Time `json:"started"`
	Elapsed   float64   `json:"elapsed_s"` // seconds from Started to now, or to the end once Final
	WindowS   float64   `json:"window_s"`
	MaxPoints int       `json:"max_points"`
	Phase     string    `json:"phase,omitempty"`
	Totals    Totals    `json:"totals"`
	// ServerKeys are the kept server gauges (the keys of Point.Server), the engine's first.
	ServerKeys []string `json:"server_keys"`
	// Points are the kept points with Seq above the one asked from, oldest first; Dropped
	// says how many points past it were no longer kept (MaxPoints).
	Points  []Point `json:"points"`
	Dropped int64   `json:"dropped,omitempty"`
	// Final is set once the run ended and its report is served at /report.
	Final bool `json:"final"`
}

// Gauges is where a Store reads the server's gauges: scrape.Scraper implements it.
type Gauges interface {
	Latest() []scrape.Sample
}

var _ Gauges = (*scrape.Scraper)(nil)

// Option configures a Store.
type Option interface{ apply(*Store) }

type optionFunc func(*Store)

func (f optionFunc) apply(s *Store) { f(s) }

// WithWindow sets the stretch of finished requests each point's percentiles cover
// (DefaultWindow); it is rounded up to whole ticks of Server's one second.
func WithWindow(d time.Duration) Option {
	return optionFunc(func(s *Store) {
		if d > 0 {
			s.window = d
		}
	})
}

// WithMaxPoints sets how many points a Store keeps (DefaultMaxPoints).
func WithMaxPoints(n int) Option {
	return optionFunc(func(s *Store) {
		if n > 0 {
			s.maxPoints = n
		}
	})
}

// WithTitle sets the page's title (the run's target and load, say).
func WithTitle(title string) Option { return optionFunc(func(s *Store) { s.title = title }) }

// Store holds a run's live series. The zero value is not usable: call NewStore. Its memory is
// bounded by MaxPoints points, one HDR histogram per second of the window for each of TTFT and
// E2EL (about 200 KB each once a value is recorded), MaxErrorKinds and MaxServerSeries.
type Store struct {
	mu        sync.Mutex
	title     string
	window    time.Duration
	maxPoints int
	start     time.Time
	lastTick  time.Time

	// The interval being filled: the requests that ended since the last Tick.
	completed, failed, outputTokens int
	errors                          map[string]int
	ttft, e2el                      *stats.Histogram
	// The window: one histogram per past tick, newest last, at most ticksPerWindow of them.
	ttftWindow, e2elWindow []*stats.Histogram

	progress loadgen.Progress
	phase    string
	gauges   Gauges
	server   []string // the kept gauge keys, in order of admission
	dropped  map[string]bool
	totals   Totals

	points []Point // ring of at most maxPoints, oldest at head
	head   int
	seq    int64 // of the next point

	final       bool
	ended       time.Time // when Finish was called
	finalReport []byte
	finalSeen   chan struct{} // closed when the final report was first served
	seenOnce    sync.Once
}

// NewStore returns an empty Store whose clock starts at start.
func NewStore(start time.Time, opts ...Option) *Store {
	s := &Store{window: DefaultWindow, maxPoints: DefaultMaxPoints, start: start, lastTick: start,
		errors: map[string]int{}, ttft: &stats.Histogram{}, e2el: &stats.Histogram{},
		dropped: map[string]bool{}, finalSeen: make(chan struct{})}
	for _, o := range opts {
		o.apply(s)
	}
	return s
}

// Add counts records that just ended. It does not keep them. Call it from loadgen.Config.Stream.
func (s *Store) Add(recs ...loadgen.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		switch {
		case r.NotSent:
			continue
		case r.Warmup:
			s.totals.Warmup++
			continue
		case r.Cancelled:
			s.totals.Cancelled++
			continue
		case !r.OK():
			s.failed++
			s.totals.Failed++
			s.countError(errorKind(r))
			continue
		}
		s.completed++
		s.totals.Completed++
		s.outputTokens += r.OutputTokens
		s.e2el.Record(r.E2EL())
		if ttft, ok := r.TTFT(); ok {
			s.ttft.Record(ttft)
		}
	}
}

// errorKind is a failed record's kind: its ErrKind, or its status class.
func errorKind(r *loadgen.Record) string {
	switch {
	case r.ErrKind != "":
		return r.ErrKind
	case r.Status >= 500:
		return loadgen.ErrKindHTTP5xx
	case r.Status >= 400:
		return loadgen.ErrKindHTTP4xx
	}
	return "other"
}

// countError counts one failure of kind, past MaxErrorKinds distinct kinds as "other".
func (s *Store) countError(kind string) {
	if _, ok := s.errors[kind]; !ok && len(s.errors) >= MaxErrorKinds {
		kind = "other"
	}
	s.errors[kind]++
}

// Progress keeps the run's latest progress snapshot (requests in flight and queued). Call it
// from loadgen.Config.Progress; a final snapshot leaves nothing in flight.
func (s *Store) Progress(p loadgen.Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Final {
		p.InFlight, p.Queued = 0, 0
	}
	s.progress = p
	s.totals.Sent = p.Sent
}

// SetTitle sets the page's title (the run's target and load).
func (s *Store) SetTitle(title string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.title = title
}

// SetPhase names what the run does now (a sweep's "point 2/5: 40 req/s"), shown with every
// point from the next on; "" for none.
func (s *Store) SetPhase(phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = phase
}

// SetGauges makes g the source of the server's gauges from the next Tick on (a sweep scrapes
// each point with a new scraper); nil stops reading any.
func (s *Store) SetGauges(g Gauges) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gauges = g
}

// Tick closes the interval since the previous Tick into a point at now, and starts the next.
// Server calls it every second.
func (s *Store) Tick(now time.Time) {
	var samples []scrape.Sample
	s.mu.Lock()
	g, final := s.gauges, s.final
	s.mu.Unlock()
	if final {
		return
	}
	if g != nil {
		samples = g.Latest() // outside the lock: the scraper has its own
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dt := now.Sub(s.lastTick).Seconds()
	s.lastTick = now
	p := Point{Seq: s.seq, T: now.Sub(s.start).Seconds(), Phase: s.phase, Completed: s.completed,
		Failed: s.failed, InFlight: s.progress.InFlight, Queued: s.progress.Queued}
	if dt > 0 {
		p.RPS = float64(s.completed+s.failed) / dt
		p.OutputTPS = float64(s.outputTokens) / dt
	}
	if len(s.errors) > 0 {
		p.Errors = s.errors
		s.errors = map[string]int{}
	}
	s.ttftWindow = s.slide(s.ttftWindow, s.ttft)
	s.e2elWindow = s.slide(s.e2elWindow, s.e2el)
	p.TTFT, p.E2EL = percentiles(s.ttftWindow), percentiles(s.e2elWindow)
	// A zero Histogram allocates on its first value: a second with no request costs nothing.
	s.ttft, s.e2el = &stats.Histogram{}, &stats.Histogram{}
	s.completed, s.failed, s.outputTokens = 0, 0, 0
	p.Server = s.keep(samples)
	s.push(p)
}

// ticksPerWindow is how many ticks of one second the window spans.
func (s *Store) ticksPerWindow() int {
	return max(1, int((s.window+time.Second-1)/time.Second))
}

// slide appends the interval's histogram to a window and drops those past its span.
func (s *Store) slide(window []*stats.Histogram, h *stats.Histogram) []*stats.Histogram {
	window = append(window, h)
	if n := s.ticksPerWindow(); len(window) > n {
		clear(window[:len(window)-n])
		window = append(window[:0], window[len(window)-n:]...)
	}
	return window
}

// percentiles merges a window's histograms and reads its percentiles.
func percentiles(window []*stats.Histogram) Percentiles {
	all := &stats.Histogram{}
	for _, h := range window {
		if h.Count() > 0 {
			all.Merge(h)
		}
	}
	p := Percentiles{N: all.Count()}
	if p.N == 0 {
		return p
	}
	ms := func(q float64) *float64 {
		v := float64(all.Quantile(q)) / float64(time.Millisecond)
		return &v
	}
	p.P50, p.P95, p.P99 = ms(0.50), ms(0.95), ms(0.99)
	return p
}

// keep returns the values of the kept gauges among samples, admitting new gauges while there
// is room, the preferred ones first.
func (s *Store) keep(samples []scrape.Sample) map[string]float64 {
	if len(samples) == 0 {
		return nil
	}
	byKey := map[string]float64{}
	var fresh []scrape.Sample
	for _, smp := range samples {
		if !smp.Gauge {
			continue
		}
		k := Key(smp.Name, smp.Labels)
		byKey[k] = smp.Value
		if !slices.Contains(s.server, k) && !s.dropped[k] {
			fresh = append(fresh, smp)
		}
	}
	slices.SortStableFunc(fresh, func(a, b scrape.Sample) int { return cmp.Compare(preference(a.Name), preference(b.Name)) })
	for _, smp := range fresh {
		k := Key(smp.Name, smp.Labels)
		if len(s.server) >= MaxServerSeries {
			s.dropped[k] = true
			s.totals.DroppedServerSeries++
			delete(byKey, k)
			continue
		}
		s.server = append(s.server, k)
	}
	for k := range byKey {
		if s.dropped[k] {
			delete(byKey, k)
		}
	}
	if len(byKey) == 0 {
		return nil
	}
	return byKey
}

// preference orders gauges: those of preferredGauges in its order, then the others.
func preference(name string) int {
	if i := slices.Index(preferredGauges, name); i >= 0 {
		return i
	}
	return len(preferredGauges)
}

// Key names a server series by its name and labels, as Prometheus writes it:
// name{a="x",b="y"} with the labels sorted.
func Key(name string, labels map[string]string) string {
	if len(labels) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(labels[k])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// push appends p to the ring, dropping the oldest point when it is full.
func (s *Store) push(p Point) {
	s.seq++
	if len(s.points) < s.maxPoints {
		s.points = append(s.points, p)
		return
	}
	s.points[s.head] = p
	s.head = (s.head + 1) % s.maxPoints
}

// State returns the points with Seq at or above from, and the run's state, at now.
func (s *Store) State(from int64, now time.Time) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Title: s.title, Started: s.start, Elapsed: now.Sub(s.start).Seconds(), WindowS: s.window.Seconds(),
		MaxPoints: s.maxPoints, Phase: s.phase, Totals: s.totals, Final: s.final, Points: []Point{},
		ServerKeys: slices.Clone(s.server)}
	if st.ServerKeys == nil {
		st.ServerKeys = []string{}
	}
	if s.final {
		st.Elapsed = s.ended.Sub(s.start).Seconds() // the run's length, however long the page looks after it
	}
	n := len(s.points)
	oldest := s.seq - int64(n)
	if from < oldest {
		if from >= 0 {
			st.Dropped = oldest - from
		}
		from = oldest
	}
	// The ring in order is points[head:] then points[:head]; its i-th point has Seq oldest+i.
	for i := max(0, int(from-oldest)); i < n; i++ {
		st.Points = append(st.Points, s.points[(s.head+i)%n])
	}
	return st
}

// Finish closes the last interval into a point at now and marks the run ended with its final
// report, an HTML page served at /report from then on. Later ticks add no point.
func (s *Store) Finish(now time.Time, reportHTML []byte) {
	s.Tick(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.final, s.ended, s.finalReport = true, now, reportHTML
	s.phase = ""
}

// Final reports whether Finish was called.
func (s *Store) Final() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final
}

// finalHTML is the final report, nil before Finish; it marks the report seen.
func (s *Store) finalHTML() []byte {
	s.mu.Lock()
	html := s.finalReport
	s.mu.Unlock()
	if html != nil {
		s.seenOnce.Do(func() { close(s.finalSeen) })
	}
	return html
}

// FinalSeen is closed once a page has loaded the final report.
func (s *Store) FinalSeen() <-chan struct{} { return s.finalSeen }
