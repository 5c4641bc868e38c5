package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// errorRecorder is an otel.ErrorHandler keeping what it is given.
type errorRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *errorRecorder) Handle(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *errorRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

// TestOversizedBaggageIsNoTelemetryError sends a baggage header over the W3C limit of 8 KB: the
// request is served, its baggage dropped, and nothing reaches OpenTelemetry's error handler,
// which ragtail logs as "telemetry export failing". It then checks that the propagator itself
// still reports such a header, once per process, so that the first half cannot pass for lack
// of a report. Not parallel: it replaces the global error handler.
func TestOversizedBaggageIsNoTelemetryError(t *testing.T) {
	rec := &errorRecorder{}
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(rec)
	defer otel.SetErrorHandler(prev)

	s := newTestService(t)
	big := "k=" + strings.Repeat("v", 9<<10)
	for _, header := range [][]string{{big}, {"a=1", big}, {"not baggage at all;;;"}} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, s.srv.URL+"/v1/models", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range header {
			req.Header.Add("Baggage", v)
		}
		resp, err := s.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /v1/models with baggage of %d values: %d", len(header), resp.StatusCode)
		}
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d errors reached the telemetry error handler: %v", n, rec.errs)
	}

	h := http.Header{}
	h.Set("Baggage", big)
	propagation.Baggage{}.Extract(context.Background(), propagation.HeaderCarrier(h))
	if rec.count() != 1 {
		t.Fatalf("the propagator reported %d errors for an oversized header; want 1 (has another test taken its one report?)", rec.count())
	}
}
