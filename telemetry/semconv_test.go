package telemetry_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ragtail/ragtail/telemetry"
)

// TestGenAIConventions serves requests with OTEL_SEMCONV_STABILITY_OPT_IN unset and with
// gen_ai_latest_experimental, and checks /metrics and the spans in each: semantic conventions
// v1.41's GenAI client names by default, the latest conventions' names instead with the switch,
// and in both, every metric the Prometheus rules and the diagnosis notebook query.
func TestGenAIConventions(t *testing.T) {
	v141 := []string{
		"gen_ai_client_operation_duration_seconds",
		"gen_ai_client_token_usage",
	}
	latest := []string{
		"gen_ai_client_inference_duration_seconds",
		"gen_ai_client_inference_time_to_first_chunk_seconds",
		"gen_ai_client_inference_time_per_output_chunk_seconds",
		"gen_ai_client_inference_usage_input_tokens_total",
		"gen_ai_client_inference_usage_output_tokens_total",
		"gen_ai_client_inference_usage_cache_read_input_tokens_total",
		"gen_ai_client_inference_usage_reasoning_output_tokens_total",
		"gen_ai_client_inference_operation_input_tokens",
		"gen_ai_client_inference_operation_output_tokens",
		"gen_ai_client_embeddings_duration_seconds",
		"gen_ai_client_embeddings_operation_input_tokens",
	}
	both := append([]string{
		"gen_ai_server_request_duration_seconds",
		"gen_ai_server_time_to_first_token_seconds",
		"gen_ai_server_time_per_output_token_seconds",
		"db_client_operation_duration_seconds",
		"rag_stage_duration_seconds",
		"rag_inflight_requests",
	}, queriedMetrics(t)...)
	for _, tc := range []struct {
		optIn        string
		want, absent []string
		topK         string // the retrieval span's top-k attribute
	}{
		{"", v141, latest, "gen_ai.request.top_k"},
		{"http," + telemetry.GenAILatestOptIn, latest, v141, "gen_ai.retrieval.top_k"},
	} {
		t.Run("opt-in="+tc.optIn, func(t *testing.T) {
			t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", tc.optIn)
			cfg, err := telemetry.FromEnv(os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			s := newStack(t, cfg, stackOptions{})
			for _, a := range s.load(t, 4, 2, 8) {
				if a.err != nil || a.status != 200 || !a.complete {
					t.Fatalf("request: status %d, complete %v, err %v", a.status, a.complete, a.err)
				}
			}
			for _, name := range slices.Concat(tc.want, both) {
				if n, err := testutil.GatherAndCount(s.tel.Registry, name); err != nil || n == 0 {
					t.Errorf("/metrics lacks %s (%v)", name, err)
				}
			}
			for _, name := range tc.absent {
				if n, err := testutil.GatherAndCount(s.tel.Registry, name); err != nil || n != 0 {
					t.Errorf("/metrics has %d series of %s, a name of the other conventions (%v)", n, name, err)
				}
			}
			s.waitTraces(t, 4)
			var found bool
			for _, tr := range s.tel.Ring.Recent(4) {
				for _, sp := range tr.Spans {
					if !strings.HasPrefix(sp.Name(), "retrieval ") {
						continue
					}
					for _, kv := range sp.Attributes() {
						switch string(kv.Key) {
						case tc.topK:
							found = true
						case "gen_ai.request.top_k", "gen_ai.retrieval.top_k":
							t.Errorf("retrieval span has %s, want %s", kv.Key, tc.topK)
						}
					}
				}
			}
			if !found {
				t.Errorf("no retrieval span with %s", tc.topK)
			}
		})
	}
}

// queriedMetrics returns the metric families of ragtail's that the Prometheus recording rules and
// the diagnosis notebook query.
func queriedMetrics(tb testing.TB) []string {
	tb.Helper()
	var names []string
	re := regexp.MustCompile(`\b(gen_ai_[a-z_]+|rag_[a-z_]+|db_client_[a-z_]+)`)
	for _, f := range []string{"../prometheus/rules.yml", "../notebooks/diagnosis.ipynb"} {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, m := range re.FindAllString(string(b), -1) {
			series := strings.TrimSuffix(m, "_bucket")
			if !strings.HasSuffix(series, "_total") && !strings.HasSuffix(series, "_seconds") {
				continue // a recording rule's own name, or a label
			}
			if !slices.Contains(names, series) {
				names = append(names, series)
			}
		}
	}
	if len(names) == 0 {
		tb.Fatal("no metric names found in the rules and the notebook")
	}
	return names
}
