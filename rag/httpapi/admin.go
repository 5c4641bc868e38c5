package httpapi

import (
	"net/http"
	"net/http/pprof"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ragtail/ragtail/rag"
)

// NewAdmin returns the handler of the admin listener: /metrics from reg (OpenMetrics when the
// scraper asks for it, so exemplars are exposed), /debug/pprof/*, and /healthz.
func NewAdmin(reg *prometheus.Registry) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: reg}))
	r.HandleFunc("/debug/pprof/", pprof.Index)
	r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	r.HandleFunc("/debug/pprof/profile", pprof.Profile)
	r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	r.Handle("/debug/pprof/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.Handler(chi.URLParam(r, "name")).ServeHTTP(w, r)
	}))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		rag.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return r
}
