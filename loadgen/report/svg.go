package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// The charts of the HTML report are SVG written here, so the page needs no script and no
// network. The output is well-formed XML.

// palette holds the series colours, chosen to stay apart for common colour-vision deficiencies.
var palette = []string{"#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#64748b"}

type seriesMode int

const (
	modeLine seriesMode = iota
	modeDots
	modeLineDots
	modeBars
	modeStep
)

type pt struct {
	X, Y float64
	X2   float64 // right edge of a bar (modeBars)
}

type series struct {
	Name  string
	Color string
	Mode  seriesMode
	Dash  bool
	Pts   []pt
}

type refLine struct {
	At    float64
	Label string
	Color string
}

type chart struct {
	Title          string
	Subtitle       string // a smaller line under the title, for a chart without a legend
	XLabel, YLabel string
	XLog, YLog     bool
	W, H           float64
	Series         []series
	VLines, HLines []refLine
	// XTicks, when set, replaces the automatic ticks of the x axis (value -> label).
	XTicks []tick
	// YFromZero starts a linear y axis at zero.
	YFromZero bool
}

type tick struct {
	V     float64
	Label string
}

const (
	padL, padR, padT, padB = 64.0, 16.0, 44.0, 46.0
)

func esc(s string) string { return html.EscapeString(s) }

// num formats a coordinate compactly.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// tickLabel formats an axis value compactly: 0.5, 12, 1500, 2e+04.
func tickLabel(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e5 || a < 1e-3:
		// 1e+06 -> 1e6, 2.5e-04 -> 2.5e-4
		s := strconv.FormatFloat(v, 'g', 2, 64)
		s = strings.Replace(s, "e+0", "e", 1)
		s = strings.Replace(s, "e+", "e", 1)
		return strings.Replace(s, "e-0", "e-", 1)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

type axis struct {
	lo, hi float64 // data range (log10 when log)
	log    bool
	pixLo  float64
	pixHi  float64
	ticks  []tick
}

func (a *axis) pos(v float64) float64 {
	if a.log {
		if v <= 0 {
			return math.NaN()
		}
		v = math.Log10(v)
	}
	if a.hi == a.lo {
		return (a.pixLo + a.pixHi) / 2
	}
	return a.pixLo + (v-a.lo)/(a.hi-a.lo)*(a.pixHi-a.pixLo)
}

// newAxis builds an axis over the values (non-positive ones are ignored on a log axis).
func newAxis(vals []float64, logScale, fromZero bool, pixLo, pixHi float64) *axis {
	a := &axis{log: logScale, pixLo: pixLo, pixHi: pixHi}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) || (logScale && v <= 0) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
		if logScale {
			lo, hi = 1, 10
		}
	}
	if logScale {
		// A snug range with a little room, ticks at 1, 2 and 5 times powers of ten when the
		// range spans few decades, at powers of ten otherwise.
		l, h := math.Log10(lo), math.Log10(hi)
		if h-l < 0.3 {
			mid := (h + l) / 2
			l, h = mid-0.15, mid+0.15
		}
		pad := 0.03 * (h - l)
		a.lo, a.hi = l-pad, h+pad
		mults := []float64{1}
		if h-l <= 3 {
			mults = []float64{1, 2, 5}
		}
		for e := math.Floor(a.lo); e <= math.Ceil(a.hi) && len(a.ticks) < 60; e++ {
			for _, m := range mults {
				v := m * math.Pow(10, e)
				if lv := math.Log10(v); lv >= a.lo && lv <= a.hi {
					a.ticks = append(a.ticks, tick{v, tickLabel(v)})
				}
			}
		}
		if len(a.ticks) < 2 {
			for _, lv := range []float64{l, h} {
				v := roundTo(math.Pow(10, lv), max(0, 2-int(math.Floor(lv))))
				a.ticks = append(a.ticks, tick{v, tickLabel(v)})
			}
		}
		return a
	}
	if fromZero && lo > 0 {
		lo = 0
	}
	if hi == lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	a.lo = math.Floor(lo/step) * step
	a.hi = math.Ceil(hi/step) * step
	// Count the ticks rather than add steps until hi: at extreme magnitudes v += step may not
	// move v at all.
	n := min(int(math.Round((a.hi-a.lo)/step)), 20)
	for i := 0; i <= n; i++ {
		v := a.lo + float64(i)*step
		a.ticks = append(a.ticks, tick{v, tickLabel(roundTo(v, 9))})
	}
	return a
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// render draws the chart as an SVG element.
func (c chart) render() template.HTML {
	if c.W == 0 {
		c.W = 760
	}
	if c.H == 0 {
		c.H = 320
	}
	var xs, ys []float64
	for _, s := range c.Series {
		for _, p := range s.Pts {
			xs = append(xs, p.X)
			if s.Mode == modeBars {
				xs = append(xs, p.X2)
			}
			ys = append(ys, p.Y)
		}
	}
	for _, l := range c.VLines {
		xs = append(xs, l.At)
	}
	for _, l := range c.HLines {
		ys = append(ys, l.At)
	}
	for _, t := range c.XTicks {
		xs = append(xs, t.V)
	}
	x := newAxis(xs, c.XLog, false, padL, c.W-padR)
	if len(c.XTicks) > 0 {
		x.ticks = c.XTicks
	}
	y := newAxis(ys, c.YLog, c.YFromZero, c.H-padB, padT)

	g := newSVG(c.W, c.H, c.Title)
	g.text(padL, 18, "ct", c.Title)
	if c.Subtitle != "" {
		g.text(padL, 34, "lg", c.Subtitle)
	}
	c.drawGrid(g, x, y)
	for i, s := range c.Series {
		c.drawSeries(g, x, y, s, seriesColor(s, i))
	}
	c.drawRefLines(g, x, y)
	c.drawLegend(g)
	return g.html()
}

func seriesColor(s series, i int) string {
	if s.Color != "" {
		return s.Color
	}
	return palette[i%len(palette)]
}

// drawGrid draws the grid lines, tick labels, frame and axis labels.
func (c chart) drawGrid(g *svgBuilder, x, y *axis) {
	for _, t := range y.ticks {
		py := y.pos(t.V)
		if math.IsNaN(py) || py < padT-0.5 || py > c.H-padB+0.5 {
			continue
		}
		g.line(padL, py, c.W-padR, py, attr{"class", "grid"})
		g.text(padL-6, py+4, "yt", t.Label)
	}
	for _, t := range x.ticks {
		px := x.pos(t.V)
		if math.IsNaN(px) || px < padL-0.5 || px > c.W-padR+0.5 {
			continue
		}
		g.line(px, padT, px, c.H-padB, attr{"class", "grid"})
		g.text(px, c.H-padB+16, "xt", t.Label)
	}
	g.rect(padL, padT, c.W-padL-padR, c.H-padT-padB, attr{"class", "frame"})
	g.text((padL+c.W-padR)/2, c.H-8, "xl", c.XLabel)
	mid := num((padT + c.H - padB) / 2)
	g.text(14, (padT+c.H-padB)/2, "yl", c.YLabel, attr{"transform", "rotate(-90 14 " + mid + ")"})
}

// drawSeries draws one series as bars, or as a path with optional dots.
func (c chart) drawSeries(g *svgBuilder, x, y *axis, s series, color string) {
	if s.Mode == modeBars {
		y0 := y.pos(math.Max(y.lo, 0))
		if c.YLog {
			y0 = c.H - padB
		}
		for _, p := range s.Pts {
			x0, x1, py := x.pos(p.X), x.pos(p.X2), y.pos(p.Y)
			if math.IsNaN(x0) || math.IsNaN(x1) || math.IsNaN(py) {
				continue
			}
			g.rect(x0, py, math.Max(x1-x0-0.5, 0.5), math.Max(y0-py, 0), attr{"fill", color}, attr{"fill-opacity", "0.75"})
		}
		return
	}
	var path strings.Builder
	pen := false
	for _, p := range s.Pts {
		px, py := x.pos(p.X), y.pos(p.Y)
		if math.IsNaN(px) || math.IsNaN(py) {
			pen = false
			continue
		}
		switch {
		case !pen:
			fmt.Fprintf(&path, "M%s %s", num(px), num(py))
		case s.Mode == modeStep:
			fmt.Fprintf(&path, "H%s V%s", num(px), num(py))
		default:
			fmt.Fprintf(&path, "L%s %s", num(px), num(py))
		}
		pen = true
		if s.Mode == modeDots || s.Mode == modeLineDots {
			g.dot(px, py, 2.6, color, s.Name+": "+tickLabel(roundTo(p.X, 3))+", "+tickLabel(roundTo(p.Y, 3)))
		}
	}
	if s.Mode != modeDots && path.Len() > 0 {
		attrs := []attr{{"d", path.String()}, {"fill", "none"}, {"stroke", color}, {"stroke-width", "1.8"}}
		if s.Dash {
			attrs = append(attrs, attr{"stroke-dasharray", "6 4"})
		}
		g.elem("path", attrs...)
	}
}

// drawRefLines draws the dashed reference lines with their labels.
func (c chart) drawRefLines(g *svgBuilder, x, y *axis) {
	for i, l := range c.VLines {
		px := x.pos(l.At)
		if math.IsNaN(px) {
			continue
		}
		g.line(px, padT, px, c.H-padB, attr{"stroke", l.Color}, attr{"stroke-width", "1.5"}, attr{"stroke-dasharray", "4 3"})
		// Labels step down so that two close lines do not print over each other; one too close
		// to the right edge goes on the left of its line.
		anchor, lx := "start", px+4
		if px > c.W-padR-120 {
			anchor, lx = "end", px-4
		}
		g.text(lx, padT+14+15*float64(i), "ref", l.Label, attr{"fill", l.Color}, attr{"text-anchor", anchor})
	}
	for _, l := range c.HLines {
		py := y.pos(l.At)
		if math.IsNaN(py) {
			continue
		}
		g.line(padL, py, c.W-padR, py, attr{"stroke", l.Color}, attr{"stroke-width", "1.5"}, attr{"stroke-dasharray", "4 3"})
		g.text(c.W-padR-4, py-4, "ref", l.Label, attr{"fill", l.Color}, attr{"text-anchor", "end"})
	}
}

// drawLegend writes the named series right-aligned under the title.
func (c chart) drawLegend(g *svgBuilder) {
	lx := c.W - padR
	for i := len(c.Series) - 1; i >= 0; i-- {
		s := c.Series[i]
		if s.Name == "" {
			continue
		}
		lx -= 7*float64(len([]rune(s.Name))) + 22
		g.rect(lx, 25, 12, 10, attr{"fill", seriesColor(s, i)})
		g.text(lx+16, 34, "lg", s.Name)
	}
}

// stageBar is one row of the per-stage chart, in ms.
type stageBar struct {
	Name          string
	P50, P99, Avg float64
}

// stageBars draws each stage's P50 and P99 as overlaid bars with a tick at its mean.
func stageBars(rows []stageBar) template.HTML {
	top := 0.0
	for _, r := range rows {
		top = math.Max(top, math.Max(r.P99, r.Avg))
	}
	if top <= 0 {
		top = 1
	}
	const w, rowH, left, right = 760.0, 34.0, 110.0, 210.0
	g := newSVG(w, 40+rowH*float64(len(rows)), "per-stage latency")
	g.rect(left, 10, 12, 10, attr{"fill", palette[0]})
	g.text(left+16, 19, "lg", "P50")
	g.rect(left+60, 10, 12, 10, attr{"fill", palette[0]}, attr{"fill-opacity", "0.35"})
	g.text(left+76, 19, "lg", "P99")
	g.text(left+120, 19, "lg", "| mean")
	scale := (w - left - right) / top
	for i, r := range rows {
		y := 32 + rowH*float64(i)
		g.text(left-8, y+15, "yt", r.Name)
		g.rect(left, y+2, math.Max(r.P99*scale, 1), 20, attr{"fill", palette[0]}, attr{"fill-opacity", "0.35"})
		g.rect(left, y+2, math.Max(r.P50*scale, 1), 20, attr{"fill", palette[0]})
		g.line(left+r.Avg*scale, y, left+r.Avg*scale, y+24, attr{"stroke", "#111"}, attr{"stroke-width", "2"})
		g.text(w-right+10, y+16, "lg", fmt.Sprintf("p50 %.2f · p99 %.2f ms", r.P50, r.P99))
	}
	return g.html()
}

// attr is one attribute of an SVG element; its value is escaped when written.
type attr struct{ k, v string }

// svgBuilder writes one SVG element and its children. Every text and attribute value it is
// given is escaped, so what html returns is safe to put in a page.
type svgBuilder struct{ b strings.Builder }

func newSVG(w, h float64, label string) *svgBuilder {
	g := &svgBuilder{}
	g.open("svg", attr{"class", "chart"}, attr{"viewBox", "0 0 " + num(w) + " " + num(h)}, attr{"role", "img"},
		attr{"aria-label", label})
	return g
}

func (g *svgBuilder) open(name string, attrs ...attr) {
	g.start(name, attrs)
	g.b.WriteString(">")
}

func (g *svgBuilder) start(name string, attrs []attr) {
	g.b.WriteString("<" + name)
	for _, a := range attrs {
		g.b.WriteString(" " + a.k + `="` + esc(a.v) + `"`)
	}
}

// elem writes an empty element.
func (g *svgBuilder) elem(name string, attrs ...attr) {
	g.start(name, attrs)
	g.b.WriteString("/>")
}

func (g *svgBuilder) line(x1, y1, x2, y2 float64, attrs ...attr) {
	g.elem("line", append([]attr{{"x1", num(x1)}, {"y1", num(y1)}, {"x2", num(x2)}, {"y2", num(y2)}}, attrs...)...)
}

func (g *svgBuilder) rect(x, y, w, h float64, attrs ...attr) {
	g.elem("rect", append([]attr{{"x", num(x)}, {"y", num(y)}, {"width", num(w)}, {"height", num(h)}}, attrs...)...)
}

// text writes a text element of a CSS class.
func (g *svgBuilder) text(x, y float64, class, s string, attrs ...attr) {
	g.open("text", append([]attr{{"x", num(x)}, {"y", num(y)}, {"class", class}}, attrs...)...)
	g.b.WriteString(esc(s) + "</text>")
}

// dot writes a circle with a tooltip.
func (g *svgBuilder) dot(x, y, r float64, color, title string) {
	g.open("circle", attr{"cx", num(x)}, attr{"cy", num(y)}, attr{"r", num(r)}, attr{"fill", color})
	g.b.WriteString("<title>" + esc(title) + "</title></circle>")
}

// html closes the SVG element and returns it.
func (g *svgBuilder) html() template.HTML {
	g.b.WriteString("</svg>")
	return template.HTML(g.b.String()) //nolint:gosec // every text and attribute value is escaped
}
