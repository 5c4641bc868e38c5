package profile

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	netpprof "net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	pyropprof "github.com/grafana/pyroscope-go/http/pprof"

	"github.com/grafana/pyroscope-go"
)

// Limits of the /debug/profiles parameters.
const (
	defaultTop = 20
	maxTop     = 10000
	maxStage   = 64
)

// queryParams are the parameters GET /debug/profiles understands.
var queryParams = []string{"from", "until", "trace_id", "span_id", "stage", "type", "view", "format", "top"}

// request is a parsed GET /debug/profiles request.
type request struct {
	list   bool // no parameter: list the windows
	query  Query
	both   bool   // answer the CPU and the wall-clock view together
	format string // "json" or "pprof"
	top    int
}

// Handler serves GET /debug/profiles from s:
//
//   - with no parameter, the stored windows as JSON: {"windows":[{"id","type","profile_types",
//     "from","until","bytes"}...],"stats":{...},"wall_sampler":{...}} (the wall sampler's
//     rate, cost and resolution, WallStats, while it runs);
//   - with any of from, until (RFC 3339 with optional fraction, or unix nanoseconds), trace_id (32
//     hex digits), span_id (16 hex digits), stage (a rag_stage value), type (a pyroscope profile
//     type, default cpu), the windows overlapping [from, until] merged and filtered by the labels:
//     format=pprof answers the gzipped pprof (application/octet-stream, for `go tool pprof`);
//     the default format=json answers {"type","unit","from","until","windows","samples",
//     "functions":[{"name","self","total","self_pct","total_pct"}...],"stages":[{"stage",
//     "seconds","share"}...]} with the top=N functions by self value (default 20);
//   - view=cpu or view=wall picks the CPU view (type=cpu) or the wall-clock view (type=wall:
//     where the labelled goroutines were, running or parked, from the wall sampler); with no type
//     and no view, format=json answers both views (Views): the CPU summary at the top level and
//     the wall-clock summary under "wall", either empty (samples 0, "empty": why) as long as
//     the other has samples; format=pprof answers the CPU view.
//
// Every window a query selects is parsed, about 2.4 ms for a 10 s CPU window of 500 stacks, so
// give a trace's start and end as from and until rather than scanning the whole store.
//
// Bad parameters answer 400, a range or filter matching nothing 404, both with an OpenAI-style
// error body ({"error":{"message","type","code"}}). A nil store answers 503: profiling is off.
func Handler(s *Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
			return
		}
		if s == nil {
			writeError(w, http.StatusServiceUnavailable, "profiling_disabled",
				"the continuous profiler is not running; start the service with profiling on")
			return
		}
		req, err := parseRequest(r.URL.Query())
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_parameter", err.Error())
			return
		}
		if req.list {
			list := struct {
				Windows []WindowInfo `json:"windows"`
				Stats   StoreStats   `json:"stats"`
				Wall    *WallStats   `json:"wall_sampler,omitempty"`
			}{Windows: s.Windows(), Stats: s.Stats()}
			if ws, ok := s.WallStats(); ok {
				list.Wall = &ws
			}
			writeJSON(w, http.StatusOK, list)
			return
		}
		if req.both {
			cpu, cpuErr := s.query(req.query)
			wq := req.query
			wq.Type = ProfileWall
			wall, wallErr := s.query(wq)
			if cpuErr != nil && wallErr != nil {
				writeQueryError(w, errors.Join(cpuErr, wallErr))
				return
			}
			for _, err := range []error{cpuErr, wallErr} {
				if err != nil && !errors.Is(err, ErrNoWindows) && !errors.Is(err, ErrNoSamples) {
					writeQueryError(w, err)
					return
				}
			}
			views := Views{Summary: summarize(pyroscope.ProfileCPU, cpu, cpuErr, req.top)}
			ws := summarize(ProfileWall, wall, wallErr, req.top)
			views.Wall = &ws
			writeJSON(w, http.StatusOK, views)
			return
		}
		res, err := s.query(req.query)
		if err != nil {
			writeQueryError(w, err)
			return
		}
		if req.format == "pprof" {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", `attachment; filename="profile.pb.gz"`)
			w.WriteHeader(http.StatusOK)
			_ = res.profile.Write(w) // the client went away; nothing left to tell it
			return
		}
		writeJSON(w, http.StatusOK, summarize(req.query.Type, res, nil, req.top))
	})
}

// Views is the JSON answer of a query naming no type or view: the CPU view's summary at the top
// level, as a query for type=cpu answers it, and the wall-clock view's under "wall". A view with
// no matching sample has zero samples and says why in "empty".
type Views struct {
	Summary
	Wall *Summary `json:"wall,omitempty"`
}

// summarize builds the JSON summary of a query result; err, when set, is why the view is empty.
func summarize(typ pyroscope.ProfileType, res queryResult, err error, top int) Summary {
	if err != nil {
		return Summary{Type: string(typ), Functions: []FunctionStat{}, Empty: err.Error()}
	}
	fns, sum, unit := topFunctions(res.profile, res.sampleType, top)
	return Summary{
		Type:      string(typ),
		Unit:      unit,
		From:      res.from.Format(time.RFC3339Nano),
		Until:     res.until.Format(time.RFC3339Nano),
		Windows:   res.windows,
		Samples:   sum,
		Functions: fns,
		Stages:    stageStats(res.stageNanos),
		// A wall view's resolution; zero, and so omitted, in the other views.
		MaxIntervalSec: res.maxInterval.Seconds(),
	}
}

func writeQueryError(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrNoWindows) || errors.Is(err, ErrNoSamples) {
		writeError(w, http.StatusNotFound, "not_found", err.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, "profile_error", err.Error())
}

// parseRequest validates the query parameters of GET /debug/profiles.
func parseRequest(v url.Values) (request, error) {
	req := request{format: "json", top: defaultTop, query: Query{Type: pyroscope.ProfileCPU}}
	if len(v) == 0 {
		req.list = true
		return req, nil
	}
	for key, vals := range v {
		if !slices.Contains(queryParams, key) {
			return req, fmt.Errorf("unknown parameter %q (known: %s)", key, strings.Join(queryParams, ", "))
		}
		if len(vals) > 1 {
			return req, fmt.Errorf("parameter %q given %d times", key, len(vals))
		}
	}
	var err error
	if req.query.From, err = parseTime(v, "from"); err != nil {
		return req, err
	}
	if req.query.Until, err = parseTime(v, "until"); err != nil {
		return req, err
	}
	if !req.query.From.IsZero() && !req.query.Until.IsZero() && req.query.Until.Before(req.query.From) {
		return req, errors.New("until is before from")
	}
	if req.query.TraceID, err = parseID(v, "trace_id", 16); err != nil {
		return req, err
	}
	if req.query.SpanID, err = parseID(v, "span_id", 8); err != nil {
		return req, err
	}
	if stage := v.Get("stage"); stage != "" {
		if len(stage) > maxStage || strings.ContainsFunc(stage, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return req, fmt.Errorf("stage %q: want a rag_stage name such as generate (printable ASCII, at most %d bytes)", stage, maxStage)
		}
		req.query.Stage = stage
	}
	if t := v.Get("type"); t != "" {
		if _, ok := profileTypes[pyroscope.ProfileType(t)]; !ok {
			return req, fmt.Errorf("type %q: want one of %s", t, strings.Join(typeNames(), ", "))
		}
		req.query.Type = pyroscope.ProfileType(t)
	}
	switch f := v.Get("format"); f {
	case "", "json":
	case "pprof":
		req.format = f
	default:
		return req, fmt.Errorf("format %q: want json or pprof", f)
	}
	switch view := v.Get("view"); view {
	case "":
		req.both = !v.Has("type") && req.format == "json"
	case "cpu", ProfileWall, "both":
		if v.Has("type") {
			return req, errors.New("give view (cpu, wall or both) or type, not both")
		}
		switch view {
		case "both":
			if req.format == "pprof" {
				return req, errors.New("view=both answers JSON; a pprof profile holds one view: give view=cpu or view=wall")
			}
			req.both = true
		case "cpu":
			req.query.Type = pyroscope.ProfileCPU
		default:
			req.query.Type = ProfileWall
		}
	default:
		return req, fmt.Errorf("view %q: want cpu (what requests computed), wall (where their goroutines were, waiting included) or both", view)
	}
	if t := v.Get("top"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 || n > maxTop {
			return req, fmt.Errorf("top %q: want an integer from 1 to %d", t, maxTop)
		}
		req.top = n
	}
	return req, nil
}

// parseTime reads a time given as RFC 3339 (fraction optional) or as unix nanoseconds.
func parseTime(v url.Values, key string) (time.Time, error) {
	s := v.Get(key)
	if s == "" {
		return time.Time{}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return time.Time{}, fmt.Errorf("%s %q: unix nanoseconds must be positive", key, s)
		}
		return time.Unix(0, n), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: want RFC 3339 (2006-01-02T15:04:05.999999999Z07:00) or unix nanoseconds", key, s)
	}
	return t, nil
}

// parseID reads a W3C trace or span id: size bytes as lower-case hex, not all zero.
func parseID(v url.Values, key string, size int) (string, error) {
	s := v.Get(key)
	if s == "" {
		return "", nil
	}
	s = strings.ToLower(s)
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != size {
		return "", fmt.Errorf("%s %q: want %d hex digits", key, v.Get(key), 2*size)
	}
	if !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
		return "", fmt.Errorf("%s %q: an all-zero id is invalid", key, s)
	}
	return s, nil
}

func typeNames() []string {
	names := make([]string, 0, len(profileTypes))
	for t := range profileTypes {
		names = append(names, string(t))
	}
	slices.Sort(names)
	return names
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing left to tell it
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	type body struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	}
	writeJSON(w, status, struct {
		Error body `json:"error"`
	}{body{Message: msg, Type: typ, Code: code}})
}

// CPUProfileHandler serves /debug/pprof/profile through pyroscope-go's handler, which shares the
// CPU profile with the running continuous profiler (see PprofHandler). Give it to the admin
// handler with httpapi.WithCPUProfile; the admin handler serves the other pprof routes itself.
func CPUProfileHandler() http.Handler { return http.HandlerFunc(pyropprof.Profile) }

// PprofHandler serves /debug/pprof/* like net/http/pprof, except /debug/pprof/profile, which
// goes through pyroscope-go's handler: the standard one fails with "cpu profiling already in use"
// while the continuous profiler runs, pyroscope-go's pauses the background collection, hands the
// CPU profile to the caller and to the running session alike, and resumes it. Mount it at
// /debug/pprof/ without stripping the prefix (chi: r.Handle("/debug/pprof/*", h)).
//
// Deprecated: mount CPUProfileHandler with httpapi.WithCPUProfile, so the pprof routes are
// registered in one place.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", netpprof.Index) // also serves heap, goroutine, allocs, ... by name
	mux.HandleFunc("/debug/pprof/cmdline", netpprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pyropprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", netpprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", netpprof.Trace)
	return mux
}
