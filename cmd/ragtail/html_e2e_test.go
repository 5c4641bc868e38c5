//go:build e2e

package main

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestSweepHTMLInChromium is the load generator's end-to-end acceptance: `ragtail sweep` on
// llm-sim (the simulated Llama-3-8B on an A100) finds a knee and the max RPS under P95 E2E <= 2 s,
// and its self-contained HTML report renders in headless Chromium (the Debian package) to a
// screenshot that is not blank.
func TestSweepHTMLInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("make e2e needs headless Chromium: apt-get install chromium")
	}
	prof, err := llmsim.ProfileByName(llmsim.DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	srv := startLLMSim(t, prof)
	dir := t.TempDir()
	out, html := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.html")
	var stdout, stderr bytes.Buffer
	// With 32-token answers to short prompts the engine keeps P95 E2E well under 2 s at 10 and
	// 40 req/s; at 320 req/s more sequences arrive than its 256 batch slots hold and the queue
	// grows for the whole point, so the ladder brackets the SLO and bisection narrows it.
	err = run(context.Background(), []string{"sweep", "--url", srv.URL + "/v1/chat/completions",
		"--model", prof.Model, "--rates", "10,40,160,320", "--point-duration", "4s", "--pause", "500ms",
		"--max-tokens", "32", "--dataset", "short", "--slo", "p95_e2el:2000", "--rps-tolerance", "40",
		"--quiet", "--json", out, "--html", html}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, stderr.String())
	}
	r := readJSON(t, out)
	knee, _ := r["knee"].(map[string]any)
	if knee == nil || knee["rate"] == nil || knee["method"] == nil {
		t.Errorf("no knee in %v", r["knee"])
	}
	if v, ok := r["max_rps_under_slo"].(float64); !ok || v <= 0 {
		t.Errorf("max_rps_under_slo = %v", r["max_rps_under_slo"])
	}
	t.Logf("knee %v, max RPS under P95 E2E <= 2 s: %v\n%s", knee, r["max_rps_under_slo"], stdout.String())

	shot := filepath.Join(dir, "sweep.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1200,1600", "--screenshot="+shot, "file://"+html)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, b)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if frac, colors := inked(img); frac < 0.02 || colors < 8 {
		t.Errorf("screenshot looks blank: %.1f%% of pixels differ from the background, %d colours", 100*frac, colors)
	}
}

// inked returns the fraction of pixels that differ from the top-left pixel's colour and the
// number of distinct colours (capped at 1000): a blank page is one colour.
func inked(img image.Image) (float64, int) {
	b := img.Bounds()
	bg := img.At(b.Min.X, b.Min.Y)
	br, bgG, bb, _ := bg.RGBA()
	colors := map[[3]uint32]bool{}
	differ, total := 0, 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			total++
			if r != br || g != bgG || bl != bb {
				differ++
			}
			if len(colors) < 1000 {
				colors[[3]uint32{r, g, bl}] = true
			}
		}
	}
	return float64(differ) / float64(total), len(colors)
}
