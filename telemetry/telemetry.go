// Package telemetry sets up ragtail's OpenTelemetry SDK in one call: the SDK's tracer provider,
// with W3C trace-context and baggage propagation (or what OTEL_PROPAGATORS names), an always-on
// in-process trace ring (recent and slowest traces, served on /debug/traces), an optional JSONL
// span file and OTLP export when asked; and the SDK's meter provider, whose Prometheus exporter
// writes to a registry of its own (OpenMetrics with trace_id exemplars on /metrics), and OTLP
// when asked. The OTEL_* variables are read by the SDK and by contrib's autoexport and autoprop
// themselves. It also owns the service's clock (NewClock), which spans, profiles, Server-Timing
// and the X-Ragtail-Time header all read.
//
// Only cmd imports this package: libraries take the providers it returns as the OpenTelemetry
// API interfaces. Backends that are down never hurt requests: spans are exported in batches from
// a bounded queue (full means dropped), metrics are pulled or pushed on a timer, and export
// errors reach one rate-limited log line (ErrorLimiter).
package telemetry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// Telemetry is what Setup built. Pass TracerProvider and MeterProvider to the libraries (as
// trace.TracerProvider and metric.MeterProvider), Now to everything that reads time, and
// Registry, Ring to the admin listener. Call Shutdown once when the service stops.
type Telemetry struct {
	// TracerProvider samples with Config.Sampler (or as OTEL_TRACES_SAMPLER says) and feeds the
	// ring, the trace file and OTLP.
	TracerProvider *sdktrace.TracerProvider
	// MeterProvider feeds the Prometheus registry and, when configured, OTLP.
	MeterProvider *sdkmetric.MeterProvider
	// Propagator is what OTEL_PROPAGATORS names, W3C trace context plus baggage by default (also
	// installed as the global propagator).
	Propagator propagation.TextMapPropagator
	// Registry is the service's own Prometheus registry (not the global one): the OTel
	// exporter's metrics plus the Go runtime and process collectors. Register other collectors
	// (the simulated engine's) on it.
	Registry *prometheus.Registry
	// Ring holds recent and slowest traces; Ring.Handler serves /debug/traces.
	Ring *Ring
	// Now is the service's clock.
	Now func() time.Time
	// Resource describes the service (service.name, service.version, service.instance.id, ...).
	Resource *resource.Resource
	// CaptureContent says whether prompt and answer text may be recorded (Config.CaptureContent).
	CaptureContent bool
	// GenAILatest says whether the GenAI names of the latest conventions replace the v1.41 ones
	// (Config.GenAILatest).
	GenAILatest bool
	// Errors is the rate-limited handler export errors go to (installed as otel's global
	// error handler).
	Errors *ErrorLimiter
	// Exporting lists the active exports, for a startup log line: "otlp traces (grpc) to ...".
	Exporting []string

	shutdownOnce sync.Once
	shutdownErr  error
	shutdowns    []func(context.Context) error
}

// Setup builds the telemetry cfg describes. It installs the propagator and the rate-limited
// error handler as OpenTelemetry globals (the SDK reports export errors only through the global
// handler); the providers are not made global. On error, whatever was built is shut down.
func Setup(ctx context.Context, cfg Config) (_ *Telemetry, err error) {
	cfg = cfg.withDefaults()
	t := &Telemetry{
		Now:            cfg.Now,
		Registry:       prometheus.NewRegistry(),
		CaptureContent: cfg.CaptureContent,
		GenAILatest:    cfg.GenAILatest,
		Propagator:     autoprop.NewTextMapPropagator(),
		Errors:         NewErrorLimiter(cfg.Logger, cfg.ErrorLogEvery, time.Now),
	}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = t.Shutdown(sctx)
		}
	}()
	otel.SetTextMapPropagator(t.Propagator)
	otel.SetErrorHandler(t.Errors)

	if t.Resource, err = newResource(ctx, cfg); err != nil {
		return nil, err
	}
	t.Ring = NewRing(cfg.RingRecent, cfg.RingSlowest, cfg.RingMaxSpans)
	if t.TracerProvider, err = t.newTracerProvider(ctx, cfg); err != nil {
		return nil, err
	}
	t.shutdowns = append(t.shutdowns, t.TracerProvider.Shutdown)
	if t.MeterProvider, err = t.newMeterProvider(ctx, cfg); err != nil {
		return nil, err
	}
	t.shutdowns = append(t.shutdowns, t.MeterProvider.Shutdown)

	if err := t.Registry.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("go collector: %w", err)
	}
	if err := t.Registry.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("process collector: %w", err)
	}
	return t, nil
}

// newTracerProvider builds the SDK's tracer provider: the resource, the span limits, the sampler
// (the SDK's from OTEL_TRACES_SAMPLER when cfg names none), and the span processors: the ring,
// then batchers of the trace file and of OTLP, then cfg's own.
func (t *Telemetry) newTracerProvider(ctx context.Context, cfg Config) (*sdktrace.TracerProvider, error) {
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(t.Resource),
		sdktrace.WithRawSpanLimits(cfg.SpanLimits),
		sdktrace.WithSpanProcessor(t.Ring),
	}
	if cfg.Sampler != nil {
		opts = append(opts, sdktrace.WithSampler(cfg.Sampler))
	}
	// Batchers drop spans past their queue (2048 by default, OTEL_BSP_MAX_QUEUE_SIZE) rather
	// than wait: memory stays bounded while a collector is away.
	withBatcher := func(exp sdktrace.SpanExporter) {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if cfg.TraceFile != "" {
		exp, err := newFileExporter(cfg.TraceFile)
		if err != nil {
			return nil, err
		}
		withBatcher(exp)
		t.Exporting = append(t.Exporting, "spans to "+cfg.TraceFile)
	}
	switch {
	case cfg.TracesEndpoint != "":
		exp, err := newTraceExporter(ctx, cfg.TracesProtocol, cfg.TracesEndpoint)
		if err != nil {
			return nil, err
		}
		withBatcher(exp)
		t.Exporting = append(t.Exporting, fmt.Sprintf("otlp traces (%s) to %s", cfg.TracesProtocol, cfg.TracesEndpoint))
	case exportRequested(os.Getenv, "TRACES"):
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("trace exporter (OTEL_TRACES_EXPORTER): %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			withBatcher(exp)
			t.Exporting = append(t.Exporting, envExportLine("traces", "TRACES"))
		}
	}
	for _, sp := range cfg.SpanProcessors {
		opts = append(opts, sdktrace.WithSpanProcessor(sp))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// newMeterProvider builds the SDK's meter provider: the resource, the cardinality limit when cfg
// sets one (else the SDK's, OTEL_GO_X_CARDINALITY_LIMIT or 2000), and the readers: Prometheus on
// t.Registry, and OTLP when asked. Exemplars follow OTEL_METRICS_EXEMPLAR_FILTER (trace_based by
// default: measurements made within a sampled span carry its trace id).
func (t *Telemetry) newMeterProvider(ctx context.Context, cfg Config) (*sdkmetric.MeterProvider, error) {
	promExp, err := otelprom.New(otelprom.WithRegisterer(t.Registry))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(t.Resource), sdkmetric.WithReader(promExp)}
	if cfg.CardinalityLimit > 0 {
		opts = append(opts, sdkmetric.WithCardinalityLimit(cfg.CardinalityLimit))
	}
	switch {
	case cfg.MetricsEndpoint != "":
		exp, err := newMetricExporter(ctx, cfg.MetricsProtocol, cfg.MetricsEndpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.MetricsInterval))))
		t.Exporting = append(t.Exporting, fmt.Sprintf("otlp metrics (%s) to %s every %v", cfg.MetricsProtocol, cfg.MetricsEndpoint, cfg.MetricsInterval))
	case exportRequested(os.Getenv, "METRICS") && !prometheusRequested(os.Getenv):
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("metric reader (OTEL_METRICS_EXPORTER): %w", err)
		}
		if !autoexport.IsNoneMetricReader(r) {
			opts = append(opts, sdkmetric.WithReader(r))
			t.Exporting = append(t.Exporting, envExportLine("metrics", "METRICS"))
		}
	}
	return sdkmetric.NewMeterProvider(opts...), nil
}

// Shutdown flushes and stops the providers (exporting what is queued, within ctx) and closes
// the trace file. It is idempotent: later calls return the first call's error.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		var errs []error
		for _, f := range t.shutdowns {
			if err := f(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			t.shutdownErr = fmt.Errorf("telemetry shutdown: %w", errors.Join(errs...))
		}
	})
	return t.shutdownErr
}

// LogStartup logs, at info level, where telemetry goes.
func (t *Telemetry) LogStartup(logger *slog.Logger) {
	name, _ := t.Resource.Set().Value(semconv.ServiceNameKey)
	logger.Info("telemetry", "service", name.AsString(), "exporting", t.Exporting, "capture_content", t.CaptureContent)
}

// newResource describes the service: ragtail's defaults, then what OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES say (read by the SDK), then cfg's explicit settings.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := append([]attribute.KeyValue(nil), cfg.ResourceAttributes...)
	attrs = append(attrs, semconv.ServiceInstanceID(instanceID()))
	if cfg.ServiceName != "" {
		attrs = append(attrs, semconv.ServiceName(cfg.ServiceName))
	}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.ServiceVersion))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithProcessRuntimeName(),
		resource.WithProcessRuntimeVersion(),
		resource.WithFromEnv(),
		resource.WithAttributes(attrs...),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	return res, nil
}

// instanceID returns a random service.instance.id, so that two replicas are told apart.
func instanceID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// envProtocol returns the OTLP protocol the environment sets for signal (http/protobuf by
// default, as the specification has it).
func envProtocol(signal string) string {
	return cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), ProtocolHTTPProtobuf)
}

// envExportLine describes for the startup line where the environment sends signal.
func envExportLine(what, signal string) string {
	exp := cmp.Or(strings.TrimSpace(os.Getenv("OTEL_"+signal+"_EXPORTER")), "otlp")
	if exp != "otlp" {
		return what + " to " + exp
	}
	return fmt.Sprintf("otlp %s (%s) to %s", what, envProtocol(signal), otlpEndpoint(os.Getenv, signal))
}

func newTraceExporter(ctx context.Context, protocol, endpoint string) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
	default:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	return exp, nil
}

func newMetricExporter(ctx context.Context, protocol, endpoint string) (sdkmetric.Exporter, error) {
	var (
		exp sdkmetric.Exporter
		err error
	)
	switch protocol {
	case ProtocolGRPC:
		exp, err = otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpointURL(endpoint))
	default:
		exp, err = otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(endpoint))
	}
	if err != nil {
		return nil, fmt.Errorf("otlp metric exporter: %w", err)
	}
	return exp, nil
}
