package pipeline

import (
	"context"
	"encoding/hex"
	"errors"
	"reflect"
	"runtime/pprof"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
)

// recorder owns the instrumentation of one run, in the manner of otelhttp's handler and its
// semconv helper: the stage timings behind Server-Timing, the spans and their attributes, the
// metrics, and the pprof labels. A stage calls begin, does its work, and hands what it produced
// to its end method, which records it all at once; nothing else in a run touches a span or an
// instrument, so each stage's code reads as control flow.
//
// Recording allocates as little as the providers allow: label sets are built and bound to their
// instruments once (telemetry; ragtail's meter provider then records with no lookup), span
// attributes are set in one call when a stage ends from a scratch array the recorder keeps, span
// options are passed from arrays it keeps too, and with no tracer provider no span is started at
// all. Only the run's goroutine calls begin and the end methods; the scratch arrays are therefore
// not guarded.
type recorder struct {
	t        *telemetry
	now      func() time.Time
	start    time.Time
	coupling rag.Coupling
	chat     *chatSets // the gen_ai sets of the requested model, or of OtherModel

	timings []rag.StageTiming // -> Result.Timings

	parent     context.Context // the caller's context, for its pprof labels
	root       trace.Span      // rag.pipeline; nil without a tracer provider
	rootCtx    context.Context // parent with the rag.pipeline span
	faultDelay time.Duration   // latency injected by fault rules so far

	// mark is the instant the last stage ended, at which the next one begins, so that stages
	// tile the run and one clock reading serves both; zero when none is pending.
	mark time.Time
	// stamp is the timestamp option of the instant stampAt, shared by every span that starts
	// or ends then: building the option costs an allocation.
	stamp   trace.SpanEventOption
	stampAt time.Time

	// ids holds the hex of the span ids the run's stages are labelled with, written one after
	// another into one allocation per run rather than one each; the labels' strings are slices
	// of it, which later writes leave as they are.
	ids strings.Builder

	attrs     [24]attribute.KeyValue
	startOpts [1]trace.SpanStartOption
	endOpts   [1]trace.SpanEndOption
	eventOpts [1]trace.EventOption
}

// stageSpan is one stage in progress: where its timing is, its span and its context.
type stageSpan struct {
	stage     rag.Stage
	i         int             // index in recorder.timings
	ctx       context.Context // carries the span and the rag_stage and span_id pprof labels
	span      trace.Span      // nil without a tracer provider
	profileID string          // the span_id label value, when the span is sampled and labels are on
}

// reset prepares rec for a run starting at start, whose timings go to timings.
func (rec *recorder) reset(t *telemetry, now func() time.Time, start time.Time, parent context.Context, timings []rag.StageTiming) {
	*rec = recorder{t: t, now: now, start: start, mark: start, parent: parent, timings: timings}
}

// at returns the timestamp option of instant t, built once for every span starting or ending
// at t.
func (rec *recorder) at(t time.Time) trace.SpanEventOption {
	if rec.stamp == nil || rec.stampAt != t {
		rec.stamp, rec.stampAt = trace.WithTimestamp(t), t
	}
	return rec.stamp
}

// instant returns the instant the next stage begins at: the end of the stage before it (or the
// start of the run), read once for both, or else the clock's reading now.
func (rec *recorder) instant() time.Time {
	if t := rec.mark; !t.IsZero() {
		rec.mark = time.Time{}
		return t
	}
	return rec.now()
}

// tracing reports whether spans are started at all.
func (rec *recorder) tracing() bool { return rec.t.tracing }

// spanStart starts a span named name at start, child of the span in parent. Without a tracer
// provider it starts nothing and returns parent.
func (rec *recorder) spanStart(parent context.Context, name string, start time.Time) (context.Context, trace.Span) {
	if !rec.t.tracing {
		return parent, nil
	}
	if rec.t.instant != nil {
		return rec.t.instant.StartAt(parent, name, start)
	}
	rec.startOpts[0] = rec.at(start)
	return rec.t.tracer.Start(parent, name, rec.startOpts[:]...)
}

// endAt ends span at end.
func (rec *recorder) endAt(span trace.Span, end time.Time) {
	if e, ok := span.(instantEnder); ok {
		e.EndAt(end)
		return
	}
	rec.endOpts[0] = rec.at(end)
	span.End(rec.endOpts[:]...)
}

// spanEnd sets fixed's attributes (when not nil) and attrs on span, records err, and ends it at
// end.
func (rec *recorder) spanEnd(span trace.Span, end time.Time, err error, fixed *fixedAttrs, attrs []attribute.KeyValue) {
	if span == nil {
		return
	}
	if e, ok := span.(setEnder); ok && fixed != nil && err == nil {
		e.EndAtWithSet(end, &fixed.set, attrs)
		return
	}
	attrs = fixed.before(attrs)
	if e, ok := span.(attrEnder); ok && err == nil {
		e.EndAtWith(end, attrs)
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attrs...)
		if err != nil {
			recordError(span, end, err)
		}
	}
	rec.endAt(span, end)
}

// recordError records err on span as an exception event, the error status and error.type. The
// message is bounded: error texts may quote what a client sent.
func recordError(span trace.Span, at time.Time, err error) {
	msg := bound(err.Error(), MaxRecordedLen)
	span.AddEvent(semconv.ExceptionEventName, trace.WithTimestamp(at), trace.WithAttributes(
		semconv.ExceptionType(errorTypeName(err)), semconv.ExceptionMessage(msg)))
	span.SetStatus(codes.Error, msg)
	span.SetAttributes(semconv.ErrorTypeKey.String(ErrorType(err)))
}

// startRun starts the rag.pipeline span and counts the run in flight. It returns the context the
// stages run under.
func (rec *recorder) startRun(ctx context.Context, req *Request) context.Context {
	rec.coupling = req.Coupling
	rec.chat = rec.t.chat(req.Model, req.served)
	rec.t.inflight(ctx, 1)
	ctx, rec.root = rec.spanStart(ctx, SpanPipeline, rec.start)
	rec.rootCtx = ctx
	return ctx
}

// finishRun ends the rag.pipeline span and records the request-level metrics.
func (rec *recorder) finishRun(req *Request, res *Result, gen generation, err error) {
	end := rec.now()
	ctx := rec.rootCtx
	if rec.root != nil && rec.root.IsRecording() {
		a := append(rec.attrs[:0],
			AttrStage.String(StagePipeline),
			AttrRequestID.String(bound(req.ID, MaxRecordedLen)),
			AttrQueryHash.String(QueryHash(req.Question())),
			AttrFaultInjectedMS.Float64(ms(rec.faultDelay)),
			semconv.GenAIRequestModel(bound(req.Model, MaxRecordedLen)),
		)
		if req.UserID != "" {
			a = append(a, AttrUserID.String(bound(req.UserID, MaxRecordedLen)))
		}
		if req.resolved {
			a = append(a, AttrCoupling.String(string(req.Coupling)), AttrTopK.Int(req.TopK))
		}
		a = append(a, AttrChunkIDs.StringSlice(res.ChunkIDs))
		rec.spanEnd(rec.root, end, err, nil, a)
	}
	rec.t.inflight(ctx, -1)
	recordDur(ctx, rec.t.inst.serverDur.Float64Histogram, rec.chat.serverDur, rec.chat.base, seconds(end.Sub(rec.start)), err)
	if err == nil && !gen.firstToken.IsZero() {
		rec.chat.ttft(ctx, seconds(res.TimeToFirstToken))
		if n := res.Usage.CompletionTokens; n > 1 && gen.end.After(gen.firstToken) {
			rec.chat.tpot(ctx, seconds(gen.end.Sub(gen.firstToken))/float64(n-1))
		}
	}
	rec.setLabels(rec.parent)
}

// begin starts timing stage, starts its span (named name, child of the rag.pipeline span) at the
// same instant, and labels the goroutine with the stage.
func (rec *recorder) begin(ctx context.Context, stage rag.Stage, name string) stageSpan {
	now := rec.instant()
	rec.timings = append(rec.timings, rag.StageTiming{Stage: stage, Start: now})
	st := stageSpan{stage: stage, i: len(rec.timings) - 1}
	st.ctx, st.span = rec.spanStart(ctx, name, now)
	st.ctx, st.profileID = rec.withStageLabels(st.ctx, stage, st.span)
	rec.setLabels(st.ctx)
	return st
}

// end stops timing st at the end instant, ends its span there with fixed's attributes (when not
// nil), attrs and err, records the stage's duration in rag_stage_duration_seconds, restores the
// run's pprof labels, and returns the stage's duration.
func (rec *recorder) end(st *stageSpan, end time.Time, err error, fixed *fixedAttrs, attrs []attribute.KeyValue) time.Duration {
	d := end.Sub(rec.timings[st.i].Start)
	rec.timings[st.i].Duration = d
	if st.profileID != "" {
		attrs = append(attrs, AttrProfileID.String(st.profileID))
	}
	rec.spanEnd(st.span, end, err, fixed, attrs)
	rec.t.stageRec(st.stage, rec.coupling)(st.ctx, seconds(d))
	rec.setLabels(rec.rootCtx)
	rec.mark = end
	return d
}

// stageAttrs returns the scratch attributes, starting with st's rag.stage.
func (rec *recorder) stageAttrs(stage rag.Stage) []attribute.KeyValue {
	return append(rec.attrs[:0], AttrStage.String(string(stage)))
}

// endAdmission ends the admission stage; wait is how long the request queued for its slot, as
// the admitter reported it (reported) or as the stage lasted.
func (rec *recorder) endAdmission(st *stageSpan, err error, wait time.Duration, reported bool, injected time.Duration) time.Duration {
	a := rec.stageAttrs(st.stage)
	if reported {
		a = append(a, AttrAdmissionWaitMS.Float64(ms(wait)))
	}
	d := rec.end(st, rec.now(), err, nil, a)
	switch {
	case errors.Is(err, rag.ErrOverloaded):
		rec.t.inst.rejected.Add(st.ctx, 1)
	case err == nil:
		if !reported {
			wait = d - injected
		}
		rec.t.queueWait(st.ctx, seconds(wait))
	}
	return d
}

// endEmbed ends the embed stage; tokens is the question's length in tokens.
func (rec *recorder) endEmbed(st *stageSpan, err error, tokens int) time.Duration {
	t := rec.t
	a := rec.attrs[:0]
	if rec.tracing() {
		a = append(a, semconv.GenAIUsageInputTokens(tokens))
	}
	d := rec.end(st, rec.now(), err, t.embedSpan, a)
	recordDur(st.ctx, t.inst.clientDur.Float64Histogram, t.embedDur, t.embedSet, seconds(d), err)
	if err == nil {
		t.embedInput(st.ctx, int64(tokens))
	}
	return d
}

// shardSpan is one shard's Query span, started by the run's goroutine before the search runs,
// so that the search's goroutine does only the search.
type shardSpan struct {
	shard int
	start time.Time
	ctx   context.Context
	span  trace.Span
}

// beginShard starts the Query span of one shard under the retrieval span in parent.
func (rec *recorder) beginShard(parent context.Context, shard int) shardSpan {
	now := rec.now()
	ss := shardSpan{shard: shard, start: now}
	ss.ctx, ss.span = rec.spanStart(parent, rec.t.queryName, now)
	return ss
}

// beginShards starts the Query spans of shards searched at once, one for each answer, at one
// instant, under the retrieval span in parent.
func (rec *recorder) beginShards(parent context.Context, answers []shardAnswer) {
	now := rec.now()
	for i := range answers {
		ss := &answers[i].span
		ss.shard, ss.start = i, now
		ss.ctx, ss.span = rec.spanStart(parent, rec.t.queryName, now)
	}
}

// endShard ends a shard's Query span at end with the rows it returned, and records the
// operation's duration. The run's goroutine passes own (shardAttrs); the async collector does not.
func (rec *recorder) endShard(ss *shardSpan, end time.Time, rows int, err error, own bool) {
	t := rec.t
	switch e, ok := ss.span.(setEnder); {
	case ok && err == nil:
		e.EndAtWithSet(end, &t.querySpan.set, rec.shardAttrs(ss, rows, own))
	case ss.span != nil && ss.span.IsRecording():
		ss.span.SetAttributes(t.querySpan.before(rec.shardAttrs(ss, rows, own))...)
		if err != nil {
			recordError(ss.span, end, err)
		}
		switch e, ok := ss.span.(instantEnder); {
		case ok:
			e.EndAt(end)
		case own:
			rec.endOpts[0] = rec.at(end)
			ss.span.End(rec.endOpts[:]...)
		default:
			ss.span.End(trace.WithTimestamp(end))
		}
	case ss.span != nil:
		ss.span.End()
	}
	recordDur(ss.ctx, t.inst.dbDur.Float64Histogram, t.dbDur, t.dbSet, seconds(end.Sub(ss.start)), err)
}

// shardAttrs returns a shard span's attributes besides the fixed ones (telemetry.querySpan), in
// the recorder's scratch array for the run's goroutine (own), in a new one for the async
// collector, which ends late shards while the run goes on.
func (rec *recorder) shardAttrs(ss *shardSpan, rows int, own bool) []attribute.KeyValue {
	var a []attribute.KeyValue
	if own {
		a = rec.attrs[:0]
	} else {
		a = make([]attribute.KeyValue, 0, len(rec.t.querySpan.kv)+2)
	}
	return append(a, AttrShard.Int(ss.shard), semconv.DBResponseReturnedRows(rows))
}

// beginRetrieve starts the retrieve stage.
func (rec *recorder) beginRetrieve(ctx context.Context) stageSpan {
	return rec.begin(ctx, rag.StageRetrieve, rec.t.retrievalName)
}

// endRetrieve ends the retrieve stage with what it found; the late shards become span events and
// rag_shard_late_dropped_total.
func (rec *recorder) endRetrieve(st *stageSpan, err error, req *Request, question string, r retrieval) time.Duration {
	t := rec.t
	end := rec.now()
	if st.span != nil && st.span.IsRecording() {
		for shard, late := range r.late {
			if late {
				st.span.AddEvent(EventLateShardDropped, trace.WithTimestamp(r.cut), trace.WithAttributes(AttrShard.Int(shard)))
			}
		}
	}
	a := rec.attrs[:0]
	if rec.tracing() {
		a = append(a,
			AttrCoupling.String(string(req.Coupling)), AttrTopK.Int(req.TopK), AttrShards.Int(r.shards),
			AttrHits.Int(len(r.hits)), AttrShardsAnswered.Int(r.answered),
			AttrShardsLate.Int(r.lateCount), AttrShardsFailed.Int(r.failed))
		if t.capture {
			a = append(a, semconv.GenAIRetrievalQueryText(question))
		}
	}
	d := rec.end(st, end, err, t.retrieval, a)
	if r.lateCount > 0 {
		t.inst.lateShards.Add(st.ctx, int64(r.lateCount))
	}
	return d
}

// endFetch ends the fetch stage with how the doc store answered.
func (rec *recorder) endFetch(st *stageSpan, err error, hits int, f fetched) time.Duration {
	t := rec.t
	a := rec.attrs[:0]
	if rec.tracing() {
		a = append(a, AttrStage.String(string(rag.StageFetch)), AttrHits.Int(hits), AttrChunksMissing.Int(f.missing))
		if t.cache != nil {
			a = append(a, AttrCacheHits.Int(int(f.results[rag.CacheHit])), AttrCacheMisses.Int(int(f.results[rag.CacheMiss])),
				AttrCacheBlocked.Int(int(f.results[rag.CacheBlocked])))
		}
	}
	d := rec.end(st, rec.now(), err, nil, a)
	if t.cache != nil {
		for i, n := range f.results {
			if n > 0 {
				t.cacheReq[i](st.ctx, int64(n))
			}
		}
	}
	return d
}

// beginGenerate starts the generate stage under the "chat {model}" span.
func (rec *recorder) beginGenerate(ctx context.Context) stageSpan {
	return rec.begin(ctx, rag.StageGenerate, rec.chat.spanName)
}

// firstToken marks the first delta carrying text on the chat span.
func (rec *recorder) firstToken(st *stageSpan, at time.Time) {
	if e, ok := st.span.(eventAdder); ok {
		e.AddEventAt(EventFirstToken, at)
	} else if st.span != nil && st.span.IsRecording() {
		rec.eventOpts[0] = rec.at(at)
		st.span.AddEvent(EventFirstToken, rec.eventOpts[:]...)
	}
}

// endGenerate ends the generate stage at gen.end with what the engine produced, and the stream
// stage within it. A stream error (the client left) fails the stream span, not the engine's.
func (rec *recorder) endGenerate(st *stageSpan, err error, req *Request, streaming bool, gen *generation, res *Result) {
	t := rec.t
	genErr := err
	if rag.StageOf(err) == rag.StageStream {
		genErr = nil // the client left; the engine did nothing wrong
	}
	a := rec.attrs[:0]
	if rec.tracing() {
		a = append(a, semconv.GenAIRequestMaxTokens(req.MaxTokens),
			semconv.GenAIRequestTemperature(req.Temperature), semconv.GenAIRequestStream(streaming))
		if t.capture {
			a = append(a, semconv.GenAIInputMessagesKey.String(messagesJSON(gen.msgs)))
		}
		if err == nil {
			a = append(a, rec.chat.responseModel,
				semconv.GenAIUsageInputTokens(res.Usage.PromptTokens),
				semconv.GenAIUsageOutputTokens(res.Usage.CompletionTokens),
				finishReasonsAttr(res.FinishReason))
			if !gen.firstToken.IsZero() {
				a = append(a, semconv.GenAIResponseTimeToFirstChunk(seconds(gen.firstToken.Sub(rec.timings[st.i].Start))))
			}
			if t.capture {
				a = append(a, semconv.GenAIOutputMessagesKey.String(outputJSON(gen.answer.String(), res.FinishReason)))
			}
		}
	}
	d := rec.end(st, gen.end, genErr, rec.chat.span, a)
	recordDur(st.ctx, t.inst.clientDur.Float64Histogram, rec.chat.clientDur, rec.chat.base, seconds(d), genErr)
	if genErr == nil && res.Usage != (rag.Usage{}) {
		rec.chat.inputTokens(st.ctx, int64(res.Usage.PromptTokens))
		rec.chat.outputTokens(st.ctx, int64(res.Usage.CompletionTokens))
	}
	if gen.stream.i < 0 {
		return
	}
	var streamErr error
	if genErr == nil && err != nil {
		streamErr = err
	}
	ss := &gen.stream
	write := rec.timings[ss.i].Duration
	a = rec.attrs[:0]
	if rec.tracing() {
		a = append(a, AttrStage.String(string(rag.StageStream)), AttrStreamChunks.Int(ss.chunks), AttrStreamWriteMS.Float64(ms(write)))
		if ss.profileID != "" {
			a = append(a, AttrProfileID.String(ss.profileID))
		}
	}
	rec.spanEnd(ss.span, ss.end, streamErr, nil, a)
	t.stageRec(rag.StageStream, rec.coupling)(ss.ctx, seconds(write))
}

// streamStage is the stream stage, which runs inside generate: a span from the first hand-over
// of a delta to the end of the last, and the time spent in the sink, which is what
// Server-Timing reports.
type streamStage struct {
	i         int // index in recorder.timings; -1 until the first delta is handed over
	ctx       context.Context
	span      trace.Span
	profileID string
	end       time.Time
	chunks    int
}

// handOver times one delta handed to the client with deliver, starting the stream stage at the
// first one. The goroutine carries the stream label meanwhile, then the generate stage's again.
func (rec *recorder) handOver(gen *stageSpan, ss *streamStage, deliver func() error) error {
	start := rec.now()
	if ss.i < 0 {
		ss.i = len(rec.timings)
		rec.timings = append(rec.timings, rag.StageTiming{Stage: rag.StageStream, Start: start})
		ss.ctx, ss.span = rec.spanStart(rec.rootCtx, SpanStream, start)
		ss.ctx, ss.profileID = rec.withStageLabels(ss.ctx, rag.StageStream, ss.span)
	}
	rec.setLabels(ss.ctx)
	err := deliver()
	ss.end = rec.now()
	rec.setLabels(gen.ctx)
	rec.timings[ss.i].Duration += ss.end.Sub(start)
	ss.chunks++
	return err
}

// faultInjected records what fault rules did to a stage: one span event per rule, the running
// total on the rag.pipeline span, and rag_fault_injected_total.
func (rec *recorder) faultInjected(st *stageSpan, dec FaultDecision) {
	rec.faultDelay += dec.Delay
	if st.span != nil && st.span.IsRecording() {
		for _, rule := range dec.Rules {
			st.span.AddEvent(string(EventFaultInjected), trace.WithAttributes(AttrFaultRule.String(bound(rule, MaxRecordedLen)),
				AttrFaultDelayMS.Float64(ms(dec.Delay))))
		}
	}
	if rec.root != nil && rec.root.IsRecording() {
		rec.root.SetAttributes(AttrFaultInjectedMS.Float64(ms(rec.faultDelay)))
	}
	rec.t.inst.faults.Add(st.ctx, int64(len(dec.Rules)), rec.t.faultSets[stageIndex(st.stage)]...)
}

// setLabels makes ctx's pprof labels the current goroutine's, when stage labels are on.
func (rec *recorder) setLabels(ctx context.Context) {
	if rec.t.labels {
		pprof.SetGoroutineLabels(ctx)
	}
}

// withStageLabels returns ctx carrying the rag_stage pprof label and, when span is sampled, the
// span_id label with span's id (returned too, for the span's pyroscope.profile.id), when stage
// labels are on. Samples taken during a stage then name the stage's span, as otel-profiling-go's
// all-spans scope does, at the price of one label merge per stage, which the rag_stage label
// costs anyway.
func (rec *recorder) withStageLabels(ctx context.Context, stage rag.Stage, span trace.Span) (context.Context, string) {
	if !rec.t.labels {
		return ctx, ""
	}
	if span == nil || !span.SpanContext().IsSampled() {
		return withLabels(ctx, &stageLabels[stageIndex(stage)], ProfileLabel, string(stage)), ""
	}
	id := rec.hexID(span.SpanContext().SpanID())
	return withLabels(ctx, nil, ProfileLabel, string(stage), ProfileSpanIDLabel, id), id
}

// maxMergedLabels is how many labels withLabels merges on its stack: a run's ctx carries the
// profiler's three root labels (span_id, span_name, trace_id), a stage adds two.
const maxMergedLabels = 8

// withLabels returns pprof.WithLabels(ctx, pprof.Labels(own...)), own's keys sorted and each
// once (pre, when not nil, is that set built beforehand). It passes pprof.WithLabels every label
// of the result, ctx's merged with own, since pprof's merge sizes the merged list for the
// labels passed and grows it for each of ctx's they leave out: one allocation rather than two
// or three.
func withLabels(ctx context.Context, pre *pprof.LabelSet, own ...string) context.Context {
	var buf [2 * maxMergedLabels]string
	merged := buf[:0]
	n := 0 // own's labels merged so far
	pprof.ForLabels(ctx, func(k, v string) bool {
		for ; 2*n < len(own) && own[2*n] < k; n++ {
			merged = append(merged, own[2*n], own[2*n+1])
		}
		if 2*n < len(own) && own[2*n] == k {
			return true // own's value overrides ctx's
		}
		merged = append(merged, k, v)
		return true
	})
	if len(merged) == 0 {
		// ctx's labels, if any, are all overridden: own is every label of the result.
		if pre != nil {
			return pprof.WithLabels(ctx, *pre)
		}
		return pprof.WithLabels(ctx, pprof.Labels(own...))
	}
	merged = append(merged, own[2*n:]...)
	return pprof.WithLabels(ctx, pprof.Labels(merged...))
}

// stageIDs is how many span ids' hex one allocation of recorder.ids holds: a run labels five or
// six stages.
const stageIDs = 6

// hexID returns id in hex, as id.String() does, from the run's buffer of ids.
func (rec *recorder) hexID(id trace.SpanID) string {
	var b [2 * len(trace.SpanID{})]byte
	hex.Encode(b[:], id[:])
	if rec.ids.Cap()-rec.ids.Len() < len(b) {
		rec.ids = strings.Builder{}
		rec.ids.Grow(stageIDs * len(b))
	}
	rec.ids.Write(b[:])
	all := rec.ids.String()
	return all[len(all)-len(b):]
}

// stageLabels are the rag_stage label sets, built once.
var stageLabels = func() (ls [numStages]pprof.LabelSet) {
	for i, s := range rag.Stages {
		ls[i] = pprof.Labels(ProfileLabel, string(s))
	}
	return ls
}()

// MaxRecordedLen is the longest string the pipeline records from what a client sent (model
// name, user id, request id, rule names, error messages quoting them) on a span; longer strings
// are cut to it, on a rune boundary, with "..." appended. The HTTP API rejects longer values at
// the edge; the bound holds for every other caller too.
const MaxRecordedLen = 256

// Truncate returns s cut to at most n bytes on a rune boundary, with "..." appended when it was
// cut, so that no client-sent string is recorded whole.
func Truncate(s string, n int) string { return bound(s, n) }

func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-3, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// errorTypeName names err's Go type as the SDK's RecordError does (exception.type).
func errorTypeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}
