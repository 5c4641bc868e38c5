package telemetry_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/telemetry"
)

// TestGenAIConventions serves requests with OTEL_SEMCONV_STABILITY_OPT_IN unset and with
// gen_ai_latest_experimental, and checks /metrics and the spans in each: semantic conventions
// v1.41's GenAI client names by default, the latest conventions' names instead with the switch,
// and in both, every metric the Prometheus rules and the diagnosis notebook query.
func TestGenAIConventions(t *testing.T) {
	v141 := []string{
		"gen_ai_client_operation_duration_seconds_bucket{",
		"gen_ai_client_token_usage_bucket{",
	}
	latest := []string{
		"gen_ai_client_inference_duration_seconds_bucket{",
		"gen_ai_client_inference_time_to_first_chunk_seconds_bucket{",
		"gen_ai_client_inference_time_per_output_chunk_seconds_bucket{",
		"gen_ai_client_inference_usage_input_tokens_total{",
		"gen_ai_client_inference_usage_output_tokens_total{",
		"gen_ai_client_inference_usage_cache_read_input_tokens_total{",
		"gen_ai_client_inference_usage_reasoning_output_tokens_total{",
		"gen_ai_client_inference_operation_input_tokens_bucket{",
		"gen_ai_client_inference_operation_output_tokens_bucket{",
		"gen_ai_client_embeddings_duration_seconds_bucket{",
		"gen_ai_client_embeddings_operation_input_tokens_bucket{",
	}
	both := append([]string{
		"gen_ai_server_request_duration_seconds_bucket{",
		"gen_ai_server_time_to_first_token_seconds_bucket{",
		"gen_ai_server_time_per_output_token_seconds_bucket{",
		"db_client_operation_duration_seconds_bucket{",
		"rag_stage_duration_seconds_bucket{",
		"rag_inflight_requests{",
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
			_, body := get(t, s.admin.URL+"/metrics")
			for _, name := range slices.Concat(tc.want, both) {
				if !strings.Contains(body, name) {
					t.Errorf("/metrics lacks %s", strings.TrimSuffix(name, "{"))
				}
			}
			for _, name := range tc.absent {
				if strings.Contains(body, name) {
					t.Errorf("/metrics has %s, a name of the other conventions", strings.TrimSuffix(name, "{"))
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

// queriedMetrics returns the metrics of ragtail's that the Prometheus recording rules and the
// diagnosis notebook query, as the series prefix /metrics shows them ("name_bucket{" for a
// histogram).
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
			series := m + "{"
			switch {
			case strings.HasSuffix(m, "_bucket"), strings.HasSuffix(m, "_total"):
			case strings.HasSuffix(m, "_seconds"):
				series = m + "_bucket{"
			default:
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
