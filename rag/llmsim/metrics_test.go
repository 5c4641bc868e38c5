package llmsim_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// scrape returns the Prometheus text exposition of c.
func scrape(tb testing.TB, c prometheus.Collector) string {
	tb.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		tb.Fatalf("register: %v", err)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// wantMetrics fails the test for every line of want missing from the exposition of c.
func wantMetrics(tb testing.TB, c prometheus.Collector, want ...string) {
	tb.Helper()
	text := scrape(tb, c)
	for _, line := range want {
		if !strings.Contains(text, line+"\n") {
			tb.Errorf("metrics lack %q", line)
		}
	}
}

// The simulated device memory is the weights, the activation reserve and the KV-cache blocks
// held, exported in MiB under dcgm-exporter's name.
func TestMemoryGauge(t *testing.T) {
	t.Parallel()
	p := profile(t, "tiny")
	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	const blockMiB = 16 * 64 / 1024 // 16 tokens x 64 KiB
	gauge := func(mib int) []string {
		return []string{"# TYPE DCGM_FI_DEV_FB_USED gauge",
			fmt.Sprintf(`DCGM_FI_DEV_FB_USED{device="nvidia0",gpu="0",modelName="ragtail-tiny-gpu"} %d`, mib)}
	}
	idle := 500 + 144 // weights and activations of the tiny profile, MiB
	wantMetrics(t, e.Collector(), gauge(idle)...)
	a := submit(t, e, "a", 100, 40) // 7 blocks to start
	b := submit(t, e, "b", 33, 40)  // 3 blocks
	if _, err := e.Step(); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.BlocksUsed != 10 || st.MemoryUsedBytes != p.MemoryUsed(10) {
		t.Fatalf("blocks used %d, memory %d; want 10 blocks and %d bytes", st.BlocksUsed, st.MemoryUsedBytes, p.MemoryUsed(10))
	}
	wantMetrics(t, e.Collector(), gauge(idle+10*blockMiB)...)
	stepAll(t, e)
	drain(t, a)
	drain(t, b)
	wantMetrics(t, e.Collector(), gauge(idle)...)
}

func TestProfileMemoryModel(t *testing.T) {
	t.Parallel()
	for _, p := range llmsim.Profiles() {
		if got := p.BlocksForMemory(llmsim.GPUMemoryUtilization); got != p.NumBlocks {
			t.Errorf("%s: %d blocks from its memory at the default utilization, but the profile has %d", p.Name, got, p.NumBlocks)
		}
		if used := p.MemoryUsed(p.NumBlocks); float64(used) > float64(p.GPUMemoryBytes)*llmsim.GPUMemoryUtilization {
			t.Errorf("%s: a full KV cache needs %d bytes, more than %.0f%% of %d", p.Name, used, 100*llmsim.GPUMemoryUtilization, p.GPUMemoryBytes)
		}
	}
	fp16, awq := profile(t, "llama3-8b-a100"), profile(t, "llama3-8b-awq-a100")
	tests := []struct {
		name      string
		got, want float64
		tolerance float64
	}{
		// Public sizes: 16.06 GB of FP16 weights, 5.73 GB of AWQ safetensors.
		{name: "FP16 weights GB", got: float64(fp16.WeightBytes) / 1e9, want: 16.06, tolerance: 0.01},
		{name: "AWQ weights GB", got: float64(awq.WeightBytes) / 1e9, want: 5.73, tolerance: 0.01},
		// Decode is bound by the weight read, so its floor (less the engine's fixed per-step
		// cost) shrinks with the weights.
		{name: "decode floor ratio", got: float64(fp16.StepOverhead-llmsim.StepFloor()) / float64(awq.StepOverhead-llmsim.StepFloor()),
			want: float64(fp16.WeightBytes) / float64(awq.WeightBytes), tolerance: 1e-3},
		// The memory the weights give back goes to the KV cache.
		{name: "extra KV blocks", got: float64(awq.NumBlocks - fp16.NumBlocks),
			want: float64(fp16.WeightBytes-awq.WeightBytes) / float64(fp16.BlockBytes()), tolerance: 1},
	}
	for _, tt := range tests {
		if d := tt.got - tt.want; d > tt.tolerance || d < -tt.tolerance {
			t.Errorf("%s: %v, want %v within %v", tt.name, tt.got, tt.want, tt.tolerance)
		}
	}
	if awq.PrefillPerToken != fp16.PrefillPerToken || awq.DecodePerSeq != fp16.DecodePerSeq || awq.AttentionPerKVToken != fp16.AttentionPerKVToken {
		t.Errorf("AWQ compute costs differ from FP16: weight-only quantization leaves the FLOPs and the FP16 KV cache alone")
	}
}

// Prefix-cache hits reach the client as usage.prompt_tokens_details.cached_tokens, streamed or
// not, and /metrics counts queries and hits in tokens.
func TestHandlerPrefixCache(t *testing.T) {
	t.Parallel()
	p := prefixCaching(t, "tiny")
	e := newEngine(t, p, llmsim.WithVirtualTime())
	srv := newServer(t, e)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	system := words("why", 200) // with framing, 13 full blocks shared by every request below
	params := func(question string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{
			Model:     "ragtail-tiny",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(question)},
			MaxTokens: openai.Int(6),
		}
	}
	const cached = 13 * 16
	var prompts int64
	first, err := client.Chat.Completions.New(t.Context(), params("alpha"))
	if err != nil {
		t.Fatal(err)
	}
	prompts += first.Usage.PromptTokens
	if first.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("first request: %d cached tokens", first.Usage.PromptTokensDetails.CachedTokens)
	}

	second, err := client.Chat.Completions.New(t.Context(), params("bravo"))
	if err != nil {
		t.Fatal(err)
	}
	prompts += second.Usage.PromptTokens
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != cached {
		t.Errorf("non-streamed: %d cached tokens, want %d", got, cached)
	}

	sp := params("charly")
	sp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(t.Context(), sp)
	var usage openai.CompletionUsage
	for stream.Next() {
		if c := stream.Current(); c.JSON.Usage.Valid() && c.Usage.TotalTokens > 0 {
			usage = c.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	_ = stream.Close()
	prompts += usage.PromptTokens
	if got := usage.PromptTokensDetails.CachedTokens; got != cached {
		t.Errorf("streamed usage chunk: %d cached tokens, want %d", got, cached)
	}
	if want := int64(rag.PromptTokens([]rag.Message{{Role: "system", Content: system}, {Role: "user", Content: "charly"}})); usage.PromptTokens != want {
		t.Errorf("prompt tokens %d, want %d: cached tokens are still prompt tokens", usage.PromptTokens, want)
	}

	wantMetrics(t, e.Collector(),
		"# TYPE vllm:prefix_cache_hits_total counter",
		fmt.Sprintf(`vllm:prefix_cache_hits_total{model_name="ragtail-tiny"} %d`, 2*cached),
		"# TYPE vllm:prefix_cache_queries_total counter",
		fmt.Sprintf(`vllm:prefix_cache_queries_total{model_name="ragtail-tiny"} %d`, prompts))
}
