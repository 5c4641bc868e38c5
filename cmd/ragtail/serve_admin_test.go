package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestServeAdminOffLoopbackNeedsToken binds the admin listener to every address and reaches it
// from 127.0.0.1, as a sidecar proxy would: every admin route but /healthz needs the token.
// It sets RAGTAIL_ADMIN_TOKEN, so it does not run in parallel.
func TestServeAdminOffLoopbackNeedsToken(t *testing.T) {
	t.Setenv("RAGTAIL_ADMIN_TOKEN", "tok-123")
	addr, _, _ := startServe(t, "--admin-addr", "0.0.0.0:0", "--profile", "tiny", "--corpus-docs", "20", "--profiling=false")
	servingMu.Lock()
	out := servingOut[addr].String()
	servingMu.Unlock()
	m := regexp.MustCompile(`admin on http://\S*:(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no admin port in %q", out)
	}
	admin := "http://127.0.0.1:" + m[1]
	for _, route := range []string{"/metrics", "/debug/pprof/cmdline", "/debug/traces", "/admin/config", "/admin/stats"} {
		for _, tc := range []struct {
			auth string
			want int
		}{{"", 401}, {"Bearer wrong", 403}, {"Bearer tok-123", 200}} {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, admin+route, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s with %q: %d, want %d (%.200s)", route, tc.auth, resp.StatusCode, tc.want, b)
			}
			if strings.Contains(string(b), "tok-123") {
				t.Errorf("GET %s shows the admin token", route)
			}
		}
	}
	resp, err := http.Get(admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /healthz: %d, want 200 without a token", resp.StatusCode)
	}
}

// TestServeRefusesOffLoopbackAdminWithoutToken: an admin listener off loopback without
// RAGTAIL_ADMIN_TOKEN would let anyone on the network read profiles and change the
// configuration, so serve does not start, and says what to do.
func TestServeRefusesOffLoopbackAdminWithoutToken(t *testing.T) {
	t.Setenv("RAGTAIL_ADMIN_TOKEN", "")
	for _, adminAddr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		// A serve that starts anyway runs until the context ends, and then returns nil.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", adminAddr, "--profiling=false"}, io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "RAGTAIL_ADMIN_TOKEN") || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("--admin-addr %s without a token: err = %v, want a refusal naming RAGTAIL_ADMIN_TOKEN and loopback", adminAddr, err)
		}
	}
}

// TestServeKeepsSecretsOutOfLogsAndConfig runs serve at debug level with every API key flag
// set, against a real OpenAI-compatible LLM server (llm-sim), makes a request, and looks for
// the keys in everything serve wrote and in GET /admin/config and /admin/stats.
func TestServeKeepsSecretsOutOfLogsAndConfig(t *testing.T) {
	t.Parallel()
	prof, _ := llmsim.ProfileByName("tiny")
	engine, err := llmsim.New(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	sim := httptest.NewServer(llmsim.NewHandler(engine))
	defer sim.Close()

	const llmKey, qdrantKey = "sk-llm-secret-4242", "qd-secret-4343"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-level", "debug",
			"--profiling=false", "--corpus-docs", "20", "--llm-url", sim.URL + "/v1", "--llm-model", prof.Model,
			"--llm-api-key", llmKey, "--qdrant-api-key=" + qdrantKey}, stdout, stderr)
	}()
	var api, admin string
	deadline := time.Now().Add(30 * time.Second)
	for api == "" {
		if m := servingLine.FindStringSubmatch(stdout.String()); m != nil {
			api = m[1]
			admin = adminLine.FindStringSubmatch(stdout.String())[1]
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("serve exited early: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("serve did not start within 30 s")
		}
	}
	body := `{"model":"` + prof.Model + `","max_tokens":4,"messages":[{"role":"user","content":"How do caches shape the tail?"}]}`
	resp, err := http.Post("http://"+api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d", resp.StatusCode)
	}
	var seen strings.Builder
	for _, route := range []string{"/admin/config", "/admin/stats"} {
		r, err := http.Get("http://" + admin + route)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		seen.Write(b)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
	seen.WriteString(stdout.String())
	seen.WriteString(stderr.String())
	if !strings.Contains(stderr.String(), "ragtail serving") {
		t.Fatalf("no startup log captured at debug level: %q", stderr.String())
	}
	for _, secret := range []string{llmKey, qdrantKey} {
		if strings.Contains(seen.String(), secret) {
			t.Errorf("the key %s appears in serve's output or admin config/stats", secret)
		}
	}
}
