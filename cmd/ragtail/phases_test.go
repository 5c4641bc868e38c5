package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestBenchPhases runs a closed loop of 4 users with each HTTP client: at most 4 connections
// are opened (the preflight's may be reused), every other request reuses one, and the JSON and
// the text report carry the phases.
func TestBenchPhases(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	for _, hc := range []string{"h1", "net/http"} {
		t.Run(strings.ReplaceAll(hc, "/", "-"), func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "r.json")
			var stdout bytes.Buffer
			err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--http-client", hc,
				"--concurrency", "4", "--num-prompts", "40", "--max-tokens", "8", "--quiet", "--json", out,
				"--fail-on", "new_connections<=4,p50_ttfb_ms>0"}, &stdout, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			r := readJSON(t, out)
			created, _ := r["new_connections"].(float64)
			reused, _ := r["reused_connections"].(float64)
			if created < 1 || created > 4 || created+reused != 40 {
				t.Errorf("%v new and %v reused connections; want 1 to 4 new, 40 in all", created, reused)
			}
			for _, k := range []string{"p50_connect_ms", "p50_connect_ms_ci", "mean_ttfb_ms", "p99_ttfb_ms"} {
				if _, ok := r[k]; !ok {
					t.Errorf("the JSON lacks %s", k)
				}
			}
			if _, ok := r["p50_dns_ms"]; ok {
				t.Error("a DNS phase for an IP address")
			}
			if !strings.Contains(stdout.String(), "HTTP phases (ms; ") || !strings.Contains(stdout.String(), "\nconnect ") {
				t.Errorf("the text report lacks the phases:\n%s", stdout.String())
			}
		})
	}
}

func TestBenchSlices(t *testing.T) {
	t.Parallel()
	srv := startLLMSim(t, tinyProfile(t), llmsim.WithVirtualTime())
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout bytes.Buffer
	err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--request-rate", "100",
		"--shape", "constant", "--duration", "1s", "--max-tokens", "8", "--slice", "250ms", "--quiet", "--json", out}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := readJSON(t, out)
	slices, _ := r["slices"].([]any)
	var sent float64
	for _, s := range slices {
		sl, _ := s.(map[string]any)
		n, _ := sl["sent"].(float64)
		sent += n
		if _, ok := sl["p50_ttft_ms_ci"]; !ok {
			t.Errorf("slice %v lacks p50_ttft_ms_ci", sl["t_s"])
		}
	}
	if len(slices) < 4 || len(slices) > 5 || sent != r["completed"].(float64)+r["failed"].(float64) {
		t.Errorf("%d slices sending %v requests; want 4 (5 with the drain), all %v+%v", len(slices), sent, r["completed"], r["failed"])
	}
	if !strings.Contains(stdout.String(), "Slices of 250ms") {
		t.Errorf("the text report lacks the slices:\n%s", stdout.String())
	}
	if err := run(context.Background(), []string{"bench", "--url", srv.URL, "--num-prompts", "1", "--slice", "1ms"}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--slice") {
		t.Errorf("a 1ms slice: %v", err)
	}
}
