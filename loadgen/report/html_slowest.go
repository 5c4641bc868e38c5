package report

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// HTMLOptions changes how WriteHTMLWith renders a page.
type HTMLOptions struct {
	// DebugURL is the origin of the target's debug endpoints (/debug/traces,
	// /debug/profiles), for the links of the slowest requests. Empty means the origin of the
	// run's target URL; ragtail serve answers them on its admin listener, so pass that one.
	DebugURL string
}

// slowRow is one slowest request joined with its server stages and its debug links.
type slowRow struct {
	ID, E2EL, TTFT, Status, Intended, Session string
	Stages                                    []string // one per slowView.Stages, "-" when absent
	Unaccounted                               string   // e2el minus the server's stages, ms
	TraceURL, ProfileURL                      string   // "" without a trace id or a debug origin
}

type slowView struct {
	Stages []string
	Rows   []slowRow
	Origin string
}

// debugOrigin is opt's DebugURL, else the scheme and host of the run's target, else "".
func debugOrigin(b *Bench, opt HTMLOptions) string {
	raw := opt.DebugURL
	if raw == "" {
		raw = b.Config.URL
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// slowest joins the slowest requests with their server stages and debug links.
func slowest(b *Bench, opt HTMLOptions) slowView {
	v := slowView{Origin: debugOrigin(b, opt)}
	set := map[string]*stats.Histogram{}
	for _, s := range b.Slowest {
		for k := range s.ServerTiming {
			set[k] = nil
		}
	}
	v.Stages = stageOrder(set)
	for _, s := range b.Slowest {
		v.Rows = append(v.Rows, slowRowOf(s, v.Stages, v.Origin))
	}
	return v
}

func slowRowOf(s SlowRequest, stages []string, origin string) slowRow {
	r := slowRow{ID: s.TraceID, E2EL: fmtMS(s.E2EL), TTFT: "-", Status: fmt.Sprint(s.Status),
		Intended: fmt.Sprintf("%.3f", s.Intended.Seconds()), Session: s.Session, Unaccounted: "-"}
	if r.ID == "" {
		r.ID = fmt.Sprintf("(request %d)", s.Index)
	}
	if s.TTFT > 0 {
		r.TTFT = fmtMS(s.TTFT)
	}
	if s.ErrKind != "" {
		r.Status += " " + s.ErrKind
	}
	var sum float64
	for _, st := range stages {
		ms, ok := s.ServerTiming[st]
		if !ok {
			r.Stages = append(r.Stages, "-")
			continue
		}
		sum += ms
		r.Stages = append(r.Stages, fmt.Sprintf("%.2f", ms))
	}
	if len(s.ServerTiming) > 0 {
		r.Unaccounted = fmt.Sprintf("%.2f", durationMS(s.E2EL)-sum)
	}
	if origin != "" && s.TraceID != "" && validTraceID(s.TraceID) {
		q := url.Values{"trace_id": {s.TraceID}}.Encode()
		r.TraceURL = origin + "/debug/traces?" + q
		r.ProfileURL = origin + "/debug/profiles?" + q
	}
	return r
}

// validTraceID reports whether id is 32 lower-case hex digits, the W3C trace id form.
func validTraceID(id string) bool {
	return len(id) == 32 && strings.Trim(id, "0123456789abcdef") == ""
}
