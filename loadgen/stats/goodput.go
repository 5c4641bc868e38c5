package stats

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Goodput SLO metrics: the request-level latencies an SLO can bound. ttft, tpot and e2el are
// vLLM's --goodput keys; itl bounds a request's largest inter-token gap (a stall mid-answer);
// ttfo bounds the time to the first answer token, after any reasoning.
const (
	SLOTTFT = "ttft"
	SLOTTFO = "ttfo"
	SLOTPOT = "tpot"
	SLOITL  = "itl"
	SLOE2EL = "e2el"
	// SLOAgent bounds an agent's latency, from a conversation's first request to its final
	// answer, tool waits included: it makes a conversation good, not a request (see Requests).
	SLOAgent = "agent"
)

// SLO bounds one request-level latency.
type SLO struct {
	Metric string        // one of SLOTTFT, SLOTTFO, SLOTPOT, SLOITL, SLOE2EL, SLOAgent
	Limit  time.Duration // the latency must be at most this
}

// SLOs is a goodput definition: a completed request is good when it meets every SLO.
type SLOs []SLO

// ParseGoodput parses vLLM's --goodput syntax: KEY:MS pairs separated by commas or spaces, e.g.
// "ttft:300,e2el:2000" (milliseconds; fractions allowed). An empty string means no SLO.
func ParseGoodput(s string) (SLOs, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	var out SLOs
	seen := map[string]bool{}
	for _, f := range fields {
		key, val, ok := strings.Cut(f, ":")
		if !ok {
			return nil, fmt.Errorf("goodput %q: want KEY:MS, e.g. ttft:300", f)
		}
		key = strings.ToLower(strings.TrimSpace(key))
		switch key {
		case SLOTTFT, SLOTTFO, SLOTPOT, SLOITL, SLOE2EL, SLOAgent:
		default:
			return nil, fmt.Errorf("goodput %q: unknown metric %q (want ttft, ttfo, tpot, itl, e2el or agent)", f, key)
		}
		if seen[key] {
			return nil, fmt.Errorf("goodput: %s given twice", key)
		}
		seen[key] = true
		ms, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || !(ms > 0) || math.IsInf(ms, 0) || ms > float64(HistogramHighest/time.Millisecond) {
			return nil, fmt.Errorf("goodput %q: want a positive number of milliseconds up to one hour", f)
		}
		out = append(out, SLO{Metric: key, Limit: msToDuration(ms)})
	}
	return out, nil
}

// String formats the SLOs as ParseGoodput reads them, e.g. "ttft:300,e2el:2000".
func (s SLOs) String() string {
	parts := make([]string, len(s))
	for i, o := range s {
		parts[i] = o.Metric + ":" + strconv.FormatFloat(durationToMS(o.Limit), 'f', -1, 64)
	}
	return strings.Join(parts, ",")
}

// Requests returns the request-level SLOs of s: all but SLOAgent.
func (s SLOs) Requests() SLOs {
	var out SLOs
	for _, o := range s {
		if o.Metric != SLOAgent {
			out = append(out, o)
		}
	}
	return out
}

// Limit returns the limit on metric, if the SLOs bound it.
func (s SLOs) Limit(metric string) (time.Duration, bool) {
	for _, o := range s {
		if o.Metric == metric {
			return o.Limit, true
		}
	}
	return 0, false
}

// RequestLatencies are one completed request's latencies as the SLOs see them. A Has flag is
// false when the latency is undefined for the request.
type RequestLatencies struct {
	TTFT    time.Duration
	HasTTFT bool // false when no content token arrived
	TTFO    time.Duration
	HasTTFO bool // false when no answer token (after any reasoning) arrived
	TPOT    time.Duration
	HasTPOT bool // false for fewer than two output tokens
	MaxITL  time.Duration
	HasITL  bool // false for fewer than two content chunks
	E2EL    time.Duration
}

// Meets reports whether a completed request meets every request-level SLO. A request without a first token
// fails a TTFT SLO (it never showed the user anything), and one without an answer token a TTFO
// SLO; TPOT and ITL SLOs do not apply to a
// request for which they are undefined (as in vLLM, where such a request's TPOT is 0).
func (s SLOs) Meets(r RequestLatencies) bool {
	for _, o := range s {
		switch o.Metric {
		case SLOTTFT:
			if !r.HasTTFT || r.TTFT > o.Limit {
				return false
			}
		case SLOTTFO:
			if !r.HasTTFO || r.TTFO > o.Limit {
				return false
			}
		case SLOTPOT:
			if r.HasTPOT && r.TPOT > o.Limit {
				return false
			}
		case SLOITL:
			if r.HasITL && r.MaxITL > o.Limit {
				return false
			}
		case SLOE2EL:
			if r.E2EL > o.Limit {
				return false
			}
		} // SLOAgent bounds a conversation, not a request

	}
	return true
}
