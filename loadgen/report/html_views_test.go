package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestHTMLSettingsAndTokens checks the views of every setting of the run and of output tokens
// per second, and what an old file without them shows.
func TestHTMLSettingsAndTokens(t *testing.T) {
	t.Parallel()
	b := Summarize(syntheticResult(14, 300), goldenOptions(t))
	temp := 0.25
	b.Config = b.Config.WithRequests("sharegpt.json", true, &temp).
		WithProvenance("v9.9.9", []string{"ragtail", "bench", "--api-key", "sk-live-secret", "--seed", "14"})
	page := renderHTML(t, b)
	checkHTML(t, page, b.Config.URL, true, "config", "latency-over-time")
	s := string(page)
	for _, w := range []string{"Output tokens per second", "Requests in flight", "Every setting of the run",
		"<td class=\"mono\">sharegpt.json</td>", "<td class=\"mono\">0.25</td>", "<td class=\"mono\">true</td>",
		"<td class=\"mono\">v9.9.9</td>", "<td class=\"mono\">14</td>", "--api-key xxxxx",
		"<td class=\"mono\">ttft:300,e2el:2000</td>"} {
		if !strings.Contains(s, w) {
			t.Errorf("page lacks %q", w)
		}
	}
	if strings.Contains(s, "sk-live-secret") {
		t.Error("the page shows the API key")
	}

	// A file from before the settings and the per-bin tokens were recorded says so.
	old := Summarize(syntheticResult(14, 300), goldenOptions(t))
	for i := range old.Timeline {
		old.Timeline[i].OutputTokens = 0
	}
	s = string(renderHTML(t, old))
	for _, w := range []string{"<td class=\"mono\">not recorded</td>", "no output tokens per bin"} {
		if !strings.Contains(s, w) {
			t.Errorf("old file's page lacks %q", w)
		}
	}
}

// TestHTMLServerMetricsFromFile renders the server-metrics panel from a server_metrics key
// read from a file, in the shape the bench command writes it.
func TestHTMLServerMetricsFromFile(t *testing.T) {
	t.Parallel()
	b := Summarize(syntheticResult(15, 100), goldenOptions(t))
	var js bytes.Buffer
	if err := WriteJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	doc["server_metrics"] = json.RawMessage(`{"interval_s": 1, "series": [
		{"name": "vllm:num_requests_running", "labels": {"model_name": "llama"}, "points": [[0.5, 2], [1.5, 6], [2.5, 4]]},
		{"name": "DCGM_FI_DEV_FB_USED", "labels": {}, "points": [[0.5, 17000], [1.5, 17250]]},
		{"name": "rag_requests_in_flight", "labels": {}, "points": [[0.5, 3]]}]}`)
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	page := renderHTML(t, f)
	checkHTML(t, page, b.Config.URL, true, "server-metrics")
	s := string(page)
	start := strings.Index(s, `<section id="server-metrics">`)
	end := strings.Index(s[start:], "</section>")
	panel := s[start : start+end]
	for _, w := range []string{`vllm:num_requests_running{model_name=&#34;llama&#34;}</td><td class="n">6</td><td class="n">4</td>`,
		`DCGM_FI_DEV_FB_USED</td><td class="n">17250</td><td class="n">17125</td>`, "rag_requests_in_flight"} {
		if !strings.Contains(panel, w) {
			t.Errorf("panel lacks %q", w)
		}
	}
	// One chart per series with at least two points.
	if n := strings.Count(panel, "<svg"); n != 2 {
		t.Errorf("%d charts, want 2", n)
	}
}

func renderHTML(tb testing.TB, d Document) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, d); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}
