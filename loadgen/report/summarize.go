package report

import (
	"cmp"
	"maps"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// Summarize computes the bench of a run from its records. It never fails: a run without records
// gives zeros. It is a Summarizer fed with every record of res.
func Summarize(res *loadgen.Result, opts Options) *Bench {
	s := NewSummarizer(opts)
	sessions := map[string][]*loadgen.Record{}
	var order []string
	for i := range res.Records {
		r := &res.Records[i]
		if r.Session == "" {
			s.add(r)
			continue
		}
		if _, ok := sessions[r.Session]; !ok {
			order = append(order, r.Session)
		}
		sessions[r.Session] = append(sessions[r.Session], r)
	}
	for _, id := range order {
		s.addSession(sessions[id])
	}
	return s.Bench(res)
}

// Summarizer computes a Bench from the records of a run as they come (loadgen.Config.Stream),
// in memory bounded by the metrics, stages, error kinds and timeline bins, never by the number
// of requests, so a soak of any length summarises in constant memory. Every figure is what
// Summarize of the same records gives: the histograms, counts, errors, sessions and slowest
// requests are exact; the timeline's per-bin percentiles are exact for bins of up to
// binExact samples and otherwise within binPrecision of the exact value (never below it).
type Summarizer struct {
	o        Options
	b        *Bench
	tl       *timelineAcc
	errs     map[string]*ErrorCount
	sessions *Sessions
	slices   *slicesAcc      // nil without Options.Slice
	agents   *Agents         // with Options.Agent
	reqSLOs  stats.SLOs      // the request-level goodput SLOs
	slow     []slowCandidate // the slowest so far, slowest first, at most o.Slowest
	measured bool            // a measured (not warmup, sent) record was added
	last     time.Duration   // the latest end of a measured record
}

type slowCandidate struct {
	SlowRequest
	index int // the record's Index, the tie-break
}

// NewSummarizer returns a Summarizer that computes with opts.
func NewSummarizer(opts Options) *Summarizer {
	o := opts.withDefaults()
	s := &Summarizer{o: o, b: newBench(o), tl: newTimelineAcc(o.TimelineBin), errs: map[string]*ErrorCount{},
		slices: newSlicesAcc(o.Slice), reqSLOs: o.Goodput.Requests()}
	if o.Agent {
		slo, _ := o.Goodput.Limit(stats.SLOAgent)
		s.agents = newAgents(slo)
	}
	return s
}

// Add adds the records of one item of the run: a lone request, or every step of one session
// (as loadgen.Config.Stream hands them over). A session's steps must come in one call.
func (s *Summarizer) Add(records ...loadgen.Record) {
	if len(records) == 0 {
		return
	}
	if records[0].Session == "" {
		for i := range records {
			s.add(&records[i])
		}
		return
	}
	steps := make([]*loadgen.Record, len(records))
	for i := range records {
		steps[i] = &records[i]
	}
	s.addSession(steps)
}

// add adds one request's record.
func (s *Summarizer) add(r *loadgen.Record) {
	b := s.b
	if r.Warmup {
		b.Warmup++
		return
	}
	if r.NotSent {
		return // it only cuts its session
	}
	s.measured = true
	s.last = max(s.last, r.End)
	s.tl.at(r.Sent).sent++
	if r.CancelPlanned {
		if b.Cancellations == nil {
			b.Cancellations = &Cancellations{}
		}
		b.Cancellations.add(r)
	}
	b.addPhases(r)
	if r.Cancelled {
		// Abandoned on purpose: no success, no failure. The user saw its first token, so TTFT
		// keeps it; its E2EL, TPOT and ITLs measure the abandonment, not the server.
		if ttft, ok := r.TTFT(); ok {
			b.Histograms[MetricTTFT].Record(ttft)
		}
		return
	}
	s.noteSlow(r)
	if !r.OK() {
		b.Failed++
		s.tl.at(r.End).failed++
		kind := errKind(r)
		e := s.errs[kind]
		if e == nil {
			e = &ErrorCount{Kind: kind, Example: r.Err}
			s.errs[kind] = e
		}
		e.Count++
		s.slices.addFailed(r)
		return
	}
	b.Completed++
	s.tl.at(r.End).completed++
	out := outputTokens(r)
	b.InputTokens += int64(r.PromptTokens)
	b.OutputTokens += int64(out)
	b.CachedTokens += int64(r.CachedTokens)
	b.ReasoningTokens += int64(r.ReasoningTokens)
	b.TokenLengths.add(r.PromptTokens, out)
	b.addWorkloadRecord(r)
	lat := latencies(r, out)
	s.slices.addCompleted(r, lat, out)
	b.Histograms[MetricE2EL].Record(lat.E2EL)
	b.Histograms[MetricServiceE2EL].Record(r.ServiceE2EL())
	b.Histograms[MetricSendLag].Record(r.SendLag())
	if lat.HasTTFT {
		b.Histograms[MetricTTFT].Record(lat.TTFT)
	}
	if lat.HasTPOT {
		b.Histograms[MetricTPOT].Record(lat.TPOT)
	}
	for i := 1; i < len(r.Chunks); i++ {
		b.Histograms[MetricITL].Record(r.Chunks[i].At - r.Chunks[i-1].At)
	}
	for stage, ms := range r.ServerTiming {
		h := b.StageHistograms[stage]
		if h == nil {
			h = stats.NewHistogram()
			b.StageHistograms[stage] = h
		}
		h.Record(msDuration(ms))
	}
	if len(s.reqSLOs) > 0 && s.reqSLOs.Meets(lat) {
		b.GoodRequests++
	}
	s.tl.addOutput(r, out)
	bin := s.tl.at(r.Intended)
	bin.e2el.add(lat.E2EL)
	if lat.HasTTFT {
		bin.ttft.add(lat.TTFT)
	}
}

// noteSlow keeps r if it is among the o.Slowest slowest so far (largest e2el first, then the
// lowest index), failed requests included (a timeout is often the slowest request of all).
func (s *Summarizer) noteSlow(r *loadgen.Record) {
	e2el := r.E2EL()
	better := func(c slowCandidate) int {
		return cmp.Or(cmp.Compare(e2el, c.E2EL), cmp.Compare(c.index, r.Index))
	}
	if len(s.slow) == s.o.Slowest && better(s.slow[len(s.slow)-1]) <= 0 {
		return
	}
	c := slowCandidate{index: r.Index, SlowRequest: SlowRequest{Index: r.Index, TraceID: r.TraceID, Session: r.Session,
		Intended: r.Intended, E2EL: e2el, Status: r.Status, ServerTiming: maps.Clone(r.ServerTiming)}}
	if ttft, ok := r.TTFT(); ok {
		c.TTFT = ttft
	}
	if !r.OK() {
		c.ErrKind = errKind(r)
	}
	i, _ := slices.BinarySearchFunc(s.slow, c, func(a, _ slowCandidate) int { return better(a) })
	s.slow = slices.Insert(s.slow, i, c)
	if len(s.slow) > s.o.Slowest {
		s.slow = s.slow[:s.o.Slowest]
	}
}

// addSession adds the steps of one session. A step is good when its request completed within
// the step limit, bad when it failed or was slower, and cut when it was canceled, drained or
// never sent because the run stopped; the first step that is not good decides (see Sessions).
// A warmup session counts in no figure.
func (s *Summarizer) addSession(steps []*loadgen.Record) {
	for _, r := range steps {
		s.add(r)
	}
	if steps[0].Warmup {
		return
	}
	if s.sessions == nil {
		s.sessions = &Sessions{StepLimit: s.o.SessionStepLimit}
	}
	ss := s.sessions
	limit := s.o.SessionStepLimit
	const (
		good = iota
		bad
		cut
	)
	class := func(r *loadgen.Record) int {
		switch {
		case r.NotSent || r.ErrKind == loadgen.ErrKindCanceled || r.ErrKind == loadgen.ErrKindDrain:
			return cut
		case !r.OK(), limit > 0 && r.E2EL() > limit:
			return bad
		}
		return good
	}
	slices.SortStableFunc(steps, func(a, b *loadgen.Record) int { return cmp.Compare(a.Step, b.Step) })
	if s.agents != nil {
		s.agents.add(steps)
	}
	ss.Count++
	switch class(steps[0]) {
	case good:
		ss.FirstSteps++
		ss.FirstStepsGood++
	case bad:
		ss.FirstSteps++
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
		ss.Completed++
	case bad:
		ss.Interrupted++
	default:
		ss.Truncated++
	}
}

// Bench returns the summary of the records added, for the run res describes (its start,
// duration, warmup and config; its Records are not read).
func (s *Summarizer) Bench(res *loadgen.Result) *Bench {
	b := s.b
	off := res.MeasuredFrom
	end := max(res.Duration, s.last)
	if off > 0 && s.measured {
		end = s.last // a warmup request ending later is not in the measured window
	}
	end = max(end, off)
	b.Start, b.Config, b.Duration = res.Start.Add(off), res.Config, end-off
	if b.Cancellations == nil && res.Config.Cancel != "" {
		b.Cancellations = &Cancellations{}
	}
	if b.Cancellations != nil {
		b.Cancellations.LastAt = max(b.Cancellations.LastAt-off, 0)
	}
	b.Timeline = s.tl.finish(off, end)
	b.Slices = s.slices.finish(off, end, s.o.Percentiles, s.o.Confidence)
	b.Errors = sortErrors(s.errs)
	b.Slowest = make([]SlowRequest, len(s.slow))
	for i, c := range s.slow {
		b.Slowest[i] = c.SlowRequest
		b.Slowest[i].Intended -= off
	}
	b.Sessions = s.sessions
	b.Agents = s.agents
	b.finish()
	return b
}

// timelineWidth is the bin width: the asked one, or 1 s doubled until at most maxTimelineBins
// bins cover d.
func timelineWidth(asked, d time.Duration) time.Duration {
	if asked > 0 {
		return asked
	}
	w := time.Second
	for (d+w-1)/w > maxTimelineBins {
		w *= 2
	}
	return w
}

// timelineAcc accumulates the timeline of a run in bins of run offsets [i·width, (i+1)·width).
// Without an asked width, bins start at 1 s and, whenever there are more than twice
// maxTimelineBins of them, pairs merge into bins twice as wide (every figure of a bin merges
// exactly), so the timeline of a run of any length holds at most 2·maxTimelineBins bins.
type timelineAcc struct {
	width time.Duration
	fixed bool // the width was asked: never widened
	bins  []*binAcc
}

type binAcc struct {
	sent, completed, failed int64
	outputTokens            int64
	e2el, ttft              binLatency
}

func newTimelineAcc(asked time.Duration) *timelineAcc {
	if asked > 0 {
		return &timelineAcc{width: asked, fixed: true}
	}
	return &timelineAcc{width: time.Second}
}

func (t *timelineAcc) at(off time.Duration) *binAcc {
	i := max(int(off/t.width), 0)
	for !t.fixed && i >= 2*maxTimelineBins {
		t.widen()
		i = int(off / t.width)
	}
	for len(t.bins) <= i {
		t.bins = append(t.bins, &binAcc{})
	}
	return t.bins[i]
}

// widen merges the bins by pairs, doubling the width.
func (t *timelineAcc) widen() {
	out := make([]*binAcc, 0, (len(t.bins)+1)/2)
	for i := 0; i < len(t.bins); i += 2 {
		b := t.bins[i]
		if i+1 < len(t.bins) {
			b.merge(t.bins[i+1])
		}
		out = append(out, b)
	}
	t.bins, t.width = out, 2*t.width
}

func (b *binAcc) merge(o *binAcc) {
	b.sent += o.sent
	b.completed += o.completed
	b.failed += o.failed
	b.outputTokens += o.outputTokens
	b.e2el.merge(&o.e2el)
	b.ttft.merge(&o.ttft)
}

// addOutput counts the out output tokens of a completed record in the bins they arrived in:
// each streamed chunk's at its arrival, and what usage counted beyond the chunks at the end.
func (t *timelineAcc) addOutput(r *loadgen.Record, out int) {
	left := int64(out)
	for _, c := range r.Chunks {
		n := min(int64(c.Tokens), left)
		if n <= 0 {
			continue
		}
		t.at(c.At).outputTokens += n
		left -= n
	}
	if left > 0 {
		t.at(r.End).outputTokens += left
	}
}

// finish returns the bins covering the measured window [off, end), as offsets from off: the
// first bin is cut at off when off falls inside it, and what lies at or past end counts in the
// last bin.
func (t *timelineAcc) finish(off, end time.Duration) []TimelineBin {
	d := end - off
	if d <= 0 && len(t.bins) == 0 {
		return []TimelineBin{}
	}
	if !t.fixed {
		for (d+t.width-1)/t.width > maxTimelineBins {
			t.widen()
		}
	}
	lastIdx := max(int((end-1)/t.width), 0)
	if d > 0 {
		t.at(end - 1)
	}
	for len(t.bins) > lastIdx+1 {
		t.bins[lastIdx].merge(t.bins[len(t.bins)-1])
		t.bins = t.bins[:len(t.bins)-1]
	}
	first := min(int(off/t.width), len(t.bins)-1)
	out := make([]TimelineBin, 0, len(t.bins)-first)
	for i := first; i < len(t.bins); i++ {
		b := t.bins[i]
		from := max(time.Duration(i)*t.width, off)
		bin := TimelineBin{T: from - off, Width: time.Duration(i+1)*t.width - from,
			Sent: b.sent, Completed: b.completed, Failed: b.failed, OutputTokens: b.outputTokens}
		bin.N, bin.MeanE2EL, bin.MaxE2EL, bin.P50E2EL, bin.P99E2EL = b.e2el.stats()
		bin.NTTFT, bin.MeanTTFT, bin.MaxTTFT, bin.P50TTFT, bin.P99TTFT = b.ttft.stats()
		out = append(out, bin)
	}
	return out
}

// binExact is how many samples a timeline bin keeps as they are; beyond it, they go into
// log-linear buckets of relative width binPrecision.
const binExact = 256

// binPrecision bounds the relative error of a timeline bin's percentiles once it holds more
// than binExact samples: a bucket spans 1/128 of its lowest value, and the highest value of
// the bucket is reported, so a percentile is never understated and overstated by less than
// 0.79%.
const binPrecision = 1.0 / 128

// binLatency is the latencies of one timeline bin: count, sum and maximum exactly, and the
// values, exact while few and bucketed after (at most 7,296 buckets of 4 bytes, the few octaves
// a bin's latencies span in practice).
type binLatency struct {
	n    int64
	sum  float64
	maxV time.Duration
	raw  []time.Duration // the values while n <= binExact
	base int             // bucket index of counts[0]
	cnt  []uint32        // bucket counts once past binExact
}

const mantissaBits = 7

// bucketOf returns the log-linear bucket of v >= 0: values below 2^7 ns each have their own,
// and above, each octave is split in 128.
func bucketOf(v time.Duration) int {
	u := uint64(max(v, 0))
	if u < 1<<mantissaBits {
		return int(u)
	}
	e := bits.Len64(u) - 1
	m := (u >> (e - mantissaBits)) & (1<<mantissaBits - 1)
	return (e-mantissaBits+1)<<mantissaBits + int(m)
}

// bucketHigh is the highest value of bucket i.
func bucketHigh(i int) time.Duration {
	if i < 1<<mantissaBits {
		return time.Duration(i)
	}
	e := i>>mantissaBits + mantissaBits - 1
	m := uint64(i & (1<<mantissaBits - 1))
	lo := (1<<mantissaBits + m) << (e - mantissaBits)
	hi := lo + 1<<(e-mantissaBits) - 1
	if hi > math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(hi)
}

func (l *binLatency) add(v time.Duration) {
	l.n++
	l.sum += float64(v)
	l.maxV = max(l.maxV, v)
	if l.cnt == nil && len(l.raw) < binExact {
		l.raw = append(l.raw, v)
		return
	}
	l.spill()
	l.count(bucketOf(v), 1)
}

// spill moves the exact values into buckets.
func (l *binLatency) spill() {
	if l.cnt != nil {
		return
	}
	l.cnt = []uint32{}
	for _, v := range l.raw {
		l.count(bucketOf(v), 1)
	}
	l.raw = nil
}

func (l *binLatency) count(i int, c uint32) {
	switch {
	case len(l.cnt) == 0:
		l.base, l.cnt = i, append(l.cnt[:0], c)
		return
	case i < l.base:
		l.cnt = append(make([]uint32, l.base-i, l.base-i+len(l.cnt)), l.cnt...)
		l.base = i
	case i >= l.base+len(l.cnt):
		l.cnt = append(l.cnt, make([]uint32, i-l.base-len(l.cnt)+1)...)
	}
	l.cnt[i-l.base] += c
}

func (l *binLatency) merge(o *binLatency) {
	if o.n == 0 {
		return
	}
	l.n += o.n
	l.sum += o.sum
	l.maxV = max(l.maxV, o.maxV)
	if l.cnt == nil && o.cnt == nil && len(l.raw)+len(o.raw) <= binExact {
		l.raw = append(l.raw, o.raw...)
		return
	}
	l.spill()
	for _, v := range o.raw {
		l.count(bucketOf(v), 1)
	}
	for i, c := range o.cnt {
		if c > 0 {
			l.count(o.base+i, c)
		}
	}
}

// rank returns the k-th smallest value (1-based): exact, or the highest value of its bucket.
func (l *binLatency) rank(k int64) time.Duration {
	if l.cnt == nil {
		return l.raw[k-1] // sorted by stats
	}
	var cum int64
	for i, c := range l.cnt {
		cum += int64(c)
		if cum >= k {
			return min(bucketHigh(l.base+i), l.maxV)
		}
	}
	return l.maxV
}

// stats summarises the bin; a percentile is nil unless the bin holds enough samples for a 95%
// interval around it.
func (l *binLatency) stats() (n int64, mean, maxV time.Duration, p50, p99 *time.Duration) {
	if l.n == 0 {
		return 0, 0, 0, nil, nil
	}
	slices.Sort(l.raw)
	pick := func(q float64) *time.Duration {
		if _, _, ok := stats.QuantileRanks(l.n, q, DefaultConfidence); !ok {
			return nil
		}
		v := l.rank(stats.NearestRank(l.n, q))
		return &v
	}
	return l.n, time.Duration(l.sum / float64(l.n)), l.maxV, pick(0.5), pick(0.99)
}

func sortSlowest(s []SlowRequest) {
	slices.SortStableFunc(s, func(a, b SlowRequest) int { return cmp.Compare(b.E2EL, a.E2EL) })
}
