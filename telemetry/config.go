package telemetry

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
	// ServiceName is the service.name resource attribute; "" means OTEL_SERVICE_NAME, or
	// service.name in OTEL_RESOURCE_ATTRIBUTES, or else DefaultServiceName.
	ServiceName string
	// ServiceVersion is the service.version resource attribute; "" leaves it out.
	ServiceVersion string
	// ResourceAttributes are added to the resource, over OTEL_RESOURCE_ATTRIBUTES.
	ResourceAttributes []attribute.KeyValue
	// Sampler decides which traces are recorded; nil means the SDK's, from OTEL_TRACES_SAMPLER
	// and OTEL_TRACES_SAMPLER_ARG, parent-based always-on when they are unset, so that the ring
	// sees every request.
	Sampler sdktrace.Sampler

	// TracesEndpoint, when set, exports spans over OTLP to this URL (for http/protobuf the full
	// URL including /v1/traces; for grpc scheme://host:port, http meaning no TLS), whatever the
	// environment says. Unset, the OTEL_* variables decide (see FromEnv).
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

// FromEnv returns the Config of ragtail's own environment variables, read with getenv
// (os.Getenv in production): RAGTAIL_CAPTURE_CONTENT and
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT. The standard OTEL_* variables are read by
// the libraries that own them when Setup runs: the resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES), the sampler (OTEL_TRACES_SAMPLER, _ARG), span limits
// (OTEL_SPAN_*_LIMIT), propagators (OTEL_PROPAGATORS, contrib's autoprop), exporters
// (OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_*, contrib's autoexport),
// batching (OTEL_BSP_*) and the metric export interval (OTEL_METRIC_EXPORT_INTERVAL).
func FromEnv(getenv func(string) string) (Config, error) {
	var cfg Config
	for _, k := range []string{"RAGTAIL_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"} {
		v := strings.TrimSpace(getenv(k))
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

// exportRequested reports whether the environment asks for signal ("TRACES" or "METRICS") to be
// exported: OTEL_{signal}_EXPORTER names an exporter, or an OTLP endpoint is set. ragtail exports
// nothing unless asked (the SDK's own default, otlp to localhost, would fail forever on a laptop).
func exportRequested(getenv func(string) string, signal string) bool {
	return strings.TrimSpace(getenv("OTEL_"+signal+"_EXPORTER")) != "" || otlpEndpoint(getenv, signal) != ""
}

// otlpEndpoint returns the OTLP endpoint the environment sets for signal, the signal's own or
// the generic one.
func otlpEndpoint(getenv func(string) string, signal string) string {
	return cmp.Or(strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT")), strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")))
}

// grpcByPort reports whether signal should be exported over OTLP/gRPC although no protocol is
// set: ragtail's one addition to the specification's default (http/protobuf), for an endpoint on
// the OTLP/gRPC port 4317 with OTEL_{signal}_EXPORTER unset or otlp.
func grpcByPort(getenv func(string) string, signal string) bool {
	if exp := strings.TrimSpace(getenv("OTEL_" + signal + "_EXPORTER")); exp != "" && exp != "otlp" {
		return false
	}
	if getenv("OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL") != "" || getenv("OTEL_EXPORTER_OTLP_PROTOCOL") != "" {
		return false
	}
	u, err := url.Parse(withScheme(otlpEndpoint(getenv, signal)))
	return err == nil && u.Port() == "4317"
}

// withScheme prefixes an endpoint given as host:port with http://, as the exporters expect a URL.
func withScheme(endpoint string) string {
	if strings.Contains(endpoint, "://") {
		return endpoint
	}
	return "http://" + endpoint
}

func (c Config) withDefaults() Config {
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

// samplerFromEnv returns the sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name, read
// with getenv as the SDK reads them (its own reader is not exported, and TracerProvider samples
// with the sampler itself): always_on, always_off, traceidratio, parentbased_always_on (the
// default, also when the variable is unset), parentbased_always_off and parentbased_traceidratio,
// the ratio 1.0 when the argument is absent. An unknown sampler is an error with the default
// sampler; a bad ratio an error with the ratio 1.0.
func samplerFromEnv(getenv func(string) string) (sdktrace.Sampler, error) {
	def := sdktrace.ParentBased(sdktrace.AlwaysSample())
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		switch {
		case err != nil:
			return sdktrace.TraceIDRatioBased(1), fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: %w", arg, err)
		case v < 0 || v > 1:
			return sdktrace.TraceIDRatioBased(1), fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: the ratio must be within [0, 1]", arg)
		}
		return sdktrace.TraceIDRatioBased(v), nil
	}
	switch name {
	case "":
		return def, nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_always_on":
		return def, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		r, err := ratio()
		return sdktrace.ParentBased(r), err
	}
	return def, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: unsupported sampler (want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio)", name)
}
