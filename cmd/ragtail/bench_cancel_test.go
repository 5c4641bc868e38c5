package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
)

// cancelRun runs bench with --cancel against url and returns its JSON, its detailed records,
// its text report and its HTML page.
func cancelRun(t *testing.T, url string, extra ...string) (r map[string]any, b *report.Bench, recs []loadgen.Record, text, page string) {
	t.Helper()
	dir := t.TempDir()
	out, detailed, html := filepath.Join(dir, "r.json"), filepath.Join(dir, "d.jsonl"), filepath.Join(dir, "r.html")
	var stdout, stderr bytes.Buffer
	args := append([]string{"bench", "--url", url, "--quiet", "--json", out, "--save-detailed", detailed, "--html", html,
		"--server-metrics-interval", "50ms"}, extra...)
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	f, err := os.Open(detailed)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	sc.Scan() // the header line
	for sc.Scan() {
		var rec loadgen.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("detailed line: %v", err)
		}
		recs = append(recs, rec)
	}
	h, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	jf, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = jf.Close() }()
	doc, err := report.Decode(jf)
	if err != nil || doc.Bench == nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	return readJSON(t, out), doc.Bench, recs, stdout.String(), string(h)
}

// TestBenchCancelLLMSim: --cancel abandons the seeded choice of requests after 5 tokens of
// 512, through either HTTP client; the result counts them apart, and llm-sim's metrics show
// it aborted exactly those and runs nothing afterwards.
func TestBenchCancelLLMSim(t *testing.T) {
	const n, seed, after = 24, 7, 5 // requests, --seed, tokens:N
	spec := "fraction=0.3,after=tokens:5"
	c, err := loadgen.ParseCancellations(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]bool{}
	for i := range n {
		if c.Chosen(seed, i, 0) {
			want[i] = true
		}
	}
	if len(want) == 0 || len(want) == n {
		t.Fatalf("seed %d chose %d of %d: pick a seed that cancels some and not all", seed, len(want), n)
	}
	for _, hc := range []string{"h1", "net/http"} {
		t.Run(strings.ReplaceAll(hc, "/", "_"), func(t *testing.T) {
			srv := startLLMSim(t, tinyProfile(t))
			r, b, recs, text, page := cancelRun(t, srv.URL+"/v1/chat/completions", "--http-client", hc, "--seed", "7",
				"--num-prompts", "24", "--request-rate", "40", "--max-tokens", "512", "--dataset", "short", "--cancel", spec)

			// The file holds the records as they ended; in an open loop the workload's items
			// are in order of their intended send times.
			slices.SortFunc(recs, func(a, b loadgen.Record) int { return cmp.Compare(a.Intended, b.Intended) })
			got := map[int]bool{}
			for item, rec := range recs {
				rec.Index = item
				if rec.CancelPlanned != want[item] {
					t.Errorf("item %d: cancel_planned %v, want %v", item, rec.CancelPlanned, want[item])
				}
				if !rec.Cancelled {
					if rec.OutputTokens != 512 || rec.ErrKind != "" {
						t.Errorf("request %d not cancelled: %d tokens, error %q; want all 512", rec.Index, rec.OutputTokens, rec.Err)
					}
					continue
				}
				got[rec.Index] = true
				toks := 0
				for _, k := range rec.Chunks {
					toks += k.Tokens
				}
				if toks < after || toks >= 512 || rec.ErrKind != "" || rec.CancelledAt < rec.FirstToken || rec.OK() {
					t.Errorf("cancelled request %d: %d tokens, error %q, cancelled at %v after first token %v",
						rec.Index, toks, rec.Err, rec.CancelledAt, rec.FirstToken)
				}
			}
			if len(got) != len(want) {
				t.Errorf("cancelled %v, want the seeded choice %v", got, want)
			}

			if r["cancelled"] != float64(len(want)) || r["completed"] != float64(n-len(want)) || r["failed"] != 0.0 {
				t.Errorf("cancelled %v, completed %v, failed %v; want %d, %d, 0", r["cancelled"], r["completed"], r["failed"], len(want), n-len(want))
			}
			if cfg, _ := r["config"].(map[string]any); cfg["cancel"] != spec {
				t.Errorf("config.cancel = %v, want %q", cfg["cancel"], spec)
			}
			cs, _ := r["cancellations"].(map[string]any)
			if cs["requested"] != float64(len(want)) || cs["done"] != float64(len(want)) {
				t.Errorf("cancellations %v: want %d requested and done", cs, len(want))
			}
			// The server's own account, as scraped: the abort counter rose by the cancellations
			// and nothing runs or holds KV cache once the run is over.
			if cs["server_aborts"] != float64(len(want)) || cs["server_running_after"] != 0.0 || cs["server_freed"] != true {
				t.Errorf("cancellations %v: want server_aborts %d, server_running_after 0, server_freed true", cs, len(want))
			}
			var aborts []float64
			for _, s := range scrapedSeries(t, r)["vllm:request_success_total"] {
				if labels, _ := s["labels"].(map[string]any); labels["finished_reason"] == "abort" {
					for _, p := range points(s) {
						aborts = append(aborts, p[1])
					}
				}
			}
			if len(aborts) < 2 || aborts[0] != 0 || aborts[len(aborts)-1] != float64(len(want)) {
				t.Errorf("scraped abort counter %v: want 0 rising to %d", aborts, len(want))
			}
			// Out of the latencies but TTFT: E2EL counts only the completed requests.
			for _, k := range []string{"mean_e2el_ms", "mean_ttft_ms"} {
				if r[k] == nil {
					t.Errorf("no %s", k)
				}
			}
			var counts [2]int64
			for i, m := range []string{report.MetricE2EL, report.MetricTTFT} {
				if s, ok := b.Metric(m); ok {
					counts[i] = s.Count
				}
			}
			if counts != [2]int64{n - int64(len(want)), n} {
				t.Errorf("samples of e2el and ttft %v: want %d (the completed requests) and %d (all: the cancelled ones saw their first token)",
					counts, n-len(want), n)
			}
			if b.Cancellations == nil || b.Cancellations.Done != int64(len(want)) {
				t.Errorf("the JSON read back has cancellations %+v, want %d done", b.Cancellations, len(want))
			}
			if !strings.Contains(text, "Cancelled requests") || !strings.Contains(text, "work freed") {
				t.Errorf("text report lacks the cancellations:\n%s", text)
			}
			if !strings.Contains(page, "cancelled (fraction=0.3,after=tokens:5)") || !strings.Contains(page, "server freed cancelled work") {
				t.Error("HTML lacks the cancellation cards")
			}
		})
	}
}

// TestBenchCancelServe: against ragtail serve, requests abandoned 20 ms after their first token
// stop the in-process engine's work: its running sequences are back to 0 by the last scrape
// and it counted every abandonment as an abort.
func TestBenchCancelServe(t *testing.T) {
	addr, _, _ := startServe(t, "--profile", "tiny", "--corpus-docs", "20", "--profiling=false")
	servingMu.Lock()
	m := adminLine.FindStringSubmatch(servingOut[addr].String())
	servingMu.Unlock()
	if m == nil {
		t.Fatal("no admin address in serve's output")
	}
	const spec = "fraction=0.5,after=ttft+20ms"
	r, b, recs, text, _ := cancelRun(t, "http://"+addr+"/v1/chat/completions", "--server-metrics", "http://"+m[1]+"/metrics",
		"--seed", "3", "--num-prompts", "16", "--concurrency", "4", "--max-tokens", "150", "--dataset", "short", "--cancel", spec)
	var planned, cancelled int64
	for _, rec := range recs {
		if rec.CancelPlanned {
			planned++
		}
		if rec.Cancelled {
			cancelled++
			if ttft, _ := rec.TTFT(); rec.CancelledAt-rec.FirstToken < 20*time.Millisecond || ttft <= 0 {
				t.Errorf("request %d cancelled at %v, first token at %v: want 20ms or more after it", rec.Index, rec.CancelledAt, rec.FirstToken)
			}
		}
	}
	for _, rec := range recs {
		if rec.CancelPlanned && !rec.Cancelled {
			t.Logf("planned, not cancelled: %d tokens, first token %v, end %v, status %d, error %s %q", rec.OutputTokens, rec.FirstToken, rec.End, rec.Status, rec.ErrKind, rec.Err)
		}
	}
	if planned == 0 || cancelled != planned || b.Cancellations == nil || b.Cancellations.Done != cancelled {
		t.Fatalf("planned %d, cancelled %d, summary %+v: want every planned request cancelled", planned, cancelled, b.Cancellations)
	}
	cs, _ := r["cancellations"].(map[string]any)
	if cs["server_running_after"] != 0.0 || cs["server_aborts"] != float64(cancelled) || cs["server_freed"] != true {
		t.Errorf("cancellations %v: want the engine to abort %d and run nothing after", cs, cancelled)
	}
	if !strings.Contains(text, "Cancelled requests") {
		t.Errorf("text report:\n%s", text)
	}
}
