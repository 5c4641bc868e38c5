package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// WriteHTML writes one self-contained HTML page (inline CSS and SVG, no script, no network)
// for a *Bench (a single or merged run), a *Sweep, or a *File holding either. The page is
// well-formed XML as well as HTML.
func WriteHTML(w io.Writer, d Document) error { return WriteHTMLWith(w, d, HTMLOptions{}) }

// WriteHTMLWith is WriteHTML with options.
func WriteHTMLWith(w io.Writer, d Document, opt HTMLOptions) error {
	var p page
	switch x := d.(type) {
	case *Bench:
		p = benchPage(x, opt)
	case *Sweep:
		p = sweepPage(x)
	case *Comparison:
		p = comparePage(x)
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
	if err := pageTemplate.Execute(w, p); err != nil {
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

// hb builds escaped HTML.
type hb struct{ strings.Builder }

func (h *hb) raw(s string)                 { h.WriteString(s) }
func (h *hb) f(format string, args ...any) { fmt.Fprintf(h, format, args...) }
func (h *hb) p(class, s string)            { h.f(`<p class="%s">%s</p>`, class, esc(s)) }
func (h *hb) html() template.HTML          { return template.HTML(h.String()) } //nolint:gosec // built with esc
func (h *hb) cell(tag, class, s string)    { h.f(`<%s class="%s">%s</%s>`, tag, class, esc(s), tag) }
func (h *hb) tableStart(heads ...string) {
	h.raw(`<table><thead><tr>`)
	for _, x := range heads {
		h.cell("th", "", x)
	}
	h.raw(`</tr></thead><tbody>`)
}
func (h *hb) tableEnd() { h.raw(`</tbody></table>`) }
func (h *hb) rowCells(cells ...string) {
	h.raw(`<tr>`)
	for i, c := range cells {
		class := "n"
		if i == 0 {
			class = "k"
		}
		h.cell("td", class, c)
	}
	h.raw(`</tr>`)
}

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

func benchPage(b *Bench, opt HTMLOptions) page {
	p := page{Title: "ragtail bench report", Subtitle: benchSubtitle(b)}
	if b.MergedFrom > 1 {
		p.Title = "ragtail bench report (merged)"
	}
	p.Sections = append(p.Sections,
		section{"summary", "Summary", benchSummaryHTML(b)},
		section{"latency-over-time", "Latency over time", timelineHTML(b)},
		section{"percentile-spectrum", "Percentile spectrum", spectrumHTML(b)},
		section{"histograms", "TTFT and ITL histograms", histogramsHTML(b)},
		section{"token-lengths", "Input and output token lengths", tokenLengthsHTML(b)},
		section{"stages", "Per-stage breakdown (Server-Timing)", stagesHTML(b)},
		section{"tail", "Tail: fits against the data", tailHTML(b)},
	)
	if b.Sessions != nil {
		p.Sections = append(p.Sections, section{"sessions", "Sessions", sessionsHTML(b.Sessions)})
	}
	// The server's own metrics during the run, when the run scraped them.
	if b.ServerMetrics != nil {
		p.Sections = append(p.Sections, section{"server-metrics", "Server metrics during the run",
			serverMetricsHTML(b.ServerMetrics, b.Duration)})
	}
	p.Sections = append(p.Sections,
		section{"errors", "Errors", errorsHTML(b)},
		section{"slowest", "Slowest requests: client latency joined with server stages", slowestHTML(b, opt)},
		section{"config", "Configuration", configHTML(b)},
	)
	return p
}

func benchSummaryHTML(b *Bench) template.HTML {
	var h hb
	h.raw(`<div class="cards">`)
	card := func(label, value string) {
		h.f(`<div class="card"><div class="cv">%s</div><div class="cl">%s</div></div>`, esc(value), esc(label))
	}
	card("completed", fmt.Sprint(b.Completed))
	card("failed", fmt.Sprint(b.Failed))
	card("requests/s", fmt.Sprintf("%.2f", b.RequestThroughput))
	card("output tokens/s", fmt.Sprintf("%.1f", b.OutputThroughput))
	if b.GoodputRate != nil {
		card("goodput req/s ("+b.Goodput.String()+")", fmt.Sprintf("%.2f", *b.GoodputRate))
	}
	if s, ok := b.Metric(MetricE2EL); ok && s.Count > 0 {
		for _, ps := range s.Percentiles {
			if ps.P == 99 {
				card("P99 E2EL ms", fmtMS(ps.Value))
			}
		}
	}
	h.raw(`</div>`)

	heads := []string{"metric", "n", "mean"}
	for _, p := range b.Percentiles {
		heads = append(heads, "p"+formatP(p))
	}
	h.tableStart(heads...)
	for _, s := range b.Stats {
		h.raw(`<tr>`)
		h.cell("td", "k", metricTitles[s.Metric][1])
		h.cell("td", "n", fmt.Sprint(s.Count))
		if s.Count == 0 && len(s.Percentiles) == 0 {
			h.cell("td", "n", "-")
		} else {
			h.cell("td", "n", fmtMS(s.Mean))
		}
		for _, p := range b.Percentiles {
			val, ci := "-", ""
			for _, ps := range s.Percentiles {
				if ps.P == p {
					val = fmtMS(ps.Value)
					if ps.HasCI {
						ci = "[" + fmtMS(ps.Lo) + ", " + fmtMS(ps.Hi) + "]"
					} else {
						ci = "CI n/a"
					}
				}
			}
			h.f(`<td class="n">%s<br/><span class="ci">%s</span></td>`, esc(val), esc(ci))
		}
		h.raw(`</tr>`)
	}
	h.tableEnd()
	h.p("note", fmt.Sprintf("Milliseconds. Latencies are measured from each request's intended send time (no coordinated omission); "+
		"brackets are distribution-free %g%% confidence intervals from binomial order statistics, "+
		"n/a where there are too few samples for one. TTFT, TPOT and ITL follow vLLM's definitions; service E2EL is "+
		"measured from the actual send, as closed-loop tools do.", 100*b.Confidence))
	return h.html()
}

func timelineHTML(b *Bench) template.HTML {
	var h hb
	if len(b.Timeline) == 0 {
		h.p("note", "No requests.")
		return h.html()
	}
	var p99, mean, maxE, ttft, sent, done, failed []pt
	nan := math.NaN()
	for _, t := range b.Timeline {
		x := (t.T + t.Width/2).Seconds()
		w := t.Width.Seconds()
		sent = append(sent, pt{X: x, Y: float64(t.Sent) / w})
		done = append(done, pt{X: x, Y: float64(t.Completed) / w})
		failed = append(failed, pt{X: x, Y: float64(t.Failed) / w})
		if t.N == 0 {
			mean, maxE, p99 = append(mean, pt{X: x, Y: nan}), append(maxE, pt{X: x, Y: nan}), append(p99, pt{X: x, Y: nan})
		} else {
			mean = append(mean, pt{X: x, Y: durationMS(t.MeanE2EL)})
			maxE = append(maxE, pt{X: x, Y: durationMS(t.MaxE2EL)})
			y := nan
			if t.P99E2EL != nil {
				y = durationMS(*t.P99E2EL)
			}
			p99 = append(p99, pt{X: x, Y: y})
		}
		y := nan
		if t.NTTFT > 0 {
			y = durationMS(t.MeanTTFT)
		}
		ttft = append(ttft, pt{X: x, Y: y})
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
	h.raw(lat.render())
	h.raw(chart{Title: "Requests per second", XLabel: "seconds since start", YLabel: "req/s", YFromZero: true,
		Series: []series{
			{Name: "sent", Mode: modeStep, Color: palette[0], Pts: sent},
			{Name: "completed", Mode: modeStep, Color: palette[2], Pts: done},
			{Name: "failed", Mode: modeStep, Color: palette[1], Pts: failed},
		}}.render())
	h.raw(chart{Title: "Requests in flight at the end of each bin", XLabel: "seconds since start", YLabel: "requests",
		YFromZero: true, Series: []series{{Name: "in flight", Mode: modeStep, Color: palette[3], Pts: inFlight(b.Timeline)}}}.render())
	h.p("note", fmt.Sprintf("Bins of %s. In flight is requests sent minus requests ended, counted up to each bin's end. Latencies are placed at the intended send time of their requests, so a stall shows "+
		"at the arrivals it delayed; P99 is drawn only for bins with enough samples for an interval (368)%s.",
		b.Timeline[0].Width, mergedNote(b)))
	return h.html()
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

func mergedNote(b *Bench) string {
	if b.MergedFrom > 1 {
		return ", and not at all for merged runs (per-bin percentiles do not merge)"
	}
	return ""
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

func spectrumHTML(b *Bench) template.HTML {
	var h hb
	var ss []series
	maxX := 10.0
	for i, m := range AllMetrics {
		hist := b.Histograms[m]
		if hist == nil || hist.Count() == 0 {
			continue
		}
		ss = append(ss, series{Name: metricTitles[m][1], Mode: modeLine, Color: palette[i%len(palette)], Pts: spectrumPoints(hist)})
		maxX = math.Max(maxX, float64(hist.Count()))
	}
	if len(ss) == 0 {
		h.p("note", "No latency samples (or no histograms in this file).")
		return h.html()
	}
	h.raw(chart{Title: "Latency by percentile", XLabel: "percentile (log scale of 1/(1-q))", YLabel: "ms (log)",
		XLog: true, YLog: true, Series: ss, XTicks: spectrumTicks(maxX)}.render())
	h.p("note", "Each curve runs to its largest sample; a flat curve is a well-behaved service, a curve that keeps climbing "+
		"towards the right is a heavy tail. Read P99 at the p99 line.")
	return h.html()
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

func histogramsHTML(b *Bench) template.HTML {
	var h hb
	drew := false
	for i, m := range []string{MetricTTFT, MetricITL} {
		hist := b.Histograms[m]
		if hist == nil || hist.Count() == 0 {
			continue
		}
		drew = true
		h.raw(chart{Title: fmt.Sprintf("%s distribution (n=%d)", metricTitles[m][1], hist.Count()), XLabel: "ms (log scale)",
			YLabel: "count", XLog: true, YFromZero: true, H: 260,
			Series: []series{{Mode: modeBars, Color: palette[[]int{2, 3}[i]], Pts: logBins(hist, 48)}}}.render())
	}
	if !drew {
		h.p("note", "No TTFT or ITL samples: the target did not stream tokens.")
	}
	return h.html()
}

func stagesHTML(b *Bench) template.HTML {
	var h hb
	if len(b.Stages) == 0 {
		h.p("note", "No Server-Timing was received: the target does not report its stages (ragtail serve does).")
		return h.html()
	}
	type row struct {
		name          string
		p50, p99, avg float64
	}
	var rows []row
	top := 0.0
	for _, s := range b.Stages {
		r := row{name: s.Stage, avg: durationMS(s.Mean)}
		for _, p := range s.Percentiles {
			switch p.P {
			case 50:
				r.p50 = durationMS(p.Value)
			case 99:
				r.p99 = durationMS(p.Value)
			}
		}
		if r.p50 == 0 && r.p99 == 0 {
			if hist := b.StageHistograms[s.Stage]; hist != nil {
				r.p50, r.p99 = durationMS(hist.Quantile(0.5)), durationMS(hist.Quantile(0.99))
			}
		}
		top = math.Max(top, math.Max(r.p99, r.avg))
		rows = append(rows, r)
	}
	if top <= 0 {
		top = 1
	}
	const w, rowH, left, right = 760.0, 34.0, 110.0, 210.0
	height := 40 + rowH*float64(len(rows))
	h.f(`<svg class="chart" viewBox="0 0 %s %s" role="img" aria-label="per-stage latency">`, num(w), num(height))
	h.f(`<rect x="%s" y="10" width="12" height="10" fill="%s"/><text x="%s" y="19" class="lg">P50</text>`, num(left), palette[0], num(left+16))
	h.f(`<rect x="%s" y="10" width="12" height="10" fill="%s" fill-opacity="0.35"/><text x="%s" y="19" class="lg">P99</text>`, num(left+60), palette[0], num(left+76))
	h.f(`<line x1="0" y1="0" x2="0" y2="0" stroke="none"/><text x="%s" y="19" class="lg">| mean</text>`, num(left+120))
	scale := (w - left - right) / top
	for i, r := range rows {
		y := 32 + rowH*float64(i)
		h.f(`<text x="%s" y="%s" class="yt">%s</text>`, num(left-8), num(y+15), esc(r.name))
		h.f(`<rect x="%s" y="%s" width="%s" height="20" fill="%s" fill-opacity="0.35"/>`, num(left), num(y+2), num(math.Max(r.p99*scale, 1)), palette[0])
		h.f(`<rect x="%s" y="%s" width="%s" height="20" fill="%s"/>`, num(left), num(y+2), num(math.Max(r.p50*scale, 1)), palette[0])
		h.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#111" stroke-width="2"/>`, num(left+r.avg*scale), num(y), num(left+r.avg*scale), num(y+24))
		h.f(`<text x="%s" y="%s" class="lg">%s</text>`, num(w-right+10), num(y+16),
			esc(fmt.Sprintf("p50 %.2f · p99 %.2f ms", r.p50, r.p99)))
	}
	h.raw(`</svg>`)
	heads := []string{"stage", "n", "mean"}
	for _, p := range b.Percentiles {
		heads = append(heads, "p"+formatP(p))
	}
	h.tableStart(heads...)
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
		h.rowCells(cells...)
	}
	h.tableEnd()
	h.p("note", "Milliseconds, from the Server-Timing the service returned with each completed request.")
	return h.html()
}

func tailHTML(b *Bench) template.HTML {
	var h hb
	if len(b.Tails) == 0 {
		h.p("note", "No tail analysis in this file.")
		return h.html()
	}
	for _, mt := range b.Tails {
		label := metricTitles[mt.Metric][1]
		h.f(`<h3>%s</h3>`, esc(label))
		h.p("verdict", mt.Verdict())
		if len(mt.Fits) == 0 {
			continue
		}
		var ss []series
		maxX := 100.0
		if hist := b.Histograms[mt.Metric]; hist != nil && hist.Count() > 0 {
			ss = append(ss, series{Name: "data", Mode: modeDots, Color: "#111111", Pts: spectrumPoints(hist)})
			maxX = math.Max(maxX, float64(hist.Count()))
		}
		colors := map[string]string{stats.ModelExponential: palette[1], stats.ModelLognormal: palette[2], stats.ModelPareto: palette[3]}
		// A badly fitting model can run off by orders of magnitude; draw it only within a
		// decade of the data, so that the data stay readable.
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
		h.raw(chart{Title: label + ": fitted quantiles against the data", XLabel: "percentile (log scale of 1/(1-q))",
			YLabel: "ms (log)", XLog: true, YLog: true, Series: ss, XTicks: spectrumTicks(maxX),
			VLines: []refLine{{At: 100, Label: "P99", Color: "#64748b"}}}.render())
		h.tableStart("model", "parameters", "log-likelihood", "AIC", "P99 ms", "vs data")
		for _, f := range mt.Fits {
			var ps []string
			for _, p := range f.Params {
				ps = append(ps, fmt.Sprintf("%s = %.4g ± %.2g", p.Name, p.Value, p.SE))
			}
			name := f.Model
			if f.Model == mt.Best {
				name += " (best by AIC)"
			}
			h.rowCells(name, strings.Join(ps, ", "), fmt.Sprintf("%.1f", f.LogLikelihood), fmt.Sprintf("%.1f", f.AIC),
				fmtMS(f.P99), fmt.Sprintf("%+.1f%%", 100*f.RelativeError(mt.EmpiricalP99)))
		}
		h.rowCells("data (empirical)", "", "", "", fmtMS(mt.EmpiricalP99), "")
		h.tableEnd()
		if hl := mt.Hill; hl != nil {
			h.p("note", fmt.Sprintf("Hill estimator over the largest %d values (above %s ms): α = %.3g ± %.2g. "+
				"α < 2 means infinite variance (mean and standard deviation do not settle), α < 1 an infinite mean.",
				hl.K, fmtMS(hl.Threshold), hl.Alpha, hl.SE))
		}
	}
	h.p("note", "Maximum-likelihood fits over all samples (values in ms); the lowest AIC explains the data best. "+
		"An exponential model with the data's mean understates the P99 of a heavy tail. A model's curve is cut where it "+
		"runs more than ten times above the data.")
	return h.html()
}

func sessionsHTML(s *Sessions) template.HTML {
	var h hb
	h.tableStart("", "value")
	h.rowCells("sessions", fmt.Sprint(s.Count))
	h.rowCells("completed", fmt.Sprintf("%s (%d)", pct(s.CompletionRate()), s.Completed))
	h.rowCells("interrupted", fmt.Sprintf("%s (%d)", pct(s.InterruptionRate()), s.Interrupted))
	h.rowCells("truncated by the end of the run", fmt.Sprint(s.Truncated))
	h.rowCells("first-step completion", fmt.Sprintf("%s (%d of %d)", pct(s.FirstStepCompletionRate()), s.FirstStepsGood, s.FirstSteps))
	limit := "none (only failures interrupt)"
	if s.StepLimit > 0 {
		limit = fmtMS(s.StepLimit) + " ms"
	}
	h.rowCells("step limit", limit)
	h.tableEnd()
	h.p("note", "A session is interrupted at its first step that failed or took longer than the step limit; "+
		"truncated sessions (cut by the end of the run) are left out of the rates.")
	return h.html()
}

func errorsHTML(b *Bench) template.HTML {
	var h hb
	if len(b.Errors) == 0 {
		h.p("note", "No failed requests.")
		return h.html()
	}
	h.tableStart("kind", "count", "example")
	for _, e := range b.Errors {
		h.raw(`<tr>`)
		h.cell("td", "k", e.Kind)
		h.cell("td", "n", fmt.Sprint(e.Count))
		h.cell("td", "ex", e.Example)
		h.raw(`</tr>`)
	}
	h.tableEnd()
	return h.html()
}

func configHTML(b *Bench) template.HTML {
	var h hb
	c := b.Config
	h.tableStart("setting", "value")
	rows := [][2]string{
		{"url", c.URL}, {"model", c.Model}, {"shape", c.Shape}, {"request rate", fmtRate(c.RequestRate)},
		{"burstiness", fmt.Sprint(c.Burstiness)}, {"concurrency", fmt.Sprint(c.Concurrency)},
		{"num prompts", fmt.Sprint(c.NumPrompts)}, {"max tokens", fmt.Sprint(c.MaxTokens)}, {"seed", fmt.Sprint(c.Seed)},
		{"interrupted", fmt.Sprint(c.Interrupted)}, {"percentiles", fmt.Sprint(b.Percentiles)},
		{"confidence", fmt.Sprint(b.Confidence)}, {"goodput SLOs", b.Goodput.String()},
	}
	if !b.Start.IsZero() {
		rows = append(rows, [2]string{"start", b.Start.UTC().Format(time.RFC3339Nano)})
	}
	if c := b.Clock; c != nil {
		rows = append(rows, [2]string{"server clock offset",
			fmt.Sprintf("%+.3f ms ± %.3f ms (server minus generator, best of %d responses; %s)",
				durationMS(c.Offset), durationMS(c.Uncertainty), c.Samples, c.Method)})
	}
	for _, s := range b.Sources {
		rows = append(rows, [2]string{"source", s})
	}
	for _, r := range rows {
		h.raw(`<tr>`)
		h.cell("td", "k", r[0])
		h.cell("td", "mono", r[1])
		h.raw(`</tr>`)
	}
	h.tableEnd()
	return h.html()
}

func sweepPage(s *Sweep) page {
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
	p.Sections = []section{
		{"summary", "Summary", sweepSummaryHTML(s)},
		{"sweep", "Latency against load", sweepCurveHTML(s)},
		{"throughput", "Throughput against load", sweepThroughputHTML(s)},
		{"points", "Points", sweepPointsHTML(s)},
	}
	return p
}

func sweepSummaryHTML(s *Sweep) template.HTML {
	var h hb
	h.raw(`<div class="cards">`)
	card := func(label, value string) {
		h.f(`<div class="card"><div class="cv">%s</div><div class="cl">%s</div></div>`, esc(value), esc(label))
	}
	card("knee (P99 slope > "+fmt.Sprintf("%g", s.KneeThreshold)+" ms per req/s)", s.kneeText(s.Knee))
	card("knee (max distance below the chord)", s.kneeText(s.KneeRobust))
	if s.SLO != nil {
		v := "not met"
		if s.MaxRPSUnderSLO != nil {
			v = fmt.Sprintf("%.2f req/s", *s.MaxRPSUnderSLO)
		}
		card("max RPS under "+s.SLO.String(), v)
	}
	h.raw(`</div>`)
	h.p("note", "The slope rule is the article's: the first point where the P99 end-to-end latency grows by more than the "+
		"threshold per extra request per second served. The second method (Kneedle) takes the point furthest below the "+
		"chord of the curve on normalised axes; it needs no threshold and ignores a single noisy step.")
	return h.html()
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

func sweepCurveHTML(s *Sweep) template.HTML {
	var h hb
	if len(s.Points) == 0 {
		h.p("note", "No points.")
		return h.html()
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
	h.raw(c.render())
	return h.html()
}

func sweepThroughputHTML(s *Sweep) template.HTML {
	var h hb
	if len(s.Points) == 0 {
		return h.html()
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
	h.raw(chart{Title: "Throughput against load", XLabel: label, YLabel: "req/s", YFromZero: true, Series: ss}.render())
	return h.html()
}

func sweepPointsHTML(s *Sweep) template.HTML {
	var h hb
	h.tableStart(s.Axis, "achieved req/s", "completed", "failed", "p50 e2el", "p95 e2el", "p99 e2el", "p99 ttft", "goodput")
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
		g := "-"
		if b.GoodputRate != nil {
			g = fmt.Sprintf("%.2f", *b.GoodputRate)
		}
		h.rowCells(x, fmt.Sprintf("%.2f", p.AchievedRPS), fmt.Sprint(b.Completed), fmt.Sprint(b.Failed),
			q(MetricE2EL, 0.5), q(MetricE2EL, 0.95), q(MetricE2EL, 0.99), q(MetricTTFT, 0.99), g)
	}
	h.tableEnd()
	if len(s.Probes) > 0 {
		h.f(`<h3>%s</h3>`, esc("Bisection probes"))
		h.tableStart("rate", "meets the SLO")
		for _, p := range s.Probes {
			h.rowCells(fmt.Sprintf("%.2f", p.Rate), fmt.Sprint(p.Meets))
		}
		h.tableEnd()
	}
	h.p("note", "Latencies in ms, from each request's intended send time.")
	return h.html()
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2937; background: #f8fafc; margin: 0; }
header { background: #0f172a; color: #f8fafc; padding: 18px 28px; }
header h1 { margin: 0 0 4px; font-size: 20px; font-weight: 600; }
header .sub span { display: inline-block; margin-right: 14px; color: #cbd5e1; }
nav { padding: 8px 28px; background: #e2e8f0; font-size: 13px; }
nav a { margin-right: 14px; color: #1e3a8a; text-decoration: none; }
main { max-width: 1040px; margin: 0 auto; padding: 8px 28px 40px; }
section { background: #fff; border: 1px solid #e2e8f0; border-radius: 8px; padding: 14px 18px; margin: 16px 0; }
h2 { font-size: 17px; margin: 0 0 10px; }
h3 { font-size: 15px; margin: 14px 0 4px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin-bottom: 12px; }
.card { background: #f1f5f9; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.cv { font-size: 18px; font-weight: 600; }
.cl { font-size: 12px; color: #64748b; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; font-size: 13px; }
th, td { padding: 4px 8px; border-bottom: 1px solid #e2e8f0; vertical-align: top; }
th { text-align: right; color: #475569; font-weight: 600; background: #f8fafc; }
th:first-child, td.k { text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.ex, td.mono { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; text-align: left; word-break: break-all; }
.ci { color: #64748b; font-size: 11px; }
.note { color: #64748b; font-size: 12px; }
.verdict { background: #fef9c3; border-left: 4px solid #ca8a04; padding: 6px 10px; }
svg.chart { width: 100%; height: auto; display: block; margin: 6px 0 10px; }
svg .grid { stroke: #e5e7eb; stroke-width: 1; }
svg .frame { fill: none; stroke: #94a3b8; stroke-width: 1; }
svg text { font-family: system-ui, sans-serif; fill: #334155; }
svg .ct { font-size: 14px; font-weight: 600; }
svg .xt { font-size: 11px; text-anchor: middle; }
svg .yt { font-size: 11px; text-anchor: end; }
svg .xl, svg .yl { font-size: 12px; text-anchor: middle; fill: #475569; }
svg .lg { font-size: 12px; }
svg .ref { font-size: 11px; font-weight: 600; }
</style>
</head>
<body>
<header><h1>{{.Title}}</h1><div class="sub">{{range .Subtitle}}<span>{{.}}</span>{{end}}</div></header>
<nav>{{range .Sections}}<a href="#{{.ID}}">{{.Title}}</a>{{end}}</nav>
<main>
{{range .Sections}}<section id="{{.ID}}"><h2>{{.Title}}</h2>
{{.Body}}
</section>
{{end}}</main>
</body>
</html>
`))
