package httpapi

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
)

// maxBaggageBytes is the W3C Baggage limit on a request's baggage headers taken together.
const maxBaggageBytes = 8192

// baggageGuard wraps the propagator that reads a request's trace context so that baggage the W3C
// rules refuse (over maxBaggageBytes or 64 members, or malformed) is dropped before the wrapped
// propagator sees it, as the rules say to. OpenTelemetry's baggage propagator reports such a
// header to the global error handler, which logs it as a failing telemetry export: a client's
// bad header is no export failure, and nothing the client sends should write the service's log.
type baggageGuard struct{ propagation.TextMapPropagator }

// Extract implements propagation.TextMapPropagator.
func (g baggageGuard) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	var vals []string
	if vg, ok := carrier.(propagation.ValuesGetter); ok {
		vals = vg.Values(baggageHeader)
	} else if v := carrier.Get(baggageHeader); v != "" {
		vals = []string{v}
	}
	if len(vals) > 0 && !validBaggage(vals) {
		carrier = withoutBaggage{carrier}
	}
	return g.TextMapPropagator.Extract(ctx, carrier)
}

const baggageHeader = "baggage"

// validBaggage reports whether the baggage header values vals, taken together, are baggage the
// W3C rules accept. It looks at no more than maxBaggageBytes of them.
func validBaggage(vals []string) bool {
	n := len(vals) - 1 // the commas joining them
	for _, v := range vals {
		if n += len(v); n > maxBaggageBytes {
			return false
		}
	}
	_, err := baggage.Parse(strings.Join(vals, ","))
	return err == nil
}

// withoutBaggage is a carrier that hides its baggage header. It implements
// propagation.ValuesGetter only to hide the header from it too.
type withoutBaggage struct{ c propagation.TextMapCarrier }

func (w withoutBaggage) Get(key string) string {
	if strings.EqualFold(key, baggageHeader) {
		return ""
	}
	return w.c.Get(key)
}

func (w withoutBaggage) Set(key, value string) { w.c.Set(key, value) }

func (w withoutBaggage) Keys() []string {
	keys := w.c.Keys()
	out := keys[:0:0]
	for _, k := range keys {
		if !strings.EqualFold(k, baggageHeader) {
			out = append(out, k)
		}
	}
	return out
}

func (w withoutBaggage) Values(key string) []string {
	if strings.EqualFold(key, baggageHeader) {
		return nil
	}
	if vg, ok := w.c.(propagation.ValuesGetter); ok {
		return vg.Values(key)
	}
	if v := w.c.Get(key); v != "" {
		return []string{v}
	}
	return nil
}

var (
	_ propagation.TextMapCarrier = withoutBaggage{}
	_ propagation.ValuesGetter   = withoutBaggage{}
)
