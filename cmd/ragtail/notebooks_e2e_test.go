//go:build e2e

package main

// The diagnosis notebooks executed headless against live data (make e2e): the ragtail binary
// serves on loopback, a real Prometheus (the Debian package) scrapes its admin listener every
// second with the repository's recording rules, the load generator drives it, and
// `jupyter nbconvert --execute` runs both notebooks with every live source wired in. The test
// asserts what a user would look for: no error cell, every figure drawn, the diagnosis written,
// and that it was computed from the live sources (traces found, the engine's queue read from
// Prometheus), not from their absence.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testci"
)

var updateFigure = flag.Bool("update-figure", false, "copy the diagnosis notebook's Prometheus figure to notebooks/figures/diagnosis.png (docs/diagnosis.md shows it)")

// pythonModules are what the notebooks and their execution need: Debian's python3-numpy,
// python3-pandas, python3-scipy, python3-matplotlib, python3-requests, jupyter-nbconvert,
// python3-nbclient and python3-ipykernel.
var pythonModules = []string{"numpy", "pandas", "scipy", "matplotlib", "requests", "nbconvert", "nbclient", "ipykernel"}

func TestNotebooksE2E(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		testci.Skip(t, "prometheus is not installed (Debian: apt-get install prometheus)")
	}
	python := nbPython(t)
	root := stackRoot(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	t.Run("helpers", func(t *testing.T) {
		// The notebooks' statistics against known distributions and Go's golden values.
		out, err := nbPythonCmd(ctx, python, dir, filepath.Join(root, "notebooks"),
			"-m", "unittest", "discover", "-s", ".", "-p", "test_*.py").CombinedOutput()
		if err != nil {
			t.Fatalf("python unittest: %v\n%s", err, out)
		}
	})

	bin := filepath.Join(dir, "ragtail")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	api, admin := telFreeAddr(t), telFreeAddr(t)
	// 2 s profile windows, kept for 10 minutes: a slow request's window is then close to the
	// request itself, and every window of the test is still there when the notebook asks.
	nbStart(t, ctx, dir, "ragtail", bin, "serve", "--addr", api, "--admin-addr", admin,
		"--profile-window=2s", "--profile-keep=300", "--log-level=warn")
	nbWaitHTTP(t, ctx, "http://"+api+"/readyz")

	promAddr := telFreeAddr(t)
	promURL := "http://" + promAddr
	promCfg := writeE2EPrometheusConfig(t, dir, root, admin)
	nbStart(t, ctx, dir, "prometheus", promBin, "--config.file="+promCfg,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr,
		"--enable-feature=exemplar-storage", "--log.level=warn")
	nbWaitHTTP(t, ctx, promURL+"/-/ready")
	telWaitFor(t, ctx, "Prometheus scraping ragtail", 30*time.Second, func() (bool, error) {
		v, err := nbPromQuery(ctx, promURL, `up{job="ragtail"}`)
		return err == nil && v == 1, err
	})

	// The coupling lab first (it sets each mode through the admin API and restores the
	// configuration after), the diagnosed run last: its traces are then the most recent in
	// ragtail's ring when the notebook asks for them.
	labJSON := filepath.Join(dir, "lab-coupling.json")
	labArgs := []string{"lab", "coupling", "--url", "http://" + api, "--admin-url", "http://" + admin,
		"--duration", "24s", "--json", labJSON}
	if out, err := exec.CommandContext(ctx, bin, labArgs...).CombinedOutput(); err != nil {
		t.Fatalf("ragtail %s: %v\n%s", strings.Join(labArgs, " "), err, out)
	}
	chat := "http://" + api + "/v1/chat/completions"
	benchJSON := filepath.Join(dir, "bench.json")
	// 2.5/s for 50 s: about 125 requests, above the 100 a tail analysis needs (the seeded
	// arrival process sends the same load on every run). The rate stays under the default
	// serve's capacity (about 3/s of these RAG prompts), so the adaptive limit sheds nothing and
	// every request must complete; at 6/s it sheds about one request in five, as it should.
	end := runBenchCommand(t, ctx, bin, nbBench{url: chat, rate: 2.5, duration: 50 * time.Second, maxTokens: 16, seed: 1,
		jsonPath: benchJSON, detailedPath: filepath.Join(dir, "bench.jsonl")})

	// Prometheus must hold the whole run, and the profiler must have stored the windows that
	// cover it (each window is kept once it closes).
	telWaitFor(t, ctx, "a Prometheus scrape after the run", 30*time.Second, func() (bool, error) {
		v, err := nbPromQuery(ctx, promURL, `timestamp(up{job="ragtail"})`)
		return err == nil && v > float64(end.Add(2*time.Second).UnixNano())/1e9, err
	})
	telWaitFor(t, ctx, "profile windows covering the run", 60*time.Second, func() (bool, error) {
		return profileWindowsCover(ctx, "http://"+admin, end)
	})

	t.Run("recording rules", func(t *testing.T) {
		// Every rule of prometheus/rules.yml has data: the metric names it reads are the ones
		// ragtail exports (the simulator's vllm:* come from ragtail itself here, job ragtail).
		for _, rule := range []string{
			"job:gen_ai_server_time_to_first_token_seconds:p95_1m", "job:gen_ai_server_time_to_first_token_seconds:p99_1m",
			"job:gen_ai_server_request_duration_seconds:p95_1m", "job:gen_ai_server_request_duration_seconds:p99_1m",
			"job_rag_stage:rag_stage_duration_seconds:p99_1m", "job:vllm_time_to_first_token_seconds:p99_1m",
			"job:rag_cache_hit_ratio:rate1m", "job:rag_admission_queue_wait_seconds:p99_1m",
		} {
			q := fmt.Sprintf(`max_over_time(%s{job="ragtail"}[5m])`, rule)
			if strings.HasPrefix(rule, "job_rag_stage:") {
				q = fmt.Sprintf(`max(max_over_time(%s{job="ragtail",rag_stage="generate"}[5m]))`, rule)
			}
			v, err := nbPromQuery(ctx, promURL, q)
			if err != nil || math.IsNaN(v) || v <= 0 {
				t.Errorf("%s: %v (err %v), want a positive value", rule, v, err)
			}
		}
	})

	env := []string{
		"RAGTAIL_RESULTS=" + benchJSON,
		"PROMETHEUS_URL=" + promURL,
		"RAGTAIL_ADMIN_URL=http://" + admin,
		"RAGTAIL_LAB_RESULTS=" + labJSON,
	}

	t.Run("diagnosis.ipynb", func(t *testing.T) {
		figures := filepath.Join(dir, "figures-diagnosis")
		nb := executeNotebook(t, ctx, python, dir, filepath.Join(root, "notebooks", "diagnosis.ipynb"),
			append(env, "RAGTAIL_FIGURES="+figures))
		nb.checkNoErrors(t)
		want := []string{"latency_over_time", "percentile_spectrum", "tail_fit", "prometheus", "stages", "waterfalls", "profile"}
		nb.checkFigures(t, figures, want)
		md := nb.markdownOutputs()
		diag := ""
		for _, m := range md {
			if strings.HasPrefix(m, "## Diagnosis") {
				diag = m
			}
		}
		if diag == "" {
			t.Fatalf("no diagnosis output; markdown outputs: %q", md)
		}
		t.Logf("the notebook's diagnosis:\n%s", diag)
		// Computed from the live sources: the stages from Server-Timing, the engine from
		// Prometheus, the slowest traces and their profiles from the admin API.
		for _, s := range []string{"P99 was high because of **", "- **stages**:", "- **engine queue**:", "- **slowest trace**:", "cores busy"} {
			if !strings.Contains(diag, s) {
				t.Errorf("diagnosis lacks %q:\n%s", s, diag)
			}
		}
		text := nb.textOutputs()
		if !strings.Contains(text, "traces found: 3") {
			t.Errorf("the notebook did not find the 3 slowest traces:\n%s", text)
		}
		for _, bad := range []string{"unreachable", "not available", "HTTP 5"} {
			if strings.Contains(text, bad) {
				t.Errorf("a live source failed (%q):\n%s", bad, text)
			}
		}
		if *updateFigure {
			nbCopyFile(t, filepath.Join(figures, "prometheus.png"), filepath.Join(root, "notebooks", "figures", "diagnosis.png"))
		}
	})

	t.Run("coupling.ipynb", func(t *testing.T) {
		figures := filepath.Join(dir, "figures-coupling")
		nb := executeNotebook(t, ctx, python, dir, filepath.Join(root, "notebooks", "coupling.ipynb"),
			append(env, "RAGTAIL_FIGURES="+figures))
		nb.checkNoErrors(t)
		nb.checkFigures(t, figures, []string{"coupling_percentiles", "coupling_ccdf", "coupling_stages", "coupling_timeline", "coupling_topk"})
		md := strings.Join(nb.markdownOutputs(), "\n")
		for _, s := range []string{"## Coupling: measured", "**TTFT P50**: sync", "**E2E P50**", "**against the article**", "**lab verdict**"} {
			if !strings.Contains(md, s) {
				t.Errorf("coupling summary lacks %q:\n%s", s, md)
			}
		}
	})
}

// nbPython returns the first of python3 on PATH and /usr/bin/python3 that has every module
// the notebooks need, or skips the test.
func nbPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		path, err := exec.LookPath(cand)
		if err != nil || slices.Contains(tried, path) {
			continue
		}
		tried = append(tried, path)
		check := "import " + strings.Join(pythonModules, ", ")
		if err := exec.Command(path, "-c", check).Run(); err == nil {
			return path
		}
	}
	testci.Skip(t, "no python3 with %s (Debian: apt-get install python3-numpy python3-pandas python3-scipy "+
		"python3-matplotlib python3-requests jupyter-nbconvert python3-nbclient python3-ipykernel); tried %v",
		strings.Join(pythonModules, ", "), tried)
	return ""
}

// nbPythonCmd runs python in workDir with Jupyter, IPython and matplotlib state kept under dir,
// and no bytecode written into the repository.
func nbPythonCmd(ctx context.Context, python, dir, workDir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = workDir
	cmd.Env = append(os.Environ(),
		"PYTHONDONTWRITEBYTECODE=1",
		"JUPYTER_RUNTIME_DIR="+filepath.Join(dir, "jupyter-runtime"),
		"JUPYTER_DATA_DIR="+filepath.Join(dir, "jupyter-data"),
		"IPYTHONDIR="+filepath.Join(dir, "ipython"),
		"MPLCONFIGDIR="+filepath.Join(dir, "matplotlib"),
		"PYDEVD_DISABLE_FILE_VALIDATION=1",
	)
	return cmd
}

// nbStart starts a long-running process, logging to dir/name.log, and stops it (SIGTERM,
// then SIGKILL after 10 s) when the test ends; its log is printed if the test failed.
func nbStart(t *testing.T, ctx context.Context, dir, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(ctx)
	cmd := exec.CommandContext(pctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		stop()
		_ = cmd.Wait() // killed by SIGTERM: its exit status says nothing about the test
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
}

// nbWaitHTTP polls u until it answers 2xx, failing the test after a minute.
func nbWaitHTTP(t *testing.T, ctx context.Context, u string) {
	t.Helper()
	telWaitFor(t, ctx, u, 60*time.Second, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("status %d", resp.StatusCode)
	})
}

// writeE2EPrometheusConfig writes the repository's Prometheus setup for loopback: the ragtail
// job of prometheus.yml (same name, so the rules' job labels are the same) pointed at the
// admin listener, scraped every second, with the repository's rule files. The other jobs
// scrape services the compose stack runs apart (llm-sim, qdrant); here the engine is embedded
// and its vllm:* metrics come from ragtail's own /metrics.
func writeE2EPrometheusConfig(t *testing.T, dir, root, admin string) string {
	t.Helper()
	cfg := readPrometheusConfig(t, filepath.Join(root, "prometheus.yml"))
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files:\n")
	for _, rf := range cfg.RuleFiles {
		fmt.Fprintf(&b, "  - %q\n", filepath.Join(root, rf))
	}
	b.WriteString("scrape_configs:\n")
	found := false
	for _, tg := range cfg.Targets {
		if tg.Host != "ragtail" {
			continue
		}
		found = true
		fmt.Fprintf(&b, "  - job_name: %q\n    metrics_path: %q\n    static_configs:\n      - targets: [%q]\n", tg.Job, tg.MetricsPath, admin)
	}
	if !found {
		t.Fatal("prometheus.yml has no job scraping ragtail")
	}
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// nbPromQuery runs an instant query and returns its single value (NaN when it has none).
func nbPromQuery(ctx context.Context, promURL, query string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, promURL+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("query %s: %w", query, err)
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", query, body.Error)
	}
	if len(body.Data.Result) == 0 {
		return math.NaN(), nil
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// profileWindowsCover reports whether the profile store holds a CPU window ending after t.
func profileWindowsCover(ctx context.Context, adminURL string, t time.Time) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/debug/profiles", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var list struct {
		Windows []struct {
			Type  string    `json:"type"`
			Until time.Time `json:"until"`
		} `json:"windows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return false, err
	}
	for _, w := range list.Windows {
		if w.Type == "cpu" && w.Until.After(t) {
			return true, nil
		}
	}
	return false, nil
}

// nbBench is one `ragtail bench` run.
type nbBench struct {
	url                    string
	rate                   float64 // Poisson arrivals per second
	duration               time.Duration
	maxTokens              int
	seed                   uint64
	jsonPath, detailedPath string // ragtail.bench/v1 summary, ragtail.requests/v1 records
}

// runBenchCommand runs `ragtail bench` and returns when its last request ended, on the wall
// clock. Every request must complete: a failure here is the service's, not the notebooks'.
func runBenchCommand(t *testing.T, ctx context.Context, bin string, s nbBench) time.Time {
	t.Helper()
	args := []string{"bench", "--url", s.url, "--request-rate", strconv.FormatFloat(s.rate, 'g', -1, 64),
		"--duration", s.duration.String(), "--num-prompts", "0", "--max-tokens", strconv.Itoa(s.maxTokens),
		"--seed", strconv.FormatUint(s.seed, 10), "--json", s.jsonPath, "--quiet"}
	if s.detailedPath != "" {
		args = append(args, "--save-detailed", s.detailedPath)
	}
	if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("ragtail %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	b, err := os.ReadFile(s.jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Start     time.Time `json:"start"`
		DurationS float64   `json:"duration_s"`
		Completed int       `json:"completed"`
		Failed    int       `json:"failed"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("%s: %v", s.jsonPath, err)
	}
	if res.Failed > 0 || res.Completed == 0 {
		t.Fatalf("bench against %s: %d completed, %d failed: the service is not healthy", s.url, res.Completed, res.Failed)
	}
	return res.Start.Add(time.Duration(res.DurationS * float64(time.Second)))
}

// executedNotebook is an executed notebook, as nbformat 4 JSON.
type executedNotebook struct {
	Cells []struct {
		CellType string `json:"cell_type"`
		Outputs  []struct {
			OutputType string                     `json:"output_type"`
			Text       nbText                     `json:"text"`
			Data       map[string]json.RawMessage `json:"data"`
			EName      string                     `json:"ename"`
			EValue     string                     `json:"evalue"`
			Traceback  []string                   `json:"traceback"`
		} `json:"outputs"`
	} `json:"cells"`
}

// nbText is nbformat's text: a string or a list of lines.
type nbText string

func (m *nbText) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*m = nbText(s)
		return nil
	}
	var lines []string
	if err := json.Unmarshal(b, &lines); err != nil {
		return err
	}
	*m = nbText(strings.Join(lines, ""))
	return nil
}

// executeNotebook runs `jupyter nbconvert --to notebook --execute` on src with env and returns
// the executed notebook.
func executeNotebook(t *testing.T, ctx context.Context, python, dir, src string, env []string) *executedNotebook {
	t.Helper()
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".ipynb")+".out.ipynb")
	cmd := nbPythonCmd(ctx, python, dir, filepath.Dir(src), "-m", "nbconvert", "--to", "notebook", "--execute",
		"--ExecutePreprocessor.timeout=600", "--output", out, src)
	cmd.Env = append(cmd.Env, env...)
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("nbconvert %s: %v\n%s", filepath.Base(src), err, b)
		}
		t.Fatal(err)
	}
	t.Logf("%s executed in %s", filepath.Base(src), time.Since(start).Round(time.Second))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var nb executedNotebook
	if err := json.Unmarshal(b, &nb); err != nil {
		t.Fatalf("executed notebook: %v", err)
	}
	return &nb
}

func (nb *executedNotebook) checkNoErrors(t *testing.T) {
	t.Helper()
	for i, c := range nb.Cells {
		for _, o := range c.Outputs {
			if o.OutputType == "error" {
				t.Errorf("cell %d: %s: %s\n%s", i, o.EName, o.EValue, strings.Join(o.Traceback, "\n"))
			}
		}
	}
}

// checkFigures checks that the notebook drew at least len(names) images and saved each named
// figure as a PNG.
func (nb *executedNotebook) checkFigures(t *testing.T, dir string, names []string) {
	t.Helper()
	images := 0
	for _, c := range nb.Cells {
		for _, o := range c.Outputs {
			if _, ok := o.Data["image/png"]; ok {
				images++
			}
		}
	}
	if images < len(names) {
		t.Errorf("%d image/png outputs, want at least %d", images, len(names))
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n+".png"))
		if err != nil {
			t.Errorf("figure %s: %v", n, err)
			continue
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 10_000 {
			t.Errorf("figure %s: %d bytes, not a drawn PNG", n, len(b))
		}
	}
}

func (nb *executedNotebook) markdownOutputs() []string {
	var out []string
	for _, c := range nb.Cells {
		for _, o := range c.Outputs {
			if raw, ok := o.Data["text/markdown"]; ok {
				var m nbText
				if json.Unmarshal(raw, &m) == nil {
					out = append(out, string(m))
				}
			}
		}
	}
	return out
}

// textOutputs joins every stream output.
func (nb *executedNotebook) textOutputs() string {
	var b strings.Builder
	for _, c := range nb.Cells {
		for _, o := range c.Outputs {
			if o.OutputType == "stream" {
				b.WriteString(string(o.Text))
			}
		}
	}
	return b.String()
}

func nbCopyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", to)
}
