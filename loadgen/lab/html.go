package lab

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
)

var page = template.Must(template.New("lab").Funcs(template.FuncMap{
	"p": func(b *report.Bench, m string, q float64) string {
		if b == nil {
			return ""
		}
		return fmtPct(pct(b, m, q))
	},
	"claim": ClaimOf,
	"class": verdictClass,
	"chart": chart,
	"d": func(b *report.Bench) string {
		if b == nil {
			return ""
		}
		return b.Duration.Round(time.Millisecond).String()
	},
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"/><title>ragtail lab</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;font-size:.9em}th{background:#f4f4f4}.v{font-weight:bold}.reproduced{background:#d7f5d7}.opposite{background:#f8d0d0}.notreproduced{background:#fbeec0}.notrun{background:#e4e4e4}.underpowered{background:#dde6f6}</style>
</head><body><h1>ragtail lab</h1>
<h2>Summary</h2>
<table><tr><th>experiment</th><th>verdict</th><th>article claim</th><th>measured</th></tr>
{{range .}}<tr><td><a href="#{{.Experiment}}">{{.Experiment}}</a></td><td class="v {{class .Verdict.Outcome}}">{{.Verdict.Outcome}}</td><td>{{claim .Experiment}}</td><td>{{.Verdict.Why}}</td></tr>
{{end}}</table>
{{range .}}<h2 id="{{.Experiment}}">{{.Experiment}} — {{.Title}}</h2>
<p>{{.Setup}}</p>
<p>rule (fixed before the run): {{.Rule}}</p>
{{chart .}}
<table><tr><th>metric</th><th>article claim</th><th>measured (95% CI)</th></tr>
{{range .Rows}}<tr><td>{{.Metric}}</td><td>{{.Claim}}</td><td>{{.Measured}}</td></tr>
{{end}}</table>
<p class="v {{class .Verdict.Outcome}}">verdict: {{.Verdict.Outcome}} — {{.Verdict.Why}}</p>
{{if .Variants}}<table><tr><th>variant</th><th>completed</th><th>failed</th><th>window</th><th>E2EL P50</th><th>E2EL P99</th></tr>
{{range .Variants}}<tr><td>{{.Name}}</td><td>{{if .Bench}}{{.Bench.Completed}}{{end}}</td><td>{{if .Bench}}{{.Bench.Failed}}{{end}}</td><td>{{d .Bench}}</td><td>{{p .Bench "e2el" 50}}</td><td>{{p .Bench "e2el" 99}}</td></tr>
{{end}}</table>{{end}}
{{end}}</body></html>
`))

// WriteHTML writes one self-contained HTML page (no script, no network) with the tables of
// results.
func WriteHTML(w io.Writer, results []*Result) error {
	if err := page.Execute(w, results); err != nil {
		return fmt.Errorf("render lab html: %w", err)
	}
	return nil
}

// verdictClass is the CSS class that colours an outcome.
func verdictClass(outcome string) string {
	return strings.ReplaceAll(outcome, " ", "")
}

// chart draws each variant's end-to-end P50 and P99 with their 95% intervals as horizontal
// bars on one linear scale (inline SVG, no script).
func chart(r *Result) template.HTML {
	type bar struct {
		name     string
		p50, p99 report.PercentileStat
	}
	var bars []bar
	var top time.Duration
	for _, v := range r.Variants {
		if v.Bench == nil {
			continue
		}
		b := bar{v.Name, pct(v.Bench, report.MetricE2EL, 50), pct(v.Bench, report.MetricE2EL, 99)}
		top = max(top, b.p99.Value, b.p99.Hi)
		bars = append(bars, b)
	}
	if len(bars) == 0 || top <= 0 {
		return ""
	}
	const left, width, rowH = 220, 480, 22
	x := func(d time.Duration) float64 { return left + width*float64(d)/float64(top) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-size="11">`, left+width+80, rowH*len(bars)+24)
	for i, b := range bars {
		y := float64(rowH*i + 4)
		fmt.Fprintf(&sb, `<text x="0" y="%.0f">%s</text>`, y+12, template.HTMLEscapeString(b.name))
		fmt.Fprintf(&sb, `<rect x="%d" y="%.0f" width="%.1f" height="14" fill="#9cc3e6"/>`, left, y, x(b.p99.Value)-left)
		fmt.Fprintf(&sb, `<rect x="%d" y="%.0f" width="%.1f" height="14" fill="#2f6fa8"/>`, left, y, x(b.p50.Value)-left)
		if b.p99.HasCI {
			fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#000"/>`, x(b.p99.Lo), x(b.p99.Hi), y+7, y+7)
		}
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.0f">%s ms</text>`, x(max(b.p99.Value, b.p99.Hi))+4, y+12, msStr(b.p99.Value))
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d">E2EL P50 (dark), P99 (light) with its 95%% interval; scale 0 to %s ms</text></svg>`, left, rowH*len(bars)+18, msStr(top))
	return template.HTML(sb.String()) //nolint:gosec // every string in it is escaped or a number
}
