//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/loadgen/dashboard"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// dashboardBody is the page's body tag, where it says how many points it drew.
var dashboardBody = regexp.MustCompile(`<body[^>]*data-points="(\d+)"[^>]*data-final="(true|false)"`)

// TestDashboardInChromium runs `ragtail bench --dashboard` against llm-sim for 9 s, renders the
// live page in headless Chromium mid-run (a screenshot that is not blank, and the DOM's count
// of drawn points), checks through the JSON endpoint that the series grew between two reads,
// and that the page ends on the final report. RAGTAIL_DASHBOARD_SCREENSHOT=FILE keeps the
// mid-run screenshot.
func TestDashboardInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("make e2e needs headless Chromium: apt-get install chromium")
	}
	prof, err := llmsim.ProfileByName(llmsim.DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	srv := startLLMSim(t, prof)
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	url := "http://" + addr + "/"

	stderr := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"bench", "--url", srv.URL + "/v1/chat/completions",
			"--model", prof.Model, "--request-rate", "20", "--duration", "9s", "--max-tokens", "64",
			"--dataset", "short", "--quiet", "--server-metrics", srv.URL + "/metrics",
			"--dashboard", addr, "--dashboard-linger", "15s"}, io.Discard, stderr)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	state := func() *dashboard.State {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"api/state?from=0", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("dashboard: %v\n%s", err, stderr.String())
		}
		defer resp.Body.Close()
		var st dashboard.State
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return &st
	}

	// First read once the run has gone a few seconds.
	var first *dashboard.State
	for first == nil || len(first.Points) < 3 {
		select {
		case err := <-done:
			t.Fatalf("bench ended early: %v\n%s", err, stderr.String())
		case <-time.After(500 * time.Millisecond):
		}
		first = state()
	}

	// Render the page mid-run.
	dir := t.TempDir()
	shot := filepath.Join(dir, "dashboard.png")
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1200,1600", "--virtual-time-budget=2500",
		"--dump-dom", "--screenshot="+shot, url)
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	m := dashboardBody.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("the page's DOM has no body with data-points: %.500s", dom)
	}
	drawn, _ := strconv.Atoi(string(m[1]))
	if drawn < len(first.Points) || string(m[2]) != "false" {
		t.Errorf("the page drew %s points (final %s) mid-run, want at least the %d of the first read", m[1], m[2], len(first.Points))
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	frac, colors := inked(img)
	if frac < 0.02 || colors < 8 {
		t.Errorf("screenshot looks blank: %.1f%% of pixels differ from the background, %d colours", 100*frac, colors)
	}
	if keep := os.Getenv("RAGTAIL_DASHBOARD_SCREENSHOT"); keep != "" {
		b, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile(keep, b, 0o644)
		}
		if err != nil {
			t.Errorf("RAGTAIL_DASHBOARD_SCREENSHOT: %v", err)
		}
	}

	// Second read at least two seconds after the first: the series grew.
	time.Sleep(time.Until(first.Started.Add(time.Duration((first.Elapsed + 2) * float64(time.Second)))))
	second := state()
	if second.Final {
		t.Fatal("the run ended before the second read: lengthen it")
	}
	grew := func(name string, a, b int) {
		if b <= a {
			t.Errorf("%s did not grow: %d then %d", name, a, b)
		}
	}
	grew("points", len(first.Points), len(second.Points))
	grew("completed", first.Totals.Completed, second.Totals.Completed)
	ttft := func(st *dashboard.State) int {
		n := 0
		for _, p := range st.Points {
			if p.TTFT.P99 != nil {
				n++
			}
		}
		return n
	}
	grew("points with a TTFT P99", ttft(first), ttft(second))
	server := func(st *dashboard.State) int {
		n := 0
		for _, p := range st.Points {
			if _, ok := p.Server[fmt.Sprintf("vllm:num_requests_running{model_name=%q}", prof.Model)]; ok {
				n++
			}
		}
		return n
	}
	grew("points with vllm:num_requests_running", server(first), server(second))
	t.Logf("first read at %.1f s: %d points (%d with TTFT P99, %d with the engine's running gauge), %d completed",
		first.Elapsed, len(first.Points), ttft(first), server(first), first.Totals.Completed)
	t.Logf("page rendered mid-run: %d points drawn, screenshot %.1f%% inked, %d colours", drawn, 100*frac, colors)
	t.Logf("second read at %.1f s: %d points (%d with TTFT P99, %d with the engine's running gauge), %d completed",
		second.Elapsed, len(second.Points), ttft(second), server(second), second.Totals.Completed)

	// The run ends: the page's JSON says so and the report is served; loading it lets the
	// command end before its linger.
	for !second.Final {
		select {
		case err := <-done:
			t.Fatalf("bench ended before its dashboard was final: %v\n%s", err, stderr.String())
		case <-time.After(500 * time.Millisecond):
		}
		second = state()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"report", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !regexp.MustCompile(`ragtail bench report`).Match(body) {
		t.Errorf("final report: %d, %d bytes", resp.StatusCode, len(body))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bench: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bench lingered after the report was loaded")
	}
	t.Logf("final: %d points, %d completed, %d failed", len(second.Points), second.Totals.Completed, second.Totals.Failed)
}
