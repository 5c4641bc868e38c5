package pipeline

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/dbconv"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"

	"github.com/ragtail/ragtail/rag"
)

// Histogram bucket boundaries, in the unit of each instrument. The gen_ai and db ones are those
// the OpenTelemetry semantic conventions specify; the stage and queue-wait buckets follow the
// same roughly-doubling progression from 0.5 ms to 30 s, since a stage can be anywhere from a
// cache hit to a long generation.
var (
	bucketsGenAIDuration = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	bucketsGenAITokens   = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	bucketsTTFT          = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	bucketsTPOT          = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	bucketsDB            = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}
	bucketsSteps         = []float64{1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 32}
	bucketsStage         = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// instrumentationName is the instrumentation scope of the pipeline's tracer and meter.
const instrumentationName = "github.com/ragtail/ragtail/rag/pipeline"

// instruments are the pipeline's metric instruments, created once. The gen_ai client ones
// follow the semantic conventions the pipeline was built with: v1.41's names by default, the
// latest conventions' (WithGenAILatest) otherwise; the instruments of the other set are nil.
type instruments struct {
	// The request as a GenAI server sees it (both sets).
	ttft, tpot, serverDur metric.Float64Histogram
	// v1.41: gen_ai.client.operation.duration for both operations, gen_ai.client.token.usage.
	clientDur  metric.Float64Histogram
	tokenUsage metric.Int64Histogram
	// Latest: inference (chat) and embeddings apart, usage counters and per-operation token
	// histograms.
	inferenceDur, inferenceTTFC, inferenceTPOC metric.Float64Histogram
	embeddingsDur                              metric.Float64Histogram
	embeddingsInput                            metric.Int64Histogram
	opInput, opOutput                          metric.Int64Histogram
	usageInput, usageOutput                    metric.Int64Counter
	usageCacheRead, usageReasoning             metric.Int64Counter

	// The agent loop's: ragtail's own names by default, the conventions' with the latest names.
	agentDur, toolDur          metric.Float64Histogram
	agentCalls, agentToolCalls metric.Int64Histogram

	dbDur      metric.Float64Histogram
	stageDur   metric.Float64Histogram
	cacheReq   metric.Int64Counter
	queueWait  metric.Float64Histogram
	rejected   metric.Int64Counter
	inflight   metric.Int64UpDownCounter
	faults     metric.Int64Counter
	lateShards metric.Int64Counter
}

// newInstruments creates the instruments on mp's meter.
func newInstruments(mp metric.MeterProvider, latest bool) (*instruments, error) {
	m := mp.Meter(instrumentationName)
	var (
		in   instruments
		errs []error
	)
	f64 := func(name, unit, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	i64 := func(name, unit, desc string, bounds []float64) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	// The names semconv's Go packages hold are made by them; the latest conventions have no Go
	// package yet.
	keep := func(err error) { errs = append(errs, err) }
	ttft, err := genaiconv.NewServerTimeToFirstToken(m, metric.WithExplicitBucketBoundaries(bucketsTTFT...))
	in.ttft = ttft.Float64Histogram
	keep(err)
	tpot, err := genaiconv.NewServerTimePerOutputToken(m, metric.WithExplicitBucketBoundaries(bucketsTPOT...))
	in.tpot = tpot.Float64Histogram
	keep(err)
	serverDur, err := genaiconv.NewServerRequestDuration(m, metric.WithExplicitBucketBoundaries(bucketsGenAIDuration...))
	in.serverDur = serverDur.Float64Histogram
	keep(err)
	if latest {
		in.inferenceDur = f64("gen_ai.client.inference.duration", "s", "GenAI client inference operation duration.", bucketsGenAIDuration)
		in.inferenceTTFC = f64("gen_ai.client.inference.time_to_first_chunk", "s", "Time to receive the first chunk, from when the client issues the generation request.", bucketsGenAIDuration)
		in.inferenceTPOC = f64("gen_ai.client.inference.time_per_output_chunk", "s", "Time per output chunk, for each chunk after the first, from the end of the previous chunk.", bucketsGenAIDuration)
		in.embeddingsDur = f64("gen_ai.client.embeddings.duration", "s", "GenAI client embeddings operation duration.", bucketsGenAIDuration)
		in.embeddingsInput = i64("gen_ai.client.embeddings.operation.input_tokens", "{token}", "Input tokens of one embeddings operation.", bucketsGenAITokens)
		in.opInput = i64("gen_ai.client.inference.operation.input_tokens", "{token}", "Input tokens of one inference operation.", bucketsGenAITokens)
		in.opOutput = i64("gen_ai.client.inference.operation.output_tokens", "{token}", "Output tokens of one inference operation.", bucketsGenAITokens)
		in.usageInput = counter("gen_ai.client.inference.usage.input_tokens", "{token}", "Input tokens used by inference operations.")
		in.usageOutput = counter("gen_ai.client.inference.usage.output_tokens", "{token}", "Output tokens used by inference operations.")
		in.usageCacheRead = counter("gen_ai.client.inference.usage.cache_read.input_tokens", "{token}", "Input tokens served from the provider's cache.")
		in.usageReasoning = counter("gen_ai.client.inference.usage.reasoning.output_tokens", "{token}", "Output tokens used for reasoning.")
	} else {
		clientDur, err := genaiconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(bucketsGenAIDuration...))
		in.clientDur = clientDur.Float64Histogram
		keep(err)
		tokenUsage, err := genaiconv.NewClientTokenUsage(m, metric.WithExplicitBucketBoundaries(bucketsGenAITokens...))
		in.tokenUsage = tokenUsage.Int64Histogram
		keep(err)
	}
	agent := map[bool][4]string{
		false: {"rag.agent.duration", "rag.agent.inference_calls", "rag.agent.tool_calls", "rag.tool.duration"},
		true:  {"gen_ai.invoke_agent.duration", "gen_ai.invoke_agent.inference_calls", "gen_ai.invoke_agent.tool_calls", "gen_ai.execute_tool.duration"},
	}[latest]
	in.agentDur = f64(agent[0], "s", "Duration of an agentic request's loop, from its first model call to its answer.", bucketsGenAIDuration)
	in.agentCalls = i64(agent[1], "{call}", "Model calls of one agentic request.", bucketsSteps)
	in.agentToolCalls = i64(agent[2], "{call}", "Tool calls of one agentic request.", bucketsSteps)
	in.toolDur = f64(agent[3], "s", "Duration of one tool call: the search tool's retrieval.", bucketsGenAIDuration)
	dbDur, err := dbconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(bucketsDB...))
	in.dbDur = dbDur.Float64Histogram
	keep(err)
	in.stageDur = f64("rag.stage.duration", "s",
		"Duration of each pipeline stage (the Server-Timing durations); the stream stage counts only the time spent handing tokens to the client.", bucketsStage)
	in.cacheReq = counter("rag.cache.requests", "{request}",
		"Doc-store lookups made while fetching chunks, by how they were answered: hit (cache), miss (backing store) or blocked (Bloom guard).")
	in.queueWait = f64("rag.admission.queue_wait", "s", "Time admitted requests waited for a worker slot.", bucketsStage)
	in.rejected = counter("rag.admission.rejected", "{request}", "Requests shed by admission control (503).")
	in.inflight, err = m.Int64UpDownCounter("rag.inflight_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests running the pipeline now, waiting for admission included."))
	errs = append(errs, err)
	in.faults = counter("rag.fault.injected", "{fault}", "Faults injected by fault rules.")
	in.lateShards = counter("rag.shard.late_dropped", "{shard}",
		"Shards still searching when async coupling started generating; their hits were left out of the prompt.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Counters of rare events start at zero, so that their series exist (and rate() works)
	// before the first event.
	for _, c := range []metric.Int64Counter{in.faults, in.rejected, in.lateShards} {
		c.Add(context.Background(), 0)
	}
	return &in, nil
}

// withError returns attrs with error.type added when err is not nil. error.type has a closed
// set of values (ErrorType), so the series stay bounded.
func withError(err error, attrs ...attribute.KeyValue) metric.MeasurementOption {
	if err != nil {
		attrs = append(attrs, semconv.ErrorTypeKey.String(ErrorType(err)))
	}
	return metric.WithAttributes(attrs...)
}

// ErrorType classifies err into the low-cardinality error.type value the pipeline puts on spans
// and metrics: overloaded, timeout, canceled, client_disconnected, unknown_model,
// invalid_request, not_found, unavailable, or _OTHER.
func ErrorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, rag.ErrOverloaded):
		return "overloaded"
	case errors.Is(err, rag.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, rag.ErrUnknownModel):
		return "unknown_model"
	case errors.Is(err, rag.ErrInvalidRequest):
		return "invalid_request"
	case errors.Is(err, rag.ErrNotFound):
		return "not_found"
	case errors.Is(err, rag.ErrUnavailable):
		return "unavailable"
	case rag.StageOf(err) == rag.StageStream:
		return "client_disconnected"
	}
	return "_OTHER"
}
