package report

import (
	"fmt"
	"html"
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

// render writes the chart as an SVG element.
func (c chart) render() string {
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

	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %s %s" role="img" aria-label="%s">`, num(c.W), num(c.H), esc(c.Title))
	fmt.Fprintf(&b, `<text x="%s" y="18" class="ct">%s</text>`, num(padL), esc(c.Title))
	// Grid and ticks.
	for _, t := range y.ticks {
		py := y.pos(t.V)
		if math.IsNaN(py) || py < padT-0.5 || py > c.H-padB+0.5 {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="grid"/>`, num(padL), num(py), num(c.W-padR), num(py))
		fmt.Fprintf(&b, `<text x="%s" y="%s" class="yt">%s</text>`, num(padL-6), num(py+4), esc(t.Label))
	}
	for _, t := range x.ticks {
		px := x.pos(t.V)
		if math.IsNaN(px) || px < padL-0.5 || px > c.W-padR+0.5 {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="grid"/>`, num(px), num(padT), num(px), num(c.H-padB))
		fmt.Fprintf(&b, `<text x="%s" y="%s" class="xt">%s</text>`, num(px), num(c.H-padB+16), esc(t.Label))
	}
	fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" class="frame"/>`, num(padL), num(padT), num(c.W-padL-padR), num(c.H-padT-padB))
	fmt.Fprintf(&b, `<text x="%s" y="%s" class="xl">%s</text>`, num((padL+c.W-padR)/2), num(c.H-8), esc(c.XLabel))
	fmt.Fprintf(&b, `<text x="14" y="%s" class="yl" transform="rotate(-90 14 %s)">%s</text>`, num((padT+c.H-padB)/2), num((padT+c.H-padB)/2), esc(c.YLabel))

	// Series.
	for i, s := range c.Series {
		color := s.Color
		if color == "" {
			color = palette[i%len(palette)]
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="6 4"`
		}
		switch s.Mode {
		case modeBars:
			y0 := y.pos(math.Max(y.lo, 0))
			if c.YLog {
				y0 = c.H - padB
			}
			for _, p := range s.Pts {
				x0, x1, py := x.pos(p.X), x.pos(p.X2), y.pos(p.Y)
				if math.IsNaN(x0) || math.IsNaN(x1) || math.IsNaN(py) {
					continue
				}
				fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="0.75"/>`,
					num(x0), num(py), num(math.Max(x1-x0-0.5, 0.5)), num(math.Max(y0-py, 0)), color)
			}
		default:
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
					fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.6" fill="%s"><title>%s: %s, %s</title></circle>`,
						num(px), num(py), color, esc(s.Name), esc(tickLabel(roundTo(p.X, 3))), esc(tickLabel(roundTo(p.Y, 3))))
				}
			}
			if s.Mode != modeDots && path.Len() > 0 {
				fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"%s/>`, path.String(), color, dash)
			}
		}
	}
	for i, l := range c.VLines {
		px := x.pos(l.At)
		if math.IsNaN(px) {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="4 3"/>`,
			num(px), num(padT), num(px), num(c.H-padB), l.Color)
		// Labels step down so that two close lines do not print over each other; one too close
		// to the right edge goes on the left of its line.
		anchor, lx := "start", px+4
		if px > c.W-padR-120 {
			anchor, lx = "end", px-4
		}
		fmt.Fprintf(&b, `<text x="%s" y="%s" class="ref" fill="%s" text-anchor="%s">%s</text>`,
			num(lx), num(padT+14+15*float64(i)), l.Color, anchor, esc(l.Label))
	}
	for _, l := range c.HLines {
		py := y.pos(l.At)
		if math.IsNaN(py) {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="4 3"/>`,
			num(padL), num(py), num(c.W-padR), num(py), l.Color)
		fmt.Fprintf(&b, `<text x="%s" y="%s" class="ref" fill="%s" text-anchor="end">%s</text>`, num(c.W-padR-4), num(py-4), l.Color, esc(l.Label))
	}

	// Legend, right-aligned under the title.
	lx := c.W - padR
	for i := len(c.Series) - 1; i >= 0; i-- {
		s := c.Series[i]
		if s.Name == "" {
			continue
		}
		color := s.Color
		if color == "" {
			color = palette[i%len(palette)]
		}
		w := 7*float64(len([]rune(s.Name))) + 22
		lx -= w
		fmt.Fprintf(&b, `<rect x="%s" y="25" width="12" height="10" fill="%s"/>`, num(lx), color)
		fmt.Fprintf(&b, `<text x="%s" y="34" class="lg">%s</text>`, num(lx+16), esc(s.Name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}
