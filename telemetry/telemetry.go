// Package telemetry sets up ragtail's OpenTelemetry SDK in one call: a tracer provider with W3C
// trace-context and baggage propagation (ragtail's own span recorder behind the OTel trace API,
// with the SDK's samplers, span limits, processors and exporters: see TracerProvider), an
// always-on in-process trace ring (recent and slowest traces, served on /debug/traces), an
// optional JSONL span file, OTLP export of traces and metrics when an endpoint is configured,
// and a meter provider whose Prometheus exporter writes to a registry of its own (OpenMetrics
// with trace_id exemplars on /metrics). It also owns the service's clock (NewClock), which
// spans, profiles, Server-Timing and the X-Ragtail-Time header all read.
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
	// TracerProvider samples with Config.Sampler (or OTEL_TRACES_SAMPLER) and feeds the ring,
	// the trace file and OTLP; its spans are recorded by ragtail's own tracer, the SDK's
	// samplers, limits, processors and exporters around it (see TracerProvider).
	TracerProvider *TracerProvider
	// MeterProvider feeds the Prometheus registry and, when configured, OTLP. ragtail's own
	// instruments are aggregated by it, the others by the SDK's provider (MeterProvider.SDK).
	MeterProvider *MeterProvider
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
	// Errors is the rate-limited handler export errors go to (installed as otel's global
	// error handler).
	Errors *ErrorLimiter
	// Exporting lists the active exports, for a startup log line: "otlp traces (grpc) to ...".
	Exporting []string

	shutdownOnce sync.Once
	shutdownErr  error
	shutdowns    []func(context.Context) error
}

// Setup builds the telemetry cfg describes. It installs the W3C propagator and the rate-limited
// error handler as OpenTelemetry globals (the SDK reports export errors only through the global
// handler); the providers are not made global. On error, whatever was built is shut down.
func Setup(ctx context.Context, cfg Config) (_ *Telemetry, err error) {
	cfg = cfg.withDefaults()
	t := &Telemetry{
		Now:            cfg.Now,
		Registry:       prometheus.NewRegistry(),
		CaptureContent: cfg.CaptureContent,
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
	// others are the span processors after the ring, registered on the SDK provider and fed
	// the spans TracerProvider records itself as they end.
	var others []sdktrace.SpanProcessor
	withBatcher := func(exp sdktrace.SpanExporter) sdktrace.TracerProviderOption {
		bsp := sdktrace.NewBatchSpanProcessor(exp)
		others = append(others, bsp)
		return sdktrace.WithSpanProcessor(bsp)
	}
	tpOpts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(t.Resource),
		sdktrace.WithRawSpanLimits(cfg.SpanLimits),
		sdktrace.WithSpanProcessor(t.Ring),
	}
	sampler := cfg.Sampler
	if sampler == nil {
		var err error
		if sampler, err = samplerFromEnv(os.Getenv); err != nil {
			otel.Handle(err) // as the SDK does: the error is logged, the sampler falls back
		}
	}
	tpOpts = append(tpOpts, sdktrace.WithSampler(sampler))
	if cfg.TraceFile != "" {
		exp, err := newFileExporter(cfg.TraceFile)
		if err != nil {
			return nil, err
		}
		tpOpts = append(tpOpts, withBatcher(exp))
		t.Exporting = append(t.Exporting, "spans to "+cfg.TraceFile)
	}
	// The batcher's default queue (2048 spans) bounds memory while the collector is away; spans
	// past it are dropped, never waited for.
	switch {
	case cfg.TracesEndpoint != "":
		exp, err := newTraceExporter(ctx, cfg.TracesProtocol, cfg.TracesEndpoint)
		if err != nil {
			return nil, err
		}
		tpOpts = append(tpOpts, withBatcher(exp))
		t.Exporting = append(t.Exporting, fmt.Sprintf("otlp traces (%s) to %s", cfg.TracesProtocol, cfg.TracesEndpoint))
	case exportRequested(os.Getenv, "TRACES"):
		exp, desc, err := envSpanExporter(ctx)
		if err != nil {
			return nil, err
		}
		if exp != nil {
			tpOpts = append(tpOpts, withBatcher(exp))
			t.Exporting = append(t.Exporting, desc)
		}
	}
	others = append(others, cfg.SpanProcessors...)
	for _, sp := range cfg.SpanProcessors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(sp))
	}
	t.TracerProvider = newTracerProvider(sdktrace.NewTracerProvider(tpOpts...), sampler, t.Resource, cfg.SpanLimits, cfg.Now, t.Ring, others)
	t.shutdowns = append(t.shutdowns, t.TracerProvider.Shutdown)

	// ragtail's own instruments are aggregated by t.MeterProvider, which every reader takes as
	// its producer; it leaves them to the SDK when an exporter wants delta temporality or a
	// reader cannot take it.
	t.MeterProvider = newMeterProvider(!deltaPreferred(), cfg.Now)
	producer := sdkmetric.WithProducer(t.MeterProvider)
	promExp, err := otelprom.New(otelprom.WithRegisterer(t.Registry), otelprom.WithProducer(t.MeterProvider))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(t.Resource), sdkmetric.WithReader(promExp)}
	switch {
	case cfg.MetricsEndpoint != "":
		exp, err := newMetricExporter(ctx, cfg.MetricsProtocol, cfg.MetricsEndpoint)
		if err != nil {
			return nil, err
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.MetricsInterval), producer)))
		t.Exporting = append(t.Exporting, fmt.Sprintf("otlp metrics (%s) to %s every %v", cfg.MetricsProtocol, cfg.MetricsEndpoint, cfg.MetricsInterval))
	case exportRequested(os.Getenv, "METRICS"):
		reader, produced, desc, err := envMetricReader(ctx, producer)
		if err != nil {
			return nil, err
		}
		if reader != nil {
			mpOpts = append(mpOpts, sdkmetric.WithReader(reader))
			t.Exporting = append(t.Exporting, desc)
			t.MeterProvider.own = t.MeterProvider.own && produced
		}
	}
	t.MeterProvider.sdk = sdkmetric.NewMeterProvider(mpOpts...)
	t.shutdowns = append(t.shutdowns, t.MeterProvider.Shutdown)

	if err := t.Registry.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("go collector: %w", err)
	}
	if err := t.Registry.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("process collector: %w", err)
	}
	return t, nil
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

// envSpanExporter returns the span exporter the OTEL_* variables describe (nil for none) and a
// line saying what it is. contrib's autoexport builds it, except for an OTLP endpoint on port
// 4317 with no protocol set, which ragtail speaks gRPC to (see grpcByPort).
func envSpanExporter(ctx context.Context) (sdktrace.SpanExporter, string, error) {
	if grpcByPort(os.Getenv, "TRACES") {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("otlp trace exporter: %w", err)
		}
		return exp, "otlp traces (grpc, port 4317) to " + otlpEndpoint(os.Getenv, "TRACES"), nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("trace exporter (OTEL_TRACES_EXPORTER): %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return nil, "", nil
	}
	return exp, envExportLine("traces", "TRACES"), nil
}

// envMetricReader returns the metric reader the OTEL_* variables describe (nil for none), like
// envSpanExporter. OTEL_METRICS_EXPORTER=prometheus means the admin listener's /metrics, which is
// always on: autoexport would open a second server on the same port.
func envMetricReader(ctx context.Context, producer sdkmetric.ReaderOption) (_ sdkmetric.Reader, produced bool, desc string, _ error) {
	if strings.TrimSpace(os.Getenv("OTEL_METRICS_EXPORTER")) == "prometheus" {
		return nil, false, "", nil
	}
	// OTLP readers are built here, so that they take ragtail's aggregation as a producer; the
	// exporters and the reader read their OTEL_* settings themselves, as through autoexport.
	// Metric producers named in OTEL_METRICS_PRODUCERS are read by autoexport only, which then
	// builds the reader.
	exporter := strings.TrimSpace(os.Getenv("OTEL_METRICS_EXPORTER"))
	otlp := (exporter == "" || exporter == "otlp") && strings.TrimSpace(os.Getenv("OTEL_METRICS_PRODUCERS")) == ""
	var (
		exp sdkmetric.Exporter
		err error
	)
	switch {
	case grpcByPort(os.Getenv, "METRICS"):
		exp, err = otlpmetricgrpc.New(ctx)
		desc = "otlp metrics (grpc, port 4317) to " + otlpEndpoint(os.Getenv, "METRICS")
	case otlp && envProtocol("METRICS") == ProtocolGRPC:
		exp, err = otlpmetricgrpc.New(ctx)
		desc = envExportLine("metrics", "METRICS")
	case otlp && envProtocol("METRICS") == ProtocolHTTPProtobuf:
		exp, err = otlpmetrichttp.New(ctx)
		desc = envExportLine("metrics", "METRICS")
	}
	if err != nil {
		return nil, false, "", fmt.Errorf("otlp metric exporter: %w", err)
	}
	if exp != nil {
		return sdkmetric.NewPeriodicReader(exp, producer), true, desc, nil
	}
	r, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		return nil, false, "", fmt.Errorf("metric reader (OTEL_METRICS_EXPORTER): %w", err)
	}
	if autoexport.IsNoneMetricReader(r) {
		return nil, false, "", nil
	}
	return r, false, envExportLine("metrics", "METRICS"), nil
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
