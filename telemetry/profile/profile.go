// Package profile is ragtail's built-in continuous profiler. It runs a pyroscope-go session whose
// upstream tees every profile window to an in-process Store (a bounded ring of windows on the
// service's clock) and, when a server address is configured, to Pyroscope. The store keeps
// short windows (Config.StoreWindow, 1 s: about one request's life; pyroscope-go v1.5.0's CPU
// collector skips every other tick, so its CPU windows last two periods); the pushed windows
// (Config.Window, 10 s) merge them. WrapTracerProvider links spans to profiles with
// grafana/otel-profiling-go: samples taken inside a span carry the pprof labels span_id and
// trace_id, and the span gets the pyroscope.profile.id attribute; the pipeline adds a rag_stage
// label around each stage. Handler serves the store as GET /debug/profiles, so "what was the
// process doing during trace X" is one query away, with no backend running. PprofHandler serves
// /debug/pprof/* without fighting the continuous CPU profiler.
//
// Two views answer a trace. The CPU view (pyroscope-go, 100 Hz) shows what the request computed
// and nothing of its waiting. The wall-clock view comes from the package's own sampler: at
// Config.WallRate (default 20 Hz) it takes the runtime's goroutine profile, whose text form
// carries each goroutine's pprof labels, and keeps the stacks of labelled goroutines, running or
// parked, so it shows where a request waited (shards, the engine, the client). Its resolution is
// one snapshot interval (50 ms at 20 Hz); a snapshot costs about 0.2 ms with 10 labelled
// goroutines, 0.7 ms with 100 and 5 ms with 1000 (BenchmarkWallSnapshot), so past 5% of a core
// the sampler skips ticks, down to one snapshot per 100 ms, weighting each snapshot by the
// interval it stands for. Queries of the wall view include its window still open.
//
// Only one CPU profiler can run in a process, so only one Profiler can run at a time.
package profile

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	otelpyroscope "github.com/grafana/otel-profiling-go"
	"github.com/grafana/pyroscope-go"
	"github.com/grafana/pyroscope-go/upstream"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config.
const (
	DefaultAppName     = "ragtail"
	DefaultWindow      = 10 * time.Second
	DefaultPushQueue   = 32
	DefaultPushTimeout = 10 * time.Second
	// MinWindow is the shortest window accepted: at pyroscope's 100 Hz, a shorter CPU window
	// holds too few samples per core to say anything, and costs a profile encode per window.
	MinWindow = time.Second
)

// DefaultProfileTypes are the profile types collected when Config.ProfileTypes is empty: CPU,
// allocations and in-use memory (objects and bytes), and goroutines.
var DefaultProfileTypes = []pyroscope.ProfileType{
	pyroscope.ProfileCPU,
	pyroscope.ProfileAllocObjects,
	pyroscope.ProfileAllocSpace,
	pyroscope.ProfileInuseObjects,
	pyroscope.ProfileInuseSpace,
	pyroscope.ProfileGoroutines,
}

// ErrRunning is returned by Start while another Profiler runs: the Go runtime has one CPU
// profiler per process.
var ErrRunning = errors.New("a continuous profiler is already running in this process")

// running guards the process-wide CPU profiler.
var running atomic.Bool

// Config configures the profiler. Zero fields take the defaults.
type Config struct {
	// AppName is the Pyroscope application name (default "ragtail").
	AppName string
	// Window is the window pushed to a Pyroscope server, the upload rate (default 10 s, at least
	// MinWindow): the short windows of StoreWindow are merged into it.
	Window time.Duration
	// StoreWindow is the window the in-process store keeps, pyroscope-go's collection period and
	// the wall sampler's (default DefaultStoreWindow, 1 s: about one request's life; at least
	// MinWindow, at most Window), so a trace's profiles are queryable a second after it ends.
	StoreWindow time.Duration
	// Keep is how many windows of each profile kind the Store keeps (default 600: ten minutes of
	// 1 s windows).
	Keep int
	// MaxBytes caps the Store's profile data in all kinds (default 64 MiB).
	MaxBytes int64
	// ServerAddress is the Pyroscope server (PYROSCOPE_SERVER_ADDRESS); empty means no push.
	ServerAddress string
	// BasicAuthUser, BasicAuthPassword and TenantID authenticate the push
	// (PYROSCOPE_BASIC_AUTH_USER, PYROSCOPE_BASIC_AUTH_PASSWORD, PYROSCOPE_TENANT_ID).
	BasicAuthUser, BasicAuthPassword, TenantID string
	// PushQueue is how many windows may wait for Pyroscope before new ones are dropped
	// (default 32).
	PushQueue int
	// PushTimeout bounds each push, and how long Stop waits for the queue to drain (default 10 s).
	PushTimeout time.Duration
	// Tags are added to every pushed profile (Pyroscope labels).
	Tags map[string]string
	// Now is the shared clock stored windows are stamped with (default time.Now): the clock of
	// span timestamps, so that a span's start and end select the windows that saw it.
	Now func() time.Time
	// Logger receives the profiler's few log lines (default slog.Default()).
	Logger *slog.Logger
	// ProfileTypes are the profiles collected (default DefaultProfileTypes). Mutex and block
	// profiles also need runtime.SetMutexProfileFraction and runtime.SetBlockProfileRate.
	ProfileTypes []pyroscope.ProfileType
	// AllSpans labels samples with the span_id of the innermost span and sets
	// pyroscope.profile.id on every span. By default, as in otel-profiling-go, only the local
	// root span (the server span) does, which costs less; rag_stage still tells the stages apart.
	AllSpans bool
	// WallRate is the wall sampler's rate in Hz (default DefaultWallRate, at most MaxWallRate;
	// negative turns the wall-clock view off). Each tick takes a labelled goroutine snapshot.
	WallRate float64
}

// Profiler is a running continuous profiler. Its methods are safe for concurrent use, and a nil
// *Profiler (profiling off) is valid: Stop does nothing, Store returns nil, WrapTracerProvider
// returns its argument.
type Profiler struct {
	cfg      Config
	log      *slog.Logger
	session  *pyroscope.Session
	store    *Store
	tee      *tee
	wall     *wallSampler
	stopOnce sync.Once
}

// Start validates cfg, fills its defaults and starts profiling. pyroscope-go's CPU collector
// starts in its own goroutine, so CPU samples begin within milliseconds after Start returns.
// Start returns ErrRunning while another Profiler runs.
func Start(cfg Config) (*Profiler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !running.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	p, err := start(cfg)
	if err != nil {
		running.Store(false)
		return nil, err
	}
	return p, nil
}

func start(cfg Config) (*Profiler, error) {
	p := &Profiler{cfg: cfg, log: cfg.Logger, store: NewStore(cfg.Keep, cfg.MaxBytes)}
	p.tee = &tee{store: p.store, now: cfg.Now, log: cfg.Logger, batch: newBatcher(cfg.Window, cfg.StoreWindow)}
	if cfg.ServerAddress != "" {
		push, err := newPusher(cfg.ServerAddress, cfg.BasicAuthUser, cfg.BasicAuthPassword, cfg.TenantID,
			cfg.PushQueue, cfg.PushTimeout, cfg.Logger)
		if err != nil {
			return nil, err
		}
		p.tee.push = push
	}
	session, err := pyroscope.NewSession(pyroscope.SessionConfig{
		Upstream:       p.tee,
		Logger:         sessionLogger{cfg.Logger.With("component", "pyroscope-session")},
		AppName:        cfg.AppName,
		Tags:           maps.Clone(cfg.Tags), // the session edits the map
		ProfilingTypes: cfg.ProfileTypes,
		UploadRate:     cfg.StoreWindow,
	})
	if err != nil {
		if p.tee.push != nil {
			p.tee.push.stop(0)
		}
		return nil, fmt.Errorf("profiling session: %w", err)
	}
	if err := session.Start(); err != nil {
		if p.tee.push != nil {
			p.tee.push.stop(0)
		}
		return nil, fmt.Errorf("start profiling session: %w", err)
	}
	p.session = session
	if cfg.WallRate > 0 {
		now := cfg.Now
		if now == nil {
			now = time.Now
		}
		p.wall = newWallSampler(p.store, now, cfg.WallRate, cfg.StoreWindow)
		p.wall.start()
	}
	push := "off"
	if p.tee.push != nil {
		push = p.tee.push.address
	}
	p.log.Info("continuous profiler started", "window", cfg.Window, "store_window", cfg.StoreWindow, "keep", cfg.Keep, "wall_rate_hz", cfg.WallRate,
		"types", cfg.ProfileTypes, "pyroscope", push)
	return p, nil
}

func (c Config) withDefaults() (Config, error) {
	if c.AppName == "" {
		c.AppName = DefaultAppName
	}
	switch {
	case c.Window == 0:
		c.Window = DefaultWindow
	case c.Window < MinWindow:
		return c, fmt.Errorf("profile window %s: want at least %s", c.Window, MinWindow)
	}
	switch {
	case c.StoreWindow == 0:
		c.StoreWindow = min(DefaultStoreWindow, c.Window)
	case c.StoreWindow < MinWindow || c.StoreWindow > c.Window:
		return c, fmt.Errorf("store window %s: want from %s to the push window %s", c.StoreWindow, MinWindow, c.Window)
	}
	if c.Keep < 0 || c.MaxBytes < 0 || c.PushQueue < 0 || c.PushTimeout < 0 {
		return c, errors.New("profile config: Keep, MaxBytes, PushQueue and PushTimeout must not be negative")
	}
	if c.Keep == 0 {
		c.Keep = DefaultKeep
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.PushQueue == 0 {
		c.PushQueue = DefaultPushQueue
	}
	if c.PushTimeout == 0 {
		c.PushTimeout = DefaultPushTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.WallRate == 0:
		c.WallRate = DefaultWallRate
	case c.WallRate > MaxWallRate:
		return c, fmt.Errorf("wall sampler rate %g Hz: want at most %d (or negative for off)", c.WallRate, MaxWallRate)
	}
	if len(c.ProfileTypes) == 0 {
		c.ProfileTypes = DefaultProfileTypes
	}
	for _, t := range c.ProfileTypes {
		if t == ProfileWall {
			return c, fmt.Errorf("profile type %q is the wall sampler's, not pyroscope-go's: set WallRate instead", t)
		}
		if _, ok := profileTypes[t]; !ok {
			return c, fmt.Errorf("profile type %q: want one of %v", t, typeNames())
		}
	}
	return c, nil
}

// Stop stops profiling. The final CPU window (up to now) reaches the store and the push queue;
// queued pushes get up to PushTimeout to drain, the rest is dropped. Stop is idempotent, and
// returns nil: undelivered windows are counted in PushStats and logged, never fatal.
func (p *Profiler) Stop() error {
	if p == nil {
		return nil
	}
	p.stopOnce.Do(func() {
		if p.wall != nil {
			p.wall.stopAndFlush()
		}
		p.session.Stop()
		if p.tee.push != nil {
			for _, job := range p.tee.batch.flush() {
				p.tee.push.enqueue(job)
			}
			p.tee.push.stop(p.cfg.PushTimeout)
		}
		running.Store(false)
		st := p.store.Stats()
		p.log.Info("continuous profiler stopped", "windows", st.Windows, "bytes", st.Bytes)
	})
	return nil
}

// Store returns the in-process profile store (nil for a nil Profiler).
func (p *Profiler) Store() *Store {
	if p == nil {
		return nil
	}
	return p.store
}

// WallStats returns the wall sampler's counters (zero when it is off).
func (p *Profiler) WallStats() WallStats {
	if p == nil || p.wall == nil {
		return WallStats{}
	}
	return p.wall.stats()
}

// PushStats returns the counters of the push to Pyroscope (zero when there is no push).
func (p *Profiler) PushStats() PushStats {
	if p == nil || p.tee.push == nil {
		return PushStats{}
	}
	return p.tee.push.stats()
}

// WrapTracerProvider returns tp wrapped by otel-profiling-go: every sampled span started through
// it sets the pprof labels trace_id (the trace), span_name and span_id (the local root span, or
// the span itself with Config.AllSpans) on its goroutine until it ends, and the span carrying the
// id gets the pyroscope.profile.id attribute. Code run in pprof.Do(ctx, ...) under such a span's
// context keeps these labels and adds its own (rag_stage). The wrapper has no Shutdown or
// ForceFlush: keep the SDK provider to shut it down. A nil Profiler returns tp unchanged: without
// a profiler, labelling goroutines would cost something and serve nothing.
func (p *Profiler) WrapTracerProvider(tp trace.TracerProvider) trace.TracerProvider {
	if p == nil || tp == nil {
		return tp
	}
	scope := otelpyroscope.ScopeRootSpan
	if p.cfg.AllSpans {
		scope = otelpyroscope.ScopeAllSpans
	}
	return otelpyroscope.NewTracerProvider(tp, otelpyroscope.WithSpanIDLabelScope(scope))
}

// tee is the session's upstream: each window goes to the store, stamped on the shared clock,
// and to the pusher when there is one. Upload never blocks on anything but the store's mutex.
type tee struct {
	store *Store
	push  *pusher
	batch *batcher // groups the store's short windows into pushed windows
	now   func() time.Time
	log   *slog.Logger

	addErrLogged atomic.Bool // the first window the store refuses is logged, the rest counted
}

// Upload implements upstream.Upstream.
func (t *tee) Upload(job *upstream.UploadJob) {
	if k := kindOf(job); k != "" {
		if err := t.store.Add(k, t.onClock(job.StartTime), t.onClock(job.EndTime), job.Profile); err != nil {
			t.logAddError(err)
		}
	}
	if t.push != nil {
		for _, j := range t.batch.add(job) {
			t.push.enqueue(j)
		}
	}
}

// Flush implements upstream.Upstream. It does not wait for pushes: a Pyroscope server that is
// down must not hold the session up. (Session.Stop does not call it; the final CPU window comes
// through Upload.)
func (t *tee) Flush() {}

func (t *tee) logAddError(err error) {
	if t.addErrLogged.CompareAndSwap(false, true) {
		t.log.Warn("profile window not stored; further refusals are counted in the store's "+
			"rejected count, not logged", "error", err)
	}
}

// onClock maps a time pyroscope-go read from time.Now onto the shared clock: it adds the
// clock's current offset from the system's wall clock (zero for the default clock; for a clock
// anchored at start and advanced monotonically, the wall-clock steps since) and drops the
// monotonic reading, so that windows compare with span timestamps and query bounds as Unix
// times. The offset is taken between wall readings: with their monotonic readings, the
// difference between an anchored clock and time.Now would always be zero.
func (t *tee) onClock(wall time.Time) time.Time {
	if t.now == nil {
		return wall.Round(0)
	}
	return wall.Add(t.now().Round(0).Sub(time.Now().Round(0))).Round(0)
}

// kindOf tells which kind of window pyroscope-go uploads, from the sample types it declares for
// it (CPU windows declare none); "" for a kind this package does not know.
func kindOf(job *upstream.UploadJob) Kind {
	if len(job.SampleTypeConfig) == 0 {
		if job.Units == "samples" {
			return KindCPU
		}
		return ""
	}
	for name, st := range job.SampleTypeConfig {
		switch {
		case name == "goroutine":
			return KindGoroutine
		case name == "goroutineleak":
			return KindGoroutineLeak
		case name == "alloc_objects", name == "alloc_space", name == "inuse_objects", name == "inuse_space":
			return KindMemory
		case st != nil && (st.DisplayName == "mutex_count" || st.DisplayName == "mutex_duration"):
			return KindMutex
		case st != nil && (st.DisplayName == "block_count" || st.DisplayName == "block_duration"):
			return KindBlock
		}
	}
	return ""
}
