package lab

import (
	"fmt"
	"html/template"
	"io"
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
	"d": func(b *report.Bench) string {
		if b == nil {
			return ""
		}
		return b.Duration.Round(time.Millisecond).String()
	},
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"/><title>ragtail lab</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;font-size:.9em}th{background:#f4f4f4}.v{font-weight:bold}</style>
</head><body><h1>ragtail lab</h1>
{{range .}}<h2>{{.Experiment}} — {{.Title}}</h2>
<p>{{.Setup}}</p>
<table><tr><th>metric</th><th>article claim</th><th>measured (95% CI)</th></tr>
{{range .Rows}}<tr><td>{{.Metric}}</td><td>{{.Claim}}</td><td>{{.Measured}}</td></tr>
{{end}}</table>
<p class="v">verdict: {{.Verdict.Outcome}} — {{.Verdict.Why}}</p>
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
