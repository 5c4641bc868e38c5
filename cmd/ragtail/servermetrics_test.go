package main

import (
	"bytes"
	"context"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// scrapedSeries reads the server_metrics series of a bench JSON: name -> its series.
func scrapedSeries(tb testing.TB, r map[string]any) map[string][]map[string]any {
	tb.Helper()
	sm, ok := r["server_metrics"].(map[string]any)
	if !ok {
		tb.Fatalf("no server_metrics object in the JSON: %.300v", r["server_metrics"])
	}
	if sm["interval_s"] == nil {
		tb.Errorf("server_metrics lacks interval_s")
	}
	list, _ := sm["series"].([]any)
	out := map[string][]map[string]any{}
	for _, s := range list {
		m, _ := s.(map[string]any)
		name, _ := m["name"].(string)
		out[name] = append(out[name], m)
	}
	return out
}

// points reads a series' points as [t, v] pairs.
func points(s map[string]any) [][2]float64 {
	raw, _ := s["points"].([]any)
	var pts [][2]float64
	for _, p := range raw {
		pair, _ := p.([]any)
		if len(pair) == 2 {
			t, _ := pair[0].(float64)
			v, _ := pair[1].(float64)
			pts = append(pts, [2]float64{t, v})
		}
	}
	return pts
}

// TestBenchScrapesLLMSim: against llm-sim, bench finds /metrics at the target's origin by
// default, and the engine's counters account for the run's tokens.
func TestBenchScrapesLLMSim(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--concurrency", "8",
		"--num-prompts", "40", "--max-tokens", "64", "--server-metrics-interval", "20ms", "--quiet", "--json", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	series := scrapedSeries(t, r)
	for _, name := range []string{"vllm:num_requests_running", "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_count", "DCGM_FI_DEV_FB_USED"} {
		if len(series[name]) == 0 {
			t.Errorf("no %s series in server_metrics (have %v)", name, series)
		}
	}
	gen := series["vllm:generation_tokens_total"]
	if len(gen) != 1 {
		t.Fatalf("generation tokens: %v", gen)
	}
	pts := points(gen[0])
	if len(pts) < 2 {
		t.Fatalf("generation tokens: %d points, want the run's start and end at least", len(pts))
	}
	// The first scrape is taken at the run's start (after the preflight) and the last after
	// it: the counter grew by no more than the run's tokens, and ends with all of them.
	outTokens := r["total_output_tokens"].(float64)
	if grew, end := pts[len(pts)-1][1]-pts[0][1], pts[len(pts)-1][1]; grew > outTokens || end < outTokens {
		t.Errorf("generation tokens %v -> %v over the run, want growth <= and end >= the run's %g output tokens", pts[0], pts[len(pts)-1], outTokens)
	}
	mem := series["DCGM_FI_DEV_FB_USED"]
	if len(mem) == 0 || mem[0]["peak"] == nil || mem[0]["mean"] == nil || mem[0]["peak"].(float64) < mem[0]["mean"].(float64) {
		t.Errorf("memory series %v: want a peak at least its mean", mem)
	}
	if !strings.Contains(stderr.String(), "server metrics: ") || !strings.Contains(stderr.String(), "peak memory ") ||
		strings.Contains(stderr.String(), "warning") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

// TestBenchScrapesServe: ragtail serve keeps its metrics on the admin listener, named by
// --server-metrics; its own API origin has none, which bench notes and goes on.
func TestBenchScrapesServe(t *testing.T) {
	t.Parallel()
	addr, _, _ := startServe(t, "--profile", "tiny", "--corpus-docs", "20", "--profiling=false")
	servingMu.Lock()
	m := adminLine.FindStringSubmatch(servingOut[addr].String())
	servingMu.Unlock()
	if m == nil {
		t.Fatal("no admin address in serve's output")
	}
	for _, tc := range []struct {
		name, metrics string
		want          []string // series names
		note          string
	}{
		{"admin endpoint", "http://" + m[1] + "/metrics",
			[]string{"rag_stage_duration_seconds_count", "gen_ai_server_time_to_first_token_seconds_count", "vllm:num_requests_running", "DCGM_FI_DEV_FB_USED"},
			"server metrics: "},
		{"default: the API origin has none", "", nil, "server metrics: none at http://" + addr + "/metrics"},
		{"off", "off", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "r.json")
			var stdout, stderr bytes.Buffer
			args := []string{"bench", "--url", "http://" + addr + "/v1/chat/completions", "--concurrency", "4",
				"--num-prompts", "12", "--max-tokens", "16", "--dataset", "short", "--server-metrics-interval", "50ms", "--quiet", "--json", out}
			if tc.metrics != "" {
				args = append(args, "--server-metrics", tc.metrics)
			}
			if err := run(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			r := readJSON(t, out)
			if tc.want == nil {
				if _, ok := r["server_metrics"]; ok {
					t.Error("server_metrics written without a scrape")
				}
			} else {
				series := scrapedSeries(t, r)
				for _, name := range tc.want {
					if len(series[name]) == 0 {
						t.Errorf("no %s series (have %d names)", name, len(series))
					}
				}
				for _, s := range series["rag_stage_duration_seconds_count"] {
					if labels, _ := s["labels"].(map[string]any); labels["rag_stage"] == nil {
						t.Errorf("stage series without its rag_stage label: %v", s["labels"])
					}
				}
			}
			switch got := stderr.String(); {
			case tc.note != "" && !strings.Contains(got, tc.note):
				t.Errorf("stderr lacks %q:\n%s", tc.note, got)
			case tc.note == "" && strings.Contains(got, "server metrics"):
				t.Errorf("--server-metrics off, stderr:\n%s", got)
			case strings.Contains(got, "warning"):
				t.Errorf("a warning:\n%s", got)
			}
		})
	}
}

// TestBenchDeadServerMetrics: an endpoint that does not answer is one warning, and the run
// and its results go on without server_metrics.
func TestBenchDeadServerMetrics(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/metrics"
	_ = ln.Close()
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--concurrency", "4",
		"--num-prompts", "20", "--max-tokens", "16", "--server-metrics", dead, "--quiet", "--json", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("a dead metrics endpoint failed the run: %v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	if r["completed"] != 20.0 {
		t.Errorf("completed %v, want 20", r["completed"])
	}
	if _, ok := r["server_metrics"]; ok {
		t.Error("server_metrics written from a dead endpoint")
	}
	if n := strings.Count(stderr.String(), "warning"); n != 1 || !strings.Contains(stderr.String(), "failed, the first with") {
		t.Errorf("%d warnings, want 1 and a count of the failed scrapes:\n%s", n, stderr.String())
	}
}

func TestBenchServerMetricsFlagErrors(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	for _, tc := range []struct{ name, flag, value, want string }{
		{"not a URL", "--server-metrics", "localhost:9464", "--server-metrics"},
		{"interval too short", "--server-metrics-interval", "1ms", "--server-metrics-interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{"bench", "--url", srv.URL, "--num-prompts", "1", tc.flag, tc.value}, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestBenchScrapesGuardedAdmin: an admin listener off loopback answers /metrics only with its
// token; bench sends --server-metrics-token, says plainly when the token is missing or wrong,
// and never writes the token into the results.
func TestBenchScrapesGuardedAdmin(t *testing.T) {
	t.Parallel()
	const token = "s3cret-admin-token"
	reg := prometheus.NewRegistry()
	running := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:num_requests_running"})
	reg.MustRegister(running)
	running.Set(3)
	admin := httptest.NewServer(httpapi.NewAdmin(reg, httpapi.WithAccess(httpapi.AdminAccess{Token: token, ListenAddr: "0.0.0.0:9464"})))
	t.Cleanup(admin.Close)
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	for _, tc := range []struct {
		name, token, warning string
	}{
		{"right token", token, ""},
		{"no token", "", "wants a bearer token: none was sent"},
		{"wrong token", "not-it", "refused the one sent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "r.json")
			var stdout, stderr bytes.Buffer
			args := []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--concurrency", "4", "--num-prompts", "8",
				"--max-tokens", "16", "--server-metrics", admin.URL + "/metrics", "--server-metrics-interval", "20ms", "--quiet", "--json", out}
			if tc.token != "" {
				args = append(args, "--server-metrics-token", tc.token)
			}
			if err := run(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" && bytes.Contains(raw, []byte(tc.token)) {
				t.Errorf("the token is in the results file")
			}
			r := readJSON(t, out)
			if tc.warning == "" {
				if len(scrapedSeries(t, r)["vllm:num_requests_running"]) == 0 {
					t.Errorf("no series scraped with the token:\n%s", stderr.String())
				}
				if strings.Contains(stderr.String(), "warning") {
					t.Errorf("a warning with the right token:\n%s", stderr.String())
				}
				return
			}
			if _, ok := r["server_metrics"]; ok {
				t.Error("server_metrics written from refused scrapes")
			}
			if got := stderr.String(); strings.Count(got, "warning") != 1 || !strings.Contains(got, tc.warning) || !strings.Contains(got, "--server-metrics-token") {
				t.Errorf("stderr, want one warning saying %q and naming the flag:\n%s", tc.warning, got)
			}
		})
	}
}
