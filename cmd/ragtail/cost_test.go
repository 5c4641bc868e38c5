package main

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestBenchCostAndEnergy: against llm-sim on the A100 profile, bench prices the run from
// --gpu-cost-per-hour and --gpus over its measured window, and reads the energy the simulated
// GPU drew from the DCGM energy counter it scraped: between the profile's idle power and its
// TDP over the scraped span, and per output token.
func TestBenchCostAndEnergy(t *testing.T) {
	t.Parallel()
	p, err := llmsim.ProfileByName("llama3-8b-awq-a100")
	if err != nil {
		t.Fatal(err)
	}
	srv := startLLMSim(t, p)
	out := filepath.Join(t.TempDir(), "cost.json")
	err = run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions", "--request-rate", "10",
		"--num-prompts", "40", "--max-tokens", "8", "--dataset", "short", "--gpu-cost-per-hour", "2.5", "--gpus", "2",
		"--quiet", "--json", out}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := readJSON(t, out)
	dur, _ := r["duration_s"].(float64)
	done, _ := r["completed"].(float64)
	outTok, _ := r["total_output_tokens"].(float64)
	opts, _ := r["options"].(map[string]any)
	if opts["usd_per_gpu_hour"] != 2.5 || opts["gpus"] != 2.0 {
		t.Errorf("options %v: want the pricing", opts)
	}
	cost, _ := r["cost"].(map[string]any)
	usd, _ := cost["usd"].(float64)
	perReq, _ := cost["usd_per_request"].(float64)
	if want := 2.5 * 2 * dur / 3600; math.Abs(usd-want) > 1e-3*want || math.Abs(perReq-usd/done) > 1e-3*perReq {
		t.Errorf("cost %v over %v s and %v requests: want $%.6f in all", cost, dur, done, want)
	}
	energy, _ := r["energy"].(map[string]any)
	joules, _ := energy["joules"].(float64)
	span, _ := energy["scraped_span_s"].(float64)
	perTok, _ := energy["joules_per_output_token"].(float64)
	if energy["source"] != "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" || span < 1 {
		t.Fatalf("energy %v: want the DCGM energy counter over at least two scrapes", energy)
	}
	// The counter rounds to whole mJ at each scrape: a few mJ of slack.
	if joules < p.IdleWatts*span-0.01 || joules > p.TDPWatts*span+0.01 {
		t.Errorf("%v J over %v s: want between %v W and %v W", joules, span, p.IdleWatts, p.TDPWatts)
	}
	if math.Abs(perTok-joules/outTok) > 1e-3*perTok {
		t.Errorf("%v J per output token, want %v / %v", perTok, joules, outTok)
	}
}
