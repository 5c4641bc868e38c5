package service

import (
	"context"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// faultHook adapts a fault.Injector to pipeline.FaultInjector. The pipeline serves one route, so
// stage rules restricted to a route see it.
type faultHook struct{ in *fault.Injector }

var _ pipeline.FaultInjector = faultHook{}

const chatRoute = "/v1/chat/completions"

// Inject implements pipeline.FaultInjector.
func (h faultHook) Inject(ctx context.Context, stage rag.Stage) (pipeline.FaultDecision, error) {
	d, err := h.in.Apply(ctx, stage, chatRoute)
	out := pipeline.FaultDecision{Delay: d.Delay, CutAfterTokens: d.CutAfterTokens, CutErr: d.CutError()}
	for _, f := range d.Fired {
		out.Rules = append(out.Rules, f.Rule)
	}
	return out, err
}

// Observe implements pipeline.FaultInjector.
func (h faultHook) Observe(stage rag.Stage, d time.Duration) { h.in.Observe(stage, d) }

var _ httpapi.RouteFaults = faultHook{}

// InjectRoute implements httpapi.RouteFaults: the rules with a route and no stage.
func (h faultHook) InjectRoute(ctx context.Context, route string) (httpapi.RouteDecision, error) {
	d, err := h.in.Apply(ctx, "", route)
	return httpapi.RouteDecision{Delay: d.Delay, CutAfterTokens: d.CutAfterTokens, CutErr: d.CutError()}, err
}

// ObserveRoute implements httpapi.RouteFaults.
func (h faultHook) ObserveRoute(route string, d time.Duration) { h.in.ObserveRoute(route, d) }

// cacheReporting lets the pipeline see how the doc store answered each lookup (cache hit, miss,
// or blocked by the Bloom guard), for rag_cache_requests_total and the rag.fetch span.
type cacheReporting struct{ *docstore.Store }

var _ pipeline.CacheReporter = cacheReporting{}

// LookupResult implements pipeline.CacheReporter.
func (c cacheReporting) LookupResult(ctx context.Context, id string) (rag.Chunk, rag.CacheResult, error) {
	return c.Lookup(ctx, id)
}
