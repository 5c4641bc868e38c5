package report

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// What a bench reports about particular workloads: time to first output token beside TTFT
// when the server reasons aloud, TTFT by session step (how it grows with a conversation's
// history), and the inputs of embeddings requests.

// MaxTurns bounds the rows of Bench.Turns: steps from MaxTurns-1 on share the last row.
const MaxTurns = 32

// TurnStats summarises the completed requests of one session step index (a conversation's
// turn): their count, mean prompt and cached tokens, and TTFT.
type TurnStats struct {
	Step         int  // the step index, from 0
	AndLater     bool // the row also holds every later step (Step is MaxTurns-1)
	Count        int64
	PromptTokens int64 // summed over Count
	CachedTokens int64 // summed over Count
	// TTFT holds the TTFTs of the step's requests; the fields after it derive from it.
	TTFT        *stats.Histogram
	Mean        time.Duration
	Percentiles []PercentileStat
}

// MeanPromptTokens is the step's mean prompt length; 0 without requests.
func (t *TurnStats) MeanPromptTokens() float64 {
	return float64(t.PromptTokens) / float64(max(t.Count, 1))
}

// MeanCachedTokens is the step's mean count of prompt tokens the server's prefix cache held.
func (t *TurnStats) MeanCachedTokens() float64 {
	return float64(t.CachedTokens) / float64(max(t.Count, 1))
}

// addWorkloadRecord counts what the workload figures need from a completed, measured record.
func (b *Bench) addWorkloadRecord(r *loadgen.Record) {
	if r.Reasoned {
		b.ReasoningRequests++
	}
	b.EmbeddedInputs += int64(r.Inputs)
	if ttfo, ok := r.TTFO(); ok {
		b.Histograms[MetricTTFO].Record(ttfo)
	}
	if r.Session == "" {
		return
	}
	t := b.turn(r.Step)
	t.Count++
	t.PromptTokens += int64(r.PromptTokens)
	t.CachedTokens += int64(r.CachedTokens)
	if ttft, ok := r.TTFT(); ok {
		t.TTFT.Record(ttft)
	}
}

// turn returns the row of step k, adding the rows up to it.
func (b *Bench) turn(k int) *TurnStats {
	k = min(max(k, 0), MaxTurns-1)
	for len(b.Turns) <= k {
		n := len(b.Turns)
		b.Turns = append(b.Turns, TurnStats{Step: n, AndLater: n == MaxTurns-1, TTFT: stats.NewHistogram()})
	}
	return &b.Turns[k]
}

// finishTurns derives each turn's TTFT figures from its histogram.
func (b *Bench) finishTurns() {
	for i := range b.Turns {
		t := &b.Turns[i]
		t.Mean, t.Percentiles = t.TTFT.Mean(), percentiles(t.TTFT, b.Percentiles, b.Confidence)
	}
}

// mergeWorkloads adds o's workload figures to b.
func (b *Bench) mergeWorkloads(o *Bench) {
	b.ReasoningRequests += o.ReasoningRequests
	b.EmbeddedInputs += o.EmbeddedInputs
	for _, ot := range o.Turns {
		t := b.turn(ot.Step)
		t.Count += ot.Count
		t.PromptTokens += ot.PromptTokens
		t.CachedTokens += ot.CachedTokens
		t.TTFT.Merge(ot.TTFT)
	}
}

// reports tells whether metric m has figures in the reports: TTFO only when some response
// reasoned, since it is TTFT otherwise, and none of the token metrics for embeddings, which
// stream no tokens.
func (b *Bench) reports(m string) bool {
	switch {
	case b.EmbeddedInputs > 0:
		return m != MetricTTFT && m != MetricTTFO && m != MetricTPOT && m != MetricITL
	case m == MetricTTFO:
		return b.ReasoningRequests > 0
	}
	return true
}

// EmbeddingThroughput is the embedded inputs per second over the measured window.
func (b *Bench) EmbeddingThroughput() float64 {
	if secs := b.Duration.Seconds(); secs > 0 {
		return float64(b.EmbeddedInputs) / secs
	}
	return 0
}

// workloadJSON are the counts of reasoning and embeddings in a bench document, when there are
// any: reasoning_requests, embedding_inputs and embedding_input_throughput (inputs/s).
type workloadJSON struct {
	ReasoningRequests        count            `json:"reasoning_requests,omitempty"`
	EmbeddingInputs          count            `json:"embedding_inputs,omitempty"`
	EmbeddingInputThroughput *derived[amount] `json:"embedding_input_throughput,omitempty"`
}

func (b *Bench) workloadCounts() workloadJSON {
	w := workloadJSON{ReasoningRequests: count(max(b.ReasoningRequests, 0))}
	if b.EmbeddedInputs > 0 {
		w.EmbeddingInputs = count(b.EmbeddedInputs)
		w.EmbeddingInputThroughput = &derived[amount]{amount(sig(b.EmbeddingThroughput()))}
	}
	return w
}

// turnJSON is a row of the "turns" array: a session step's count, mean prompt and cached
// tokens, TTFT mean and percentiles with their intervals (null where the step has too few
// requests for one) and the TTFT histogram they come from. Reading, the figures are derived
// from the histogram again (finishTurns).
type turnJSON struct {
	turnHead
	percentiles percentileKeys
	Histogram   json.RawMessage `json:"histogram"`
}

type turnHead struct {
	Step             count            `json:"step"`
	AndLater         bool             `json:"and_later,omitempty"`
	Count            count            `json:"count"`
	MeanPromptTokens amount           `json:"mean_prompt_tokens"`
	MeanCachedTokens *amount          `json:"mean_cached_tokens,omitempty"`
	NTTFT            derived[count]   `json:"n_ttft"`
	MeanTTFTMS       *derived[millis] `json:"mean_ttft_ms"`
}

// MarshalJSON writes the row's figures, its percentiles, then its histogram.
func (t turnJSON) MarshalJSON() ([]byte, error) {
	return members{t.turnHead, t.percentiles, struct {
		Histogram json.RawMessage `json:"histogram"`
	}{t.Histogram}}.MarshalJSON()
}

// turnsJSON are the rows of "turns", none without sessions.
func (b *Bench) turnsJSON() ([]turnJSON, error) {
	if len(b.Turns) == 0 {
		return nil, nil
	}
	rows := make([]turnJSON, 0, len(b.Turns))
	for i := range b.Turns {
		t := &b.Turns[i]
		row := turnJSON{turnHead: turnHead{Step: count(t.Step), AndLater: t.AndLater, Count: count(t.Count),
			MeanPromptTokens: amount(sig(t.MeanPromptTokens())), NTTFT: derived[count]{count(t.TTFT.Count())}}}
		if t.TTFT.Count() > 0 {
			row.MeanTTFTMS = &derived[millis]{millis(t.Mean)}
		}
		if _, ok := b.PrefixCacheHitRatio(); ok { // as the document's total_cached_tokens
			row.MeanCachedTokens = ptr(amount(sig(t.MeanCachedTokens())))
		}
		// A percentile without enough samples for its interval is left out (null).
		withCI := make([]PercentileStat, 0, len(t.Percentiles))
		for _, ps := range t.Percentiles {
			if ps.HasCI {
				withCI = append(withCI, ps)
			}
		}
		row.percentiles = percentileKeys{metric: MetricTTFT, ps: b.Percentiles, stats: withCI}
		var err error
		if row.Histogram, err = t.TTFT.MarshalJSON(); err != nil {
			return nil, fmt.Errorf("turns[%d].histogram: %w", i, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// readWorkloads reads the counts of reasoning and embeddings and the turns' rows.
func (b *Bench) readWorkloads(c *checker, f *benchFile) {
	b.ReasoningRequests, b.EmbeddedInputs = int64(f.ReasoningRequests), int64(f.EmbeddingInputs)
	if len(f.Turns) > MaxTurns {
		c.fail("turns", "%d rows, more than %d", len(f.Turns), MaxTurns)
		return
	}
	for i, row := range f.Turns {
		if row.Step >= MaxTurns {
			c.fail(fmt.Sprintf("turns[%d].step", i), "want a whole number below %d", MaxTurns)
			return
		}
		t := b.turn(int(row.Step))
		t.Count = int64(row.Count)
		t.PromptTokens = int64(float64(row.MeanPromptTokens)*float64(row.Count) + 0.5)
		if row.MeanCachedTokens != nil {
			t.CachedTokens = int64(float64(*row.MeanCachedTokens)*float64(row.Count) + 0.5)
		}
		if row.Histogram == nil || string(row.Histogram) == "null" {
			continue
		}
		if h := readHistogram(c, fmt.Sprintf("turns[%d].histogram", i), row.Histogram); h != nil {
			t.TTFT = h
		}
	}
}

// workloadRows writes the reasoning and embeddings figures to the text summary.
func (t *textWriter) workloadRows(b *Bench) {
	if b.ReasoningRequests > 0 {
		t.row("Requests that reasoned", "%d (TTFO below excludes their reasoning)", b.ReasoningRequests)
	}
	if b.EmbeddedInputs > 0 {
		t.row("Embedded inputs", "%d", b.EmbeddedInputs)
		t.row("Embedding throughput (inputs/s)", "%.2f", b.EmbeddingThroughput())
		t.row("Embedding token throughput (tok/s)", "%.2f", b.TotalTokenThroughput)
	}
}

// turnsText writes the per-turn table: TTFT by session step, and the prompt it carried.
func (t *textWriter) turnsText(b *Bench) {
	if len(b.Turns) == 0 {
		return
	}
	t.rule("TTFT by session step (turn)", '-')
	cached := b.CachedTokens > 0
	head := fmt.Sprintf("%-6s %7s %10s", "step", "n", "prompt tok")
	if cached {
		head += fmt.Sprintf(" %10s", "cached tok")
	}
	t.printf("%s %11s %11s %11s\n", head, "mean ttft", "p50 ttft", "p90 ttft")
	for i := range b.Turns {
		tr := &b.Turns[i]
		line := fmt.Sprintf("%-6s %7d %10.1f", turnLabel(tr), tr.Count, tr.MeanPromptTokens())
		if cached {
			line += fmt.Sprintf(" %10.1f", tr.MeanCachedTokens())
		}
		t.printf("%s %11s %11s %11s\n", line, turnMean(tr), turnPercentile(tr, 50, b.Confidence), turnPercentile(tr, 90, b.Confidence))
	}
	t.printf("ms; a percentile shows only with enough requests for its %g%% interval\n", 100*b.Confidence)
}

func turnLabel(t *TurnStats) string {
	if t.AndLater {
		return fmt.Sprintf("%d+", t.Step)
	}
	return fmt.Sprint(t.Step)
}

func turnMean(t *TurnStats) string {
	if t.TTFT.Count() == 0 {
		return "-"
	}
	return fmtMS(t.Mean)
}

// turnPercentile is percentile p of the turn's TTFT, or "-" without enough samples for an
// interval around it at confidence conf.
func turnPercentile(t *TurnStats, p, conf float64) string {
	if v, ok := t.quantileWithCI(p, conf); ok {
		return fmtMS(v)
	}
	return "-"
}

// quantileWithCI is percentile p of the turn's TTFT when there are enough samples for an
// interval around it at confidence conf.
func (t *TurnStats) quantileWithCI(p, conf float64) (time.Duration, bool) {
	if t.TTFT.Count() == 0 {
		return 0, false
	}
	v, _, _, ok := t.TTFT.QuantileCI(p/100, conf)
	return v, ok
}

// turnsBlocks draws median TTFT and mean prompt tokens by step, and the table behind them.
func turnsBlocks(b *Bench) blocks {
	var v blocks
	var ttft, prompt []pt
	for i := range b.Turns {
		t := &b.Turns[i]
		if q, ok := t.quantileWithCI(50, b.Confidence); ok {
			ttft = append(ttft, pt{X: float64(t.Step), Y: durationMS(q)})
		}
		if t.Count > 0 {
			prompt = append(prompt, pt{X: float64(t.Step), Y: t.MeanPromptTokens()})
		}
	}
	if len(ttft) > 1 {
		v.Pair = append(v.Pair, chart{Title: "Median TTFT by session step", XLabel: "step (turn, from 0)", YLabel: "ms",
			YFromZero: true, W: 480, H: 300, Series: []series{{Name: "median TTFT", Mode: modeLine, Color: palette[0], Pts: ttft}}}.render())
	}
	if len(prompt) > 1 {
		v.Pair = append(v.Pair, chart{Title: "Mean prompt tokens by session step", XLabel: "step (turn, from 0)", YLabel: "tokens",
			YFromZero: true, W: 480, H: 300, Series: []series{{Name: "prompt tokens", Mode: modeLine, Color: palette[4], Pts: prompt}}}.render())
	}
	cached := b.CachedTokens > 0
	t := table{Heads: []string{"step", "n", "prompt tokens"}}
	if cached {
		t.Heads = append(t.Heads, "cached tokens")
	}
	t.Heads = append(t.Heads, "mean TTFT", "p50 TTFT", "p90 TTFT")
	for i := range b.Turns {
		tr := &b.Turns[i]
		cells := []string{turnLabel(tr), fmt.Sprint(tr.Count), fmt.Sprintf("%.1f", tr.MeanPromptTokens())}
		if cached {
			cells = append(cells, fmt.Sprintf("%.1f", tr.MeanCachedTokens()))
		}
		t.row(append(cells, turnMean(tr), turnPercentile(tr, 50, b.Confidence), turnPercentile(tr, 90, b.Confidence))...)
	}
	v.Tables = []table{t}
	v.Notes = []string{"Milliseconds, over the completed requests of each step. In a multi-turn replay every turn carries the " +
		"conversation so far with the server's actual answers, so the prompt grows with the step; a percentile shows " +
		"only where there are enough requests for its interval."}
	return v
}
