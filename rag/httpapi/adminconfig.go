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

// AdminAccess says who may use the admin routes.
//
// Off loopback, every route (reads included; /healthz excepted) needs Token as
// "Authorization: Bearer TOKEN": a listener bound to a routable or unspecified address (0.0.0.0,
// ::, a host name) is reachable by anyone on the network, and a sidecar proxy in front of it
// connects from 127.0.0.1, so the peer address proves nothing. Without a Token such a listener
// answers 403 to everything. On loopback, reads are open (only processes on the host can connect)
// and a write needs Token when one is set.
type AdminAccess struct {
	// Token is RAGTAIL_ADMIN_TOKEN; "" means none is configured.
	Token string
	// ListenAddr is the address the admin listener was told to bind (--admin-addr), which
	// decides whether it is on loopback (IsLoopbackAddr). Empty: each connection's local
	// address decides, which is right only for a listener bound to one address (httptest, a
	// listener on 127.0.0.1:0), never for one bound to 0.0.0.0 or ::.
	ListenAddr string
}

// WithConfig serves GET and PUT /admin/config from store.
func WithConfig(store ConfigStore) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.config = store })
}

// WithStats serves GET /admin/stats with the JSON of what stats returns: the counters of the
// service's parts that experiments read beside their own measurements.
func WithStats(stats func() any) AdminOption {
	return adminOptionFunc(func(c *adminConfig) { c.stats = stats })
}

// configHandler serves /admin/config.
func configHandler(store ConfigStore) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			openai.WriteJSON(w, http.StatusOK, store.Get())
		case http.MethodPut, http.MethodPost, http.MethodPatch:
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

// isRead reports whether r only reads.
func isRead(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
}

// guard answers a request the access rules refuse, and passes the others to next.
func (a AdminAccess) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if he := a.check(r); he != nil {
			if he.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ragtail admin"`)
			}
			openai.WriteError(w, he)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// check returns the error to answer r with, or nil if it may proceed.
func (a AdminAccess) check(r *http.Request) *openai.HTTPError {
	loopback := a.onLoopback(r)
	if loopback && (isRead(r) || a.Token == "") {
		return nil
	}
	if a.Token == "" {
		return &openai.HTTPError{Status: http.StatusForbidden, Type: "permission_error", Code: "admin_token_required",
			Message: "the admin listener is not on a loopback address, so every admin route needs a token: start the service with RAGTAIL_ADMIN_TOKEN set and send it as 'Authorization: Bearer TOKEN', or bind --admin-addr to 127.0.0.1"}
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(got) == "" {
		return &openai.HTTPError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "missing_admin_token",
			Message: "missing admin token: send 'Authorization: Bearer $RAGTAIL_ADMIN_TOKEN'"}
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(a.Token)) != 1 {
		return &openai.HTTPError{Status: http.StatusForbidden, Type: "permission_error", Code: "invalid_admin_token",
			Message: "invalid admin token", Err: errors.New("admin token mismatch")}
	}
	return nil
}

// onLoopback reports whether the admin listener r arrived on is on loopback: from ListenAddr
// when it is set, else from the connection's local address.
func (a AdminAccess) onLoopback(r *http.Request) bool {
	if a.ListenAddr != "" {
		return IsLoopbackAddr(a.ListenAddr)
	}
	return arrivedOnLoopback(r)
}

// IsLoopbackAddr reports whether a listener bound to addr (host:port, as given to net.Listen)
// accepts connections on loopback only: its host is a loopback IP or "localhost". An empty or
// unspecified host (":9464", "0.0.0.0", "::") listens on every address, and any other host name
// may resolve to a routable one, so neither counts.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
