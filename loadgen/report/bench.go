package report

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// Bench is the summary of one run (or of several merged): the ragtail.bench/v1 document.
// Summarize and Merge fill every field; Decode fills them from a file.
type Bench struct {
	Start  time.Time       // wall-clock time of the run's offset 0 (the earliest, when merged)
	Config loadgen.RunInfo // how the run was made (summed rates and concurrencies when merged)

	// What the summary was computed with.
	Percentiles      []float64
	Metrics          []string
	Confidence       float64
	Goodput          stats.SLOs
	SessionStepLimit time.Duration
	// Pricing is the target's hardware cost (Options.Pricing), for Cost.
	Pricing Pricing

	// Clock is the load generator's estimate of the target's clock during the run; nil when no
	// response carried the server's time, and after a merge (each host has its own offset).
	Clock *Clock

	MergedFrom int      // runs merged into this one; 0 or 1 for a single run
	Sources    []string // files merged, when known

	// Warmup counts the warmup requests: sent and recorded, and left out of every figure here.
	// Start is then the start of the measured run, after the warmup.
	Warmup int64

	Completed, Failed int64
	// Cancellations counts the requests abandoned on purpose (--cancel), neither completed nor
	// failed; nil when the run abandoned none.
	Cancellations     *Cancellations
	Duration          time.Duration // the measured window: start to the last request's end
	InputTokens       int64         // prompt tokens of completed requests
	OutputTokens      int64         // output tokens of completed requests (usage, else counted)
	CachedTokens      int64         // prompt tokens the server's prefix cache held (usage), completed requests
	ReasoningTokens   int64         // reasoning tokens among OutputTokens (usage), completed requests
	ReasoningRequests int64         // completed requests whose response streamed reasoning (see MetricTTFO)
	EmbeddedInputs    int64         // texts embedded by completed embeddings requests

	RequestThroughput    float64  // completed requests per second over Duration
	OutputThroughput     float64  // output tokens per second
	TotalTokenThroughput float64  // input + output tokens per second
	GoodRequests         int64    // completed requests meeting every goodput SLO
	GoodputRate          *float64 // GoodRequests per second; nil without SLOs

	Stats    []MetricStats // one per metric in Metrics, in that order
	Stages   []StageStats  // per server stage (Server-Timing), in pipeline order
	Tails    []MetricTail  // for TailMetrics
	Sessions *Sessions     // nil when no request carried a session id
	Turns    []TurnStats   // by session step; nil when no request carried a session id
	Agents   *Agents       // an agent's conversations; nil unless Options.Agent
	Slowest  []SlowRequest // slowest first
	Timeline []TimelineBin
	Slices   []Slice      // with Options.Slice: the run in slices of that width, each summarised
	HoldSLO  *HoldSLO     // bench --hold-slo: the search for the SLO's edge and the held stretch; nil otherwise
	Errors   []ErrorCount // by kind, most frequent first

	// ServerMetrics is the target's own metrics during the run; nil when none were scraped,
	// and after a merge.
	ServerMetrics *ServerMetrics

	// NewConns counts the measured requests that opened a connection, ReusedConns those sent on a
	// kept-alive one; Phases summarises PhaseHistograms, one per phase of AllPhases (see
	// phases.go), for the phases with samples.
	NewConns, ReusedConns int64
	Phases                []MetricStats
	PhaseHistograms       map[string]*stats.Histogram

	// TokenLengths is the distribution of prompt and output lengths of completed requests.
	TokenLengths TokenLengths

	// Histograms holds one histogram per metric of AllMetrics and StageHistograms one per
	// stage: the exact data every figure above is computed from, and what Merge adds up.
	Histograms      map[string]*stats.Histogram
	StageHistograms map[string]*stats.Histogram
}

// ErrorRate is the fraction of the measured requests that failed: Failed / (Completed +
// Failed); NaN when there were none.
func (b *Bench) ErrorRate() float64 { return ratio(b.Failed, b.Completed+b.Failed) }

// MetricStats summarises one metric.
type MetricStats struct {
	Metric      string
	Count       int64 // samples
	Mean        time.Duration
	Median      time.Duration
	Std         time.Duration
	Percentiles []PercentileStat
}

// PercentileStat is one percentile with its distribution-free confidence interval.
type PercentileStat struct {
	P      float64 // in percent
	Value  time.Duration
	Lo, Hi time.Duration
	HasCI  bool // false when there are too few samples for an interval at the confidence
}

// StageStats summarises one server stage's durations from Server-Timing.
type StageStats struct {
	Stage       string
	Count       int64
	Mean        time.Duration
	Percentiles []PercentileStat
}

// MetricTail is the tail analysis of one metric.
type MetricTail struct {
	Metric string
	stats.Tail
}

// Sessions counts replayed user sessions. A step is good when its request completed within
// StepLimit (any latency when StepLimit is 0), bad when it failed or was slower, and cut when it
// was canceled or still running at the end of the run (ErrKindCanceled, ErrKindDrain). Going
// through a session's steps in order, the first step that is not good decides: a bad one
// interrupts the session (the user gave up), a cut one truncates it (the run ended; truncated
// sessions are left out of the rates); a session whose steps are all good is completed.
type Sessions struct {
	Count       int64 // sessions seen
	Completed   int64
	Interrupted int64
	Truncated   int64
	// FirstSteps counts the sessions whose first step was good or bad (not cut), and
	// FirstStepsGood those whose first step was good: the article's first-screen completion.
	FirstSteps     int64
	FirstStepsGood int64
	StepLimit      time.Duration
}

// CompletionRate is Completed / (Completed + Interrupted); NaN when there is neither.
func (s *Sessions) CompletionRate() float64 { return ratio(s.Completed, s.Completed+s.Interrupted) }

// InterruptionRate is Interrupted / (Completed + Interrupted); NaN when there is neither.
func (s *Sessions) InterruptionRate() float64 {
	return ratio(s.Interrupted, s.Completed+s.Interrupted)
}

// FirstStepCompletionRate is FirstStepsGood / FirstSteps; NaN when FirstSteps is 0.
func (s *Sessions) FirstStepCompletionRate() float64 { return ratio(s.FirstStepsGood, s.FirstSteps) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// SlowRequest is one of the slowest requests, to look up by trace id.
type SlowRequest struct {
	Index    int
	TraceID  string
	Session  string
	Intended time.Duration // offset of the intended send time from Start
	E2EL     time.Duration
	TTFT     time.Duration // 0 when no content token arrived
	Status   int
	ErrKind  string // "" when it completed
	// ServerTiming is the server's stage durations in ms from its Server-Timing header (nil
	// when it sent none), to join the client's latency with what the server spent it on.
	ServerTiming map[string]float64
}

// ClockMethod names how Clock is estimated.
const ClockMethod = "ntp-style: server time (Server-Timing or Date) bracketed by send and first byte; " +
	"the sample with the shortest round trip"

// Clock is the estimated offset of the target's clock from the load generator's: server time
// minus client time, within plus or minus Uncertainty (half the round trip of the best of
// Samples responses). Subtract Offset from a server timestamp to put it on the run's clock.
type Clock struct {
	Offset      time.Duration
	Uncertainty time.Duration
	Samples     int
	Method      string
}

// TimelineBin is one bin of the timeline. Sent counts requests by actual send time, Completed
// and Failed by end time; the latency fields cover the completed requests whose intended send
// time falls in the bin, so a stall shows at the arrivals that suffered from it. Percentiles are
// given only when the bin holds enough samples for a 95% interval around them (6 for the
// median, 368 for P99) and are not kept through a merge of several runs; counts, means and
// maxima are.
type TimelineBin struct {
	T, Width                time.Duration // offset of the bin from Start, and its width
	Sent, Completed, Failed int64
	// OutputTokens counts the output tokens of completed requests that arrived in the bin: a
	// streamed chunk's at its arrival, the rest of the request's count at its end.
	OutputTokens      int64
	N                 int64 // completed requests intended in the bin
	MeanE2EL, MaxE2EL time.Duration
	P50E2EL, P99E2EL  *time.Duration
	NTTFT             int64 // of those, requests with a first token
	MeanTTFT, MaxTTFT time.Duration
	P50TTFT, P99TTFT  *time.Duration
}

// ErrorCount is how many requests failed with one kind of error, and one message of that kind.
type ErrorCount struct {
	Kind    string
	Count   int64
	Example string
}

// newBench returns an empty bench computed with o (already defaulted).
func newBench(o Options) *Bench {
	b := &Bench{
		Percentiles:      o.Percentiles,
		Metrics:          o.Metrics,
		Confidence:       o.Confidence,
		Goodput:          o.Goodput,
		SessionStepLimit: o.SessionStepLimit,
		Pricing:          o.Pricing,
		Histograms:       map[string]*stats.Histogram{},
		StageHistograms:  map[string]*stats.Histogram{},
		PhaseHistograms:  newPhaseHistograms(),
	}
	for _, m := range AllMetrics {
		b.Histograms[m] = stats.NewHistogram()
	}
	return b
}

// errKind classifies a failed record: its ErrKind, else its HTTP status class.
func errKind(r *loadgen.Record) string {
	switch {
	case r.ErrKind != "":
		return r.ErrKind
	case r.Status >= 500:
		return loadgen.ErrKindHTTP5xx
	case r.Status >= 400:
		return loadgen.ErrKindHTTP4xx
	case r.Status == 0:
		return loadgen.ErrKindConnect
	default:
		return loadgen.ErrKindProtocol
	}
}

// outputTokens is the record's output token count: the server's usage or the client's count,
// or, when the client recorded neither, the sum over its chunks.
func outputTokens(r *loadgen.Record) int {
	if r.OutputTokens > 0 {
		return r.OutputTokens
	}
	n := 0
	for _, c := range r.Chunks {
		n += c.Tokens
	}
	return n
}

// latencies computes the request-level latencies of a completed record.
func latencies(r *loadgen.Record, out int) stats.RequestLatencies {
	l := stats.RequestLatencies{E2EL: r.E2EL()}
	l.TTFT, l.HasTTFT = r.TTFT()
	l.TTFO, l.HasTTFO = r.TTFO()
	if l.HasTTFT && out >= 2 {
		l.TPOT, l.HasTPOT = (l.E2EL-l.TTFT)/time.Duration(out-1), true
	}
	for _, gap := range r.ITLs() {
		l.MaxITL, l.HasITL = max(l.MaxITL, gap), true
	}
	return l
}

func sortErrors(errs map[string]*ErrorCount) []ErrorCount {
	out := make([]ErrorCount, 0, len(errs))
	for _, e := range errs {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b ErrorCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// finish computes everything that derives from the counts and the histograms.
func (b *Bench) finish() {
	secs := b.Duration.Seconds()
	per := func(n int64) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(n) / secs
	}
	b.RequestThroughput = per(b.Completed)
	b.OutputThroughput = per(b.OutputTokens)
	b.TotalTokenThroughput = per(b.InputTokens + b.OutputTokens)
	b.GoodputRate = nil
	if len(b.Goodput.Requests()) > 0 {
		g := per(b.GoodRequests)
		b.GoodputRate = &g
	}
	b.Stats = b.Stats[:0]
	for _, m := range b.Metrics {
		if !b.reports(m) {
			continue
		}
		h := b.Histograms[m]
		b.Stats = append(b.Stats, MetricStats{
			Metric: m, Count: h.Count(), Mean: h.Mean(), Median: h.Quantile(0.5), Std: h.StdDev(),
			Percentiles: percentiles(h, b.Percentiles, b.Confidence),
		})
	}
	b.finishPhases()
	b.Stages = b.Stages[:0]
	for _, st := range stageOrder(b.StageHistograms) {
		h := b.StageHistograms[st]
		b.Stages = append(b.Stages, StageStats{Stage: st, Count: h.Count(), Mean: h.Mean(),
			Percentiles: percentiles(h, b.Percentiles, b.Confidence)})
	}
	b.finishTurns()
	if b.Agents != nil {
		b.Agents.finish(b.Percentiles, b.Confidence, b.Duration)
	}
	b.Tails = b.Tails[:0]
	for _, m := range TailMetrics {
		if !b.reports(m) {
			continue
		}
		b.Tails = append(b.Tails, MetricTail{Metric: m, Tail: b.Histograms[m].FitTail()})
	}
}

func percentiles(h *stats.Histogram, ps []float64, conf float64) []PercentileStat {
	if h.Count() == 0 {
		return nil
	}
	out := make([]PercentileStat, len(ps))
	for i, p := range ps {
		v, lo, hi, ok := h.QuantileCI(p/100, conf)
		out[i] = PercentileStat{P: p, Value: v, Lo: lo, Hi: hi, HasCI: ok}
	}
	return out
}

// pipelineStages is the order in which the service's pipeline runs its stages; other
// Server-Timing names follow in alphabetical order.
var pipelineStages = []string{"admission", "embed", "retrieve", "fetch", "generate", "stream"}

func stageOrder(m map[string]*stats.Histogram) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	rank := func(s string) int {
		if i := slices.Index(pipelineStages, s); i >= 0 {
			return i
		}
		return len(pipelineStages)
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b)) })
	return out
}

// Metric returns the summary of metric m, if the bench reports it.
func (b *Bench) Metric(m string) (MetricStats, bool) {
	for _, s := range b.Stats {
		if s.Metric == m {
			return s, true
		}
	}
	return MetricStats{}, false
}

// Tail returns the tail analysis of metric m, if there is one.
func (b *Bench) Tail(m string) (stats.Tail, bool) {
	for _, t := range b.Tails {
		if t.Metric == m {
			return t.Tail, true
		}
	}
	return stats.Tail{}, false
}
