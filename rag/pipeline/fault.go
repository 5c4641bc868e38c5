package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// FaultInjector injects latency and failures into the stages of a run (rag/fault implements it
// behind a small adapter, so the pipeline does not depend on the rule engine). The pipeline calls
// Inject once at the start of the admission, embed, retrieve, fetch and generate stages, inside
// the stage's span, and Observe with the stage's own latency (the injected delay taken out)
// when the stage ends. Implementations must be safe for concurrent use.
type FaultInjector interface {
	// Inject decides what to inject into one call of stage and waits the decided delay (or until
	// ctx is done). The error is the injected abort, or ctx's error if it ended during the wait.
	Inject(ctx context.Context, stage rag.Stage) (FaultDecision, error)
	// Observe records one latency of stage without injected delay, for rules relative to a
	// stage's baseline.
	Observe(stage rag.Stage, d time.Duration)
}

// FaultDecision is what a FaultInjector did to one stage call.
type FaultDecision struct {
	// Delay is the latency added.
	Delay time.Duration
	// Rules names the rules that fired, in order; empty if none did.
	Rules []string
	// CutAfterTokens, at the generate stage, ends the token stream with CutErr once that many
	// tokens have been delivered; 0 cuts nothing.
	CutAfterTokens int
	// CutErr is the error a cut stream ends with.
	CutErr error
}

// WithFaults injects faults into every run's stages with f (see FaultInjector): the delays show
// as an event on the stage's span, in rag.fault.injected_ms on the rag.pipeline span and in
// rag_fault_injected_total. Without it nothing is injected.
func WithFaults(f FaultInjector) Option {
	return optionFunc(func(o *options) { o.faults = f })
}

// inject applies the fault injector at the start of st, records what fired, and returns the
// decision and the injected abort.
func (r *run) inject(st *stage) (FaultDecision, error) {
	f := r.p.faults
	if f == nil {
		return FaultDecision{}, nil
	}
	dec, err := f.Inject(st.ctx, st.name)
	if dec.CutAfterTokens > 0 && dec.CutErr == nil {
		dec.CutErr = fmt.Errorf("%w: stream cut after %d tokens by a fault rule", rag.ErrUnavailable, dec.CutAfterTokens)
	}
	if len(dec.Rules) > 0 {
		r.faultInjected(st, dec)
	}
	return dec, err
}

// observe reports a stage's own latency (without the injected delay) to the fault injector.
func (r *run) observe(stage rag.Stage, took time.Duration, dec FaultDecision) {
	if r.p.faults == nil {
		return
	}
	r.p.faults.Observe(stage, max(took-dec.Delay, 0))
}
