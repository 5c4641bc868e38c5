package client

import (
	"cmp"
	"context"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/loadgen"
)

// TracerName is the instrumentation scope of the client spans.
const TracerName = "github.com/ragtail/ragtail/loadgen/client"

// maxAttrText bounds the user-controlled strings (model names, error texts, paths) put on spans.
const maxAttrText = 256

// WithTracerProvider makes every request a client span of tp (OpenTelemetry GenAI client
// conventions): "chat {model}" with gen_ai.operation.name, gen_ai.request.model, the usage
// tokens, server.address and server.port, the HTTP status, error.type on failure and the first
// token as an event. The span starts at the request's intended send time (the latency bench
// reports is counted from there) and ends with its last byte. The traceparent sent is the span's
// own context, so the server's spans are its children in any trace backend; when tp samples a
// span out, the traceparent says so and the server follows its parent-based sampler.
//
// Without this option (or with a nil tp) no span is made and a request costs nothing more.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp == nil {
			c.tracing = nil
			return
		}
		// A fresh state per New: the names depend on that client's model and URL.
		c.tracing = &tracing{tracer: tp.Tracer(TracerName)}
	})
}

// tracing is a client's span state; its names are computed on the first request.
type tracing struct {
	tracer trace.Tracer

	once      sync.Once
	chatName  string // "chat {model}", or "text_completion {model}" on /v1/completions
	operation string
	static    []attribute.KeyValue // the attributes every chat span starts with
	getStatic []attribute.KeyValue // those of a Path (GET) request
}

func (t *tracing) init(c *Client) {
	t.operation = "chat"
	if c.completions {
		t.operation = "text_completion"
	}
	model := truncateTo(c.cfg.model, maxAttrText)
	t.chatName = t.operation
	if model != "" {
		t.chatName += " " + model
	}
	server := serverAttrs(c.url)
	t.static = append([]attribute.KeyValue{
		attribute.String("gen_ai.operation.name", t.operation),
		attribute.String("http.request.method", "POST"),
	}, server...)
	if model != "" {
		t.static = append(t.static, attribute.String("gen_ai.request.model", model))
	}
	t.getStatic = append([]attribute.KeyValue{attribute.String("http.request.method", "GET")}, server...)
}

// serverAttrs returns server.address and server.port of the endpoint rawURL.
func serverAttrs(rawURL string) []attribute.KeyValue {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	attrs := []attribute.KeyValue{attribute.String("server.address", truncateTo(host, maxAttrText))}
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, attribute.Int("server.port", p))
	}
	return attrs
}

// startSpan starts the span of one request and returns it with the trace id and the
// traceparent header that carry its context. A tracer that makes no valid context (a no-op
// provider) gets a fresh traceparent of the client's own.
func (c *Client) startSpan(ctx context.Context, req *loadgen.Request, origin time.Time, rec *loadgen.Record) (trace.Span, string, string) {
	t := c.cfg.tracing
	t.once.Do(func() { t.init(c) })
	name, attrs := t.chatName, t.static
	if req.Path != "" {
		name, attrs = "GET", t.getStatic
	}
	_, span := t.tracer.Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(origin.Add(rec.Intended)),
		trace.WithAttributes(attrs...))
	if req.Path != "" {
		span.SetAttributes(attribute.String("url.path", truncateTo(req.Path, maxAttrText)))
	} else if n := cmp.Or(req.MaxTokens, c.cfg.maxTokens); n > 0 {
		span.SetAttributes(attribute.Int("gen_ai.request.max_tokens", n))
	}
	if rec.Warmup {
		span.SetAttributes(attribute.Bool("ragtail.bench.warmup", true))
	}
	sc := span.SpanContext()
	if !sc.IsValid() {
		id, tp := newTraceparent()
		return span, id, tp
	}
	flags := "-00"
	if sc.IsSampled() {
		flags = "-01"
	}
	id := sc.TraceID().String()
	return span, id, "00-" + id + "-" + sc.SpanID().String() + flags
}

// endSpan ends span with what rec measured.
func endSpan(span trace.Span, origin time.Time, rec *loadgen.Record) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if rec.Sent > 0 {
		span.AddEvent("sent", trace.WithTimestamp(origin.Add(rec.Sent)))
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	if ttft, ok := rec.TTFT(); ok {
		// From the intended send time, as bench reports it.
		ttftAttr := attribute.Float64("gen_ai.response.time_to_first_chunk", ttft.Seconds())
		span.AddEvent("gen_ai.first_token", trace.WithTimestamp(origin.Add(rec.FirstToken)), trace.WithAttributes(ttftAttr))
		attrs = append(attrs, ttftAttr)
	}
	if rec.Status != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", rec.Status))
	}
	if rec.ResponseModel != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", rec.ResponseModel))
	}
	if rec.PromptTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.usage.input_tokens", rec.PromptTokens))
	}
	if rec.OutputTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.usage.output_tokens", rec.OutputTokens))
	}
	if rec.ErrKind != "" {
		attrs = append(attrs, attribute.String("error.type", errorType(rec)))
	}
	span.SetAttributes(attrs...)
	if rec.ErrKind != "" {
		span.SetStatus(codes.Error, truncateTo(rec.Err, maxAttrText))
	}
	span.End(trace.WithTimestamp(origin.Add(rec.End)))
}

// errorType is error.type of a failed request: the HTTP status code for an error status (as the
// HTTP conventions say), else the bounded error kind.
func errorType(rec *loadgen.Record) string {
	if rec.Status >= 400 && (rec.ErrKind == loadgen.ErrKindHTTP4xx || rec.ErrKind == loadgen.ErrKindHTTP5xx) {
		return strconv.Itoa(rec.Status)
	}
	return rec.ErrKind
}
