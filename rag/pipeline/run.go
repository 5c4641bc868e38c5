package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
)

// Run answers q: it takes an admission slot, embeds the question, retrieves and fetches context
// as q's coupling mode (or the configured default) says, generates, and hands every delta to
// sink (nil discards the output, which suits benchmarks). It returns when the answer is
// complete or the run failed; no goroutine it started outlives it.
//
// What the coupling modes change:
//
//   - sync searches shards 0..n-1 one after another and fetches chunks one by one: retrieve
//     takes the sum of the shard latencies and fetch the sum of the chunk latencies.
//   - fanout searches all shards at once and fetches all chunks at once, waiting for all: each
//     stage takes its slowest call, so one slow shard still sets the pace.
//   - async searches all shards at once and starts generating as soon as Config.AsyncQuorum
//     shards have answered, or at Config.AsyncDeadline with whatever has arrived (at least one
//     shard). Shards still searching then are dropped from the prompt (Result.ShardsLate,
//     Stats.LateShardsDropped); they finish in the background, are reported to sink as late if
//     they answer while the run goes on, and are cancelled when Run returns. Retrieval progress
//     reaches the client before the first token. The price is recall: the prompt lacks the
//     late shards' hits. Chunks are fetched concurrently, as in fanout.
//
// Errors carry the stage they happened in (rag.StageOf). A failed shard fails sync and fanout
// runs; async treats it like a late one and fails only if no shard answered. A chunk the doc
// store does not have is skipped and counted; any other fetch error fails the run. An error
// from sink (the client is gone) stops generation at once and is returned, wrapped with
// rag.StageStream. If ctx ends, Run returns ctx.Err() wrapped with the stage it was in.
//
// Run always returns a non-nil Result; after an error it holds the stages that ran, so the
// caller can still send Server-Timing.
//
// With a tracer provider (WithTracerProvider), a run is a rag.pipeline span, child of the span
// in ctx, with one child span per stage: rag.admission, "embeddings {model}", "retrieval
// {collection}" (with one "Query {collection}" child per shard searched), rag.fetch, "chat
// {model}" and rag.stream. Span timestamps are read from the pipeline's clock, the same readings
// as the Result's timings, so spans and Server-Timing agree to the nanosecond.
func (p *Pipeline) Run(ctx context.Context, q rag.Query, sink Sink) (res *Result, err error) {
	p.stats.runs.Add(1)
	p.stats.inFlight.Add(1)
	r := &run{p: p, t: p.tel, cfg: p.cfg.Load(), q: q, start: p.now(), parent: ctx,
		res: &Result{Timings: make([]rag.StageTiming, 0, numStages)}}
	r.sink.sink = sink
	ctx = r.startSpan(ctx)
	defer func() {
		p.stats.inFlight.Add(-1)
		if err != nil {
			p.stats.failed.Add(1)
		}
		r.finish(err)
	}()
	if err := r.prepare(); err != nil {
		return r.res, err
	}
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	defer r.cleanup()
	return r.res, r.execute()
}

// run is the state of one Run.
type run struct {
	p     *Pipeline
	t     *telemetry
	cfg   *Config
	q     rag.Query
	start time.Time
	res   *Result

	span       trace.Span      // rag.pipeline
	spanCtx    context.Context // parent with the rag.pipeline span
	firstToken time.Time       // when the first delta carrying text arrived
	faultDelay time.Duration   // latency injected by fault rules so far
	genEnd     time.Time       // when the last delta arrived
	answer     strings.Builder // the answer, only when content capture is on

	cacheHits, cacheMisses, cacheBlocked atomic.Int32 // fetch: lookup results

	parent context.Context         // the caller's context
	ctx    context.Context         // parent, also cancelled when a late progress event finds the client gone
	cancel context.CancelCauseFunc // cancels ctx; the cause is the sink error
	sink   guardedSink

	release func()         // the admission slot, if one was taken
	bg      sync.WaitGroup // async: searches still running after the cut, and their collector
}

// numStages is the number of pipeline stages, len(rag.Stages).
const numStages = 6

// prepare checks the model and resolves the query's options against the config.
func (r *run) prepare() error {
	q := r.q
	models := r.p.gen.Models()
	if !slices.Contains(models, q.Model) {
		return fmt.Errorf("%w: model %q is not served here; use one of: %s", rag.ErrUnknownModel, q.Model, strings.Join(models, ", "))
	}
	r.res.Coupling = q.Coupling
	if r.res.Coupling == "" {
		r.res.Coupling = r.cfg.Coupling
	}
	if !validCoupling(r.res.Coupling) {
		return fmt.Errorf("%w: coupling %q: want sync, fanout or async", rag.ErrInvalidRequest, q.Coupling)
	}
	r.res.TopK = q.TopK
	if r.res.TopK == 0 {
		r.res.TopK = r.cfg.TopK
	}
	switch {
	case q.TopK < 0 || q.TopK > MaxTopK:
		return fmt.Errorf("%w: top_k must be between 1 and %d, got %d", rag.ErrInvalidRequest, MaxTopK, q.TopK)
	case q.MaxTokens < 0:
		return fmt.Errorf("%w: max_tokens must not be negative, got %d", rag.ErrInvalidRequest, q.MaxTokens)
	case !slices.ContainsFunc(q.Messages, func(m rag.Message) bool { return m.Role == "user" }):
		return fmt.Errorf("%w: messages must contain a user message to answer", rag.ErrInvalidRequest)
	}
	r.p.countCoupling(r.res.Coupling)
	return nil
}

func (r *run) execute() error {
	if err := r.admit(); err != nil {
		return err
	}

	question := r.q.Question()
	var attrs []attribute.KeyValue
	if r.t.tracing {
		attrs = []attribute.KeyValue{
			semconv.GenAIOperationNameKey.String(string(genaiconv.OperationNameEmbeddings)),
			semconv.GenAIProviderNameKey.String(r.t.embedProvider),
			semconv.GenAIRequestModel(r.t.embedModel),
			semconv.GenAIEmbeddingsDimensionCount(r.p.emb.Dimension()),
			semconv.GenAIUsageInputTokens(rag.CountTokens(question)),
		}
	}
	st := r.begin(r.ctx, rag.StageEmbed, r.t.embedName, attrs...)
	dec, err := r.inject(st)
	var vec []float32
	if err == nil {
		vec, err = r.p.emb.Embed(st.ctx, question)
		if err != nil {
			err = fmt.Errorf("embed question: %w", err)
		}
	}
	d := st.end(err)
	r.observe(rag.StageEmbed, d, dec)
	r.t.inst.clientDur.RecordSet(st.ctx, seconds(d), withError(r.t.embedSet, err))
	if err == nil {
		r.t.inst.tokenUsage.RecordSet(st.ctx, int64(rag.CountTokens(question)), r.t.embedInput)
	}
	if err != nil {
		return r.fail(rag.StageEmbed, err)
	}

	var hits []rag.Hit
	n := r.p.ret.Shards()
	r.res.Shards = n
	if r.t.tracing {
		attrs = []attribute.KeyValue{
			semconv.GenAIOperationNameKey.String(string(genaiconv.OperationNameRetrieval)),
			semconv.GenAIDataSourceID(r.t.collection),
			AttrCoupling.String(string(r.res.Coupling)), AttrTopK.Int(r.res.TopK), AttrShards.Int(n),
		}
		if r.t.capture {
			attrs = append(attrs, semconv.GenAIRetrievalQueryText(question))
		}
	}
	st = r.begin(r.ctx, rag.StageRetrieve, r.t.retrievalName, attrs...)
	dec, err = r.inject(st)
	if err != nil {
		err = r.fail(rag.StageRetrieve, err)
	} else {
		switch r.res.Coupling {
		case rag.CouplingSync:
			hits, err = r.retrieveSync(st, vec, n)
		case rag.CouplingFanout:
			hits, err = r.retrieveFanout(st, vec, n)
		case rag.CouplingAsync:
			hits, err = r.retrieveAsync(st, vec, n)
		}
	}
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrHits.Int(len(hits)), AttrShardsAnswered.Int(r.res.ShardsAnswered),
			AttrShardsLate.Int(r.res.ShardsLate), AttrShardsFailed.Int(r.res.ShardsFailed))
	}
	r.observe(rag.StageRetrieve, st.end(err), dec)
	if err != nil {
		return err
	}

	st = r.begin(r.ctx, rag.StageFetch, SpanFetch)
	var chunks []rag.Chunk
	dec, err = r.inject(st)
	switch {
	case err != nil:
		err = r.fail(rag.StageFetch, err)
	case r.res.Coupling == rag.CouplingSync:
		chunks, err = r.fetchSequential(st.ctx, hits)
	default:
		chunks, err = r.fetchConcurrent(st.ctx, hits)
	}
	if st.span.IsRecording() {
		if r.t.cache != nil {
			st.span.SetAttributes(AttrHits.Int(len(hits)), AttrChunksMissing.Int(r.res.ChunksMissing),
				AttrCacheHits.Int(int(r.cacheHits.Load())), AttrCacheMisses.Int(int(r.cacheMisses.Load())),
				AttrCacheBlocked.Int(int(r.cacheBlocked.Load())))
		} else {
			st.span.SetAttributes(AttrHits.Int(len(hits)), AttrChunksMissing.Int(r.res.ChunksMissing))
		}
	}
	r.observe(rag.StageFetch, st.end(err), dec)
	if err != nil {
		return err
	}
	r.res.ChunkIDs = make([]string, len(chunks))
	for i, c := range chunks {
		r.res.ChunkIDs[i] = c.ID
	}
	return r.generate(buildMessages(r.cfg.SystemPrompt, chunks, r.q.Messages))
}

// admit takes an admission slot, if the pipeline has an admitter.
func (r *run) admit() error {
	a := r.p.admitter
	if a == nil {
		return nil
	}
	st := r.begin(r.ctx, rag.StageAdmission, SpanAdmission)
	var (
		release func()
		wait    time.Duration
	)
	dec, err := r.inject(st)
	switch {
	case err != nil:
	case r.t.waiter != nil:
		release, wait, err = r.t.waiter.AcquireWait(st.ctx)
	default:
		release, err = a.Acquire(st.ctx)
	}
	if st.span.IsRecording() && r.t.waiter != nil {
		st.span.SetAttributes(AttrAdmissionWaitMS.Float64(float64(wait) / float64(time.Millisecond)))
	}
	d := st.end(err)
	r.observe(rag.StageAdmission, d, dec)
	if err != nil {
		if errors.Is(err, rag.ErrOverloaded) {
			r.t.inst.rejected.Add(st.ctx, 1)
		}
		return r.fail(rag.StageAdmission, err)
	}
	if r.t.waiter == nil {
		wait = d - dec.Delay
	}
	r.t.inst.queueWait.Record(st.ctx, seconds(wait))
	r.release = release
	return nil
}

// cleanup runs when Run returns: no sink call may follow, searches still running are cancelled
// and awaited, and only then is the admission slot given back.
func (r *run) cleanup() {
	r.sink.close()
	r.cancel(nil)
	r.bg.Wait()
	if r.release != nil {
		r.release()
	}
}

// stageRun is one stage of a run in progress: its timing, its span and its labelled context.
type stageRun struct {
	r     *run
	stage rag.Stage
	i     int             // index in r.res.Timings
	ctx   context.Context // carries the span and the rag_stage pprof label
	span  trace.Span
}

// begin starts timing stage, starts its span (named name, child of the span in parent, with
// attrs and rag.stage) at the same instant, and labels the goroutine with the stage. Attributes
// known at the start go in attrs: each later SetAttributes call costs the SDK a slice growth.
func (r *run) begin(parent context.Context, stage rag.Stage, name string, attrs ...attribute.KeyValue) stageRun {
	now := r.p.now()
	r.res.Timings = append(r.res.Timings, rag.StageTiming{Stage: stage, Start: now})
	st := stageRun{r: r, stage: stage, i: len(r.res.Timings) - 1}
	opts := []trace.SpanStartOption{trace.WithTimestamp(now), trace.WithAttributes(AttrStage.String(string(stage)))}
	if len(attrs) > 0 {
		opts = append(opts, trace.WithAttributes(attrs...))
	}
	st.ctx, st.span = r.t.tracer.Start(parent, name, opts...)
	st.ctx = r.t.withStageLabel(st.ctx, stage)
	r.t.setLabels(st.ctx)
	return st
}

// end stops timing the stage, ends its span at the same instant (recording err), records its
// duration in rag_stage_duration_seconds, restores the run's pprof labels, and returns the
// duration.
func (st stageRun) end(err error) time.Duration { return st.endAt(st.r.p.now(), err) }

// endAt is end with the end instant given.
func (st stageRun) endAt(now time.Time, err error) time.Duration {
	r := st.r
	d := now.Sub(r.res.Timings[st.i].Start)
	r.res.Timings[st.i].Duration = d
	endSpan(st.span, now, err)
	r.t.inst.stageDur.Record(st.ctx, seconds(d), r.t.stageSet(st.stage, r.res.Coupling))
	r.t.setLabels(r.ctx)
	return d
}

// startSpan starts the rag.pipeline span at the run's start and returns its context.
func (r *run) startSpan(ctx context.Context) context.Context {
	r.t.inst.inflight.Add(ctx, 1)
	opts := []trace.SpanStartOption{trace.WithTimestamp(r.start)}
	if r.t.tracing {
		attrs := []attribute.KeyValue{
			AttrStage.String(StagePipeline),
			AttrRequestID.String(r.q.ID),
			AttrQueryHash.String(QueryHash(r.q.Question())),
			AttrFaultInjectedMS.Float64(0),
			semconv.GenAIRequestModel(r.q.Model),
		}
		if r.q.UserID != "" {
			attrs = append(attrs, AttrUserID.String(r.q.UserID))
		}
		opts = append(opts, trace.WithAttributes(attrs...))
	}
	ctx, r.span = r.t.tracer.Start(ctx, SpanPipeline, opts...)
	r.spanCtx = ctx
	return ctx
}

// finish ends the rag.pipeline span and records the request-level metrics.
func (r *run) finish(err error) {
	end := r.p.now()
	ctx := r.spanCtx
	if r.span.IsRecording() {
		r.span.SetAttributes(AttrCoupling.String(string(r.res.Coupling)), AttrTopK.Int(r.res.TopK),
			AttrChunkIDs.StringSlice(r.res.ChunkIDs))
	}
	endSpan(r.span, end, err)
	r.t.inst.inflight.Add(ctx, -1)
	cs := r.t.chat(r.q.Model)
	r.t.inst.serverDur.RecordSet(ctx, seconds(end.Sub(r.start)), withError(cs.base, err))
	if err == nil && !r.firstToken.IsZero() {
		r.t.inst.ttft.RecordSet(ctx, seconds(r.res.TimeToFirstToken), cs.base)
		if n := r.res.Usage.CompletionTokens; n > 1 && r.genEnd.After(r.firstToken) {
			r.t.inst.tpot.RecordSet(ctx, seconds(r.genEnd.Sub(r.firstToken))/float64(n-1), cs.base)
		}
	}
	r.t.setLabels(r.parent)
}

func (r *run) elapsed() time.Duration { return r.p.now().Sub(r.start) }

// fail wraps err with the stage it happened in. If the caller's context has ended, that is the
// error to report, whatever the backend made of it; if the run was cancelled because the client
// went away, the sink's error is.
func (r *run) fail(stage rag.Stage, err error) error {
	if perr := r.parent.Err(); perr != nil {
		return rag.AtStage(stage, perr)
	}
	// The first cancellation's cause sticks: a sink error (staged at stream, see sinkFailed)
	// wins over whatever the cancellation made the backend return.
	if cause := context.Cause(r.ctx); rag.StageOf(cause) == rag.StageStream {
		return cause
	}
	return rag.AtStage(stage, err)
}

// sinkFailed reports a sink error as the run's error and cancels what is still running.
func (r *run) sinkFailed(err error) error {
	err = &rag.StageError{Stage: rag.StageStream, Err: err}
	r.cancel(err)
	return err
}

// search searches one shard under a "Query {collection}" span and records its duration.
func (r *run) search(ctx context.Context, shard int, vec []float32) ([]rag.Hit, error) {
	start := r.p.now()
	opts := []trace.SpanStartOption{trace.WithTimestamp(start)}
	if r.t.tracing {
		attrs := make([]attribute.KeyValue, 0, len(r.t.dbAttrs)+1)
		opts = append(opts, trace.WithAttributes(append(append(attrs, r.t.dbAttrs...), AttrShard.Int(shard))...))
	}
	ctx, span := r.t.tracer.Start(ctx, r.t.queryName, opts...)
	hits, err := r.p.ret.Search(ctx, shard, vec, r.res.TopK)
	end := r.p.now()
	if span.IsRecording() {
		span.SetAttributes(semconv.DBResponseReturnedRows(len(hits)))
	}
	endSpan(span, end, err)
	r.t.inst.dbDur.RecordSet(ctx, seconds(end.Sub(start)), withError(r.t.dbSet, err))
	return hits, err
}

// retrieveSync searches the shards one after another.
func (r *run) retrieveSync(st stageRun, vec []float32, n int) ([]rag.Hit, error) {
	perShard := make([][]rag.Hit, n)
	for shard := range n {
		hits, err := r.search(st.ctx, shard, vec)
		if err != nil {
			return nil, r.fail(rag.StageRetrieve, fmt.Errorf("search shard %d: %w", shard, err))
		}
		perShard[shard] = hits
	}
	r.res.ShardsAnswered = n
	return mergeTopK(perShard, r.res.TopK), nil
}

// retrieveFanout searches every shard at once and waits for all of them.
func (r *run) retrieveFanout(st stageRun, vec []float32, n int) ([]rag.Hit, error) {
	perShard := make([][]rag.Hit, n)
	err := r.concurrently(st.ctx, n, func(ctx context.Context, shard int) error {
		hits, err := r.search(ctx, shard, vec)
		if err != nil {
			return fmt.Errorf("search shard %d: %w", shard, err)
		}
		perShard[shard] = hits
		return nil
	})
	if err != nil {
		return nil, r.fail(rag.StageRetrieve, err)
	}
	r.res.ShardsAnswered = n
	return mergeTopK(perShard, r.res.TopK), nil
}

// shardResult is one shard's answer in async coupling.
type shardResult struct {
	shard int
	hits  []rag.Hit
	err   error
}

// retrieveAsync searches every shard at once and returns as soon as the quorum has answered, or
// at the deadline with whatever answered (waiting for a first answer if none has). Searches
// still running go on in r.bg and are reported as late.
func (r *run) retrieveAsync(st stageRun, vec []float32, n int) ([]rag.Hit, error) {
	if n == 0 {
		return nil, nil
	}
	quorum := r.cfg.quorum(n)
	deadline := time.NewTimer(r.cfg.AsyncDeadline)
	defer deadline.Stop()
	searchCtx, cancelSearch := context.WithCancel(st.ctx)
	// Buffered for every shard, so a search never blocks on delivering its answer.
	results := make(chan shardResult, n)
	for shard := range n {
		r.bg.Go(func() {
			hits, err := r.search(searchCtx, shard, vec)
			results <- shardResult{shard: shard, hits: hits, err: err}
		})
	}

	var (
		perShard       [][]rag.Hit
		errs           []error
		pending        = n
		deadlinePassed bool
		answered       = make([]bool, n)
	)
	take := func(sr shardResult) error {
		pending--
		answered[sr.shard] = true
		if sr.err != nil {
			errs = append(errs, fmt.Errorf("search shard %d: %w", sr.shard, sr.err))
			r.res.ShardsFailed++
			r.p.log.Debug("shard failed", "request_id", r.q.ID, "shard", sr.shard, "error", sr.err)
		} else {
			perShard = append(perShard, sr.hits)
		}
		if !r.sink.active() {
			return nil
		}
		ev := Progress{Stage: rag.StageRetrieve, Shard: sr.shard, Hits: len(sr.hits), Failed: sr.err != nil, Elapsed: r.elapsed()}
		if sr.err != nil {
			ev.Message = fmt.Sprintf("shard %d failed after %v: %v", sr.shard, ev.Elapsed.Round(time.Microsecond), sr.err)
		} else {
			ev.Message = fmt.Sprintf("shard %d answered with %d hits after %v", sr.shard, len(sr.hits), ev.Elapsed.Round(time.Microsecond))
		}
		if err := r.sink.progress(ev); err != nil {
			return r.sinkFailed(err)
		}
		return nil
	}
	for pending > 0 && len(perShard) < quorum && !(deadlinePassed && len(perShard) > 0) {
		select {
		case sr := <-results:
			if err := take(sr); err != nil {
				cancelSearch()
				return nil, err
			}
		case <-deadline.C:
			deadlinePassed = true
		case <-r.ctx.Done():
			cancelSearch()
			return nil, r.fail(rag.StageRetrieve, r.ctx.Err())
		}
	}
	// Answers already delivered cost nothing to use.
	for drained := false; pending > 0 && !drained; {
		select {
		case sr := <-results:
			if err := take(sr); err != nil {
				cancelSearch()
				return nil, err
			}
		default:
			drained = true
		}
	}
	if len(perShard) == 0 {
		cancelSearch()
		return nil, r.fail(rag.StageRetrieve, fmt.Errorf("all %d shards failed: %w", n, errors.Join(errs...)))
	}
	r.res.ShardsAnswered = len(perShard)
	r.res.ShardsLate = pending
	if pending == 0 {
		cancelSearch()
	} else {
		r.p.stats.lateShards.Add(uint64(pending))
		r.t.inst.lateShards.Add(st.ctx, int64(pending))
		if st.span.IsRecording() {
			now := r.p.now()
			for shard, ok := range answered {
				if !ok {
					st.span.AddEvent(EventLateShardDropped, trace.WithTimestamp(now), trace.WithAttributes(AttrShard.Int(shard)))
				}
			}
		}
		r.bg.Go(func() {
			defer cancelSearch()
			for range pending {
				r.late(searchCtx, <-results)
			}
		})
	}
	return mergeTopK(perShard, r.res.TopK), nil
}

// late reports a shard that answered after generation started. Searches cancelled because the
// run ended are not news.
func (r *run) late(searchCtx context.Context, sr shardResult) {
	if sr.err != nil && searchCtx.Err() != nil {
		return
	}
	ev := Progress{Stage: rag.StageRetrieve, Shard: sr.shard, Hits: len(sr.hits), Late: true, Failed: sr.err != nil, Elapsed: r.elapsed()}
	r.p.log.Debug("late shard dropped", "request_id", r.q.ID, "shard", sr.shard, "hits", len(sr.hits), "elapsed", ev.Elapsed, "error", sr.err)
	if !r.sink.active() {
		return
	}
	if sr.err != nil {
		ev.Message = fmt.Sprintf("shard %d failed late after %v: %v", sr.shard, ev.Elapsed.Round(time.Microsecond), sr.err)
	} else {
		ev.Message = fmt.Sprintf("shard %d answered late with %d hits after %v: dropped", sr.shard, len(sr.hits), ev.Elapsed.Round(time.Microsecond))
	}
	if err := r.sink.progress(ev); err != nil {
		r.sinkFailed(err)
	}
}

// concurrently runs f(ctx, i) for i in [0, n) at once and waits for all, ctx derived from
// parent. The first error cancels the others' ctx and is returned.
func (r *run) concurrently(parent context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for i := range n {
		wg.Go(func() {
			if err := f(ctx, i); err != nil {
				once.Do(func() {
					first = err
					cancel()
				})
			}
		})
	}
	wg.Wait()
	return first
}

// mergeTopK merges per-shard hits into the k best overall: by score, best first, ties broken by
// chunk id so that the order does not depend on which shard answered first. A chunk found by
// two shards is kept once, with its best score.
func mergeTopK(perShard [][]rag.Hit, k int) []rag.Hit {
	total := 0
	for _, hits := range perShard {
		total += len(hits)
	}
	all := make([]rag.Hit, 0, total)
	for _, hits := range perShard {
		all = append(all, hits...)
	}
	slices.SortFunc(all, func(a, b rag.Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return strings.Compare(a.ChunkID, b.ChunkID)
	})
	out := all[:0]
	for _, h := range all {
		if len(out) == k {
			break
		}
		if !slices.ContainsFunc(out, func(o rag.Hit) bool { return o.ChunkID == h.ChunkID }) {
			out = append(out, h)
		}
	}
	return out
}

// lookup fetches one chunk, counting how the doc store answered when it says.
func (r *run) lookup(ctx context.Context, id string) (rag.Chunk, error) {
	if r.t.cache == nil {
		return r.p.docs.Get(ctx, id)
	}
	c, result, err := r.t.cache.LookupResult(ctx, id)
	switch result {
	case "hit":
		r.cacheHits.Add(1)
	case "miss":
		r.cacheMisses.Add(1)
	case "blocked":
		r.cacheBlocked.Add(1)
	}
	r.t.inst.cacheReq.Add(ctx, 1, r.t.cacheSet(result))
	return c, err
}

// fetchSequential fetches the chunks one by one, in rank order.
func (r *run) fetchSequential(ctx context.Context, hits []rag.Hit) ([]rag.Chunk, error) {
	chunks := make([]rag.Chunk, 0, len(hits))
	for _, h := range hits {
		c, err := r.lookup(ctx, h.ChunkID)
		if errors.Is(err, rag.ErrNotFound) {
			r.missing()
			continue
		}
		if err != nil {
			return nil, r.fail(rag.StageFetch, fmt.Errorf("fetch chunk %q: %w", h.ChunkID, err))
		}
		c.ID = h.ChunkID
		chunks = append(chunks, c)
	}
	return chunks, nil
}

// fetchConcurrent fetches every chunk at once and keeps them in rank order.
func (r *run) fetchConcurrent(ctx context.Context, hits []rag.Hit) ([]rag.Chunk, error) {
	chunks := make([]rag.Chunk, len(hits))
	found := make([]bool, len(hits))
	err := r.concurrently(ctx, len(hits), func(ctx context.Context, i int) error {
		c, err := r.lookup(ctx, hits[i].ChunkID)
		if errors.Is(err, rag.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fetch chunk %q: %w", hits[i].ChunkID, err)
		}
		c.ID = hits[i].ChunkID
		chunks[i], found[i] = c, true
		return nil
	})
	if err != nil {
		return nil, r.fail(rag.StageFetch, err)
	}
	out := chunks[:0]
	for i, c := range chunks {
		if found[i] {
			out = append(out, c)
		} else {
			r.missing()
		}
	}
	return out, nil
}

func (r *run) missing() {
	r.res.ChunksMissing++
	r.p.stats.chunksMissing.Add(1)
}

// buildMessages puts the retrieved chunks, numbered in rank order, into a system message after
// the system prompt, followed by the conversation.
func buildMessages(systemPrompt string, chunks []rag.Chunk, conversation []rag.Message) []rag.Message {
	size := len(systemPrompt)
	for _, c := range chunks {
		size += len(c.Title) + len(c.Text) + 8
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(systemPrompt)
	for i, c := range chunks {
		b.WriteString("\n\n[")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString("] ")
		b.WriteString(c.Title)
		b.WriteByte('\n')
		b.WriteString(c.Text)
	}
	msgs := make([]rag.Message, 0, len(conversation)+1)
	msgs = append(msgs, rag.Message{Role: "system", Content: b.String()})
	return append(msgs, conversation...)
}

// generate runs the LLM under a "chat {model}" span and streams its deltas to the sink under a
// rag.stream span.
func (r *run) generate(msgs []rag.Message) (err error) {
	if r.res.Coupling == rag.CouplingAsync && r.sink.active() {
		ev := Progress{Stage: rag.StageGenerate, Shard: -1, Hits: len(r.res.ChunkIDs), Elapsed: r.elapsed()}
		ev.Message = fmt.Sprintf("generating with %d chunks from %d of %d shards; %d late, %d failed", len(r.res.ChunkIDs), r.res.ShardsAnswered, r.res.Shards, r.res.ShardsLate, r.res.ShardsFailed)
		if err := r.sink.progress(ev); err != nil {
			return r.sinkFailed(err)
		}
	}
	cs := r.t.chat(r.q.Model)
	var attrs []attribute.KeyValue
	if r.t.tracing {
		attrs = append(cs.base.ToSlice(), semconv.GenAIRequestMaxTokens(r.q.MaxTokens),
			semconv.GenAIRequestTemperature(r.q.Temperature), semconv.GenAIRequestStream(r.sink.active()))
		if r.t.capture {
			attrs = append(attrs, semconv.GenAIInputMessagesKey.String(messagesJSON(msgs)))
		}
	}
	gen := r.begin(r.ctx, rag.StageGenerate, "chat "+r.q.Model, attrs...)
	gi := gen.i

	// The stream stage: a span from the first hand-over to the end of the last, and the time
	// spent in the sink, which is what Server-Timing reports.
	var (
		si         = -1 // index of the stream stage, once the first delta is handed over
		streamSpan trace.Span
		streamCtx  context.Context
		streamEnd  time.Time
		chunks     int
	)
	genEnd := func() time.Time { return r.res.Timings[gi].Start.Add(r.res.Timings[gi].Duration) }
	defer func() {
		end := genEnd()
		r.genEnd = end
		if gen.span.IsRecording() && err == nil {
			attrs := []attribute.KeyValue{
				semconv.GenAIResponseModel(r.q.Model),
				semconv.GenAIUsageInputTokens(r.res.Usage.PromptTokens),
				semconv.GenAIUsageOutputTokens(r.res.Usage.CompletionTokens),
				semconv.GenAIResponseFinishReasons(r.res.FinishReason),
			}
			if !r.firstToken.IsZero() {
				attrs = append(attrs, semconv.GenAIResponseTimeToFirstChunk(seconds(r.firstToken.Sub(r.res.Timings[gi].Start))))
			}
			if r.t.capture {
				attrs = append(attrs, semconv.GenAIOutputMessagesKey.String(outputJSON(r.answer.String(), r.res.FinishReason)))
			}
			gen.span.SetAttributes(attrs...)
		}
		genErr := err
		if rag.StageOf(err) == rag.StageStream {
			genErr = nil // the client left; the engine did nothing wrong
		}
		gen.endAt(end, genErr)
		r.t.inst.clientDur.RecordSet(gen.ctx, seconds(r.res.Timings[gi].Duration), withError(cs.base, genErr))
		if genErr == nil && r.res.Usage != (rag.Usage{}) {
			r.t.inst.tokenUsage.RecordSet(gen.ctx, int64(r.res.Usage.PromptTokens), cs.input)
			r.t.inst.tokenUsage.RecordSet(gen.ctx, int64(r.res.Usage.CompletionTokens), cs.output)
		}
		if si >= 0 {
			if streamSpan.IsRecording() {
				streamSpan.SetAttributes(AttrStreamChunks.Int(chunks),
					AttrStreamWriteMS.Float64(float64(r.res.Timings[si].Duration)/float64(time.Millisecond)))
			}
			var streamErr error
			if rag.StageOf(err) == rag.StageStream {
				streamErr = err
			}
			endSpan(streamSpan, streamEnd, streamErr)
			r.t.inst.stageDur.Record(streamCtx, seconds(r.res.Timings[si].Duration), r.t.stageSet(rag.StageStream, r.res.Coupling))
		}
	}()

	dec, err := r.inject(gen)
	defer func() { r.observe(rag.StageGenerate, r.res.Timings[gi].Duration, dec) }()
	if err != nil {
		r.res.Timings[gi].Duration = r.p.now().Sub(r.res.Timings[gi].Start)
		return r.fail(rag.StageGenerate, err)
	}
	stream, err := r.p.gen.Generate(gen.ctx, rag.GenRequest{
		ID: r.q.ID, Model: r.q.Model, Messages: msgs, MaxTokens: r.q.MaxTokens, Temperature: r.q.Temperature,
	})
	if err != nil {
		r.res.Timings[gi].Duration = r.p.now().Sub(r.res.Timings[gi].Start)
		return r.fail(rag.StageGenerate, err)
	}
	// Close frees what the engine holds for this generation (its KV-cache blocks) at once,
	// whether the stream ended, failed or the client left.
	defer stream.Close()

	completionTokens := 0
	for {
		d, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		received := r.p.now()
		r.res.Timings[gi].Duration = received.Sub(r.res.Timings[gi].Start)
		if err != nil {
			return r.fail(rag.StageGenerate, err)
		}
		if r.res.TimeToFirstToken == 0 && d.Text != "" {
			r.res.TimeToFirstToken = received.Sub(r.start)
			r.firstToken = received
			if gen.span.IsRecording() {
				gen.span.AddEvent(EventFirstToken, trace.WithTimestamp(received))
			}
		}
		completionTokens += d.Tokens
		if d.Usage != nil {
			r.res.Usage = *d.Usage
		}
		if d.FinishReason != "" {
			r.res.FinishReason = d.FinishReason
		}
		if r.t.capture {
			r.answer.WriteString(d.Text)
		}

		handOver := r.p.now()
		if si < 0 {
			si = len(r.res.Timings)
			r.res.Timings = append(r.res.Timings, rag.StageTiming{Stage: rag.StageStream, Start: handOver})
			streamCtx, streamSpan = r.t.tracer.Start(r.ctx, SpanStream, trace.WithTimestamp(handOver),
				trace.WithAttributes(AttrStage.String(string(rag.StageStream))))
			streamCtx = r.t.withStageLabel(streamCtx, rag.StageStream)
		}
		r.t.setLabels(streamCtx)
		err = r.sink.delta(d)
		streamEnd = r.p.now()
		r.t.setLabels(gen.ctx)
		r.res.Timings[si].Duration += streamEnd.Sub(handOver)
		chunks++
		if err != nil {
			return r.sinkFailed(err)
		}
		if d.FinishReason != "" {
			break
		}
		if dec.CutAfterTokens > 0 && completionTokens >= dec.CutAfterTokens {
			return r.fail(rag.StageGenerate, dec.CutErr)
		}
	}
	if r.res.FinishReason == "" {
		r.res.FinishReason = "stop" // the engine ended the stream normally without saying why
	}
	if r.res.Usage == (rag.Usage{}) {
		r.res.Usage = rag.Usage{PromptTokens: rag.PromptTokens(msgs), CompletionTokens: completionTokens}
	}
	return nil
}

// guardedSink serializes sink calls from Run and the late-shard collector, and drops them once
// Run is returning. A nil sink discards everything.
type guardedSink struct {
	mu     sync.Mutex
	sink   Sink
	closed bool
}

func (g *guardedSink) progress(ev Progress) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.sink == nil {
		return nil
	}
	return g.sink.Progress(ev)
}

func (g *guardedSink) delta(d rag.Delta) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.sink == nil {
		return nil
	}
	return g.sink.Delta(d)
}

// active reports whether there is a sink to call, so that events nobody reads are not built.
func (g *guardedSink) active() bool { return g.sink != nil }

func (g *guardedSink) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
