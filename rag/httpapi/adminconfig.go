package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
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
// and a write needs Token when one is set; every request must be addressed to the listener by a
// loopback name (localhost, a loopback IP, any port) or its own address, or it gets 403: a web
// page in a browser on the host that rebinds its DNS name to 127.0.0.1 sends its own name, and
// must not read the command line, traces, profiles or the configuration.
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

// configHandler serves /admin/config: GET and HEAD read it, PUT changes it. A PUT must be
// application/json and, on a loopback listener, addressed to the listener itself (sameOrigin),
// so that a page in a browser on the host cannot change it: a cross-site "simple request" is a
// POST of text/plain or a form, and a DNS-rebound name carries a foreign Host.
func configHandler(store ConfigStore, access AdminAccess) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			openai.WriteJSON(w, http.StatusOK, store.Get())
		case http.MethodPut:
			if he := writeAllowed(r, access); he != nil {
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
			w.Header().Set("Allow", "GET, HEAD, PUT")
			openai.WriteError(w, &openai.HTTPError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
				Message: fmt.Sprintf("method %s not allowed on /admin/config: use GET to read it, PUT with a JSON body to change it", r.Method)})
		}
	})
}

// writeAllowed checks a PUT's content type and, on a loopback listener, its Origin and Host.
func writeAllowed(r *http.Request, access AdminAccess) *openai.HTTPError {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &openai.HTTPError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
			Message: "PUT /admin/config takes a JSON body: send 'Content-Type: application/json'"}
	}
	if !access.onLoopback(r) {
		return nil // the bearer token guards it; a browser does not attach one cross-site
	}
	own := ownHosts(r, access)
	if origin := r.Header.Get("Origin"); origin != "" && !own.originMatches(origin) {
		return &openai.HTTPError{Status: http.StatusForbidden, Type: "permission_error", Code: "foreign_origin",
			Message: "PUT /admin/config from a web page of another origin is refused: send it from a program (no Origin header) or from the admin listener's own origin"}
	}
	if !own.hostMatches(r.Host) {
		return &openai.HTTPError{Status: http.StatusForbidden, Type: "permission_error", Code: "foreign_host",
			Message: "PUT /admin/config addressed to another host name is refused: address the admin listener as 127.0.0.1, [::1] or localhost with its port"}
	}
	return nil
}

// hostSet is the names and port a loopback admin listener answers as.
type hostSet struct {
	names map[string]bool
	port  string
}

// ownHosts returns the listener's own addresses: localhost, 127.0.0.1 and ::1, the configured
// host and the connection's local IP, each with the port the connection arrived on.
func ownHosts(r *http.Request, access AdminAccess) hostSet {
	hs := hostSet{names: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}}
	if h, p, err := net.SplitHostPort(access.ListenAddr); err == nil {
		if h != "" {
			hs.names[strings.ToLower(h)] = true
		}
		hs.port = p
	}
	if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && addr != nil {
		if h, p, err := net.SplitHostPort(addr.String()); err == nil {
			hs.names[h] = true
			hs.port = p // the port actually bound (":0" picks one)
		}
	}
	return hs
}

func (hs hostSet) hostMatches(hostport string) bool { return hs.matches(hostport, "80") }

func (hs hostSet) originMatches(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false // also "null", the origin of sandboxed and file pages
	}
	switch u.Scheme {
	case "http":
		return hs.matches(u.Host, "80")
	case "https":
		return hs.matches(u.Host, "443")
	}
	return false
}

func (hs hostSet) matches(hostport, defaultPort string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.Trim(hostport, "[]"), defaultPort
	}
	return hs.names[strings.ToLower(host)] && (hs.port == "" || port == hs.port)
}

// loopbackHost reports whether r is addressed to a loopback listener by a loopback name: its
// Host is localhost or a loopback IP, with any port (a tunnel or port forward may front the
// listener), or one of the listener's own addresses. A browser always sends the name of the
// page's origin, so a page whose DNS name was rebound to 127.0.0.1 is refused here.
func loopbackHost(r *http.Request, access AdminAccess) bool {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return host != "" && ownHosts(r, access).hostMatches(r.Host)
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
	if loopback && !loopbackHost(r, a) {
		return &openai.HTTPError{Status: http.StatusForbidden, Type: "permission_error", Code: "foreign_host",
			Message: fmt.Sprintf("the admin listener is on loopback and answers only requests addressed to 127.0.0.1, [::1] or localhost (any port) or to its own address, not Host %.64q: a web page that rebinds its DNS name to 127.0.0.1 sends its own name", r.Host)}
	}
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
