package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	wire "github.com/ragtail/ragtail/rag/openai"
)

// startLLMSimCommand runs `ragtail llm-sim` with args until the test ends and returns its
// address.
func startLLMSimCommand(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"llm-sim", "--addr", "127.0.0.1:0", "--log-level", "warn"}, args...), stdout, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("llm-sim returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("llm-sim did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := servingLine.FindStringSubmatch(stdout.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-errc:
			t.Fatalf("llm-sim exited early: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("llm-sim did not start within 10 s")
	return ""
}

func llmSimChat(t *testing.T, addr, body string) wire.ChatCompletion {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c wire.ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, decode %v", resp.StatusCode, err)
	}
	return c
}

// The engine flags reach the engine: prefix caching caches, the reasoning tokens are produced,
// and /metrics shows the counters and the memory gauge.
func TestLLMSimEngineFlags(t *testing.T) {
	t.Parallel()
	addr := startLLMSimCommand(t, "--profile", "tiny", "--enable-prefix-caching", "--reasoning-tokens", "4",
		"--block-size", "32", "--max-num-seqs", "4")
	system := strings.TrimSpace(strings.Repeat("why ", 200))
	body := func(question string) string {
		return `{"model":"ragtail-tiny","max_tokens":10,"messages":[{"role":"system","content":"` + system +
			`"},{"role":"user","content":"` + question + `"}]}`
	}
	first := llmSimChat(t, addr, body("alpha"))
	second := llmSimChat(t, addr, body("bravo"))
	// 208 shared tokens with the framing: 6 full blocks of 32.
	if first.Usage.PromptTokensDetails != nil || second.Usage.PromptTokensDetails == nil || second.Usage.PromptTokensDetails.CachedTokens != 6*32 {
		t.Errorf("prompt token details %+v then %+v, want none then 192 cached tokens", first.Usage.PromptTokensDetails, second.Usage.PromptTokensDetails)
	}
	if d := second.Usage.CompletionTokensDetails; d == nil || d.ReasoningTokens != 4 || second.Usage.CompletionTokens != 10 || second.Choices[0].Message.ReasoningContent == "" {
		t.Errorf("usage %+v, message %+v: want 4 of the 10 completion tokens reasoning", second.Usage, second.Choices[0].Message)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`vllm:prefix_cache_hits_total{model_name="ragtail-tiny"} 192`,
		`DCGM_FI_DEV_FB_USED{device="nvidia0",gpu="0",modelName="ragtail-tiny-gpu"} 644`,
	} {
		if !bytes.Contains(text, []byte(want+"\n")) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestLLMSimRejectsBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"contradiction", []string{"--enable-prefix-caching", "--no-enable-prefix-caching"}, "contradict"},
		{"utilization", []string{"--gpu-memory-utilization", "1.2"}, "--gpu-memory-utilization"},
		{"context beyond the cache", []string{"--profile", "tiny", "--num-gpu-blocks-override", "64"}, "--max-model-len 2048 is larger"},
		{"reasoning", []string{"--reasoning-tokens", "-1"}, "--reasoning-tokens"},
		{"unchunked budget", []string{"--no-enable-chunked-prefill", "--max-num-batched-tokens", "1024"}, "without chunked prefill"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"llm-sim", "--addr", "127.0.0.1:0"}, tt.args...), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.msg)
			}
		})
	}
}

func TestLLMSimHelpExplainsEngineFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"llm-sim", "--help"}, &out, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("help: %v", err)
	}
	for _, f := range []string{"max-num-seqs", "max-model-len", "max-num-batched-tokens", "block-size", "num-gpu-blocks-override",
		"gpu-memory-utilization", "enable-chunked-prefill", "enable-prefix-caching", "reasoning-tokens", "DCGM_FI_DEV_FB_USED"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

// `ragtail serve` on its embedded engine shows the simulated memory on its admin /metrics too,
// through the engine's collector.
func TestLLMSimMemoryGaugeOnServe(t *testing.T) {
	t.Parallel()
	addr, _, _ := startServe(t, "--profile", "tiny", "--corpus-docs", "40")
	admin := adminAddrOf(t, addr)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// Idle: the tiny profile's 500 MiB of weights and 144 MiB of activations.
	if want := `DCGM_FI_DEV_FB_USED{device="nvidia0",gpu="0",modelName="ragtail-tiny-gpu"} 644`; !bytes.Contains(text, []byte(want+"\n")) {
		t.Errorf("serve's /metrics lacks %q", want)
	}
}
