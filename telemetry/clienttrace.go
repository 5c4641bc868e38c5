package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ClientServiceName is the service.name of the load generator's client spans, whatever
// OTEL_SERVICE_NAME says: a shell often exports one environment to serve and bench alike, and
// the two must stay apart in a trace backend.
const ClientServiceName = "ragtail-bench"

// Bounds on exporting the client spans: a dead or slow collector costs the run at most a
// dropped batch (the queue never blocks a request) and its end at most ClientShutdownTimeout.
const (
	ClientExportTimeout   = 5 * time.Second
	ClientShutdownTimeout = 5 * time.Second
	clientQueue           = 8192
)

// ClientTracing exports the client spans of a load generator's run (ragtail bench and sweep):
// one span per request, under the service name ClientServiceName.
type ClientTracing struct {
	tp   *sdktrace.TracerProvider
	desc string
}

// StartClientTracing sets up the export of one client span per request: to otlpURL when given
// (gRPC on port 4317, OTLP/HTTP otherwise), else as the OTEL_* variables say (OTLP/HTTP unless
// OTEL_EXPORTER_OTLP_PROTOCOL says grpc) when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (contrib's
// autoexport; OTEL_TRACES_EXPORTER=none turns it off). It returns nil when nothing is to be
// exported, and otherwise says on w where the spans go.
func StartClientTracing(ctx context.Context, otlpURL string, getenv func(string) string, w io.Writer) (*ClientTracing, error) {
	exp, desc, err := clientSpanExporter(ctx, otlpURL, getenv)
	if err != nil || exp == nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", ClientServiceName)))
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("bench trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp,
			sdktrace.WithMaxQueueSize(clientQueue),
			sdktrace.WithExportTimeout(ClientExportTimeout)),
	)
	b := &ClientTracing{tp: tp, desc: desc}
	_, _ = fmt.Fprintln(w, b.Describe())
	return b, nil
}

// clientSpanExporter returns the exporter StartClientTracing uses, nil for none.
func clientSpanExporter(ctx context.Context, otlpURL string, getenv func(string) string) (sdktrace.SpanExporter, string, error) {
	if otlpURL != "" {
		return otlpURLExporter(ctx, otlpURL)
	}
	if strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) == "" && strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) == "" {
		return nil, "", nil
	}
	if strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")) == "none" {
		return nil, "", nil
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if strings.TrimSpace(endpoint) == "" {
		endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("bench trace exporter (OTEL_TRACES_EXPORTER): %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return nil, "", nil
	}
	return exp, "otlp " + endpoint, nil
}

// otlpURLExporter returns the exporter of --otlp URL.
func otlpURLExporter(ctx context.Context, raw string) (sdktrace.SpanExporter, string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", fmt.Errorf("--otlp %q: want an http:// or https:// URL of an OTLP receiver, e.g. http://127.0.0.1:4318", boundedText(raw))
	}
	if u.Port() == "4317" {
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(u.String()), otlptracegrpc.WithTimeout(ClientExportTimeout)}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("--otlp: %w", err)
		}
		return exp, "otlp grpc " + u.Host, nil
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()), otlptracehttp.WithTimeout(ClientExportTimeout))
	if err != nil {
		return nil, "", fmt.Errorf("--otlp: %w", err)
	}
	return exp, "otlp http " + u.String(), nil
}

// boundedText cuts a user-given string for an error message.
func boundedText(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// Provider returns the tracer provider of the client spans; nil-safe (nil means none).
func (b *ClientTracing) Provider() trace.TracerProvider {
	if b == nil {
		return nil
	}
	return b.tp
}

// Describe returns a line saying where the client spans go.
func (b *ClientTracing) Describe() string {
	return "client spans (" + ClientServiceName + ") to " + b.desc
}

// Shutdown flushes the spans still queued and stops, waiting ClientShutdownTimeout at most: a dead
// collector makes it give up, reported on w, and never fails the run.
func (b *ClientTracing) Shutdown(w io.Writer) {
	if b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ClientShutdownTimeout)
	defer cancel()
	if err := b.tp.Shutdown(ctx); err != nil {
		msg := err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			msg = "the collector did not answer within " + ClientShutdownTimeout.String()
		}
		_, _ = fmt.Fprintf(w, "warning: client spans not all exported: %s\n", boundedText(msg))
	}
}
