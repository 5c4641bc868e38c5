package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
)

// TestBaggageGuard reads baggage through the guard: what the W3C rules accept passes whole,
// what they refuse is dropped, the trace context beside it is read either way.
func TestBaggageGuard(t *testing.T) {
	t.Parallel()
	g := baggageGuard{propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name    string
		values  []string
		members int
	}{
		{"one member", []string{"tenant=acme"}, 1},
		{"two headers", []string{"tenant=acme", "tier=gold"}, 2},
		{"at the limit", []string{"k=" + strings.Repeat("v", maxBaggageBytes-2)}, 1},
		{"past the limit", []string{"k=" + strings.Repeat("v", maxBaggageBytes-1)}, 0},
		{"past the limit in two", []string{"a=1", "k=" + strings.Repeat("v", maxBaggageBytes-4)}, 0},
		{"malformed", []string{"no equals sign"}, 0},
		{"64 members", []string{members(64)}, 64},
		{"65 members", []string{members(65)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			h.Set("Traceparent", parent)
			for _, v := range tt.values {
				h.Add("Baggage", v)
			}
			ctx := g.Extract(context.Background(), propagation.HeaderCarrier(h))
			if n := baggage.FromContext(ctx).Len(); n != tt.members {
				t.Errorf("%d members, want %d", n, tt.members)
			}
			out := http.Header{}
			g.Inject(ctx, propagation.HeaderCarrier(out))
			if !strings.Contains(out.Get("Traceparent"), "4bf92f3577b34da6a3ce929d0e0e4736") {
				t.Errorf("trace context lost: %q", out.Get("Traceparent"))
			}
		})
	}
}

// members is baggage of n distinct members.
func members(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "k%d=v", i)
	}
	return b.String()
}
