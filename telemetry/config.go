package telemetry

import (
	"cmp"
	"fmt"
	"log/slog"
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
	// Sampler decides which traces are recorded; nil leaves it to the SDK, which reads
	// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG and samples parent-based always-on when
	// they are unset, so that the ring sees every request.
	Sampler sdktrace.Sampler
	// CardinalityLimit bounds the series of each metric instrument (measurements past it go to
	// the otel.metric.overflow=true series); 0 leaves it to the SDK (OTEL_GO_X_CARDINALITY_LIMIT,
	// 2000 by default).
	CardinalityLimit int

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

	// GenAILatest replaces the GenAI names of semantic conventions v1.41 (the default) by those of
	// the latest conventions (OTEL_SEMCONV_STABILITY_OPT_IN containing gen_ai_latest_experimental).
	// Setup only carries it to Telemetry.GenAILatest, for the caller to pass to the pipeline.
	GenAILatest bool

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

// FromEnv returns the Config of the environment variables that no library reads for ragtail,
// read with getenv (os.Getenv in production): RAGTAIL_CAPTURE_CONTENT and
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (content capture), and
// OTEL_SEMCONV_STABILITY_OPT_IN (gen_ai_latest_experimental, the switch the GenAI conventions
// name for their latest names). The standard OTEL_* variables are read by
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
	cfg.GenAILatest = OptedIn(getenv("OTEL_SEMCONV_STABILITY_OPT_IN"), GenAILatestOptIn)
	return cfg, nil
}

// GenAILatestOptIn is the value of OTEL_SEMCONV_STABILITY_OPT_IN that switches to the GenAI
// conventions' latest names.
const GenAILatestOptIn = "gen_ai_latest_experimental"

// OptedIn reports whether the comma-separated OTEL_SEMCONV_STABILITY_OPT_IN value optIn holds
// name.
func OptedIn(optIn, name string) bool {
	for v := range strings.SplitSeq(optIn, ",") {
		if strings.TrimSpace(v) == name {
			return true
		}
	}
	return false
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

// prometheusRequested reports whether OTEL_METRICS_EXPORTER asks for Prometheus: that is the
// admin listener's /metrics, always on (autoexport would open a second server of its own).
func prometheusRequested(getenv func(string) string) bool {
	return strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER")) == "prometheus"
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
