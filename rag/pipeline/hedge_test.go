package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// A shard search still unanswered at HedgeAfter goes out a second time: the second, fast one
// answers, the first is cancelled, and the Query span says it was hedged. A search that answers
// before HedgeAfter is sent once.
func TestHedgedSearch(t *testing.T) {
	const slow = 5 * time.Second
	for _, coupling := range rag.Couplings {
		t.Run(string(coupling), func(t *testing.T) {
			done := checkNoLeak(t)
			defer done()
			tp, sr := traced(t)
			b := zeroLatency(1)
			b.ret.delayOf = func(call int32, _ int) time.Duration {
				if call == 1 {
					return slow
				}
				return time.Millisecond
			}
			p := b.pipeline(t, pipeline.Config{HedgeAfter: 20 * time.Millisecond, AsyncDeadline: time.Minute}, pipeline.WithTracerProvider(tp))
			start := time.Now()
			if _, err := p.Run(context.Background(), query(coupling, 0), nil); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d >= slow {
				t.Fatalf("Run took %v: the hedge did not answer", d)
			}
			if calls, cancelled := b.ret.calls.Load(), b.ret.cancelled.Load(); calls != 2 || cancelled != 1 {
				t.Fatalf("%d searches, %d cancelled; want 2 and the slow one", calls, cancelled)
			}
			q := one(t, waitSpans(t, sr, 1), "Query test")
			if v, ok := spanAttr(q, rag.AttrShardHedged); !ok || !v.AsBool() {
				t.Errorf("Query span without %s=true: %v", rag.AttrShardHedged, q.Attributes())
			}

			b.ret.calls.Store(0)
			b.ret.delayOf = nil
			if _, err := p.Run(context.Background(), query(coupling, 0), nil); err != nil {
				t.Fatal(err)
			}
			if calls := b.ret.calls.Load(); calls != 1 {
				t.Errorf("a search answering at once was sent %d times", calls)
			}
		})
	}
}

// A first request that fails waits for the hedge, whose answer is used.
func TestHedgeOutlivesAFailure(t *testing.T) {
	b := zeroLatency(1)
	b.ret.delayOf = func(call int32, _ int) time.Duration {
		if call == 1 {
			return 40 * time.Millisecond
		}
		return 60 * time.Millisecond
	}
	fail := &failFirst{fakeRetriever: b.ret}
	p, err := pipeline.New(b.emb, fail, b.docs, b.gen, pipeline.Config{HedgeAfter: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background(), query(rag.CouplingSync, 0), nil); err != nil {
		t.Fatalf("Run: %v; the hedge's answer should have been used", err)
	}
	if _, err := pipeline.New(b.emb, b.ret, b.docs, b.gen, pipeline.Config{HedgeAfter: -time.Second}); err == nil {
		t.Error("a negative HedgeAfter was accepted")
	}
}

// failFirst fails the first search it is asked for, after its delay.
type failFirst struct {
	*fakeRetriever
	n atomic.Int32
}

func (f *failFirst) Search(ctx context.Context, shard int, vec []float32, k int) ([]rag.Hit, error) {
	first := f.n.Add(1) == 1
	hits, err := f.fakeRetriever.Search(ctx, shard, vec, k)
	if first && err == nil {
		return nil, errors.New("replica down")
	}
	return hits, err
}
