package telemetry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"
)

// OwnScopePrefix is the instrumentation-scope prefix of the meters MeterProvider aggregates
// itself: ragtail's own packages'. Every other scope (otelhttp, otelgrpc, the database and cache
// clients, the runtime) gets the SDK's meter.
const OwnScopePrefix = "github.com/ragtail/ragtail/"

// MeterProvider is the service's meter provider. It is the OTel SDK's, except that the
// synchronous counters and histograms of ragtail's own scopes (OwnScopePrefix) are aggregated
// here and reach the SDK's readers (Prometheus, OTLP) through a metric producer. What that buys
// is binding: an instrument of ours hands out a recorder bound to one label set
// (BindFloat64, BindInt64), which records with no option to resolve and no map to search, where
// the SDK does both on every measurement. The pipeline binds every label set it records, about
// twenty measurements a request.
//
// The aggregation is the SDK's default one, which the tests hold it to: cumulative sums and
// explicit-bucket histograms (with sum, min and max), the default buckets unless the instrument
// names its own, and the cardinality limit of OTEL_GO_X_CARDINALITY_LIMIT (2000 by default; past
// it, measurements go to the otel.metric.overflow=true series). Exemplars follow
// OTEL_METRICS_EXEMPLAR_FILTER (trace_based by default: measurements made within a sampled span),
// with the SDK's reservoirs: one exemplar per histogram bucket, and GOMAXPROCS per sum series,
// each a uniform sample of the measurements since the last collection. Exemplar times are on
// the service's clock.
//
// The differences: the data is always cumulative, so an exporter asking for delta temporality
// (OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta or lowmemory), or a metric reader
// Setup cannot hand the producer to (an exporter other than OTLP), makes Setup leave every scope
// to the SDK; views do not apply to ragtail's own instruments (Setup registers none); a bound
// label set counts towards the cardinality limit from its binding, not its first measurement;
// and float64 up-down counters and gauges of ragtail's scopes are the SDK's.
type MeterProvider struct {
	embedded.MeterProvider

	sdk    *sdkmetric.MeterProvider
	own    bool // aggregate ragtail's scopes here
	now    func() time.Time
	filter func(context.Context) bool // exemplar filter
	limit  int                        // cardinality limit per instrument; 0: none

	mu     sync.Mutex
	meters []*meter // in creation order

	// rng seeds each cell's exemplar sampler and picks the exemplars of a collection: random,
	// or seeded by a test.
	rngMu sync.Mutex
	rng   *rand.Rand
}

var (
	_ metric.MeterProvider = (*MeterProvider)(nil)
	_ sdkmetric.Producer   = (*MeterProvider)(nil)
)

// newMeterProvider returns a provider that aggregates ragtail's scopes itself when own is true.
// Its SDK provider is set by setSDK once the readers, which take the provider as their producer,
// exist.
func newMeterProvider(own bool, now func() time.Time) *MeterProvider {
	return &MeterProvider{own: own, now: now, filter: exemplarFilterFromEnv(), limit: cardinalityLimitFromEnv(),
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// newRand returns a random source of its own for a cell, seeded from p's.
func (p *MeterProvider) newRand() *rand.Rand {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	return rand.New(rand.NewPCG(p.rng.Uint64(), p.rng.Uint64()))
}

// Meter returns the meter of a scope: ragtail's own for ragtail's scopes, the SDK's for others.
func (p *MeterProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	sdkMeter := p.sdk.Meter(name, opts...)
	if !p.own || !strings.HasPrefix(name, OwnScopePrefix) {
		return sdkMeter
	}
	cfg := metric.NewMeterConfig(opts...)
	scope := instrumentation.Scope{Name: name, Version: cfg.InstrumentationVersion(), SchemaURL: cfg.SchemaURL(), Attributes: cfg.InstrumentationAttributes()}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.meters {
		if m.scope.Name == scope.Name && m.scope.Version == scope.Version && m.scope.SchemaURL == scope.SchemaURL && m.scope.Attributes.Equals(&scope.Attributes) {
			return m
		}
	}
	m := &meter{Meter: sdkMeter, p: p, scope: scope}
	p.meters = append(p.meters, m)
	return m
}

// SDK returns the SDK's provider, which serves every scope that is not ragtail's and shares the
// readers.
func (p *MeterProvider) SDK() *sdkmetric.MeterProvider { return p.sdk }

// ForceFlush flushes the readers, as the SDK's provider does.
func (p *MeterProvider) ForceFlush(ctx context.Context) error { return p.sdk.ForceFlush(ctx) }

// Shutdown shuts the readers down, as the SDK's provider does.
func (p *MeterProvider) Shutdown(ctx context.Context) error { return p.sdk.Shutdown(ctx) }

// Produce returns the data of ragtail's own instruments, for the readers.
func (p *MeterProvider) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	p.mu.Lock()
	meters := slices.Clone(p.meters)
	p.mu.Unlock()
	now := p.now()
	var out []metricdata.ScopeMetrics
	for _, m := range meters {
		sm := metricdata.ScopeMetrics{Scope: m.scope}
		m.mu.Lock()
		aggs := slices.Clone(m.aggs)
		m.mu.Unlock()
		for _, a := range aggs {
			if data, ok := a.collect(now); ok {
				sm.Metrics = append(sm.Metrics, data)
			}
		}
		if len(sm.Metrics) > 0 {
			out = append(out, sm)
		}
	}
	return out, nil
}

// meter is a meter of one of ragtail's scopes: its synchronous counters and histograms are
// ragtail's, its other instruments the SDK's meter's (embedded).
type meter struct {
	metric.Meter // the SDK's meter of the same scope
	p            *MeterProvider
	scope        instrumentation.Scope

	mu   sync.Mutex
	aggs []collector // in creation order
}

// collector is an instrument's aggregation, as Produce reads it.
type collector interface {
	collect(now time.Time) (metricdata.Metrics, bool)
}

// instKind is the kind of one of ragtail's instruments.
type instKind int

const (
	kindCounter instKind = iota
	kindUpDownCounter
	kindHistogram
)

// instID identifies an instrument within its meter, as the SDK does: asking again for the same
// one returns it (with the histogram boundaries it was first asked with).
type instID struct {
	name, description, unit string
	kind                    instKind
	float                   bool
}

// defaultBounds are the SDK's default histogram boundaries.
var defaultBounds = []float64{0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000}

// instrumentNameRE is the instrument-name syntax the SDK enforces.
var instrumentNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_./-]{0,254}$`)

func lookup[N int64 | float64](m *meter, id instID, bounds []float64) (*agg[N], error) {
	var err error
	if !instrumentNameRE.MatchString(id.name) {
		// The instrument still works, as the SDK's does.
		err = fmt.Errorf("%w: %s: must be 1 to 255 characters of [A-Za-z0-9_.-/], starting with a letter", sdkmetric.ErrInstrumentName, id.name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.aggs {
		if a, ok := c.(*agg[N]); ok && a.id == id {
			return a, err
		}
	}
	a := newAgg[N](m.p, id, bounds)
	m.aggs = append(m.aggs, a)
	return a, err
}

// histID returns the identity and boundaries of a histogram. Boundaries that do not increase
// strictly are an error, and the default ones are used, as in the SDK.
func histID(name string, float bool, cfg interface {
	Description() string
	Unit() string
	ExplicitBucketBoundaries() []float64
}) (instID, []float64, error) {
	var err error
	bounds := cfg.ExplicitBucketBoundaries()
	for i := 1; i < len(bounds); i++ {
		if bounds[i-1] >= bounds[i] {
			err = fmt.Errorf("explicit bucket histogram %s: non-monotonic boundaries: %v", name, bounds)
			bounds = nil
			break
		}
	}
	if bounds == nil {
		bounds = defaultBounds
	}
	return instID{name: name, description: cfg.Description(), unit: cfg.Unit(), kind: kindHistogram, float: float}, slices.Clone(bounds), err
}

// Int64Counter returns ragtail's int64 counter of this name.
func (m *meter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	cfg := metric.NewInt64CounterConfig(opts...)
	a, err := lookup[int64](m, instID{name: name, description: cfg.Description(), unit: cfg.Unit(), kind: kindCounter}, nil)
	return &int64Counter{agg: a}, err
}

// Int64UpDownCounter returns ragtail's int64 up-down counter of this name.
func (m *meter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	cfg := metric.NewInt64UpDownCounterConfig(opts...)
	a, err := lookup[int64](m, instID{name: name, description: cfg.Description(), unit: cfg.Unit(), kind: kindUpDownCounter}, nil)
	return &int64UpDownCounter{agg: a}, err
}

// Float64Counter returns ragtail's float64 counter of this name.
func (m *meter) Float64Counter(name string, opts ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	cfg := metric.NewFloat64CounterConfig(opts...)
	a, err := lookup[float64](m, instID{name: name, description: cfg.Description(), unit: cfg.Unit(), kind: kindCounter, float: true}, nil)
	return &float64Counter{agg: a}, err
}

// Int64Histogram returns ragtail's int64 histogram of this name.
func (m *meter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	id, bounds, boundsErr := histID(name, false, metric.NewInt64HistogramConfig(opts...))
	a, err := lookup[int64](m, id, bounds)
	return &int64Histogram{agg: a}, errors.Join(boundsErr, err)
}

// Float64Histogram returns ragtail's float64 histogram of this name.
func (m *meter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	id, bounds, boundsErr := histID(name, true, metric.NewFloat64HistogramConfig(opts...))
	a, err := lookup[float64](m, id, bounds)
	return &float64Histogram{agg: a}, errors.Join(boundsErr, err)
}

// The instruments. Each records through its aggregation, and binds label sets: BindInt64 and
// BindFloat64 return a recorder of one set, which the pipeline's recorder looks for.
type (
	int64Counter struct {
		embedded.Int64Counter
		*agg[int64]
	}
	int64UpDownCounter struct {
		embedded.Int64UpDownCounter
		*agg[int64]
	}
	float64Counter struct {
		embedded.Float64Counter
		*agg[float64]
	}
	int64Histogram struct {
		embedded.Int64Histogram
		*agg[int64]
	}
	float64Histogram struct {
		embedded.Float64Histogram
		*agg[float64]
	}
)

func (c *int64Counter) Add(ctx context.Context, v int64, opts ...metric.AddOption) {
	c.series(metric.NewAddConfig(opts).Attributes()).record(ctx, c.agg, v)
}

func (c *int64UpDownCounter) Add(ctx context.Context, v int64, opts ...metric.AddOption) {
	c.series(metric.NewAddConfig(opts).Attributes()).record(ctx, c.agg, v)
}

func (c *float64Counter) Add(ctx context.Context, v float64, opts ...metric.AddOption) {
	c.series(metric.NewAddConfig(opts).Attributes()).record(ctx, c.agg, v)
}

func (h *int64Histogram) Record(ctx context.Context, v int64, opts ...metric.RecordOption) {
	h.series(metric.NewRecordConfig(opts).Attributes()).record(ctx, h.agg, v)
}

func (h *float64Histogram) Record(ctx context.Context, v float64, opts ...metric.RecordOption) {
	h.series(metric.NewRecordConfig(opts).Attributes()).record(ctx, h.agg, v)
}

// Enabled reports that measurements are kept: they always are.
func (a *agg[N]) Enabled(context.Context) bool { return true }

// BindInt64 returns a recorder of set for an int64 instrument.
func (a *agg[N]) BindInt64(set attribute.Set) func(context.Context, int64) {
	s := a.series(set)
	return func(ctx context.Context, v int64) { s.record(ctx, a, N(v)) }
}

// BindFloat64 returns a recorder of set for a float64 instrument.
func (a *agg[N]) BindFloat64(set attribute.Set) func(context.Context, float64) {
	s := a.series(set)
	return func(ctx context.Context, v float64) { s.record(ctx, a, N(v)) }
}

// agg is the aggregation of one instrument: a series per label set.
type agg[N int64 | float64] struct {
	p      *MeterProvider
	id     instID
	bounds []float64 // histograms only
	start  time.Time
	k      int // exemplars kept per sum series
	cells  int // cells per series (cellCount)

	// byAttrs finds a label set's series without a lock (attribute.Distinct -> *series[N]), so
	// that measurements by options from several cores do not meet on a lock's cache line; mu
	// serializes the creation of series.
	byAttrs  sync.Map
	mu       sync.RWMutex
	list     []*series[N] // in creation order; under mu
	overflow *series[N]
}

func newAgg[N int64 | float64](p *MeterProvider, id instID, bounds []float64) *agg[N] {
	return &agg[N]{p: p, id: id, bounds: bounds, start: p.now(), k: runtime.GOMAXPROCS(0), cells: cellCount}
}

// overflowSet is the label set of the measurements past the cardinality limit, the SDK's.
var overflowSet = attribute.NewSet(attribute.Bool("otel.metric.overflow", true))

// series returns the series of set, creating it unless the instrument is at its cardinality
// limit, in which case it returns the overflow series.
func (a *agg[N]) series(set attribute.Set) *series[N] {
	key := set.Equivalent()
	if s, ok := a.byAttrs.Load(key); ok {
		return s.(*series[N])
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.byAttrs.Load(key); ok {
		return s.(*series[N])
	}
	if a.p.limit > 0 && len(a.list) >= a.p.limit-1 {
		if a.overflow == nil {
			a.overflow = a.newSeries(overflowSet)
			a.byAttrs.Store(overflowSet.Equivalent(), a.overflow)
			a.list = append(a.list, a.overflow)
		}
		return a.overflow
	}
	s := a.newSeries(set)
	a.byAttrs.Store(key, s)
	a.list = append(a.list, s)
	return s
}

func (a *agg[N]) newSeries(set attribute.Set) *series[N] {
	return &series[N]{attrs: set, cells: make([]atomic.Pointer[cell[N]], a.cells)}
}

// series is the running aggregate of one label set, kept in cells: each goroutine records into
// the cell of the processor it runs on (most of the time; see cellTokens), so that the
// measurements of goroutines on different cores do not take turns at one lock and one cache
// line. Profiling BenchmarkPipelineTelemetry on two cores found the record of a single shared
// aggregate spending nine tenths of its time waiting for its lock's and its counts' cache lines
// to come over from the other core. Collection adds the cells up.
type series[N int64 | float64] struct {
	attrs attribute.Set
	cells []atomic.Pointer[cell[N]] // a power of two of them, allocated at their first measurement

	// kept is, per exemplar reservoir (a histogram bucket, or the sum's one), the exemplars the
	// last collection reported, in the order of the slots of the one reservoir that the cells'
	// reservoirs stand for; under collectMu.
	collectMu sync.Mutex
	kept      [][]metricdata.Exemplar[N]
}

// cell is one part of a series: the aggregate of the measurements recorded into it.
type cell[N int64 | float64] struct {
	mu        sync.Mutex
	recorded  bool // a measurement was made: a series bound but never recorded is not exported
	sum       N
	count     uint64 // histograms
	min, max  N
	counts    []uint64 // histograms: per bucket, the last one above every bound
	exemplars []exemplarSlot[N]
	trackers  []sampler // per bucket (histograms) or one for the whole cell (sums)
	rng       *rand.Rand
}

// cellCount is the number of cells of a series: the power of two at or above twice the
// processors, so that two processors seldom share one, up to 32.
var cellCount = min(1<<bits.Len(uint(2*runtime.GOMAXPROCS(0)-1)), 32)

// cellTokens hands out cell tokens with an affinity to processors: a sync.Pool keeps one object
// per processor, which the goroutines running there get back each time, without a lock. Tokens
// are numbered in turn, and a series takes the cell its token selects. A processor gets a new
// token only when the pool drops its object (after two collections without use) or when two
// goroutines of one processor ask at once; a cell may then be shared for a while, which costs
// time, never a measurement.
var (
	cellTokens = sync.Pool{New: func() any { i := uint(nextCell.Add(1) - 1); return &i }}
	nextCell   atomic.Uint64
)

// cellToken returns the calling goroutine's processor's token.
func cellToken() uint {
	t := cellTokens.Get().(*uint)
	i := *t
	cellTokens.Put(t)
	return i
}

// cell returns the cell of index i, making it at its first use.
func (s *series[N]) cell(a *agg[N], i int) *cell[N] {
	if c := s.cells[i].Load(); c != nil {
		return c
	}
	c := &cell[N]{rng: a.p.newRand()}
	if a.id.kind == kindHistogram {
		c.counts = make([]uint64, len(a.bounds)+1)
		c.exemplars = make([]exemplarSlot[N], len(a.bounds)+1)
		c.trackers = make([]sampler, len(a.bounds)+1)
		for i := range c.trackers {
			c.trackers[i].reset(1, c.rng)
		}
	} else {
		c.exemplars = make([]exemplarSlot[N], a.k)
		c.trackers = make([]sampler, 1)
		c.trackers[0].reset(a.k, c.rng)
	}
	if s.cells[i].CompareAndSwap(nil, c) {
		return c
	}
	return s.cells[i].Load()
}

// exemplarSlot is one kept exemplar.
type exemplarSlot[N int64 | float64] struct {
	set     bool
	at      time.Time
	value   N
	traceID trace.TraceID
	spanID  trace.SpanID
}

// record adds v to s, in the cell of the calling goroutine's processor.
func (s *series[N]) record(ctx context.Context, a *agg[N], v N) {
	s.recordIn(ctx, a, v, int(cellToken()&uint(len(s.cells)-1)))
}

// recordIn adds v to s in its cell of index i.
func (s *series[N]) recordIn(ctx context.Context, a *agg[N], v N, i int) {
	offer := a.p.filter(ctx)
	c := s.cell(a, i)
	c.mu.Lock()
	c.recorded = true
	c.sum += v
	slot := -1
	if a.id.kind == kindHistogram {
		i, _ := slices.BinarySearch(a.bounds, float64(v))
		c.counts[i]++
		if c.count == 0 || v < c.min {
			c.min = v
		}
		if c.count == 0 || v > c.max {
			c.max = v
		}
		c.count++
		if offer {
			if ok, _ := c.trackers[i].sample(c.rng); ok {
				slot = i
			}
		}
	} else if offer {
		if ok, i := c.trackers[0].sample(c.rng); ok {
			slot = i
		}
	}
	if slot >= 0 {
		// The clock is read only for a measurement kept as an exemplar: most are not.
		sc := trace.SpanContextFromContext(ctx)
		c.exemplars[slot] = exemplarSlot[N]{set: true, at: a.p.now(), value: v, traceID: sc.TraceID(), spanID: sc.SpanID()}
	}
	c.mu.Unlock()
}

// collect returns the instrument's data, cumulative since its creation, and false when it has no
// series with a measurement yet. The exemplar samplers start afresh, as the SDK's reservoirs do
// on every collection.
func (a *agg[N]) collect(now time.Time) (metricdata.Metrics, bool) {
	a.mu.RLock()
	list := slices.Clone(a.list)
	a.mu.RUnlock()
	m := metricdata.Metrics{Name: a.id.name, Description: a.id.description, Unit: a.id.unit}
	var (
		h   = metricdata.Histogram[N]{Temporality: metricdata.CumulativeTemporality}
		sum = metricdata.Sum[N]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: a.id.kind == kindCounter}
	)
	for _, s := range list {
		t, ok := s.total(a)
		switch {
		case !ok:
		case a.id.kind == kindHistogram:
			h.DataPoints = append(h.DataPoints, metricdata.HistogramDataPoint[N]{
				Attributes: s.attrs, StartTime: a.start, Time: now, Count: t.count,
				Bounds: slices.Clone(a.bounds), BucketCounts: t.counts, Sum: t.sum,
				Min: metricdata.NewExtrema(t.min), Max: metricdata.NewExtrema(t.max),
				Exemplars: t.exemplars,
			})
		default:
			sum.DataPoints = append(sum.DataPoints, metricdata.DataPoint[N]{Attributes: s.attrs, StartTime: a.start, Time: now, Value: t.sum, Exemplars: t.exemplars})
		}
	}
	switch {
	case len(h.DataPoints) > 0:
		m.Data = h
	case len(sum.DataPoints) > 0:
		m.Data = sum
	default:
		return m, false
	}
	return m, true
}

// seriesTotal is a series' cells added up, as collect exports it.
type seriesTotal[N int64 | float64] struct {
	sum, min, max N
	count         uint64
	counts        []uint64
	exemplars     []metricdata.Exemplar[N]
}

// total adds up s's cells, picks its exemplars (exemplars) and restarts the cells' samplers;
// false when no cell has a measurement.
func (s *series[N]) total(a *agg[N]) (seriesTotal[N], bool) {
	var (
		t        seriesTotal[N]
		recorded bool
		shares   []exemplarShare[N]
	)
	if a.id.kind == kindHistogram {
		t.counts = make([]uint64, len(a.bounds)+1)
	}
	s.collectMu.Lock()
	defer s.collectMu.Unlock()
	for i := range s.cells {
		c := s.cells[i].Load()
		if c == nil {
			continue
		}
		c.mu.Lock()
		if c.recorded {
			if !recorded || c.min < t.min {
				t.min = c.min
			}
			if !recorded || c.max > t.max {
				t.max = c.max
			}
			recorded = true
			t.sum += c.sum
			t.count += c.count
			for b, n := range c.counts {
				t.counts[b] += n
			}
		}
		shares = append(shares, c.exemplarShares()...)
		k := a.k
		if a.id.kind == kindHistogram {
			k = 1
		}
		for j := range c.trackers {
			c.trackers[j].reset(k, c.rng)
		}
		c.mu.Unlock()
	}
	if !recorded {
		return t, false
	}
	if a.id.kind == kindHistogram {
		for b := range len(a.bounds) + 1 {
			t.exemplars = append(t.exemplars, s.exemplars(a.p, shares, b, 1)...)
		}
	} else {
		t.exemplars = s.exemplars(a.p, shares, 0, a.k)
	}
	return t, true
}

// exemplarShare is what one cell kept for one exemplar reservoir (a histogram bucket's, or a
// sum's) since the last collection: a uniform sample of min(k, offered) of the measurements
// offered to it.
type exemplarShare[N int64 | float64] struct {
	reservoir int   // the histogram bucket; 0 for a sum
	offered   int64 // measurements offered since the last collection
	sample    []metricdata.Exemplar[N]
}

// exemplarShares returns c's shares, one per reservoir offered a measurement since the last
// collection; c.mu is held. The sampler fills its slots in order from its reset on, so the first
// min(offered, k) slots hold this collection's sample, and any others an earlier one's.
func (c *cell[N]) exemplarShares() []exemplarShare[N] {
	var out []exemplarShare[N]
	hist := c.counts != nil
	for i := range c.exemplars {
		e := &c.exemplars[i]
		r, tr := 0, &c.trackers[0]
		if hist {
			r, tr = i, &c.trackers[i]
		}
		if !e.set || int64(i-r) >= min(tr.count, int64(tr.k)) {
			continue
		}
		if len(out) == 0 || out[len(out)-1].reservoir != r {
			out = append(out, exemplarShare[N]{reservoir: r, offered: tr.count})
		}
		sh := &out[len(out)-1]
		sh.sample = append(sh.sample, e.exemplar())
	}
	return out
}

func (e *exemplarSlot[N]) exemplar() metricdata.Exemplar[N] {
	x := metricdata.Exemplar[N]{Time: e.at, Value: e.value}
	if e.traceID.IsValid() {
		x.TraceID = slices.Clone(e.traceID[:])
	}
	if e.spanID.IsValid() {
		x.SpanID = slices.Clone(e.spanID[:])
	}
	return x
}

// exemplars returns the exemplars of reservoir r for this collection, as the SDK's one reservoir
// of k slots would report them: a uniform sample of the measurements offered to r since the last
// collection in the first slots (drawSample), then what the last collection reported in the
// slots after them, which survive until new measurements take their place; s.collectMu is held.
func (s *series[N]) exemplars(p *MeterProvider, shares []exemplarShare[N], r, k int) []metricdata.Exemplar[N] {
	if len(s.kept) <= r {
		s.kept = append(s.kept, make([][]metricdata.Exemplar[N], r+1-len(s.kept))...)
	}
	p.rngMu.Lock()
	out := drawSample(p.rng, shares, r, k)
	p.rngMu.Unlock()
	for _, x := range s.kept[r][min(len(out), len(s.kept[r])):] {
		if len(out) >= k {
			break
		}
		out = append(out, cloneExemplar(x))
	}
	s.kept[r] = out
	return slices.Clone(out)
}

func cloneExemplar[N int64 | float64](x metricdata.Exemplar[N]) metricdata.Exemplar[N] {
	x.TraceID, x.SpanID = slices.Clone(x.TraceID), slices.Clone(x.SpanID)
	return x
}

// drawSample returns min(k, N) of the N measurements offered to reservoir r since the last
// collection, a uniform sample, from the cells' shares. Each cell holds a uniform sample of
// min(k, offered) of its own measurements, so drawing k times without replacement, each draw
// from a cell with a probability proportional to its measurements not yet drawn and then one of
// its kept exemplars not yet drawn, gives every measurement the same chance (the draws per cell
// follow the multivariate hypergeometric law, as from one reservoir). With one cell this returns
// its sample in slot order, as the SDK's reservoir holds it.
func drawSample[N int64 | float64](rng *rand.Rand, shares []exemplarShare[N], r, k int) []metricdata.Exemplar[N] {
	var (
		mine  []*exemplarShare[N]
		total int64
	)
	for i := range shares {
		if sh := &shares[i]; sh.reservoir == r {
			mine = append(mine, sh)
			total += sh.offered
		}
	}
	switch len(mine) {
	case 0:
		return nil
	case 1:
		return mine[0].sample
	}
	drawn := make([]int, len(mine))
	left := make([]int64, len(mine))
	for i, sh := range mine {
		left[i] = sh.offered
	}
	for n := min(int64(k), total); n > 0; n-- {
		x, i := rng.Int64N(total), 0
		for x >= left[i] {
			x -= left[i]
			i++
		}
		left[i]--
		total--
		drawn[i]++
	}
	var out []metricdata.Exemplar[N]
	for i, sh := range mine {
		// A uniform drawn[i]-subset of the cell's sample: the first drawn[i] of a partial
		// shuffle.
		for j := range drawn[i] {
			e := j + rng.IntN(len(sh.sample)-j)
			sh.sample[j], sh.sample[e] = sh.sample[e], sh.sample[j]
		}
		out = append(out, sh.sample[:drawn[i]]...)
	}
	return out
}

// sampler picks which of a stream of measurements to keep in k slots so that every measurement
// since the last reset is equally likely kept: reservoir sampling by Li's Algorithm L, which
// draws random numbers only when it keeps one, as the SDK's reservoirs do.
type sampler struct {
	k     int
	count int64   // measurements offered since the reset
	next  int64   // the index of the next one to keep, once the slots are full
	w     float64 // the algorithm's running weight
}

func (t *sampler) reset(k int, rng *rand.Rand) {
	t.k, t.count = k, 0
	if k <= 0 {
		return
	}
	t.next = int64(k) - 1
	t.w = math.Exp(math.Log(unitRand(rng)) / float64(k))
	t.advance(rng)
}

func (t *sampler) advance(rng *rand.Rand) {
	t.next += int64(math.Log(unitRand(rng))/math.Log(1-t.w)) + 1
	t.w *= math.Exp(math.Log(unitRand(rng)) / float64(t.k))
}

// sample reports whether to keep the next measurement, and in which slot.
func (t *sampler) sample(rng *rand.Rand) (bool, int) {
	if t.k <= 0 {
		return false, 0
	}
	if t.count < int64(t.k) {
		i := int(t.count)
		t.count++
		return true, i
	}
	keep := t.count == t.next
	i := 0
	if keep {
		if t.k > 1 {
			i = rng.IntN(t.k)
		}
		t.advance(rng)
	}
	t.count++
	return keep, i
}

// unitRand returns a random number in (0, 1).
func unitRand(rng *rand.Rand) float64 {
	for {
		if f := rng.Float64(); f > 0 {
			return f
		}
	}
}

// exemplarFilterFromEnv returns the exemplar filter OTEL_METRICS_EXEMPLAR_FILTER names, read as
// the SDK reads it: trace_based (the default) offers measurements made within a sampled span.
func exemplarFilterFromEnv() func(context.Context) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_METRICS_EXEMPLAR_FILTER"))) {
	case "always_on":
		return func(context.Context) bool { return true }
	case "always_off":
		return func(context.Context) bool { return false }
	}
	return func(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsSampled() }
}

// cardinalityLimitFromEnv returns the cardinality limit OTEL_GO_X_CARDINALITY_LIMIT sets, read as
// the SDK reads it: 2000 by default, 0 or less for none.
func cardinalityLimitFromEnv() int {
	v := strings.TrimSpace(os.Getenv("OTEL_GO_X_CARDINALITY_LIMIT"))
	if v == "" {
		return 2000
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 2000
	}
	return n
}

// deltaPreferred reports whether the OTLP metric exporters were asked for delta temporality,
// which ragtail's own aggregation does not produce.
func deltaPreferred() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"))) {
	case "delta", "lowmemory":
		return true
	}
	return false
}
