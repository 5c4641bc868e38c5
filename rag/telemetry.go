package rag

import "go.opentelemetry.io/otel/attribute"

// ragtail's own telemetry conventions, the way semconv's genaiconv holds OpenTelemetry's: the
// names of the pipeline's spans and span events, the rag.* attribute keys and the rag_stage
// pprof label, shared by the pipeline that writes them and the HTTP API and trace ring that
// read them.

// Span names of the pipeline that do not depend on a backend. The others are "embeddings
// {model}", "retrieval {collection}", "Query {collection}" (one per shard) and "chat {model}",
// as the GenAI and database semantic conventions name them.
const (
	SpanPipeline  = "rag.pipeline"
	SpanAdmission = "rag.admission"
	SpanFetch     = "rag.fetch"
	SpanStream    = "rag.stream"
	// SpanAgent is the span over an agentic request's loop (the GenAI conventions' agent span);
	// its model calls are "chat {model}" spans and its searches "execute_tool search" spans.
	SpanAgent = "invoke_agent"
)

// Span event names.
const (
	// EventFirstToken marks, on the chat span, the moment the first delta carrying text arrived.
	EventFirstToken = "rag.first_token"
	// EventLateShardDropped marks, on the retrieval span, a shard that was still searching when
	// async coupling started generating; its hits are not in the prompt. Attribute rag.shard.
	EventLateShardDropped = "rag.shard.late_dropped"
)

// StagePipeline is the rag.stage of the rag.pipeline span, which spans all the stages. It is a
// span attribute value only: it never appears in Server-Timing.
const StagePipeline = "pipeline"

// ProfileLabel is the pprof label the pipeline sets around each stage (value: the stage name),
// so that CPU profiles can be filtered by stage.
const ProfileLabel = "rag_stage"

// ProfileSpanIDLabel is the pprof label carrying the id of the span a sample was taken in, the
// one otel-profiling-go sets; the pipeline sets it to each sampled stage span's id around the
// stage, so that profiles can be filtered by any stage span.
const ProfileSpanIDLabel = "span_id"

// AttrProfileID is the span attribute naming the span_id label value a span's samples carry
// (otel-profiling-go's pyroscope.profile.id).
const AttrProfileID attribute.Key = "pyroscope.profile.id"

// Attribute keys of the rag.* dye. The pipeline span carries the request-level ones; every span
// the pipeline starts carries AttrStage.
const (
	AttrStage           attribute.Key = "rag.stage"             // the stage a span belongs to
	AttrRequestID       attribute.Key = "rag.request.id"        // the request (completion) id
	AttrUserID          attribute.Key = "rag.user.id"           // X-User-ID, when the client sent one
	AttrQueryHash       attribute.Key = "rag.query.hash"        // first 16 hex digits of SHA-256 of the question
	AttrCoupling        attribute.Key = "rag.coupling"          // sync, fanout or async
	AttrTopK            attribute.Key = "rag.top_k"             // chunks retrieved
	AttrChunkIDs        attribute.Key = "rag.chunk.ids"         // chunks put in the prompt, in rank order
	AttrFaultInjectedMS attribute.Key = "rag.fault.injected_ms" // latency injected by fault rules, in ms
	AttrShard           attribute.Key = "rag.shard"             // the shard a Query span searched
	AttrShardHedged     attribute.Key = "rag.shard.hedged"      // a Query span's search was sent twice (hedge_after)
	AttrShards          attribute.Key = "rag.shards"            // shards searched
	AttrShardsAnswered  attribute.Key = "rag.shards.answered"   // shards whose hits were used
	AttrShardsLate      attribute.Key = "rag.shards.late"       // shards dropped as late (async)
	AttrShardsFailed    attribute.Key = "rag.shards.failed"     // shards that failed (async)
	AttrHits            attribute.Key = "rag.hits"              // hits kept after merging the shards
	AttrChunksMissing   attribute.Key = "rag.chunks.missing"    // hits whose chunk the doc store lacked
	AttrCacheHits       attribute.Key = "rag.cache.hits"        // fetch: lookups answered by the cache
	AttrCacheMisses     attribute.Key = "rag.cache.misses"      // fetch: lookups that went to the store
	AttrCacheBlocked    attribute.Key = "rag.cache.blocked"     // fetch: lookups the Bloom guard ruled out
	AttrStreamWriteMS   attribute.Key = "rag.stream.write_ms"   // stream: total time spent handing deltas to the client
	AttrStreamChunks    attribute.Key = "rag.stream.chunks"     // stream: deltas handed to the client
	AttrAdmissionWaitMS attribute.Key = "rag.admission.wait_ms" // admission: time waited for a slot
)

// StageAgent and StageTool are the rag.stage of an agentic request's invoke_agent and
// execute_tool spans. Like StagePipeline they are span attribute values only: the stages under
// them (generate, embed, retrieve, fetch) are what Server-Timing reports.
const (
	StageAgent = "agent"
	StageTool  = "tool"
)

// Attributes of the invoke_agent span.
const (
	AttrAgentSteps     attribute.Key = "rag.agent.steps"      // model calls made
	AttrAgentToolCalls attribute.Key = "rag.agent.tool_calls" // search calls made
)

// StageHTTP is the rag.stage of the HTTP server span. Like StagePipeline it is a span attribute
// value only.
const StageHTTP = "http"

// Event and attribute names of injected faults on stage spans.
const (
	EventFaultInjected attribute.Key = "rag.fault.injected" // span event name on the stage's span
	AttrFaultRule      attribute.Key = "rag.fault.rule"     // the rule that fired (event attribute)
	AttrFaultDelayMS   attribute.Key = "rag.fault.delay_ms" // the delay added at the stage (event attribute)
)
