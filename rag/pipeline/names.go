package pipeline

import "github.com/ragtail/ragtail/rag/ragconv"

// The span, event, attribute and label names of the pipeline, defined in ragconv so that
// packages reading them need not import the pipeline. The names here are kept for callers of
// this package. Span names that depend on a backend are "embeddings {model}", "retrieval
// {collection}", "Query {collection}" (one per shard) and "chat {model}", as the GenAI and
// database semantic conventions name them. Every span the pipeline starts carries AttrStage; the
// rag.pipeline span carries the request-level dye.
const (
	SpanPipeline          = ragconv.SpanPipeline
	SpanAdmission         = ragconv.SpanAdmission
	SpanFetch             = ragconv.SpanFetch
	SpanStream            = ragconv.SpanStream
	SpanAgent             = ragconv.SpanAgent
	StageAgent            = ragconv.StageAgent
	StageTool             = ragconv.StageTool
	AttrAgentSteps        = ragconv.AttrAgentSteps
	AttrAgentToolCalls    = ragconv.AttrAgentToolCalls
	EventFirstToken       = ragconv.EventFirstToken
	EventLateShardDropped = ragconv.EventLateShardDropped
	AttrStage             = ragconv.AttrStage
	AttrRequestID         = ragconv.AttrRequestID
	AttrUserID            = ragconv.AttrUserID
	AttrQueryHash         = ragconv.AttrQueryHash
	AttrCoupling          = ragconv.AttrCoupling
	AttrTopK              = ragconv.AttrTopK
	AttrChunkIDs          = ragconv.AttrChunkIDs
	AttrFaultInjectedMS   = ragconv.AttrFaultInjectedMS
	AttrShard             = ragconv.AttrShard
	AttrShards            = ragconv.AttrShards
	AttrShardsAnswered    = ragconv.AttrShardsAnswered
	AttrShardsLate        = ragconv.AttrShardsLate
	AttrShardsFailed      = ragconv.AttrShardsFailed
	AttrHits              = ragconv.AttrHits
	AttrChunksMissing     = ragconv.AttrChunksMissing
	AttrCacheHits         = ragconv.AttrCacheHits
	AttrCacheMisses       = ragconv.AttrCacheMisses
	AttrCacheBlocked      = ragconv.AttrCacheBlocked
	AttrStreamWriteMS     = ragconv.AttrStreamWriteMS
	AttrStreamChunks      = ragconv.AttrStreamChunks
	AttrAdmissionWaitMS   = ragconv.AttrAdmissionWaitMS
	StagePipeline         = ragconv.StagePipeline
	ProfileLabel          = ragconv.ProfileLabel
	ProfileSpanIDLabel    = ragconv.ProfileSpanIDLabel
	AttrProfileID         = ragconv.AttrProfileID
)

// Defaults for backends that do not implement the optional interfaces.
const (
	DefaultProviderName = "ragtail"
	DefaultDBSystem     = "ragtail.memory"
	defaultModelName    = "unknown"
)

// OtherModel is the gen_ai.request.model metric label of every request for a model the
// generator does not serve, so that the label's values stay bounded by the served models plus
// one, whatever clients send.
const OtherModel = "_OTHER"
