// Package httpapi serves the RAG pipeline over HTTP: an OpenAI-compatible API listener
// (/v1/chat/completions, /v1/models, /v1/documents/{id}, /healthz, /readyz) and the admin
// listener (/metrics, /debug/pprof/*, /debug/traces, /debug/profiles). The API is traced with
// otelhttp inside the chi router, so the server span is named by route ("POST
// /v1/chat/completions"); every response carries the server span's traceparent and the
// service's clock (X-Ragtail-Time). Handlers are safe for concurrent use.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// Option configures the API handler.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	docs       pipeline.DocStore
	ready      func(context.Context) error
	limits     openai.Limits
	logger     *slog.Logger
	now        func() time.Time
	tracer     trace.TracerProvider
	meter      metric.MeterProvider
	propagator propagation.TextMapPropagator
	faults     RouteFaults
	embedder   Embedder
	admitter   Admitter
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
func WithLimits(l openai.Limits) Option {
	return optionFunc(func(c *config) { c.limits = l })
}

// WithLogger sets the logger for request errors.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithClock sets the clock used for Server-Timing, the server span's start and the
// X-Ragtail-Time header (default time.Now). Give it the pipeline's clock.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.now = now
		}
	})
}

// WithTracerProvider traces requests with tp: one server span per request, named by route, the
// parent of the pipeline's spans. The default is a no-op provider (responses still carry a
// traceparent).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracer = tp
		}
	})
}

// WithMeterProvider records otelhttp's HTTP server metrics (http_server_request_duration_seconds
// by route and status) with mp. The default is a no-op provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meter = mp
		}
	})
}

// WithPropagator sets how the caller's trace context is read from request headers; the default
// is W3C trace context plus baggage.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.propagator = p
		}
	})
}

// API is the handler of the API listener.
type API struct {
	p        *pipeline.Pipeline
	cfg      config
	router   chi.Router
	failures *logLimiter // request-failure log lines, by status code
}

// New returns the API handler for p.
func New(p *pipeline.Pipeline, opts ...Option) *API {
	cfg := config{limits: openai.DefaultLimits, logger: slog.Default(), now: time.Now,
		tracer: tracenoop.NewTracerProvider(), meter: metricnoop.NewMeterProvider(),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	for _, o := range opts {
		o.apply(&cfg)
	}
	cfg.propagator = baggageGuard{cfg.propagator}
	a := &API{p: p, cfg: cfg, failures: newLogLimiter(logBurst, logInterval, time.Now)}
	r := chi.NewRouter()
	// otelhttp runs inside the router so that chi has set the route pattern on the request by
	// the time the span is named; nothing after it may replace the request.
	r.Use(clockHeader(cfg.now), startTime(cfg.now),
		otelhttp.NewMiddleware("ragtail",
			otelhttp.WithTracerProvider(cfg.tracer), otelhttp.WithMeterProvider(cfg.meter),
			otelhttp.WithPropagators(cfg.propagator), otelhttp.WithServerName(serverName),
			otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/healthz" && r.URL.Path != "/readyz" })),
		serverSpan, middleware.Recoverer)
	routes := "/v1/chat/completions, /v1/models, /v1/documents/{id}"
	if cfg.embedder != nil {
		routes = "/v1/chat/completions, /v1/embeddings, /v1/models, /v1/documents/{id}"
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, &openai.HTTPError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: fmt.Sprintf("no route for %s %s: see %s", openai.Truncate(r.Method, maxPathEcho), openai.Truncate(r.URL.Path, maxPathEcho), routes)})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, &openai.HTTPError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: fmt.Sprintf("method %s is not allowed on %s", openai.Truncate(r.Method, maxPathEcho), openai.Truncate(r.URL.Path, maxPathEcho))})
	})
	r.Post("/v1/chat/completions", a.faulty("/v1/chat/completions", a.chatCompletions))
	r.Get("/v1/models", a.faulty("/v1/models", a.models))
	if cfg.embedder != nil {
		r.Post("/v1/embeddings", a.faulty("/v1/embeddings", a.embeddings))
	}
	r.Get("/v1/documents/*", a.faulty("/v1/documents/*", a.document)) // ids of ingested files contain slashes
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		openai.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", a.readyz)
	a.router = r
	return a
}

// serverName is what otelhttp records as server.address (and server.port) on the server span
// and the HTTP server metrics instead of the request's Host header, which the client chooses:
// 100 requests with 60 KB Host headers made /metrics 320 MB, and 2,000 distinct hosts filled
// the cardinality limit so that every route landed in the overflow series. The port 0 keeps
// otelhttp from taking the port from the Host header, and is itself not recorded.
const serverName = "ragtail:0"

// maxPathEcho bounds the request path and method echoed in a 404 or 405 message.
const maxPathEcho = 256

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

func (a *API) models(w http.ResponseWriter, _ *http.Request) {
	list := openai.ModelList{Object: "list"}
	models := a.p.Models()
	// The embedding model too, so that a client can discover what POST /v1/embeddings takes.
	if e := a.cfg.embedder; e != nil && !slices.Contains(models, e.Model()) {
		models = append(slices.Clip(models), e.Model())
	}
	for _, m := range models {
		list.Data = append(list.Data, openai.ModelCard{ID: m, Object: "model", Created: 0, OwnedBy: "ragtail"})
	}
	openai.WriteJSON(w, http.StatusOK, list)
}

func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	if a.cfg.ready != nil {
		if err := a.cfg.ready(r.Context()); err != nil {
			openai.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
			return
		}
	}
	openai.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (a *API) document(w http.ResponseWriter, r *http.Request) {
	if a.cfg.docs == nil {
		openai.WriteError(w, &openai.HTTPError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "this deployment has no document store"})
		return
	}
	id := chi.URLParam(r, "*")
	if strings.TrimSpace(id) == "" || len(id) > 512 {
		openai.WriteError(w, &openai.HTTPError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "id",
			Message: "document id must be 1 to 512 characters", Err: rag.ErrInvalidRequest})
		return
	}
	start := a.cfg.now()
	chunk, err := a.cfg.docs.Get(r.Context(), id)
	w.Header().Set("Server-Timing", serverTimingEntry(rag.StageFetch, a.cfg.now().Sub(start)))
	if err != nil {
		if errors.Is(err, rag.ErrNotFound) {
			openai.WriteError(w, &openai.HTTPError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "document_not_found",
				Param: "id", Message: fmt.Sprintf("document %q does not exist", id), Err: err})
			return
		}
		if r.Context().Err() != nil {
			return
		}
		openai.WriteError(w, rag.AtStage(rag.StageFetch, err))
		return
	}
	openai.WriteJSON(w, http.StatusOK, chunk)
}

func serverTimingEntry(stage rag.Stage, d time.Duration) string {
	return fmt.Sprintf("%s;dur=%.3f", stage, float64(d)/float64(time.Millisecond))
}
