package httpapi

import (
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ragtail/ragtail/internal/redact"
	"github.com/ragtail/ragtail/rag/openai"
)

// AdminOption configures the admin handler.
type AdminOption interface{ applyAdmin(*adminConfig) }

type adminConfig struct {
	traces, profiles, pprof http.Handler
	cpuProfile              http.Handler
	config                  ConfigStore
	access                  AdminAccess
	stats                   func() any
}

type adminOptionFunc func(*adminConfig)

func (f adminOptionFunc) applyAdmin(c *adminConfig) { f(c) }

// WithTraces serves GET /debug/traces with h (the in-process trace ring's handler).
func WithTraces(h http.Handler) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.traces = h })
}

// WithProfiles serves GET /debug/profiles with h (the in-process profile store's handler).
func WithProfiles(h http.Handler) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.profiles = h })
}

// WithCPUProfile serves /debug/pprof/profile with h in place of net/http/pprof's Profile. A
// continuous profiler holds the process's only CPU profile, so it must answer that route itself
// (telemetry/profile's CPUProfileHandler); every other /debug/pprof route stays the admin
// handler's own.
func WithCPUProfile(h http.Handler) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.cpuProfile = h })
}

// WithPprof serves /debug/pprof and everything under it but /debug/pprof/cmdline with h, in place
// of the admin handler's pprof routes; h receives the full path.
//
// Deprecated: use WithCPUProfile, which replaces only the route a continuous profiler must own.
func WithPprof(h http.Handler) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.pprof = h })
}

// WithAccess sets who may use the admin routes (default: no token, and the loopback rule decided
// from each connection's local address).
func WithAccess(a AdminAccess) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.access = a })
}

// NewAdmin returns the handler of the admin listener: /metrics from reg (OpenMetrics with
// exemplars when the scraper asks for it), /debug/pprof/*, /healthz, and /debug/traces,
// /debug/profiles and /admin/config when their handlers are given. Every route but /healthz
// follows the AdminAccess rules of WithAccess; /debug/pprof/cmdline shows the command line with
// credentials hidden (redact.Args).
func NewAdmin(reg *prometheus.Registry, opts ...AdminOption) http.Handler {
	var cfg adminConfig
	for _, o := range opts {
		o.applyAdmin(&cfg)
	}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		openai.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Group(func(r chi.Router) {
		r.Use(cfg.access.guard)
		mountAdmin(r, reg, cfg)
	})
	return r
}

// mountAdmin mounts the guarded routes.
func mountAdmin(r chi.Router, reg *prometheus.Registry, cfg adminConfig) {
	r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: reg}))
	mountPprof(r, cfg)
	if cfg.traces != nil {
		r.Handle("/debug/traces", cfg.traces)
	}
	if cfg.profiles != nil {
		r.Handle("/debug/profiles", cfg.profiles)
		r.Handle("/debug/profiles/*", cfg.profiles)
	}
	if cfg.stats != nil {
		r.Get("/admin/stats", func(w http.ResponseWriter, _ *http.Request) { openai.WriteJSON(w, http.StatusOK, cfg.stats()) })
	}
	if cfg.config != nil {
		r.Handle("/admin/config", configHandler(cfg.config, cfg.access))
	}
}

// mountPprof mounts /debug/pprof and everything under it, the one place the pprof routes are
// registered: net/http/pprof's handlers (Index also serves every named profile: heap, goroutine,
// allocs, ...), the redacted cmdline, and the CPU profile of WithCPUProfile when it is given.
func mountPprof(r chi.Router, cfg adminConfig) {
	r.HandleFunc("/debug/pprof/cmdline", redactedCmdline)
	if cfg.pprof != nil {
		r.Handle("/debug/pprof", cfg.pprof)
		r.Handle("/debug/pprof/*", cfg.pprof)
		return
	}
	cpu := cfg.cpuProfile
	if cpu == nil {
		cpu = http.HandlerFunc(pprof.Profile)
	}
	r.Handle("/debug/pprof/profile", cpu)
	r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	r.HandleFunc("/debug/pprof/*", pprof.Index)
	r.Handle("/debug/pprof", http.RedirectHandler("/debug/pprof/", http.StatusMovedPermanently))
}

// redactedCmdline is net/http/pprof's Cmdline with credentials hidden by redact.Args (secret
// flags, header values, URL passwords, secret query parameters): the program's arguments
// separated by NUL bytes.
func redactedCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, strings.Join(redact.Args(os.Args), "\x00"))
}
