// Package rag holds the domain types shared by every part of the ragtail service: queries, chunks,
// retrieval hits, generation deltas, stage and coupling names, token counting and the errors the
// service reports. It imports nothing of the project and nothing of net/http, so the pipeline and
// every backend can depend on it without depending on each other. Its leaf packages, which import
// rag alone and which every backend may import, hold what several backends share: rag/openai the
// OpenAI wire format, HTTP errors and SSE framing; rag/latency the latency laws.
package rag

import (
	"errors"
	"fmt"
	"strings"
)

// Stage names one step of the RAG pipeline. The names are part of the contract: they appear in
// span attributes (rag.stage), metric labels (rag_stage), Server-Timing entries and pprof labels.
type Stage string

// The pipeline's stages, in the order a request passes through them.
const (
	StageAdmission Stage = "admission" // waiting for a worker slot
	StageEmbed     Stage = "embed"     // embedding the query
	StageRetrieve  Stage = "retrieve"  // searching each shard: ids and scores
	StageFetch     Stage = "fetch"     // chunk payloads from the doc store, through the cache
	StageGenerate  Stage = "generate"  // the LLM, from request to last token (TTFT inside it)
	StageStream    Stage = "stream"    // writing tokens to the client
)

// Stages lists every stage in pipeline order.
var Stages = []Stage{StageAdmission, StageEmbed, StageRetrieve, StageFetch, StageGenerate, StageStream}

// Coupling is how retrieval and generation are coupled.
type Coupling string

// The coupling modes, each constant's comment saying what it does.
const (
	// CouplingSync searches shards one after another, fetches payloads one by one, then generates.
	CouplingSync Coupling = "sync"
	// CouplingFanout searches shards and fetches payloads concurrently, waiting for all of them.
	CouplingFanout Coupling = "fanout"
	// CouplingAsync searches concurrently but starts generation once a quorum of shards has
	// answered or a deadline has passed; late results are dropped and counted.
	CouplingAsync Coupling = "async"
)

// Couplings lists the coupling modes.
var Couplings = []Coupling{CouplingSync, CouplingFanout, CouplingAsync}

// ParseCoupling returns the coupling named s ("sync", "fanout" or "async").
func ParseCoupling(s string) (Coupling, error) {
	switch c := Coupling(strings.ToLower(strings.TrimSpace(s))); c {
	case CouplingSync, CouplingFanout, CouplingAsync:
		return c, nil
	}
	return "", fmt.Errorf("%w: coupling %q: want sync, fanout or async", ErrInvalidRequest, s)
}

// Mode is how a request is answered: single-shot (retrieve, then generate once), or agentic,
// where the model is given a search tool and decides when to search and when to answer.
type Mode string

// The modes.
const (
	// ModeSingle retrieves once with the question and generates once: the default, "".
	ModeSingle Mode = ""
	// ModeAgentic calls the model with a search tool; each call of it runs retrieval and feeds
	// the results back as a tool message, until the model answers or the step limit forces it to.
	ModeAgentic Mode = "agentic"
)

// DefaultMaxSteps and MaxMaxSteps bound the model calls of an agentic request: the default, and
// the most a request may ask for.
const (
	DefaultMaxSteps = 5
	MaxMaxSteps     = 16
)

// ParseMode returns the mode named s ("" or "single" for single-shot, "agentic").
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "single":
		return ModeSingle, nil
	case "agentic":
		return ModeAgentic, nil
	}
	return "", fmt.Errorf("%w: mode %.32q: want single or agentic", ErrInvalidRequest, s)
}

// Sentinel errors. Match them with errors.Is; the HTTP layer maps each one to a status code.
var (
	// ErrInvalidRequest means the request is malformed or its parameters are out of range (400).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnknownModel means the requested model is not served here (404, code model_not_found).
	ErrUnknownModel = errors.New("unknown model")
	// ErrNotFound means a document or chunk id does not exist (404).
	ErrNotFound = errors.New("not found")
	// ErrOverloaded means admission control shed the request (503 with Retry-After).
	ErrOverloaded = errors.New("overloaded")
	// ErrUnavailable means a backend could not be reached or failed (503).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrTimeout means a stage missed its deadline (504).
	ErrTimeout = errors.New("deadline exceeded")
)

// StageError wraps an error with the stage it happened in, so that clients and traces can tell
// which part of the pipeline failed.
type StageError struct {
	Stage Stage
	Err   error
}

func (e *StageError) Error() string { return string(e.Stage) + ": " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *StageError) Unwrap() error { return e.Err }

// AtStage wraps err with stage unless it is nil or already carries a stage.
func AtStage(stage Stage, err error) error {
	if err == nil {
		return nil
	}
	var se *StageError
	if errors.As(err, &se) {
		return err
	}
	return &StageError{Stage: stage, Err: err}
}

// StageOf returns the stage an error happened in, or "" if it carries none.
func StageOf(err error) Stage {
	if se, ok := errors.AsType[*StageError](err); ok {
		return se.Stage
	}
	return ""
}
