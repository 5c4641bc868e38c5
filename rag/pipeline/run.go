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

	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
)

// Request is one query bound to the configuration it runs with. Prepare resolves it once, at the
// start of a request, from one snapshot of the configuration, so that the coupling mode the
// caller acts on (the HTTP API streams retrieval progress only in async coupling) is the one the
// run uses, whatever SetConfig does meanwhile.
type Request struct {
	rag.Query
	// Coupling is the query's coupling, or the configured default when it sets none.
	Coupling rag.Coupling
	// TopK is the query's top_k, or the configured default when it sets none.
	TopK int

	cfg      *Config
	resolved bool // Coupling and TopK are valid
	served   bool // the generator serves Model
}

// Prepare binds q to the current configuration. It does not fail: a query that is not valid
// (an unknown model, a bad coupling) fails when it runs, inside the run's span.
func (p *Pipeline) Prepare(q rag.Query) Request {
	cfg := p.cfg.Load()
	req := Request{Query: q, Coupling: q.Coupling, TopK: q.TopK, cfg: cfg}
	if req.Coupling == "" {
		req.Coupling = cfg.Coupling
	}
	if req.TopK == 0 {
		req.TopK = cfg.TopK
	}
	req.served = slices.Contains(p.gen.Models(), q.Model)
	req.resolved = validCoupling(req.Coupling) && q.TopK >= 0 && q.TopK <= MaxTopK
	return req
}

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
func (p *Pipeline) Run(ctx context.Context, q rag.Query, sink Sink) (*Result, error) {
	req := p.Prepare(q)
	return p.Do(ctx, &req, sink)
}

// Do runs a prepared request, as Run does. It does not keep req.
func (p *Pipeline) Do(ctx context.Context, req *Request, sink Sink) (res *Result, err error) {
	p.stats.runs.Add(1)
	p.stats.inFlight.Add(1)
	r := &run{p: p, req: *req, parent: ctx, start: p.now(), sink: &guardedSink{}}
	r.sink.reset(sink)
	res = &Result{Coupling: req.Coupling, TopK: req.TopK}
	var gen generation
	ctx = r.startRun(ctx)
	defer func() {
		res.Timings = r.timings
		r.finishRun(res, &gen, err)
		p.stats.inFlight.Add(-1)
		if err != nil {
			p.stats.failed.Add(1)
		}
	}()
	if err := r.validate(); err != nil {
		return res, err
	}
	p.countCoupling(r.req.Coupling)
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	defer r.cleanup()
	if r.req.Mode == rag.ModeAgentic {
		err = r.executeAgentic(res, &gen)
	} else {
		err = r.execute(res, &gen)
	}
	return res, err
}

// run is the state of one Do.
type run struct {
	p   *Pipeline
	req Request

	parent context.Context         // the caller's context
	ctx    context.Context         // the run's, also cancelled when a late progress event finds the client gone
	cancel context.CancelCauseFunc // cancels ctx; the cause is the sink error
	sink   *guardedSink            // shared with the run's forks

	release func()         // the admission slot, if one was taken
	bg      sync.WaitGroup // async: searches still running after the cut, and their collector

	// What the recorder keeps of the run (recorder.go).
	start      time.Time         // when the run started, on the pipeline's clock
	timings    []rag.StageTiming // -> Result.Timings
	root       trace.Span        // rag.pipeline
	rootCtx    context.Context   // parent with the rag.pipeline span
	under      context.Context   // agentic: the execute_tool span the retrieval stages run under
	mark       time.Time         // when the last stage ended, at which the next one begins
	faultDelay time.Duration     // latency injected by fault rules so far

	forks []*run // agentic: the runs of parallel searches (fork), awaited by cleanup
}

// validate checks what Prepare resolved and what the query asks for.
func (r *run) validate() error {
	q := &r.req
	if !q.served {
		models := r.p.gen.Models()
		return fmt.Errorf("%w: model %q is not served here; use one of: %s", rag.ErrUnknownModel, bound(q.Model, MaxRecordedLen), strings.Join(models, ", "))
	}
	if !validCoupling(q.Coupling) {
		return fmt.Errorf("%w: coupling %q: want sync, fanout or async", rag.ErrInvalidRequest, bound(string(q.Query.Coupling), MaxRecordedLen))
	}
	switch {
	case q.Query.TopK < 0 || q.Query.TopK > MaxTopK:
		return fmt.Errorf("%w: top_k must be between 1 and %d, got %d", rag.ErrInvalidRequest, MaxTopK, q.Query.TopK)
	case q.MaxTokens < 0:
		return fmt.Errorf("%w: max_tokens must not be negative, got %d", rag.ErrInvalidRequest, q.MaxTokens)
	case !slices.ContainsFunc(q.Messages, func(m rag.Message) bool { return m.Role == "user" }):
		return fmt.Errorf("%w: messages must contain a user message to answer", rag.ErrInvalidRequest)
	case len(q.Tools) > 0:
		return fmt.Errorf(`%w: tools: the RAG service brings its own search tool ("rag": {"mode": "agentic"}) and does not take a client's`, rag.ErrInvalidRequest)
	case q.Mode != rag.ModeSingle && q.Mode != rag.ModeAgentic:
		return fmt.Errorf("%w: mode %q: want single or agentic", rag.ErrInvalidRequest, bound(string(q.Mode), 32))
	}
	return nil
}

// execute runs the stages in order; each returns what the next needs, and execute puts what the
// caller is told into res.
func (r *run) execute(res *Result, gen *generation) error {
	if err := r.admit(); err != nil {
		return err
	}
	question := r.req.Question()
	vec, err := r.embed(question)
	if err != nil {
		return err
	}
	ret, err := r.retrieve(question, vec)
	res.Shards, res.ShardsAnswered, res.ShardsLate, res.ShardsFailed = ret.shards, ret.answered, ret.lateCount, ret.failed
	if err != nil {
		return err
	}
	f, err := r.fetch(ret.hits)
	res.ChunksMissing = f.missing
	if err != nil {
		return err
	}
	res.ChunkIDs = make([]string, len(f.chunks))
	for i, c := range f.chunks {
		res.ChunkIDs[i] = c.ID
	}
	if err := r.announceGeneration(res); err != nil {
		return err
	}
	err = r.generateWith(buildMessages(r.req.cfg.SystemPrompt, r.req.cfg.ChunkOrder, f.chunks, r.req.Messages), nil, "", res, gen)
	res.Usage = gen.usage
	return err
}

// admit takes an admission slot, if the pipeline has an admitter.
func (r *run) admit() error {
	a := r.p.admitter
	if a == nil {
		return nil
	}
	st := r.begin(rag.StageAdmission, rag.SpanAdmission)
	var (
		release func()
		wait    time.Duration
	)
	waiter := r.p.rec.waiter
	dec, err := r.inject(st)
	switch {
	case err != nil:
	case waiter != nil:
		release, wait, err = waiter.AcquireWait(st.ctx)
	default:
		release, err = a.Acquire(st.ctx)
	}
	r.observe(rag.StageAdmission, r.endAdmission(st, err, wait, waiter != nil, dec.Delay), dec)
	if err != nil {
		return r.fail(rag.StageAdmission, err)
	}
	r.release = release
	return nil
}

// embed turns the question into a vector.
func (r *run) embed(question string) ([]float32, error) {
	st := r.begin(rag.StageEmbed, r.p.rec.embedSpanName())
	dec, err := r.inject(st)
	var vec []float32
	if err == nil {
		vec, err = r.p.emb.Embed(st.ctx, question)
		if err != nil {
			err = fmt.Errorf("embed question: %w", err)
		}
	}
	r.observe(rag.StageEmbed, r.endEmbed(st, err, rag.CountTokens(question)), dec)
	if err != nil {
		return nil, r.fail(rag.StageEmbed, err)
	}
	return vec, nil
}

// retrieval is what the retrieve stage found.
type retrieval struct {
	hits      []rag.Hit
	shards    int       // shards searched
	answered  int       // shards whose hits were used
	failed    int       // async: shards that failed before the cut
	lateCount int       // async: shards still searching at the cut
	late      []bool    // async: which shards were late, by shard
	cut       time.Time // async: when generation was allowed to start
}

// retrieve searches the shards as the coupling mode says.
func (r *run) retrieve(question string, vec []float32) (retrieval, error) {
	st := r.begin(rag.StageRetrieve, r.p.rec.retrievalSpanName())
	ret := retrieval{shards: r.p.ret.Shards()}
	dec, err := r.inject(st)
	if err == nil {
		switch r.req.Coupling {
		case rag.CouplingSync:
			err = r.retrieveSync(st.ctx, vec, &ret)
		case rag.CouplingFanout:
			err = r.retrieveFanout(st.ctx, vec, &ret)
		case rag.CouplingAsync:
			err = r.retrieveAsync(st.ctx, vec, &ret)
		}
	}
	if err != nil {
		err = r.fail(rag.StageRetrieve, err)
	}
	r.observe(rag.StageRetrieve, r.endRetrieve(st, err, question, &ret), dec)
	return ret, err
}

// fetched is what the fetch stage got from the doc store.
type fetched struct {
	chunks  []rag.Chunk
	missing int                          // hits whose chunk the doc store did not have
	results [rag.NumCacheResults + 1]int // lookups by how the cache answered, when the store says; the last: other
}

// fetch fetches the chunks of hits, in rank order.
func (r *run) fetch(hits []rag.Hit) (*fetched, error) {
	st := r.begin(rag.StageFetch, rag.SpanFetch)
	f := &fetched{}
	dec, err := r.inject(st)
	switch {
	case err != nil:
	case r.req.Coupling == rag.CouplingSync:
		err = r.fetchSequential(st.ctx, hits, f)
	default:
		err = r.fetchConcurrent(st.ctx, hits, f)
	}
	if err != nil {
		err = r.fail(rag.StageFetch, err)
	}
	if f.missing > 0 {
		r.p.stats.chunksMissing.Add(uint64(f.missing))
	}
	r.observe(rag.StageFetch, r.endFetch(st, err, len(hits), f), dec)
	return f, err
}

// cleanup runs when Run returns: no sink call may follow, searches still running are cancelled
// and awaited, and only then is the admission slot given back.
func (r *run) cleanup() {
	r.sink.close()
	r.cancel(nil)
	r.bg.Wait()
	for _, f := range r.forks {
		f.bg.Wait()
	}
	if r.release != nil {
		r.release()
	}
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

// shardAnswer is one shard's answer: its hits, or why there are none, and when it came.
type shardAnswer struct {
	span   shardSpan
	hits   []rag.Hit
	err    error
	end    time.Time
	hedged bool // a second request went out (Config.HedgeAfter)
}

// search searches one shard under its Query span, started by the run's goroutine; with
// Config.HedgeAfter set, it hedges (see hedgedSearch).
func (r *run) search(a *shardAnswer, vec []float32) {
	if d := r.req.cfg.HedgeAfter; d > 0 {
		a.hits, a.err, a.hedged = r.hedgedSearch(a.span.ctx, a.span.shard, vec, d)
	} else {
		a.hits, a.err = r.p.ret.Search(a.span.ctx, a.span.shard, vec, r.req.TopK)
	}
	a.end = r.p.now()
}

// hedgedSearch searches shard, and when no answer came within after, sends the same search a
// second time: the first success wins (a failure waits for the other request) and the request
// still running is cancelled and waited for. hedged reports whether the second request went out.
func (r *run) hedgedSearch(ctx context.Context, shard int, vec []float32, after time.Duration) (hits []rag.Hit, err error, hedged bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		hits []rag.Hit
		err  error
	}
	answers := make(chan answer, 2) // buffered: the loser never blocks
	send := func() {
		h, err := r.p.ret.Search(ctx, shard, vec, r.req.TopK)
		answers <- answer{h, err}
	}
	go send()
	timer := time.NewTimer(after)
	defer timer.Stop()
	select {
	case a := <-answers:
		return a.hits, a.err, false
	case <-timer.C:
	}
	go send()
	a := <-answers
	if a.err == nil {
		cancel()
		<-answers // joined: no search outlives the run
	} else if b := <-answers; b.err == nil {
		a = b
	}
	return a.hits, a.err, true
}

// retrieveSync searches the shards one after another.
func (r *run) retrieveSync(ctx context.Context, vec []float32, ret *retrieval) error {
	perShard := make([][]rag.Hit, ret.shards)
	for shard := range ret.shards {
		a := shardAnswer{span: r.beginShard(ctx, shard, r.p.now())}
		r.search(&a, vec)
		r.endShard(&a.span, a.end, len(a.hits), a.hedged, a.err)
		if a.err != nil {
			return fmt.Errorf("search shard %d: %w", shard, a.err)
		}
		perShard[shard] = a.hits
	}
	ret.answered = ret.shards
	ret.hits = mergeTopK(perShard, r.req.TopK)
	return nil
}

// startShards starts the Query spans of every shard at one instant and returns their answers to
// fill.
func (r *run) startShards(ctx context.Context, n int) []shardAnswer {
	now := r.p.now()
	answers := make([]shardAnswer, n)
	for i := range answers {
		answers[i].span = r.beginShard(ctx, i, now)
	}
	return answers
}

// retrieveFanout searches every shard at once and waits for all of them. The first failure
// cancels the other searches (through the run's context: the failure fails the run) and is the
// stage's error.
func (r *run) retrieveFanout(ctx context.Context, vec []float32, ret *retrieval) error {
	answers := r.startShards(ctx, ret.shards)
	var (
		wg    sync.WaitGroup
		first atomic.Int32
	)
	first.Store(-1)
	for i := range answers {
		wg.Go(func() {
			a := &answers[i]
			r.search(a, vec)
			if a.err != nil && first.CompareAndSwap(-1, int32(i)) {
				r.cancel(errSiblingFailed)
			}
		})
	}
	wg.Wait()
	perShard := make([][]rag.Hit, len(answers))
	for i := range answers {
		a := &answers[i]
		r.endShard(&a.span, a.end, len(a.hits), a.hedged, a.err)
		perShard[i] = a.hits
	}
	if i := first.Load(); i >= 0 {
		return fmt.Errorf("search shard %d: %w", i, answers[i].err)
	}
	ret.answered = len(answers)
	ret.hits = mergeTopK(perShard, r.req.TopK)
	return nil
}

// retrieveAsync searches every shard at once and returns as soon as the quorum has answered, or
// at the deadline with whatever answered (waiting for a first answer if none has). Searches
// still running go on in r.bg and are reported as late.
func (r *run) retrieveAsync(ctx context.Context, vec []float32, ret *retrieval) error {
	n := ret.shards
	if n == 0 {
		return nil
	}
	cfg := r.req.cfg
	quorum := cfg.quorum(n)
	deadline := time.NewTimer(cfg.AsyncDeadline)
	defer deadline.Stop()
	searchCtx, cancelSearch := context.WithCancel(ctx)
	answers := r.startShards(searchCtx, n)
	// Buffered for every shard, so a search never blocks on delivering its answer.
	results := make(chan *shardAnswer, n)
	for i := range answers {
		r.bg.Go(func() {
			r.search(&answers[i], vec)
			results <- &answers[i]
		})
	}

	var (
		perShard       [][]rag.Hit
		errs           []error
		pending        = n
		deadlinePassed bool
	)
	ret.late = make([]bool, n)
	for i := range ret.late {
		ret.late[i] = true
	}
	take := func(a *shardAnswer) error {
		pending--
		ret.late[a.span.shard] = false
		r.endShard(&a.span, a.end, len(a.hits), a.hedged, a.err)
		if a.err != nil {
			errs = append(errs, fmt.Errorf("search shard %d: %w", a.span.shard, a.err))
			ret.failed++
			r.p.log.Debug("shard failed", "request_id", r.req.ID, "shard", a.span.shard, "error", a.err)
		} else {
			perShard = append(perShard, a.hits)
		}
		return r.progressShard(a, false)
	}
	for pending > 0 && len(perShard) < quorum && !(deadlinePassed && len(perShard) > 0) {
		select {
		case a := <-results:
			if err := take(a); err != nil {
				cancelSearch()
				return err
			}
		case <-deadline.C:
			deadlinePassed = true
		case <-r.ctx.Done():
			cancelSearch()
			return r.ctx.Err()
		}
	}
	// Answers already delivered cost nothing to use.
	for drained := false; pending > 0 && !drained; {
		select {
		case a := <-results:
			if err := take(a); err != nil {
				cancelSearch()
				return err
			}
		default:
			drained = true
		}
	}
	if len(perShard) == 0 {
		cancelSearch()
		return fmt.Errorf("all %d shards failed: %w", n, errors.Join(errs...))
	}
	ret.answered = len(perShard)
	ret.lateCount = pending
	ret.cut = r.p.now()
	if pending == 0 {
		cancelSearch()
	} else {
		r.p.stats.lateShards.Add(uint64(pending))
		r.bg.Go(func() {
			defer cancelSearch()
			for range pending {
				r.late(searchCtx, <-results)
			}
		})
	}
	ret.hits = mergeTopK(perShard, r.req.TopK)
	return nil
}

// progressShard tells the client, in async coupling, that a shard answered or failed.
func (r *run) progressShard(a *shardAnswer, late bool) error {
	if !r.sink.active() {
		return nil
	}
	ev := Progress{Stage: rag.StageRetrieve, Shard: a.span.shard, Hits: len(a.hits), Late: late, Failed: a.err != nil, Elapsed: r.elapsed()}
	took := ev.Elapsed.Round(time.Microsecond)
	switch {
	case a.err != nil && late:
		ev.Message = fmt.Sprintf("shard %d failed late after %v: %v", a.span.shard, took, a.err)
	case a.err != nil:
		ev.Message = fmt.Sprintf("shard %d failed after %v: %v", a.span.shard, took, a.err)
	case late:
		ev.Message = fmt.Sprintf("shard %d answered late with %d hits after %v: dropped", a.span.shard, len(a.hits), took)
	default:
		ev.Message = fmt.Sprintf("shard %d answered with %d hits after %v", a.span.shard, len(a.hits), took)
	}
	if err := r.sink.progress(ev); err != nil {
		return r.sinkFailed(err)
	}
	return nil
}

// late reports a shard that answered after generation started. Searches cancelled because the
// run ended are not news.
func (r *run) late(searchCtx context.Context, a *shardAnswer) {
	r.endShard(&a.span, a.end, len(a.hits), a.hedged, a.err)
	if a.err != nil && searchCtx.Err() != nil {
		return
	}
	r.p.log.Debug("late shard dropped", "request_id", r.req.ID, "shard", a.span.shard, "hits", len(a.hits), "error", a.err)
	_ = r.progressShard(a, true)
}

// mergeTopK merges per-shard hits into the k best overall: by score, best first, ties broken by
// chunk id so that the order does not depend on which shard answered first. A chunk found by
// two shards is kept once, with its best score.
func mergeTopK(perShard [][]rag.Hit, k int) []rag.Hit {
	all := slices.Concat(perShard...)
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

// lookup fetches one chunk, counting how the doc store answered when it says. Concurrent
// lookups count under mu.
func (r *run) lookup(ctx context.Context, id string, f *fetched, mu *sync.Mutex) (rag.Chunk, error) {
	cache := r.p.rec.cache
	if cache == nil {
		return r.p.docs.Get(ctx, id)
	}
	c, result, err := cache.LookupResult(ctx, id)
	mu.Lock()
	f.results[min(int(result), len(f.results)-1)]++
	mu.Unlock()
	return c, err
}

// fetchSequential fetches the chunks one by one, in rank order.
func (r *run) fetchSequential(ctx context.Context, hits []rag.Hit, f *fetched) error {
	var mu sync.Mutex
	f.chunks = make([]rag.Chunk, 0, len(hits))
	for _, h := range hits {
		c, err := r.lookup(ctx, h.ChunkID, f, &mu)
		if errors.Is(err, rag.ErrNotFound) {
			f.missing++
			continue
		}
		if err != nil {
			return fmt.Errorf("fetch chunk %q: %w", h.ChunkID, err)
		}
		c.ID = h.ChunkID
		f.chunks = append(f.chunks, c)
	}
	return nil
}

// errSiblingFailed is the cause of the run's cancellation when one of the concurrent searches
// or fetches of a stage (or one of an agentic step's parallel search calls) failed; the stage
// reports that failure, not this.
var errSiblingFailed = errors.New("a concurrent search or fetch failed")

// fetchConcurrent fetches every chunk at once and keeps them in rank order. The first failure
// cancels the other fetches (through the run's context, as in retrieveFanout) and is the stage's
// error; a chunk the store does not have is skipped.
func (r *run) fetchConcurrent(ctx context.Context, hits []rag.Hit, f *fetched) error {
	type lookup struct {
		chunk rag.Chunk
		err   error
	}
	lookups := make([]lookup, len(hits))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first atomic.Int32
	)
	first.Store(-1)
	for i, h := range hits {
		wg.Go(func() {
			l := &lookups[i]
			l.chunk, l.err = r.lookup(ctx, h.ChunkID, f, &mu)
			if l.err != nil && !errors.Is(l.err, rag.ErrNotFound) && first.CompareAndSwap(-1, int32(i)) {
				r.cancel(errSiblingFailed)
			}
		})
	}
	wg.Wait()
	if i := first.Load(); i >= 0 {
		return fmt.Errorf("fetch chunk %q: %w", hits[i].ChunkID, lookups[i].err)
	}
	f.chunks = make([]rag.Chunk, 0, len(hits))
	for i, l := range lookups {
		if l.err != nil {
			f.missing++
			continue
		}
		l.chunk.ID = hits[i].ChunkID
		f.chunks = append(f.chunks, l.chunk)
	}
	return nil
}

// buildMessages puts the retrieved chunks, numbered in rank order (or in id order, for
// ChunkOrderStable), into a system message after the system prompt, followed by the
// conversation.
func buildMessages(systemPrompt string, order ChunkOrder, chunks []rag.Chunk, conversation []rag.Message) []rag.Message {
	if order == ChunkOrderStable && !slices.IsSortedFunc(chunks, byChunkID) {
		chunks = slices.SortedStableFunc(slices.Values(chunks), byChunkID) // a copy: chunks stay in rank order
	}
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

func byChunkID(a, b rag.Chunk) int { return strings.Compare(a.ID, b.ID) }

// announceGeneration tells the client, in async coupling, that generation starts and with what.
func (r *run) announceGeneration(res *Result) error {
	if r.req.Coupling != rag.CouplingAsync || !r.sink.active() {
		return nil
	}
	ev := Progress{Stage: rag.StageGenerate, Shard: -1, Hits: len(res.ChunkIDs), Elapsed: r.elapsed()}
	ev.Message = fmt.Sprintf("generating with %d chunks from %d of %d shards; %d late, %d failed", len(res.ChunkIDs), res.ShardsAnswered, res.Shards, res.ShardsLate, res.ShardsFailed)
	if err := r.sink.progress(ev); err != nil {
		return r.sinkFailed(err)
	}
	return nil
}

// generation is what one generate stage (one model call) did, beyond what it puts in the Result.
type generation struct {
	msgs       []rag.Message   // the prompt
	firstToken time.Time       // when the first delta carrying text arrived
	firstChunk time.Time       // when the first delta carrying text or a tool call arrived
	end        time.Time       // when the last delta arrived, or the stage failed
	answer     strings.Builder // the answer: with content capture on, or tools offered
	usage      rag.Usage       // the call's token counts
	calls      []rag.ToolCall  // the tools the model called
	stream     streamStage
}

// generateWith runs the LLM under a "chat {model}" span, offering it tools (none for a
// single-shot request), and streams its text to the sink under a rag.stream span. It sets res's
// finish reason and, at the first text of the run, its time to first token, and fills gen with
// the call's usage, the tool calls it made and what the recorder needs of the stage.
func (r *run) generateWith(msgs []rag.Message, tools []rag.Tool, toolChoice string, res *Result, gen *generation) (err error) {
	gen.msgs = msgs
	gen.stream.i = -1
	st := r.begin(rag.StageGenerate, r.chatSpanName())
	start := r.timings[st.i].Start
	gen.end = start
	dec, err := r.inject(st)
	defer func() {
		if gen.end.Equal(start) {
			gen.end = r.p.now()
		}
		r.endGenerate(st, err, r.sink.active(), gen, res)
		r.observe(rag.StageGenerate, gen.end.Sub(start), dec)
	}()
	if err != nil {
		return r.fail(rag.StageGenerate, err)
	}
	stream, err := r.p.gen.Generate(st.ctx, rag.GenRequest{
		ID: r.req.ID, Model: r.req.Model, Messages: msgs, MaxTokens: r.req.MaxTokens, Temperature: r.req.Temperature,
		Priority: r.req.Priority, Tools: tools, ToolChoice: toolChoice, ParallelToolCalls: len(tools) > 0 && r.req.ParallelToolCalls,
	})
	if err != nil {
		return r.fail(rag.StageGenerate, err)
	}
	// Close frees what the engine holds for this generation (its KV-cache blocks) at once,
	// whether the stream ended, failed or the client left.
	defer func() { _ = stream.Close() }()

	completionTokens := 0
	res.FinishReason = ""
	for {
		d, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		prev := gen.end
		gen.end = r.p.now()
		if err != nil {
			return r.fail(rag.StageGenerate, err)
		}
		if chunk := d.Text != "" || len(d.ToolCalls) > 0; chunk && gen.firstChunk.IsZero() {
			gen.firstChunk = gen.end
		} else if chunk {
			r.chunkArrived(st, prev, gen.end)
		}
		if gen.firstToken.IsZero() && d.Text != "" {
			gen.firstToken = gen.end
			if res.TimeToFirstToken == 0 {
				res.TimeToFirstToken = gen.end.Sub(r.start)
			}
			r.firstToken(st, gen.end)
		}
		completionTokens += d.Tokens
		if d.Usage != nil {
			gen.usage = *d.Usage
		}
		if d.FinishReason != "" {
			res.FinishReason = d.FinishReason
		}
		gen.calls = rag.AppendToolCalls(gen.calls, d.ToolCalls)
		if r.p.rec.capture || len(tools) > 0 {
			gen.answer.WriteString(d.Text)
		}
		// Only text reaches the client: a tool call is the agent's business.
		if d.Text != "" || len(tools) == 0 {
			if err := r.handOver(st, &gen.stream, func() error { return r.sink.delta(d) }); err != nil {
				return r.sinkFailed(err)
			}
		}
		if d.FinishReason != "" {
			break
		}
		if dec.CutAfterTokens > 0 && completionTokens >= dec.CutAfterTokens {
			return r.fail(rag.StageGenerate, dec.CutErr)
		}
	}
	if res.FinishReason == "" {
		res.FinishReason = "stop" // the engine ended the stream normally without saying why
	}
	if gen.usage == (rag.Usage{}) {
		gen.usage = rag.Usage{PromptTokens: rag.PromptTokens(msgs), CompletionTokens: completionTokens}
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

func (g *guardedSink) reset(sink Sink) {
	g.sink, g.closed = sink, false
}
