package telemetry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
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
}

var (
	_ metric.MeterProvider = (*MeterProvider)(nil)
	_ sdkmetric.Producer   = (*MeterProvider)(nil)
)

// newMeterProvider returns a provider that aggregates ragtail's scopes itself when own is true.
// Its SDK provider is set by setSDK once the readers, which take the provider as their producer,
// exist.
func newMeterProvider(own bool, now func() time.Time) *MeterProvider {
	return &MeterProvider{own: own, now: now, filter: exemplarFilterFromEnv(), limit: cardinalityLimitFromEnv()}
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

	mu       sync.RWMutex
	byAttrs  map[attribute.Distinct]*series[N]
	list     []*series[N] // in creation order
	overflow *series[N]
}

func newAgg[N int64 | float64](p *MeterProvider, id instID, bounds []float64) *agg[N] {
	return &agg[N]{p: p, id: id, bounds: bounds, start: p.now(), k: runtime.GOMAXPROCS(0), byAttrs: map[attribute.Distinct]*series[N]{}}
}

// overflowSet is the label set of the measurements past the cardinality limit, the SDK's.
var overflowSet = attribute.NewSet(attribute.Bool("otel.metric.overflow", true))

// series returns the series of set, creating it unless the instrument is at its cardinality
// limit, in which case it returns the overflow series.
func (a *agg[N]) series(set attribute.Set) *series[N] {
	key := set.Equivalent()
	a.mu.RLock()
	s := a.byAttrs[key]
	a.mu.RUnlock()
	if s != nil {
		return s
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.byAttrs[key]; s != nil {
		return s
	}
	if a.p.limit > 0 && len(a.list) >= a.p.limit-1 {
		if a.overflow == nil {
			a.overflow = a.newSeries(overflowSet)
			a.byAttrs[overflowSet.Equivalent()] = a.overflow
			a.list = append(a.list, a.overflow)
		}
		return a.overflow
	}
	s = a.newSeries(set)
	a.byAttrs[key] = s
	a.list = append(a.list, s)
	return s
}

func (a *agg[N]) newSeries(set attribute.Set) *series[N] {
	s := &series[N]{attrs: set}
	if a.id.kind == kindHistogram {
		s.counts = make([]uint64, len(a.bounds)+1)
		s.exemplars = make([]exemplarSlot[N], len(a.bounds)+1)
		s.trackers = make([]sampler, len(a.bounds)+1)
		for i := range s.trackers {
			s.trackers[i].reset(1)
		}
	} else {
		s.exemplars = make([]exemplarSlot[N], a.k)
		s.trackers = make([]sampler, 1)
		s.trackers[0].reset(a.k)
	}
	return s
}

// series is the running aggregate of one label set.
type series[N int64 | float64] struct {
	attrs attribute.Set

	mu        sync.Mutex
	recorded  bool // a measurement was made: a series bound but never recorded is not exported
	sum       N
	count     uint64   // histograms
	counts    []uint64 // histograms: per bucket, the last one above every bound
	min, max  N
	exemplars []exemplarSlot[N]
	trackers  []sampler // per bucket (histograms) or one for the whole series (sums)
}

// exemplarSlot is one kept exemplar.
type exemplarSlot[N int64 | float64] struct {
	set     bool
	at      time.Time
	value   N
	traceID trace.TraceID
	spanID  trace.SpanID
}

// record adds v to s.
func (s *series[N]) record(ctx context.Context, a *agg[N], v N) {
	offer := a.p.filter(ctx)
	var at time.Time
	if offer {
		at = a.p.now()
	}
	s.mu.Lock()
	s.recorded = true
	s.sum += v
	slot := -1
	if a.id.kind == kindHistogram {
		i, _ := slices.BinarySearch(a.bounds, float64(v))
		s.counts[i]++
		if s.count == 0 || v < s.min {
			s.min = v
		}
		if s.count == 0 || v > s.max {
			s.max = v
		}
		s.count++
		if offer {
			if ok, _ := s.trackers[i].sample(); ok {
				slot = i
			}
		}
	} else if offer {
		if ok, i := s.trackers[0].sample(); ok {
			slot = i
		}
	}
	if slot >= 0 {
		sc := trace.SpanContextFromContext(ctx)
		s.exemplars[slot] = exemplarSlot[N]{set: true, at: at, value: v, traceID: sc.TraceID(), spanID: sc.SpanID()}
	}
	s.mu.Unlock()
}

// collect returns the instrument's data, cumulative since its creation, and false when it has no
// series with a measurement yet. Each series' exemplar samplers start afresh, as the SDK's reservoirs do on every
// collection.
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
		s.mu.Lock()
		switch {
		case !s.recorded:
		case a.id.kind == kindHistogram:
			dp := metricdata.HistogramDataPoint[N]{
				Attributes: s.attrs, StartTime: a.start, Time: now, Count: s.count,
				Bounds: slices.Clone(a.bounds), BucketCounts: slices.Clone(s.counts), Sum: s.sum,
				Min: metricdata.NewExtrema(s.min), Max: metricdata.NewExtrema(s.max),
				Exemplars: s.collectExemplars(1),
			}
			h.DataPoints = append(h.DataPoints, dp)
		default:
			sum.DataPoints = append(sum.DataPoints, metricdata.DataPoint[N]{Attributes: s.attrs, StartTime: a.start, Time: now, Value: s.sum, Exemplars: s.collectExemplars(a.k)})
		}
		s.mu.Unlock()
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

// collectExemplars returns s's exemplars and resets its samplers to k; s.mu is held.
func (s *series[N]) collectExemplars(k int) []metricdata.Exemplar[N] {
	var out []metricdata.Exemplar[N]
	for i := range s.exemplars {
		e := &s.exemplars[i]
		if !e.set {
			continue
		}
		x := metricdata.Exemplar[N]{Time: e.at, Value: e.value}
		if e.traceID.IsValid() {
			x.TraceID = slices.Clone(e.traceID[:])
		}
		if e.spanID.IsValid() {
			x.SpanID = slices.Clone(e.spanID[:])
		}
		out = append(out, x)
	}
	for i := range s.trackers {
		s.trackers[i].reset(k)
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

func (t *sampler) reset(k int) {
	t.k, t.count = k, 0
	if k <= 0 {
		return
	}
	t.next = int64(k) - 1
	t.w = math.Exp(math.Log(unitRand()) / float64(k))
	t.advance()
}

func (t *sampler) advance() {
	t.next += int64(math.Log(unitRand())/math.Log(1-t.w)) + 1
	t.w *= math.Exp(math.Log(unitRand()) / float64(t.k))
}

// sample reports whether to keep the next measurement, and in which slot.
func (t *sampler) sample() (bool, int) {
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
			i = rand.IntN(t.k)
		}
		t.advance()
	}
	t.count++
	return keep, i
}

// unitRand returns a random number in (0, 1).
func unitRand() float64 {
	for {
		if f := rand.Float64(); f > 0 {
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
