package pipeline

import (
	"slices"
	"strconv"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// Sink receives what a run produces for the client. Run never calls a Sink from two goroutines
// at once, and never after Run has returned. An error from either method means the client is
// gone: the run stops, cancels generation and returns that error.
type Sink interface {
	// Progress reports retrieval progress before the first token. Only async coupling emits it
	// (streaming progress while generation is pending is one of the things async changes): one
	// event per shard that answers or fails, one when generation starts, and one per late shard
	// that answers while the run is still going.
	Progress(ev Progress) error
	// Delta delivers output tokens in order. The time spent in it is the stream stage.
	Delta(d rag.Delta) error
}

// Progress is one retrieval progress event.
type Progress struct {
	Stage   rag.Stage     // rag.StageRetrieve for shard events, rag.StageGenerate when generation starts
	Shard   int           // the shard the event is about; -1 for the generation-start event
	Hits    int           // hits the shard returned; for generation start, chunks in the prompt
	Late    bool          // the shard answered after generation started: its hits were dropped
	Failed  bool          // the shard failed; its hits are missing
	Elapsed time.Duration // since the run started
	Message string        // one human-readable line, safe to show to the client
	Step    int           // agentic: the model call that asked for a search; 0 otherwise
}

// Result describes one run: what it did and how long each stage took. Run returns a Result even
// when it fails, holding the stages that ran, so the caller can still send Server-Timing.
type Result struct {
	Coupling rag.Coupling // the coupling used
	TopK     int          // the top_k used
	// Timings has one entry per stage that ran, in pipeline order. The generate stage runs from
	// the Generate call to the last delta and so contains the stream stage, the time spent
	// handing deltas to the Sink (a slow client slows the token loop).
	Timings  []rag.StageTiming
	ChunkIDs []string // chunks put in the prompt, in rank order

	Shards         int // shards searched
	ShardsAnswered int // shards whose hits were used
	ShardsFailed   int // async: shards that failed before generation started (their hits are missing)
	ShardsLate     int // async: shards still searching when generation started; their hits are dropped
	ChunksMissing  int // hits skipped because the doc store did not have their chunk

	// Usage sums the token counts of every model call (one, but for an agentic request).
	Usage        rag.Usage
	FinishReason string
	// Steps are an agentic request's model calls, in order; nil for a single-shot one.
	Steps []AgentStep
	// TimeToFirstToken is from the start of Run to the first delta carrying text.
	TimeToFirstToken time.Duration
}

// Timing returns the timing of stage and whether that stage ran.
func (r *Result) Timing(stage rag.Stage) (rag.StageTiming, bool) {
	for _, t := range r.Timings {
		if t.Stage == stage {
			return t, true
		}
	}
	return rag.StageTiming{}, false
}

// ServerTiming renders the stage timings as a Server-Timing header value, durations in
// milliseconds with three decimals, each stage once, then, for an agentic request, one entry per
// step:
//
//	admission;dur=0.012, embed;dur=0.300, retrieve;dur=12.100
//	..., step1;desc="search";dur=812.500, step2;desc="answer";dur=1093.250
//
// A stage that ran more than once (an agentic request's stages, once per search) reports the
// wall time its runs covered: the union of their intervals, so that searches run in parallel
// count once and no stage reads longer than the request.
func (r *Result) ServerTiming() string {
	var order []rag.Stage
	runs := map[rag.Stage][]rag.StageTiming{}
	for _, t := range r.Timings {
		if _, ok := runs[t.Stage]; !ok {
			order = append(order, t.Stage)
		}
		runs[t.Stage] = append(runs[t.Stage], t)
	}
	b := make([]byte, 0, 24*(len(order)+len(r.Steps)))
	entry := func(name, desc string, d time.Duration) {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, name...)
		if desc != "" {
			b = append(b, `;desc="`...)
			b = append(b, desc...)
			b = append(b, '"')
		}
		b = append(b, ";dur="...)
		b = strconv.AppendFloat(b, float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	for _, s := range order {
		entry(string(s), "", covered(runs[s]))
	}
	for i, s := range r.Steps {
		desc := "answer"
		if len(s.Searches) > 0 {
			desc = "search"
		}
		entry("step"+strconv.Itoa(i+1), desc, s.Duration)
	}
	return string(b)
}

// covered is the length of the union of the intervals [Start, Start+Duration) of ts.
func covered(ts []rag.StageTiming) time.Duration {
	if len(ts) == 1 {
		return ts[0].Duration
	}
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b rag.StageTiming) int { return a.Start.Compare(b.Start) })
	var total time.Duration
	end := ts[0].Start
	for _, t := range ts {
		e := t.Start.Add(t.Duration)
		switch {
		case !e.After(end): // within what is counted
		case t.Start.After(end):
			total += t.Duration
			end = e
		default:
			total += e.Sub(end)
			end = e
		}
	}
	return total
}
