package client

import (
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
)

// newTraceparent returns a fresh trace id and the W3C traceparent header (version 00, sampled)
// that starts a trace with it: a new trace per request, so that each request's server spans
// form a trace of their own.
func newTraceparent() (traceID, header string) {
	var b [55]byte // 00-<32 hex>-<16 hex>-01
	copy(b[:], "00-")
	var id [24]byte
	for {
		putUint64(id[0:8], rand.Uint64())
		putUint64(id[8:16], rand.Uint64())
		putUint64(id[16:24], rand.Uint64())
		if !allZero(id[0:16]) && !allZero(id[16:24]) {
			break
		}
	}
	hex.Encode(b[3:35], id[0:16])
	b[35] = '-'
	hex.Encode(b[36:52], id[16:24])
	copy(b[52:], "-01")
	h := string(b[:])
	return h[3:35], h
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// parseTraceparent returns the trace id of a W3C traceparent header (version 00, or a later
// version's first four fields), without allocating.
func parseTraceparent(h string) (string, bool) {
	h = strings.TrimSpace(h)
	// vv-<32 hex trace id>-<16 hex span id>-ff
	if len(h) < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-' || (len(h) > 55 && h[55] != '-') {
		return "", false
	}
	version, id, span, flags := h[0:2], h[3:35], h[36:52], h[53:55]
	if !isHex(version) || version == "ff" || (version == "00" && len(h) != 55) || !isHex(id) || !isHex(span) || !isHex(flags) {
		return "", false
	}
	if strings.Trim(id, "0") == "" || strings.Trim(span, "0") == "" {
		return "", false
	}
	if !isLowerHex(id) {
		id = strings.ToLower(id)
	}
	return id, true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ParseServerTiming parses Server-Timing header values (W3C Server Timing:
// `name;dur=12.3;desc="a, b", other;dur=4`) into metric name -> duration in ms. Metrics without
// a dur count as 0; a name given twice adds up. Malformed entries are skipped.
func ParseServerTiming(values ...string) map[string]float64 {
	return parseServerTimingInto(nil, values...)
}

// parseServerTimingInto adds the metrics of values to m (allocated if nil) and returns it. A
// name already in m from an earlier source (header, then trailer, then final chunk) is
// replaced, not added to, since each source repeats the same figures.
func parseServerTimingInto(m map[string]float64, values ...string) map[string]float64 {
	seen := map[string]bool{}
	for _, v := range values {
		for _, entry := range splitOutsideQuotes(v, ',') {
			params := splitOutsideQuotes(entry, ';')
			name := strings.TrimSpace(params[0])
			if name == "" || !isToken(name) {
				continue
			}
			dur := 0.0
			for _, p := range params[1:] {
				k, val, _ := strings.Cut(p, "=")
				if !strings.EqualFold(strings.TrimSpace(k), "dur") {
					continue
				}
				val = strings.Trim(strings.TrimSpace(val), `"`)
				if f, err := strconv.ParseFloat(val, 64); err == nil && f >= 0 && f < 1e12 {
					dur = f
				}
				break
			}
			if m == nil {
				m = map[string]float64{}
			}
			if seen[name] {
				m[name] += dur
			} else {
				m[name] = dur
				seen[name] = true
			}
		}
	}
	return m
}

// splitOutsideQuotes splits s at sep where sep is not inside a quoted string.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	inQuote, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case inQuote && c == '\\':
			escaped = true
		case c == '"':
			inQuote = !inQuote
		case c == sep && !inQuote:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// isToken reports whether s is an HTTP token (RFC 9110), the syntax of a metric name.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
