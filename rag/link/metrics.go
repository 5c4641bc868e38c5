package link

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instrumentationName is the OTel scope of the links' metrics.
const instrumentationName = "github.com/ragtail/ragtail/rag/link"

// Attribute keys of the links' metrics; both take values from closed sets (link names are
// validated by New, directions are two).
const (
	AttrName      attribute.Key = "rag.link.name"
	AttrDirection attribute.Key = "rag.link.direction" // upstream (to the backend) or downstream
)

// Instrument registers the links' metrics with mp, read from stats at each collection:
// rag.link.connections (accepted), rag.link.connections.active, rag.link.dial_errors,
// rag.link.io (bytes, by direction) and rag.link.latency (the configured latency toxic, in
// seconds). In Prometheus: rag_link_connections_total, rag_link_connections_active,
// rag_link_dial_errors_total, rag_link_io_bytes_total, rag_link_latency_seconds. links returns
// the links to report; it may return a different set each time, as links come and go.
// Unregister the returned registration to stop.
func Instrument(mp metric.MeterProvider, links func() []*Link) (metric.Registration, error) {
	m := mp.Meter(instrumentationName)
	conns, err1 := m.Int64ObservableCounter("rag.link.connections", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections a network link accepted."))
	active, err2 := m.Int64ObservableUpDownCounter("rag.link.connections.active", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections open through a network link now."))
	dialErrs, err3 := m.Int64ObservableCounter("rag.link.dial_errors", metric.WithUnit("{connection}"),
		metric.WithDescription("Accepted connections whose backend the link could not reach."))
	io, err4 := m.Int64ObservableCounter("rag.link.io", metric.WithUnit("By"),
		metric.WithDescription("Bytes carried by a network link, by direction: upstream (to the backend) or downstream."))
	lat, err5 := m.Float64ObservableGauge("rag.link.latency", metric.WithUnit("s"),
		metric.WithDescription("Latency a network link adds to each round trip (its latency toxic)."))
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			return nil, err
		}
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, l := range links() {
			st := l.Stats()
			name := metric.WithAttributes(AttrName.String(st.Name))
			o.ObserveInt64(conns, int64(st.Connections), name)
			o.ObserveInt64(active, st.Active, name)
			o.ObserveInt64(dialErrs, int64(st.DialErrors), name)
			o.ObserveInt64(io, int64(st.BytesUpstream), metric.WithAttributes(AttrName.String(st.Name), AttrDirection.String("upstream")))
			o.ObserveInt64(io, int64(st.BytesDownstream), metric.WithAttributes(AttrName.String(st.Name), AttrDirection.String("downstream")))
			o.ObserveFloat64(lat, l.Spec().Latency.Seconds(), name)
		}
		return nil
	}, conns, active, dialErrs, io, lat)
}
