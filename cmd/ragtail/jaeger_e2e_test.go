//go:build e2e

package main

// The Jaeger end to end (make e2e): a real Jaeger v2 all-in-one (bin/jaeger, built by make
// jaeger from tools/jaeger) runs on loopback with in-memory storage; ragtail serve and ragtail
// bench export to its OTLP receiver, and the slowest request's trace read back through Jaeger's
// query API must hold the ragtail-bench client span as the parent of the ragtail server span,
// with every stage span under it. Then Jaeger is stopped and serve and bench go on unaffected.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/telemetry"
)

// jaegerBinary returns bin/jaeger of the repository; its absence fails the test (make e2e
// builds it).
func jaegerBinary(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "jaeger"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("bin/jaeger is missing (%v): run make jaeger (make e2e builds it)", err)
	}
	return bin
}

// jaegerConfig is an all-in-one configuration listening only on the given loopback addresses:
// the OTLP receiver, the query API and nothing else on a fixed port.
func jaegerConfig(otlpGRPC, otlpHTTP, queryHTTP, queryGRPC, health string) string {
	return fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: %q
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %q
    grpc:
      endpoint: %q
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %q
      http:
        endpoint: %q
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, health, queryHTTP, queryGRPC, otlpGRPC, otlpHTTP)
}

// jaegerTrace is the part of Jaeger's /api/traces/{id} answer the test reads.
type jaegerTrace struct {
	Data []struct {
		Spans []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			ProcessID     string `json:"processID"`
			StartTime     int64  `json:"startTime"` // microseconds since the epoch
			Duration      int64  `json:"duration"`  // microseconds
			References    []struct {
				RefType string `json:"refType"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
			Tags []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	} `json:"data"`
}

func TestJaegerE2E(t *testing.T) {
	jaeger := jaegerBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ragtail")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	otlpGRPC, otlpHTTP, queryHTTP := telFreeAddr(t), telFreeAddr(t), telFreeAddr(t)
	cfgPath := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfgPath, []byte(jaegerConfig(otlpGRPC, otlpHTTP, queryHTTP, telFreeAddr(t), telFreeAddr(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	jp := telStart(t, ctx, dir, "jaeger", jaeger, "--config=file:"+cfgPath)
	queryURL := "http://" + queryHTTP
	nbWaitHTTP(t, ctx, queryURL+"/api/services")

	api, admin := telFreeAddr(t), telFreeAddr(t)
	serve := exec.CommandContext(ctx, bin, "serve", "--addr", api, "--admin-addr", admin, "--log-level", "warn")
	serve.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+otlpHTTP, "OTEL_SERVICE_NAME=ragtail", "OTEL_METRICS_EXPORTER=none",
		"OTEL_BSP_SCHEDULE_DELAY=200")
	startCmd(t, dir, "ragtail", serve)
	nbWaitHTTP(t, ctx, "http://"+api+"/readyz")

	// bench exports to Jaeger by --otlp; its slowest request's trace must join up.
	out := filepath.Join(dir, "bench.json")
	runBenchBinary(t, ctx, bin, nil, "--url", "http://"+api+"/v1/chat/completions", "--num-prompts", "40",
		"--concurrency", "4", "--max-tokens", "16", "--warmup", "2", "--json", out, "--otlp", "http://"+otlpHTTP)
	slowest := benchSlowest(t, out)

	var tr jaegerTrace
	telWaitFor(t, ctx, "the slowest request's trace in Jaeger with both services", 60*time.Second, func() (bool, error) {
		tr = jaegerTrace{}
		if err := getJSON(ctx, queryURL+"/api/traces/"+slowest, &tr); err != nil {
			return false, err
		}
		return hasServices(&tr, "ragtail-bench", "ragtail") && len(stageSpans(&tr)) >= len(jaegerStages), nil
	})
	checkJaegerTrace(t, &tr)

	// The diagnosis notebook reads the slowest traces from Jaeger (no admin API given).
	t.Run("diagnosis.ipynb from Jaeger", func(t *testing.T) {
		python := nbPython(t)
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		figures := filepath.Join(dir, "figures-jaeger")
		nb := executeNotebook(t, ctx, python, dir, filepath.Join(root, "notebooks", "diagnosis.ipynb"),
			[]string{"RAGTAIL_RESULTS=" + out, "JAEGER_URL=" + queryURL, "RAGTAIL_FIGURES=" + figures})
		nb.checkNoErrors(t)
		nb.checkFigures(t, figures, []string{"waterfalls"})
		text := nb.textOutputs()
		for _, want := range []string{"traces found: 3", "trace sources: Jaeger\n"} {
			if !strings.Contains(text, want) {
				t.Errorf("notebook output lacks %q:\n%s", want, text)
			}
		}
	})

	// An agentic request: its trace in Jaeger has the invoke_agent span over 4 chat spans and 3
	// execute_tool search spans, alternating on one clock, as /debug/traces shows it.
	t.Run("agentic trace", func(t *testing.T) {
		id := askAgent(t, api, "meta-llama/Meta-Llama-3-8B-Instruct")
		var at jaegerTrace
		telWaitFor(t, ctx, "the agentic request's trace in Jaeger", 60*time.Second, func() (bool, error) {
			at = jaegerTrace{}
			if err := getJSON(ctx, queryURL+"/api/traces/"+id, &at); err != nil {
				return false, err
			}
			n := map[string]int{}
			for _, d := range at.Data {
				for _, s := range d.Spans {
					n[strings.Split(s.OperationName, " ")[0]]++
				}
			}
			return n["invoke_agent"] == 1 && n["chat"] == 4 && n["execute_tool"] == 3, nil
		})
		checkAgentTrace(t, jaegerAgentSpans(&at), 3)
	})

	// Jaeger stopped: serve answers and bench completes without errors, through the environment.
	if err := jp.stop(); err != nil {
		t.Logf("jaeger exit: %v", err)
	}
	start := time.Now()
	runBenchBinary(t, ctx, bin, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + otlpHTTP},
		"--url", "http://"+api+"/v1/chat/completions", "--num-prompts", "40", "--concurrency", "4",
		"--max-tokens", "16", "--max-error-rate", "0")
	t.Logf("bench against a stopped Jaeger took %v (span flush bounded by %v)", time.Since(start), telemetry.ClientShutdownTimeout)
	nbWaitHTTP(t, ctx, "http://"+api+"/readyz")
}

// jaegerStages are the server spans every chat request's trace holds, by name or name prefix.
var jaegerStages = []string{"rag.pipeline", "rag.admission", "embeddings ", "retrieval ", "rag.fetch", "chat ", "rag.stream"}

// checkJaegerTrace checks the client span is the parent of the server span, and the stages.
func checkJaegerTrace(t *testing.T, tr *jaegerTrace) {
	t.Helper()
	d := tr.Data[0]
	var clientID, serverParent, serverID string
	for _, s := range d.Spans {
		switch svc := d.Processes[s.ProcessID].ServiceName; {
		case svc == "ragtail-bench" && strings.HasPrefix(s.OperationName, "chat "):
			clientID = s.SpanID
			if tag(s.Tags, "span.kind") != "client" || tag(s.Tags, "gen_ai.operation.name") != "chat" {
				t.Errorf("client span %q: span.kind %v, gen_ai.operation.name %v", s.OperationName, tag(s.Tags, "span.kind"), tag(s.Tags, "gen_ai.operation.name"))
			}
		case svc == "ragtail" && tag(s.Tags, "span.kind") == "server":
			serverID = s.SpanID
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					serverParent = r.SpanID
				}
			}
		}
	}
	if clientID == "" || serverID == "" {
		t.Fatalf("trace lacks the ragtail-bench client span (%q) or the ragtail server span (%q)", clientID, serverID)
	}
	if serverParent != clientID {
		t.Errorf("server span's parent is %q, want the ragtail-bench client span %q", serverParent, clientID)
	}
	got := stageSpans(tr)
	for _, want := range jaegerStages {
		if !got[want] {
			t.Errorf("trace lacks stage span %q; has %v", want, got)
		}
	}
}

// stageSpans returns which of jaegerStages the ragtail spans of tr hold.
func stageSpans(tr *jaegerTrace) map[string]bool {
	got := map[string]bool{}
	if len(tr.Data) == 0 {
		return got
	}
	d := tr.Data[0]
	for _, s := range d.Spans {
		if d.Processes[s.ProcessID].ServiceName != "ragtail" {
			continue
		}
		for _, want := range jaegerStages {
			if s.OperationName == want || (strings.HasSuffix(want, " ") && strings.HasPrefix(s.OperationName, want)) {
				got[want] = true
			}
		}
	}
	return got
}

func hasServices(tr *jaegerTrace, names ...string) bool {
	if len(tr.Data) == 0 {
		return false
	}
	seen := map[string]bool{}
	for _, p := range tr.Data[0].Processes {
		seen[p.ServiceName] = true
	}
	for _, n := range names {
		if !seen[n] {
			return false
		}
	}
	return true
}

func tag(tags []struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}, key string) any {
	for _, t := range tags {
		if t.Key == key {
			return t.Value
		}
	}
	return nil
}

// benchSlowest returns the trace id of the slowest request of a bench JSON.
func benchSlowest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Slowest []struct {
			TraceID string `json:"trace_id"`
		} `json:"slowest"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Slowest) == 0 || len(r.Slowest[0].TraceID) != 32 {
		t.Fatalf("bench JSON has no slowest request with a trace id: %+v", r.Slowest)
	}
	return r.Slowest[0].TraceID
}

// runBenchBinary runs the ragtail binary's bench with extra environment, failing on an error.
func runBenchBinary(t *testing.T, ctx context.Context, bin string, env []string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"bench", "--quiet"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ragtail bench %v: %v\n%s", args, err, out)
	}
	if !strings.Contains(string(out), "client spans (ragtail-bench)") {
		t.Errorf("bench did not say it exports client spans:\n%s", out)
	}
}

// startCmd starts cmd logging to dir/name.log and stops it with SIGTERM when the test ends.
func startCmd(t *testing.T, dir, name string, cmd *exec.Cmd) {
	t.Helper()
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &telProcess{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.stop()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
}

func getJSON(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// jaegerAgentSpans converts a Jaeger trace to the waterfall spans checkAgentTrace reads: start
// offsets from the trace's first span, parents from CHILD_OF references.
func jaegerAgentSpans(tr *jaegerTrace) []agentSpan {
	var out []agentSpan
	var first int64
	for _, d := range tr.Data {
		for _, s := range d.Spans {
			if first == 0 || s.StartTime < first {
				first = s.StartTime
			}
		}
	}
	for _, d := range tr.Data {
		for _, s := range d.Spans {
			a := agentSpan{Name: s.OperationName, SpanID: s.SpanID, StartOffsetMS: float64(s.StartTime-first) / 1e3, DurationMS: float64(s.Duration) / 1e3}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					a.Parent = r.SpanID
				}
			}
			out = append(out, a)
		}
	}
	return out
}
