package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// startLLMSim serves the simulated engine's OpenAI API on loopback.
func startLLMSim(tb testing.TB, p llmsim.Profile, opts ...llmsim.Option) *httptest.Server {
	tb.Helper()
	engine, err := llmsim.New(p, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(llmsim.NewHandler(engine))
	tb.Cleanup(func() {
		srv.Close()
		engine.Close()
	})
	return srv
}

func tinyProfile(tb testing.TB) llmsim.Profile {
	tb.Helper()
	p, err := llmsim.ProfileByName("tiny")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// readJSON decodes a result file into a map.
func readJSON(tb testing.TB, path string) map[string]any {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return m
}

// designKeys are the keys ragtail.bench/v1 promises its readers (sessions only with sessions).
func designKeys() []string {
	keys := []string{"completed", "failed", "duration_s", "request_throughput", "output_throughput",
		"total_token_throughput", "goodput", "stages", "tail", "slowest", "timeline", "errors"}
	for _, m := range []string{"ttft", "tpot", "itl", "e2el", "service_e2el", "send_lag"} {
		keys = append(keys, "mean_"+m+"_ms", "median_"+m+"_ms")
		for _, p := range []string{"50", "90", "95", "99", "99.9"} {
			keys = append(keys, "p"+p+"_"+m+"_ms", "p"+p+"_"+m+"_ms_ci")
		}
	}
	return keys
}

func TestBenchArticleCommandLine(t *testing.T) {
	t.Parallel()
	// The article's command line, verbatim but for the URL and the model, against llm-sim. The
	// engine runs in virtual time (steps take no wall time) so that 200 requests of 512 tokens
	// finish in a second or two; what is checked is the command and its JSON, not the figures.
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions",
		"--concurrency", "32", "--num-prompts", "200", "--max-tokens", "512", "--temperature", "0.7", "--json", out},
		&stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	for _, k := range designKeys() {
		if _, ok := r[k]; !ok {
			t.Errorf("r.json lacks %q", k)
		}
	}
	if r["schema"] != "ragtail.bench/v1" || r["completed"] != 200.0 || r["failed"] != 0.0 {
		t.Errorf("schema %v, completed %v, failed %v", r["schema"], r["completed"], r["failed"])
	}
	cfg, _ := r["config"].(map[string]any)
	if cfg["model"] != "ragtail-tiny" || cfg["concurrency"] != 32.0 || cfg["request_rate"] != "inf" || cfg["max_tokens"] != 512.0 {
		t.Errorf("config %v: want the model from /v1/models, 32 closed-loop users, max_tokens 512", cfg)
	}
	if cfg["http_client"] != "h1" {
		t.Errorf("config.http_client = %v, want h1, the default for an http:// target", cfg["http_client"])
	}
	if ci, _ := r["p50_e2el_ms_ci"].([]any); len(ci) != 2 {
		t.Errorf("p50_e2el_ms_ci = %v", r["p50_e2el_ms_ci"])
	}
	if !strings.Contains(stdout.String(), "Successful requests") || !strings.Contains(stdout.String(), "closed loop of 32 users") || !strings.Contains(stderr.String(), "closed loop of 32 users") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

func TestBenchRateDatasetsAndOutputs(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	dir := t.TempDir()
	dataset := filepath.Join(dir, "sharegpt.json")
	if err := os.WriteFile(dataset, []byte(`[{"conversations":[{"from":"human","value":"What is a KV cache?"},{"from":"gpt","value":"It holds keys and values."}]},
		{"conversations":[{"from":"human","value":"Why do tails matter?"},{"from":"gpt","value":"Users wait for the slowest part of a page, so the tail sets what they feel."}]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want func(t *testing.T, r map[string]any)
	}{
		{"poisson with a cap and goodput", []string{"--request-rate", "200", "--concurrency", "4", "--num-prompts", "60", "--max-tokens", "8",
			"--goodput", "e2el:60000", "--dataset", "short"}, func(t *testing.T, r map[string]any) {
			if r["goodput"] == nil || r["completed"] != 60.0 {
				t.Errorf("goodput %v, completed %v", r["goodput"], r["completed"])
			}
		}},
		{"sharegpt dataset sets output lengths", []string{"--request-rate", "100", "--num-prompts", "20", "--dataset", dataset, "--model", "ragtail-tiny"},
			func(t *testing.T, r map[string]any) {
				if r["completed"] != 20.0 || r["output_throughput"] == 0.0 {
					t.Errorf("completed %v", r["completed"])
				}
			}},
		{"article shape for a duration", []string{"--shape", "article", "--request-rate", "100", "--duration", "500ms", "--max-prompt-tokens", "1000", "--max-tokens", "8"},
			func(t *testing.T, r map[string]any) {
				cfg, _ := r["config"].(map[string]any)
				if shape, _ := cfg["shape"].(string); !strings.HasPrefix(shape, "article(") || r["completed"].(float64) < 20 {
					t.Errorf("shape %v, completed %v", cfg["shape"], r["completed"])
				}
			}},
		{"ramp", []string{"--shape", "ramp:50,150,500ms", "--max-tokens", "4", "--num-prompts", "0", "--duration", "1s"},
			func(t *testing.T, r map[string]any) {
				// Lambda(0.5 s) = 0.5 x (50 + 150) / 2 = 50 arrivals: Poisson, sd 7.
				if n := r["completed"].(float64); math.Abs(n-51) > 30 {
					t.Errorf("completed %v, want about 51", n)
				}
			}},
		{"synthetic sessions", []string{"--sessions", "synthetic", "--think", "5ms", "--request-rate", "50", "--num-prompts", "10", "--max-tokens", "4"},
			func(t *testing.T, r map[string]any) {
				if r["sessions"] == nil {
					t.Error("no sessions in the JSON")
				}
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(dir, fmt.Sprintf("r%d.json", i))
			html := filepath.Join(dir, fmt.Sprintf("r%d.html", i))
			detailed := filepath.Join(dir, fmt.Sprintf("r%d.jsonl", i))
			var stderr bytes.Buffer
			args := append([]string{"bench", "--url", srv.URL + "/v1/chat/completions", "--json", out, "--html", html, "--save-detailed", detailed, "--quiet"}, tt.args...)
			if err := run(context.Background(), args, io.Discard, &stderr); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			r := readJSON(t, out)
			if r["failed"] != 0.0 {
				t.Errorf("%v requests failed: %v", r["failed"], r["errors"])
			}
			tt.want(t, r)
			if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
				t.Errorf("html report: %v", err)
			}
			if b, err := os.ReadFile(detailed); err != nil || bytes.Count(b, []byte("\n")) < 2 {
				t.Errorf("detailed records: %v", err)
			}
		})
	}
}

func TestBenchKeyLookupsAgainstServe(t *testing.T) {
	t.Parallel()
	// The cache-penetration mix against ragtail serve's documents: 10% of lookups ask for keys
	// that do not exist and get 404s; every other key exists in the 40-document corpus.
	addr, _, _ := startServe(t, "--profile", "tiny", "--corpus-docs", "40")
	out := filepath.Join(t.TempDir(), "keys.json")
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", "http://" + addr + "/v1/chat/completions", "--dataset", "keys",
		"--key-count", "40", "--hot-keys", "10", "--cold-keys", "0.2", "--invalid-keys", "0.1",
		"--request-rate", "400", "--num-prompts", "400", "--json", out, "--quiet"}, io.Discard, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	completed, failed := r["completed"].(float64), r["failed"].(float64)
	// failed ~ Binomial(400, 0.1): mean 40, sd 6.
	if completed+failed != 400 || math.Abs(failed-40) > 27 {
		t.Errorf("completed %v, failed %v: want about 40 invalid keys", completed, failed)
	}
	if errs, _ := r["errors"].(map[string]any); len(errs) != 1 || errs["http_4xx"] != failed {
		t.Errorf("errors %v: want only 404s", r["errors"])
	}
	if stages, _ := r["stages"].(map[string]any); stages["fetch"] == nil {
		t.Errorf("stages %v: want fetch from Server-Timing", r["stages"])
	}
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	url := srv.URL + "/v1/chat/completions"
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"rate", []string{"--request-rate", "fast"}, "invalid value"},
		{"shape", []string{"--request-rate", "5", "--shape", "sawtooth"}, "for flag -shape: unknown shape"},
		{"no end", []string{"--num-prompts", "0"}, "never end"},
		{"burst forever", []string{"--duration", "1s"}, "every request at once"},
		{"goodput", []string{"--goodput", "ttft=3", "--num-prompts", "1"}, "flag -goodput"},
		{"dataset", []string{"--dataset", "/no/such/file.json", "--num-prompts", "1"}, "for flag -dataset: neither a file"},
		{"extra body", []string{"--extra-body", "[1]", "--num-prompts", "1"}, "for flag -extra-body: want a JSON object"},
		{"header", []string{"--header", "nocolon"}, "for flag -header: header \"nocolon\": want \"Name: value\""},
		{"metrics", []string{"--percentile-metrics", "ttft,joy", "--num-prompts", "1"}, "for flag -percentile-metrics: metric \"joy\""},
		{"article with sessions", []string{"--shape", "article", "--sessions", "synthetic", "--num-prompts", "1"}, "does not combine"},
		{"hold-slo metric", []string{"--request-rate", "5", "--hold-slo", "p95_tpot_ms<=50"}, "for flag -hold-slo: p95_tpot_ms<=50: want a percentile of ttft, ttfo, e2el"},
		{"hold-slo bound", []string{"--request-rate", "5", "--hold-slo", "p95_ttft_ms>500"}, "use < or <="},
		{"hold-slo closed loop", []string{"--concurrency", "4", "--hold-slo", "p95_ttft_ms<=500"}, "--hold-slo searches an open loop's rate"},
		{"hold-slo length", []string{"--request-rate", "5", "--duration", "10s", "--hold-slo", "p95_ttft_ms<=500"}, "drop --duration"},
		{"hold-slo window", []string{"--request-rate", "5", "--hold-window", "10ms", "--hold-slo", "p95_ttft_ms<=500"}, "--hold-window: give 100ms or more"},
		{"hold-slo sessions", []string{"--request-rate", "5", "--sessions", "synthetic", "--hold-slo", "p95_e2el_ms<=500"}, "--hold-slo paces lone requests"},
		{"hold-window alone", []string{"--request-rate", "5", "--num-prompts", "1", "--hold-window", "5s"}, "--hold-window applies to a search: give --hold-slo too"},
		{"hold-slo ttft unstreamed", []string{"--request-rate", "5", "--stream=false", "--hold-slo", "p95_ttft_ms<=500"}, "needs streamed responses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), append([]string{"bench", "--url", url, "--quiet"}, tt.args...), io.Discard, &stderr)
			if err == nil || (!strings.Contains(err.Error(), tt.msg) && !strings.Contains(stderr.String(), tt.msg)) {
				t.Errorf("err = %v, stderr %q: want %q", err, stderr.String(), tt.msg)
			}
		})
	}
	// No server: the model cannot be listed, and the error says the server is not there.
	err := run(context.Background(), []string{"bench", "--url", "http://127.0.0.1:1/v1/chat/completions", "--num-prompts", "1"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("err = %v, want it to say the server cannot be reached", err)
	}
	if err := run(context.Background(), []string{"bench", "--help"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

func TestBenchInterrupted(t *testing.T) {
	t.Parallel()
	// Ctrl-C in the middle of a run: the results so far are still written. The interrupt comes
	// once the server has answered the preflight request and two of the run's, whatever the
	// machine's speed (a fixed delay could land in the preflight under the race detector, where
	// there is nothing to write yet).
	engine, err := llmsim.New(tinyProfile(t))
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan struct{}, 1024)
	handler := llmsim.NewHandler(engine)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(w, r)
		if r.URL.Path == "/v1/chat/completions" {
			answered <- struct{}{}
		}
	}))
	t.Cleanup(func() {
		srv.Close()
		engine.Close()
	})
	out := filepath.Join(t.TempDir(), "partial.json")
	ctx, cancel := context.WithCancel(context.Background())
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer cancel()
		for range 3 {
			select {
			case <-stop:
				return
			case <-answered:
			case <-time.After(30 * time.Second):
				return
			}
		}
	}()
	err = run(ctx, []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--request-rate", "50", "--duration", "30s",
		"--max-tokens", "16", "--json", out, "--quiet"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v, want interrupted", err)
	}
	r := readJSON(t, out)
	cfg, _ := r["config"].(map[string]any)
	if cfg["interrupted"] != true || r["completed"].(float64) < 1 {
		t.Errorf("config %v, completed %v", cfg, r["completed"])
	}
}

// TestBenchCPUProfile: --cpuprofile writes a profile of the generator that pprof reads. Not
// parallel: a process has one CPU profiler, and serve's continuous profiler in other tests
// would take it.
func TestBenchCPUProfile(t *testing.T) {
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--concurrency", "8",
		"--num-prompts", "200", "--max-tokens", "16", "--quiet", "--cpuprofile", path}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("the profile does not parse: %v", err)
	}
	if len(p.SampleType) == 0 || p.SampleType[0].Type != "samples" || p.DurationNanos <= 0 {
		t.Errorf("sample types %v, duration %d ns: want a CPU profile", p.SampleType, p.DurationNanos)
	}
	var stdout2, stderr2 bytes.Buffer
	err = run(context.Background(), []string{"bench", "--url", srv.URL, "--num-prompts", "1", "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "p")}, &stdout2, &stderr2)
	if err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Errorf("err = %v, want one naming --cpuprofile", err)
	}
}
