package report

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/ragtail/ragtail/loadgen"
)

// appendDetailed appends one line of the per-request JSONL (a detailedRecord) to b, byte for
// byte what encoding/json writes for it with HTML escaping off, newline included, without its
// reflection: at 10,000 req/s the encoder's cost per record was a sizeable part of the
// generator's. TestAppendDetailedMatchesEncodingJSON holds the two together (it fails when
// Record gains a field this does not write).
func appendDetailed(b []byte, d *detailedRecord, scratch *bytes.Buffer) []byte {
	r := d.Record
	b = append(b, `{"i":`...)
	b = strconv.AppendInt(b, int64(r.Index), 10)
	if r.Session != "" {
		b = appendStringField(b, `,"session":`, r.Session, scratch)
	}
	if r.Step != 0 {
		b = appendIntField(b, `,"step":`, int64(r.Step))
	}
	if r.Key != "" {
		b = appendStringField(b, `,"key":`, r.Key, scratch)
	}
	if r.Warmup {
		b = append(b, `,"warmup":true`...)
	}
	if r.NotSent {
		b = append(b, `,"not_sent":true`...)
	}
	if r.CancelPlanned {
		b = append(b, `,"cancel_planned":true`...)
	}
	if r.Cancelled {
		b = append(b, `,"cancelled":true`...)
	}
	if r.CancelledAt != 0 {
		b = appendIntField(b, `,"cancelled_ns":`, int64(r.CancelledAt))
	}
	b = appendIntField(b, `,"intended_ns":`, int64(r.Intended))
	b = appendIntField(b, `,"sent_ns":`, int64(r.Sent))
	if r.FirstByte != 0 {
		b = appendIntField(b, `,"first_byte_ns":`, int64(r.FirstByte))
	}
	if r.FirstToken != 0 {
		b = appendIntField(b, `,"first_token_ns":`, int64(r.FirstToken))
	}
	if r.FirstOutput != 0 {
		b = appendIntField(b, `,"first_output_ns":`, int64(r.FirstOutput))
	}
	if r.Reasoned {
		b = append(b, `,"reasoned":true`...)
	}
	b = appendIntField(b, `,"end_ns":`, int64(r.End))
	if len(r.Chunks) > 0 {
		b = append(b, `,"chunks":[`...)
		for i, c := range r.Chunks {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendIntField(b, `{"at_ns":`, int64(c.At))
			b = appendIntField(b, `,"tokens":`, int64(c.Tokens))
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.NewConn {
		b = append(b, `,"new_conn":true`...)
	}
	if r.ConnReused {
		b = append(b, `,"conn_reused":true`...)
	}
	if r.DNS != 0 {
		b = appendIntField(b, `,"dns_ns":`, int64(r.DNS))
	}
	if r.Connect != 0 {
		b = appendIntField(b, `,"connect_ns":`, int64(r.Connect))
	}
	if r.TLSHandshake != 0 {
		b = appendIntField(b, `,"tls_ns":`, int64(r.TLSHandshake))
	}
	b = appendIntField(b, `,"status":`, int64(r.Status))
	if r.Err != "" {
		b = appendStringField(b, `,"error":`, r.Err, scratch)
	}
	if r.ErrKind != "" {
		b = appendStringField(b, `,"err_kind":`, r.ErrKind, scratch)
	}
	if r.TraceID != "" {
		b = appendStringField(b, `,"trace_id":`, r.TraceID, scratch)
	}
	if len(r.ServerTiming) > 0 {
		b = appendServerTiming(b, r.ServerTiming, scratch)
	}
	for _, f := range [...]struct {
		key string
		v   int
	}{{`,"prompt_tokens":`, r.PromptTokens}, {`,"output_tokens":`, r.OutputTokens}} {
		if f.v != 0 {
			b = appendIntField(b, f.key, int64(f.v))
		}
	}
	if r.TokensFromUsage {
		b = append(b, `,"tokens_from_usage":true`...)
	}
	if r.CachedTokens != 0 {
		b = appendIntField(b, `,"cached_tokens":`, int64(r.CachedTokens))
	}
	if r.ReasoningTokens != 0 {
		b = appendIntField(b, `,"reasoning_tokens":`, int64(r.ReasoningTokens))
	}
	if r.Inputs != 0 {
		b = appendIntField(b, `,"inputs":`, int64(r.Inputs))
	}
	if r.ToolCalls != 0 {
		b = appendIntField(b, `,"tool_calls":`, int64(r.ToolCalls))
	}
	if r.ToolWait != 0 {
		b = appendIntField(b, `,"tool_wait_ns":`, int64(r.ToolWait))
	}
	if r.AgentCut {
		b = append(b, `,"agent_cut":true`...)
	}
	if d.OK {
		b = append(b, `,"ok":true`...)
	} else {
		b = append(b, `,"ok":false`...)
	}
	if d.TTFTMS != nil {
		b = appendFloatField(b, `,"ttft_ms":`, *d.TTFTMS)
	}
	if d.TTFOMS != nil {
		b = appendFloatField(b, `,"ttfo_ms":`, *d.TTFOMS)
	}
	if d.TPOTMS != nil {
		b = appendFloatField(b, `,"tpot_ms":`, *d.TPOTMS)
	}
	b = appendFloatField(b, `,"e2el_ms":`, d.E2ELMS)
	b = appendFloatField(b, `,"service_e2el_ms":`, d.ServiceE2ELMS)
	b = appendFloatField(b, `,"send_lag_ms":`, d.SendLagMS)
	if len(d.ITLMS) > 0 {
		b = append(b, `,"itl_ms":[`...)
		for i, v := range d.ITLMS {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, v)
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

func appendIntField(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(b, key...), v, 10)
}

func appendFloatField(b []byte, key string, v float64) []byte {
	return appendFloat(append(b, key...), v)
}

func appendStringField(b []byte, key, s string, scratch *bytes.Buffer) []byte {
	return appendString(append(b, key...), s, scratch)
}

// appendServerTiming appends the server_timing object, its keys sorted as encoding/json sorts
// a map's.
func appendServerTiming(b []byte, st map[string]float64, scratch *bytes.Buffer) []byte {
	var small [8]string
	keys := small[:0]
	for k := range st {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, `,"server_timing":{`...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k, scratch)
		b = append(b, ':')
		b = appendFloat(b, st[k])
	}
	return append(b, '}')
}

// appendFloat formats v as encoding/json does (shortest repr., exponent form outside
// [1e-6, 1e21)). A value JSON cannot hold is written as null: the encoder would have failed.
func appendFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(v)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendString appends s as a JSON string. Plain printable ASCII, what ids, keys and most
// error texts are, is copied; anything else goes through encoding/json (HTML escaping off).
func appendString(b []byte, s string, scratch *bytes.Buffer) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	scratch.Reset()
	enc := json.NewEncoder(scratch)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return append(b, `""`...) // a string always encodes
	}
	return append(b, bytes.TrimSuffix(scratch.Bytes(), []byte("\n"))...)
}

// detailedLine fills the detailed record of r (itl is reused for its ITLs).
func detailedLine(r *loadgen.Record, itl []float64) (detailedRecord, []float64) {
	rec := detailedRecord{Record: r, OK: r.OK(), E2ELMS: msv(r.E2EL()), ServiceE2ELMS: msv(r.ServiceE2EL()),
		SendLagMS: msv(r.SendLag())}
	lat := latencies(r, outputTokens(r))
	if lat.HasTTFT {
		v := msv(lat.TTFT)
		rec.TTFTMS = &v
	}
	if lat.HasTPOT && !r.Cancelled { // a cut stream's pace ends where the user left
		v := msv(lat.TPOT)
		rec.TPOTMS = &v
	}
	if ttfo, ok := r.TTFO(); ok {
		v := msv(ttfo)
		rec.TTFOMS = &v
	}
	itl = itl[:0]
	for k := 1; k < len(r.Chunks); k++ {
		itl = append(itl, msv(r.Chunks[k].At-r.Chunks[k-1].At))
	}
	if len(itl) > 0 {
		rec.ITLMS = itl
	}
	return rec, itl
}
