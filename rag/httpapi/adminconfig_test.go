package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/openai"
)

// counterStore is a ConfigStore whose configuration is one integer and a version.
type counterStore struct {
	mu      sync.Mutex
	Version int `json:"version"`
	TopK    int `json:"top_k"`
}

func (s *counterStore) Get() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]int{"version": s.Version, "top_k": s.TopK}
}

func (s *counterStore) Apply(_ context.Context, body []byte) (any, error) {
	var in struct {
		TopK *int `json:"top_k"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("%w: %w", rag.ErrInvalidRequest, err)
	}
	if in.TopK != nil && *in.TopK < 1 {
		return nil, fmt.Errorf("%w: top_k must be positive", rag.ErrInvalidRequest)
	}
	s.mu.Lock()
	if in.TopK != nil {
		s.TopK = *in.TopK
	}
	s.Version++
	s.mu.Unlock()
	return s.Get(), nil
}

func TestAdminConfig(t *testing.T) {
	tests := []struct {
		name       string
		access     httpapi.AdminAccess
		localAddr  string // the listener side of the connection
		method     string
		auth       string
		body       string
		wantStatus int
		wantCode   string
	}{
		{name: "get on loopback needs no token", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "127.0.0.1:9464"}, localAddr: "127.0.0.1:9464", method: http.MethodGet, wantStatus: 200},
		{name: "get off loopback needs the token", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "10.0.0.5:9464"}, localAddr: "10.0.0.5:9464", method: http.MethodGet, wantStatus: 401, wantCode: "missing_admin_token"},
		{name: "loopback trusted without token", access: httpapi.AdminAccess{}, localAddr: "127.0.0.1:9464", method: http.MethodPut, body: `{"top_k":3}`, wantStatus: 200},
		{name: "off loopback without configured token", access: httpapi.AdminAccess{}, localAddr: "10.0.0.5:9464", method: http.MethodPut, body: `{"top_k":3}`, wantStatus: 403, wantCode: "admin_token_required"},
		{name: "unspecified bind reached on loopback", access: httpapi.AdminAccess{ListenAddr: ":9464"}, localAddr: "127.0.0.1:9464", method: http.MethodPut, body: `{"top_k":3}`, wantStatus: 403, wantCode: "admin_token_required"},
		{name: "token set, missing on loopback", access: httpapi.AdminAccess{Token: "s3cret"}, localAddr: "127.0.0.1:9464", method: http.MethodPut, body: `{"top_k":3}`, wantStatus: 401, wantCode: "missing_admin_token"},
		{name: "wrong token", access: httpapi.AdminAccess{Token: "s3cret"}, localAddr: "10.0.0.5:9464", method: http.MethodPut, auth: "Bearer nope", body: `{"top_k":3}`, wantStatus: 403, wantCode: "invalid_admin_token"},
		{name: "right token off loopback", access: httpapi.AdminAccess{Token: "s3cret", ListenAddr: "0.0.0.0:9464"}, localAddr: "10.0.0.5:9464", method: http.MethodPut, auth: "Bearer s3cret", body: `{"top_k":3}`, wantStatus: 200},
		{name: "invalid field", access: httpapi.AdminAccess{}, localAddr: "[::1]:9464", method: http.MethodPut, body: `{"top_k":0}`, wantStatus: 400},
		{name: "method not allowed", access: httpapi.AdminAccess{}, localAddr: "127.0.0.1:9464", method: http.MethodDelete, wantStatus: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &counterStore{TopK: 5}
			h := httpapi.NewAdmin(prometheus.NewRegistry(), httpapi.WithConfig(store), httpapi.WithAccess(tt.access))
			req := httptest.NewRequest(tt.method, "/admin/config", strings.NewReader(tt.body))
			addr, err := net.ResolveTCPAddr("tcp", tt.localAddr)
			if err != nil {
				t.Fatal(err)
			}
			req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, addr))
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Host = tt.localAddr // a client addressing the listener it reached
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
			}
			if tt.wantStatus >= 400 {
				var body openai.ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Message == "" {
					t.Fatalf("error body %q is not OpenAI error JSON: %v", rec.Body, err)
				}
				if tt.wantCode != "" && body.Error.Code != tt.wantCode {
					t.Errorf("code %v, want %s", body.Error.Code, tt.wantCode)
				}
				if store.Version != 0 {
					t.Errorf("a refused PUT changed the config (version %d)", store.Version)
				}
			}
			if tt.method == http.MethodPut && tt.wantStatus == 200 && store.TopK != 3 {
				t.Errorf("top_k %d after PUT, want 3", store.TopK)
			}
		})
	}
}

// TestAdminConfigLoopbackListener checks the loopback rule against a real listener on 127.0.0.1.
func TestAdminConfigLoopbackListener(t *testing.T) {
	store := &counterStore{TopK: 5}
	srv := httptest.NewServer(httpapi.NewAdmin(prometheus.NewRegistry(), httpapi.WithConfig(store)))
	defer srv.Close()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, srv.URL+"/admin/config", strings.NewReader(`{"top_k":7}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || store.TopK != 7 || store.Version != 1 {
		t.Fatalf("PUT on a loopback listener: status %d, top_k %d, version %d", resp.StatusCode, store.TopK, store.Version)
	}
}

// TestAdminConfigCrossSite is the acceptance of issue 10 item 6: a browser tab on another site
// can send a simple request (POST, text/plain) to a loopback admin listener, and a DNS-rebound
// name reaches it with a foreign Host. Only a PUT of application/json addressed to the
// listener's own address is applied; every other write is refused and changes nothing.
func TestAdminConfigCrossSite(t *testing.T) {
	t.Parallel()
	store := &counterStore{TopK: 5}
	srv := httptest.NewServer(httpapi.NewAdmin(prometheus.NewRegistry(), httpapi.WithConfig(store)))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	tests := []struct {
		name, method, contentType, origin, host string
		wantStatus                              int
		wantCode                                string
	}{
		{name: "text/plain POST from another site", method: http.MethodPost, contentType: "text/plain", origin: "https://evil.example", wantStatus: 405},
		{name: "json POST", method: http.MethodPost, contentType: "application/json", wantStatus: 405},
		{name: "json PATCH", method: http.MethodPatch, contentType: "application/json", wantStatus: 405},
		{name: "text/plain PUT", method: http.MethodPut, contentType: "text/plain", wantStatus: 415, wantCode: "unsupported_media_type"},
		{name: "form PUT", method: http.MethodPut, contentType: "application/x-www-form-urlencoded", wantStatus: 415, wantCode: "unsupported_media_type"},
		{name: "PUT without a content type", method: http.MethodPut, wantStatus: 415, wantCode: "unsupported_media_type"},
		{name: "json PUT from another site", method: http.MethodPut, contentType: "application/json", origin: "https://evil.example", wantStatus: 403, wantCode: "foreign_origin"},
		{name: "json PUT from an opaque origin", method: http.MethodPut, contentType: "application/json", origin: "null", wantStatus: 403, wantCode: "foreign_origin"},
		{name: "json PUT from another loopback port", method: http.MethodPut, contentType: "application/json", origin: "http://127.0.0.1:1", wantStatus: 403, wantCode: "foreign_origin"},
		{name: "json PUT through a rebound name", method: http.MethodPut, contentType: "application/json", host: "rebind.evil.example:" + port, wantStatus: 403, wantCode: "foreign_host"},
		{name: "json PUT to localhost on another port", method: http.MethodPut, contentType: "application/json", host: "localhost:1", wantStatus: 403, wantCode: "foreign_host"},
		{name: "json PUT, no origin", method: http.MethodPut, contentType: "application/json", wantStatus: 200},
		{name: "json PUT with charset, own origin", method: http.MethodPut, contentType: "application/json; charset=utf-8", origin: "http://127.0.0.1:" + port, wantStatus: 200},
		{name: "json PUT to localhost, localhost origin", method: http.MethodPut, contentType: "application/json", host: "localhost:" + port, origin: "http://localhost:" + port, wantStatus: 200},
		{name: "json PUT to [::1]", method: http.MethodPut, contentType: "application/json", host: "[::1]:" + port, wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := store.Get().(map[string]int)["version"]
			req, err := http.NewRequestWithContext(context.Background(), tt.method, srv.URL+"/admin/config", strings.NewReader(`{"top_k":9}`))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body openai.ErrorBody
			_ = json.NewDecoder(resp.Body).Decode(&body)
			after := store.Get().(map[string]int)["version"]
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d (%+v)", resp.StatusCode, tt.wantStatus, body.Error)
			}
			if tt.wantStatus != 200 && after != before {
				t.Fatalf("a refused write was applied: config version %d -> %d", before, after)
			}
			if tt.wantStatus == 200 && after != before+1 {
				t.Fatalf("an accepted write did not apply: config version %d -> %d", before, after)
			}
			if tt.wantCode != "" && body.Error.Code != tt.wantCode {
				t.Errorf("code %v, want %s (%s)", body.Error.Code, tt.wantCode, body.Error.Message)
			}
			if tt.wantStatus == 405 && resp.Header.Get("Allow") != "GET, HEAD, PUT" {
				t.Errorf("Allow %q, want GET, HEAD, PUT", resp.Header.Get("Allow"))
			}
		})
	}
}
