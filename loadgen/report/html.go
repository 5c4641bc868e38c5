package report

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// The HTML report is html/template sections (templates/*.html, embedded) filled from view
// structs built here; the charts are the SVG of svg.go, whose builder escapes every text it
// is given. No string from a result file reaches the page unescaped.

//go:embed templates/*.html
var templateFiles embed.FS

var templates = template.Must(template.New("report").ParseFS(templateFiles, "templates/*.html"))

// WriteHTML writes one self-contained HTML page (inline CSS and SVG, no script, no network)
// for a *Bench (a single or merged run), a *Sweep, or a *File holding either. The page is
// well-formed XML as well as HTML.
func WriteHTML(w io.Writer, d Document) error { return WriteHTMLWith(w, d, HTMLOptions{}) }

// WriteHTMLWith is WriteHTML with options.
func WriteHTMLWith(w io.Writer, d Document, opt HTMLOptions) error {
	var p page
	var err error
	switch x := d.(type) {
	case *Bench:
		p, err = benchPage(x, opt)
	case *Sweep:
		p, err = sweepPage(x)
	case *Comparison:
		p, err = comparePage(x)
	case *File:
		switch {
		case x.Bench != nil:
			return WriteHTMLWith(w, x.Bench, opt)
		case x.Sweep != nil:
			return WriteHTMLWith(w, x.Sweep, opt)
		}
		return fmt.Errorf("write html: empty file")
	default:
		return fmt.Errorf("write html: cannot render %T", d)
	}
	if err != nil {
		return fmt.Errorf("write html: %w", err)
	}
	if err := templates.ExecuteTemplate(w, "page", p); err != nil {
		return fmt.Errorf("write html: %w", err)
	}
	return nil
}

type page struct {
	Title    string
	Subtitle []string
	Sections []section
}

type section struct {
	ID, Title string
	Body      template.HTML
}

// sections renders section bodies from their templates, keeping the first error.
type sections struct {
	list []section
	err  error
}

// add renders template name with data as the body of a section.
func (s *sections) add(id, title, name string, data any) {
	if s.err != nil {
		return
	}
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, name, data); err != nil {
		s.err = fmt.Errorf("section %s: %w", id, err)
		return
	}
	s.list = append(s.list, section{ID: id, Title: title, Body: template.HTML(buf.String())}) //nolint:gosec // produced by html/template
}

// card is one headline figure.
type card struct{ Label, Value string }

// table is a table of text cells; the first cell of a row is its label.
type table struct {
	Heads []string
	Rows  [][]string
}

func (t *table) row(cells ...string) { t.Rows = append(t.Rows, cells) }

// blocks is the body of a section made of charts, tables and notes; Empty replaces it all.
type blocks struct {
	Empty  string
	Charts []template.HTML
	Pair   []template.HTML // two charts side by side
	Tables []table
	Notes  []string
}

// setting is one row of the settings table.
type setting struct{ Key, Value string }

func benchSubtitle(b *Bench) []string {
	c := b.Config
	var out []string
	if c.URL != "" {
		out = append(out, "target "+c.URL)
	}
	if c.Model != "" {
		out = append(out, "model "+c.Model)
	}
	load := c.Shape
	if load == "" {
		load = "request rate " + fmtRate(c.RequestRate)
	}
	if c.Concurrency > 0 {
		load += fmt.Sprintf(", concurrency %d", c.Concurrency)
	}
	out = append(out, "load "+load)
	if !b.Start.IsZero() {
		out = append(out, "started "+b.Start.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	out = append(out, fmt.Sprintf("%.1f s", b.Duration.Seconds()))
	if b.MergedFrom > 1 {
		out = append(out, fmt.Sprintf("merged from %d runs", b.MergedFrom))
	}
	return out
}

func benchPage(b *Bench, opt HTMLOptions) (page, error) {
	p := page{Title: "ragtail bench report", Subtitle: benchSubtitle(b)}
	if b.MergedFrom > 1 {
		p.Title = "ragtail bench report (merged)"
	}
	var s sections
	s.add("summary", "Summary", "bench-summary", benchSummary(b))
	s.add("latency-over-time", "Latency, load and tokens over time", "bench-timeline", timeline(b))
	if len(b.Slices) > 0 {
		s.add("slices", "Percentiles by time slice", "blocks", slicesBlocks(b))
	}
	if b.HoldSLO != nil {
		s.add("hold-slo", "SLO edge: the search and the held rate", "blocks", holdBlocks(b.HoldSLO))
	}
	s.add("percentile-spectrum", "Percentile spectrum", "blocks", spectrum(b))
	s.add("histograms", "TTFT and ITL histograms", "blocks", histograms(b))
	s.add("token-lengths", "Input and output token lengths", "blocks", tokenLengthCharts(b))
	s.add("stages", "Per-stage breakdown (Server-Timing)", "blocks", stages(b))
	s.add("phases", "Request phases: DNS, connect, TLS, first byte", "blocks", phasesBlocks(b))
	s.add("tail", "Tail: fits against the data", "bench-tail", tails(b))
	if b.Sessions != nil {
		s.add("sessions", "Sessions", "bench-sessions", sessionsTable(b.Sessions))
	}
	if len(b.Turns) > 0 {
		s.add("turns", "TTFT by session step (turn)", "blocks", turnsBlocks(b))
	}
	if b.Agents != nil {
		s.add("agents", "Agents: tool loops", "bench-agents", agentsTable(b.Agents))
	}
	// The server's own metrics during the run, when the run scraped them.
	if b.ServerMetrics != nil {
		s.add("server-metrics", "Server metrics during the run", "bench-server-metrics",
			serverMetricsView(b.ServerMetrics, b.Duration))
	}
	s.add("errors", "Errors", "bench-errors", b.Errors)
	s.add("slowest", "Slowest requests: client latency joined with server stages", "bench-slowest", slowest(b, opt))
	s.add("config", "Every setting of the run", "bench-settings", struct{ Rows []setting }{benchSettings(b)})
	p.Sections = s.list
	return p, s.err
}

type summaryView struct {
	Cards      []card
	Heads      []string
	Rows       []summaryRow
	Confidence string
}

type summaryRow struct {
	Metric, N, Mean string
	Cells           []ciCell
}

type ciCell struct{ Value, CI string }

func benchSummary(b *Bench) summaryView {
	v := summaryView{Heads: []string{"metric", "n", "mean"}, Confidence: fmt.Sprintf("%g", 100*b.Confidence)}
	v.Cards = []card{
		{"completed", fmt.Sprint(b.Completed)},
		{"failed", fmt.Sprint(b.Failed)},
		{"requests/s", fmt.Sprintf("%.2f", b.RequestThroughput)},
		{"output tokens/s", fmt.Sprintf("%.1f", b.OutputThroughput)},
	}
	if c := b.Cancellations; c != nil {
		v.Cards = slices.Insert(v.Cards, 2, card{"cancelled (" + b.Config.Cancel + ")", fmt.Sprintf("%d of %d", c.Done, c.Requested)})
		if s, ok := b.CancelServer(); ok && s.Freed != nil {
			v.Cards = slices.Insert(v.Cards, 3, card{"server freed cancelled work", fmt.Sprint(*s.Freed)})
		}
	}
	if b.GoodputRate != nil {
		v.Cards = append(v.Cards, card{"goodput req/s (" + b.Goodput.String() + ")", fmt.Sprintf("%.2f", *b.GoodputRate)})
	}
	if c, ok := b.Cost(); ok {
		v.Cards = append(v.Cards, card{fmt.Sprintf("cost (%d GPU at $%g/h)", b.Pricing.GPUs, b.Pricing.USDPerGPUHour), c.text()})
	}
	if e, ok := b.Energy(); ok {
		v.Cards = append(v.Cards, card{"energy", e.text()})
	}
	if s, ok := b.Metric(MetricE2EL); ok && s.Count > 0 {
		for _, ps := range s.Percentiles {
			if ps.P == 99 {
				v.Cards = append(v.Cards, card{"P99 E2EL ms", fmtMS(ps.Value)})
			}
		}
	}
	for _, p := range b.Percentiles {
		v.Heads = append(v.Heads, "p"+formatP(p))
	}
	for _, s := range b.Stats {
		r := summaryRow{Metric: metricTitles[s.Metric][1], N: fmt.Sprint(s.Count), Mean: "-"}
		if s.Count > 0 || len(s.Percentiles) > 0 {
			r.Mean = fmtMS(s.Mean)
		}
		for _, p := range b.Percentiles {
			c := ciCell{Value: "-"}
			for _, ps := range s.Percentiles {
				if ps.P == p {
					c.Value, c.CI = fmtMS(ps.Value), "CI n/a"
					if ps.HasCI {
						c.CI = "[" + fmtMS(ps.Lo) + ", " + fmtMS(ps.Hi) + "]"
					}
				}
			}
			r.Cells = append(r.Cells, c)
		}
		v.Rows = append(v.Rows, r)
	}
	return v
}

type timelineView struct {
	Empty                           string
	Latency, Rate, InFlight, Tokens template.HTML
	TokensMissing                   string
	BinWidth                        time.Duration
	Merged                          bool
}

func timeline(b *Bench) timelineView {
	if len(b.Timeline) == 0 {
		return timelineView{Empty: "No requests."}
	}
	var p99, mean, maxE, ttft, sent, done, failed, tokens []pt
	nan := math.NaN()
	var binTokens int64
	for _, t := range b.Timeline {
		x := (t.T + t.Width/2).Seconds()
		w := t.Width.Seconds()
		sent = append(sent, pt{X: x, Y: float64(t.Sent) / w})
		done = append(done, pt{X: x, Y: float64(t.Completed) / w})
		failed = append(failed, pt{X: x, Y: float64(t.Failed) / w})
		tokens = append(tokens, pt{X: x, Y: float64(t.OutputTokens) / w})
		binTokens += t.OutputTokens
		meanY, maxY, p99Y := nan, nan, nan
		if t.N > 0 {
			meanY, maxY = durationMS(t.MeanE2EL), durationMS(t.MaxE2EL)
			if t.P99E2EL != nil {
				p99Y = durationMS(*t.P99E2EL)
			}
		}
		mean, maxE, p99 = append(mean, pt{X: x, Y: meanY}), append(maxE, pt{X: x, Y: maxY}), append(p99, pt{X: x, Y: p99Y})
		ttftY := nan
		if t.NTTFT > 0 {
			ttftY = durationMS(t.MeanTTFT)
		}
		ttft = append(ttft, pt{X: x, Y: ttftY})
	}
	lat := chart{Title: "Latency by intended send time", XLabel: "seconds since start", YLabel: "ms",
		YFromZero: true, Series: []series{
			{Name: "max E2EL", Mode: modeDots, Color: palette[6], Pts: maxE},
			{Name: "P99 E2EL", Mode: modeLine, Color: palette[1], Pts: p99},
			{Name: "mean E2EL", Mode: modeLine, Color: palette[0], Pts: mean},
			{Name: "mean TTFT", Mode: modeLine, Color: palette[2], Pts: ttft},
		}}
	if spread(maxE, mean) > 100 {
		lat.YLog, lat.YFromZero = true, false
	}
	v := timelineView{BinWidth: b.Timeline[0].Width, Merged: b.MergedFrom > 1, Latency: lat.render()}
	v.Rate = chart{Title: "Requests per second", XLabel: "seconds since start", YLabel: "req/s", YFromZero: true,
		Series: []series{
			{Name: "sent", Mode: modeStep, Color: palette[0], Pts: sent},
			{Name: "completed", Mode: modeStep, Color: palette[2], Pts: done},
			{Name: "failed", Mode: modeStep, Color: palette[1], Pts: failed},
		}}.render()
	v.InFlight = chart{Title: "Requests in flight at the end of each bin", XLabel: "seconds since start",
		YLabel: "requests", YFromZero: true, W: 480, H: 300,
		Series: []series{{Name: "in flight", Mode: modeStep, Color: palette[3], Pts: inFlight(b.Timeline)}}}.render()
	v.Tokens = chart{Title: "Output tokens per second", XLabel: "seconds since start", YLabel: "tokens/s",
		YFromZero: true, W: 480, H: 300,
		Series: []series{{Name: "output tokens/s", Mode: modeStep, Color: palette[4], Pts: tokens}}}.render()
	if binTokens == 0 && b.OutputTokens > 0 {
		v.TokensMissing = "This file has no output tokens per bin (written before they were recorded): the tokens/s " +
			"chart is empty; the run's mean is in the summary."
	}
	return v
}

// inFlight is, at each bin, the requests sent and not yet ended by the bin's end: the running
// sum of sent minus completed and failed. Sent counts by send time and the others by end time,
// so the sum is exact at bin boundaries.
func inFlight(tl []TimelineBin) []pt {
	out := make([]pt, 0, len(tl))
	var n int64
	for _, t := range tl {
		n += t.Sent - t.Completed - t.Failed
		out = append(out, pt{X: (t.T + t.Width/2).Seconds(), Y: float64(n)})
	}
	return out
}

// spread is max/min over the positive Y values of the series.
func spread(ss ...[]pt) float64 {
	lo, hi := math.Inf(1), 0.0
	for _, s := range ss {
		for _, p := range s {
			if p.Y > 0 {
				lo, hi = math.Min(lo, p.Y), math.Max(hi, p.Y)
			}
		}
	}
	if hi == 0 {
		return 1
	}
	return hi / lo
}

// spectrumTicks labels x = 1/(1-q) with the percentile it stands for.
func spectrumTicks(maxX float64) []tick {
	ts := []tick{{1, "p0"}, {2, "p50"}, {10, "p90"}, {100, "p99"}, {1e3, "p99.9"}, {1e4, "p99.99"}, {1e5, "p99.999"}, {1e6, "p99.9999"}}
	var out []tick
	for _, t := range ts {
		if t.V <= math.Max(maxX, 10) {
			out = append(out, t)
		}
	}
	return out
}

// spectrumPoints samples the quantile function of h at x = 1/(1-q), ten points per decade, up
// to q = 1 - 1/n, plus the maximum.
func spectrumPoints(h *stats.Histogram) []pt {
	n := h.Count()
	if n == 0 {
		return nil
	}
	var out []pt
	for i := 0; ; i++ {
		x := math.Pow(10, float64(i)/10)
		if x > float64(n) {
			break
		}
		q := 1 - 1/x
		out = append(out, pt{X: x, Y: durationMS(h.Quantile(q))})
	}
	out = append(out, pt{X: float64(n), Y: durationMS(h.Max())})
	return out
}

func spectrum(b *Bench) blocks {
	var ss []series
	maxX := 10.0
	for i, m := range AllMetrics {
		hist := b.Histograms[m]
		if hist == nil || hist.Count() == 0 || !b.reports(m) {
			continue
		}
		ss = append(ss, series{Name: metricTitles[m][1], Mode: modeLine, Color: palette[i%len(palette)], Pts: spectrumPoints(hist)})
		maxX = math.Max(maxX, float64(hist.Count()))
	}
	if len(ss) == 0 {
		return blocks{Empty: "No latency samples (or no histograms in this file)."}
	}
	return blocks{
		Charts: []template.HTML{chart{Title: "Latency by percentile", XLabel: "percentile (log scale of 1/(1-q))",
			YLabel: "ms (log)", XLog: true, YLog: true, Series: ss, XTicks: spectrumTicks(maxX)}.render()},
		Notes: []string{"Each curve runs to its largest sample; a flat curve is a well-behaved service, a curve that " +
			"keeps climbing towards the right is a heavy tail. Read P99 at the p99 line."},
	}
}

// logBins regroups a histogram into about n log-spaced bars (in ms).
func logBins(hist *stats.Histogram, n int) []pt {
	bs := hist.Buckets()
	if len(bs) == 0 {
		return nil
	}
	lo := math.Max(durationMS(bs[0].From), durationMS(stats.HistogramLowest))
	hi := math.Max(durationMS(bs[len(bs)-1].To), lo*1.01)
	step := (math.Log10(hi) - math.Log10(lo)) / float64(n)
	out := make([]pt, n)
	for i := range out {
		out[i] = pt{X: math.Pow(10, math.Log10(lo)+float64(i)*step), X2: math.Pow(10, math.Log10(lo)+float64(i+1)*step)}
	}
	for _, b := range bs {
		mid := math.Max(durationMS((b.From+b.To)/2), lo)
		i := min(max(int((math.Log10(mid)-math.Log10(lo))/step), 0), n-1)
		out[i].Y += float64(b.Count)
	}
	return out
}

func histograms(b *Bench) blocks {
	var v blocks
	for i, m := range []string{MetricTTFT, MetricITL} {
		hist := b.Histograms[m]
		if hist == nil || hist.Count() == 0 {
			continue
		}
		v.Charts = append(v.Charts, chart{Title: fmt.Sprintf("%s distribution (n=%d)", metricTitles[m][1], hist.Count()),
			XLabel: "ms (log scale)", YLabel: "count", XLog: true, YFromZero: true, H: 260,
			Series: []series{{Mode: modeBars, Color: palette[[]int{2, 3}[i]], Pts: logBins(hist, 48)}}}.render())
	}
	if len(v.Charts) == 0 {
		v.Empty = "No TTFT or ITL samples: the target did not stream tokens."
	}
	return v
}

func stages(b *Bench) blocks {
	if len(b.Stages) == 0 {
		return blocks{Empty: "No Server-Timing was received: the target does not report its stages (ragtail serve does)."}
	}
	bars := make([]stageBar, 0, len(b.Stages))
	for _, s := range b.Stages {
		r := stageBar{Name: s.Stage, Avg: durationMS(s.Mean)}
		for _, p := range s.Percentiles {
			switch p.P {
			case 50:
				r.P50 = durationMS(p.Value)
			case 99:
				r.P99 = durationMS(p.Value)
			}
		}
		if r.P50 == 0 && r.P99 == 0 {
			if hist := b.StageHistograms[s.Stage]; hist != nil {
				r.P50, r.P99 = durationMS(hist.Quantile(0.5)), durationMS(hist.Quantile(0.99))
			}
		}
		bars = append(bars, r)
	}
	t := table{Heads: []string{"stage", "n", "mean"}}
	for _, p := range b.Percentiles {
		t.Heads = append(t.Heads, "p"+formatP(p))
	}
	for _, s := range b.Stages {
		cells := []string{s.Stage, fmt.Sprint(s.Count), fmtMS(s.Mean)}
		for _, p := range b.Percentiles {
			v := "-"
			for _, sp := range s.Percentiles {
				if sp.P == p {
					v = fmtMS(sp.Value)
				}
			}
			cells = append(cells, v)
		}
		t.row(cells...)
	}
	return blocks{Charts: []template.HTML{stageBars(bars)}, Tables: []table{t},
		Notes: []string{"Milliseconds, from the Server-Timing the service returned with each completed request."}}
}

type tailsView struct {
	Empty   string
	Metrics []tailView
}

type tailView struct {
	Label, Verdict, Hill string
	Chart                template.HTML
	Table                table
}

func tails(b *Bench) tailsView {
	if len(b.Tails) == 0 {
		return tailsView{Empty: "No tail analysis in this file."}
	}
	var v tailsView
	for _, mt := range b.Tails {
		tv := tailView{Label: metricTitles[mt.Metric][1], Verdict: mt.Verdict()}
		if hl := mt.Hill; hl != nil {
			tv.Hill = fmt.Sprintf("Hill estimator over the largest %d values (above %s ms): α = %.3g ± %.2g. "+
				"α < 2 means infinite variance (mean and standard deviation do not settle), α < 1 an infinite mean.",
				hl.K, fmtMS(hl.Threshold), hl.Alpha, hl.SE)
		}
		if len(mt.Fits) > 0 {
			tv.Chart = tailChart(b, mt, tv.Label)
			tv.Table = tailTable(mt)
		}
		v.Metrics = append(v.Metrics, tv)
	}
	return v
}

// tailChart draws the fitted quantile functions over the data's.
func tailChart(b *Bench, mt MetricTail, label string) template.HTML {
	var ss []series
	maxX := 100.0
	if hist := b.Histograms[mt.Metric]; hist != nil && hist.Count() > 0 {
		ss = append(ss, series{Name: "data", Mode: modeDots, Color: "#111111", Pts: spectrumPoints(hist)})
		maxX = math.Max(maxX, float64(hist.Count()))
	}
	colors := map[string]string{stats.ModelExponential: palette[1], stats.ModelLognormal: palette[2], stats.ModelPareto: palette[3]}
	// A badly fitting model can run off by orders of magnitude; draw it only within a decade
	// of the data, so that the data stay readable.
	ceiling := 10 * durationMS(mt.EmpiricalP99)
	if len(ss) > 0 {
		for _, p := range ss[0].Pts {
			ceiling = math.Max(ceiling, 10*p.Y)
		}
	}
	for _, f := range mt.Fits {
		var pts []pt
		for i := 0; ; i++ {
			x := math.Pow(10, float64(i)/20)
			if x > maxX {
				break
			}
			if q := 1 - 1/x; q > 0 {
				y := durationMS(f.Quantile(q))
				if y > ceiling {
					y = math.NaN()
				}
				pts = append(pts, pt{X: x, Y: y})
			}
		}
		name := f.Model
		if f.Model == mt.Best {
			name += " (best)"
		}
		ss = append(ss, series{Name: name, Mode: modeLine, Dash: f.Model != mt.Best, Color: colors[f.Model], Pts: pts})
	}
	return chart{Title: label + ": fitted quantiles against the data", XLabel: "percentile (log scale of 1/(1-q))",
		YLabel: "ms (log)", XLog: true, YLog: true, Series: ss, XTicks: spectrumTicks(maxX),
		VLines: []refLine{{At: 100, Label: "P99", Color: "#64748b"}}}.render()
}

func tailTable(mt MetricTail) table {
	t := table{Heads: []string{"model", "parameters", "log-likelihood", "AIC", "P99 ms", "vs data"}}
	for _, f := range mt.Fits {
		ps := make([]string, 0, len(f.Params))
		for _, p := range f.Params {
			ps = append(ps, fmt.Sprintf("%s = %.4g ± %.2g", p.Name, p.Value, p.SE))
		}
		name := f.Model
		if f.Model == mt.Best {
			name += " (best by AIC)"
		}
		t.row(name, strings.Join(ps, ", "), fmt.Sprintf("%.1f", f.LogLikelihood), fmt.Sprintf("%.1f", f.AIC),
			fmtMS(f.P99), fmt.Sprintf("%+.1f%%", 100*f.RelativeError(mt.EmpiricalP99)))
	}
	t.row("data (empirical)", "", "", "", fmtMS(mt.EmpiricalP99), "")
	return t
}

func sessionsTable(s *Sessions) table {
	t := table{Heads: []string{"", "value"}}
	t.row("sessions", fmt.Sprint(s.Count))
	t.row("completed", fmt.Sprintf("%s (%d)", pct(s.CompletionRate()), s.Completed))
	t.row("interrupted", fmt.Sprintf("%s (%d)", pct(s.InterruptionRate()), s.Interrupted))
	t.row("truncated by the end of the run", fmt.Sprint(s.Truncated))
	t.row("first-step completion", fmt.Sprintf("%s (%d of %d)", pct(s.FirstStepCompletionRate()), s.FirstStepsGood, s.FirstSteps))
	limit := "none (only failures interrupt)"
	if s.StepLimit > 0 {
		limit = fmtMS(s.StepLimit) + " ms"
	}
	t.row("step limit", limit)
	return t
}

// agentsTable lists the agents' conversations, steps, tool waits, latency percentiles with
// their intervals, and goodput.
func agentsTable(a *Agents) table {
	t := table{Heads: []string{"", "value"}}
	t.row("conversations", fmt.Sprint(a.Conversations))
	t.row("answered / cut at the step bound / failed", fmt.Sprintf("%d / %d / %d", a.Answered, a.Cut, a.Failed))
	t.row("steps per conversation", fmt.Sprintf("mean %.2f, P50 %d, P90 %d, P99 %d", a.MeanSteps(), a.StepsQuantile(0.5), a.StepsQuantile(0.9), a.StepsQuantile(0.99)))
	t.row("tool calls", fmt.Sprint(a.ToolCalls))
	t.row("mean tool wait", fmtMS(a.MeanToolWait())+" ms")
	if a.Latency.Count() > 0 {
		t.row("mean agent latency", fmtMS(a.Mean)+" ms")
	}
	for _, ps := range a.Percentiles {
		v := fmtMS(ps.Value) + " ms"
		if ps.HasCI {
			v += fmt.Sprintf(" [%s, %s]", fmtMS(ps.Lo), fmtMS(ps.Hi))
		}
		t.row("P"+formatP(ps.P)+" agent latency", v)
	}
	if a.GoodputRate != nil {
		t.row("agent goodput", fmt.Sprintf("%.2f conv/s (%d of %d answered within %s ms)", *a.GoodputRate, a.Good, a.Answered, fmtMS(a.SLO)))
	}
	return t
}

// notRecorded marks a setting the file does not hold.
const notRecorded = "not recorded"

func orNotRecorded(s string) string {
	if s == "" {
		return notRecorded
	}
	return s
}

// benchSettings lists every setting of the run the file holds, in the order a reader looks
// for them: the target and what each request sent, the load, the summary's options, and what
// made the run.
func benchSettings(b *Bench) []setting {
	c := b.Config
	model := c.Model
	if model == "" {
		model = "(the server's default)"
	}
	stream, temperature := notRecorded, notRecorded
	if c.Stream != nil {
		stream = fmt.Sprint(*c.Stream)
		temperature = "not sent (the server's default)"
	}
	if c.Temperature != nil {
		temperature = fmt.Sprintf("%g", *c.Temperature)
	}
	maxTokens := "not sent"
	if c.MaxTokens > 0 {
		maxTokens = fmt.Sprint(c.MaxTokens)
	}
	rows := []setting{
		{"url", c.URL}, {"model", model}, {"dataset", orNotRecorded(c.Dataset)},
		{"stream", stream}, {"temperature", temperature}, {"max tokens", maxTokens},
		{"shape", c.Shape}, {"request rate (req/s)", fmtRate(c.RequestRate)}, {"burstiness", burstinessText(c.Burstiness)},
		{"concurrency", limitText(c.Concurrency)}, {"num prompts", limitText(c.NumPrompts)},
		{"seed", fmt.Sprint(c.Seed)},
	}
	if c.Segment != nil {
		rows = append(rows, setting{"segment", fmt.Sprintf("%d of %d", c.Segment.Index, c.Segment.Count)})
	}
	if c.ScheduleHash != "" {
		rows = append(rows, setting{"schedule hash", c.ScheduleHash})
	}
	rows = append(rows, setting{"interrupted", fmt.Sprint(c.Interrupted)})
	rows = append(rows, summarySettings(b)...)
	rows = append(rows, setting{"http client", orNotRecorded(c.HTTPClient)})
	if c.Cancel != "" {
		rows = append(rows, setting{"cancel", c.Cancel})
	}
	rows = append(rows, setting{"version", orNotRecorded(c.Version)}, setting{"command", orNotRecorded(c.Command)})
	for _, s := range b.Sources {
		rows = append(rows, setting{"source", s})
	}
	return rows
}

// summarySettings are what the summary was computed with, and when and how long the run was.
func summarySettings(b *Bench) []setting {
	goodput := "none"
	if len(b.Goodput) > 0 {
		goodput = b.Goodput.String()
	}
	stepLimit := "none (only failures interrupt)"
	if b.SessionStepLimit > 0 {
		stepLimit = fmtMS(b.SessionStepLimit) + " ms"
	}
	ps := make([]string, 0, len(b.Percentiles))
	for _, p := range b.Percentiles {
		ps = append(ps, formatP(p))
	}
	rows := []setting{
		{"percentiles", strings.Join(ps, ", ")}, {"percentile metrics", strings.Join(b.Metrics, ", ")},
		{"confidence", fmt.Sprint(b.Confidence)}, {"goodput SLOs", goodput}, {"session step limit", stepLimit},
		{"warmup requests (left out)", fmt.Sprint(b.Warmup)},
	}
	if !b.Start.IsZero() {
		rows = append(rows, setting{"start", b.Start.UTC().Format(time.RFC3339Nano)})
	}
	rows = append(rows, setting{"measured duration", fmt.Sprintf("%.3f s", b.Duration.Seconds())})
	if b.MergedFrom > 1 {
		rows = append(rows, setting{"merged from", fmt.Sprintf("%d runs", b.MergedFrom)})
	}
	if c := b.Clock; c != nil {
		rows = append(rows, setting{"server clock offset",
			fmt.Sprintf("%+.3f ms ± %.3f ms (server minus generator, best of %d responses; %s)",
				durationMS(c.Offset), durationMS(c.Uncertainty), c.Samples, c.Method)})
	}
	return rows
}

// burstinessText is the gamma shape of the gaps; 0 is recorded when it does not apply.
func burstinessText(b float64) string {
	if b == 0 {
		return "does not apply"
	}
	return fmt.Sprint(b)
}

// limitText is a cap or count where 0 means none.
func limitText(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

func sweepPage(s *Sweep) (page, error) {
	p := page{Title: "ragtail sweep report"}
	if len(s.Points) > 0 {
		c := s.Points[0].Bench.Config
		if c.URL != "" {
			p.Subtitle = append(p.Subtitle, "target "+c.URL)
		}
		if c.Model != "" {
			p.Subtitle = append(p.Subtitle, "model "+c.Model)
		}
	}
	p.Subtitle = append(p.Subtitle, fmt.Sprintf("%d points over %s", len(s.Points), s.Axis))
	if !s.Start.IsZero() {
		p.Subtitle = append(p.Subtitle, "started "+s.Start.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	var sec sections
	sec.add("summary", "Summary", "sweep-summary", sweepCards(s))
	sec.add("sweep", "Latency against load", "blocks", sweepCurve(s))
	sec.add("throughput", "Throughput against load", "blocks", sweepThroughput(s))
	sec.add("points", "Points", "sweep-points", sweepPoints(s))
	p.Sections = sec.list
	return p, sec.err
}

func sweepCards(s *Sweep) []card {
	cards := []card{
		{"knee (P99 slope > " + fmt.Sprintf("%g", s.KneeThreshold) + " ms per req/s)", s.kneeText(s.Knee)},
		{"knee (max distance below the chord)", s.kneeText(s.KneeRobust)},
	}
	if s.SLO != nil {
		v := "not met"
		if s.MaxRPSUnderSLO != nil {
			v = fmt.Sprintf("%.2f req/s", *s.MaxRPSUnderSLO)
		}
		cards = append(cards, card{"max RPS under " + s.SLO.String(), v})
		if s.Axis == AxisConcurrency {
			u := "not met"
			if s.MaxUsersUnderSLO != nil {
				u = fmt.Sprintf("%d users", *s.MaxUsersUnderSLO)
			}
			cards = append(cards, card{"max users under " + s.SLO.String(), u})
		}
		if s.MaxInterval != nil {
			cards = append(cards, card{"95% interval of the max load", s.MaxInterval.String(s.Axis)})
		}
	}
	return cards
}

func (s *Sweep) xs() (label string, xs []float64) {
	label = "offered rate (req/s)"
	if s.Axis == AxisConcurrency {
		label = "concurrency (users)"
	}
	for _, p := range s.Points {
		xs = append(xs, p.x(s.Axis))
	}
	return label, xs
}

func sweepCurve(s *Sweep) blocks {
	if len(s.Points) == 0 {
		return blocks{Empty: "No points."}
	}
	label, xs := s.xs()
	qs := []struct {
		name string
		q    float64
	}{{"P50 E2EL", 0.5}, {"P95 E2EL", 0.95}, {"P99 E2EL", 0.99}}
	var ss []series
	for i, q := range qs {
		var pts []pt
		for j, p := range s.Points {
			y := math.NaN()
			if hist := p.Bench.Histograms[MetricE2EL]; hist != nil && hist.Count() > 0 {
				y = durationMS(hist.Quantile(q.q))
			}
			pts = append(pts, pt{X: xs[j], Y: y})
		}
		ss = append(ss, series{Name: q.name, Mode: modeLineDots, Color: palette[[]int{0, 4, 1}[i]], Pts: pts})
	}
	c := chart{Title: "End-to-end latency against load", XLabel: label, YLabel: "ms", YFromZero: true, Series: ss}
	if s.Knee.Found {
		c.VLines = append(c.VLines, refLine{At: s.Points[s.Knee.Index].x(s.Axis), Label: "knee (slope)", Color: palette[1]})
	}
	if s.KneeRobust.Found {
		c.VLines = append(c.VLines, refLine{At: s.Points[s.KneeRobust.Index].x(s.Axis), Label: "knee (kneedle)", Color: palette[3]})
	}
	if s.SLO != nil && s.SLO.Metric == MetricE2EL {
		c.HLines = append(c.HLines, refLine{At: durationMS(s.SLO.Limit), Label: "SLO " + s.SLO.String(), Color: palette[2]})
	}
	return blocks{Charts: []template.HTML{c.render()}}
}

func sweepThroughput(s *Sweep) blocks {
	if len(s.Points) == 0 {
		return blocks{}
	}
	label, xs := s.xs()
	var ach, failed []pt
	for j, p := range s.Points {
		ach = append(ach, pt{X: xs[j], Y: p.AchievedRPS})
		fr := 0.0
		if secs := p.Bench.Duration.Seconds(); secs > 0 {
			fr = float64(p.Bench.Failed) / secs
		}
		failed = append(failed, pt{X: xs[j], Y: fr})
	}
	ss := []series{{Name: "achieved req/s", Mode: modeLineDots, Color: palette[2], Pts: ach},
		{Name: "failed req/s", Mode: modeLineDots, Color: palette[1], Pts: failed}}
	if s.Axis == AxisRate {
		ss = append(ss, series{Name: "offered", Mode: modeLine, Dash: true, Color: palette[6],
			Pts: []pt{{X: xs[0], Y: xs[0]}, {X: xs[len(xs)-1], Y: xs[len(xs)-1]}}})
	}
	return blocks{Charts: []template.HTML{chart{Title: "Throughput against load", XLabel: label, YLabel: "req/s",
		YFromZero: true, Series: ss}.render()}}
}

type sweepPointsView struct {
	Points  table
	Probes  *table
	Partial string // the footnote of a point Ctrl-C cut short
}

func sweepPoints(s *Sweep) sweepPointsView {
	v := sweepPointsView{Points: table{Heads: []string{s.Axis, "achieved req/s", "completed", "failed", "p50 e2el",
		"p95 e2el", "p99 e2el", "p99 ttft", "goodput"}}, Partial: s.partialNote()}
	for _, p := range s.Points {
		b := p.Bench
		q := func(m string, q float64) string {
			if hist := b.Histograms[m]; hist != nil && hist.Count() > 0 {
				return fmtMS(hist.Quantile(q))
			}
			return "-"
		}
		x := fmtRate(p.Rate)
		if s.Axis == AxisConcurrency {
			x = fmt.Sprint(p.Concurrency)
		}
		if p.Partial() {
			x += "*"
		}
		g := "-"
		if b.GoodputRate != nil {
			g = fmt.Sprintf("%.2f", *b.GoodputRate)
		}
		v.Points.row(x, fmt.Sprintf("%.2f", p.AchievedRPS), fmt.Sprint(b.Completed), fmt.Sprint(b.Failed),
			q(MetricE2EL, 0.5), q(MetricE2EL, 0.95), q(MetricE2EL, 0.99), q(MetricTTFT, 0.99), g)
	}
	if len(s.Probes) > 0 {
		v.Probes = &table{Heads: []string{"rate", "meets the SLO"}}
		if s.Axis == AxisConcurrency {
			v.Probes.Heads[0] = "users"
		}
		for _, p := range s.Probes {
			x := fmt.Sprintf("%.2f", p.Rate)
			if s.Axis == AxisConcurrency {
				x = fmt.Sprint(p.Users)
			}
			v.Probes.row(x, fmt.Sprint(p.Meets))
		}
	}
	return v
}
