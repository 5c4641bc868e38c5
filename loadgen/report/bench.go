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

	MergedFrom int      // runs merged into this one; 0 or 1 for a single run
	Sources    []string // files merged, when known

	Completed, Failed int64
	Duration          time.Duration // the measured window: start to the last request's end
	InputTokens       int64         // prompt tokens of completed requests
	OutputTokens      int64         // output tokens of completed requests (usage, else counted)

	RequestThroughput    float64  // completed requests per second over Duration
	OutputThroughput     float64  // output tokens per second
	TotalTokenThroughput float64  // input + output tokens per second
	GoodRequests         int64    // completed requests meeting every goodput SLO
	GoodputRate          *float64 // GoodRequests per second; nil without SLOs

	Stats    []MetricStats // one per metric in Metrics, in that order
	Stages   []StageStats  // per server stage (Server-Timing), in pipeline order
	Tails    []MetricTail  // for TailMetrics
	Sessions *Sessions     // nil when no request carried a session id
	Slowest  []SlowRequest // slowest first
	Timeline []TimelineBin
	Errors   []ErrorCount // by kind, most frequent first

	// Histograms holds one histogram per metric of AllMetrics and StageHistograms one per
	// stage: the exact data every figure above is computed from, and what Merge adds up.
	Histograms      map[string]*stats.Histogram
	StageHistograms map[string]*stats.Histogram
}

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
	N                       int64 // completed requests intended in the bin
	MeanE2EL, MaxE2EL       time.Duration
	P50E2EL, P99E2EL        *time.Duration
	NTTFT                   int64 // of those, requests with a first token
	MeanTTFT, MaxTTFT       time.Duration
	P50TTFT, P99TTFT        *time.Duration
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
		Histograms:       map[string]*stats.Histogram{},
		StageHistograms:  map[string]*stats.Histogram{},
	}
	for _, m := range AllMetrics {
		b.Histograms[m] = stats.NewHistogram()
	}
	return b
}

// Summarize computes the bench of a run. It never fails: a run without records gives zeros.
func Summarize(res *loadgen.Result, opts Options) *Bench {
	o := opts.withDefaults()
	b := newBench(o)
	b.Start, b.Config, b.Duration = res.Start, res.Config, res.Duration
	for i := range res.Records {
		b.Duration = max(b.Duration, res.Records[i].End)
	}
	width := timelineWidth(o.TimelineBin, b.Duration)
	tl := newTimelineAcc(width, b.Duration)
	errs := map[string]*ErrorCount{}
	sessions := map[string][]*loadgen.Record{}
	var sessionOrder []string

	for i := range res.Records {
		r := &res.Records[i]
		tl.at(r.Sent).Sent++
		if r.Session != "" {
			if _, ok := sessions[r.Session]; !ok {
				sessionOrder = append(sessionOrder, r.Session)
			}
			sessions[r.Session] = append(sessions[r.Session], r)
		}
		if !r.OK() {
			b.Failed++
			tl.at(r.End).Failed++
			kind := errKind(r)
			e := errs[kind]
			if e == nil {
				e = &ErrorCount{Kind: kind, Example: r.Err}
				errs[kind] = e
			}
			e.Count++
			continue
		}
		b.Completed++
		tl.at(r.End).Completed++
		out := outputTokens(r)
		b.InputTokens += int64(r.PromptTokens)
		b.OutputTokens += int64(out)
		lat := latencies(r, out)
		b.Histograms[MetricE2EL].Record(lat.E2EL)
		b.Histograms[MetricServiceE2EL].Record(r.ServiceE2EL())
		b.Histograms[MetricSendLag].Record(r.SendLag())
		if lat.HasTTFT {
			b.Histograms[MetricTTFT].Record(lat.TTFT)
		}
		if lat.HasTPOT {
			b.Histograms[MetricTPOT].Record(lat.TPOT)
		}
		for _, gap := range r.ITLs() {
			b.Histograms[MetricITL].Record(gap)
		}
		for stage, ms := range r.ServerTiming {
			h := b.StageHistograms[stage]
			if h == nil {
				h = stats.NewHistogram()
				b.StageHistograms[stage] = h
			}
			h.Record(msDuration(ms))
		}
		if len(o.Goodput) > 0 && o.Goodput.Meets(lat) {
			b.GoodRequests++
		}
		tl.latency(r.Intended, lat)
	}

	b.Timeline = tl.finish(b.Duration)
	b.Errors = sortErrors(errs)
	b.Slowest = slowest(res.Records, o.Slowest)
	if len(sessionOrder) > 0 {
		b.Sessions = summarizeSessions(sessions, sessionOrder, o.SessionStepLimit)
	}
	b.finish()
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

// slowest lists the n records with the largest e2el, failed ones included (a timeout is often
// the slowest request of all).
func slowest(recs []loadgen.Record, n int) []SlowRequest {
	idx := make([]int, len(recs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(recs[b].E2EL(), recs[a].E2EL()), cmp.Compare(a, b))
	})
	out := make([]SlowRequest, 0, min(n, len(idx)))
	for _, i := range idx[:min(n, len(idx))] {
		r := &recs[i]
		s := SlowRequest{Index: r.Index, TraceID: r.TraceID, Session: r.Session, Intended: r.Intended,
			E2EL: r.E2EL(), Status: r.Status}
		if ttft, ok := r.TTFT(); ok {
			s.TTFT = ttft
		}
		if !r.OK() {
			s.ErrKind = errKind(r)
		}
		out = append(out, s)
	}
	return out
}

func sortSlowest(s []SlowRequest) {
	slices.SortStableFunc(s, func(a, b SlowRequest) int { return cmp.Compare(b.E2EL, a.E2EL) })
}

func summarizeSessions(byID map[string][]*loadgen.Record, order []string, limit time.Duration) *Sessions {
	s := &Sessions{Count: int64(len(order)), StepLimit: limit}
	const (
		good = iota
		bad
		cut
	)
	class := func(r *loadgen.Record) int {
		switch {
		case r.ErrKind == loadgen.ErrKindCanceled || r.ErrKind == loadgen.ErrKindDrain:
			return cut
		case !r.OK(), limit > 0 && r.E2EL() > limit:
			return bad
		}
		return good
	}
	for _, id := range order {
		steps := byID[id]
		slices.SortStableFunc(steps, func(a, b *loadgen.Record) int { return cmp.Compare(a.Step, b.Step) })
		switch c := class(steps[0]); c {
		case good:
			s.FirstSteps++
			s.FirstStepsGood++
		case bad:
			s.FirstSteps++
		}
		outcome := good
		for _, r := range steps {
			if c := class(r); c != good {
				outcome = c
				break
			}
		}
		switch outcome {
		case good:
			s.Completed++
		case bad:
			s.Interrupted++
		default:
			s.Truncated++
		}
	}
	return s
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
	if len(b.Goodput) > 0 {
		g := per(b.GoodRequests)
		b.GoodputRate = &g
	}
	b.Stats = b.Stats[:0]
	for _, m := range b.Metrics {
		h := b.Histograms[m]
		b.Stats = append(b.Stats, MetricStats{
			Metric: m, Count: h.Count(), Mean: h.Mean(), Median: h.Quantile(0.5), Std: h.StdDev(),
			Percentiles: percentiles(h, b.Percentiles, b.Confidence),
		})
	}
	b.Stages = b.Stages[:0]
	for _, st := range stageOrder(b.StageHistograms) {
		h := b.StageHistograms[st]
		b.Stages = append(b.Stages, StageStats{Stage: st, Count: h.Count(), Mean: h.Mean(),
			Percentiles: percentiles(h, b.Percentiles, b.Confidence)})
	}
	b.Tails = b.Tails[:0]
	for _, m := range TailMetrics {
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

// pipelineStages is the order of the service's stages (DESIGN.md); other Server-Timing names
// follow in alphabetical order.
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

// timelineWidth is the bin width: the asked one, or 1 s widened to whole seconds so that at
// most maxTimelineBins bins cover d.
func timelineWidth(asked, d time.Duration) time.Duration {
	if asked > 0 {
		return asked
	}
	w := time.Second
	if n := (d + w - 1) / w; n > maxTimelineBins {
		w = time.Duration((int64(n)+maxTimelineBins-1)/maxTimelineBins) * time.Second
	}
	return w
}

// timelineAcc accumulates the timeline of one run.
type timelineAcc struct {
	width time.Duration
	last  time.Duration // the last offset inside the window: later ones count in its bin
	bins  []*binAcc
}

type binAcc struct {
	TimelineBin
	e2el, ttft []time.Duration
}

func newTimelineAcc(width, window time.Duration) *timelineAcc {
	return &timelineAcc{width: width, last: max(window-1, 0)}
}

func (t *timelineAcc) at(off time.Duration) *binAcc {
	i := max(int(min(off, t.last)/t.width), 0)
	for len(t.bins) <= i {
		t.bins = append(t.bins, &binAcc{TimelineBin: TimelineBin{T: time.Duration(len(t.bins)) * t.width, Width: t.width}})
	}
	return t.bins[i]
}

func (t *timelineAcc) latency(intended time.Duration, l stats.RequestLatencies) {
	b := t.at(intended)
	b.e2el = append(b.e2el, l.E2EL)
	if l.HasTTFT {
		b.ttft = append(b.ttft, l.TTFT)
	}
}

// finish finishes the bins, covering at least [0, d).
func (t *timelineAcc) finish(d time.Duration) []TimelineBin {
	if d > 0 {
		t.at(d - 1)
	}
	out := make([]TimelineBin, len(t.bins))
	for i, b := range t.bins {
		bin := b.TimelineBin
		bin.N, bin.MeanE2EL, bin.MaxE2EL, bin.P50E2EL, bin.P99E2EL = binStats(b.e2el)
		bin.NTTFT, bin.MeanTTFT, bin.MaxTTFT, bin.P50TTFT, bin.P99TTFT = binStats(b.ttft)
		out[i] = bin
	}
	return out
}

// binStats summarises one bin's samples; a percentile is nil unless the bin holds enough
// samples for a 95% interval around it.
func binStats(xs []time.Duration) (n int64, mean, maxV time.Duration, p50, p99 *time.Duration) {
	if len(xs) == 0 {
		return 0, 0, 0, nil, nil
	}
	slices.Sort(xs)
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	n = int64(len(xs))
	pick := func(q float64) *time.Duration {
		if _, _, ok := stats.QuantileRanks(n, q, DefaultConfidence); !ok {
			return nil
		}
		v := xs[stats.NearestRank(n, q)-1]
		return &v
	}
	return n, time.Duration(sum / float64(n)), xs[n-1], pick(0.5), pick(0.99)
}
