// Package httpapi serves the RAG pipeline over HTTP: an OpenAI-compatible API listener
// (/v1/chat/completions, /v1/models, /v1/documents/{id}, /healthz, /readyz) and the admin
// listener (/metrics, /debug/pprof). Handlers are safe for concurrent use.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// Option configures the API handler.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	docs   pipeline.DocStore
	ready  func(context.Context) error
	limits rag.Limits
	logger *slog.Logger
	now    func() time.Time
}

// WithDocuments serves GET /v1/documents/{id} from docs (through its cache and Bloom guard).
func WithDocuments(docs pipeline.DocStore) Option {
	return optionFunc(func(c *config) { c.docs = docs })
}

// WithReadiness makes /readyz report check's error (503 with the reason) until it returns nil.
func WithReadiness(check func(context.Context) error) Option {
	return optionFunc(func(c *config) { c.ready = check })
}

// WithLimits sets the request limits (max_tokens cap and default, message count).
func WithLimits(l rag.Limits) Option {
	return optionFunc(func(c *config) { c.limits = l })
}

// WithLogger sets the logger for request errors.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithClock sets the clock used for Server-Timing and timestamps (default time.Now).
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now })
}

// API is the handler of the API listener.
type API struct {
	p      *pipeline.Pipeline
	cfg    config
	router chi.Router
}

// New returns the API handler for p.
func New(p *pipeline.Pipeline, opts ...Option) *API {
	cfg := config{limits: rag.DefaultLimits, logger: slog.Default(), now: time.Now}
	for _, o := range opts {
		o.apply(&cfg)
	}
	a := &API{p: p, cfg: cfg}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer, TraceParent)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		rag.WriteError(w, &rag.HTTPError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: fmt.Sprintf("no route for %s %s: see /v1/chat/completions, /v1/models, /v1/documents/{id}", r.Method, r.URL.Path)})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		rag.WriteError(w, &rag.HTTPError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path)})
	})
	r.Post("/v1/chat/completions", a.chatCompletions)
	r.Get("/v1/models", a.models)
	r.Get("/v1/documents/*", a.document) // ids of ingested files contain slashes
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		rag.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", a.readyz)
	a.router = r
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

func (a *API) models(w http.ResponseWriter, _ *http.Request) {
	list := rag.ModelList{Object: "list"}
	for _, m := range a.p.Models() {
		list.Data = append(list.Data, rag.ModelCard{ID: m, Object: "model", Created: 0, OwnedBy: "ragtail"})
	}
	rag.WriteJSON(w, http.StatusOK, list)
}

func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	if a.cfg.ready != nil {
		if err := a.cfg.ready(r.Context()); err != nil {
			rag.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
			return
		}
	}
	rag.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (a *API) document(w http.ResponseWriter, r *http.Request) {
	if a.cfg.docs == nil {
		rag.WriteError(w, &rag.HTTPError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "this deployment has no document store"})
		return
	}
	id := chi.URLParam(r, "*")
	if strings.TrimSpace(id) == "" || len(id) > 512 {
		rag.WriteError(w, &rag.HTTPError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "id",
			Message: "document id must be 1 to 512 characters", Err: rag.ErrInvalidRequest})
		return
	}
	start := a.cfg.now()
	chunk, err := a.cfg.docs.Get(r.Context(), id)
	w.Header().Set("Server-Timing", serverTimingEntry(rag.StageFetch, a.cfg.now().Sub(start)))
	if err != nil {
		if errors.Is(err, rag.ErrNotFound) {
			rag.WriteError(w, &rag.HTTPError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "document_not_found",
				Param: "id", Message: fmt.Sprintf("document %q does not exist", id), Err: err})
			return
		}
		if r.Context().Err() != nil {
			return
		}
		rag.WriteError(w, rag.AtStage(rag.StageFetch, err))
		return
	}
	rag.WriteJSON(w, http.StatusOK, chunk)
}

func serverTimingEntry(stage rag.Stage, d time.Duration) string {
	return fmt.Sprintf("%s;dur=%.3f", stage, float64(d)/float64(time.Millisecond))
}
