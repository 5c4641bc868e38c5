package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestBenchMessagesAndResponses drives llm-sim's Anthropic Messages and OpenAI Responses
// endpoints (with two reasoning tokens a response, so that the first token and the first answer
// token differ) and checks each request's record against llm-sim's usage: every request
// completed, its output tokens are the usage's, and its first token came before its first answer
// token, and that before its end.
func TestBenchMessagesAndResponses(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithReasoningTokens(2))
	for _, route := range []string{"/v1/messages", "/v1/responses"} {
		t.Run(strings.TrimPrefix(route, "/v1/"), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out, detailed := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.jsonl")
			var stderr strings.Builder
			// No --model: bench asks GET /v1/models beside the endpoint.
			err := run(context.Background(), []string{"bench", "--url", srv.URL + route, "--concurrency", "4", "--num-prompts", "12",
				"--max-tokens", "10", "--json", out, "--save-detailed", detailed, "--percentile-metrics", "ttft,ttfo,e2el", "--quiet"}, io.Discard, &stderr)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			r := readJSON(t, out)
			cfg, _ := r["config"].(map[string]any)
			if r["completed"] != 12.0 || r["failed"] != 0.0 || cfg["model"] != "ragtail-tiny" {
				t.Fatalf("completed %v, failed %v (%v), model %v", r["completed"], r["failed"], r["errors"], cfg["model"])
			}
			if r["total_output_tokens"] != 120.0 {
				t.Errorf("total_output_tokens %v, want 12 requests x max_tokens 10 (llm-sim runs each to max_tokens)", r["total_output_tokens"])
			}
			f, err := os.Open(detailed)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			n := 0
			for sc := bufio.NewScanner(f); sc.Scan(); {
				var rec map[string]any
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					t.Fatal(err)
				}
				if _, ok := rec["ttft_ms"]; !ok {
					continue // the header line
				}
				n++
				ttft, ttfo, e2el := rec["ttft_ms"].(float64), rec["ttfo_ms"].(float64), rec["e2el_ms"].(float64)
				// The reasoning's delta comes first; its answer's may arrive in the same read
				// when the machine is busy, at the same instant.
				if !(ttft > 0 && ttft <= ttfo && ttfo < e2el) {
					t.Errorf("ttft %v, ttfo %v, e2el %v: want 0 < ttft <= ttfo < e2el", ttft, ttfo, e2el)
				}
				// llm-sim sends the tokens made since its last event in one delta, so a delta may
				// carry several: at least the reasoning's and the answer's, at most one each.
				if chunks, _ := rec["chunks"].([]any); len(chunks) < 2 || len(chunks) > 10 {
					t.Errorf("%d chunks, want 2 to 10 deltas for llm-sim's 10 tokens", len(chunks))
				}
				if rec["output_tokens"] != 10.0 || rec["prompt_tokens"].(float64) <= 0 || rec["tokens_from_usage"] != true {
					t.Errorf("record %s: want 10 output tokens from the usage and the prompt's", sc.Bytes())
				}
			}
			if n != 12 {
				t.Errorf("%d detailed records, want 12", n)
			}
		})
	}
}

func TestBenchMessagesRefusesTheToolLoop(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	err := run(context.Background(), []string{"bench", "--url", "http://127.0.0.1:1/v1/messages", "--tools", "search", "--num-prompts", "1"}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error()+stderr.String(), "/messages or /responses --url") {
		t.Errorf("err %v, stderr %s: want the tool loop refused", err, stderr.String())
	}
}
