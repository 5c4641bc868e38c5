package httpapi

import (
	"net/http"
	"net/http/pprof"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/ragtail/ragtail/rag/openai"
)

// AdminOption configures the admin handler.
type AdminOption interface{ applyAdmin(*adminConfig) }

type adminConfig struct {
	traces, profiles, pprof http.Handler
	config                  ConfigStore
	configAccess            ConfigAccess
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

// WithPprof serves /debug/pprof and everything under it with h, in place of net/http/pprof's
// handlers. A continuous profiler holds the process's only CPU profile, so it must also answer
// /debug/pprof/profile; h receives the full path.
func WithPprof(h http.Handler) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.pprof = h })
}

// NewAdmin returns the handler of the admin listener: /metrics from reg (OpenMetrics with
// exemplars when the scraper asks for it), /debug/pprof/*, /healthz, and /debug/traces,
// /debug/profiles and /admin/config when their handlers are given.
func NewAdmin(reg *prometheus.Registry, opts ...AdminOption) http.Handler {
	var cfg adminConfig
	for _, o := range opts {
		o.applyAdmin(&cfg)
	}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: reg}))
	if cfg.pprof != nil {
		r.Handle("/debug/pprof", cfg.pprof)
		r.Handle("/debug/pprof/*", cfg.pprof)
	} else {
		r.HandleFunc("/debug/pprof/", pprof.Index)
		r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
		r.Handle("/debug/pprof/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pprof.Handler(chi.URLParam(r, "name")).ServeHTTP(w, r)
		}))
	}
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
		r.Handle("/admin/config", configHandler(cfg.config, cfg.configAccess))
	}
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		openai.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return r
}
