package report

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// ErrNoHistograms is returned by Merge for a bench without its histograms (a file written by
// another tool, or cut down by hand): its percentiles could only be averaged, which is wrong.
var ErrNoHistograms = errors.New("bench has no histograms to merge")

// Merge adds up benches measured by several generators (on several hosts, or one after the
// other) as if one generator had measured every request:
//   - histograms are merged exactly, and every percentile, interval and tail fit is recomputed
//     from them (the intervals are those of the pooled samples, to HDR precision);
//   - counts (warmup requests included), tokens, good requests, errors and sessions are summed (sessions of different
//     generators are taken to be different sessions);
//   - the window runs from the earliest start to the latest end, and throughputs are over it, so
//     generators that ran at the same time add their rates, and runs one after another give the
//     mean rate over the whole span;
//   - the timeline is re-binned on wall-clock time at the widest bin width; its counts, means
//     and maxima add up exactly, its per-bin percentiles are dropped (they cannot be merged);
//   - the slowest requests are the slowest of all;
//   - the config sums request rates, concurrencies and prompts; URL, model and shape are kept
//     when all agree and read "(mixed)" otherwise. Segments of one schedule (see
//     CheckSegments) are the parts of one run: their rate and prompts are the schedule's, and
//     the merge is that of the whole schedule, without a segment.
//
// The percentiles, metrics and confidence of the first bench are used. Benches must agree on
// the goodput SLOs and the session step limit, or their counts would not mean the same thing.
// Merge of one bench recomputes its figures from its histograms (and keeps its timeline).
func Merge(benches ...*Bench) (*Bench, error) {
	if len(benches) == 0 {
		return nil, errors.New("merge: no bench given")
	}
	first := benches[0]
	for i, b := range benches {
		for _, m := range AllMetrics {
			if b.Histograms[m] == nil && m != MetricTTFO { // a file from before TTFO has none
				return nil, fmt.Errorf("merge: bench %d: %w (%s)", i+1, ErrNoHistograms, m)
			}
		}
		if b.Goodput.String() != first.Goodput.String() {
			return nil, fmt.Errorf("merge: bench %d has goodput SLOs %q, bench 1 has %q", i+1, b.Goodput, first.Goodput)
		}
		if b.Pricing != first.Pricing {
			return nil, fmt.Errorf("merge: bench %d has GPU pricing %+v, bench 1 has %+v", i+1, b.Pricing, first.Pricing)
		}
		if b.SessionStepLimit != first.SessionStepLimit {
			return nil, fmt.Errorf("merge: bench %d has session step limit %v, bench 1 has %v", i+1, b.SessionStepLimit, first.SessionStepLimit)
		}
	}
	if err := checkMergedCount(benches); err != nil {
		return nil, err
	}
	o := Options{Percentiles: first.Percentiles, Metrics: first.Metrics, Confidence: first.Confidence,
		Goodput: first.Goodput, SessionStepLimit: first.SessionStepLimit, Pricing: first.Pricing}.withDefaults()
	m := newBench(o)
	m.SessionStepLimit = first.SessionStepLimit

	start, end := first.Start, first.Start.Add(first.Duration)
	for _, b := range benches[1:] {
		if b.Start.Before(start) {
			start = b.Start
		}
		if e := b.Start.Add(b.Duration); e.After(end) {
			end = e
		}
	}
	m.Start, m.Duration = start, end.Sub(start)
	m.Config = mergeConfig(benches)

	errs := map[string]*ErrorCount{}
	slowN := 0
	for _, b := range benches {
		m.MergedFrom += max(b.MergedFrom, 1)
		m.Completed += b.Completed
		m.Failed += b.Failed
		if c := b.Cancellations; c != nil {
			if m.Cancellations == nil {
				m.Cancellations = &Cancellations{}
			}
			m.Cancellations.Requested += c.Requested
			m.Cancellations.Done += c.Done
			m.Cancellations.Tokens += c.Tokens
			m.Cancellations.LastAt = max(m.Cancellations.LastAt, c.LastAt+b.Start.Sub(m.Start))
		}
		m.Warmup += b.Warmup
		m.InputTokens += b.InputTokens
		m.OutputTokens += b.OutputTokens
		m.CachedTokens += b.CachedTokens
		m.ReasoningTokens += b.ReasoningTokens
		m.mergeWorkloads(b)
		m.GoodRequests += b.GoodRequests
		for _, name := range AllMetrics {
			m.Histograms[name].Merge(b.Histograms[name])
		}
		m.mergePhases(b)
		for st, h := range b.StageHistograms {
			if h == nil {
				return nil, fmt.Errorf("merge: %w (stage %s)", ErrNoHistograms, st)
			}
			if m.StageHistograms[st] == nil {
				m.StageHistograms[st] = stats.NewHistogram()
			}
			m.StageHistograms[st].Merge(h)
		}
		for _, e := range b.Errors {
			me := errs[e.Kind]
			if me == nil {
				me = &ErrorCount{Kind: e.Kind, Example: e.Example}
				errs[e.Kind] = me
			}
			me.Count += e.Count
		}
		if a := b.Agents; a != nil {
			if m.Agents == nil {
				m.Agents = newAgents(a.SLO)
			}
			m.Agents.merge(a)
		}
		if s := b.Sessions; s != nil {
			if m.Sessions == nil {
				m.Sessions = &Sessions{StepLimit: s.StepLimit}
			}
			m.Sessions.Count += s.Count
			m.Sessions.Completed += s.Completed
			m.Sessions.Interrupted += s.Interrupted
			m.Sessions.Truncated += s.Truncated
			m.Sessions.FirstSteps += s.FirstSteps
			m.Sessions.FirstStepsGood += s.FirstStepsGood
		}
		m.TokenLengths.merge(b.TokenLengths)
		m.Slowest = append(m.Slowest, b.Slowest...)
		slowN = max(slowN, len(b.Slowest))
		m.Sources = append(m.Sources, b.Sources...)
	}
	m.Errors = sortErrors(errs)
	sortSlowest(m.Slowest)
	m.Slowest = m.Slowest[:min(len(m.Slowest), slowN)]
	if len(benches) == 1 {
		m.Timeline = slices.Clone(first.Timeline)
		m.MergedFrom = first.MergedFrom
	} else {
		m.Timeline = mergeTimelines(start, m.Duration, benches)
	}
	m.finish()
	return m, nil
}

// mergeSettings keeps the request settings and provenance the runs share, and marks those
// they do not: "(mixed)" for names, nil for values; the command lines of several runs are
// left out (Sources names their files).
func mergeSettings(c *loadgen.RunInfo, o loadgen.RunInfo) {
	if o.Dataset != c.Dataset {
		c.Dataset = "(mixed)"
	}
	if o.Version != c.Version {
		c.Version = "(mixed)"
	}
	if o.HTTPClient != c.HTTPClient {
		c.HTTPClient = "(mixed)"
	}
	if o.Cancel != c.Cancel {
		c.Cancel = "(mixed)"
	}
	if o.Stream == nil || c.Stream == nil || *o.Stream != *c.Stream {
		c.Stream = nil
	}
	if o.Temperature == nil || c.Temperature == nil || *o.Temperature != *c.Temperature {
		c.Temperature = nil
	}
	c.Command = ""
}

func mergeConfig(benches []*Bench) loadgen.RunInfo {
	c := benches[0].Config
	if _, err := CheckSegments(benches); err == nil && c.Segment != nil {
		// The parts of one schedule: its rate and prompts, everyone's users.
		c.Segment = nil
		c.Concurrency, c.InFlightCap = 0, 0
		c.Command = "" // each host's names its own segment
		for _, b := range benches {
			c.Concurrency += b.Config.Concurrency
			c.InFlightCap += b.Config.InFlightCap
			c.Interrupted = c.Interrupted || b.Config.Interrupted
		}
		return c
	}
	for _, b := range benches[1:] {
		o := b.Config
		if o.URL != c.URL {
			c.URL = "(mixed)"
		}
		if o.Model != c.Model {
			c.Model = "(mixed)"
		}
		if o.Shape != c.Shape {
			c.Shape = "(mixed)"
		}
		if o.Burstiness != c.Burstiness {
			c.Burstiness = 0
		}
		if o.MaxTokens != c.MaxTokens {
			c.MaxTokens = 0
		}
		if o.ScheduleHash != c.ScheduleHash {
			c.ScheduleHash = ""
		}
		mergeSettings(&c, o)
		if o.Segment == nil || c.Segment == nil || *o.Segment != *c.Segment {
			c.Segment = nil
		}
		c.RequestRate += o.RequestRate // +Inf when any is a closed loop
		c.Concurrency += o.Concurrency
		c.InFlightCap += o.InFlightCap
		c.NumPrompts += o.NumPrompts
		c.Interrupted = c.Interrupted || o.Interrupted
	}
	return c
}

// CheckSegments checks that benches which are segments of a multi-host run (Config.Segment
// set) are every segment of one schedule, once each: all share a schedule hash and a segment
// count, and the indices 0..n-1 are all there. It returns a sentence saying what it found (""
// when no bench is a segment), and an error naming what is missing, doubled or mixed.
func CheckSegments(benches []*Bench) (string, error) {
	var segs []*Bench
	for _, b := range benches {
		if b.Config.Segment != nil {
			segs = append(segs, b)
		}
	}
	if len(segs) == 0 {
		return "", nil
	}
	if len(segs) != len(benches) {
		return "", fmt.Errorf("segments: %d of the %d files are segments of a multi-host run and the others are not", len(segs), len(benches))
	}
	first := segs[0].Config
	seen := make([]int, first.Segment.Count)
	for _, b := range segs {
		c := b.Config
		switch {
		case c.ScheduleHash != first.ScheduleHash:
			return "", fmt.Errorf("segments: schedules %q and %q differ: these are not parts of one run", first.ScheduleHash, c.ScheduleHash)
		case c.Segment.Count != first.Segment.Count:
			return "", fmt.Errorf("segments: one file is of %d segments, another of %d", first.Segment.Count, c.Segment.Count)
		}
		seen[c.Segment.Index]++
	}
	var missing, doubled []string
	for i, n := range seen {
		switch {
		case n == 0:
			missing = append(missing, fmt.Sprint(i))
		case n > 1:
			doubled = append(doubled, fmt.Sprint(i))
		}
	}
	n := first.Segment.Count
	switch {
	case len(doubled) > 0:
		return "", fmt.Errorf("segments %s of %d of schedule %s are given more than once", strings.Join(doubled, ", "), n, first.ScheduleHash)
	case len(missing) > 0:
		return fmt.Sprintf("%d of %d segments of schedule %s", len(segs), n, first.ScheduleHash),
			fmt.Errorf("segments %s of %d of schedule %s are missing: the merge would cover part of the run", strings.Join(missing, ", "), n, first.ScheduleHash)
	}
	return fmt.Sprintf("all %d segments of schedule %s are present", n, first.ScheduleHash), nil
}

// mergeTimelines re-bins every bench's timeline on the wall clock, at the widest bin width (or
// wider, to keep at most maxTimelineBins bins); a bin past the window goes into the last one.
func mergeTimelines(start time.Time, d time.Duration, benches []*Bench) []TimelineBin {
	var width time.Duration
	for _, b := range benches {
		for _, t := range b.Timeline {
			width = max(width, t.Width)
		}
	}
	if width <= 0 || d <= 0 {
		return nil
	}
	width = max(width, timelineWidth(0, d))
	n := int((d + width - 1) / width)
	out := make([]TimelineBin, n)
	sumE2EL := make([]float64, n)
	sumTTFT := make([]float64, n)
	for i := range out {
		out[i].T, out[i].Width = time.Duration(i)*width, width
	}
	for _, b := range benches {
		off := b.Start.Sub(start)
		for _, t := range b.Timeline {
			i := int((off + t.T) / width)
			if i < 0 {
				continue
			}
			i = min(i, n-1)
			o := &out[i]
			o.Sent += t.Sent
			o.Completed += t.Completed
			o.Failed += t.Failed
			o.OutputTokens += t.OutputTokens
			o.N += t.N
			o.NTTFT += t.NTTFT
			sumE2EL[i] += float64(t.MeanE2EL) * float64(t.N)
			sumTTFT[i] += float64(t.MeanTTFT) * float64(t.NTTFT)
			o.MaxE2EL = max(o.MaxE2EL, t.MaxE2EL)
			o.MaxTTFT = max(o.MaxTTFT, t.MaxTTFT)
		}
	}
	for i := range out {
		if out[i].N > 0 {
			out[i].MeanE2EL = time.Duration(math.Round(sumE2EL[i] / float64(out[i].N)))
		}
		if out[i].NTTFT > 0 {
			out[i].MeanTTFT = time.Duration(math.Round(sumTTFT[i] / float64(out[i].NTTFT)))
		}
	}
	return out
}
