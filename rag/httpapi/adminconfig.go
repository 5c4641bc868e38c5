package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

// ConfigStore is the runtime configuration behind GET|PUT /admin/config. The service declares
// what the document holds; the admin API only moves it. Implementations must be safe for
// concurrent use.
type ConfigStore interface {
	// Get returns the current configuration, a value that encodes to JSON.
	Get() any
	// Apply merges body (a JSON object, possibly partial) onto the current configuration,
	// validates the result, applies it as a whole or not at all, and returns the new
	// configuration. Errors matching rag.ErrInvalidRequest become 400 responses.
	Apply(ctx context.Context, body []byte) (any, error)
}

// MaxConfigBody bounds the body of PUT /admin/config.
const MaxConfigBody = 1 << 20

// ConfigAccess says who may change the configuration.
type ConfigAccess struct {
	// Token, when set, is required as "Authorization: Bearer TOKEN" on every PUT, whatever
	// the listener (RAGTAIL_ADMIN_TOKEN).
	Token string
	// TrustLoopback lets a PUT without a token through when no Token is set and the request
	// arrived on a loopback address of the listener (the admin listener's default,
	// 127.0.0.1:9464): only processes on the host can reach it. Off a loopback address a PUT
	// without a configured token is refused (403), since anyone who can reach the port could
	// otherwise reconfigure the service.
	TrustLoopback bool
}

// WithConfig serves GET and PUT /admin/config from store, with PUT guarded by access.
func WithConfig(store ConfigStore, access ConfigAccess) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.config, c.configAccess = store, access })
}

// WithStats serves GET /admin/stats with the JSON of what stats returns: the counters of the
// service's parts that experiments read beside their own measurements.
func WithStats(stats func() any) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.stats = stats })
}

// configHandler serves /admin/config.
func configHandler(store ConfigStore, access ConfigAccess) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			openai.WriteJSON(w, http.StatusOK, store.Get())
		case http.MethodPut, http.MethodPost, http.MethodPatch:
			if he := access.check(r); he != nil {
				if he.Status == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="ragtail admin"`)
				}
				openai.WriteError(w, he)
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxConfigBody))
			if err != nil {
				openai.WriteError(w, fmt.Errorf("%w: read config body (at most %d bytes): %w", rag.ErrInvalidRequest, MaxConfigBody, err))
				return
			}
			cfg, err := store.Apply(r.Context(), body)
			if err != nil {
				openai.WriteError(w, err)
				return
			}
			openai.WriteJSON(w, http.StatusOK, cfg)
		default:
			w.Header().Set("Allow", "GET, PUT")
			openai.WriteError(w, &openai.HTTPError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
				Message: fmt.Sprintf("method %s not allowed on /admin/config: use GET or PUT", r.Method)})
		}
	})
}

// check returns the error to answer a mutating request with, or nil if it may proceed.
func (a ConfigAccess) check(r *http.Request) *openai.HTTPError {
	if a.Token == "" {
		if a.TrustLoopback && arrivedOnLoopback(r) {
			return nil
		}
		return &openai.HTTPError{Status: http.StatusForbidden, Type: "permission_error", Code: "admin_token_required",
			Message: "changing the configuration off a loopback address needs a token: start the service with RAGTAIL_ADMIN_TOKEN set and send it as 'Authorization: Bearer TOKEN'"}
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		return &openai.HTTPError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "missing_admin_token",
			Message: "missing admin token: send 'Authorization: Bearer $RAGTAIL_ADMIN_TOKEN'"}
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(a.Token)) != 1 {
		return &openai.HTTPError{Status: http.StatusForbidden, Type: "permission_error", Code: "invalid_admin_token",
			Message: "invalid admin token", Err: errors.New("admin token mismatch")}
	}
	return nil
}

// arrivedOnLoopback reports whether the connection's local address (the listener's side) is a
// loopback address. A request with no known local address is not trusted.
func arrivedOnLoopback(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		host = addr.String()
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
