package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestHTMLEscapesUserStrings puts markup in every string a result file carries from users
// (model, dataset, command line, shape, error kinds and messages, trace and session ids,
// stage and series names, labels, sources, compared file names) and checks that the page
// shows it as text: well-formed, no element of it, the escaped text present.
func TestHTMLEscapesUserStrings(t *testing.T) {
	t.Parallel()
	const evil = `<script>alert("x")</script><img src=x onerror=alert(1)>&amp;`
	b := withServerMetrics(Summarize(syntheticResult(12, 200), goldenOptions(t)))
	b.Config.Model, b.Config.Shape = "model"+evil, "shape"+evil
	temp := 0.5
	b.Config = b.Config.WithRequests("data"+evil, false, &temp).WithProvenance("v"+evil, []string{"ragtail", "bench", evil})
	b.Sources = []string{"source" + evil}
	b.Errors = append(b.Errors, ErrorCount{Kind: "kind" + evil, Count: 1, Example: "example" + evil})
	b.Slowest[0].TraceID, b.Slowest[0].Session = "trace"+evil, "session"+evil
	b.Slowest[1].ServerTiming = map[string]float64{"stage" + evil: 1.5}
	b.Stages = append(b.Stages, StageStats{Stage: "stage" + evil, Count: 1})
	b.ServerMetrics.Series[0].Name = "series" + evil
	b.ServerMetrics.Series[0].Labels = map[string]string{"label": "value" + evil}
	c, err := NewComparison([]string{"a" + evil, "b.json"}, []*Bench{b, Summarize(syntheticResult(13, 100), Options{})})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name  string
		doc   Document
		words []string
	}{
		{"bench", b, []string{"model", "shape", "data", "ragtail bench &#39;", "source", "kind", "example", "trace", "session", "stage", "series", "value"}},
		{"comparison", c, []string{"a"}},
	} {
		t.Run(d.name, func(t *testing.T) {
			var page bytes.Buffer
			if err := WriteHTML(&page, d.doc); err != nil {
				t.Fatal(err)
			}
			checkHTML(t, page.Bytes(), b.Config.URL, true)
			s := page.String()
			if strings.Contains(s, "<script") || strings.Contains(s, "<img") {
				t.Fatal("markup from the file reached the page")
			}
			for _, w := range d.words {
				if !strings.Contains(s, w+"&lt;script&gt;") {
					t.Errorf("the page does not show %q followed by the escaped markup", w)
				}
			}
		})
	}
}
