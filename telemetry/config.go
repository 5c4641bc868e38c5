package telemetry

import (
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// OTLP protocols, the values of OTEL_EXPORTER_OTLP_PROTOCOL that ragtail supports.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Defaults filled in for zero Config fields.
const (
	DefaultServiceName     = "ragtail"
	DefaultRingRecent      = 512
	DefaultRingSlowest     = 64
	DefaultRingMaxSpans    = 256
	DefaultRingPending     = 2048
	DefaultErrorLogEvery   = time.Minute
	DefaultMetricsInterval = 60 * time.Second
	// DefaultAttributeValueLength is the longest string attribute value a span keeps, in bytes:
	// longer values (a captured prompt, a header a client filled) are cut by the SDK. It bounds
	// what the trace ring can hold: RingMaxSpans spans per trace, each with at most
	// DefaultSpanLimits().AttributeCountLimit attributes.
	DefaultAttributeValueLength = 4096
)

// DefaultSpanLimits returns the span limits Setup uses when Config.SpanLimits is zero: the
// SDK's defaults and OTEL_SPAN_*_LIMIT variables (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, ...), except
// that attribute values are cut to DefaultAttributeValueLength unless a variable says otherwise
// (the SDK's own default keeps them whole).
func DefaultSpanLimits() sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	if l.AttributeValueLengthLimit == sdktrace.DefaultAttributeValueLengthLimit {
		l.AttributeValueLengthLimit = DefaultAttributeValueLength
	}
	return l
}

// Config says what Setup builds. The zero value is a working in-process setup: every trace
// sampled into the in-process ring, metrics on the Prometheus registry, nothing exported.
// FromEnv fills it from the standard OTEL_* variables.
type Config struct {
	// ServiceName is the service.name resource attribute; "" means DefaultServiceName.
	ServiceName string
	// ServiceVersion is the service.version resource attribute; "" leaves it out.
	ServiceVersion string
	// ResourceAttributes are added to the resource (OTEL_RESOURCE_ATTRIBUTES).
	ResourceAttributes []attribute.KeyValue
	// Sampler decides which traces are recorded; nil means parent-based always-on, so that the
	// ring sees every request. Set from OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
	Sampler sdktrace.Sampler

	// TracesEndpoint, when set, exports spans over OTLP to this URL (for http/protobuf the full
	// URL including /v1/traces; for grpc scheme://host:port, http meaning no TLS).
	TracesEndpoint string
	// TracesProtocol is ProtocolGRPC or ProtocolHTTPProtobuf; "" means http/protobuf.
	TracesProtocol string
	// MetricsEndpoint, when set, exports metrics over OTLP to this URL, like TracesEndpoint.
	MetricsEndpoint string
	// MetricsProtocol is like TracesProtocol.
	MetricsProtocol string
	// MetricsInterval is the OTLP metrics export interval; 0 means DefaultMetricsInterval
	// (OTEL_METRIC_EXPORT_INTERVAL).
	MetricsInterval time.Duration

	// TraceFile, when set, appends every span as one JSON object per line to this file.
	TraceFile string

	// RingRecent, RingSlowest and RingMaxSpans size the in-process trace ring: the recent traces
	// kept, the slowest traces kept apart from them, and the spans kept per trace. Zero means
	// the Default values.
	RingRecent, RingSlowest, RingMaxSpans int

	// CaptureContent lets the pipeline record prompt and answer text on spans
	// (RAGTAIL_CAPTURE_CONTENT or OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT). Setup only
	// carries it to Telemetry.CaptureContent, for the caller to pass to the pipeline.
	CaptureContent bool

	// SpanLimits bound what one span keeps (attribute count and value length, events, links);
	// the zero value means DefaultSpanLimits().
	SpanLimits sdktrace.SpanLimits

	// SpanProcessors are added to the tracer provider after the ring (tests use
	// tracetest.SpanRecorder).
	SpanProcessors []sdktrace.SpanProcessor

	// Now is the clock every part of the service reads; nil means NewClock().
	Now func() time.Time
	// Logger receives the telemetry's own problems (export failures, rate limited); nil
	// discards them.
	Logger *slog.Logger
	// ErrorLogEvery is the least time between two log lines about export failures; 0 means
	// DefaultErrorLogEvery.
	ErrorLogEvery time.Duration
}

// FromEnv returns the Config the standard OpenTelemetry environment variables describe, read
// with getenv (os.Getenv in production). It honours:
//
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG
//	OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER (otlp or none)
//	OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT
//	OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_METRICS_PROTOCOL
//	OTEL_METRIC_EXPORT_INTERVAL
//	RAGTAIL_CAPTURE_CONTENT, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
//
// When no protocol is set, an endpoint on port 4317 (the OTLP/gRPC port) is spoken to in gRPC and
// any other in http/protobuf, the specification's default. The exporters read the remaining
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates, compression) themselves, and
// the batch span processor the OTEL_BSP_* ones.
func FromEnv(getenv func(string) string) (Config, error) {
	var cfg Config
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }

	attrs, err := parseResourceAttributes(env("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return cfg, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	for _, kv := range attrs {
		if kv.Key == semconv.ServiceNameKey {
			cfg.ServiceName = kv.Value.AsString()
			continue
		}
		cfg.ResourceAttributes = append(cfg.ResourceAttributes, kv)
	}
	if name := env("OTEL_SERVICE_NAME"); name != "" {
		cfg.ServiceName = name
	}

	if cfg.Sampler, err = ParseSampler(env("OTEL_TRACES_SAMPLER"), env("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		return cfg, err
	}

	for _, sig := range []struct {
		name, exporterVar, suffix string
		endpoint, protocol        *string
	}{
		{"TRACES", "OTEL_TRACES_EXPORTER", "/v1/traces", &cfg.TracesEndpoint, &cfg.TracesProtocol},
		{"METRICS", "OTEL_METRICS_EXPORTER", "/v1/metrics", &cfg.MetricsEndpoint, &cfg.MetricsProtocol},
	} {
		switch exp := strings.ToLower(env(sig.exporterVar)); exp {
		case "", "otlp":
		case "none":
			continue
		default:
			return cfg, fmt.Errorf("%s=%q: ragtail exports only otlp (or none)", sig.exporterVar, exp)
		}
		specific := env("OTEL_EXPORTER_OTLP_" + sig.name + "_ENDPOINT")
		generic := env("OTEL_EXPORTER_OTLP_ENDPOINT")
		if specific == "" && generic == "" {
			continue
		}
		protocol := env("OTEL_EXPORTER_OTLP_" + sig.name + "_PROTOCOL")
		if protocol == "" {
			protocol = env("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		endpoint := specific
		if endpoint == "" {
			endpoint = generic
		}
		endpoint = withScheme(endpoint)
		if protocol == "" {
			protocol = inferProtocol(endpoint)
		}
		switch protocol {
		case ProtocolGRPC:
		case ProtocolHTTPProtobuf:
			if specific == "" {
				// The generic endpoint is a base URL; each signal has its own path under it.
				endpoint = strings.TrimSuffix(endpoint, "/") + sig.suffix
			}
		default:
			return cfg, fmt.Errorf("OTLP protocol %q for %s: want grpc or http/protobuf", protocol, strings.ToLower(sig.name))
		}
		if _, err := url.Parse(endpoint); err != nil {
			return cfg, fmt.Errorf("OTLP %s endpoint: %w", strings.ToLower(sig.name), err)
		}
		*sig.endpoint, *sig.protocol = endpoint, protocol
	}

	if v := env("OTEL_METRIC_EXPORT_INTERVAL"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			return cfg, fmt.Errorf("OTEL_METRIC_EXPORT_INTERVAL=%q: want a positive number of milliseconds", v)
		}
		cfg.MetricsInterval = time.Duration(ms) * time.Millisecond
	}

	for _, k := range []string{"RAGTAIL_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"} {
		v := env(k)
		if v == "" {
			continue
		}
		on, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("%s=%q: want true or false", k, v)
		}
		cfg.CaptureContent = cfg.CaptureContent || on
	}
	return cfg, nil
}

// withScheme prefixes an endpoint given as host:port with http://, as the exporters expect a URL.
func withScheme(endpoint string) string {
	if strings.Contains(endpoint, "://") {
		return endpoint
	}
	return "http://" + endpoint
}

// inferProtocol returns grpc for an endpoint on the OTLP/gRPC port 4317, else http/protobuf.
func inferProtocol(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Port() == "4317" {
		return ProtocolGRPC
	}
	return ProtocolHTTPProtobuf
}

// ParseSampler returns the sampler OTEL_TRACES_SAMPLER=name and OTEL_TRACES_SAMPLER_ARG=arg
// describe: always_on, always_off, traceidratio, parentbased_always_on (the default, also for
// an empty name), parentbased_always_off, parentbased_traceidratio. The ratio defaults to 1.
func ParseSampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg != "" && strings.HasSuffix(name, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio between 0 and 1", arg)
		}
		ratio = r
	}
	switch strings.ToLower(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// parseResourceAttributes parses OTEL_RESOURCE_ATTRIBUTES: key=value pairs separated by commas,
// values percent-encoded.
func parseResourceAttributes(s string) ([]attribute.KeyValue, error) {
	if s == "" {
		return nil, nil
	}
	var out []attribute.KeyValue
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", pair)
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("value of %s: %w", k, err)
		}
		out = append(out, attribute.String(k, val))
	}
	return out, nil
}

func (c Config) withDefaults() Config {
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if c.Sampler == nil {
		c.Sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	if c.MetricsInterval <= 0 {
		c.MetricsInterval = DefaultMetricsInterval
	}
	if c.RingRecent <= 0 {
		c.RingRecent = DefaultRingRecent
	}
	if c.RingSlowest <= 0 {
		c.RingSlowest = DefaultRingSlowest
	}
	if c.RingMaxSpans <= 0 {
		c.RingMaxSpans = DefaultRingMaxSpans
	}
	if c.SpanLimits == (sdktrace.SpanLimits{}) {
		c.SpanLimits = DefaultSpanLimits()
	}
	if c.Now == nil {
		c.Now = NewClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ErrorLogEvery <= 0 {
		c.ErrorLogEvery = DefaultErrorLogEvery
	}
	if c.TracesProtocol == "" {
		c.TracesProtocol = ProtocolHTTPProtobuf
	}
	if c.MetricsProtocol == "" {
		c.MetricsProtocol = ProtocolHTTPProtobuf
	}
	return c
}
