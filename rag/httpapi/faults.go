package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/ragtail/ragtail/rag/openai"
)

// RouteFaults injects faults into whole API routes: fault rules with a route and no stage
// (rag/fault implements it behind the service's adapter, so this package does not depend on the
// rule engine). Implementations must be safe for concurrent use.
type RouteFaults interface {
	// InjectRoute decides what to inject into one request on route (the route's pattern, such
	// as "/v1/documents/*") and waits the decided delay, or until ctx is done. The error is the
	// injected abort, answered as is, or ctx's error.
	InjectRoute(ctx context.Context, route string) (RouteDecision, error)
	// ObserveRoute records one latency of route without the injected delay, for rules
	// relative to the route's baseline.
	ObserveRoute(route string, d time.Duration)
}

// RouteDecision is what a RouteFaults did to one request.
type RouteDecision struct {
	// Delay is the latency added before the handler ran.
	Delay time.Duration
	// CutAfterTokens, on /v1/chat/completions, ends the answer with CutErr once that many
	// tokens have been written (a streamed answer ends with an error event, a whole one with
	// the error); 0 cuts nothing.
	CutAfterTokens int
	CutErr         error
}

// WithRouteFaults applies f to every API route except the health checks.
func WithRouteFaults(f RouteFaults) Option {
	return optionFunc(func(c *config) { c.faults = f })
}

type routeDecisionKey struct{}

// routeCut returns the stream cut the route's fault rules decided for the request in ctx.
func routeCut(ctx context.Context) RouteDecision {
	d, _ := ctx.Value(routeDecisionKey{}).(RouteDecision)
	return d
}

// faulty wraps h, served on pattern, with the route's fault rules. route is the pattern as
// fault rules write it ("/v1/documents/*").
func (a *API) faulty(route string, h http.HandlerFunc) http.HandlerFunc {
	f := a.cfg.faults
	if f == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := a.cfg.now()
		dec, err := f.InjectRoute(r.Context(), route)
		if err != nil {
			if r.Context().Err() == nil {
				openai.WriteError(w, err)
			}
			return
		}
		if dec.CutAfterTokens > 0 {
			r = r.WithContext(context.WithValue(r.Context(), routeDecisionKey{}, dec))
		}
		h(w, r)
		f.ObserveRoute(route, max(a.cfg.now().Sub(start)-dec.Delay, 0))
	}
}
