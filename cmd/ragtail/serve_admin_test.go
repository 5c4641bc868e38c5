package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testpeer"
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
// set and a password in --llm-url, against a real OpenAI-compatible LLM server (llm-sim), makes
// a request, and looks for the secrets in everything serve wrote and in GET /admin/config and
// /admin/stats.
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

	const llmKey, qdrantKey, urlPassword = "sk-llm-secret-4242", "qd-secret-4343", "url-secret-4444"
	llmURL := "http://ragtail:" + urlPassword + "@" + strings.TrimPrefix(sim.URL, "http://") + "/v1"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-level", "debug",
			"--profiling=false", "--corpus-docs", "20", "--llm-url", llmURL, "--llm-model", prof.Model,
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
	if !strings.Contains(stderr.String(), "url=http://ragtail:xxxxx@") {
		t.Errorf("the llm line does not show the URL with its password hidden: %q", stderr.String())
	}
	for _, secret := range []string{llmKey, qdrantKey, urlPassword} {
		if strings.Contains(seen.String(), secret) {
			t.Errorf("the key %s appears in serve's output or admin config/stats", secret)
		}
	}
}

// TestServeAdminHidesURLPasswords is the acceptance of issue 35's secrets item: a serve started
// with passwords in --docstore (a real PostgreSQL, which trusts any password on loopback) and
// --cache (a Redis that is not there: the cache fails, serve does not) shows neither in
// /debug/pprof/cmdline, its logs, /admin/config or /admin/stats; and its loopback admin listener
// refuses reads addressed to another host name (DNS rebinding). It sets os.Args, which the
// cmdline route shows, to the command line serve runs with, so it does not run in parallel.
func TestServeAdminHidesURLPasswords(t *testing.T) {
	pg := testpeer.StartPostgres(t)
	const pgPassword, redisPassword = "s3cret-pg-5151", "pw-redis-5252"
	dsn := "postgres://postgres:" + pgPassword + "@" + pg.Addr + "/postgres?sslmode=disable"
	cache := fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", redisPassword, testpeer.FreePort(t))
	args := []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-level", "debug", "--profiling=false",
		"--corpus-docs", "20", "--docstore", dsn, "--cache", cache}
	saved := os.Args
	os.Args = append([]string{"ragtail"}, args...)
	defer func() { os.Args = saved }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, args, stdout, stderr) }()
	var api, admin string
	for deadline := time.Now().Add(60 * time.Second); api == ""; {
		if m := servingLine.FindStringSubmatch(stdout.String()); m != nil {
			api, admin = m[1], adminLine.FindStringSubmatch(stdout.String())[1]
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("serve exited early: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start within 60 s\n%s", stderr.String())
		}
	}
	get := func(route, host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+route, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// A request that fetches chunks, so that the doc store and its failing cache are used.
	model := regexp.MustCompile(`\(model "([^"]+)"\)`).FindStringSubmatch(stdout.String())[1]
	body := `{"model":"` + model + `","max_tokens":2,"messages":[{"role":"user","content":"How do caches shape the tail?"}]}`
	resp, err := http.Post("http://"+api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	var seen strings.Builder
	status, cmdline := get("/debug/pprof/cmdline", admin)
	if status != 200 {
		t.Fatalf("cmdline: %d %s", status, cmdline)
	}
	for _, want := range []string{"--docstore\x00postgres://postgres:xxxxx@" + pg.Addr, "--cache\x00redis://:xxxxx@127.0.0.1:"} {
		if !strings.Contains(cmdline, want) {
			t.Errorf("cmdline %q lacks %q", cmdline, want)
		}
	}
	seen.WriteString(cmdline)
	for _, route := range []string{"/admin/config", "/admin/stats", "/debug/traces"} {
		status, b := get(route, "localhost:1")
		if status != 200 {
			t.Errorf("GET %s with Host localhost:1: %d, want 200 (%.200s)", route, status, b)
		}
		seen.WriteString(b)
	}
	for _, route := range []string{"/debug/pprof/cmdline", "/admin/config", "/debug/traces", "/debug/pprof/heap"} {
		if status, b := get(route, "evil.example"); status != http.StatusForbidden {
			t.Errorf("GET %s with Host evil.example: %d, want 403 (%.200s)", route, status, b)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
	seen.WriteString(stdout.String())
	seen.WriteString(stderr.String())
	for _, secret := range []string{pgPassword, redisPassword} {
		if strings.Contains(seen.String(), secret) {
			t.Errorf("the password %s appears in the cmdline, serve's output or the admin reads", secret)
		}
	}
}
