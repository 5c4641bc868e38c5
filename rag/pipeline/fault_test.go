package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// scriptedFaults injects a fixed decision at the stages it lists and records observations.
type scriptedFaults struct {
	at       map[rag.Stage]pipeline.FaultDecision
	abort    map[rag.Stage]error
	mu       sync.Mutex
	observed map[rag.Stage][]time.Duration
}

func (f *scriptedFaults) Inject(ctx context.Context, stage rag.Stage) (pipeline.FaultDecision, error) {
	dec := f.at[stage]
	if err := latency.Sleep(ctx, dec.Delay); err != nil {
		return dec, err
	}
	return dec, f.abort[stage]
}

func (f *scriptedFaults) Observe(stage rag.Stage, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.observed == nil {
		f.observed = map[rag.Stage][]time.Duration{}
	}
	f.observed[stage] = append(f.observed[stage], d)
}

func TestFaults(t *testing.T) {
	errAbort := errors.New("injected abort")
	tests := []struct {
		name      string
		faults    *scriptedFaults
		wantErr   error
		wantStage rag.Stage
		wantDelay time.Duration // the retrieve stage's least duration
		tokens    int           // deltas the sink must have received, -1 for any
	}{
		{
			name:      "delay at retrieve",
			faults:    &scriptedFaults{at: map[rag.Stage]pipeline.FaultDecision{rag.StageRetrieve: {Delay: 30 * time.Millisecond, Rules: []string{"slow"}}}},
			wantDelay: 30 * time.Millisecond,
			tokens:    5,
		},
		{
			name:      "abort at fetch",
			faults:    &scriptedFaults{at: map[rag.Stage]pipeline.FaultDecision{rag.StageFetch: {Rules: []string{"boom"}}}, abort: map[rag.Stage]error{rag.StageFetch: errAbort}},
			wantErr:   errAbort,
			wantStage: rag.StageFetch,
			tokens:    0,
		},
		{
			name:      "cut after two tokens",
			faults:    &scriptedFaults{at: map[rag.Stage]pipeline.FaultDecision{rag.StageGenerate: {Rules: []string{"cut"}, CutAfterTokens: 2}}},
			wantErr:   rag.ErrUnavailable,
			wantStage: rag.StageGenerate,
			tokens:    2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, sr := traced(t)
			b := zeroLatency(2)
			p := b.pipeline(t, pipeline.Config{}, pipeline.WithFaults(tt.faults), pipeline.WithTracerProvider(tp))
			sink := &recordingSink{}
			res, err := p.Run(context.Background(), query(rag.CouplingSync, 2), sink)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || rag.StageOf(err) != tt.wantStage {
					t.Fatalf("Run error %v (stage %q), want %v at %s", err, rag.StageOf(err), tt.wantErr, tt.wantStage)
				}
			}
			_, _, deltas := sink.snapshot()
			if len(deltas) != tt.tokens {
				t.Errorf("sink got %d deltas, want %d", len(deltas), tt.tokens)
			}
			if tt.wantDelay > 0 {
				if d := stageDuration(t, res, rag.StageRetrieve); d < tt.wantDelay {
					t.Errorf("retrieve took %v, want at least the injected %v", d, tt.wantDelay)
				}
				obs := tt.faults.observed[rag.StageRetrieve]
				if len(obs) != 1 || obs[0] >= tt.wantDelay {
					t.Errorf("observed retrieve latencies %v: want one, without the injected %v", obs, tt.wantDelay)
				}
				pipe := one(t, waitSpans(t, sr, 1), rag.SpanPipeline)
				v, _ := spanAttr(pipe, rag.AttrFaultInjectedMS)
				if got := v.AsFloat64(); got != 30 {
					t.Errorf("rag.fault.injected_ms = %v, want 30", got)
				}
			}
			var events int
			for _, s := range sr.Ended() {
				for _, ev := range s.Events() {
					if ev.Name == string(rag.EventFaultInjected) {
						events++
						if !hasAttr(ev.Attributes, rag.AttrFaultRule) {
							t.Errorf("fault event without %s", rag.AttrFaultRule)
						}
					}
				}
			}
			if events != 1 {
				t.Errorf("%d fault events on spans, want 1", events)
			}
		})
	}
}

func hasAttr(kvs []attribute.KeyValue, key attribute.Key) bool {
	for _, kv := range kvs {
		if kv.Key == key {
			return true
		}
	}
	return false
}
