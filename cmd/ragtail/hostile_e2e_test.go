//go:build e2e

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testci"
)

// TestHostileInputE2E drives a built ragtail binary as a hostile client would: absurd strings,
// connections that stall after their headers, admin requests without a token off loopback, a
// cross-site write to a loopback admin, and bench against nothing.
func TestHostileInputE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ragtail")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, url, ctype, origin string, body []byte, header ...string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	// A loopback admin: cross-site writes are refused and change nothing.
	api, admin := telFreeAddr(t), telFreeAddr(t)
	serve := telStart(t, ctx, dir, "serve", bin, "serve", "--addr", api, "--admin-addr", admin, "--profile", "tiny",
		"--corpus-docs", "20", "--profiling=false", "--log-level", "warn")
	nbWaitHTTP(t, ctx, "http://"+api+"/readyz")

	t.Run("10,000 distinct 50 KB model names", func(t *testing.T) {
		rss := func() int64 {
			t.Helper()
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", serve.cmd.Process.Pid))
			if err != nil {
				testci.Skip(t, "no /proc here: %v", err)
			}
			for line := range strings.SplitSeq(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					return kb << 10
				}
			}
			t.Fatal("no VmRSS")
			return 0
		}
		before := rss()
		pad := strings.Repeat("m", 50<<10)
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < 10000; i += 8 {
					body := []byte(`{"model":"` + strconv.Itoa(i) + pad + `","messages":[{"role":"user","content":"hi"}]}`)
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+api+"/v1/chat/completions", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// Names under the length limit reach the pipeline as unknown models (404): they must
		// not each get their own series.
		short := strings.Repeat("s", 200)
		for i := range 500 {
			if code, _ := do(http.MethodPost, "http://"+api+"/v1/chat/completions", "application/json", "",
				[]byte(`{"model":"`+strconv.Itoa(i)+short+`","messages":[{"role":"user","content":"hi"}]}`)); code != http.StatusNotFound {
				t.Fatalf("an unknown 200-byte model name: %d, want 404", code)
			}
		}
		_, metrics := do(http.MethodGet, "http://"+admin+"/metrics", "", "", nil)
		models := map[string]bool{}
		for _, m := range regexp.MustCompile(`gen_ai_request_model="([^"]*)"`).FindAllStringSubmatch(string(metrics), -1) {
			models[m[1]] = true
		}
		growth := rss() - before
		t.Logf("10,000 distinct 50 KB model names and 500 unknown short ones: answers %v, RSS %+.1f MB, %d gen_ai_request_model values %v, /metrics %d KB",
			codes, float64(growth)/(1<<20), len(models), slices.Sorted(maps.Keys(models)), len(metrics)>>10)
		if growth > 50<<20 {
			t.Errorf("RSS grew %.1f MB under 10,000 distinct model names, want under 50 MB", float64(growth)/(1<<20))
		}
		if len(models) > 3 { // the served model, the embedder's, and _OTHER
			t.Errorf("gen_ai_request_model has %d values: %v", len(models), models)
		}
	})

	t.Run("absurd strings", func(t *testing.T) {
		huge := strings.Repeat("m", 1<<20)
		code, body := do(http.MethodPost, "http://"+api+"/v1/chat/completions", "application/json", "",
			[]byte(`{"model":"`+huge[:900<<10]+`","messages":[{"role":"user","content":"hi"}]}`))
		if code != http.StatusBadRequest || len(body) >= 4096 {
			t.Errorf("a 900 KB model name: %d with a %d-byte body, want 400 under 4 KB", code, len(body))
		}
		code, body = do(http.MethodPost, "http://"+api+"/v1/chat/completions", "application/json", "",
			[]byte(`{"model":"x","messages":[{"role":"user","content":"hi"}]}`), "X-User-ID", huge[:64<<10])
		if code != http.StatusBadRequest || len(body) >= 4096 {
			t.Errorf("a 64 KB X-User-ID: %d with a %d-byte body, want 400 under 4 KB", code, len(body))
		}
	})

	t.Run("stalled bodies", func(t *testing.T) {
		// 200 connections here (the 2,000 of the unit test need no binary): each sends its
		// headers and stops; the server must close every one while /healthz answers.
		var conns []net.Conn
		for range 200 {
			c, err := net.DialTimeout("tcp", api, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", api)
			conns = append(conns, c)
		}
		if code, _ := do(http.MethodGet, "http://"+api+"/healthz", "", "", nil); code != http.StatusOK {
			t.Errorf("/healthz with 200 stalled connections: %d", code)
		}
		open := 0
		for _, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(90 * time.Second)) // the body timeout is 30 s
			if _, err := io.ReadAll(c); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					open++
				}
			}
		}
		if open > 0 {
			t.Errorf("%d of 200 stalled connections still open 90 s later", open)
		}
	})

	t.Run("cross-site write to a loopback admin", func(t *testing.T) {
		_, before := do(http.MethodGet, "http://"+admin+"/admin/config", "", "", nil)
		code, _ := do(http.MethodPost, "http://"+admin+"/admin/config", "text/plain", "http://evil.example", []byte(`{"top_k":1}`))
		if code < 400 {
			t.Errorf("text/plain POST from a foreign origin: %d, want refused", code)
		}
		code, _ = do(http.MethodPut, "http://"+admin+"/admin/config", "application/json", "http://evil.example", []byte(`{"top_k":1}`))
		if code != http.StatusForbidden {
			t.Errorf("JSON PUT from a foreign origin: %d, want 403", code)
		}
		if _, after := do(http.MethodGet, "http://"+admin+"/admin/config", "", "", nil); !bytes.Equal(before, after) {
			t.Errorf("a refused write changed the config:\n%s\n%s", before, after)
		}
	})

	t.Run("admin off loopback", func(t *testing.T) {
		port := strings.TrimPrefix(telFreeAddr(t), "127.0.0.1:")
		api2 := telFreeAddr(t)
		// Without a token, serve refuses to start on a non-loopback admin address.
		out, err := exec.CommandContext(ctx, bin, "serve", "--addr", api2, "--admin-addr", "0.0.0.0:"+port, "--profile", "tiny",
			"--corpus-docs", "20", "--profiling=false").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "RAGTAIL_ADMIN_TOKEN") {
			t.Fatalf("serve off loopback without a token: %v\n%s", err, out)
		}
		cmd := exec.CommandContext(ctx, bin, "serve", "--addr", api2, "--admin-addr", "0.0.0.0:"+port, "--profile", "tiny",
			"--corpus-docs", "20", "--profiling=false", "--llm-api-key", "sk-never-shown")
		cmd.Env = append(cmd.Environ(), "RAGTAIL_ADMIN_TOKEN=e2e-token")
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		nbWaitHTTP(t, ctx, "http://"+api2+"/readyz")
		adminURL := "http://127.0.0.1:" + port // a sidecar on the host connects from loopback
		for _, path := range []string{"/metrics", "/debug/pprof/cmdline", "/debug/traces", "/admin/config", "/admin/stats"} {
			if code, _ := do(http.MethodGet, adminURL+path, "", "", nil); code != http.StatusUnauthorized {
				t.Errorf("GET %s without a token: %d, want 401", path, code)
			}
		}
		code, body := do(http.MethodGet, adminURL+"/debug/pprof/cmdline", "", "", nil, "Authorization", "Bearer e2e-token")
		if code != http.StatusOK || strings.Contains(string(body), "sk-never-shown") || !strings.Contains(string(body), "llm-api-key") {
			t.Errorf("cmdline with the token: %d %q, want the flag without its value", code, body)
		}
	})

	t.Run("bench against nothing", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, bin, "bench", "--url", "http://"+telFreeAddr(t), "--model", "m", "--num-prompts", "5").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || strings.Count(strings.TrimSpace(string(out)), "\n") > 0 {
			t.Errorf("bench against nothing listening: %v, output %q: want a non-zero exit with one line", err, out)
		}
	})
}
