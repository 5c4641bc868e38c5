package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/openai"
)

// adminRoutes are every route of a fully mounted admin handler but /healthz.
var adminRoutes = []string{"/metrics", "/debug/pprof/", "/debug/pprof", "/debug/pprof/cmdline", "/debug/pprof/heap?debug=1",
	"/debug/pprof/goroutine?debug=1", "/debug/pprof/allocs?debug=1", "/debug/pprof/profile", "/debug/pprof/symbol",
	"/debug/traces", "/debug/profiles", "/admin/config", "/admin/stats"}

// fullAdmin serves an admin handler with every optional route mounted on a real loopback
// listener: the test client connects from 127.0.0.1, as a sidecar proxy would.
func fullAdmin(tb testing.TB, access httpapi.AdminAccess) *httptest.Server {
	tb.Helper()
	ok := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })
	}
	h := httpapi.NewAdmin(prometheus.NewRegistry(), httpapi.WithAccess(access),
		httpapi.WithTraces(ok("traces")), httpapi.WithProfiles(ok("profiles")), httpapi.WithCPUProfile(ok("cpu")),
		httpapi.WithConfig(&counterStore{TopK: 5}), httpapi.WithStats(func() any { return map[string]int{"n": 1} }))
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv
}

func adminGet(tb testing.TB, url, auth string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestAdminReadsNeedTokenOffLoopback is the acceptance of issue 10 item 5: with the admin
// listener bound off loopback, every admin route answers 401 without the token and 403 with a
// wrong one, even though the peer connects from 127.0.0.1; with the token, 200.
func TestAdminReadsNeedTokenOffLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		access     httpapi.AdminAccess
		auth       string
		wantStatus int
		wantCode   string
	}{
		{name: "unspecified bind, no token sent", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: ":9464"}, wantStatus: 401, wantCode: "missing_admin_token"},
		{name: "0.0.0.0 bind, no token sent", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "0.0.0.0:9464"}, wantStatus: 401, wantCode: "missing_admin_token"},
		{name: "[::] bind, wrong token", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "[::]:9464"}, auth: "Bearer nope", wantStatus: 403, wantCode: "invalid_admin_token"},
		{name: "pod address, not a bearer", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "10.0.0.5:9464"}, auth: "Basic czNjcmV0", wantStatus: 401, wantCode: "missing_admin_token"},
		{name: "host name bind, token", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "ragtail-admin:9464"}, auth: "Bearer s3cret", wantStatus: 200},
		{name: "0.0.0.0 bind, token", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "0.0.0.0:9464"}, auth: "Bearer s3cret", wantStatus: 200},
		{name: "off loopback, no token configured", access: httpapi.AdminAccess{ListenAddr: ":9464"}, wantStatus: 403, wantCode: "admin_token_required"},
		{name: "loopback bind reads are open", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "127.0.0.1:9464"}, wantStatus: 200},
		{name: "localhost bind reads are open", access: httpapi.AdminAccess{ListenAddr: "localhost:9464"}, wantStatus: 200},
		{name: "no bind given: the connection's loopback address", access: httpapi.AdminAccess{}, wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := fullAdmin(t, tt.access)
			for _, route := range adminRoutes {
				resp, body := adminGet(t, srv.URL+route, tt.auth)
				if resp.StatusCode != tt.wantStatus {
					t.Errorf("GET %s: status %d, want %d; body %.200s", route, resp.StatusCode, tt.wantStatus, body)
					continue
				}
				if tt.wantStatus == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("GET %s: 401 without a Bearer challenge (WWW-Authenticate %q)", route, resp.Header.Get("WWW-Authenticate"))
				}
				if tt.wantCode != "" {
					var eb openai.ErrorBody
					if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Error.Code != tt.wantCode {
						t.Errorf("GET %s: body %q, want OpenAI error code %s", route, body, tt.wantCode)
					}
					if strings.Contains(body, "s3cret") {
						t.Errorf("GET %s: the error shows the token: %s", route, body)
					}
				}
			}
			// Liveness stays open for probes: it shows nothing but "ok".
			if resp, _ := adminGet(t, srv.URL+"/healthz", ""); resp.StatusCode != 200 {
				t.Errorf("GET /healthz: %d, want 200 without a token", resp.StatusCode)
			}
		})
	}
}

// TestPprofRoutes checks that the admin handler's one set of pprof routes answers each route
// from the right handler: the CPU profile from WithCPUProfile, everything else from
// net/http/pprof, the command line redacted.
func TestPprofRoutes(t *testing.T) {
	t.Parallel()
	cpu := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "cpu "+r.URL.Path) })
	srv := httptest.NewServer(httpapi.NewAdmin(prometheus.NewRegistry(), httpapi.WithCPUProfile(cpu)))
	defer srv.Close()
	tests := []struct {
		route, want string
	}{
		{"/debug/pprof/profile?seconds=1", "cpu /debug/pprof/profile"},
		{"/debug/pprof/", "Types of profiles available"},
		{"/debug/pprof", "Types of profiles available"},
		{"/debug/pprof/heap?debug=1", "heap profile:"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile:"},
		{"/debug/pprof/symbol", "num_symbols:"},
		{"/debug/pprof/trace?seconds=0.01", ""},
		{"/debug/pprof/cmdline", os.Args[0]},
	}
	for _, tt := range tests {
		resp, body := adminGet(t, srv.URL+tt.route, "")
		if resp.StatusCode != 200 || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s: status %d, body %.120q; want 200 with %q", tt.route, resp.StatusCode, body, tt.want)
		}
	}
	if resp, body := adminGet(t, srv.URL+"/debug/pprof/no-such-profile", ""); resp.StatusCode != 404 {
		t.Errorf("GET an unknown profile: status %d, body %.120q; want 404", resp.StatusCode, body)
	}
}

// TestLoopbackAdminRefusesForeignHost: on the loopback admin listener, a read addressed to
// another name (a web page that rebinds evil.example to 127.0.0.1) is refused; loopback names
// with any port, and the listener's own address, are served. /healthz stays open.
func TestLoopbackAdminRefusesForeignHost(t *testing.T) {
	t.Parallel()
	srv := fullAdmin(t, httpapi.AdminAccess{})
	own := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		host string
		want int
	}{
		{"evil.example", 403},
		{"evil.example:" + own[strings.LastIndex(own, ":")+1:], 403},
		{"127.0.0.1.evil.example", 403},
		{"localhost.evil.example:80", 403},
		{own, 200},
		{"127.0.0.1:8080", 200},
		{"localhost", 200},
		{"LOCALHOST:9464", 200},
		{"[::1]:9464", 200},
		{"127.0.0.2", 200},
	}
	for _, route := range []string{"/admin/config", "/debug/traces", "/debug/pprof/cmdline", "/metrics", "/debug/pprof/heap?debug=1"} {
		for _, tt := range tests {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+route, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("GET %s with Host %s: %d, want %d (%.200s)", route, tt.host, resp.StatusCode, tt.want, b)
			}
			if tt.want == 403 && !strings.Contains(string(b), "foreign_host") {
				t.Errorf("GET %s with Host %s: %s, want a foreign_host error", route, tt.host, b)
			}
		}
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/healthz", nil)
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /healthz with a foreign Host: %d, want 200", resp.StatusCode)
	}
}

// TestPprofCmdlineRedacted checks /debug/pprof/cmdline on the admin handler, with net/http/pprof's
// handlers and with a replacement (the continuous profiler's): flag names and URLs show, their
// secrets do not. It sets os.Args, so it does not run in parallel.
func TestPprofCmdlineRedacted(t *testing.T) {
	saved := os.Args
	defer func() { os.Args = saved }()
	os.Args = []string{"ragtail", "serve", "--llm-api-key", "sk-live-123", "--embed-api-key=emb-456", "--qdrant-api-key", "qd-789", "--top-k", "5",
		"--docstore", "postgres://app:s3cret@db/rag", "--cache", "redis://:pw-redis@redis:6379/0", "--llm-url=http://h:8000/v1?api_key=k-q"}
	pprofEcho := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, strings.Join(os.Args, "\x00")) })
	for _, h := range []http.Handler{
		httpapi.NewAdmin(prometheus.NewRegistry()),
		httpapi.NewAdmin(prometheus.NewRegistry(), httpapi.WithPprof(pprofEcho)),
	} {
		srv := httptest.NewServer(h)
		resp, body := adminGet(t, srv.URL+"/debug/pprof/cmdline", "")
		srv.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("cmdline: %d %s", resp.StatusCode, body)
		}
		for _, secret := range []string{"sk-live-123", "emb-456", "qd-789", "s3cret", "pw-redis", "k-q"} {
			if strings.Contains(body, secret) {
				t.Errorf("cmdline shows the secret %q: %q", secret, body)
			}
		}
		for _, want := range []string{"--llm-api-key\x00xxxxx", "--embed-api-key=xxxxx", "--qdrant-api-key\x00xxxxx", "--top-k\x005",
			"--docstore\x00postgres://app:xxxxx@db/rag", "--cache\x00redis://:xxxxx@redis:6379/0", "--llm-url=http://h:8000/v1?api_key=xxxxx"} {
			if !strings.Contains(body, want) {
				t.Errorf("cmdline %q lacks %q", body, want)
			}
		}
	}
}
