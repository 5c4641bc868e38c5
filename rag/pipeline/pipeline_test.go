package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// Timing tolerance. A Go timer never fires early, so a stage that must wait for delays summing
// to d takes at least d by the pipeline's clock: the lower bound is exact. Above it, each wait
// overshoots by the timer's wake-up latency (tens of microseconds on an idle Linux box) plus the
// time until the woken goroutine is scheduled, which on this shared 2-core machine under -race
// reaches several milliseconds; chains of waits add up, and a loaded machine stretches
// everything proportionally. Hence expected + 15 ms + 20%. The delays below are chosen so that
// this bound still separates each mode from its nearest wrong answer (noted per case). Because
// a single scheduling hiccup can exceed any fixed slack, a case is retried up to
// timingAttempts times and passes if one attempt lands in range; the lower bound must hold on
// every attempt.
const (
	timingSlack     = 15 * time.Millisecond
	timingSlackFrac = 0.20
	timingAttempts  = 3
)

func upperBound(expected time.Duration) time.Duration {
	return expected + timingSlack + time.Duration(timingSlackFrac*float64(expected))
}

// unit is the delay step of the timing tests: large against scheduling jitter, small enough to
// keep the package's tests within a few seconds.
const unit = 20 * time.Millisecond

func TestRetrieveLatencyByCoupling(t *testing.T) {
	// Shard delays all differ and are not in shard order, so nothing depends on shard numbers.
	shardDelays := []time.Duration{3 * unit, unit, 4 * unit, 2 * unit}
	tests := []struct {
		name         string
		coupling     rag.Coupling
		quorum       int
		deadline     time.Duration
		want         time.Duration
		wantAnswered int
		wantLate     int
	}{
		// 200 ms, bound 255 ms; fanout would take 80 ms, below the exact lower bound.
		{name: "sync sums the shards", coupling: rag.CouplingSync, want: 10 * unit, wantAnswered: 4},
		// 80 ms, bound 111 ms; sync would take 200 ms.
		{name: "fanout waits for the slowest", coupling: rag.CouplingFanout, want: 4 * unit, wantAnswered: 4},
		// 40 ms, bound 63 ms; fanout would take 80 ms. Waiting for a third shard (60 ms) is
		// caught by the answered count.
		{name: "async quorum 2 waits for the second fastest", coupling: rag.CouplingAsync, quorum: 2, deadline: time.Second, want: 2 * unit, wantAnswered: 2, wantLate: 2},
		// 50 ms, bound 75 ms; waiting for the quorum of 4 would take 80 ms.
		{name: "async deadline cuts before the quorum", coupling: rag.CouplingAsync, quorum: 4, deadline: 5 * unit / 2, want: 5 * unit / 2, wantAnswered: 2, wantLate: 2},
		// Default quorum of 4 shards is a majority, 3: 60 ms.
		{name: "async default quorum is a majority", coupling: rag.CouplingAsync, deadline: time.Second, want: 3 * unit, wantAnswered: 3, wantLate: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := checkNoLeak(t)
			defer done()
			var report []string
			for attempt := range timingAttempts {
				b := zeroLatency(4)
				b.ret.delays = shardDelays
				p := b.pipeline(t, pipeline.Config{AsyncQuorum: tt.quorum, AsyncDeadline: tt.deadline})
				res, err := p.Run(context.Background(), query(tt.coupling, 0), nil)
				if err != nil {
					t.Fatal(err)
				}
				got := stageDuration(t, res, rag.StageRetrieve)
				if got < tt.want {
					t.Fatalf("retrieve took %v; a %s run cannot take less than %v", got, tt.coupling, tt.want)
				}
				ok := got <= upperBound(tt.want) && res.ShardsAnswered == tt.wantAnswered && res.ShardsLate == tt.wantLate
				report = append(report, fmt.Sprintf("attempt %d: retrieve %v, answered %d, late %d", attempt+1, got, res.ShardsAnswered, res.ShardsLate))
				if ok {
					if s := p.Stats(); s.LateShardsDropped != uint64(tt.wantLate) {
						t.Fatalf("Stats.LateShardsDropped = %d; want %d", s.LateShardsDropped, tt.wantLate)
					}
					if len(res.ChunkIDs) != 5 {
						t.Fatalf("%d chunks in the prompt; want top_k 5", len(res.ChunkIDs))
					}
					return
				}
			}
			t.Fatalf("want retrieve in [%v, %v] with %d answered and %d late:\n%s", tt.want, upperBound(tt.want), tt.wantAnswered, tt.wantLate, strings.Join(report, "\n"))
		})
	}
}

func TestFetchLatencyByCoupling(t *testing.T) {
	const topK = 5
	tests := []struct {
		name     string
		coupling rag.Coupling
		want     time.Duration
	}{
		// 100 ms, bound 135 ms; concurrent fetching would take 20 ms.
		{name: "sync sums the chunks", coupling: rag.CouplingSync, want: topK * unit},
		// 20 ms, bound 39 ms; sequential fetching would take 100 ms.
		{name: "fanout waits for the slowest", coupling: rag.CouplingFanout, want: unit},
		{name: "async fetches concurrently", coupling: rag.CouplingAsync, want: unit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var report []string
			for attempt := range timingAttempts {
				b := zeroLatency(3)
				b.docs.delay = unit
				p := b.pipeline(t, pipeline.Config{AsyncQuorum: 3})
				res, err := p.Run(context.Background(), query(tt.coupling, topK), nil)
				if err != nil {
					t.Fatal(err)
				}
				if n := b.docs.calls.Load(); n != topK {
					t.Fatalf("%d chunk fetches; want top_k %d", n, topK)
				}
				got := stageDuration(t, res, rag.StageFetch)
				if got < tt.want {
					t.Fatalf("fetch took %v; a %s run cannot take less than %v", got, tt.coupling, tt.want)
				}
				if got <= upperBound(tt.want) {
					return
				}
				report = append(report, fmt.Sprintf("attempt %d: fetch %v", attempt+1, got))
			}
			t.Fatalf("want fetch in [%v, %v]:\n%s", tt.want, upperBound(tt.want), strings.Join(report, "\n"))
		})
	}
}

func TestLateShardsReportedBeforeFirstToken(t *testing.T) {
	done := checkNoLeak(t)
	defer done()
	b := zeroLatency(4)
	b.ret.delays = []time.Duration{unit, 2 * unit, 3 * unit, 4 * unit}
	// The first token comes long after the late shards answer, so the stream is still open.
	b.gen.firstDelay = 8 * unit
	p := b.pipeline(t, pipeline.Config{AsyncQuorum: 2, AsyncDeadline: time.Second})
	sink := &recordingSink{tb: t}
	res, err := p.Run(context.Background(), query(rag.CouplingAsync, 0), sink)
	if err != nil {
		t.Fatal(err)
	}
	events, progress, deltas := sink.snapshot()
	var answered, late []int
	var started bool
	for _, ev := range progress {
		switch {
		case ev.Stage == rag.StageGenerate:
			started = true
			if ev.Shard != -1 || ev.Hits != len(res.ChunkIDs) {
				t.Errorf("generation-start event %+v; want shard -1 and %d hits", ev, len(res.ChunkIDs))
			}
		case ev.Late:
			late = append(late, ev.Shard)
			if !started {
				t.Errorf("late event %+v came before generation started", ev)
			}
		default:
			answered = append(answered, ev.Shard)
		}
		if ev.Message == "" {
			t.Errorf("event %+v has no message", ev)
		}
	}
	if !slices.Equal(answered, []int{0, 1}) || !slices.Equal(late, []int{2, 3}) || !started {
		t.Fatalf("answered %v, late %v, generation started %v; want [0 1], [2 3], true (events %+v)", answered, late, started, progress)
	}
	if i := slices.Index(events, "delta"); i != len(progress) {
		t.Fatalf("first delta at call %d; want it after all %d progress events: %v", i, len(progress), events)
	}
	if res.ShardsLate != 2 || res.ShardsAnswered != 2 || len(deltas) != len(b.gen.tokens) {
		t.Fatalf("result %+v with %d deltas; want 2 answered, 2 late, %d deltas", res, len(deltas), len(b.gen.tokens))
	}
	// Only shards 0 and 1 are in the prompt.
	for _, id := range res.ChunkIDs {
		if !strings.HasPrefix(id, "s0-") && !strings.HasPrefix(id, "s1-") {
			t.Fatalf("chunk %s from a late shard is in the prompt %v", id, res.ChunkIDs)
		}
	}
}

func TestLateShardsDuringStreamingAreSerialized(t *testing.T) {
	done := checkNoLeak(t)
	defer done()
	b := zeroLatency(3)
	b.ret.delays = []time.Duration{0, unit, 2 * unit}
	b.gen.tokens = strings.Fields(strings.Repeat("tok ", 200))
	p := b.pipeline(t, pipeline.Config{AsyncQuorum: 1, AsyncDeadline: time.Second})
	// Each delta keeps the sink busy for a while, so the late shards answer while a Delta call
	// is under way: only serialization keeps their Progress calls out of it (recordingSink
	// fails the test on overlap).
	sink := &recordingSink{tb: t, delay: 500 * time.Microsecond}
	res, err := p.Run(context.Background(), query(rag.CouplingAsync, 0), sink)
	if err != nil {
		t.Fatal(err)
	}
	events, progress, _ := sink.snapshot()
	lateAt := []int{}
	for i, ev := range events {
		if ev == "progress" && i > slices.Index(events, "delta") {
			lateAt = append(lateAt, i)
		}
	}
	if res.ShardsLate != 2 || len(lateAt) != 2 {
		t.Fatalf("%d late shards, %d progress events amid the deltas (%v); want 2 and 2", res.ShardsLate, len(lateAt), progress)
	}
}

func TestAsyncDoesNotWaitForLateShards(t *testing.T) {
	done := checkNoLeak(t)
	defer done()
	const slow = 2 * time.Second
	b := zeroLatency(2)
	b.ret.delays = []time.Duration{unit, slow}
	p := b.pipeline(t, pipeline.Config{AsyncQuorum: 1, AsyncDeadline: time.Second})
	start := time.Now()
	res, err := p.Run(context.Background(), query(rag.CouplingAsync, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= slow {
		t.Fatalf("Run took %v; it must not wait for the %v shard", d, slow)
	}
	// Run has joined the late search, which it cancelled: it is already counted.
	if n := b.ret.cancelled.Load(); n != 1 {
		t.Fatalf("%d searches cancelled when Run returned; want the slow one", n)
	}
	if res.ShardsLate != 1 {
		t.Fatalf("ShardsLate = %d; want 1", res.ShardsLate)
	}
}

func TestCancellationStopsEveryStage(t *testing.T) {
	const long = 5 * time.Second
	tests := []struct {
		name     string
		coupling rag.Coupling
		setup    func(*backends, *fakeAdmitter)
		stage    rag.Stage
	}{
		{name: "admission", coupling: rag.CouplingSync, setup: func(_ *backends, a *fakeAdmitter) { a.block = true }, stage: rag.StageAdmission},
		{name: "embed", coupling: rag.CouplingSync, setup: func(b *backends, _ *fakeAdmitter) { b.emb.delay = long }, stage: rag.StageEmbed},
		{name: "retrieve sync", coupling: rag.CouplingSync, setup: func(b *backends, _ *fakeAdmitter) { b.ret.delays[1] = long }, stage: rag.StageRetrieve},
		{name: "retrieve fanout", coupling: rag.CouplingFanout, setup: func(b *backends, _ *fakeAdmitter) { b.ret.delays[1] = long }, stage: rag.StageRetrieve},
		{name: "retrieve async", coupling: rag.CouplingAsync, setup: func(b *backends, _ *fakeAdmitter) { b.ret.delays = []time.Duration{long, long, long} }, stage: rag.StageRetrieve},
		{name: "fetch sync", coupling: rag.CouplingSync, setup: func(b *backends, _ *fakeAdmitter) { b.docs.delay = long }, stage: rag.StageFetch},
		{name: "fetch fanout", coupling: rag.CouplingFanout, setup: func(b *backends, _ *fakeAdmitter) { b.docs.delay = long }, stage: rag.StageFetch},
		{name: "generate before the first token", coupling: rag.CouplingSync, setup: func(b *backends, _ *fakeAdmitter) { b.gen.firstDelay = long }, stage: rag.StageGenerate},
		{name: "generate mid-stream", coupling: rag.CouplingAsync, setup: func(b *backends, _ *fakeAdmitter) { b.gen.tokenDelay = long }, stage: rag.StageGenerate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := checkNoLeak(t)
			defer done()
			b := zeroLatency(3)
			adm := &fakeAdmitter{}
			tt.setup(&b, adm)
			p := b.pipeline(t, pipeline.Config{AsyncDeadline: time.Second}, pipeline.WithAdmitter(adm))
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(2*unit, cancel)
			start := time.Now()
			res, err := p.Run(ctx, query(tt.coupling, 0), nil)
			if !errors.Is(err, context.Canceled) || rag.StageOf(err) != tt.stage {
				t.Fatalf("err = %v (stage %q); want context.Canceled at %s", err, rag.StageOf(err), tt.stage)
			}
			if d := time.Since(start); d >= long {
				t.Fatalf("Run took %v after cancellation", d)
			}
			if _, ok := res.Timing(tt.stage); !ok {
				t.Fatalf("partial result %+v has no %s timing", res, tt.stage)
			}
			b.gen.mu.Lock()
			for i, s := range b.gen.streams {
				if s.closed.Load() != 1 {
					t.Errorf("stream %d closed %d times; want once", i, s.closed.Load())
				}
			}
			b.gen.mu.Unlock()
			if adm.acquires.Load() != adm.releases.Load()+boolInt(tt.stage == rag.StageAdmission) {
				t.Fatalf("%d acquires, %d releases", adm.acquires.Load(), adm.releases.Load())
			}
		})
	}
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

func TestCancellationMidGenerationClosesStream(t *testing.T) {
	done := checkNoLeak(t)
	defer done()
	b := zeroLatency(2)
	b.gen.tokens = strings.Fields(strings.Repeat("tok ", 100))
	b.gen.tokenDelay = time.Millisecond
	p := b.pipeline(t, pipeline.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &recordingSink{tb: t, onDelta: func(n int) error {
		if n == 3 {
			cancel() // the client's request context ends, as when the connection drops
		}
		return nil
	}}
	_, err := p.Run(ctx, query(rag.CouplingFanout, 0), sink)
	if !errors.Is(err, context.Canceled) || rag.StageOf(err) != rag.StageGenerate {
		t.Fatalf("err = %v; want context.Canceled at generate", err)
	}
	s := b.gen.lastStream(t)
	if s.closed.Load() != 1 {
		t.Fatalf("stream closed %d times; want once", s.closed.Load())
	}
	if n := s.recvs.Load(); n != 4 {
		t.Fatalf("%d Recv calls; want 3 delivered and 1 that saw the cancellation", n)
	}
}

var errClientGone = errors.New("write: broken pipe")

func TestSinkErrorStopsGeneration(t *testing.T) {
	tests := []struct {
		name       string
		coupling   rag.Coupling
		onDelta    func(n int) error
		onProgress func(pipeline.Progress) error
		wantRecvs  int32 // -1: do not check
		wantDeltas int
	}{
		{name: "delta", coupling: rag.CouplingSync, onDelta: func(n int) error {
			if n == 3 {
				return errClientGone
			}
			return nil
		}, wantRecvs: 3, wantDeltas: 3},
		{name: "first progress", coupling: rag.CouplingAsync, onProgress: func(pipeline.Progress) error { return errClientGone }, wantRecvs: -1},
		{name: "late progress cancels generation", coupling: rag.CouplingAsync, onProgress: func(ev pipeline.Progress) error {
			if ev.Late {
				return errClientGone
			}
			return nil
		}, wantRecvs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := checkNoLeak(t)
			defer done()
			b := zeroLatency(2)
			b.ret.delays = []time.Duration{0, unit}
			b.gen.firstDelay = 10 * unit
			if tt.coupling == rag.CouplingSync {
				b.gen.firstDelay = 0
			}
			p := b.pipeline(t, pipeline.Config{AsyncQuorum: 1, AsyncDeadline: time.Second})
			sink := &recordingSink{tb: t, onDelta: tt.onDelta, onProgress: tt.onProgress}
			start := time.Now()
			_, err := p.Run(context.Background(), query(tt.coupling, 0), sink)
			if !errors.Is(err, errClientGone) || rag.StageOf(err) != rag.StageStream {
				t.Fatalf("err = %v (stage %q); want the sink's error at stream", err, rag.StageOf(err))
			}
			if d := time.Since(start); d >= 10*unit {
				t.Fatalf("Run took %v; the client left before the first token was due", d)
			}
			_, _, deltas := sink.snapshot()
			if len(deltas) != tt.wantDeltas {
				t.Fatalf("%d deltas delivered; want %d", len(deltas), tt.wantDeltas)
			}
			if tt.wantRecvs >= 0 {
				s := b.gen.lastStream(t)
				if s.closed.Load() != 1 || s.recvs.Load() != tt.wantRecvs {
					t.Fatalf("stream closed %d times after %d Recv calls; want closed once after %d", s.closed.Load(), s.recvs.Load(), tt.wantRecvs)
				}
			}
			if s := p.Stats(); s.Failed != 1 {
				t.Fatalf("Stats.Failed = %d; want 1", s.Failed)
			}
		})
	}
}

func TestUnknownModel(t *testing.T) {
	t.Parallel()
	b := zeroLatency(2)
	p := b.pipeline(t, pipeline.Config{})
	q := query(rag.CouplingSync, 0)
	q.Model = "gpt-imaginary"
	q.TopK = -1 // the model is checked first
	_, err := p.Run(context.Background(), q, nil)
	if !errors.Is(err, rag.ErrUnknownModel) {
		t.Fatalf("err = %v; want ErrUnknownModel", err)
	}
	for _, want := range []string{"gpt-imaginary", "model-a", "model-b"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if b.emb.calls.Load() != 0 {
		t.Fatal("the embedder ran for an unknown model")
	}
	if got := p.Models(); !slices.Equal(got, []string{"model-a", "model-b"}) {
		t.Fatalf("Models = %v", got)
	}
}

func TestInvalidQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*rag.Query)
	}{
		{name: "negative top_k", modify: func(q *rag.Query) { q.TopK = -1 }},
		{name: "top_k above the maximum", modify: func(q *rag.Query) { q.TopK = pipeline.MaxTopK + 1 }},
		{name: "negative max_tokens", modify: func(q *rag.Query) { q.MaxTokens = -1 }},
		{name: "no user message", modify: func(q *rag.Query) { q.Messages = []rag.Message{{Role: "system", Content: "hi"}} }},
		{name: "unknown coupling", modify: func(q *rag.Query) { q.Coupling = "eventual" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := zeroLatency(1)
			p := b.pipeline(t, pipeline.Config{})
			q := query(rag.CouplingSync, 0)
			tt.modify(&q)
			if _, err := p.Run(context.Background(), q, nil); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("err = %v; want ErrInvalidRequest", err)
			}
			if b.emb.calls.Load() != 0 {
				t.Fatal("the embedder ran for an invalid query")
			}
		})
	}
}

func TestShardErrors(t *testing.T) {
	errShard := errors.New("shard unreachable")
	tests := []struct {
		name     string
		coupling rag.Coupling
		delays   []time.Duration
		errs     []error
		quorum   int
		wantErr  bool
		answered int
		failed   int
		late     int
	}{
		{name: "sync fails", coupling: rag.CouplingSync, delays: []time.Duration{0, 0, 0}, errs: []error{nil, errShard}, wantErr: true},
		{name: "fanout fails and cancels the rest", coupling: rag.CouplingFanout, delays: []time.Duration{0, 5 * time.Second, 0}, errs: []error{nil, nil, errShard}, wantErr: true},
		{name: "async tolerates a failed shard when the quorum answers", coupling: rag.CouplingAsync, delays: []time.Duration{0, unit, 2 * unit, 5 * time.Second}, errs: []error{errShard}, quorum: 2, answered: 2, failed: 1, late: 1},
		{name: "async goes on with fewer than the quorum once every shard is in", coupling: rag.CouplingAsync, delays: []time.Duration{0, 0, unit}, errs: []error{errShard, errShard}, quorum: 2, answered: 1, failed: 2},
		{name: "async fails when every shard fails", coupling: rag.CouplingAsync, delays: []time.Duration{0, unit}, errs: []error{errShard, errShard}, quorum: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := checkNoLeak(t)
			defer done()
			b := zeroLatency(0)
			b.ret.delays, b.ret.errs = tt.delays, tt.errs
			p := b.pipeline(t, pipeline.Config{AsyncQuorum: tt.quorum, AsyncDeadline: time.Second})
			start := time.Now()
			res, err := p.Run(context.Background(), query(tt.coupling, 0), nil)
			if time.Since(start) >= time.Second {
				t.Fatalf("Run took %v: a failure or quorum must not wait for slow shards", time.Since(start))
			}
			if tt.wantErr {
				if !errors.Is(err, errShard) || rag.StageOf(err) != rag.StageRetrieve {
					t.Fatalf("err = %v; want the shard error at retrieve", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.ShardsAnswered != tt.answered || res.ShardsFailed != tt.failed || res.ShardsLate != tt.late {
				t.Fatalf("answered %d, failed %d, late %d; want %d, %d, %d", res.ShardsAnswered, res.ShardsFailed, res.ShardsLate, tt.answered, tt.failed, tt.late)
			}
		})
	}
}

func TestFetchErrors(t *testing.T) {
	t.Parallel()
	errStore := errors.New("store down")
	for _, coupling := range rag.Couplings {
		t.Run(string(coupling)+" skips a missing chunk", func(t *testing.T) {
			t.Parallel()
			b := zeroLatency(2)
			b.docs.missing = map[string]bool{chunkID(1, 0): true}
			p := b.pipeline(t, pipeline.Config{AsyncQuorum: 2})
			res, err := p.Run(context.Background(), query(coupling, 3), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{chunkID(0, 0), chunkID(0, 1)} // s1-c0 (rank 2) is missing
			if !slices.Equal(res.ChunkIDs, want) || res.ChunksMissing != 1 || p.Stats().ChunksMissing != 1 {
				t.Fatalf("chunks %v, %d missing; want %v and 1 missing", res.ChunkIDs, res.ChunksMissing, want)
			}
		})
		t.Run(string(coupling)+" fails on a store error", func(t *testing.T) {
			t.Parallel()
			b := zeroLatency(2)
			b.docs.errs = map[string]error{chunkID(0, 1): errStore}
			p := b.pipeline(t, pipeline.Config{AsyncQuorum: 2})
			_, err := p.Run(context.Background(), query(coupling, 3), nil)
			if !errors.Is(err, errStore) || rag.StageOf(err) != rag.StageFetch {
				t.Fatalf("err = %v; want the store error at fetch", err)
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	t.Parallel()
	errEngine := fmt.Errorf("engine: %w", rag.ErrUnavailable)
	tests := []struct {
		name  string
		setup func(*fakeGenerator)
	}{
		{name: "generate call", setup: func(g *fakeGenerator) { g.genErr = errEngine }},
		{name: "before the first token", setup: func(g *fakeGenerator) { g.recvErrAt, g.recvErr = 1, errEngine }},
		{name: "mid-stream", setup: func(g *fakeGenerator) { g.recvErrAt, g.recvErr = 3, errEngine }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := zeroLatency(1)
			tt.setup(b.gen)
			p := b.pipeline(t, pipeline.Config{})
			_, err := p.Run(context.Background(), query(rag.CouplingSync, 0), nil)
			if !errors.Is(err, rag.ErrUnavailable) || rag.StageOf(err) != rag.StageGenerate {
				t.Fatalf("err = %v; want the engine error at generate", err)
			}
			b.gen.mu.Lock()
			defer b.gen.mu.Unlock()
			for _, s := range b.gen.streams {
				if s.closed.Load() != 1 {
					t.Fatalf("stream closed %d times; want once", s.closed.Load())
				}
			}
		})
	}
}

func TestPromptAndResult(t *testing.T) {
	t.Parallel()
	b := zeroLatency(2)
	b.emb.delay = time.Millisecond
	b.gen.firstDelay = unit
	p := b.pipeline(t, pipeline.Config{SystemPrompt: "Use the context."})
	q := query(rag.CouplingSync, 3)
	q.Messages = []rag.Message{
		{Role: "user", Content: "first question"},
		{Role: "assistant", Content: "first answer"},
		{Role: "user", Content: "What is the answer?"},
	}
	sink := &recordingSink{tb: t}
	res, err := p.Run(context.Background(), q, sink)
	if err != nil {
		t.Fatal(err)
	}
	if got := *b.emb.text.Load(); got != "What is the answer?" {
		t.Fatalf("embedded %q; want the last user message", got)
	}
	req := b.gen.lastRequest(t)
	wantSystem := "Use the context.\n\n[1] Title s0-c0\ntext of s0-c0\n\n[2] Title s1-c0\ntext of s1-c0\n\n[3] Title s0-c1\ntext of s0-c1"
	if len(req.Messages) != 4 || req.Messages[0].Role != "system" || req.Messages[0].Content != wantSystem {
		t.Fatalf("system message = %q; want %q", req.Messages[0].Content, wantSystem)
	}
	if !reflect.DeepEqual(req.Messages[1:], q.Messages) {
		t.Fatalf("conversation = %v; want %v after the context", req.Messages[1:], q.Messages)
	}
	if req.ID != q.ID || req.Model != q.Model || req.MaxTokens != q.MaxTokens || req.Temperature != q.Temperature {
		t.Fatalf("request %+v does not carry the query's id, model, max_tokens and temperature", req)
	}
	if res.Coupling != rag.CouplingSync || res.TopK != 3 || !slices.Equal(res.ChunkIDs, []string{"s0-c0", "s1-c0", "s0-c1"}) {
		t.Fatalf("result %+v", res)
	}
	if res.Usage != (rag.Usage{PromptTokens: 42, CompletionTokens: 5}) || res.FinishReason != "stop" {
		t.Fatalf("usage %+v, finish %q; want the engine's", res.Usage, res.FinishReason)
	}
	var stages []rag.Stage
	for _, tm := range res.Timings {
		stages = append(stages, tm.Stage)
	}
	if want := []rag.Stage{rag.StageEmbed, rag.StageRetrieve, rag.StageFetch, rag.StageGenerate, rag.StageStream}; !slices.Equal(stages, want) {
		t.Fatalf("stages %v; want %v (no admitter, no admission stage)", stages, want)
	}
	// TTFT runs from the start of Run, so it covers the embedding as well as the first-token delay.
	gen, embed := stageDuration(t, res, rag.StageGenerate), stageDuration(t, res, rag.StageEmbed)
	if gen < unit || res.TimeToFirstToken < embed+unit {
		t.Fatalf("TTFT %v, embed %v, generate %v; want generate >= %v and TTFT >= embed + %v", res.TimeToFirstToken, embed, gen, unit, unit)
	}
	_, _, deltas := sink.snapshot()
	var text strings.Builder
	for _, d := range deltas {
		text.WriteString(d.Text)
	}
	if text.String() != "The answer is 42." {
		t.Fatalf("streamed %q", text.String())
	}
}

func TestStreamStageTimesTheSink(t *testing.T) {
	t.Parallel()
	const perDelta = 5 * time.Millisecond
	b := zeroLatency(1)
	b.gen.noUsage = true
	p := b.pipeline(t, pipeline.Config{})
	sink := &recordingSink{tb: t, delay: perDelta}
	res, err := p.Run(context.Background(), query(rag.CouplingSync, 0), sink)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Duration(len(b.gen.tokens)) * perDelta
	stream, gen := stageDuration(t, res, rag.StageStream), stageDuration(t, res, rag.StageGenerate)
	// The generate stage ends when the last delta arrives, so it spans every hand-over but the last.
	if stream < want || gen < want-perDelta {
		t.Fatalf("stream %v, generate %v; want stream >= %v and generate >= %v", stream, gen, want, want-perDelta)
	}
	// Without usage from the engine, the pipeline counts it itself.
	req := b.gen.lastRequest(t)
	if res.Usage.CompletionTokens != len(b.gen.tokens) || res.Usage.PromptTokens != rag.PromptTokens(req.Messages) {
		t.Fatalf("usage %+v; want %d completion tokens and the prompt's %d", res.Usage, len(b.gen.tokens), rag.PromptTokens(req.Messages))
	}
}

func TestMergeOrder(t *testing.T) {
	t.Parallel()
	b := zeroLatency(3)
	// Equal scores everywhere, and chunk "dup" found by two shards with different scores.
	b.ret.hits = func(shard, k int) []rag.Hit {
		hits := []rag.Hit{
			{ChunkID: fmt.Sprintf("z%d", shard), Score: 0.5, Shard: shard},
			{ChunkID: fmt.Sprintf("a%d", shard), Score: 0.5, Shard: shard},
		}
		if shard > 0 {
			hits = append(hits, rag.Hit{ChunkID: "dup", Score: float32(shard) / 10, Shard: shard})
		}
		return hits
	}
	want := []string{"a0", "a1", "a2", "z0", "z1", "z2", "dup"}
	for _, coupling := range rag.Couplings {
		p := b.pipeline(t, pipeline.Config{AsyncQuorum: 3})
		res, err := p.Run(context.Background(), query(coupling, 10), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.ChunkIDs, want) {
			t.Fatalf("%s: chunks %v; want %v (score, then id; duplicates once)", coupling, res.ChunkIDs, want)
		}
	}
}

func TestAdmission(t *testing.T) {
	t.Parallel()
	t.Run("slot held for the run and released once", func(t *testing.T) {
		t.Parallel()
		b := zeroLatency(2)
		adm := &fakeAdmitter{}
		p := b.pipeline(t, pipeline.Config{}, pipeline.WithAdmitter(adm))
		res, err := p.Run(context.Background(), query(rag.CouplingFanout, 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		if adm.acquires.Load() != 1 || adm.releases.Load() != 1 {
			t.Fatalf("%d acquires, %d releases; want 1 each", adm.acquires.Load(), adm.releases.Load())
		}
		if res.Timings[0].Stage != rag.StageAdmission {
			t.Fatalf("first stage %s; want admission", res.Timings[0].Stage)
		}
	})
	t.Run("shed request", func(t *testing.T) {
		t.Parallel()
		b := zeroLatency(2)
		adm := &fakeAdmitter{err: fmt.Errorf("%w: all workers busy", rag.ErrOverloaded)}
		p := b.pipeline(t, pipeline.Config{}, pipeline.WithAdmitter(adm))
		_, err := p.Run(context.Background(), query(rag.CouplingSync, 0), nil)
		if !errors.Is(err, rag.ErrOverloaded) || rag.StageOf(err) != rag.StageAdmission {
			t.Fatalf("err = %v; want ErrOverloaded at admission", err)
		}
		if b.emb.calls.Load() != 0 {
			t.Fatal("a shed request reached the embedder")
		}
	})
}

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     pipeline.Config
		want    pipeline.Config
		wantErr string
	}{
		{name: "zero takes defaults", cfg: pipeline.Config{}, want: pipeline.DefaultConfig()},
		{name: "explicit", cfg: pipeline.Config{Coupling: rag.CouplingAsync, TopK: 7, AsyncQuorum: 2, AsyncDeadline: time.Second, SystemPrompt: "p"},
			want: pipeline.Config{Coupling: rag.CouplingAsync, TopK: 7, AsyncQuorum: 2, AsyncDeadline: time.Second, SystemPrompt: "p"}},
		{name: "bad coupling", cfg: pipeline.Config{Coupling: "Sync"}, wantErr: "coupling"},
		{name: "negative top_k", cfg: pipeline.Config{TopK: -1}, wantErr: "top_k"},
		{name: "top_k too large", cfg: pipeline.Config{TopK: pipeline.MaxTopK + 1}, wantErr: "top_k"},
		{name: "negative quorum", cfg: pipeline.Config{AsyncQuorum: -1}, wantErr: "quorum"},
		{name: "negative deadline", cfg: pipeline.Config{AsyncDeadline: -time.Millisecond}, wantErr: "deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := zeroLatency(1)
			_, newErr := pipeline.New(b.emb, b.ret, b.docs, b.gen, tt.cfg)
			p := b.pipeline(t, pipeline.Config{TopK: 9})
			setErr := p.SetConfig(tt.cfg)
			if tt.wantErr != "" {
				for _, err := range []error{newErr, setErr} {
					if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("err = %v; want ErrInvalidRequest about %s", err, tt.wantErr)
					}
				}
				if p.Config().TopK != 9 {
					t.Fatal("a rejected SetConfig changed the config")
				}
				return
			}
			if newErr != nil || setErr != nil {
				t.Fatalf("New: %v, SetConfig: %v", newErr, setErr)
			}
			if got := p.Config(); got != tt.want {
				t.Fatalf("Config = %+v; want %+v", got, tt.want)
			}
		})
	}
	t.Run("nil backend", func(t *testing.T) {
		t.Parallel()
		b := zeroLatency(1)
		if _, err := pipeline.New(b.emb, nil, b.docs, b.gen, pipeline.Config{}); err == nil {
			t.Fatal("New accepted a nil retriever")
		}
	})
	t.Run("SetConfig changes later runs", func(t *testing.T) {
		t.Parallel()
		b := zeroLatency(2)
		p := b.pipeline(t, pipeline.Config{})
		if err := p.SetConfig(pipeline.Config{Coupling: rag.CouplingFanout, TopK: 2}); err != nil {
			t.Fatal(err)
		}
		res, err := p.Run(context.Background(), query("", 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Coupling != rag.CouplingFanout || res.TopK != 2 || len(res.ChunkIDs) != 2 {
			t.Fatalf("result %+v; want the new defaults fanout and top_k 2", res)
		}
		// A query's own options win over the defaults.
		if res, err = p.Run(context.Background(), query(rag.CouplingAsync, 4), nil); err != nil || res.Coupling != rag.CouplingAsync || res.TopK != 4 {
			t.Fatalf("result %+v, %v; want the query's async and top_k 4", res, err)
		}
		s := p.Stats()
		if s.Runs != 2 || s.Failed != 0 || s.InFlight != 0 || s.ByCoupling[rag.CouplingFanout] != 1 || s.ByCoupling[rag.CouplingAsync] != 1 || s.ByCoupling[rag.CouplingSync] != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestServerTiming(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name    string
		timings []rag.StageTiming
		want    string
	}{
		{name: "empty", want: ""},
		{name: "all stages", timings: []rag.StageTiming{
			{Stage: rag.StageAdmission, Duration: 12 * time.Microsecond},
			{Stage: rag.StageEmbed, Duration: 300 * time.Microsecond},
			{Stage: rag.StageRetrieve, Duration: 12100 * time.Microsecond},
			{Stage: rag.StageFetch, Duration: 3 * time.Millisecond},
			{Stage: rag.StageGenerate, Duration: 812500 * time.Microsecond},
			{Stage: rag.StageStream, Duration: 900 * time.Microsecond},
		}, want: "admission;dur=0.012, embed;dur=0.300, retrieve;dur=12.100, fetch;dur=3.000, generate;dur=812.500, stream;dur=0.900"},
		{name: "sub-microsecond rounds", timings: []rag.StageTiming{{Stage: rag.StageEmbed, Duration: 1499 * time.Nanosecond}}, want: "embed;dur=0.001"},
		// An agentic request's stages run once per search: in turn they add up; in parallel
		// (two searches of one step) they count the wall time they covered, once.
		{name: "stages in turn", timings: []rag.StageTiming{
			{Stage: rag.StageRetrieve, Start: at(0), Duration: 10 * time.Millisecond},
			{Stage: rag.StageGenerate, Start: at(10), Duration: 100 * time.Millisecond},
			{Stage: rag.StageRetrieve, Start: at(110), Duration: 15 * time.Millisecond},
		}, want: "retrieve;dur=25.000, generate;dur=100.000"},
		{name: "stages in parallel", timings: []rag.StageTiming{
			{Stage: rag.StageRetrieve, Start: at(100), Duration: 30 * time.Millisecond},
			{Stage: rag.StageRetrieve, Start: at(110), Duration: 40 * time.Millisecond}, // overlaps: 100..150
			{Stage: rag.StageRetrieve, Start: at(120), Duration: 5 * time.Millisecond},  // inside
			{Stage: rag.StageRetrieve, Start: at(0), Duration: 20 * time.Millisecond},   // apart, listed late
		}, want: "retrieve;dur=70.000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &pipeline.Result{Timings: tt.timings}
			if got := r.ServerTiming(); got != tt.want {
				t.Fatalf("ServerTiming = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestWithClock(t *testing.T) {
	t.Parallel()
	// A clock that advances 1 ms per reading makes every duration a whole number of readings.
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var ticks int64
	clock := func() time.Time { ticks++; return base.Add(time.Duration(ticks) * time.Millisecond) }
	b := zeroLatency(1)
	p := b.pipeline(t, pipeline.Config{}, pipeline.WithClock(clock))
	res, err := p.Run(context.Background(), query(rag.CouplingSync, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range res.Timings {
		if tm.Start.Before(base) || tm.Duration <= 0 || tm.Duration%time.Millisecond != 0 {
			t.Fatalf("timing %+v not taken from the injected clock", tm)
		}
	}
}

func BenchmarkRun(b *testing.B) {
	for _, coupling := range rag.Couplings {
		b.Run(string(coupling), func(b *testing.B) {
			// Precomputed answers, so that the figures are the pipeline's own overhead.
			be := zeroLatency(4)
			hits := make([][]rag.Hit, 4)
			be.docs.chunks = map[string]rag.Chunk{}
			for shard := range hits {
				for j := range 5 {
					id := chunkID(shard, j)
					hits[shard] = append(hits[shard], rag.Hit{ChunkID: id, Score: float32(100 - 10*j - shard), Shard: shard})
					be.docs.chunks[id] = rag.Chunk{ID: id, Title: "Title " + id, Text: "text of " + id}
				}
			}
			be.ret.hits = func(shard, _ int) []rag.Hit { return hits[shard] }
			be.gen.noRecord = true
			p := be.pipeline(b, pipeline.Config{AsyncQuorum: 4})
			q := query(coupling, 5)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Run(ctx, q, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPrepareBindsOneConfigSnapshot checks that a prepared request runs with the configuration
// it was prepared with, even when the configuration changes before it runs: the HTTP API decides
// what to stream from the prepared request, so the run must not read the configuration again.
func TestPrepareBindsOneConfigSnapshot(t *testing.T) {
	t.Parallel()
	b := zeroLatency(2)
	p := b.pipeline(t, pipeline.Config{Coupling: rag.CouplingAsync, TopK: 2, AsyncDeadline: time.Minute})
	req := p.Prepare(query("", 0))
	if req.Coupling != rag.CouplingAsync || req.TopK != 2 {
		t.Fatalf("prepared coupling %s, top_k %d; want async and 2 from the config", req.Coupling, req.TopK)
	}
	if err := p.SetConfig(pipeline.Config{Coupling: rag.CouplingSync, TopK: 4}); err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{tb: t}
	res, err := p.Do(context.Background(), &req, sink)
	if err != nil {
		t.Fatal(err)
	}
	if res.Coupling != rag.CouplingAsync || res.TopK != 2 || len(res.ChunkIDs) != 2 {
		t.Errorf("ran with coupling %s, top_k %d, %d chunks; want the prepared async, 2, 2", res.Coupling, res.TopK, len(res.ChunkIDs))
	}
	if _, progress, _ := sink.snapshot(); len(progress) == 0 {
		t.Error("no retrieval progress: the run did not use async coupling")
	}
	if again := p.Prepare(query("", 0)); again.Coupling != rag.CouplingSync || again.TopK != 4 {
		t.Errorf("a request prepared after the change got %s and %d, want sync and 4", again.Coupling, again.TopK)
	}
}
