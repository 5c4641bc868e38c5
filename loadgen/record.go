// Package loadgen is ragtail's open-loop load generator: pure arrival processes give every request
// an intended send time, a scheduler that owns the clock sends each one on time (no worker cap
// unless asked), and every request leaves a Record measured from its intended send time, so a
// stalled server cannot hide its queueing (no coordinated omission). It speaks HTTP only and
// never imports the service's packages, so it drives any OpenAI-compatible deployment.
package loadgen

import "time"

// Record is everything measured about one request. Times are offsets from the run's start
// (Result.Start) on the generator's monotonic clock; a zero offset after Sent means the event
// did not happen (no first byte, no token).
type Record struct {
	Index   int    `json:"i"`                 // order of the intended send times, from 0
	Session string `json:"session,omitempty"` // session id when sessions are replayed
	Step    int    `json:"step,omitempty"`    // step within the session, from 0
	Key     string `json:"key,omitempty"`     // document key of a key-lookup request
	// Warmup marks a request of the warmup (Config.Warmup, WarmupDuration): sent and
	// recorded, but in no statistic.
	Warmup bool `json:"warmup,omitempty"`
	// NotSent marks a session step the run stopped before it was due: its user was still
	// thinking when the drain timed out or the run was interrupted. It carries no measurement
	// (Intended, Sent and End are when the run gave up on it; Err says when it was due) and only
	// tells that its session was cut.
	NotSent bool `json:"not_sent,omitempty"`
	// CancelPlanned marks a request chosen to be abandoned (Request.Cancel); Cancelled, one the
	// client did abandon, at CancelledAt (an offset like the others). A planned request whose
	// response ended before its cancel point is not Cancelled. A cancelled request is neither a
	// success nor a failure: it carries no error, and OK reports false.
	CancelPlanned bool          `json:"cancel_planned,omitempty"`
	Cancelled     bool          `json:"cancelled,omitempty"`
	CancelledAt   time.Duration `json:"cancelled_ns,omitempty"`

	Intended   time.Duration `json:"intended_ns"`              // when the arrival process wanted it sent
	Sent       time.Duration `json:"sent_ns"`                  // when it was actually written to the connection
	FirstByte  time.Duration `json:"first_byte_ns,omitempty"`  // first response byte (headers)
	FirstToken time.Duration `json:"first_token_ns,omitempty"` // first chunk carrying content
	// FirstOutput is the first chunk carrying answer content, not reasoning (reasoning_content
	// or reasoning deltas): the same as FirstToken for a server that does not reason aloud.
	FirstOutput time.Duration `json:"first_output_ns,omitempty"`
	// Reasoned marks a response that streamed reasoning (reasoning_content or reasoning
	// deltas), before its answer or without one.
	Reasoned bool          `json:"reasoned,omitempty"`
	End      time.Duration `json:"end_ns"`           // last byte, or the failure
	Chunks   []Chunk       `json:"chunks,omitempty"` // every content chunk, in order

	// The connection's phases, from the transport's httptrace hooks: on a new connection
	// (NewConn), how long the DNS lookup, the TCP connect and the TLS handshake took, each 0
	// when it did not happen (an IP address needs no lookup, http:// no handshake); a request on
	// a kept-alive connection (ConnReused) had none of them.
	NewConn      bool          `json:"new_conn,omitempty"`
	ConnReused   bool          `json:"conn_reused,omitempty"`
	DNS          time.Duration `json:"dns_ns,omitempty"`
	Connect      time.Duration `json:"connect_ns,omitempty"`
	TLSHandshake time.Duration `json:"tls_ns,omitempty"`

	Status  int    `json:"status"`             // HTTP status; 0 if no response
	Err     string `json:"error,omitempty"`    // what went wrong, for humans
	ErrKind string `json:"err_kind,omitempty"` // bounded class: see the ErrKind constants

	TraceID      string             `json:"trace_id,omitempty"`      // from the traceparent the server returned (or we sent)
	ServerTiming map[string]float64 `json:"server_timing,omitempty"` // stage -> ms, from Server-Timing

	PromptTokens    int  `json:"prompt_tokens,omitempty"`
	OutputTokens    int  `json:"output_tokens,omitempty"`
	TokensFromUsage bool `json:"tokens_from_usage,omitempty"` // OutputTokens came from the server's usage, not counted
	CachedTokens    int  `json:"cached_tokens,omitempty"`     // usage.prompt_tokens_details.cached_tokens: prompt tokens the server's prefix cache held
	ReasoningTokens int  `json:"reasoning_tokens,omitempty"`  // usage.completion_tokens_details.reasoning_tokens, within OutputTokens
	Inputs          int  `json:"inputs,omitempty"`            // texts embedded, for an embeddings request

	// ToolCalls counts the tool calls the response made (an agent's step that calls tools).
	ToolCalls int `json:"tool_calls,omitempty"`
	// ToolWait is the tool latency the generator waited, after the previous step's response
	// ended, before this step was due (Config.Agent): it is in the agent's latency, not in this
	// step's, which runs from its intended send time as every request's does.
	ToolWait time.Duration `json:"tool_wait_ns,omitempty"`
	// AgentCut marks the last step of an agent's loop that the step bound cut: the response
	// called tools, and Agent.MaxSteps steps had been sent.
	AgentCut bool `json:"agent_cut,omitempty"`

	// Answer is the answer's text, kept only when the request asked for it (KeepAnswer) and
	// only until the session's next step is built from it; it is never written out.
	Answer string `json:"-"`
	// Calls are the tool calls the response made, kept with Answer (KeepAnswer) for the next
	// step of an agent's loop; never written out.
	Calls []ToolCall `json:"-"`
	// ResponseModel is the model the response named (the "model" of its first chunk that has
	// one, cut at 256 bytes), kept only when the client traces requests, for the client span's
	// gen_ai.response.model; it is never written out.
	ResponseModel string `json:"-"`
}

// Chunk is one content chunk of a streamed response.
type Chunk struct {
	At     time.Duration `json:"at_ns"` // arrival, offset from the run's start
	Tokens int           `json:"tokens"`
}

// Error kinds: a bounded set, for tables and metrics.
const (
	ErrKindConnect  = "connect"  // could not connect or write the request
	ErrKindTimeout  = "timeout"  // the request timed out
	ErrKindHTTP4xx  = "http_4xx" // the server answered 4xx
	ErrKindHTTP5xx  = "http_5xx" // the server answered 5xx
	ErrKindStream   = "stream"   // an error event in the stream, or a stream cut without [DONE]
	ErrKindProtocol = "protocol" // a response that is not what the API promises
	ErrKindCanceled = "canceled" // the run was interrupted before the request finished
	ErrKindDrain    = "drain"    // still running when --drain-timeout expired
	// ErrKindOverlong marks a response that went on far past its max_tokens: more than
	// max(2·max_tokens, max_tokens+64) output tokens (or 2^18 without max_tokens). The client
	// stops reading it there, so an endless stream costs bounded memory and time.
	ErrKindOverlong = "overlong"
)

// OK reports whether the request completed successfully: not abandoned (Cancelled), no error
// and a 2xx status.
func (r *Record) OK() bool {
	return !r.Cancelled && r.ErrKind == "" && r.Status >= 200 && r.Status < 300
}

// TTFT is the time to first token: first content token minus intended send time.
func (r *Record) TTFT() (time.Duration, bool) {
	if r.FirstToken == 0 {
		return 0, false
	}
	return r.FirstToken - r.Intended, true
}

// TTFO is the time to first output token: the first answer content (not reasoning) minus the
// intended send time.
func (r *Record) TTFO() (time.Duration, bool) {
	if r.FirstOutput == 0 {
		return 0, false
	}
	return r.FirstOutput - r.Intended, true
}

// E2EL is the end-to-end latency: last byte minus intended send time.
func (r *Record) E2EL() time.Duration { return r.End - r.Intended }

// ServiceE2EL is the end-to-end latency from the actual send: last byte minus sent.
func (r *Record) ServiceE2EL() time.Duration { return r.End - r.Sent }

// TTFB is the time to first byte: the response's first byte (its headers) minus the actual
// send, the server's wait and the network's, without the generator's send lag.
func (r *Record) TTFB() (time.Duration, bool) {
	if r.FirstByte == 0 || r.FirstByte < r.Sent {
		return 0, false
	}
	return r.FirstByte - r.Sent, true
}

// SendLag is how late the request was sent: sent minus intended.
func (r *Record) SendLag() time.Duration { return r.Sent - r.Intended }

// TPOT is the time per output token after the first: (E2EL - TTFT) / (output tokens - 1). It is
// undefined for fewer than two output tokens.
func (r *Record) TPOT() (time.Duration, bool) {
	ttft, ok := r.TTFT()
	if !ok || r.OutputTokens < 2 {
		return 0, false
	}
	return (r.E2EL() - ttft) / time.Duration(r.OutputTokens-1), true
}

// ITLs returns the inter-token latencies: the gaps between consecutive content chunks.
func (r *Record) ITLs() []time.Duration {
	if len(r.Chunks) < 2 {
		return nil
	}
	out := make([]time.Duration, 0, len(r.Chunks)-1)
	for i := 1; i < len(r.Chunks); i++ {
		out = append(out, r.Chunks[i].At-r.Chunks[i-1].At)
	}
	return out
}

// Result is one run: its records in index order and how it was run.
type Result struct {
	Start    time.Time     `json:"start"`    // wall-clock time of offset 0
	Duration time.Duration `json:"duration"` // from start to the last request's end
	// MeasuredFrom is where the measured run begins, after the warmup: the warmup duration,
	// or the intended send time of the first item after the warmup items; 0 without warmup.
	MeasuredFrom time.Duration `json:"measured_from,omitempty"`
	// Warmup counts the records of warmup requests.
	Warmup int `json:"warmup,omitempty"`
	// SlotWaits counts the requests that found every slot of the cap on requests in flight
	// taken and waited for one (their wait is in their send lag).
	SlotWaits int      `json:"slot_waits,omitempty"`
	Records   []Record `json:"-"`
	Config    RunInfo  `json:"config"`
}

// RunInfo describes the run for reports.
type RunInfo struct {
	URL         string  `json:"url"`
	Model       string  `json:"model,omitempty"`
	Shape       string  `json:"shape"`                 // arrival process, e.g. "poisson(rate=10)"
	RequestRate float64 `json:"request_rate"`          // +Inf for closed loop
	Burstiness  float64 `json:"burstiness,omitempty"`  // gamma shape; 1 is Poisson
	Concurrency int     `json:"concurrency,omitempty"` // cap, 0 for none
	// InFlightCap is the open loop's default cap on requests in flight (DefaultMaxInFlight)
	// when Concurrency set none.
	InFlightCap int    `json:"in_flight_cap,omitempty"`
	NumPrompts  int    `json:"num_prompts,omitempty"` // requests asked for
	MaxTokens   int    `json:"max_tokens,omitempty"`  // max_tokens sent
	Seed        uint64 `json:"seed"`
	// Segment is the share of the schedule this generator sent, for one of several hosts that
	// send a schedule together; nil for a whole schedule. RequestRate and NumPrompts are then
	// those of the whole schedule.
	Segment *SegmentOf `json:"segment,omitempty"`
	// ScheduleHash identifies the schedule (arrivals, prompts, limits): the segments of one
	// schedule share it.
	ScheduleHash string `json:"schedule_hash,omitempty"`
	Interrupted  bool   `json:"interrupted,omitempty"` // stopped by Ctrl-C
	// What every request sent beyond its prompt, and what made the run (WithRequests,
	// WithProvenance); empty when the caller did not say.
	Dataset     string   `json:"dataset,omitempty"`
	Stream      *bool    `json:"stream,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"` // nil: the server's default
	Version     string   `json:"version,omitempty"`
	Command     string   `json:"command,omitempty"` // shell-quoted, secrets redacted
	// HTTPClient names the HTTP transport the requests went through ("h1", "net/http"); empty
	// when the caller did not say.
	HTTPClient string `json:"http_client,omitempty"`
	// Cancel is the run's cancellations as --cancel reads them (Cancellations.String); empty
	// when the run abandoned no request.
	Cancel string `json:"cancel,omitempty"`
}

// NewRunInfo starts the description of a run for the reports: the target url, the model sent
// ("" for the server's default), the arrival process as the reports name it, its mean request
// rate (+Inf for a closed loop or all at once, 0 when a profile sets it) and the seed. The
// With methods fill in the rest; every caller that runs a load describes it this way.
func NewRunInfo(url, model, shape string, rate float64, seed uint64) RunInfo {
	return RunInfo{URL: url, Model: model, Shape: shape, RequestRate: rate, Seed: seed}
}

// WithLimits sets the cap on requests in flight (or the closed-loop users), the requests asked
// for and the max_tokens sent; 0 is none for each.
func (i RunInfo) WithLimits(concurrency, numPrompts, maxTokens int) RunInfo {
	i.Concurrency, i.NumPrompts, i.MaxTokens = concurrency, numPrompts, maxTokens
	return i
}

// WithBurstiness sets the gamma shape of the gaps (1 is Poisson; 0 when it does not apply).
func (i RunInfo) WithBurstiness(b float64) RunInfo {
	i.Burstiness = b
	return i
}

// WithHTTPClient records the HTTP transport the requests go through.
func (i RunInfo) WithHTTPClient(name string) RunInfo {
	i.HTTPClient = bound(name)
	return i
}

// WithCancel records the run's cancellations (none for the zero Cancellations).
func (i RunInfo) WithCancel(c Cancellations) RunInfo {
	i.Cancel = bound(c.String())
	return i
}

// WithSchedule sets the hash of the seeded schedule and the share of it this generator sends
// (nil for the whole schedule).
func (i RunInfo) WithSchedule(hash string, seg *SegmentOf) RunInfo {
	i.ScheduleHash, i.Segment = hash, seg
	return i
}
