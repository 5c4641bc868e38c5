package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
)

type traceKey struct{}

// TraceContext is the W3C trace context of one request as the server sees it: the trace it
// belongs to and the server's own span id.
type TraceContext struct {
	TraceID string // 32 lower-case hex digits
	SpanID  string // 16 lower-case hex digits
	Sampled bool
}

// Header returns the traceparent header value of tc.
func (tc TraceContext) Header() string {
	flags := "00"
	if tc.Sampled {
		flags = "01"
	}
	return "00-" + tc.TraceID + "-" + tc.SpanID + "-" + flags
}

// TraceFromContext returns the trace context TraceParent put in ctx.
func TraceFromContext(ctx context.Context) (TraceContext, bool) {
	tc, ok := ctx.Value(traceKey{}).(TraceContext)
	return tc, ok
}

// TraceParent is middleware that joins the caller's W3C trace (the traceparent request header)
// or starts a new one, gives the request a span id of its own, and returns it in the traceparent
// response header, so that a client can find the server's side of every request it made.
func TraceParent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc, ok := ParseTraceParent(r.Header.Get("traceparent"))
		if !ok {
			tc = TraceContext{TraceID: randomHex(16), Sampled: true}
		}
		tc.SpanID = randomHex(8)
		w.Header().Set("traceparent", tc.Header())
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), traceKey{}, tc)))
	})
}

// ParseTraceParent parses a W3C traceparent header of version 00. It rejects malformed values and
// the all-zero ids the specification forbids.
func ParseTraceParent(h string) (TraceContext, bool) {
	parts := strings.Split(strings.TrimSpace(h), "-")
	if len(parts) < 4 || parts[0] == "ff" || len(parts[0]) != 2 || !isHex(parts[0]) ||
		len(parts[1]) != 32 || !isHex(parts[1]) || allZero(parts[1]) ||
		len(parts[2]) != 16 || !isHex(parts[2]) || allZero(parts[2]) ||
		len(parts[3]) != 2 || !isHex(parts[3]) {
		return TraceContext{}, false
	}
	if parts[0] == "00" && len(parts) != 4 {
		return TraceContext{}, false
	}
	flags, _ := hex.DecodeString(parts[3])
	return TraceContext{TraceID: parts[1], SpanID: parts[2], Sampled: flags[0]&1 == 1}, true
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }

func randomHex(n int) string {
	b := make([]byte, n)
	for {
		_, _ = rand.Read(b)
		for _, x := range b {
			if x != 0 {
				return hex.EncodeToString(b)
			}
		}
	}
}
