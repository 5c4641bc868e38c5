package telemetry

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
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
		{name: "capture content", env: map[string]string{"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
			want: Config{CaptureContent: true}},
		{name: "capture content, ragtail's name", env: map[string]string{"RAGTAIL_CAPTURE_CONTENT": "1", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"},
			want: Config{CaptureContent: true}},
		{name: "bad capture", env: map[string]string{"RAGTAIL_CAPTURE_CONTENT": "sure"}, wantErr: "RAGTAIL_CAPTURE_CONTENT"},
		{name: "latest GenAI names", env: map[string]string{"OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental"},
			want: Config{GenAILatest: true}},
		{name: "other opt-ins", env: map[string]string{"OTEL_SEMCONV_STABILITY_OPT_IN": "http/dup,gen_ai_latest"}, want: Config{}},
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
			if got.CaptureContent != tt.want.CaptureContent || got.GenAILatest != tt.want.GenAILatest {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestSetupReadsTheEnvironment checks what Setup makes of the standard variables, which the SDK,
// autoexport and autoprop read: ragtail exports only when asked, speaks the protocol
// OTEL_EXPORTER_OTLP_PROTOCOL names (http/protobuf when unset, as the specification has it),
// leaves Prometheus to its own /metrics, bounds metric series as the SDK does, and takes the resource, sampler and
// propagators from the environment. Exporters point at loopback ports where nothing listens.
func TestSetupReadsTheEnvironment(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		exporting []string // substrings of Telemetry.Exporting, in order
		wantErr   string
		check     func(t *testing.T, tel *Telemetry)
	}{
		{name: "nothing set exports nothing"},
		{name: "grpc when the protocol says so", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			exporting: []string{"otlp traces (grpc) to http://127.0.0.1:4317", "otlp metrics (grpc)"}},
		{name: "http/protobuf by default, whatever the port", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"},
			exporting: []string{"otlp traces (http/protobuf) to http://127.0.0.1:4317", "otlp metrics (http/protobuf)"}},
		{name: "none turns a signal off", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
			exporting: []string{"otlp metrics"}},
		{name: "prometheus is the admin listener's", env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "bad exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "resource from the environment", env: map[string]string{"OTEL_SERVICE_NAME": "ragtail-eu", "OTEL_RESOURCE_ATTRIBUTES": "team=perf"},
			check: func(t *testing.T, tel *Telemetry) {
				set := tel.Resource.Set()
				if v, _ := set.Value(semconv.ServiceNameKey); v.AsString() != "ragtail-eu" {
					t.Errorf("service.name = %q, want ragtail-eu", v.AsString())
				}
				if v, _ := set.Value("team"); v.AsString() != "perf" {
					t.Errorf("team = %q, want perf", v.AsString())
				}
			}},
		{name: "default service name", check: func(t *testing.T, tel *Telemetry) {
			if v, _ := tel.Resource.Set().Value(semconv.ServiceNameKey); v.AsString() != DefaultServiceName {
				t.Errorf("service.name = %q, want %s", v.AsString(), DefaultServiceName)
			}
		}},
		{name: "sampler from the environment", env: map[string]string{"OTEL_TRACES_SAMPLER": "always_off"},
			check: func(t *testing.T, tel *Telemetry) {
				_, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "s")
				defer span.End()
				if span.IsRecording() {
					t.Error("always_off sampler recorded a span")
				}
			}},
		{name: "cardinality limit from the environment", env: map[string]string{"OTEL_GO_X_CARDINALITY_LIMIT": "3"},
			check: func(t *testing.T, tel *Telemetry) {
				c, err := tel.MeterProvider.Meter("t").Int64Counter("t.requests")
				if err != nil {
					t.Fatal(err)
				}
				for i := range 10 {
					c.Add(context.Background(), 1, metric.WithAttributes(attribute.Int("i", i)))
				}
				// Two series of their own, the other eight measurements in the overflow series.
				want := `
# HELP t_requests_total
# TYPE t_requests_total counter
t_requests_total{i="0",otel_scope_name="t",otel_scope_schema_url="",otel_scope_version=""} 1
t_requests_total{i="1",otel_scope_name="t",otel_scope_schema_url="",otel_scope_version=""} 1
t_requests_total{otel_metric_overflow="true",otel_scope_name="t",otel_scope_schema_url="",otel_scope_version=""} 8
`
				if err := testutil.GatherAndCompare(tel.Registry, strings.NewReader(want), "t_requests_total"); err != nil {
					t.Error(err)
				}
			}},
		{name: "propagators from the environment", env: map[string]string{"OTEL_PROPAGATORS": "b3"},
			check: func(t *testing.T, tel *Telemetry) {
				carrier := propagation.MapCarrier{"b3": "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"}
				ctx := tel.Propagator.Extract(context.Background(), carrier)
				out := propagation.MapCarrier{}
				tel.Propagator.Inject(ctx, out)
				if !strings.HasPrefix(out.Get("b3"), "80f198ee56343ba864fe8b2a57d3eff7") {
					t.Errorf("b3 propagator did not carry the trace: %v", out)
				}
			}},
	}
	vars := []string{"OTEL_GO_X_CARDINALITY_LIMIT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_PROPAGATORS",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range vars {
				t.Setenv(k, tt.env[k])
			}
			tel, err := Setup(context.Background(), Config{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = tel.Shutdown(ctx) // nothing listens on the exporters' ports
			}()
			if len(tel.Exporting) != len(tt.exporting) {
				t.Fatalf("exporting %q, want %d lines like %q", tel.Exporting, len(tt.exporting), tt.exporting)
			}
			for i, want := range tt.exporting {
				if !strings.Contains(tel.Exporting[i], want) {
					t.Errorf("exporting[%d] = %q, want it to mention %q", i, tel.Exporting[i], want)
				}
			}
			if tt.check != nil {
				tt.check(t, tel)
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
