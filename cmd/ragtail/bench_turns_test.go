package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestBenchTTFOAgainstLLMSim runs bench against llm-sim streaming 20 reasoning tokens before
// each answer: TTFO comes at least 20 engine steps (of at least the tiny profile's 1 ms step
// overhead each) after TTFT, and every request counts as reasoned.
func TestBenchTTFOAgainstLLMSim(t *testing.T) {
	t.Parallel()
	const reasoning, n = 20, 12
	p := tinyProfile(t)
	srv := startLLMSim(t, p, llmsim.WithReasoningTokens(reasoning))
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--quiet", "--dataset", "short",
		"--num-prompts", "12", "--concurrency", "1", "--max-tokens", "30", "--json", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	if r["completed"] != float64(n) || r["reasoning_requests"] != float64(n) || r["total_reasoning_tokens"] != float64(n*reasoning) {
		t.Fatalf("completed %v, reasoning requests %v, reasoning tokens %v", r["completed"], r["reasoning_requests"], r["total_reasoning_tokens"])
	}
	ttft, _ := r["mean_ttft_ms"].(float64)
	ttfo, _ := r["mean_ttfo_ms"].(float64)
	if floor := float64(reasoning) * float64(p.StepOverhead) / 1e6; ttfo-ttft < floor {
		t.Errorf("mean TTFO %.2f ms - TTFT %.2f ms below %d reasoning steps of at least %.2f ms", ttfo, ttft, reasoning, floor/reasoning)
	}
	if !strings.Contains(stdout.String(), "Time to First Output Token") {
		t.Errorf("text report has no TTFO section:\n%s", stdout.String())
	}
}

// TestBenchMultiTurnAgainstLLMSim replays ShareGPT conversations turn by turn: every turn's
// prompt carries the earlier turns and llm-sim's answers, so it grows step by step.
func TestBenchMultiTurnAgainstLLMSim(t *testing.T) {
	t.Parallel()
	dataset := filepath.Join(t.TempDir(), "sharegpt.json")
	if err := os.WriteFile(dataset, []byte(`[
{"id": "a", "conversations": [{"from": "human", "value": "What limits the tail latency of retrieval?"}, {"from": "gpt", "value": "recorded"},
  {"from": "human", "value": "And how do caches change it?"}, {"from": "gpt", "value": "recorded"},
  {"from": "human", "value": "Summarise both answers."}, {"from": "gpt", "value": "recorded"}]},
{"id": "b", "conversations": [{"from": "human", "value": "Name a heavy-tailed distribution."}, {"from": "gpt", "value": "recorded"},
  {"from": "human", "value": "Why does it matter for P99?"}, {"from": "gpt", "value": "recorded"},
  {"from": "human", "value": "Give an example."}, {"from": "gpt", "value": "recorded"}]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--quiet", "--dataset", dataset,
		"--multi-turn", "--think", "0s", "--num-prompts", "4", "--concurrency", "2", "--max-tokens", "24", "--json", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	sessions, _ := r["sessions"].(map[string]any)
	if r["completed"] != 12.0 || sessions["count"] != 4.0 || sessions["completed"] != 4.0 {
		t.Fatalf("completed %v, sessions %v", r["completed"], sessions)
	}
	turns, _ := r["turns"].([]any)
	if len(turns) != 3 {
		t.Fatalf("turns %v, want 3", r["turns"])
	}
	var last float64
	for k, row := range turns {
		tr := row.(map[string]any)
		prompt, _ := tr["mean_prompt_tokens"].(float64)
		// Each turn adds the previous answer's 24 tokens and a new question.
		if tr["count"] != 4.0 || k > 0 && prompt < last+24 {
			t.Errorf("turn %d: %v, want 4 requests whose prompts grew by the 24-token answer at least (from %.1f)", k, tr, last)
		}
		last = prompt
	}
	if !strings.Contains(stdout.String(), "TTFT by session step") || !strings.Contains(stdout.String(), "conversations from sharegpt.json") {
		t.Errorf("text report has no turns table or does not name the conversations:\n%s", stdout.String())
	}
}

// TestBenchEmbeddingsAgainstServe drives ragtail serve's /v1/embeddings in batches.
func TestBenchEmbeddingsAgainstServe(t *testing.T) {
	t.Parallel()
	addr, _, _ := startServe(t, "--profile", "tiny", "--corpus-docs", "40")
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", "http://" + addr + "/v1/embeddings", "--quiet", "--dataset", "short",
		"--embed-batch", "4", "--num-prompts", "20", "--concurrency", "2", "--json", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	tokens, _ := r["total_input_tokens"].(float64)
	if r["completed"] != 20.0 || r["failed"] != 0.0 || r["embedding_inputs"] != 80.0 || tokens < 80*64 {
		t.Fatalf("completed %v failed %v inputs %v tokens %v (want 20, 0, 80, at least 64 per short prompt)\n%s",
			r["completed"], r["failed"], r["embedding_inputs"], tokens, stdout.String())
	}
	if r["median_e2el_ms"] == nil || r["embedding_input_throughput"] == nil {
		t.Errorf("no latency or throughput: %v %v", r["median_e2el_ms"], r["embedding_input_throughput"])
	}
	if !strings.Contains(stdout.String(), "Embedding throughput (inputs/s)") {
		t.Errorf("text report:\n%s", stdout.String())
	}

	// The flags it does not combine with say so.
	for _, args := range [][]string{{"--sessions", "synthetic"}, {"--multi-turn"}, {"--shape", "article"}} {
		err := run(context.Background(), append([]string{"bench", "--url", "http://" + addr + "/v1/embeddings", "--quiet", "--num-prompts", "2"}, args...), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "embeds the --dataset's prompts") {
			t.Errorf("%v: err %v", args, err)
		}
	}
	err = run(context.Background(), []string{"bench", "--url", "http://" + addr + "/v1/chat/completions", "--embed-batch", "8", "--num-prompts", "2"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--embed-batch applies to an embeddings endpoint") {
		t.Errorf("--embed-batch with a chat URL: err %v", err)
	}
}

// TestBenchSessionsFileMultiTurn replays a sessions file with --multi-turn against a server
// that checks the second chat step carries the first step's real answer.
func TestBenchSessionsFileMultiTurn(t *testing.T) {
	t.Parallel()
	sessions := filepath.Join(t.TempDir(), "sessions.jsonl")
	if err := os.WriteFile(sessions, []byte(`{"session": "u1", "step": 0, "request": {"prompt": "first"}}
{"session": "u1", "step": 1, "think_ms": 1, "request": {"messages": [{"role": "user", "content": "second"}]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen [][]map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
			return
		case "/v1/chat/completions":
		default:
			http.NotFound(w, r) // the metrics scrape, say
			return
		}
		var body struct {
			Messages []map[string]string `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		seen = append(seen, body.Messages)
		n := len(seen)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"answer number %d\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", n)
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--quiet", "--sessions", sessions,
		"--multi-turn", "--num-prompts", "1"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	// The preflight sends step 0 once; then the session's two steps.
	last := seen[len(seen)-1]
	first := seen[len(seen)-2]
	want := []map[string]string{{"role": "user", "content": "first"}, {"role": "assistant", "content": fmt.Sprintf("answer number %d", len(seen)-1)},
		{"role": "user", "content": "second"}}
	if len(seen) != 3 || len(first) != 1 || fmt.Sprint(last) != fmt.Sprint(want) {
		t.Errorf("requests %v: want the preflight, step 0 alone, then step 1 after step 0's answer %v", seen, want)
	}
}
