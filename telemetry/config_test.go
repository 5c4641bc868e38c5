package telemetry

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{name: "nothing set", env: nil, want: Config{}},
		{name: "generic http endpoint gets signal paths",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
			want: Config{TracesEndpoint: "http://collector:4318/v1/traces", TracesProtocol: ProtocolHTTPProtobuf,
				MetricsEndpoint: "http://collector:4318/v1/metrics", MetricsProtocol: ProtocolHTTPProtobuf}},
		{name: "port 4317 means grpc",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "jaeger:4317"},
			want: Config{TracesEndpoint: "http://jaeger:4317", TracesProtocol: ProtocolGRPC,
				MetricsEndpoint: "http://jaeger:4317", MetricsProtocol: ProtocolGRPC}},
		{name: "explicit protocol wins over the port",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			want: Config{TracesEndpoint: "http://c:4317/v1/traces", TracesProtocol: ProtocolHTTPProtobuf,
				MetricsEndpoint: "http://c:4317/v1/metrics", MetricsProtocol: ProtocolHTTPProtobuf}},
		{name: "signal endpoint used as is, metrics off",
			env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://t.example/custom", "OTEL_METRICS_EXPORTER": "none",
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: Config{TracesEndpoint: "https://t.example/custom", TracesProtocol: ProtocolHTTPProtobuf}},
		{name: "signal protocol",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_TRACES_EXPORTER": "otlp"},
			want: Config{TracesEndpoint: "http://c:4318", TracesProtocol: ProtocolGRPC,
				MetricsEndpoint: "http://c:4318/v1/metrics", MetricsProtocol: ProtocolHTTPProtobuf}},
		{name: "service name and resource attributes",
			env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,deployment.environment.name=lab%201, team=perf",
				"OTEL_SERVICE_NAME": "ragtail-eu"},
			want: Config{ServiceName: "ragtail-eu", ResourceAttributes: []attribute.KeyValue{
				attribute.String("deployment.environment.name", "lab 1"), attribute.String("team", "perf")}}},
		{name: "service name from resource attributes",
			env:  map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs"},
			want: Config{ServiceName: "from-attrs"}},
		{name: "capture content", env: map[string]string{"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
			want: Config{CaptureContent: true}},
		{name: "capture content, ragtail's name", env: map[string]string{"RAGTAIL_CAPTURE_CONTENT": "1", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"},
			want: Config{CaptureContent: true}},
		{name: "metric interval", env: map[string]string{"OTEL_METRIC_EXPORT_INTERVAL": "5000"},
			want: Config{MetricsInterval: 5 * time.Second}},
		{name: "bad capture", env: map[string]string{"RAGTAIL_CAPTURE_CONTENT": "sure"}, wantErr: "RAGTAIL_CAPTURE_CONTENT"},
		{name: "bad protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: "http/json"},
		{name: "bad exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "zipkin"},
		{name: "bad resource attributes", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "novalue"}, wantErr: "OTEL_RESOURCE_ATTRIBUTES"},
		{name: "bad interval", env: map[string]string{"OTEL_METRIC_EXPORT_INTERVAL": "-1"}, wantErr: "OTEL_METRIC_EXPORT_INTERVAL"},
		{name: "bad sampler", env: map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, wantErr: "OTEL_TRACES_SAMPLER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(envOf(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Sampler == nil {
				t.Error("no sampler")
			}
			got.Sampler = nil
			if got.ServiceName != tt.want.ServiceName || got.TracesEndpoint != tt.want.TracesEndpoint ||
				got.TracesProtocol != tt.want.TracesProtocol || got.MetricsEndpoint != tt.want.MetricsEndpoint ||
				got.MetricsProtocol != tt.want.MetricsProtocol || got.CaptureContent != tt.want.CaptureContent ||
				got.MetricsInterval != tt.want.MetricsInterval || len(got.ResourceAttributes) != len(tt.want.ResourceAttributes) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
			for i, kv := range tt.want.ResourceAttributes {
				if got.ResourceAttributes[i] != kv {
					t.Errorf("resource attribute %d = %v, want %v", i, got.ResourceAttributes[i], kv)
				}
			}
		})
	}
}

func TestParseSampler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, arg string
		want      string // the sampler's Description
		wantErr   bool
	}{
		{"", "", sdktrace.ParentBased(sdktrace.AlwaysSample()).Description(), false},
		{"always_on", "", sdktrace.AlwaysSample().Description(), false},
		{"always_off", "", sdktrace.NeverSample().Description(), false},
		{"traceidratio", "0.25", sdktrace.TraceIDRatioBased(0.25).Description(), false},
		{"traceidratio", "", sdktrace.TraceIDRatioBased(1).Description(), false},
		{"parentbased_traceidratio", "0.5", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5)).Description(), false},
		{"parentbased_always_off", "", sdktrace.ParentBased(sdktrace.NeverSample()).Description(), false},
		{"traceidratio", "1.5", "", true},
		{"traceidratio", "half", "", true},
		{"xray", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.arg, func(t *testing.T) {
			s, err := ParseSampler(tt.name, tt.arg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && s.Description() != tt.want {
				t.Errorf("sampler %s, want %s", s.Description(), tt.want)
			}
		})
	}
}

func TestErrorLimiter(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	h := NewErrorLimiter(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute, clock)
	for i := range 1000 { // a storm within one minute
		now = now.Add(time.Millisecond)
		h.Handle(errBoom{i})
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d log lines for 1000 errors in a second, want 1:\n%s", n, buf.String())
	}
	now = now.Add(time.Minute)
	h.Handle(errBoom{1000})
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, "suppressed_since_last_report=999") {
		t.Errorf("after the interval, want a second line counting the 999 suppressed errors:\n%s", out)
	}
	if h.Errors() != 1001 {
		t.Errorf("Errors() = %d, want 1001", h.Errors())
	}
	h.Handle(nil)
	if h.Errors() != 1001 {
		t.Error("a nil error was counted")
	}
}

type errBoom struct{ i int }

func (e errBoom) Error() string { return "export failed" }

// syncBuffer is a strings.Builder safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
