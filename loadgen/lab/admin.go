package lab

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Settings is the wire form of the service's GET|PUT /admin/config document (RuntimeConfig in
// rag/service, which the load generator may not import). Every field is optional: a PUT sends
// only the fields that are set and the service keeps the others, so an experiment states exactly
// what it changes. A GET decodes the whole document, which is how Run restores it.
type Settings struct {
	Coupling      *string `json:"coupling,omitempty"` // sync, fanout or async
	TopK          *int    `json:"top_k,omitempty"`
	AsyncQuorum   *int    `json:"async_quorum,omitempty"`
	AsyncDeadline *string `json:"async_deadline,omitempty"` // a Go duration, "100ms"
	HedgeAfter    *string `json:"hedge_after,omitempty"`    // a Go duration; "0s" sends each shard search once

	Shards       *int     `json:"shards,omitempty"`
	ShardLatency []string `json:"shard_latency,omitempty"` // latency laws, one for all or one per shard
	FetchLatency *string  `json:"fetch_latency,omitempty"` // a latency law, "lognormal:8ms,0.5,1s"

	Cache     *CacheSettings     `json:"cache,omitempty"`
	Bloom     *BloomSettings     `json:"bloom,omitempty"`
	Admission *AdmissionSettings `json:"admission,omitempty"`
	// Faults replaces the fault rule set when set; a pointer to an empty slice removes every rule.
	Faults *[]FaultRule      `json:"faults,omitempty"`
	LLM    *LLMSettings      `json:"llm,omitempty"`   // absent when generation goes to a real LLM
	Links  map[string]string `json:"links,omitempty"` // toxics per network link, "none" removes them
}

// CacheSettings is the doc store's cache.
type CacheSettings struct {
	Enabled *bool   `json:"enabled,omitempty"`
	Size    *int    `json:"size,omitempty"`   // entries
	Policy  *string `json:"policy,omitempty"` // lru, 2q or arc, where the service can change it
}

// BloomSettings is the doc store's Bloom guard.
type BloomSettings struct {
	Enabled *bool    `json:"enabled,omitempty"`
	FPRate  *float64 `json:"fp_rate,omitempty"`
}

// AdmissionSettings is the admission pool in front of the pipeline.
type AdmissionSettings struct {
	Workers      *int    `json:"workers,omitempty"`
	Queue        *int    `json:"queue,omitempty"` // -1: unbounded
	QueueTimeout *string `json:"queue_timeout,omitempty"`
	Policy       *string `json:"policy,omitempty"`       // reject or wait
	QueueTarget  *string `json:"queue_target,omitempty"` // auto, off or a duration
	// Adaptive is the adaptive concurrency limit in front of the simulated engine.
	Adaptive *AdaptiveSettings `json:"adaptive,omitempty"`
}

// AdaptiveSettings is the admission pool's adaptive concurrency limit.
type AdaptiveSettings struct {
	Enabled   *bool    `json:"enabled,omitempty"`
	Tolerance *float64 `json:"tolerance,omitempty"` // mean slowdown (latency / unloaded latency) it aims at
	MinLimit  *int     `json:"min_limit,omitempty"`
	// Limit is the limit in force when the document was read; the service ignores it in a PUT.
	Limit *int `json:"limit,omitempty"`
}

// adaptiveOff switches the adaptive concurrency limit off, so that the workers alone size the
// pool, as the lab's experiments assume.
func adaptiveOff() *AdaptiveSettings { return &AdaptiveSettings{Enabled: ptr(false)} }

// LLMSettings is the simulated engine.
type LLMSettings struct {
	Profile *string `json:"profile,omitempty"`
	KVAlloc *string `json:"kv_alloc,omitempty"` // paged or contiguous
	// SchedulingPolicy is fcfs or priority; with priority the request field "priority"
	// (lower first) orders the engine's queue and chooses whom to preempt.
	SchedulingPolicy *string `json:"scheduling_policy,omitempty"`
	// ToolCalls is the law of how many searches a question needs in the agentic mode.
	ToolCalls *string `json:"tool_calls,omitempty"`
}

// FaultRule is one fault injection rule.
type FaultRule struct {
	Name     string         `json:"name"`
	Stage    string         `json:"stage,omitempty"`
	Route    string         `json:"route,omitempty"`
	Percent  float64        `json:"percent"`
	Delay    string         `json:"delay,omitempty"` // a latency law
	Relative *RelativeDelay `json:"relative,omitempty"`
}

// RelativeDelay selects the article's relative delay, max(100 ms, baseline x 1.8 + U(0, 200 ms)),
// with the service's defaults.
type RelativeDelay struct{}

// ptr returns a pointer to v, for the optional fields of Settings.
func ptr[T any](v T) *T { return &v }

// durStr writes d as a Settings duration.
func durStr(d time.Duration) *string { return ptr(d.String()) }

// noFaults is a Faults value that removes every rule.
func noFaults() *[]FaultRule { return &[]FaultRule{} }

// faults is a Faults value that installs rules.
func faults(rules ...FaultRule) *[]FaultRule { return &rules }

func (e *env) getConfig(ctx context.Context) (*Settings, error) {
	var cfg Settings
	if err := e.admin(ctx, http.MethodGet, "/admin/config", nil, &cfg); err != nil {
		return nil, fmt.Errorf("read the service's runtime config (is --admin-url right?): %w", err)
	}
	return &cfg, nil
}

func (e *env) put(ctx context.Context, s *Settings) error {
	return e.admin(ctx, http.MethodPut, "/admin/config", s, nil)
}
