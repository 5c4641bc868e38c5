package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ragtail/ragtail/loadgen/lab"
	"github.com/ragtail/ragtail/rag/service"
)

// labService starts the in-process service the lab targets, with defaults from the flags.
func labService(tb testing.TB) (api, admin string) {
	tb.Helper()
	stop, t, err := startLabService(context.Background(), service.DefaultConfig(), newLogger(io.Discard, "error"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = stop() })
	return t.URL, t.AdminURL
}

func do(tb testing.TB, method, url, body string) (int, http.Header, []byte) {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func adminStats(tb testing.TB, admin string) service.RuntimeStats {
	tb.Helper()
	_, _, b := do(tb, http.MethodGet, admin+"/admin/stats", "")
	var s service.RuntimeStats
	if err := json.Unmarshal(b, &s); err != nil {
		tb.Fatalf("stats %s: %v", b, err)
	}
	return s
}

func put(tb testing.TB, admin, body string) {
	tb.Helper()
	if code, _, b := do(tb, http.MethodPut, admin+"/admin/config", body); code != 200 {
		tb.Fatalf("PUT %s: %d %s", body, code, b)
	}
}

func chat(tb testing.TB, api string, maxTokens int) (int, http.Header) {
	tb.Helper()
	code, h, _ := do(tb, http.MethodPost, api+"/v1/chat/completions",
		fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"what is a bloom filter?"}]}`, modelOf(tb, api), maxTokens))
	return code, h
}

func modelOf(tb testing.TB, api string) string {
	tb.Helper()
	_, _, b := do(tb, http.MethodGet, api+"/v1/models", "")
	var m struct{ Data []struct{ ID string } }
	if err := json.Unmarshal(b, &m); err != nil || len(m.Data) == 0 {
		tb.Fatalf("models %s: %v", b, err)
	}
	return m.Data[0].ID
}

func TestRuntimeConfig(t *testing.T) {
	api, admin := labService(t)

	t.Run("validation and versioning", func(t *testing.T) {
		var before service.RuntimeConfig
		_, _, b := do(t, http.MethodGet, admin+"/admin/config", "")
		if err := json.Unmarshal(b, &before); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{`{"top_k":0}`, `{"coupling":"psychic"}`, `{"shards":2,"shard_latency":["fixed:1ms","fixed:1ms","fixed:1ms"]}`,
			`{"admission":{"workers":0}}`, `{"bloom":{"enabled":true,"fp_rate":2}}`, `{"nonsense":1}`, `{"faults":[{"stage":"embed","percent":200,"delay":"fixed:1ms"}]}`,
			`{"llm":{"profile":"nope"}}`, `{"top_k":3,"cache":{"enabled":true,"size":0}}`} {
			code, _, body := do(t, http.MethodPut, admin+"/admin/config", bad)
			if code != 400 || !bytes.Contains(body, []byte(`"message"`)) {
				t.Errorf("PUT %s: %d %s, want 400 with a message", bad, code, body)
			}
		}
		put(t, admin, `{"top_k":7}`)
		var after service.RuntimeConfig
		_, _, b = do(t, http.MethodGet, admin+"/admin/config", "")
		if err := json.Unmarshal(b, &after); err != nil {
			t.Fatal(err)
		}
		if after.Version != before.Version+1 || after.TopK != 7 || after.Coupling != before.Coupling || after.Shards != before.Shards {
			t.Errorf("after a partial PUT: %+v (before %+v): want version+1, top_k 7, the rest kept", after, before)
		}
	})

	t.Run("bloom keeps invalid keys from the store", func(t *testing.T) {
		put(t, admin, `{"bloom":{"enabled":true,"fp_rate":0.001}}`)
		s0 := adminStats(t, admin)
		for i := range 50 {
			if code, _, _ := do(t, http.MethodGet, fmt.Sprintf("%s/v1/documents/nope-%d", api, i), ""); code != 404 {
				t.Fatalf("invalid key: status %d, want 404", code)
			}
		}
		s1 := adminStats(t, admin)
		// With fp rate 0.001, P(any of 50 passes) < 5%; a pass is a real false positive, so
		// allow at most 1 and require most to be blocked.
		if got := s1.Docs.StoreMissingLookups - s0.Docs.StoreMissingLookups; got > 1 {
			t.Errorf("bloom on: %d invalid keys reached the store", got)
		}
		put(t, admin, `{"bloom":{"enabled":false}}`)
		for i := range 20 {
			do(t, http.MethodGet, fmt.Sprintf("%s/v1/documents/gone-%d", api, i), "")
		}
		if got := adminStats(t, admin).Docs.StoreMissingLookups - s1.Docs.StoreMissingLookups; got != 20 {
			t.Errorf("bloom off: %d of 20 invalid keys reached the store, want all", got)
		}
	})

	t.Run("bounded pool rejects with 503 and Retry-After", func(t *testing.T) {
		put(t, admin, `{"admission":{"workers":1,"queue":0,"queue_timeout":"0s","policy":"reject"},"faults":[{"name":"hold","stage":"generate","percent":100,"delay":"fixed:400ms"}]}`)
		defer put(t, admin, `{"admission":{"workers":64,"queue":256,"policy":"reject"},"faults":[]}`)
		var wg sync.WaitGroup
		codes := make([]int, 4)
		retry := make([]string, 4)
		for i := range codes {
			wg.Go(func() {
				c, h := chat(t, api, 2)
				codes[i], retry[i] = c, h.Get("Retry-After")
			})
		}
		wg.Wait()
		var ok, shed int
		for i, c := range codes {
			switch c {
			case 200:
				ok++
			case 503:
				shed++
				if retry[i] == "" {
					t.Errorf("503 without Retry-After")
				}
			}
		}
		if ok < 1 || shed < 1 {
			t.Errorf("codes %v: want at least one served and one shed", codes)
		}
	})

	t.Run("fault rule at 10 percent", func(t *testing.T) {
		put(t, admin, `{"coupling":"fanout","shard_latency":["none"],"llm":{"profile":"tiny"},"faults":[{"name":"ten","stage":"embed","percent":10,"delay":"fixed:1us"}]}`)
		defer put(t, admin, `{"faults":[]}`)
		const n = 200
		for range n {
			if code, _ := chat(t, api, 1); code != 200 {
				t.Fatalf("status %d", code)
			}
		}
		st := adminStats(t, admin).Faults["ten"]
		// Binomial(200, 0.1): sd = sqrt(200*0.1*0.9) = 4.24; 4 sd either side of 20 gives
		// [3, 37], a false-failure chance below 1e-4.
		if st.Evaluated != n || st.Fired < 3 || st.Fired > 37 {
			t.Errorf("rule evaluated %d, fired %d of %d: want about 10%%", st.Evaluated, st.Fired, n)
		}
	})
	t.Run("contiguous holds fewer sequences than paged", func(t *testing.T) {
		peak := map[string]int{}
		// Contiguous first: each PUT that changes the mode builds a fresh engine, whose MaxRunning
		// counts from zero. top_k 1 keeps prompts short (~20 blocks) next to max_tokens 400, so
		// a contiguous reservation (~45 blocks) fits five sequences in 256 blocks where paged
		// allocation starts all eight the profile allows.
		for _, mode := range []string{"contiguous", "paged"} {
			put(t, admin, fmt.Sprintf(`{"top_k":1,"coupling":"fanout","admission":{"workers":64,"queue":256},"llm":{"profile":"tiny","kv_alloc":%q}}`, mode))
			var reqs sync.WaitGroup
			for range 12 {
				reqs.Go(func() { chat(t, api, 400) })
			}
			reqs.Wait()
			s := adminStats(t, admin)
			if s.Engine == nil {
				t.Fatal("no engine stats")
			}
			peak[mode] = s.Engine.MaxRunning
		}
		if peak["contiguous"] >= peak["paged"] {
			t.Errorf("peak running: contiguous %d, paged %d: want fewer with contiguous", peak["contiguous"], peak["paged"])
		}
	})
}

func TestLabCoupling(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for ~20 s")
	}
	out := filepath.Join(t.TempDir(), "c.json")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"lab", "coupling", "--duration", "18s", "--json", out}, &stdout, &stderr); err != nil {
		t.Fatalf("lab coupling: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Schema     string `json:"schema"`
		Experiment string `json:"experiment"`
		Variants   []struct {
			Name  string                     `json:"name"`
			Bench map[string]json.RawMessage `json:"bench"`
		} `json:"variants"`
		Document map[string]any `json:"document"`
		Verdict  struct{ Outcome, Why string }
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Schema != "ragtail.lab/v1" || doc.Experiment != "coupling" || len(doc.Document) == 0 || doc.Verdict.Outcome == "" {
		t.Fatalf("lab JSON shape: %s", b[:min(len(b), 400)])
	}
	p95 := map[string]float64{}
	for _, v := range doc.Variants {
		var x float64
		if err := json.Unmarshal(v.Bench["p95_e2el_ms"], &x); err != nil {
			t.Fatalf("variant %s has no p95_e2el_ms: %v", v.Name, err)
		}
		p95[v.Name] = x
	}
	// The shard laws put sync's retrieval at the sum of four ~150 ms searches and async's at its
	// 100 ms deadline or the first shard: a gap of ~500 ms per request, far beyond the noise.
	if !(p95["sync"] > p95["async"]) || math.IsNaN(p95["sync"]) {
		t.Errorf("P95 E2EL sync %v ms, async %v ms: want sync above async", p95["sync"], p95["async"])
	}
	if !strings.Contains(stdout.String(), "verdict:") {
		t.Errorf("no table printed:\n%s", stdout.String())
	}
}

// TestReportRendersLabResults checks the report command's lab hook: a `lab all --json` file
// renders as the lab's tables with the summary, and as the lab's HTML page.
func TestReportRendersLabResults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lab.json")
	results := []*lab.Result{
		{Experiment: "coupling", Title: "c", Rows: []lab.Row{{Metric: "sync E2EL", Claim: "890 ms", Measured: "1 s"}}, Verdict: lab.Verdict{Outcome: lab.Reproduced, Why: "sync slower"}},
		{Experiment: "knee", Title: "k", Verdict: lab.Verdict{Outcome: lab.NotReproduced, Why: "no knee"}},
	}
	if err := lab.WriteFiles(results, path, ""); err != nil {
		t.Fatal(err)
	}
	htmlOut := filepath.Join(dir, "lab.html")
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"report", path, "--html", htmlOut}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== coupling", "verdict: REPRODUCED — sync slower", "== summary", "knee"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, stdout.String())
		}
	}
	page, err := os.ReadFile(htmlOut)
	if err != nil || !bytes.Contains(page, []byte("<h2>Summary</h2>")) || !bytes.Contains(page, []byte(`id="knee"`)) {
		t.Errorf("html (%v):\n%s", err, page)
	}
}
