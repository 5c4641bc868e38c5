package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// engineSwitch is the simulated engine behind a swappable pointer: a profile or KV-allocation
// change builds a new engine that takes every new request, while the old one finishes the
// generations it holds and is closed once idle. Its Prometheus collector follows the current
// engine. Each generation that finishes reports its modelled latency and its unloaded latency
// to observe (the admission pool's adaptive limit), when set.
type engineSwitch struct {
	opts    []llmsim.Option
	log     *slog.Logger
	cur     atomic.Pointer[trackedEngine]
	observe func(latency, unloaded time.Duration)
	mu      sync.Mutex // serializes Switch and Close
	done    bool
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
	return &trackedStream{TokenStream: ts, t: t, observe: s.observe}, nil
}

// Switch builds an engine with prof and alloc and sends every new request to it.
func (s *engineSwitch) Switch(prof llmsim.Profile, alloc llmsim.AllocMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errors.New("engine switch is closed")
	}
	// The new engine keeps the scheduling policy and tool-call law set at run time.
	opts := append(append([]llmsim.Option(nil), s.opts...), llmsim.WithAlloc(alloc),
		llmsim.WithSchedulingPolicy(s.cur.Load().SchedulingPolicy()), llmsim.WithToolCalls(s.cur.Load().ToolCalls()))
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
	t       *trackedEngine
	observe func(latency, unloaded time.Duration)
	once    sync.Once
}

func (s *trackedStream) Close() error {
	err := s.TokenStream.Close()
	s.once.Do(func() {
		if st, ok := s.TokenStream.(*llmsim.Stream); ok && s.observe != nil {
			// Only generations that ran to their end: an aborted one says nothing about how
			// long the engine takes.
			if tl := st.Timeline(); tl.Done {
				s.observe(tl.ModelledE2E, s.t.Profile().UnloadedE2E(tl.PromptTokens, tl.CachedTokens, tl.OutputTokens))
			}
		}
		s.t.open.Add(-1)
		s.t.closeIfIdle()
	})
	return err
}
