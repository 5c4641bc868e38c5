package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"runtime/pprof"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ragtail/ragtail/rag"
)

// recorder holds what the pipeline needs to instrument its runs, resolved once in New: the
// tracer, the instruments, and the names of the backends' models, providers and collection.
//
// A run is instrumented the way otelhttp instruments a request: a stage calls run.begin, does its
// work, and hands what it produced to its end method, which ends the stage's span with its
// attributes, records its metrics and restores the goroutine's pprof labels, all in one place
// (this file); nothing else in a run touches a span or an instrument, so each stage's code
// reads as control flow. Span timestamps are read from the pipeline's clock, the same readings
// as the Result's timings, so that spans and Server-Timing agree to the nanosecond.
type recorder struct {
	tracer  trace.Tracer
	tracing bool // a tracer provider was given: build span attributes
	inst    *instruments
	labels  bool // set the rag_stage and span_id pprof labels around stages
	capture bool // record prompt and answer text
	latest  bool // the GenAI conventions' latest names

	embedModel, embedProvider, genProvider string
	embedDimension                         int
	dbSystem, collection                   string

	cache  CacheReporter
	waiter WaitReporter
}

func newRecorder(o *options, emb Embedder, ret Retriever, docs DocStore, gen Generator) (*recorder, error) {
	tp := o.tracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := o.meterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	inst, err := newInstruments(mp, o.genAILatest)
	if err != nil {
		return nil, err
	}
	rec := &recorder{
		tracer:         tp.Tracer(instrumentationName),
		tracing:        o.tracerProvider != nil,
		inst:           inst,
		labels:         o.profileLabels,
		capture:        o.captureContent,
		latest:         o.genAILatest,
		embedModel:     defaultModelName,
		embedProvider:  DefaultProviderName,
		genProvider:    DefaultProviderName,
		embedDimension: emb.Dimension(),
		dbSystem:       DefaultDBSystem,
		collection:     ret.Collection(),
	}
	if m, ok := emb.(ModelNamer); ok && m.Model() != "" {
		rec.embedModel = m.Model()
	}
	if p, ok := emb.(ProviderNamer); ok && p.ProviderName() != "" {
		rec.embedProvider = p.ProviderName()
	}
	if p, ok := gen.(ProviderNamer); ok && p.ProviderName() != "" {
		rec.genProvider = p.ProviderName()
	}
	if d, ok := ret.(DBSystemNamer); ok && d.DBSystem() != "" {
		rec.dbSystem = d.DBSystem()
	}
	rec.cache, _ = docs.(CacheReporter)
	rec.waiter, _ = o.admitter.(WaitReporter)
	return rec, nil
}

// chatAttrs are the gen_ai attributes of the run's model calls: operation, provider and model
// (OtherModel for a model the generator does not serve, so that labels stay bounded).
func (r *run) chatAttrs() []attribute.KeyValue {
	model := OtherModel
	if r.req.served {
		model = r.req.Model
	}
	return []attribute.KeyValue{
		semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameKey.String(r.p.rec.genProvider),
		semconv.GenAIRequestModel(model),
	}
}

// embedAttrs are the gen_ai attributes of the embeddings operation.
func (rec *recorder) embedAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.GenAIOperationNameEmbeddings,
		semconv.GenAIProviderNameKey.String(rec.embedProvider),
		semconv.GenAIRequestModel(rec.embedModel),
	}
}

// dbAttrs are the attributes of a shard's Query operation.
func (rec *recorder) dbAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.DBSystemNameKey.String(rec.dbSystem),
		semconv.DBCollectionName(rec.collection),
		semconv.DBOperationName("Query"),
	}
}

// startSpan starts a span named name at start under the span in ctx.
func (r *run) startSpan(ctx context.Context, name string, start time.Time, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return r.p.rec.tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
}

// endSpan sets attrs on span, records err, and ends it at end.
func endSpan(span trace.Span, end time.Time, err error, attrs ...attribute.KeyValue) {
	if span.IsRecording() {
		span.SetAttributes(attrs...)
		if err != nil {
			recordError(span, end, err)
		}
	}
	span.End(trace.WithTimestamp(end))
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
func (r *run) startRun(ctx context.Context) context.Context {
	r.p.rec.inst.inflight.Add(ctx, 1)
	ctx, r.root = r.startSpan(ctx, rag.SpanPipeline, r.start)
	r.rootCtx = ctx
	return ctx
}

// finishRun ends the rag.pipeline span with the request-level dye and records the request's
// metrics as a GenAI server.
func (r *run) finishRun(res *Result, gen *generation, err error) {
	rec, req := r.p.rec, &r.req
	end := r.p.now()
	ctx := r.rootCtx
	attrs := []attribute.KeyValue{
		rag.AttrStage.String(rag.StagePipeline),
		rag.AttrRequestID.String(bound(req.ID, MaxRecordedLen)),
		rag.AttrQueryHash.String(QueryHash(req.Question())),
		rag.AttrFaultInjectedMS.Float64(ms(r.faultDelay)),
		semconv.GenAIRequestModel(bound(req.Model, MaxRecordedLen)),
		rag.AttrChunkIDs.StringSlice(res.ChunkIDs),
	}
	if req.UserID != "" {
		attrs = append(attrs, rag.AttrUserID.String(bound(req.UserID, MaxRecordedLen)))
	}
	if req.resolved {
		attrs = append(attrs, rag.AttrCoupling.String(string(req.Coupling)), rag.AttrTopK.Int(req.TopK))
	}
	endSpan(r.root, end, err, attrs...)

	rec.inst.inflight.Add(ctx, -1)
	chat := r.chatAttrs()
	rec.inst.serverDur.Record(ctx, end.Sub(r.start).Seconds(), withError(err, chat...))
	if err == nil && !gen.firstToken.IsZero() {
		ok := metric.WithAttributes(chat...)
		rec.inst.ttft.Record(ctx, res.TimeToFirstToken.Seconds(), ok)
		if n := gen.usage.CompletionTokens; n > 1 && gen.end.After(gen.firstToken) {
			rec.inst.tpot.Record(ctx, gen.end.Sub(gen.firstToken).Seconds()/float64(n-1), ok)
		}
	}
	r.setLabels(r.parent)
}

// stage is one stage of a run in progress.
type stage struct {
	name      rag.Stage
	i         int             // index in run.timings
	ctx       context.Context // carries the span and the rag_stage and span_id pprof labels
	span      trace.Span
	profileID string // the span_id label value, when the span is sampled and labels are on
}

// begin starts timing stage, starts its span (named name, child of the rag.pipeline span) at
// the same instant, and labels the goroutine with the stage. Stages tile the run: a stage
// begins at the instant the one before it ended.
func (r *run) begin(name rag.Stage, spanName string) *stage {
	now := r.mark
	if now.IsZero() {
		now = r.p.now()
	}
	r.mark = time.Time{}
	r.timings = append(r.timings, rag.StageTiming{Stage: name, Start: now})
	st := &stage{name: name, i: len(r.timings) - 1}
	parent := r.ctx
	if r.under != nil {
		parent = r.under
	}
	st.ctx, st.span = r.startSpan(parent, spanName, now, rag.AttrStage.String(string(name)))
	st.ctx, st.profileID = r.withStageLabels(st.ctx, name, st.span)
	r.setLabels(st.ctx)
	return st
}

// end stops timing st at the end instant, ends its span there with attrs and err, records the
// stage's duration in rag.stage.duration, restores the run's pprof labels, and returns the
// stage's duration.
func (r *run) end(st *stage, end time.Time, err error, attrs ...attribute.KeyValue) time.Duration {
	d := end.Sub(r.timings[st.i].Start)
	r.timings[st.i].Duration = d
	if st.profileID != "" {
		attrs = append(attrs, rag.AttrProfileID.String(st.profileID))
	}
	endSpan(st.span, end, err, attrs...)
	r.recordStage(st.ctx, st.name, d)
	r.setLabels(r.rootCtx)
	r.mark = end
	return d
}

// recordStage records one stage's duration in rag.stage.duration.
func (r *run) recordStage(ctx context.Context, name rag.Stage, d time.Duration) {
	r.p.rec.inst.stageDur.Record(ctx, d.Seconds(), metric.WithAttributes(rag.AttrStage.String(string(name)), rag.AttrCoupling.String(string(r.req.Coupling))))
}

// endAdmission ends the admission stage; wait is how long the request queued for its slot, as
// the admitter reported it (reported) or as the stage lasted.
func (r *run) endAdmission(st *stage, err error, wait time.Duration, reported bool, injected time.Duration) time.Duration {
	var attrs []attribute.KeyValue
	if reported {
		attrs = append(attrs, rag.AttrAdmissionWaitMS.Float64(ms(wait)))
	}
	d := r.end(st, r.p.now(), err, attrs...)
	inst := r.p.rec.inst
	switch {
	case errors.Is(err, rag.ErrOverloaded):
		inst.rejected.Add(st.ctx, 1)
	case err == nil:
		if !reported {
			wait = d - injected
		}
		inst.queueWait.Record(st.ctx, wait.Seconds())
	}
	return d
}

// embedSpanName is the embed stage's span name, "embeddings {model}".
func (rec *recorder) embedSpanName() string { return "embeddings " + rec.embedModel }

// endEmbed ends the embed stage; tokens is the question's length in tokens.
func (r *run) endEmbed(st *stage, err error, tokens int) time.Duration {
	rec := r.p.rec
	ops := rec.embedAttrs()
	var attrs []attribute.KeyValue
	if rec.tracing {
		attrs = append(ops, semconv.GenAIEmbeddingsDimensionCount(rec.embedDimension), semconv.GenAIUsageInputTokens(tokens))
	}
	d := r.end(st, r.p.now(), err, attrs...)
	if rec.latest {
		rec.inst.embeddingsDur.Record(st.ctx, d.Seconds(), withError(err, ops...))
		if err == nil {
			rec.inst.embeddingsInput.Record(st.ctx, int64(tokens), metric.WithAttributes(ops...))
		}
		return d
	}
	rec.inst.clientDur.Record(st.ctx, d.Seconds(), withError(err, ops...))
	if err == nil {
		rec.inst.tokenUsage.Record(st.ctx, int64(tokens), metric.WithAttributes(append(ops, semconv.GenAITokenTypeInput)...))
	}
	return d
}

// shardSpan is one shard's Query span, started by the run's goroutine before the search runs.
type shardSpan struct {
	shard int
	start time.Time
	ctx   context.Context
	span  trace.Span
}

// beginShard starts the Query span of one shard at the instant at, under the retrieval span in
// parent.
func (r *run) beginShard(parent context.Context, shard int, at time.Time) shardSpan {
	ss := shardSpan{shard: shard, start: at}
	ss.ctx, ss.span = r.startSpan(parent, "Query "+r.p.rec.collection, at, rag.AttrStage.String(string(rag.StageRetrieve)))
	return ss
}

// endShard ends a shard's Query span at end with the rows it returned, and records the
// operation's duration. The async collector calls it for late shards while the run goes on.
func (r *run) endShard(ss *shardSpan, end time.Time, rows int, hedged bool, err error) {
	db := r.p.rec.dbAttrs()
	attrs := append(db, rag.AttrShard.Int(ss.shard), semconv.DBResponseReturnedRows(rows))
	if hedged {
		attrs = append(attrs, rag.AttrShardHedged.Bool(true))
	}
	endSpan(ss.span, end, err, attrs...)
	r.p.rec.inst.dbDur.Record(ss.ctx, end.Sub(ss.start).Seconds(), withError(err, db...))
}

// retrievalSpanName is the retrieve stage's span name, "retrieval {collection}".
func (rec *recorder) retrievalSpanName() string { return "retrieval " + rec.collection }

// endRetrieve ends the retrieve stage with what it found; the late shards become span events and
// rag.shard.late_dropped.
func (r *run) endRetrieve(st *stage, err error, question string, ret *retrieval) time.Duration {
	rec := r.p.rec
	end := r.p.now()
	var attrs []attribute.KeyValue
	if rec.tracing && st.span.IsRecording() {
		for shard, late := range ret.late {
			if late {
				st.span.AddEvent(rag.EventLateShardDropped, trace.WithTimestamp(ret.cut), trace.WithAttributes(rag.AttrShard.Int(shard)))
			}
		}
		attrs = append(attrs,
			semconv.GenAIOperationNameKey.String("retrieval"), semconv.GenAIDataSourceID(rec.collection),
			rag.AttrCoupling.String(string(r.req.Coupling)), rag.AttrTopK.Int(r.req.TopK), rag.AttrShards.Int(ret.shards),
			rag.AttrHits.Int(len(ret.hits)), rag.AttrShardsAnswered.Int(ret.answered),
			rag.AttrShardsLate.Int(ret.lateCount), rag.AttrShardsFailed.Int(ret.failed))
		if rec.latest {
			attrs = append(attrs, attribute.Int("gen_ai.retrieval.top_k", r.req.TopK))
		} else {
			attrs = append(attrs, semconv.GenAIRequestTopK(float64(r.req.TopK)))
		}
		if rec.capture {
			attrs = append(attrs, semconv.GenAIRetrievalQueryText(question))
		}
	}
	d := r.end(st, end, err, attrs...)
	if ret.lateCount > 0 {
		rec.inst.lateShards.Add(st.ctx, int64(ret.lateCount))
	}
	return d
}

// endFetch ends the fetch stage with how the doc store answered.
func (r *run) endFetch(st *stage, err error, hits int, f *fetched) time.Duration {
	rec := r.p.rec
	var attrs []attribute.KeyValue
	if rec.tracing {
		attrs = append(attrs, rag.AttrHits.Int(hits), rag.AttrChunksMissing.Int(f.missing))
		if rec.cache != nil {
			attrs = append(attrs, rag.AttrCacheHits.Int(int(f.results[rag.CacheHit])), rag.AttrCacheMisses.Int(int(f.results[rag.CacheMiss])),
				rag.AttrCacheBlocked.Int(int(f.results[rag.CacheBlocked])))
		}
	}
	d := r.end(st, r.p.now(), err, attrs...)
	if rec.cache != nil {
		for result, n := range f.results {
			if n > 0 {
				rec.inst.cacheReq.Add(st.ctx, int64(n), metric.WithAttributes(attribute.String("result", rag.CacheResult(result).String())))
			}
		}
	}
	return d
}

// chatSpanName is the generate stage's span name, "chat {model}", the model bounded.
func (r *run) chatSpanName() string {
	model := OtherModel
	if r.req.served {
		model = r.req.Model
	}
	return "chat " + model
}

// firstToken marks the first delta carrying text on the chat span.
func (r *run) firstToken(st *stage, at time.Time) {
	st.span.AddEvent(rag.EventFirstToken, trace.WithTimestamp(at))
}

// chunkArrived records, with the latest conventions, the time per output chunk of a delta that
// arrived at at after one that arrived at prev.
func (r *run) chunkArrived(st *stage, prev, at time.Time) {
	if rec := r.p.rec; rec.latest && !prev.IsZero() {
		rec.inst.inferenceTPOC.Record(st.ctx, at.Sub(prev).Seconds(), metric.WithAttributes(r.chatAttrs()...))
	}
}

// endGenerate ends the generate stage at gen.end with what the engine produced, and the stream
// stage within it. A stream error (the client left) fails the stream span, not the engine's.
func (r *run) endGenerate(st *stage, err error, streaming bool, gen *generation, res *Result) {
	rec, req := r.p.rec, &r.req
	genErr := err
	if rag.StageOf(err) == rag.StageStream {
		genErr = nil // the client left; the engine did nothing wrong
	}
	chat := r.chatAttrs()
	start := r.timings[st.i].Start
	var attrs []attribute.KeyValue
	if rec.tracing {
		attrs = append(attrs, chat...)
		attrs = append(attrs, semconv.GenAIRequestMaxTokens(req.MaxTokens),
			semconv.GenAIRequestTemperature(req.Temperature), semconv.GenAIRequestStream(streaming))
		if rec.capture {
			attrs = append(attrs, semconv.GenAIInputMessagesKey.String(messagesJSON(gen.msgs)))
		}
		if err == nil {
			attrs = append(attrs, semconv.GenAIResponseModel(req.Model),
				semconv.GenAIUsageInputTokens(gen.usage.PromptTokens),
				semconv.GenAIUsageOutputTokens(gen.usage.CompletionTokens),
				semconv.GenAIResponseFinishReasons(res.FinishReason))
			if gen.usage.CachedTokens > 0 {
				attrs = append(attrs, semconv.GenAIUsageCacheReadInputTokens(gen.usage.CachedTokens))
			}
			if gen.usage.ReasoningTokens > 0 {
				attrs = append(attrs, semconv.GenAIUsageReasoningOutputTokens(gen.usage.ReasoningTokens))
			}
			if !gen.firstChunk.IsZero() {
				attrs = append(attrs, semconv.GenAIResponseTimeToFirstChunk(gen.firstChunk.Sub(start).Seconds()))
			}
			if rec.capture {
				attrs = append(attrs, semconv.GenAIOutputMessagesKey.String(outputJSON(gen.answer.String(), res.FinishReason)))
			}
		}
	}
	d := r.end(st, gen.end, genErr, attrs...)
	r.recordChat(st.ctx, start, d, genErr, gen, res, chat)
	if gen.stream.i < 0 {
		return
	}
	var streamErr error
	if genErr == nil && err != nil {
		streamErr = err
	}
	ss := &gen.stream
	write := r.timings[ss.i].Duration
	attrs = []attribute.KeyValue{rag.AttrStreamChunks.Int(ss.chunks), rag.AttrStreamWriteMS.Float64(ms(write))}
	if ss.profileID != "" {
		attrs = append(attrs, rag.AttrProfileID.String(ss.profileID))
	}
	endSpan(ss.span, ss.end, streamErr, attrs...)
	r.recordStage(ss.ctx, rag.StageStream, write)
}

// recordChat records the model call's client metrics: its duration, and on success its token
// usage (and, with the latest conventions, its time to first chunk).
func (r *run) recordChat(ctx context.Context, start time.Time, d time.Duration, err error, gen *generation, res *Result, chat []attribute.KeyValue) {
	inst := r.p.rec.inst
	ok := metric.WithAttributes(chat...)
	usage := gen.usage
	if !r.p.rec.latest {
		inst.clientDur.Record(ctx, d.Seconds(), withError(err, chat...))
		if err == nil && usage != (rag.Usage{}) {
			inst.tokenUsage.Record(ctx, int64(usage.PromptTokens), metric.WithAttributes(append(chat, semconv.GenAITokenTypeInput)...))
			inst.tokenUsage.Record(ctx, int64(usage.CompletionTokens), metric.WithAttributes(append(chat, semconv.GenAITokenTypeOutput)...))
		}
		return
	}
	inst.inferenceDur.Record(ctx, d.Seconds(), withError(err, chat...))
	if err != nil {
		return
	}
	if !gen.firstChunk.IsZero() {
		inst.inferenceTTFC.Record(ctx, gen.firstChunk.Sub(start).Seconds(), ok)
	}
	if usage != (rag.Usage{}) {
		inst.opInput.Record(ctx, int64(usage.PromptTokens), ok)
		inst.opOutput.Record(ctx, int64(usage.CompletionTokens), ok)
		inst.usageInput.Add(ctx, int64(usage.PromptTokens), ok)
		inst.usageOutput.Add(ctx, int64(usage.CompletionTokens), ok)
		inst.usageCacheRead.Add(ctx, int64(usage.CachedTokens), ok)
		inst.usageReasoning.Add(ctx, int64(usage.ReasoningTokens), ok)
	}
}

// span is a span of the agent loop (invoke_agent, execute_tool) and when it started.
type span struct {
	ctx   context.Context
	span  trace.Span
	start time.Time
}

// AgentName is the gen_ai.agent.name of the agentic mode's invoke_agent span.
const AgentName = "ragtail"

// agentAttrs are the attributes of the invoke_agent span and the agent metrics.
func (r *run) agentAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{semconv.GenAIOperationNameInvokeAgent, semconv.GenAIAgentName(AgentName)}
}

// nextInstant returns the instant the next span begins at, the end of the last stage (left
// for the stage that begins with it) or now.
func (r *run) nextInstant() time.Time {
	if r.mark.IsZero() {
		r.mark = r.p.now()
	}
	return r.mark
}

// beginAgent starts the invoke_agent span over an agentic request's loop; the model calls'
// spans go under it.
func (r *run) beginAgent() *span {
	at := r.nextInstant()
	a := &span{start: at}
	a.ctx, a.span = r.startSpan(r.ctx, rag.SpanAgent, at, append(r.agentAttrs(), rag.AttrStage.String(rag.StageAgent),
		semconv.GenAIProviderNameKey.String(r.p.rec.genProvider))...)
	r.under = a.ctx
	return a
}

// endAgent ends the invoke_agent span with the loop's steps and records the agent metrics.
func (r *run) endAgent(a *span, res *Result, err error) {
	end := r.p.now()
	r.under = nil
	calls := 0
	for _, s := range res.Steps {
		calls += len(s.Searches)
	}
	endSpan(a.span, end, err, rag.AttrAgentSteps.Int(len(res.Steps)), rag.AttrAgentToolCalls.Int(calls))
	inst := r.p.rec.inst
	inst.agentDur.Record(a.ctx, end.Sub(a.start).Seconds(), withError(err, r.agentAttrs()...))
	if err == nil {
		attrs := metric.WithAttributes(r.agentAttrs()...)
		inst.agentCalls.Record(a.ctx, int64(len(res.Steps)), attrs)
		inst.agentToolCalls.Record(a.ctx, int64(calls), attrs)
	}
}

// toolAttrs are the attributes of an execute_tool span and the tool metric.
func toolAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(SearchTool.Name)}
}

// beginTool starts the execute_tool span of one search call under the agent's span; the
// retrieval stages' spans go under it.
func (r *run) beginTool(agent *span, call rag.ToolCall) *span {
	at := r.nextInstant()
	t := &span{start: at}
	t.ctx, t.span = r.startSpan(agent.ctx, "execute_tool "+SearchTool.Name, at, append(toolAttrs(), rag.AttrStage.String(rag.StageTool),
		semconv.GenAIToolType("function"), semconv.GenAIToolCallID(bound(call.ID, MaxRecordedLen)))...)
	return t
}

// endTool ends a search call's span where its last stage ended, and records its duration.
func (r *run) endTool(t *span, err error) {
	end := r.nextInstant()
	endSpan(t.span, end, err)
	r.p.rec.inst.toolDur.Record(t.ctx, end.Sub(t.start).Seconds(), withError(err, toolAttrs()...))
}

// streamStage is the stream stage, which runs inside generate: a span from the first hand-over
// of a delta to the end of the last, and the time spent in the sink, which is what
// Server-Timing reports.
type streamStage struct {
	i         int // index in run.timings; -1 until the first delta is handed over
	ctx       context.Context
	span      trace.Span
	profileID string
	end       time.Time
	chunks    int
}

// handOver times one delta handed to the client with deliver, starting the stream stage at the
// first one. The goroutine carries the stream label meanwhile, then the generate stage's again.
func (r *run) handOver(gen *stage, ss *streamStage, deliver func() error) error {
	start := r.p.now()
	if ss.i < 0 {
		ss.i = len(r.timings)
		r.timings = append(r.timings, rag.StageTiming{Stage: rag.StageStream, Start: start})
		ss.ctx, ss.span = r.startSpan(r.rootCtx, rag.SpanStream, start, rag.AttrStage.String(string(rag.StageStream)))
		ss.ctx, ss.profileID = r.withStageLabels(ss.ctx, rag.StageStream, ss.span)
	}
	r.setLabels(ss.ctx)
	err := deliver()
	ss.end = r.p.now()
	r.setLabels(gen.ctx)
	r.timings[ss.i].Duration += ss.end.Sub(start)
	ss.chunks++
	return err
}

// faultInjected records what fault rules did to a stage: one span event per rule, the running
// total on the rag.pipeline span, and rag.fault.injected.
func (r *run) faultInjected(st *stage, dec FaultDecision) {
	r.faultDelay += dec.Delay
	for _, rule := range dec.Rules {
		st.span.AddEvent(string(rag.EventFaultInjected), trace.WithAttributes(rag.AttrFaultRule.String(bound(rule, MaxRecordedLen)),
			rag.AttrFaultDelayMS.Float64(ms(dec.Delay))))
	}
	r.root.SetAttributes(rag.AttrFaultInjectedMS.Float64(ms(r.faultDelay)))
	r.p.rec.inst.faults.Add(st.ctx, int64(len(dec.Rules)), metric.WithAttributes(rag.AttrStage.String(string(st.name))))
}

// setLabels makes ctx's pprof labels the current goroutine's, when stage labels are on.
func (r *run) setLabels(ctx context.Context) {
	if r.p.rec.labels {
		pprof.SetGoroutineLabels(ctx)
	}
}

// withStageLabels returns ctx carrying the rag_stage pprof label and, when span is sampled, the
// span_id label with span's id (returned too, for the span's pyroscope.profile.id), when stage
// labels are on. Samples taken during a stage then name the stage's span, as otel-profiling-go's
// all-spans scope does.
func (r *run) withStageLabels(ctx context.Context, name rag.Stage, span trace.Span) (context.Context, string) {
	if !r.p.rec.labels {
		return ctx, ""
	}
	if !span.SpanContext().IsSampled() {
		return pprof.WithLabels(ctx, pprof.Labels(rag.ProfileLabel, string(name))), ""
	}
	id := span.SpanContext().SpanID().String()
	return pprof.WithLabels(ctx, pprof.Labels(rag.ProfileLabel, string(name), rag.ProfileSpanIDLabel, id)), id
}

// errorTypeName names err's Go type as the SDK's RecordError does (exception.type).
func errorTypeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

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

// QueryHash returns the rag.query.hash of a question: the first 16 hex digits of its SHA-256,
// enough to group requests for the same question without recording it.
func QueryHash(question string) string {
	sum := sha256.Sum256([]byte(question))
	return hex.EncodeToString(sum[:8])
}

// messagesJSON renders messages in the semantic conventions' gen_ai.input.messages shape.
func messagesJSON(msgs []rag.Message) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	type message struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	out := make([]message, len(msgs))
	for i, m := range msgs {
		out[i] = message{Role: m.Role, Parts: []part{{Type: "text", Content: m.Content}}}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// outputJSON renders an answer in the semantic conventions' gen_ai.output.messages shape.
func outputJSON(text, finishReason string) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	b, _ := json.Marshal([]struct {
		Role         string `json:"role"`
		Parts        []part `json:"parts"`
		FinishReason string `json:"finish_reason"`
	}{{Role: "assistant", Parts: []part{{Type: "text", Content: text}}, FinishReason: finishReason}})
	return string(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
