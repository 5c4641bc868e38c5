package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
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
