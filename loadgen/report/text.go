package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// metricTitles are the section titles and row labels of the terminal table (vLLM's where vLLM
// has the metric).
var metricTitles = map[string][2]string{
	MetricTTFT:        {"Time to First Token", "TTFT"},
	MetricTTFO:        {"Time to First Output Token (excl. reasoning)", "TTFO"},
	MetricTPOT:        {"Time per Output Token (excl. 1st token)", "TPOT"},
	MetricITL:         {"Inter-token Latency", "ITL"},
	MetricE2EL:        {"End-to-end Latency (from intended send)", "E2EL"},
	MetricServiceE2EL: {"Service Latency (from actual send)", "Service E2EL"},
	MetricSendLag:     {"Send Lag (actual - intended send)", "Send lag"},
}

const textWidth = 64

// textWriter writes lines and remembers the first error.
type textWriter struct {
	w   io.Writer
	err error
}

func (t *textWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

func (t *textWriter) rule(title string, fill byte) {
	if title == "" {
		t.printf("%s\n", strings.Repeat(string(fill), textWidth))
		return
	}
	title = " " + title + " "
	left := max((textWidth-len([]rune(title)))/2, 1)
	right := max(textWidth-len([]rune(title))-left, 1)
	t.printf("%s%s%s\n", strings.Repeat(string(fill), left), title, strings.Repeat(string(fill), right))
}

func (t *textWriter) row(label string, format string, args ...any) {
	t.printf("%-41s%s\n", label+":", fmt.Sprintf(format, args...))
}

// fmtMS formats a latency in ms with two decimals.
func fmtMS(d time.Duration) string { return fmt.Sprintf("%.2f", durationMS(d)) }

func fmtRate(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return fmt.Sprintf("%g", sig(r))
}

// WriteText writes the bench as a terminal table in the manner of vLLM's benchmark output, with
// a 95% interval beside every percentile, the per-stage breakdown, the tail verdict, sessions,
// errors and the slowest requests.
func WriteText(w io.Writer, b *Bench) error {
	t := &textWriter{w: w}
	writeBenchText(t, b)
	return t.err
}

func writeBenchText(t *textWriter, b *Bench) {
	t.rule("ragtail bench result", '=')
	c := b.Config
	if c.URL != "" {
		t.row("Target", "%s", c.URL)
	}
	if c.Model != "" {
		t.row("Model", "%s", c.Model)
	}
	load := c.Shape
	if load == "" {
		load = "request rate " + fmtRate(c.RequestRate)
	}
	if c.Concurrency > 0 {
		if math.IsInf(c.RequestRate, 1) || c.RequestRate == 0 {
			load += fmt.Sprintf(", closed loop of %d users", c.Concurrency)
		} else {
			load += fmt.Sprintf(", concurrency cap %d", c.Concurrency)
		}
	}
	t.row("Load", "%s", load)
	if c.Dataset != "" {
		t.row("Dataset", "%s (seed %d)", c.Dataset, c.Seed)
	}
	if b.MergedFrom > 1 {
		t.row("Merged from", "%d runs", b.MergedFrom)
	}
	if c.Interrupted {
		t.row("Interrupted", "yes (Ctrl-C): the figures cover what completed")
	}
	t.row("Successful requests", "%d", b.Completed)
	t.row("Failed requests", "%d", b.Failed)
	if b.Cancellations != nil {
		t.row("Cancelled requests", "%s", b.cancelText())
	}
	if b.Warmup > 0 {
		t.row("Warmup requests", "%d (sent before the measured run; in no figure here)", b.Warmup)
	}
	t.row("Benchmark duration (s)", "%.2f", b.Duration.Seconds())
	t.row("Total input tokens", "%d", b.InputTokens)
	t.row("Total generated tokens", "%d", b.OutputTokens)
	t.tokenDetailRows(b)
	t.workloadRows(b)
	t.row("Request throughput (req/s)", "%.2f", b.RequestThroughput)
	t.row("Output token throughput (tok/s)", "%.2f", b.OutputThroughput)
	t.row("Total token throughput (tok/s)", "%.2f", b.TotalTokenThroughput)
	if b.GoodputRate != nil {
		t.row("Goodput (req/s)", "%.2f  (%d of %d meet %s)", *b.GoodputRate, b.GoodRequests, b.Completed, b.Goodput.Requests())
	}
	if c, ok := b.Cost(); ok {
		t.row(fmt.Sprintf("Cost (%d GPU at $%g/h)", b.Pricing.GPUs, b.Pricing.USDPerGPUHour), "%s", c.text())
	}
	if e, ok := b.Energy(); ok {
		t.row("Energy", "%s", e.text())
	}

	for _, s := range b.Stats {
		title, label := metricTitles[s.Metric][0], metricTitles[s.Metric][1]
		t.rule(fmt.Sprintf("%s (n=%d)", title, s.Count), '-')
		if s.Count == 0 && len(s.Percentiles) == 0 {
			t.printf("no samples\n")
			continue
		}
		t.row("Mean "+label+" (ms)", "%s", fmtMS(s.Mean))
		t.row("Median "+label+" (ms)", "%s", fmtMS(s.Median))
		for _, p := range s.Percentiles {
			t.row(fmt.Sprintf("P%s %s (ms)", formatP(p.P), label), "%-10s %s", fmtMS(p.Value), ciText(p, s.Count, b.Confidence))
		}
	}

	if len(b.Stages) > 0 {
		t.rule("Server stages (ms, from Server-Timing)", '-')
		head := fmt.Sprintf("%-12s %7s %9s", "stage", "n", "mean")
		for _, p := range b.Percentiles {
			head += fmt.Sprintf(" %9s", "p"+formatP(p))
		}
		t.printf("%s\n", head)
		for _, s := range b.Stages {
			line := fmt.Sprintf("%-12s %7d %9s", s.Stage, s.Count, fmtMS(s.Mean))
			for _, p := range b.Percentiles {
				v := "-"
				for _, sp := range s.Percentiles {
					if sp.P == p {
						v = fmtMS(sp.Value)
					}
				}
				line += fmt.Sprintf(" %9s", v)
			}
			t.printf("%s\n", line)
		}
	}

	t.phaseRows(b)
	t.sliceRows(b)
	t.holdRows(b)

	if len(b.Tails) > 0 {
		t.rule("Tail", '-')
		for _, mt := range b.Tails {
			writeTailText(t, mt)
		}
	}

	if s := b.Sessions; s != nil {
		t.rule("Sessions", '-')
		t.row("Sessions", "%d (%d truncated by the end of the run)", s.Count, s.Truncated)
		t.row("Completed", "%s (%d)", pct(s.CompletionRate()), s.Completed)
		t.row("Interrupted", "%s (%d)", pct(s.InterruptionRate()), s.Interrupted)
		t.row("First-step completion", "%s (%d of %d)", pct(s.FirstStepCompletionRate()), s.FirstStepsGood, s.FirstSteps)
		if s.StepLimit > 0 {
			t.row("Step limit (ms)", "%s: a failed or slower step interrupts", fmtMS(s.StepLimit))
		} else {
			t.row("Step limit", "none: only a failed step interrupts")
		}
	}

	t.turnsText(b)
	t.agentsText(b)

	if len(b.Errors) > 0 {
		t.rule("Errors", '-')
		for _, e := range b.Errors {
			ex := e.Example
			if len(ex) > 80 {
				ex = ex[:77] + "..."
			}
			t.printf("%-12s %7d  %s\n", e.Kind, e.Count, ex)
		}
	}

	if len(b.Slowest) > 0 {
		t.rule("Slowest requests", '-')
		t.printf("%10s %10s %6s  %s\n", "e2el (ms)", "ttft (ms)", "status", "trace id")
		for _, s := range b.Slowest[:min(len(b.Slowest), 5)] {
			ttft := "-"
			if s.TTFT > 0 {
				ttft = fmtMS(s.TTFT)
			}
			status := fmt.Sprint(s.Status)
			if s.ErrKind != "" {
				status = s.ErrKind
			}
			id := s.TraceID
			if id == "" {
				id = fmt.Sprintf("(request %d, no trace id)", s.Index)
			}
			t.printf("%10s %10s %6s  %s\n", fmtMS(s.E2EL), ttft, status, id)
		}
	}
	t.rule("", '=')
	t.printf("Latencies are from each request's intended send time, so a stalled server cannot hide\n" +
		"its queue (no coordinated omission). Intervals are distribution-free, from binomial order\n" +
		"statistics; n/a means too few samples for one.\n")
}

// ciText formats a percentile's interval, or says how many samples it would need.
func ciText(p PercentileStat, n int64, conf float64) string {
	label := fmt.Sprintf("%g%% CI", 100*conf)
	if p.HasCI {
		return fmt.Sprintf("%s [%s, %s]", label, fmtMS(p.Lo), fmtMS(p.Hi))
	}
	if need := minSamplesForCI(p.P/100, conf); need > 0 {
		return fmt.Sprintf("%s n/a (needs %d samples)", label, need)
	}
	return label + " n/a"
}

// minSamplesForCI is the smallest sample count that has an interval around the q-quantile at
// the confidence; 0 if none below 10^9.
func minSamplesForCI(q, conf float64) int64 {
	hi := int64(2)
	for {
		if _, _, ok := stats.QuantileRanks(hi, q, conf); ok {
			break
		}
		if hi > 1e9 {
			return 0
		}
		hi *= 2
	}
	lo := hi / 2 // no interval at lo (or lo < 2)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if _, _, ok := stats.QuantileRanks(mid, q, conf); ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

func writeTailText(t *textWriter, mt MetricTail) {
	label := metricTitles[mt.Metric][1]
	if label == "" {
		label = mt.Metric
	}
	t.printf("%s\n", wrap(label+": "+mt.Verdict(), textWidth+16, "  "))
	if len(mt.Fits) == 0 {
		return
	}
	t.printf("  %-12s %-28s %12s %10s %8s\n", "model", "parameters", "AIC", "P99 (ms)", "vs data")
	for _, f := range mt.Fits {
		var ps []string
		for _, p := range f.Params {
			ps = append(ps, paramText(p))
		}
		name := f.Model
		if f.Model == mt.Best {
			name += "*"
		}
		t.printf("  %-12s %-28s %12.1f %10s %+7.1f%%\n", name, strings.Join(ps, ", "), f.AIC, fmtMS(f.P99),
			100*f.RelativeError(mt.EmpiricalP99))
	}
	t.printf("  %-12s %-28s %12s %10s\n", "empirical", "", "", fmtMS(mt.EmpiricalP99))
}

// wrap breaks s into lines of at most width runes at spaces, indenting continuation lines.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, w := range strings.Fields(s) {
		n := len([]rune(w))
		if i > 0 && line+1+n > width {
			b.WriteString("\n" + indent)
			line = len(indent)
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		}
		b.WriteString(w)
		line += n
	}
	return b.String()
}

// paramText formats a fitted parameter with its unit: "rate 0.00159/ms", "xm 10.02 ms".
func paramText(p stats.Param) string {
	switch {
	case strings.HasSuffix(p.Name, "_per_ms"):
		return fmt.Sprintf("%s %.4g/ms", strings.TrimSuffix(p.Name, "_per_ms"), p.Value)
	case strings.HasSuffix(p.Name, "_ms"):
		return fmt.Sprintf("%s %.4g ms", strings.TrimSuffix(p.Name, "_ms"), p.Value)
	}
	return fmt.Sprintf("%s %.4g", p.Name, p.Value)
}

// WriteSweepText writes a sweep as a table of its points, then its knees and max RPS.
func WriteSweepText(w io.Writer, s *Sweep) error {
	t := &textWriter{w: w}
	t.rule("ragtail sweep result", '=')
	if len(s.Points) > 0 {
		c := s.Points[0].Bench.Config
		if c.URL != "" {
			t.row("Target", "%s", c.URL)
		}
		if c.Model != "" {
			t.row("Model", "%s", c.Model)
		}
	}
	axis := "rate"
	if s.Axis == AxisConcurrency {
		axis = "users"
	}
	t.printf("%8s %9s %7s %6s %10s %10s %10s %10s\n", axis, "achieved", "done", "failed", "p50 e2el", "p95 e2el", "p99 e2el", "p99 ttft")
	for _, p := range s.Points {
		x := fmtRate(p.Rate)
		if s.Axis == AxisConcurrency {
			x = fmt.Sprint(p.Concurrency)
		}
		if p.Partial() {
			x += "*"
		}
		b := p.Bench
		q := func(m string, q float64) string {
			h := b.Histograms[m]
			if h == nil || h.Count() == 0 {
				return "-"
			}
			return fmtMS(h.Quantile(q))
		}
		t.printf("%8s %9.2f %7d %6d %10s %10s %10s %10s\n", x, p.AchievedRPS, b.Completed, b.Failed,
			q(MetricE2EL, 0.5), q(MetricE2EL, 0.95), q(MetricE2EL, 0.99), q(MetricTTFT, 0.99))
	}
	t.printf("(latencies in ms)\n")
	if note := s.partialNote(); note != "" {
		t.printf("%s\n", note)
	}
	t.rule("", '-')
	t.row(fmt.Sprintf("Knee (P99 slope > %g ms per req/s)", s.KneeThreshold), "%s", s.kneeText(s.Knee))
	t.row("Knee (max distance below the chord)", "%s", s.kneeText(s.KneeRobust))
	if s.SLO != nil {
		v := "none of the points meets it"
		if s.MaxRPSUnderSLO != nil {
			v = fmt.Sprintf("%.2f req/s", *s.MaxRPSUnderSLO)
			if len(s.Probes) > 0 {
				v += fmt.Sprintf(" (bisection, %d probes)", len(s.Probes))
			}
		}
		t.row("Max RPS under "+s.SLO.String(), "%s", v)
		if s.Axis == AxisConcurrency {
			u := "none of the points meets it"
			if s.MaxUsersUnderSLO != nil {
				u = fmt.Sprintf("%d users", *s.MaxUsersUnderSLO)
				if len(s.Probes) > 0 {
					u += fmt.Sprintf(" (bisection, %d probes)", len(s.Probes))
				}
			}
			t.row("Max users under "+s.SLO.String(), "%s", u)
		}
		if s.MaxInterval != nil {
			t.row("  95% interval of the max load", "%s", s.MaxInterval.String(s.Axis))
		}
	}
	t.rule("", '=')
	return t.err
}

func (s *Sweep) kneeText(k SweepKnee) string {
	if !k.Found {
		return "not found"
	}
	if s.Axis == AxisConcurrency {
		return fmt.Sprintf("%d users (%.2f req/s), P99 E2EL %s ms", k.Concurrency, k.AchievedRPS, fmtMS(k.P99E2EL))
	}
	return fmt.Sprintf("%s req/s (achieved %.2f), P99 E2EL %s ms", fmtRate(k.Rate), k.AchievedRPS, fmtMS(k.P99E2EL))
}

// agentsText writes the agents' section: conversations, steps, tool calls and waits, and the
// agent latency with its intervals.
func (t *textWriter) agentsText(b *Bench) {
	a := b.Agents
	if a == nil {
		return
	}
	t.rule("Agents", '-')
	t.row("Conversations", "%d: %d answered, %d cut at the step bound, %d failed", a.Conversations, a.Answered, a.Cut, a.Failed)
	t.row("Steps per conversation", "mean %.2f, P50 %d, P90 %d, P99 %d", a.MeanSteps(), a.StepsQuantile(0.5), a.StepsQuantile(0.9), a.StepsQuantile(0.99))
	t.row("Tool calls", "%d (mean tool wait %s ms over %d waits)", a.ToolCalls, fmtMS(a.MeanToolWait()), a.ToolWaits)
	if a.Latency.Count() == 0 {
		t.row("Agent latency", "no conversation answered")
		return
	}
	t.row("Mean agent latency (ms)", "%s (first request to final answer, tool waits included)", fmtMS(a.Mean))
	for _, ps := range a.Percentiles {
		ci := ""
		if ps.HasCI {
			ci = fmt.Sprintf("  [%s, %s]", fmtMS(ps.Lo), fmtMS(ps.Hi))
		}
		t.row(fmt.Sprintf("P%s agent latency (ms)", formatP(ps.P)), "%s%s", fmtMS(ps.Value), ci)
	}
	if a.GoodputRate != nil {
		t.row("Agent goodput (conv/s)", "%.2f  (%d of %d answered within %s ms)", *a.GoodputRate, a.Good, a.Answered, fmtMS(a.SLO))
	}
}
