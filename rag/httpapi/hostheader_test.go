package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ragtail/ragtail/rag/httpapi"
)

// hostTestService is the API with its HTTP server metrics exported in Prometheus's format, as
// the admin listener's /metrics serves them, under a cardinality limit, and its spans recorded.
type hostTestService struct {
	srv     *httptest.Server
	metrics http.Handler
	spans   *tracetest.SpanRecorder
}

func newHostTestService(tb testing.TB, cardinality int) *hostTestService {
	tb.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		tb.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithCardinalityLimit(cardinality))
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := newTestService(tb, httpapi.WithMeterProvider(mp), httpapi.WithTracerProvider(tp))
	return &hostTestService{srv: s.srv, metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), spans: sr}
}

// get sends GET /v1/models with the Host header host ("" keeps the server's address).
func (s *hostTestService) get(tb testing.TB, host string) {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, s.srv.URL+"/v1/models", nil)
	if err != nil {
		tb.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /v1/models with a %d-byte Host: status %d", len(host), resp.StatusCode)
	}
}

func (s *hostTestService) scrape(tb testing.TB) string {
	tb.Helper()
	rec := httptest.NewRecorder()
	s.metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// TestServerMetricsIgnoreHostHeader sends requests whose Host headers are long and all
// different: /metrics stays the size it had after one ordinary request (it grew to 320 MB
// after 100 requests with 60 KB hosts, the Host header being copied into server_address and
// server_port), and the server span does not take the header either.
func TestServerMetricsIgnoreHostHeader(t *testing.T) {
	t.Parallel()
	s := newHostTestService(t, 2000)
	s.get(t, "")
	before := len(s.scrape(t))
	const n = 20
	for i := range n {
		s.get(t, fmt.Sprintf("%s%d:%d", strings.Repeat("h", 60<<10), i, 1000+i))
	}
	page := s.scrape(t)
	// The counts and sums of one series grow by a few digits, nothing else.
	if len(page) > before+512 {
		t.Errorf("/metrics grew from %d to %d bytes after %d requests with 60 KB Host headers", before, len(page), n)
	}
	if strings.Contains(page, "hhhhhhhh") || strings.Contains(page, `server_port="10`) {
		t.Error("a metric label holds the request's Host header")
	}
	for _, sp := range s.spans.Ended() {
		for _, kv := range sp.Attributes() {
			if strings.Contains(kv.Value.String(), "hhhhhhhh") || kv.Key == "server.port" {
				t.Fatalf("span %q: %s holds the request's Host header (%d bytes)", sp.Name(), kv.Key, len(kv.Value.String()))
			}
		}
	}
}

// TestServerMetricsSurviveDistinctHosts sends more distinct Host headers than the cardinality
// limit allows series: the route's requests still land in the route's own series, not in the
// overflow series (they did, until a restart, once 2,000 hosts had filled the limit).
func TestServerMetricsSurviveDistinctHosts(t *testing.T) {
	t.Parallel()
	const limit = 50
	s := newHostTestService(t, limit)
	for i := range 2 * limit {
		s.get(t, fmt.Sprintf("host-%d.example:%d", i, 2000+i))
	}
	s.get(t, "")
	page := s.scrape(t)
	if strings.Contains(page, `otel_metric_overflow="true"`) {
		t.Error("requests landed in the overflow series")
	}
	var count string
	for line := range strings.SplitSeq(page, "\n") {
		if strings.HasPrefix(line, "http_server_request_duration_seconds_count{") && strings.Contains(line, `http_route="/v1/models"`) {
			if count != "" {
				t.Errorf("more than one series for the route: %s", line)
			}
			count = line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	if want := fmt.Sprint(2*limit + 1); count != want {
		t.Errorf("the route's series counts %q requests, want %s", count, want)
	}
}
