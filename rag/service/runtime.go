package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// RuntimeConfig is the document of GET|PUT /admin/config: every setting the lab toggles while
// the service runs. A PUT merges a partial document onto the current one (keys left out keep
// their value; arrays are replaced whole), validates the result and applies it as a whole.
type RuntimeConfig struct {
	Version int `json:"version"` // increments on every accepted PUT; ignored in a PUT body

	Coupling      string   `json:"coupling"`
	TopK          int      `json:"top_k"`
	AsyncQuorum   int      `json:"async_quorum"`
	AsyncDeadline Duration `json:"async_deadline"`
	// ChunkOrder places the retrieved chunks in the prompt by score (rank order) or stable (by
	// chunk id, so that requests retrieving the same chunks share a prompt prefix).
	ChunkOrder string `json:"chunk_order"`
	// HedgeAfter hedges shard searches: one still unanswered after it is sent again, the first
	// answer wins ("0s": no hedging).
	HedgeAfter Duration `json:"hedge_after"`

	Shards       int           `json:"shards"`
	ShardLatency []latency.Law `json:"shard_latency"` // one law for every shard, or one per shard
	FetchLatency latency.Law   `json:"fetch_latency"`

	Cache     RuntimeCache     `json:"cache"`
	Bloom     RuntimeBloom     `json:"bloom"`
	Admission RuntimeAdmission `json:"admission"`
	Faults    []fault.Rule     `json:"faults"`
	LLM       *RuntimeLLM      `json:"llm,omitempty"` // absent when generation goes to a real LLM
	// Links are the toxics of each network link in front of a backend (only the links started
	// with --link; a PUT changes the toxics of the ones it names, "none" removes them).
	Links map[string]link.Spec `json:"links,omitempty"`
}

// RuntimeCache is the doc store's cache in RuntimeConfig.
type RuntimeCache struct {
	Enabled bool `json:"enabled"`
	Size    int  `json:"size"` // entries when enabled
	// Policy is the in-memory cache's eviction policy: lru, 2q or arc. A change swaps in an
	// empty cache of the new policy and keeps the store. With a remote cache tier it names the
	// tier ("redis") and cannot change.
	Policy string `json:"policy"`
}

// RuntimeBloom is the doc store's Bloom guard in RuntimeConfig.
type RuntimeBloom struct {
	Enabled bool    `json:"enabled"`
	FPRate  float64 `json:"fp_rate"`
}

// RuntimeAdmission is the admission pool in RuntimeConfig.
type RuntimeAdmission struct {
	Workers      int      `json:"workers"`
	Queue        int      `json:"queue"` // -1: unbounded
	QueueTimeout Duration `json:"queue_timeout"`
	Policy       string   `json:"policy"`
	// QueueTarget sheds on arrival a request whose predicted wait exceeds it: "auto" (half
	// the measured mean service time, at most 500 ms), "off", or a duration such as "250ms".
	QueueTarget string `json:"queue_target"`
	// Adaptive is the adaptive concurrency limit in front of the simulated engine.
	Adaptive RuntimeAdaptive `json:"adaptive"`
}

// RuntimeAdaptive is the admission pool's adaptive concurrency limit in RuntimeConfig (see
// admission.Adaptive and docs/shedding.md).
type RuntimeAdaptive struct {
	Enabled bool `json:"enabled"`
	// Tolerance is the mean slowdown (latency over unloaded latency) the limit aims at.
	Tolerance float64 `json:"tolerance"`
	// MinLimit is the lowest the limit goes.
	MinLimit int `json:"min_limit"`
	// Limit is the limit in force when the document was read: requests that may run at once
	// (the workers when the limit is off). It is read-only: a PUT ignores it.
	Limit int `json:"limit"`
}

// RuntimeLLM is the simulated engine in RuntimeConfig.
type RuntimeLLM struct {
	Profile string `json:"profile"`
	KVAlloc string `json:"kv_alloc"`
	// SchedulingPolicy is fcfs or priority (vLLM's --scheduling-policy); it changes on the
	// running engine, and the waiting queue is reordered when it becomes priority.
	SchedulingPolicy string `json:"scheduling_policy"`
	// ToolCalls is the law of how many searches a question needs in the agentic mode
	// (--tool-calls); it changes on the running engine.
	ToolCalls string `json:"tool_calls"`
}

// Duration is a time.Duration written as "100ms" in JSON; a number is taken as nanoseconds.
type Duration time.Duration

// MarshalText writes d as Go writes durations ("1.5s").
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalJSON reads a duration string, or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration: want a string such as \"100ms\", got %s", b)
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// RuntimeStats is GET /admin/stats: the counters the lab reads beside its own measurements.
type RuntimeStats struct {
	ConfigVersion int                        `json:"config_version"`
	Docs          docstore.Stats             `json:"docs"`
	Admission     admission.Stats            `json:"admission"`
	Faults        map[string]fault.RuleStats `json:"faults"`
	Engine        *llmsim.Stats              `json:"engine,omitempty"`
	Pipeline      pipeline.Stats             `json:"pipeline"`
	Links         []link.Stats               `json:"links,omitempty"`
}

// Runtime owns the runtime configuration of a service and applies changes to its parts.
type Runtime struct {
	engineArgs llmsim.EngineArgs // applied to every profile the engine switches to
	mu         sync.Mutex
	cur        RuntimeConfig
	pipe       *pipeline.Pipeline
	index      *retrieve.Memory // nil when retrieval is not the in-memory index
	docs       *docstore.Store
	pool       *admission.Pool
	faults     *fault.Injector
	engine     *engineSwitch // nil when generation goes to a real LLM
	links      *links
}

var _ httpapi.ConfigStore = (*Runtime)(nil)

// chunkOrder names the pipeline's chunk order, the default ("") as score.
func chunkOrder(o pipeline.ChunkOrder) pipeline.ChunkOrder {
	if parsed, err := pipeline.ParseChunkOrder(string(o)); err == nil {
		return parsed
	}
	return o
}

// newRuntime reads the current settings from the parts.
func newRuntime(o Config, pipe *pipeline.Pipeline, index *retrieve.Memory, docs *docstore.Store,
	pool *admission.Pool, faults *fault.Injector, engine *engineSwitch, ls *links) *Runtime {
	pc := pipe.Config()
	ac := pool.Config()
	ds := docs.Stats()
	rt := &Runtime{engineArgs: o.EngineArgs, pipe: pipe, index: index, docs: docs, pool: pool, faults: faults, engine: engine, links: ls}
	rt.cur = RuntimeConfig{
		Coupling: string(pc.Coupling), TopK: pc.TopK, AsyncQuorum: pc.AsyncQuorum, AsyncDeadline: Duration(pc.AsyncDeadline),
		ChunkOrder: string(chunkOrder(pc.ChunkOrder)), HedgeAfter: Duration(pc.HedgeAfter),
		Shards:       o.Shards,
		ShardLatency: append([]latency.Law(nil), o.ShardLatency...),
		FetchLatency: docs.FetchLatency(),
		Cache:        RuntimeCache{Enabled: ds.CacheSize > 0, Size: max(ds.CacheSize, o.CacheSize), Policy: ds.CacheKind},
		Bloom:        RuntimeBloom{Enabled: ds.BloomEnabled, FPRate: o.BloomFP},
		Admission: RuntimeAdmission{Workers: ac.Workers, Queue: ac.QueueCapacity,
			QueueTimeout: Duration(ac.QueueTimeout), Policy: string(cmpPolicy(ac.Policy)), QueueTarget: admission.FormatQueueTarget(ac.QueueTarget),
			Adaptive: RuntimeAdaptive{Enabled: ac.Adaptive.Enabled, Tolerance: ac.Adaptive.Tolerance, MinLimit: ac.Adaptive.MinLimit}},
		Faults: faults.Rules(),
	}
	if index != nil {
		rt.cur.Shards = index.Shards()
	}
	if rt.cur.Faults == nil {
		rt.cur.Faults = []fault.Rule{}
	}
	if specs := ls.specs(); len(specs) > 0 {
		rt.cur.Links = specs
	}
	if engine != nil {
		p := engine.Current().Profile()
		rt.cur.LLM = &RuntimeLLM{Profile: p.Name, KVAlloc: string(p.Alloc), SchedulingPolicy: string(engine.Current().SchedulingPolicy()),
			ToolCalls: engine.Current().ToolCalls().String()}
	}
	return rt
}

func cmpPolicy(p admission.Policy) admission.Policy {
	if p == "" {
		return admission.PolicyReject
	}
	return p
}

// validateCachePolicy normalizes c.Policy (lru, 2q or arc, any case; empty keeps the current
// one) and returns what is wrong with it, or "".
func (rt *Runtime) validateCachePolicy(c *RuntimeCache) string {
	cur := rt.cur.Cache.Policy
	if strings.TrimSpace(c.Policy) == "" || c.Policy == cur {
		c.Policy = cur
		return ""
	}
	p, err := docstore.ParseCachePolicy(c.Policy)
	if err != nil {
		return fmt.Sprintf("cache.policy must be lru, 2q or arc, got %.64q", c.Policy)
	}
	if _, memory := docstore.ParseCachePolicy(cur); memory != nil {
		return fmt.Sprintf("cache.policy: the cache tier is %s, whose eviction is its own", cur)
	}
	c.Policy = string(p)
	return ""
}

// Get implements httpapi.ConfigStore.
func (rt *Runtime) Get() any { return rt.Config() }

// Config returns the configuration in force, with the adaptive limit reached now.
func (rt *Runtime) Config() RuntimeConfig {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.withLimitLocked()
}

// withLimitLocked is the current configuration with the admission limit in force now.
func (rt *Runtime) withLimitLocked() RuntimeConfig {
	c := rt.cur
	c.Admission.Adaptive.Limit = rt.pool.Stats().Limit
	return c
}

// Stats returns the counters of the service's parts (GET /admin/stats).
func (rt *Runtime) Stats() RuntimeStats {
	rt.mu.Lock()
	v := rt.cur.Version
	rt.mu.Unlock()
	s := RuntimeStats{ConfigVersion: v, Docs: rt.docs.Stats(), Admission: rt.pool.Stats(), Faults: rt.faults.Stats(), Pipeline: rt.pipe.Stats()}
	for _, l := range rt.links.all() {
		s.Links = append(s.Links, l.Stats())
	}
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
func (rt *Runtime) Apply(_ context.Context, body []byte) (any, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	next := rt.cur
	next.ShardLatency = append([]latency.Law(nil), rt.cur.ShardLatency...)
	if rt.cur.LLM != nil {
		llm := *rt.cur.LLM
		next.LLM = &llm
	}
	// Arrays are replaced whole, as in a JSON merge patch: decode into fresh slices. Links are
	// merged by name.
	next.Faults, next.ShardLatency, next.Links = nil, nil, nil
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
	changedLinks := next.Links
	next.Links = rt.cur.Links
	if len(changedLinks) > 0 {
		next.Links = make(map[string]link.Spec, len(rt.cur.Links)+len(changedLinks)) // the service may run no link
		maps.Copy(next.Links, rt.cur.Links)
		maps.Copy(next.Links, changedLinks)
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
		AsyncDeadline: time.Duration(next.AsyncDeadline), SystemPrompt: rt.pipe.Config().SystemPrompt,
		ChunkOrder: pipeline.ChunkOrder(next.ChunkOrder), HedgeAfter: time.Duration(next.HedgeAfter)}
	next.ChunkOrder = string(chunkOrder(pc.ChunkOrder))
	if next.TopK < 1 {
		errs = append(errs, fmt.Sprintf("top_k must be between 1 and %d, got %d", pipeline.MaxTopK, next.TopK))
	} else if err := pc.Validate(); err != nil {
		errs = append(errs, strings.TrimPrefix(err.Error(), rag.ErrInvalidRequest.Error()+": "))
	}
	switch {
	case next.Shards < 1 || next.Shards > MaxShards:
		errs = append(errs, fmt.Sprintf("shards must be between 1 and %d, got %d", MaxShards, next.Shards))
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
	if next.Cache.Size > MaxCacheSize {
		errs = append(errs, fmt.Sprintf("cache.size must be at most %d, got %d", MaxCacheSize, next.Cache.Size))
	}
	if msg := rt.validateCachePolicy(&next.Cache); msg != "" {
		errs = append(errs, msg)
	}
	if d := time.Duration(next.HedgeAfter); d < 0 || d > MaxAsyncDeadline {
		errs = append(errs, fmt.Sprintf("hedge_after must be between 0s (no hedging) and %v, got %v", MaxAsyncDeadline, d))
	}
	if d := time.Duration(next.AsyncDeadline); d > MaxAsyncDeadline {
		errs = append(errs, fmt.Sprintf("async_deadline must be at most %v, got %v", MaxAsyncDeadline, d))
	}
	if next.AsyncQuorum > next.Shards {
		errs = append(errs, fmt.Sprintf("async_quorum must be at most the %d shards (0 for a majority), got %d", next.Shards, next.AsyncQuorum))
	}
	if err := lawBounded(next.FetchLatency); err != nil {
		errs = append(errs, "fetch_latency: "+err.Error())
	}
	for i, law := range next.ShardLatency {
		if err := lawBounded(law); err != nil {
			errs = append(errs, fmt.Sprintf("shard_latency[%d]: %v", i, err))
		}
	}
	if next.Bloom.Enabled && (next.Bloom.FPRate <= 0 || next.Bloom.FPRate >= 1 || math.IsNaN(next.Bloom.FPRate)) {
		errs = append(errs, fmt.Sprintf("bloom.fp_rate must be in (0, 1), got %v", next.Bloom.FPRate))
	}
	ad := next.Admission.Adaptive
	ac := admission.Config{Workers: next.Admission.Workers, QueueCapacity: next.Admission.Queue,
		QueueTimeout: time.Duration(next.Admission.QueueTimeout), Policy: admission.Policy(next.Admission.Policy),
		Adaptive: admission.Adaptive{Enabled: ad.Enabled, Tolerance: ad.Tolerance, MinLimit: ad.MinLimit}}
	if ad.Enabled && rt.engine == nil {
		errs = append(errs, "admission.adaptive: the limit follows the simulated engine's latency, and generation goes to a real LLM (--llm-url): size admission.workers instead")
	}
	if target, err := admission.ParseQueueTarget(next.Admission.QueueTarget); err != nil {
		errs = append(errs, "admission.queue_target: "+strings.TrimPrefix(err.Error(), rag.ErrInvalidRequest.Error()+": "))
	} else {
		ac.QueueTarget = target
		next.Admission.QueueTarget = admission.FormatQueueTarget(target)
	}
	if err := ac.Validate(); err != nil {
		errs = append(errs, "admission: "+strings.TrimPrefix(err.Error(), rag.ErrInvalidRequest.Error()+": "))
	}
	if next.Admission.Adaptive.Tolerance == 0 {
		next.Admission.Adaptive.Tolerance = admission.DefaultTolerance
	}
	if next.Admission.Adaptive.MinLimit == 0 {
		next.Admission.Adaptive.MinLimit = admission.DefaultMinLimit
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
	var policy llmsim.SchedulingPolicy
	var toolLaw llmsim.ToolCallLaw
	if next.LLM != nil {
		if next.LLM.ToolCalls == "" {
			next.LLM.ToolCalls = rt.cur.LLM.ToolCalls
		}
		if toolLaw, err = llmsim.ParseToolCallLaw(next.LLM.ToolCalls); err != nil {
			errs = append(errs, "llm.tool_calls: "+err.Error())
		}
		if policy, err = llmsim.ParseSchedulingPolicy(next.LLM.SchedulingPolicy); err != nil {
			errs = append(errs, "llm.scheduling_policy: "+err.Error())
		}
		if prof, err = llmsim.ProfileByName(next.LLM.Profile); err != nil {
			errs = append(errs, "llm.profile: "+err.Error())
		} else if prof, err = rt.engineArgs.Apply(prof); err != nil {
			errs = append(errs, "llm.profile with the engine arguments: "+err.Error())
		}
		if next.LLM.KVAlloc == "" {
			alloc = prof.Alloc
		} else if alloc, err = llmsim.ParseAllocMode(next.LLM.KVAlloc); err != nil {
			errs = append(errs, "llm.kv_alloc: "+err.Error())
		}
	}
	for name := range changedLinks {
		if _, ok := rt.cur.Links[name]; !ok {
			errs = append(errs, fmt.Sprintf("links.%s: no link runs in front of %s: start the service with --link %s=... to change it at run time", name, name, name))
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
	if next.Cache.Policy != rt.cur.Cache.Policy {
		if err := rt.docs.SetCachePolicy(docstore.CachePolicy(next.Cache.Policy)); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
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
	for name, spec := range changedLinks {
		if err := rt.links.byName[name].Set(spec); err != nil {
			return nil, fmt.Errorf("link %s: %w", name, err)
		}
	}
	if next.LLM != nil && (next.LLM.Profile != rt.cur.LLM.Profile || alloc != llmsim.AllocMode(rt.cur.LLM.KVAlloc)) {
		if err := rt.engine.Switch(prof, alloc); err != nil {
			return nil, fmt.Errorf("switch engine: %w", err)
		}
	}
	if next.LLM != nil {
		if err := rt.engine.Current().SetSchedulingPolicy(policy); err != nil {
			return nil, fmt.Errorf("scheduling policy: %w", err)
		}
		rt.engine.Current().SetToolCalls(toolLaw)
		next.LLM.KVAlloc, next.LLM.SchedulingPolicy, next.LLM.ToolCalls = string(alloc), string(policy), toolLaw.String()
	}
	next.Admission.Adaptive.Limit = 0 // read-only: Config fills in the limit in force
	next.Version++
	rt.cur = next
	return rt.withLimitLocked(), nil
}

// Upper bounds of RuntimeConfig values beyond those of the parts' own Validate (admission,
// faults, top_k, shards), so that a mistyped PUT cannot make the service hold unbounded memory
// or make every request wait for an hour.
const (
	// MaxCacheSize bounds cache.size in entries.
	MaxCacheSize = 1 << 20
	// MaxAsyncDeadline bounds async_deadline.
	MaxAsyncDeadline = time.Minute
	// MaxLatency bounds a latency law (fetch_latency, shard_latency, a fault's delay): the one
	// rule of latency.Law.CheckLimit, at latency.Limit.
	MaxLatency = latency.Limit
)

// lawBounded checks law against MaxLatency (see latency.Law.CheckLimit).
func lawBounded(law latency.Law) error {
	if err := law.CheckLimit(MaxLatency); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), rag.ErrInvalidRequest.Error()+": "))
	}
	return nil
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
