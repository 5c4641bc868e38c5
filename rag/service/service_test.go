package service

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/latency"
)

// testService builds the embedded default with no service time anywhere, served by httptest.
func testService(tb testing.TB) (svc *Service, api, admin *httptest.Server) {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Profile = "tiny"
	cfg.CorpusDocs = 20
	none := latency.Law{}
	cfg.ShardLatency, cfg.EmbedLatency, cfg.FetchLatency = []latency.Law{none}, none, none
	svc, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	api, admin = httptest.NewServer(svc.API), httptest.NewServer(svc.Admin)
	tb.Cleanup(func() {
		api.Close()
		admin.Close()
		_ = svc.Close()
	})
	return svc, api, admin
}

func request(tb testing.TB, method, url, body string) (*http.Response, string) {
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
	return resp, string(b)
}

func putConfig(tb testing.TB, admin, body string) RuntimeConfig {
	tb.Helper()
	resp, b := request(tb, http.MethodPut, admin+"/admin/config", body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("PUT /admin/config %s: %d %s", body, resp.StatusCode, b)
	}
	var cfg RuntimeConfig
	if err := json.Unmarshal([]byte(b), &cfg); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// TestRouteFaultRulesFire: a rule on a route (no stage), installed at run time through
// /admin/config, acts on that route only: an abort answers its status, a delay holds the
// response, and a cut ends a streamed answer with an error event after its token count.
func TestRouteFaultRulesFire(t *testing.T) {
	t.Parallel()
	svc, api, admin := testService(t)

	putConfig(t, admin.URL, `{"faults":[{"name":"docs-down","route":"/v1/documents/*","percent":100,"abort":{"status":503}}]}`)
	resp, body := request(t, http.MethodGet, api.URL+"/v1/documents/some/doc#0", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "fault_injected") || !strings.Contains(body, "docs-down") {
		t.Errorf("documents under an abort rule: %d %s, want 503 fault_injected naming the rule", resp.StatusCode, body)
	}
	if resp, _ := request(t, http.MethodGet, api.URL+"/v1/models", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("/v1/models under a documents rule: %d, want 200", resp.StatusCode)
	}
	if st := svc.Runtime.Stats().Faults["docs-down"]; st.Fired != 1 || st.Aborted != 1 {
		t.Errorf("rule stats %+v, want fired and aborted once", st)
	}

	putConfig(t, admin.URL, `{"faults":[{"name":"slow-models","route":"/v1/models","percent":100,"delay":"fixed:150ms"}]}`)
	start := time.Now()
	if resp, _ := request(t, http.MethodGet, api.URL+"/v1/models", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("/v1/models under a delay rule: %d", resp.StatusCode)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("/v1/models took %v under a 150 ms delay rule", took)
	}

	putConfig(t, admin.URL, `{"faults":[{"name":"cut","route":"/v1/chat/completions","percent":100,"cut_after_tokens":3}]}`)
	resp, body = request(t, http.MethodPost, api.URL+"/v1/chat/completions",
		`{"model":"`+svc.Model+`","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"what is a bloom filter?"}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("streamed chat under a cut rule: %d %s", resp.StatusCode, body)
	}
	var contents int
	var sawError bool
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, `"error"`):
			sawError = strings.Contains(line, "cut after 3 tokens")
		case strings.HasPrefix(line, "data: {") && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`):
			contents++
		}
	}
	if !sawError || contents == 0 || contents > 3 {
		t.Errorf("streamed answer under cut_after_tokens 3: %d content chunks, error event %v:\n%s", contents, sawError, body)
	}
	resp, body = request(t, http.MethodPost, api.URL+"/v1/chat/completions",
		`{"model":"`+svc.Model+`","max_tokens":40,"messages":[{"role":"user","content":"what is a bloom filter?"}]}`)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "cut after 3 tokens") {
		t.Errorf("whole answer under a cut rule: %d %s, want 503 naming the cut", resp.StatusCode, body)
	}
}
