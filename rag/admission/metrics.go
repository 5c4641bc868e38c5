package admission

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// instrumentationName is the OTel scope of the pool's metrics.
const instrumentationName = "github.com/ragtail/ragtail/rag/admission"

// Instrument registers the pool's metrics with mp, read from Stats at each collection:
// rag.admission.limit (requests that may run at once now: the adaptive limit when it is on,
// else the workers) and rag.admission.slowdown (the mean slowdown of the last window of
// requests the adaptive limit saw, their latency over their unloaded latency). In Prometheus:
// rag_admission_limit and rag_admission_slowdown_ratio. (The pipeline records the queue wait and the
// rejections, rag_admission_queue_wait_seconds and rag_admission_rejected_total.) Unregister
// the returned registration to stop.
func Instrument(mp metric.MeterProvider, p *Pool) (metric.Registration, error) {
	m := mp.Meter(instrumentationName)
	limit, err := m.Int64ObservableGauge("rag.admission.limit", metric.WithUnit("{request}"),
		metric.WithDescription("Requests the admission pool lets run at once now: the adaptive concurrency limit when it is on, else the workers."))
	if err != nil {
		return nil, err
	}
	slowdown, err := m.Float64ObservableGauge("rag.admission.slowdown", metric.WithUnit("1"),
		metric.WithDescription("Mean slowdown (latency over unloaded latency) of the last window of requests the adaptive concurrency limit saw."))
	if err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := p.Stats()
		o.ObserveInt64(limit, int64(st.Limit))
		o.ObserveFloat64(slowdown, st.Slowdown)
		return nil
	}, limit, slowdown)
}
