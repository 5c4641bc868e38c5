package telemetry_test

import (
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ragtail/ragtail/telemetry"
)

// otlpMetricsSink is an OTLP/HTTP metrics receiver that keeps, per metric name, the scope it
// came in and whether its data was cumulative.
type otlpMetricsSink struct {
	mu         sync.Mutex
	scopes     map[string]string
	cumulative map[string]bool
}

func newOTLPMetricsSink(t *testing.T) (*otlpMetricsSink, *httptest.Server) {
	t.Helper()
	sink := &otlpMetricsSink{scopes: map[string]string{}, cumulative: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req collectormetrics.ExportMetricsServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sink.mu.Lock()
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					sink.scopes[m.GetName()] = sm.GetScope().GetName()
					var temporality metricspb.AggregationTemporality
					switch d := m.GetData().(type) {
					case *metricspb.Metric_Histogram:
						temporality = d.Histogram.GetAggregationTemporality()
					case *metricspb.Metric_Sum:
						temporality = d.Sum.GetAggregationTemporality()
					}
					sink.cumulative[m.GetName()] = temporality == metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
				}
			}
		}
		sink.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(srv.Close)
	return sink, srv
}

// TestOTLPMetricsCarryRagtailsInstruments exports metrics over OTLP/HTTP, configured by
// Config.MetricsEndpoint and by the environment, and checks that the receiver gets both ragtail's
// own instruments and a library scope's; and that with delta temporality asked for
// (OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, read by the SDK's exporter), they arrive as
// delta.
func TestOTLPMetricsCarryRagtailsInstruments(t *testing.T) {
	for _, tc := range []struct {
		name       string
		env        bool
		delta      bool
		cumulative bool
	}{
		{name: "config", cumulative: true},
		{name: "environment", env: true, cumulative: true},
		{name: "environment, delta", env: true, delta: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink, srv := newOTLPMetricsSink(t)
			cfg := telemetry.Config{Logger: slog.New(slog.DiscardHandler)}
			if tc.env {
				t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", srv.URL+"/v1/metrics")
				t.Setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
			} else {
				cfg.MetricsEndpoint = srv.URL + "/v1/metrics"
				cfg.MetricsProtocol = telemetry.ProtocolHTTPProtobuf
			}
			if tc.delta {
				t.Setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta")
			}
			tel, err := telemetry.Setup(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(context.Background()) }()

			ownScope := "github.com/ragtail/ragtail/rag/pipeline"
			h, err := tel.MeterProvider.Meter(ownScope).Float64Histogram("rag.stage.duration")
			if err != nil {
				t.Fatal(err)
			}
			h.Record(context.Background(), 0.25)
			c, err := tel.MeterProvider.Meter("example.com/library").Int64Counter("library.requests")
			if err != nil {
				t.Fatal(err)
			}
			c.Add(context.Background(), 1)
			if err := tel.MeterProvider.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}

			sink.mu.Lock()
			defer sink.mu.Unlock()
			for name, scope := range map[string]string{"rag.stage.duration": ownScope, "library.requests": "example.com/library"} {
				got, ok := sink.scopes[name]
				if !ok {
					t.Errorf("%s never reached the receiver (got %v)", name, sink.scopes)
					continue
				}
				if got != scope {
					t.Errorf("%s came in scope %q, want %q", name, got, scope)
				}
				if sink.cumulative[name] != tc.cumulative {
					t.Errorf("%s: cumulative %v, want %v", name, sink.cumulative[name], tc.cumulative)
				}
			}
		})
	}
}
