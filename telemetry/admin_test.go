package telemetry_test

import (
	"encoding/json"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/telemetry"
)

// TestAdminEndpoints drives a load through the service and reads it back from the admin
// listener: the slowest traces with their stage durations, and the metrics with exemplars.
func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	// A uniform embed latency spreads the request durations so that "slowest" means something.
	law, err := latency.Parse("uniform:1ms,40ms")
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, telemetry.Config{RingRecent: 128, RingSlowest: 16}, stackOptions{embedLatency: law})
	const n = 40
	answers := s.load(t, n, 4, 4)
	timing := map[string]string{} // trace id -> Server-Timing
	for i, a := range answers {
		if a.err != nil || a.status != 200 || !a.complete || !isTraceID(a.traceID) {
			t.Fatalf("request %d: status %d, complete %v, trace %q, err %v", i, a.status, a.complete, a.traceID, a.err)
		}
		timing[a.traceID] = a.serverTiming
	}
	s.waitTraces(t, n)

	t.Run("slowest traces with stage durations", func(t *testing.T) {
		var all, slowest telemetry.TraceList
		for url, into := range map[string]*telemetry.TraceList{
			s.admin.URL + "/debug/traces?limit=128": &all, s.admin.URL + "/debug/traces?slowest=5": &slowest} {
			code, body := get(t, url)
			if code != 200 || json.Unmarshal([]byte(body), into) != nil {
				t.Fatalf("GET %s: %d %s", url, code, body)
			}
		}
		if all.Count != n {
			t.Fatalf("%d recent traces, want %d", all.Count, n)
		}
		durations := make([]float64, 0, n)
		for _, v := range all.Traces {
			durations = append(durations, v.DurationMS)
		}
		slices.Sort(durations)
		slices.Reverse(durations)
		if slowest.Count != 5 || slowest.Kind != "slowest" {
			t.Fatalf("slowest list: kind %q, %d traces", slowest.Kind, slowest.Count)
		}
		for i, v := range slowest.Traces {
			if v.DurationMS != durations[i] {
				t.Errorf("slowest[%d] lasts %v ms, want the %d-th largest of all, %v ms", i, v.DurationMS, i+1, durations[i])
			}
			st, ok := timing[v.TraceID]
			if !ok {
				t.Fatalf("slowest trace %s is none of the requests sent", v.TraceID)
			}
			// The trace's stage durations are the Server-Timing the client got, to its rounding
			// (half a microsecond, and float64's error on a duration of exactly half one more).
			want := parseServerTiming(t, st)
			if len(v.Stages) != len(rag.Stages) {
				t.Errorf("trace %s stages %v, want all six", v.TraceID, v.Stages)
			}
			for stage, ms := range want {
				if math.Abs(v.Stages[stage]-ms) > 0.0005+1e-9 {
					t.Errorf("trace %s stage %s: %v ms in the trace, %v ms in Server-Timing", v.TraceID, stage, v.Stages[stage], ms)
				}
			}
			if len(v.Waterfall) < 1+1+6+4 {
				t.Errorf("trace %s waterfall has %d spans", v.TraceID, len(v.Waterfall))
			}
		}
	})

	t.Run("openmetrics with exemplars", func(t *testing.T) {
		code, body := get(t, s.admin.URL+"/metrics", "Accept", "application/openmetrics-text; version=1.0.0")
		if code != 200 || !strings.HasSuffix(body, "# EOF\n") {
			t.Fatalf("GET /metrics: %d, not OpenMetrics:\n%.500s", code, body)
		}
		exemplar := regexp.MustCompile(`trace_id="([0-9a-f]{32})"`)
		for _, name := range []string{"gen_ai_server_time_to_first_token_seconds_bucket", "rag_stage_duration_seconds_bucket"} {
			found := 0
			for line := range strings.SplitSeq(body, "\n") {
				if !strings.HasPrefix(line, name+"{") {
					continue
				}
				if m := exemplar.FindStringSubmatch(line); m != nil {
					if _, ok := timing[m[1]]; !ok {
						t.Errorf("%s exemplar names trace %s, not one of the requests", name, m[1])
					}
					found++
				}
			}
			if found == 0 {
				t.Errorf("no %s line with a trace_id exemplar", name)
			}
		}
		for _, name := range []string{
			"gen_ai_server_time_per_output_token_seconds", "gen_ai_server_request_duration_seconds",
			"gen_ai_client_operation_duration_seconds", "gen_ai_client_token_usage", "db_client_operation_duration_seconds",
			"rag_cache_requests_total", "rag_admission_queue_wait_seconds", "rag_inflight_requests",
			"rag_fault_injected_total", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
			"http_server_request_duration_seconds",
		} {
			if n, err := testutil.GatherAndCount(s.tel.Registry, name); err != nil || n == 0 {
				t.Errorf("/metrics lacks %s (%d series, %v)", name, n, err)
			}
		}
		// One series of each stage under the one coupling the requests used.
		if n, err := testutil.GatherAndCount(s.tel.Registry, "rag_stage_duration_seconds"); err != nil || n != len(rag.Stages) {
			t.Errorf("%d rag_stage_duration_seconds series (%v), want one per stage (%d)", n, err, len(rag.Stages))
		}
	})

	t.Run("promtool check metrics", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("promtool not installed (Debian: apt-get install prometheus); make e2e runs it")
		}
		_, body := get(t, s.admin.URL+"/metrics")
		problems := promtoolProblems(t, promtool, body)
		if len(problems) > 0 {
			t.Errorf("promtool check metrics:\n%s", strings.Join(problems, "\n"))
		}
	})
}

// promtoolProblems runs promtool check metrics on a text exposition and returns its complaints,
// except two, both names of other exporters kept on purpose so that their dashboards work
// against the simulator: vLLM's metric names (vllm:num_requests_running, ...) contain a colon,
// which promtool reserves for recording rules, and dcgm-exporter's DCGM_FI_DEV_FB_USED has
// camelCase labels (modelName). The real exporters draw the same complaints.
func promtoolProblems(tb testing.TB, promtool, exposition string) []string {
	tb.Helper()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	out, _ := cmd.CombinedOutput()
	var problems []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if line == "" || (strings.HasPrefix(line, "vllm:") && strings.HasSuffix(line, "metric names should not contain ':'")) ||
			(strings.HasPrefix(line, "DCGM_FI_") && strings.HasSuffix(line, "label names should be written in 'snake_case' not 'camelCase'")) {
			continue
		}
		problems = append(problems, line)
	}
	return problems
}
