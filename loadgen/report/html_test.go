package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/loadgen"
)

// checkHTML parses the page as XML (the renderer writes well-formed XHTML-style markup) and
// checks that it has every wanted section, draws charts (when wanted), and loads nothing: no script, no
// external element, no URL in any attribute or style, and no http(s):// anywhere but in the
// text of the target's own URL.
func checkHTML(tb testing.TB, page []byte, targetURL string, wantCharts bool, sections ...string) {
	tb.Helper()
	dec := xml.NewDecoder(bytes.NewReader(page))
	dec.Strict = true
	ids := map[string]bool{}
	svgs := 0
	var inStyle bool
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("not well-formed: %v", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "script", "link", "img", "iframe", "object", "embed", "image", "use", "foreignObject":
				tb.Errorf("page has a <%s> element", t.Name.Local)
			case "svg":
				svgs++
			case "style":
				inStyle = true
			}
			for _, a := range t.Attr {
				if t.Name.Local == "a" && a.Name.Local == "href" && debugLinkRE.MatchString(a.Value) &&
					strings.HasPrefix(a.Value, origin(targetURL)+"/debug/") {
					continue // a link the reader follows to the target's debug endpoints; loads nothing
				}
				if a.Name.Local == "id" {
					ids[a.Value] = true
				}
				if strings.Contains(a.Value, "://") || strings.Contains(strings.ToLower(a.Value), "url(") {
					tb.Errorf("attribute %s=%q refers to something outside the page", a.Name.Local, a.Value)
				}
				if a.Name.Local == "href" && !strings.HasPrefix(a.Value, "#") {
					tb.Errorf("link %q leaves the page", a.Value)
				}
			}
		case xml.EndElement:
			if t.Name.Local == "style" {
				inStyle = false
			}
		case xml.CharData:
			if inStyle && (bytes.Contains(t, []byte("url(")) || bytes.Contains(t, []byte("@import"))) {
				tb.Error("the style sheet loads something")
			}
		}
	}
	for _, s := range sections {
		if !ids[s] {
			tb.Errorf("no section %q", s)
		}
	}
	if wantCharts && svgs == 0 {
		tb.Error("no chart")
	}
	rest := debugLinkRE.ReplaceAllString(strings.ReplaceAll(string(page), targetURL, ""), "")
	if strings.Contains(rest, "http://") || strings.Contains(rest, "https://") {
		i := max(strings.Index(rest, "http"), 0)
		tb.Errorf("page refers to the network: ...%s...", rest[max(i-60, 0):min(i+60, len(rest))])
	}
}

// debugLinkRE matches a link of the slowest requests to the target's debug endpoints for one
// trace: the only URL the page may hold besides the target's own.
var debugLinkRE = regexp.MustCompile(`^https?://[^/"<>]+/debug/(traces|profiles)\?trace_id=[0-9a-f]{32}$|` +
	`https?://[^/"<>\s]+/debug/(traces|profiles)\?trace_id=[0-9a-f]{32}"`)

// origin is the scheme and host of a URL.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

func TestHTML(t *testing.T) {
	t.Parallel()
	opts := goldenOptions(t)
	res := syntheticResult(9, 900)
	single := Summarize(res, opts)
	ra, rb := splitBySession(res, 0)
	merged, err := Merge(Summarize(ra, opts), Summarize(rb, opts))
	if err != nil {
		t.Fatal(err)
	}
	benchSections := []string{"summary", "latency-over-time", "percentile-spectrum", "histograms", "stages", "tail",
		"sessions", "errors", "slowest", "config", "token-lengths"}
	tests := []struct {
		name     string
		v        Document
		sections []string
		words    []string
	}{
		{"bench", single, benchSections, []string{"ragtail bench report", "Hill", "P99 E2EL", "fitted quantiles"}},
		{"merged", merged, benchSections, []string{"merged from 2 runs"}},
		{"sweep", testSweep(t), []string{"summary", "sweep", "throughput", "points"}, []string{"knee (slope)", "knee (kneedle)", "SLO e2el:p95:2000"}},
		{"empty bench", Summarize(&loadgen.Result{Start: testStart}, Options{}), benchSections[:6], []string{"No requests"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteHTML(&buf, tt.v); err != nil {
				t.Fatal(err)
			}
			checkHTML(t, buf.Bytes(), res.Config.URL, tt.name != "empty bench", tt.sections...)
			for _, w := range tt.words {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("page lacks %q", w)
				}
			}
		})
	}
	if err := WriteHTML(io.Discard, &File{}); err == nil {
		t.Error("rendered an empty file")
	}
}
