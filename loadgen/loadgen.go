package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Request is what one request sends: a chat completion (Messages) or, when Path is set, a plain
// GET of that path on the target's origin (a document lookup such as /v1/documents/{id}). The
// client fills in what a Request leaves out (model, max_tokens, temperature, streaming).
type Request struct {
	Messages     []Message      // the chat messages; for a /v1/completions URL they are joined into the prompt
	MaxTokens    int            // max_tokens of this request; 0 for the client's default
	PromptTokens int            // the source's estimate of the prompt's tokens, used when the server reports no usage
	Path         string         // GET this path (already escaped) instead of a chat completion
	Key          string         // the document key a key lookup asks for, recorded in Record.Key
	Extra        map[string]any // extra top-level body fields of this request, over the client's own
	// Input, when set, makes this an embeddings request (POST /v1/embeddings) of these texts,
	// in one batch; Messages are then not sent.
	Input []string `json:",omitempty"`
	// Continues marks a session step that continues the conversation: it is sent with the
	// messages of the session's earlier chat steps and the server's actual answers to them,
	// followed by its own Messages (the new turn). Run builds those messages.
	Continues bool `json:",omitempty"`
	// KeepAnswer asks the client to keep the answer's text in Record.Answer, because a later
	// step continues the conversation; Run sets it only then, so other requests pay nothing.
	KeepAnswer bool `json:",omitempty"`
	// Cancel, when set, abandons the request at this point (see WithCancellations): the client
	// cancels it there and the record says so (Record.Cancelled).
	Cancel *CancelPoint `json:",omitempty"`
}

// Message is one chat message, as OpenAI's chat completions API takes it: an assistant message
// may carry the tool calls the model made (ToolCalls), and a "tool" message answers one of them
// (ToolCallID). An assistant message with tool calls and no text is sent with a null content.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// MarshalJSON writes the message as OpenAI expects it: content null for an assistant message
// that only calls tools.
func (m Message) MarshalJSON() ([]byte, error) {
	type plain Message
	if m.Content == "" && len(m.ToolCalls) > 0 {
		return json.Marshal(struct {
			Content *string `json:"content"`
			plain
		}{nil, plain(m)})
	}
	return json.Marshal(plain(m))
}

// ToolCall is one call of a function tool, as an assistant message carries it.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function a ToolCall calls and its arguments, a JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Item is one unit of a workload: a request due at At, or a session whose first step is due at
// At and whose later steps follow, each Think after the previous step's response ended (a user
// reads the answer before clicking on). Later steps are not sent once a step failed, or ran
// over Config.SessionStepLimit: the user gave up, and the session counts as interrupted. Sessions under way when sending stops go on
// during the drain; a step still thinking when the run is interrupted or the drain times out is
// never sent and leaves no record.
type Item struct {
	At      time.Duration // intended send offset from the run's start; ignored in a closed loop
	Request Request       // the request, or a session's first step
	Session string        // session id; empty for a lone request
	Then    []Step        // a session's later steps, in order
}

// Step is a later step of a session.
type Step struct {
	Think   time.Duration // wait after the previous step's response ended
	Request Request
}

// Workload plans the requests of a run in order of intended send time: At never decreases.
// It reads no clock (Run owns the clock), so a workload is a pure, seeded sequence that tests
// can table without sleeping. Run calls Next from one goroutine at a time; false ends the run.
type Workload interface {
	Next() (Item, bool)
}

// Doer sends one request and fills in what it measured: Sent, FirstByte, FirstToken, Chunks,
// End, Status, Err, ErrKind, TraceID, ServerTiming and the token counts, every time as an offset
// from origin on the monotonic clock. Run sets the other fields. Do must be safe for concurrent
// use and must return soon after ctx is done. loadgen/client implements it for OpenAI-compatible
// HTTP APIs.
type Doer interface {
	Do(ctx context.Context, req *Request, origin time.Time, rec *Record)
}

// Config is how Run drives a workload.
type Config struct {
	// Workload plans the requests. Required.
	Workload Workload
	// Client sends them. Required.
	Client Doer
	// Concurrency caps the requests in flight; 0 selects DefaultMaxInFlight in an open loop
	// (every request is sent at its intended time as long as fewer are still running). A due
	// request that finds every slot taken waits for one and the wait counts into its latency
	// (it shows as send lag), so a slow server cannot hide its queueing.
	Concurrency int
	// ClosedLoop runs Concurrency users that each send their next item as soon as their
	// previous one ended (the request is intended when the user's slot frees), ignoring the
	// items' At. It is what --request-rate inf with --concurrency N means.
	ClosedLoop bool
	// NumItems stops the run after this many items (requests, or sessions); 0 for no limit.
	NumItems int
	// Duration stops the run after this long: no item is intended at or after it. 0 for no limit.
	Duration time.Duration
	// SessionStepLimit is the user's patience with one session step: a step whose E2EL (from
	// its intended send time) exceeds it ends the session as a failed step does, and the
	// session's remaining steps are not sent. 0 means only a failed step ends a session. Pass
	// the same value as report.Options.SessionStepLimit so that the summary counts the session
	// as interrupted.
	SessionStepLimit time.Duration
	// DrainTimeout bounds the wait for requests still in flight once sending stopped; requests
	// still running then end with ErrKindDrain. 0 selects DefaultDrainTimeout; negative waits
	// without limit.
	DrainTimeout time.Duration
	// Stop, when closed, stops the run gracefully: no item is sent any more, sessions still
	// thinking send no further step, and the requests in flight (and those already due and
	// queued for a slot) are waited for up to DrainTimeout, as at the end of Duration. The
	// Result is marked Interrupted. Cancelling ctx instead aborts at once: requests in flight
	// are cancelled. A command line maps the first Ctrl-C to Stop and a second one to ctx.
	Stop <-chan struct{}
	// Warmup sends this many items (requests, or sessions) first, before the NumItems measured
	// ones; WarmupDuration sends the items intended in its first stretch as warmup, before the
	// Duration measured (NumItems counts the items after it). Warmup items are sent and recorded like any other, with
	// Record.Warmup set, and Result.MeasuredFrom says where the measured run begins; reports
	// leave them out of every statistic.
	Warmup         int
	WarmupDuration time.Duration
	// Stream, if set, receives the records of every item as soon as the item ended: one
	// request's record, or every step of a session in step order. It is called from one
	// goroutine at a time and must not keep the slice. Run then keeps no record (the run's
	// memory stays constant however long it lasts), Result.Records is empty, and a record's
	// Index is the order in which the run created it (the intended send order of lone
	// requests). Without Stream, Run keeps every record and returns them sorted.
	Stream func(records []Record)
	// Start, if set, is the run's offset 0 (Result.Start): Run waits for it when it lies ahead,
	// so that several generators can start on one instant. Zero starts when Run is called.
	Start time.Time
	// Agent, if set, drives a live tool loop: a response that calls tools is followed by a
	// step answering them (see Agent).
	Agent *Agent
	// Info describes the run in the Result.
	Info RunInfo
	// Progress, if set, is called every ProgressInterval (default 1 s) while the run lasts and
	// once at its end, from a goroutine of Run's.
	Progress func(Progress)
	// ProgressInterval is the period of Progress calls.
	ProgressInterval time.Duration
}

// DefaultDrainTimeout is how long Run waits for requests in flight when Config.DrainTimeout is 0.
const DefaultDrainTimeout = 60 * time.Second

// Progress is a snapshot of a running run.
type Progress struct {
	Elapsed  time.Duration // since the run's start
	Sent     int           // requests sent
	Done     int           // requests finished, failed ones included
	Failed   int           // requests that failed
	InFlight int           // requests sent and not finished
	Queued   int           // requests due but waiting for a concurrency slot
	Rate     float64       // requests finished per second over the last interval
	P99E2EL  time.Duration // running P99 of E2EL over every finished request; 0 until 100 have finished
	Final    bool          // the last call, after the drain
}

// Errors Run returns for a configuration it cannot run.
var (
	ErrNoWorkload = errors.New("loadgen: no workload")
	ErrNoClient   = errors.New("loadgen: no client")
	// ErrTooConcurrent is returned for a Concurrency past MaxConcurrency: more connections than
	// the process may open.
	ErrTooConcurrent = errors.New("loadgen: concurrency above the open-file limit")
	// ErrClosedLoopNeedsUsers is returned for a closed loop without users (Concurrency < 1).
	ErrClosedLoopNeedsUsers = errors.New("loadgen: a closed loop needs Concurrency >= 1 users")
	// ErrNegativeWarmup is returned for a negative Warmup or WarmupDuration.
	ErrNegativeWarmup = errors.New("loadgen: negative warmup")
	// ErrUnbounded is returned for a closed loop with neither NumItems nor Duration: it would
	// never end.
	ErrUnbounded = errors.New("loadgen: a closed loop needs NumItems or Duration")
)
