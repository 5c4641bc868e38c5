//go:build e2e

package main

// The telemetry end to end (make e2e): the ragtail binary serves on loopback, a real Prometheus
// (the Debian package) scrapes its admin listener every second, and the test checks through
// Prometheus's query API that the metrics docs/telemetry.md names arrive, with trace_id exemplars that
// name requests the test made; that promtool accepts the exposition; that the admin API serves
// traces and profiles; and that the --trace-file holds every request's spans after a clean
// SIGTERM.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestTelemetryE2E(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not installed: make e2e needs it (Debian: apt-get install prometheus; .ci/run installs it)")
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed (Debian package prometheus)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ragtail")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	api, admin := telFreeAddr(t), telFreeAddr(t)
	traceFile := filepath.Join(dir, "spans.jsonl")
	serve := telStart(t, ctx, dir, "ragtail", bin, "serve", "--addr", api, "--admin-addr", admin,
		"--profile", "tiny", "--corpus-docs", "60", "--profile-window", "2s", "--trace-file", traceFile, "--log-level", "warn")
	nbWaitHTTP(t, ctx, "http://"+api+"/readyz")
	// A second service with the GenAI conventions' latest names, scraped as another job.
	latestAPI, latestAdmin := telFreeAddr(t), telFreeAddr(t)
	telStartEnv(t, ctx, dir, "ragtail-latest", []string{"OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental"}, bin, "serve",
		"--addr", latestAPI, "--admin-addr", latestAdmin, "--profile", "tiny", "--corpus-docs", "60", "--profiling=false", "--log-level", "warn")
	nbWaitHTTP(t, ctx, "http://"+latestAPI+"/readyz")

	promAddr := telFreeAddr(t)
	promURL := "http://" + promAddr
	promCfg := filepath.Join(dir, "prometheus.yml")
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"+
		"  - job_name: ragtail\n    static_configs:\n      - targets: [%q]\n"+
		"  - job_name: ragtail-latest\n    static_configs:\n      - targets: [%q]\n", admin, latestAdmin)
	if err := os.WriteFile(promCfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	telStart(t, ctx, dir, "prometheus", promBin, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--enable-feature=exemplar-storage", "--log.level=warn")
	nbWaitHTTP(t, ctx, promURL+"/-/ready")

	// One request to each service, and Prometheus's first samples of the series it made, so that
	// the traffic below shows as an increase.
	sent := map[string]bool{} // trace ids of the requests to the default service
	for _, target := range []struct{ api, job string }{{api, "ragtail"}, {latestAPI, "ragtail-latest"}} {
		if id := ask(t, target.api, -1); target.api == api {
			sent[id] = true
		}
		telWaitFor(t, ctx, target.job+"'s first request in Prometheus", 60*time.Second, func() (bool, error) {
			v, err := telPromQuery(ctx, promURL, `sum(gen_ai_server_request_duration_seconds_count{job="`+target.job+`"})`)
			return err == nil && v >= 1, err
		})
	}

	// Traffic: every coupling mode, streamed and not.
	const requests = 30
	start := time.Now()
	for i := range requests {
		coupling := []string{"sync", "fanout", "async"}[i%3]
		body := fmt.Sprintf(`{"model":"ragtail-tiny","stream":%v,"max_tokens":8,"rag":{"coupling":%q},
			"messages":[{"role":"user","content":"How do caches and shards shape tail latency? (%d)"}]}`, i%2 == 0, coupling, i)
		t0 := time.Now()
		resp, err := http.Post("http://"+api+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		parts := strings.Split(resp.Header.Get("traceparent"), "-")
		if len(parts) != 4 {
			t.Fatalf("request %d: traceparent %q", i, resp.Header.Get("traceparent"))
		}
		sent[parts[1]] = true
		// The service's clock, in Unix nanoseconds when the headers were written: on this host
		// it agrees with ours. A second of slack catches a wrong unit, not a slow machine.
		ns, err := strconv.ParseInt(resp.Header.Get("X-Ragtail-Time"), 10, 64)
		if err != nil || time.Unix(0, ns).Before(t0.Add(-time.Second)) || time.Unix(0, ns).After(t1.Add(time.Second)) {
			t.Errorf("request %d: X-Ragtail-Time %q is not between the send and receive times %v..%v", i, resp.Header.Get("X-Ragtail-Time"), t0, t1)
		}
	}

	for i := range 6 {
		ask(t, latestAPI, i)
	}

	t.Run("prometheus has the series", func(t *testing.T) {
		telWaitFor(t, ctx, "every request counted in Prometheus", 60*time.Second, func() (bool, error) {
			v, err := telPromQuery(ctx, promURL, `sum(gen_ai_server_request_duration_seconds_count{job="ragtail"})`)
			return err == nil && v >= requests, err
		})
		for _, q := range []string{
			`sum(gen_ai_server_time_to_first_token_seconds_count)`,
			`sum(gen_ai_server_time_per_output_token_seconds_count)`,
			`sum(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="chat"})`,
			`sum(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="embeddings"})`,
			`sum(gen_ai_client_token_usage_count)`,
			`sum(db_client_operation_duration_seconds_count{db_system_name="ragtail.memory"})`,
			`sum(rag_stage_duration_seconds_count{rag_stage="admission"})`,
			`sum(rag_stage_duration_seconds_count{rag_stage="embed"})`,
			`sum(rag_stage_duration_seconds_count{rag_stage="retrieve"})`,
			`sum(rag_stage_duration_seconds_count{rag_stage="fetch"})`,
			`sum(rag_stage_duration_seconds_count{rag_stage="generate"})`,
			`sum(rag_stage_duration_seconds_count{rag_stage="stream"})`,
			`sum(rag_cache_requests_total)`,
			`sum(rag_admission_queue_wait_seconds_count)`,
			`sum(http_server_request_duration_seconds_count{http_route="/v1/chat/completions"})`,
		} {
			v, err := telPromQuery(ctx, promURL, q)
			if err != nil || !(v >= requests) {
				t.Errorf("%s = %v (err %v), want at least %d", q, v, err, requests)
			}
		}
		// Gauges and counters that may be zero but must exist.
		for _, q := range []string{`rag_inflight_requests`, `rag_admission_rejected_total`, `rag_shard_late_dropped_total`, `rag_fault_injected_total`,
			`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`} {
			v, err := telPromQuery(ctx, promURL, q)
			if err != nil || v != v { // NaN: no series
				t.Errorf("%s: no series (err %v)", q, err)
			}
		}
	})

	t.Run("GenAI scenarios under both conventions", func(t *testing.T) {
		telWaitFor(t, ctx, "the latest-names service's requests in Prometheus", 60*time.Second, func() (bool, error) {
			v, err := telPromQuery(ctx, promURL, `sum(gen_ai_client_inference_duration_seconds_count{job="ragtail-latest"})`)
			return err == nil && v >= 7, err
		})
		for _, sc := range genAIScenarios(t, "../../docs/telemetry.md") {
			for i, q := range []string{sc.v141, sc.latest} {
				if !strings.Contains(q, "(") {
					continue // "not available"
				}
				errorRate := strings.Contains(sc.name, "error rate")
				zeroOK := errorRate || strings.Contains(sc.name, "cache")
				var v float64
				telWaitFor(t, ctx, fmt.Sprintf("%s (%s)", sc.name, []string{"v1.41", "latest"}[i]), 15*time.Second, func() (bool, error) {
					var err error
					v, err = telPromQuery(ctx, promURL, q)
					return err == nil && (errorRate || v == v && (zeroOK || v > 0)), err
				})
				t.Logf("%s (%s) = %v", sc.name, []string{"v1.41", "latest"}[i], v)
			}
		}
	})

	t.Run("exemplars name our traces", func(t *testing.T) {
		for _, metric := range []string{"gen_ai_server_time_to_first_token_seconds_bucket", "rag_stage_duration_seconds_bucket"} {
			var ids []string
			telWaitFor(t, ctx, metric+" exemplars", 30*time.Second, func() (bool, error) {
				var err error
				ids, err = telPromExemplars(ctx, promURL, metric+`{job="ragtail"}`, start, time.Now().Add(time.Minute))
				return err == nil && len(ids) > 0, err
			})
			for _, id := range ids {
				if !sent[id] {
					t.Errorf("%s exemplar trace_id %s is none of the %d requests sent", metric, id, requests)
				}
			}
		}
	})

	t.Run("promtool check metrics", func(t *testing.T) {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(string(body))
		out, _ := cmd.CombinedOutput()
		for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
			// The simulated engine keeps vLLM's metric names, colons included, and dcgm-exporter's
			// camelCase labels on DCGM_FI_DEV_FB_USED, so that dashboards made for them work
			// against it; promtool reserves colons for recording rules and prefers snake_case.
			if line == "" || strings.HasPrefix(line, "vllm:") && strings.HasSuffix(line, "should not contain ':'") ||
				strings.HasPrefix(line, "DCGM_FI_") && strings.HasSuffix(line, "not 'camelCase'") {
				continue
			}
			t.Errorf("promtool: %s", line)
		}
	})

	t.Run("admin traces and profiles", func(t *testing.T) {
		var list struct {
			Traces []struct {
				TraceID string             `json:"trace_id"`
				Stages  map[string]float64 `json:"stages"`
			} `json:"traces"`
		}
		telGetJSON(t, "http://"+admin+"/debug/traces?slowest=5", &list)
		if len(list.Traces) != 5 {
			t.Fatalf("%d slowest traces, want 5", len(list.Traces))
		}
		for _, tr := range list.Traces {
			if !sent[tr.TraceID] || len(tr.Stages) != 6 {
				t.Errorf("slowest trace %s (sent: %v) with stages %v", tr.TraceID, sent[tr.TraceID], tr.Stages)
			}
		}
		var windows struct {
			Windows []struct {
				Type string `json:"type"`
			} `json:"windows"`
		}
		telWaitFor(t, ctx, "a CPU profile window", 30*time.Second, func() (bool, error) {
			telGetJSON(t, "http://"+admin+"/debug/profiles", &windows)
			for _, w := range windows.Windows {
				if w.Type == "cpu" {
					return true, nil
				}
			}
			return false, fmt.Errorf("%d windows, none cpu", len(windows.Windows))
		})
	})

	t.Run("trace file after SIGTERM", func(t *testing.T) {
		if err := serve.stop(); err != nil {
			t.Fatalf("ragtail serve exited with %v after SIGTERM, want 0", err)
		}
		f, err := os.Open(traceFile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		seen := map[string]bool{}
		spans := 0
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
		for sc.Scan() {
			var rec struct {
				TraceID string `json:"trace_id"`
				Name    string `json:"name"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("trace file line %d: %v", spans+1, err)
			}
			spans++
			if rec.Name == "rag.pipeline" {
				seen[rec.TraceID] = true
			}
		}
		for id := range sent {
			if !seen[id] {
				t.Errorf("trace %s has no rag.pipeline span in the trace file (%d spans in all)", id, spans)
			}
		}
	})
}

func telFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// telProcess is a process the test started.
type telProcess struct {
	cmd  *exec.Cmd
	done chan error
}

// stop sends SIGTERM and returns the process's exit error (nil for status 0).
func (p *telProcess) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		return errors.New("still running 30 s after SIGTERM")
	}
}

// ask sends one streamed chat completion to the service at api, reads it to the end and returns
// its trace id.
func ask(t *testing.T, api string, i int) string {
	t.Helper()
	body := fmt.Sprintf(`{"model":"ragtail-tiny","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"What sets the tail? (%d)"}]}`, i)
	resp, err := http.Post("http://"+api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("request %d to %s: status %d", i, api, resp.StatusCode)
	}
	parts := strings.Split(resp.Header.Get("traceparent"), "-")
	if len(parts) != 4 {
		t.Fatalf("request %d to %s: traceparent %q", i, api, resp.Header.Get("traceparent"))
	}
	return parts[1]
}

// genAIScenario is one row of docs/telemetry.md's table of the GenAI migration guide's
// scenarios: its name and its query under each convention.
type genAIScenario struct{ name, v141, latest string }

// genAIScenarios reads the table between the genai-scenarios markers of the doc at path.
func genAIScenarios(t *testing.T, path string) []genAIScenario {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- genai-scenarios -->")
	table, _, ok2 := strings.Cut(table, "<!-- /genai-scenarios -->")
	if !ok || !ok2 {
		t.Fatalf("%s: no genai-scenarios table", path)
	}
	var out []genAIScenario
	for line := range strings.SplitSeq(strings.TrimSpace(table), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 || cells[0] == "scenario" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		unquote := func(s string) string { return strings.Trim(s, "`") }
		out = append(out, genAIScenario{cells[0], unquote(cells[1]), unquote(cells[2])})
	}
	if len(out) < 5 {
		t.Fatalf("%s: %d scenarios in the table", path, len(out))
	}
	return out
}

// telStart starts a process logging to dir/name.log; it is stopped when the test ends, and its
// log printed if the test failed.
func telStart(t *testing.T, ctx context.Context, dir, name, bin string, args ...string) *telProcess {
	t.Helper()
	return telStartEnv(t, ctx, dir, name, nil, bin, args...)
}

// telStartEnv is telStart with env added to the process's environment.
func telStartEnv(t *testing.T, ctx context.Context, dir, name string, env []string, bin string, args ...string) *telProcess {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &telProcess{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.stop()
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
	return p
}

// telWaitFor polls cond every 200 ms until it is true, failing the test after timeout.
func telWaitFor(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-deadline.C:
			t.Fatalf("waiting for %s: not after %s (last error: %v)", what, timeout, lastErr)
		case <-tick.C:
		}
	}
}

func telGetJSON(t *testing.T, u string, into any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// telPromQuery runs an instant query and returns the value of its first series (NaN for none).
func telPromQuery(ctx context.Context, promURL, query string) (float64, error) {
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := telPromGet(ctx, promURL+"/api/v1/query?query="+url.QueryEscape(query), &body); err != nil {
		return 0, err
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", query, body.Error)
	}
	if len(body.Data.Result) == 0 {
		return strconv.ParseFloat("NaN", 64)
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// telPromExemplars returns the trace_id labels of the exemplars Prometheus stored for metric.
func telPromExemplars(ctx context.Context, promURL, metric string, from, until time.Time) ([]string, error) {
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   []struct {
			Exemplars []struct {
				Labels map[string]string `json:"labels"`
			} `json:"exemplars"`
		} `json:"data"`
	}
	u := fmt.Sprintf("%s/api/v1/query_exemplars?query=%s&start=%d&end=%d", promURL, url.QueryEscape(metric), from.Unix(), until.Unix())
	if err := telPromGet(ctx, u, &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("exemplars of %s: %s", metric, body.Error)
	}
	var ids []string
	for _, series := range body.Data {
		for _, ex := range series.Exemplars {
			if id := ex.Labels["trace_id"]; id != "" {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

func telPromGet(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(into)
}
