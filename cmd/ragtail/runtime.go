package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// runtimeConfig is the document of GET|PUT /admin/config: every setting the lab toggles while
// the service runs. A PUT merges a partial document onto the current one (keys left out keep
// their value; arrays are replaced whole), validates the result and applies it as a whole.
type runtimeConfig struct {
	Version int `json:"version"` // increments on every accepted PUT; ignored in a PUT body

	Coupling      string       `json:"coupling"`
	TopK          int          `json:"top_k"`
	AsyncQuorum   int          `json:"async_quorum"`
	AsyncDeadline jsonDuration `json:"async_deadline"`

	Shards       int           `json:"shards"`
	ShardLatency []latency.Law `json:"shard_latency"` // one law for every shard, or one per shard
	FetchLatency latency.Law   `json:"fetch_latency"`

	Cache     runtimeCache     `json:"cache"`
	Bloom     runtimeBloom     `json:"bloom"`
	Admission runtimeAdmission `json:"admission"`
	Faults    []fault.Rule     `json:"faults"`
	LLM       *runtimeLLM      `json:"llm,omitempty"` // absent when generation goes to a real LLM
}

type runtimeCache struct {
	Enabled bool `json:"enabled"`
	Size    int  `json:"size"` // entries when enabled
}

type runtimeBloom struct {
	Enabled bool    `json:"enabled"`
	FPRate  float64 `json:"fp_rate"`
}

type runtimeAdmission struct {
	Workers      int          `json:"workers"`
	Queue        int          `json:"queue"` // -1: unbounded
	QueueTimeout jsonDuration `json:"queue_timeout"`
	Policy       string       `json:"policy"`
}

type runtimeLLM struct {
	Profile string `json:"profile"`
	KVAlloc string `json:"kv_alloc"`
}

// jsonDuration is a time.Duration written as "100ms" in JSON; a number is taken as nanoseconds.
type jsonDuration time.Duration

func (d jsonDuration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration: want a string such as \"100ms\", got %s", b)
		}
		*d = jsonDuration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = jsonDuration(v)
	return nil
}

// runtimeStats is GET /admin/stats: the counters the lab reads beside its own measurements.
type runtimeStats struct {
	ConfigVersion int                        `json:"config_version"`
	Docs          docstore.Stats             `json:"docs"`
	Admission     admission.Stats            `json:"admission"`
	Faults        map[string]fault.RuleStats `json:"faults"`
	Engine        *llmsim.Stats              `json:"engine,omitempty"`
	Pipeline      pipeline.Stats             `json:"pipeline"`
}

// runtime owns the runtime configuration of a service and applies changes to its parts.
type runtime struct {
	mu     sync.Mutex
	cur    runtimeConfig
	pipe   *pipeline.Pipeline
	index  *retrieve.Memory // nil when retrieval is not the in-memory index
	docs   *docstore.Store
	pool   *admission.Pool
	faults *fault.Injector
	engine *engineSwitch // nil when generation goes to a real LLM
}

var _ httpapi.ConfigStore = (*runtime)(nil)

// newRuntime reads the current settings from the parts.
func newRuntime(o serviceOptions, pipe *pipeline.Pipeline, index *retrieve.Memory, docs *docstore.Store,
	pool *admission.Pool, faults *fault.Injector, engine *engineSwitch) *runtime {
	pc := pipe.Config()
	ac := pool.Config()
	ds := docs.Stats()
	rt := &runtime{pipe: pipe, index: index, docs: docs, pool: pool, faults: faults, engine: engine}
	rt.cur = runtimeConfig{
		Coupling: string(pc.Coupling), TopK: pc.TopK, AsyncQuorum: pc.AsyncQuorum, AsyncDeadline: jsonDuration(pc.AsyncDeadline),
		Shards:       o.shards,
		ShardLatency: append([]latency.Law(nil), o.shardLatency...),
		FetchLatency: docs.FetchLatency(),
		Cache:        runtimeCache{Enabled: ds.CacheSize > 0, Size: max(ds.CacheSize, o.cacheSize)},
		Bloom:        runtimeBloom{Enabled: ds.BloomEnabled, FPRate: o.bloomFP},
		Admission: runtimeAdmission{Workers: ac.Workers, Queue: ac.QueueCapacity,
			QueueTimeout: jsonDuration(ac.QueueTimeout), Policy: string(cmpPolicy(ac.Policy))},
		Faults: faults.Rules(),
	}
	if index != nil {
		rt.cur.Shards = index.Shards()
	}
	if rt.cur.Faults == nil {
		rt.cur.Faults = []fault.Rule{}
	}
	if engine != nil {
		p := engine.Current().Profile()
		rt.cur.LLM = &runtimeLLM{Profile: p.Name, KVAlloc: string(p.Alloc)}
	}
	return rt
}

func cmpPolicy(p admission.Policy) admission.Policy {
	if p == "" {
		return admission.PolicyReject
	}
	return p
}

// Get implements httpapi.ConfigStore.
func (rt *runtime) Get() any {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.cur
}

// Stats returns the counters of the service's parts.
func (rt *runtime) Stats() any {
	rt.mu.Lock()
	v := rt.cur.Version
	rt.mu.Unlock()
	s := runtimeStats{ConfigVersion: v, Docs: rt.docs.Stats(), Admission: rt.pool.Stats(), Faults: rt.faults.Stats(), Pipeline: rt.pipe.Stats()}
	if rt.engine != nil {
		es := rt.engine.Current().Stats()
		s.Engine = &es
	}
	return s
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{rag.ErrInvalidRequest}, args...)...)
}

// Apply implements httpapi.ConfigStore: merge, validate every field, then apply.
func (rt *runtime) Apply(_ context.Context, body []byte) (any, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	next := rt.cur
	next.ShardLatency = append([]latency.Law(nil), rt.cur.ShardLatency...)
	if rt.cur.LLM != nil {
		llm := *rt.cur.LLM
		next.LLM = &llm
	}
	// Arrays are replaced whole, as in a JSON merge patch: decode into fresh slices.
	next.Faults, next.ShardLatency = nil, nil
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&next); err != nil {
		return nil, invalid("config body: %v (GET /admin/config shows the accepted keys)", err)
	}
	if dec.More() {
		return nil, invalid("config body: more than one JSON value")
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(body, &raw)
	if _, ok := raw["faults"]; !ok {
		next.Faults = rt.cur.Faults
	}
	if _, ok := raw["shard_latency"]; !ok {
		next.ShardLatency = rt.cur.ShardLatency
	}
	if next.Faults == nil {
		next.Faults = []fault.Rule{}
	}
	if rt.cur.LLM == nil && raw["llm"] != nil && string(raw["llm"]) != "null" {
		return nil, invalid("llm: generation goes to a real LLM (--llm-url); profile and kv_alloc apply to the simulated engine only")
	}
	next.Version = rt.cur.Version

	// Validate everything before touching anything.
	var errs []string
	coupling, err := rag.ParseCoupling(next.Coupling)
	if err != nil {
		errs = append(errs, "coupling: "+err.Error())
	}
	pc := pipeline.Config{Coupling: coupling, TopK: next.TopK, AsyncQuorum: next.AsyncQuorum,
		AsyncDeadline: time.Duration(next.AsyncDeadline), SystemPrompt: rt.pipe.Config().SystemPrompt}
	if next.TopK < 1 {
		errs = append(errs, fmt.Sprintf("top_k must be between 1 and %d, got %d", pipeline.MaxTopK, next.TopK))
	} else if err := pc.Validate(); err != nil {
		errs = append(errs, strings.TrimPrefix(err.Error(), rag.ErrInvalidRequest.Error()+": "))
	}
	switch {
	case next.Shards < 1 || next.Shards > 256:
		errs = append(errs, fmt.Sprintf("shards must be between 1 and 256, got %d", next.Shards))
	case rt.index == nil && next.Shards != rt.cur.Shards:
		errs = append(errs, "shards: the retriever is not the in-memory index; its shard count is fixed")
	case len(next.ShardLatency) != 1 && len(next.ShardLatency) != next.Shards:
		errs = append(errs, fmt.Sprintf("shard_latency has %d laws for %d shards: give one for all or one per shard", len(next.ShardLatency), next.Shards))
	}
	if rt.index == nil && !lawsEqual(next.ShardLatency, rt.cur.ShardLatency) {
		errs = append(errs, "shard_latency: the retriever is not the in-memory index; its latency is the backend's")
	}
	if next.Cache.Enabled && next.Cache.Size < 1 {
		errs = append(errs, fmt.Sprintf("cache.size must be positive when the cache is enabled, got %d", next.Cache.Size))
	}
	if next.Bloom.Enabled && (next.Bloom.FPRate <= 0 || next.Bloom.FPRate >= 1 || math.IsNaN(next.Bloom.FPRate)) {
		errs = append(errs, fmt.Sprintf("bloom.fp_rate must be in (0, 1), got %v", next.Bloom.FPRate))
	}
	ac := admission.Config{Workers: next.Admission.Workers, QueueCapacity: next.Admission.Queue,
		QueueTimeout: time.Duration(next.Admission.QueueTimeout), Policy: admission.Policy(next.Admission.Policy)}
	if err := ac.Validate(); err != nil {
		errs = append(errs, "admission: "+err.Error())
	}
	probe, err := fault.NewInjector(nil, 1)
	if err == nil {
		err = probe.SetRules(next.Faults)
	}
	if err != nil {
		errs = append(errs, "faults: "+err.Error())
	}
	var prof llmsim.Profile
	var alloc llmsim.AllocMode
	if next.LLM != nil {
		if prof, err = llmsim.ProfileByName(next.LLM.Profile); err != nil {
			errs = append(errs, "llm.profile: "+err.Error())
		}
		if next.LLM.KVAlloc == "" {
			alloc = prof.Alloc
		} else if alloc, err = llmsim.ParseAllocMode(next.LLM.KVAlloc); err != nil {
			errs = append(errs, "llm.kv_alloc: "+err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, invalid("%s", strings.Join(errs, "; "))
	}

	// Apply. Every step below was validated; an error here is the backend's.
	if err := rt.pipe.SetConfig(pc); err != nil {
		return nil, fmt.Errorf("apply pipeline config: %w", err)
	}
	if rt.index != nil {
		if next.Shards != rt.index.Shards() {
			if err := rt.index.Reshard(next.Shards); err != nil {
				return nil, fmt.Errorf("reshard: %w", err)
			}
		}
		if len(next.ShardLatency) == 1 {
			rt.index.SetLatency(next.ShardLatency[0])
		} else {
			for i, law := range next.ShardLatency {
				if err := rt.index.SetShardLatency(i, law); err != nil {
					return nil, fmt.Errorf("shard %d latency: %w", i, err)
				}
			}
		}
	}
	rt.docs.SetFetchLatency(next.FetchLatency)
	size := 0
	if next.Cache.Enabled {
		size = next.Cache.Size
	}
	if err := rt.docs.SetCache(size); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	if err := rt.docs.SetBloom(next.Bloom.Enabled, next.Bloom.FPRate); err != nil {
		return nil, fmt.Errorf("bloom: %w", err)
	}
	if err := rt.pool.Resize(ac); err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	if err := rt.faults.SetRules(next.Faults); err != nil {
		return nil, fmt.Errorf("faults: %w", err)
	}
	next.Faults = rt.faults.Rules()
	if next.Faults == nil {
		next.Faults = []fault.Rule{}
	}
	if next.LLM != nil && (next.LLM.Profile != rt.cur.LLM.Profile || alloc != llmsim.AllocMode(rt.cur.LLM.KVAlloc)) {
		if err := rt.engine.Switch(prof, alloc); err != nil {
			return nil, fmt.Errorf("switch engine: %w", err)
		}
	}
	if next.LLM != nil {
		next.LLM.KVAlloc = string(alloc)
	}
	next.Version++
	rt.cur = next
	return rt.cur, nil
}

func lawsEqual(a, b []latency.Law) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].String() != b[i].String() {
			return false
		}
	}
	return true
}

// faultHook adapts a fault.Injector to pipeline.FaultInjector. The pipeline serves one route, so
// stage rules restricted to a route see it.
type faultHook struct{ in *fault.Injector }

var _ pipeline.FaultInjector = faultHook{}

const chatRoute = "/v1/chat/completions"

// Inject implements pipeline.FaultInjector.
func (h faultHook) Inject(ctx context.Context, stage rag.Stage) (pipeline.FaultDecision, error) {
	d, err := h.in.Apply(ctx, stage, chatRoute)
	out := pipeline.FaultDecision{Delay: d.Delay, CutAfterTokens: d.CutAfterTokens, CutErr: d.CutError()}
	for _, f := range d.Fired {
		out.Rules = append(out.Rules, f.Rule)
	}
	return out, err
}

// Observe implements pipeline.FaultInjector.
func (h faultHook) Observe(stage rag.Stage, d time.Duration) { h.in.Observe(stage, d) }

// engineSwitch is the simulated engine behind a swappable pointer: a profile or KV-allocation
// change builds a new engine that takes every new request, while the old one finishes the
// generations it holds and is closed once idle. Its Prometheus collector follows the current
// engine.
type engineSwitch struct {
	opts []llmsim.Option
	log  *slog.Logger
	cur  atomic.Pointer[trackedEngine]
	mu   sync.Mutex // serializes Switch and Close
	done bool
}

// trackedEngine counts the streams an engine has open, to close it once retired and idle.
type trackedEngine struct {
	*llmsim.Engine
	coll    prometheus.Collector
	open    atomic.Int64
	retired atomic.Bool
	closed  sync.Once
}

func (t *trackedEngine) closeIfIdle() {
	if t.retired.Load() && t.open.Load() == 0 {
		t.closed.Do(func() { _ = t.Engine.Close() })
	}
}

var (
	_ pipeline.Generator   = (*engineSwitch)(nil)
	_ prometheus.Collector = (*engineSwitch)(nil)
)

func newEngineSwitch(e *llmsim.Engine, opts []llmsim.Option, log *slog.Logger) *engineSwitch {
	s := &engineSwitch{opts: opts, log: log}
	s.cur.Store(&trackedEngine{Engine: e, coll: e.Collector()})
	return s
}

// Current returns the engine new requests go to.
func (s *engineSwitch) Current() *llmsim.Engine { return s.cur.Load().Engine }

// Models implements pipeline.Generator: the current engine's models.
func (s *engineSwitch) Models() []string { return s.cur.Load().Models() }

// Generate implements pipeline.Generator on the current engine.
func (s *engineSwitch) Generate(ctx context.Context, req rag.GenRequest) (rag.TokenStream, error) {
	t := s.cur.Load()
	t.open.Add(1)
	ts, err := t.Generate(ctx, req)
	if err != nil {
		t.open.Add(-1)
		t.closeIfIdle()
		return nil, err
	}
	return &trackedStream{TokenStream: ts, t: t}, nil
}

// Switch builds an engine with prof and alloc and sends every new request to it.
func (s *engineSwitch) Switch(prof llmsim.Profile, alloc llmsim.AllocMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errors.New("engine switch is closed")
	}
	opts := append(append([]llmsim.Option(nil), s.opts...), llmsim.WithAlloc(alloc))
	e, err := llmsim.New(prof, opts...)
	if err != nil {
		return err
	}
	old := s.cur.Swap(&trackedEngine{Engine: e, coll: e.Collector()})
	old.retired.Store(true)
	old.closeIfIdle()
	s.log.Info("simulated engine switched", "profile", prof.Name, "kv_alloc", alloc)
	return nil
}

// Close closes the current engine (retired ones close when idle).
func (s *engineSwitch) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	t := s.cur.Load()
	t.retired.Store(true)
	var err error
	t.closed.Do(func() { err = t.Engine.Close() })
	return err
}

// Describe implements prometheus.Collector. It describes nothing: the collector is unchecked,
// since the engine behind it changes.
func (s *engineSwitch) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector with the current engine's metrics.
func (s *engineSwitch) Collect(ch chan<- prometheus.Metric) { s.cur.Load().coll.Collect(ch) }

type trackedStream struct {
	rag.TokenStream
	t    *trackedEngine
	once sync.Once
}

func (s *trackedStream) Close() error {
	err := s.TokenStream.Close()
	s.once.Do(func() {
		s.t.open.Add(-1)
		s.t.closeIfIdle()
	})
	return err
}
