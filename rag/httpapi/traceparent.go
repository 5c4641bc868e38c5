package httpapi

import (
	"context"
	"crypto/rand"
	"net/http"
	"strconv"
	"time"

	"github.com/ragtail/ragtail/rag"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// ClockHeader is the response header carrying the service's clock: the Unix time in nanoseconds
// at which the response headers were written, read from the same clock as span timestamps,
// profile windows and Server-Timing. A client on another host that notes its own send time t0
// and header-receive time t1 can estimate the offset of the service's clock from its own as
// X-Ragtail-Time - (t0+t1)/2, within ±(t1-t0)/2, and so place server spans on its own timeline.
const ClockHeader = "X-Ragtail-Time"

// StageHTTP is the rag.stage of the HTTP server span (rag.StageHTTP).
const StageHTTP = rag.StageHTTP

// TraceContext is the W3C trace context of one request as the server sees it: the trace it
// belongs to and the server's own span id.
type TraceContext struct {
	TraceID string // 32 lower-case hex digits
	SpanID  string // 16 lower-case hex digits
	Sampled bool
}

// Header returns the traceparent header value of tc, as propagation.TraceContext writes it; ""
// if tc's ids are not valid.
func (tc TraceContext) Header() string {
	tid, err := trace.TraceIDFromHex(tc.TraceID)
	if err != nil {
		return ""
	}
	sid, err := trace.SpanIDFromHex(tc.SpanID)
	if err != nil {
		return ""
	}
	var flags trace.TraceFlags
	if tc.Sampled {
		flags = trace.FlagsSampled
	}
	return traceparent(trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags}))
}

// traceparent returns the traceparent header value of sc.
func traceparent(sc trace.SpanContext) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier.Get(traceparentHeader)
}

const traceparentHeader = "traceparent"

// TraceFromContext returns the trace context of the span in ctx: inside a handler, the HTTP
// server span. It reports false when ctx holds no valid span context.
func TraceFromContext(ctx context.Context) (TraceContext, bool) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return TraceContext{}, false
	}
	return TraceContext{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(), Sampled: sc.IsSampled()}, true
}

// serverSpan runs inside otelhttp: it answers with the traceparent of the server span, so that a
// client can find the server's side of every request it made, and marks the span with its
// rag.stage. Without a tracer provider there is no server span (the no-op tracer hands back the
// caller's remote context); the response then still carries a traceparent in the caller's trace
// (or a new one) with a fresh span id, which nothing records. It must not replace the request:
// chi sets the route pattern on it for otelhttp to name the span.
func serverSpan(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		span := trace.SpanFromContext(r.Context())
		sc := span.SpanContext()
		if sc.IsValid() && !sc.IsRemote() {
			if span.IsRecording() {
				span.SetAttributes(rag.AttrStage.String(StageHTTP))
			}
		} else {
			// No server span: answer in the caller's trace (or a new one) with a fresh span id.
			cfg := trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: newSpanID(), TraceFlags: trace.FlagsSampled}
			if sc.IsValid() {
				cfg.TraceFlags = sc.TraceFlags()
			} else {
				_, _ = rand.Read(cfg.TraceID[:])
			}
			sc = trace.NewSpanContext(cfg)
		}
		w.Header().Set(traceparentHeader, traceparent(sc))
		next.ServeHTTP(w, r)
		if r.Pattern != "" && span.IsRecording() {
			span.SetAttributes(semconv.HTTPRoute(r.Pattern))
		}
	})
}

// startTime makes otelhttp start the server span at a reading of now, so that it is on the
// service's clock.
func startTime(now func() time.Time) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(otelhttp.ContextWithStartTime(r.Context(), now())))
		})
	}
}

// clockHeader stamps every response with ClockHeader when its headers are written.
func clockHeader(now func() time.Time) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&clockWriter{ResponseWriter: w, now: now}, r)
		})
	}
}

// clockWriter sets ClockHeader just before the headers go out. It keeps http.Flusher working
// for SSE and unwraps for http.ResponseController.
type clockWriter struct {
	http.ResponseWriter
	now     func() time.Time
	stamped bool
}

func (c *clockWriter) stamp() {
	if !c.stamped {
		c.stamped = true
		c.Header().Set(ClockHeader, strconv.FormatInt(c.now().UnixNano(), 10))
	}
}

func (c *clockWriter) WriteHeader(code int) {
	if code >= 200 { // informational responses go out before the real headers
		c.stamp()
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *clockWriter) Write(b []byte) (int, error) {
	c.stamp()
	return c.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (c *clockWriter) Flush() {
	c.stamp()
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (c *clockWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// ParseTraceParent parses a W3C traceparent header with propagation.TraceContext: version 00
// with exactly four fields, or a later version with more. It rejects malformed values and the
// all-zero ids the specification forbids.
func ParseTraceParent(h string) (TraceContext, bool) {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceparentHeader: h})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return TraceContext{}, false
	}
	return TraceContext{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(), Sampled: sc.IsSampled()}, true
}

// newSpanID returns a random span id that is not all zeros.
func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		_, _ = rand.Read(id[:])
	}
	return id
}
