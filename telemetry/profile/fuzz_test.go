package profile

import (
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"
)

// FuzzParseRequest feeds arbitrary query strings to GET /debug/profiles: the parser must never
// panic, and whatever it accepts must be valid; the handler must answer with a known status.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		"",
		"trace_id=" + traceA,
		"from=2026-03-01T12:00:00.5Z&until=1772366410000000000&stage=generate&type=alloc_space&format=pprof&top=5",
		"span_id=" + spanS1 + "&top=0",
		"from=1&until=0",
		"trace_id=%00&stage=%ff",
		"type=cpu&type=cpu",
	} {
		f.Add(seed)
	}
	store := fixtureStore(f)
	h := Handler(store)
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, err := parseRequest(v)
		if err == nil && !req.list {
			q := req.query
			if req.top < 1 || req.top > maxTop {
				t.Errorf("top %d accepted", req.top)
			}
			if req.format != "json" && req.format != "pprof" {
				t.Errorf("format %q accepted", req.format)
			}
			if !q.From.IsZero() && !q.Until.IsZero() && q.Until.Before(q.From) {
				t.Errorf("until %s before from %s accepted", q.Until, q.From)
			}
			if b, err := hex.DecodeString(q.TraceID); q.TraceID != "" && (err != nil || len(b) != 16) {
				t.Errorf("trace id %q accepted", q.TraceID)
			}
			if b, err := hex.DecodeString(q.SpanID); q.SpanID != "" && (err != nil || len(b) != 8) {
				t.Errorf("span id %q accepted", q.SpanID)
			}
			if _, ok := profileTypes[q.Type]; !ok {
				t.Errorf("type %q accepted", q.Type)
			}
		}
		rec := get(t, h, http.MethodGet, "/debug/profiles?"+v.Encode())
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Errorf("status %d for %q: %s", rec.Code, raw, rec.Body)
		}
		if (err != nil) != (rec.Code == http.StatusBadRequest) {
			t.Errorf("parse error %v but status %d", err, rec.Code)
		}
	})
}
