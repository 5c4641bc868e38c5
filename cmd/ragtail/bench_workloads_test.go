package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestBenchMooncakeTrace replays a Mooncake trace against llm-sim with prefix caching: the
// requests are intended at the trace's times over the speedup, and the shared hash block
// shows as cached prompt tokens in the result.
func TestBenchMooncakeTrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "mooncake.jsonl")
	if err := os.WriteFile(trace, []byte(`{"timestamp": 0, "input_length": 1000, "output_length": 4, "hash_ids": [7, 8]}
{"timestamp": 30, "input_length": 1000, "output_length": 4, "hash_ids": [7, 9]}
{"timestamp": 60, "input_length": 900, "output_length": 4, "hash_ids": [10, 11]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		caching    bool
		wantCached bool
	}{
		{"prefix caching", true, true},
		{"no prefix caching", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := tinyProfile(t)
			p.PrefixCaching = tt.caching
			srv := startLLMSim(t, p, llmsim.WithVirtualTime())
			out, detailed := filepath.Join(t.TempDir(), "r.json"), filepath.Join(t.TempDir(), "d.jsonl")
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--quiet",
				"--dataset", "mooncake:" + trace, "--trace-speedup", "2", "--json", out, "--save-detailed", detailed}, &stdout, &stderr)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			r := readJSON(t, out)
			if r["completed"] != 3.0 || r["failed"] != 0.0 {
				t.Fatalf("completed %v failed %v\n%s", r["completed"], r["failed"], stdout.String())
			}
			cached, _ := r["total_cached_tokens"].(float64)
			if got := cached >= 496; got != tt.wantCached {
				// Request 2 shares one 512-word block with request 1: at least 31 of llm-sim's
				// 16-token blocks.
				t.Errorf("total_cached_tokens %v, want >= 496: %v", r["total_cached_tokens"], tt.wantCached)
			}
			if !strings.Contains(stdout.String(), "mooncake trace mooncake.jsonl replayed at 2x") {
				t.Errorf("stdout does not name the trace:\n%s", stdout.String())
			}
			if got, want := intended(t, detailed), []float64{0, 15e6, 30e6}; !slices.Equal(got, want) {
				t.Errorf("intended send offsets %v ns, want %v", got, want)
			}
		})
	}
}

// intended returns the intended send offsets of a --save-detailed file's records, in order.
func intended(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []float64
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			I        *int    `json:"i"`
			Intended float64 `json:"intended_ns"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.I != nil {
			out = append(out, rec.Intended)
		}
	}
	slices.Sort(out)
	return out
}

func TestBenchTraceFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "azure.csv")
	if err := os.WriteFile(trace, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"--dataset", "burstgpt:" + filepath.Join(dir, "none.csv")}, "no such file"},
		{"wrong format", []string{"--dataset", "mooncake:" + trace}, "line 1"},
		{"bad speedup", []string{"--dataset", "azure:" + trace, "--trace-speedup", "0.0", "--trace-start", "-1s"}, "must not be negative"},
		{"empty window", []string{"--dataset", "azure:" + trace, "--trace-start", "1h"}, "holds none"},
		{"speedup of 1e-300", []string{"--dataset", "azure:" + trace, "--trace-speedup", "1e-300"}, "speedup 1e-300 is outside 0.001 to 1e+06"},
		{"with a rate", []string{"--dataset", "azure:" + trace, "--request-rate", "5"}, "not a request rate"},
		{"with sessions", []string{"--dataset", "azure:" + trace, "--sessions", "synthetic"}, "does not combine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"bench", "--url", "http://127.0.0.1:1/v1/chat/completions", "--model", "m"}, tt.args...), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestBenchClockStartsAfterPreflight checks that the run's origin comes after the preflight
// response, so that waiting for it is no request's send lag: the first request the server
// sees after the preflight is never before the recorded start.
func TestBenchClockStartsAfterPreflight(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var preflightDone time.Time
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			time.Sleep(200 * time.Millisecond) // a slow first answer: a cold server
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		if first {
			mu.Lock()
			preflightDone = time.Now()
			mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	detailed := filepath.Join(t.TempDir(), "d.jsonl")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--model", "m", "--quiet",
		"--request-rate", "100", "--num-prompts", "3", "--dataset", "short", "--save-detailed", detailed}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(detailed)
	if err != nil {
		t.Fatal(err)
	}
	var header struct {
		Start time.Time `json:"start"`
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	if err := json.Unmarshal(line, &header); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if header.Start.Before(preflightDone) {
		t.Errorf("the run started at %v, %v before the preflight's answer", header.Start, preflightDone.Sub(header.Start))
	}
}
