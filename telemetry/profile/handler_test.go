package profile

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func get(tb testing.TB, h http.Handler, method, target string) *httptest.ResponseRecorder {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

func TestHandlerList(t *testing.T) {
	h := Handler(fixtureStore(t))
	rec := get(t, h, http.MethodGet, "/debug/profiles")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var body struct {
		Windows []WindowInfo `json:"windows"`
		Stats   StoreStats   `json:"stats"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Windows) != 2 || body.Stats.Windows != 2 {
		t.Fatalf("windows %+v stats %+v", body.Windows, body.Stats)
	}
	w := body.Windows[1]
	if w.ID != 2 || w.Kind != KindCPU || !w.From.Equal(t0.Add(10*time.Second)) || !w.Until.Equal(t0.Add(20*time.Second)) || w.Bytes == 0 {
		t.Errorf("second window %+v", w)
	}
	for _, key := range []string{`"type": "cpu"`, `"profile_types": [`, `"from": "2026-03-01T12:00:10Z"`, `"bytes":`} {
		if !strings.Contains(rec.Body.String(), key) {
			t.Errorf("list lacks %s:\n%s", key, rec.Body)
		}
	}
}

func TestHandlerJSON(t *testing.T) {
	h := Handler(fixtureStore(t))
	tests := []struct {
		name      string
		query     string
		samples   int64
		windows   int
		functions []string
	}{
		{"trace", "trace_id=" + traceA, 12, 2, []string{"burn", "hash", "main", "handle"}},
		{"trace upper case", "trace_id=" + strings.ToUpper(traceA), 12, 2, []string{"burn", "hash", "main", "handle"}},
		{"top 2", "trace_id=" + traceA + "&top=2", 12, 2, []string{"burn", "hash"}},
		{"stage", "stage=embed", 3, 1, []string{"hash", "handle", "main"}},
		{"span and type", "span_id=" + spanS1 + "&type=cpu&format=json", 7, 1, []string{"burn", "handle", "main"}},
		{"RFC 3339 range", "from=" + url.QueryEscape(t0.Add(12*time.Second).Format(time.RFC3339Nano)) +
			"&until=" + url.QueryEscape(t0.Add(15*time.Second).Format(time.RFC3339)), 6, 1, []string{"burn", "main", "handle"}},
		{"unix nanos range", "from=" + strconv.FormatInt(t0.Add(12*time.Second).UnixNano(), 10) +
			"&until=" + strconv.FormatInt(t0.Add(15*time.Second).UnixNano(), 10) + "&trace_id=" + traceA, 2, 1, []string{"burn", "main"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := get(t, h, http.MethodGet, "/debug/profiles?"+tt.query)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var s Summary
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
				t.Fatal(err)
			}
			if s.Samples != tt.samples || s.Windows != tt.windows || s.Type != "cpu" || s.Unit != "count" {
				t.Errorf("summary %+v, want %d samples in %d windows", s, tt.samples, tt.windows)
			}
			var names []string
			var selfSum int64
			for _, f := range s.Functions {
				names = append(names, f.Name)
				selfSum += f.Self
			}
			if strings.Join(names, ",") != strings.Join(tt.functions, ",") {
				t.Errorf("functions %v, want %v", names, tt.functions)
			}
			if !strings.Contains(tt.query, "top=") && selfSum != s.Samples {
				t.Errorf("self values sum to %d, want every sample's leaf counted once: %d", selfSum, s.Samples)
			}
			if _, err := time.Parse(time.RFC3339Nano, s.From); err != nil {
				t.Errorf("from %q: %v", s.From, err)
			}
		})
	}
}

func TestHandlerPprof(t *testing.T) {
	h := Handler(fixtureStore(t))
	rec := get(t, h, http.MethodGet, "/debug/profiles?format=pprof&trace_id="+traceA)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("status %d, content type %q: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	raw := rec.Body.Bytes()
	if len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		t.Fatal("body is not gzipped")
	}
	p, err := profile.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range p.Sample {
		if !s.HasLabel(LabelTraceID, traceA) {
			t.Errorf("sample without the trace label: %v", s.Label)
		}
		n += s.Value[0]
	}
	if n != 12 || p.DefaultSampleType != "samples" || p.TimeNanos != t0.UnixNano() || p.DurationNanos != int64(20*time.Second) {
		t.Errorf("%d samples, default %q, time %d, duration %d", n, p.DefaultSampleType, p.TimeNanos, p.DurationNanos)
	}
}

func TestHandlerErrors(t *testing.T) {
	h := Handler(fixtureStore(t))
	tests := []struct {
		name   string
		method string
		query  string
		status int
		msg    string // part of the error message
	}{
		{"bad from", "GET", "from=yesterday", 400, "from"},
		{"negative nanos", "GET", "until=-5", 400, "positive"},
		{"until before from", "GET", "from=2026-03-01T12:00:10Z&until=2026-03-01T12:00:00Z", 400, "before"},
		{"short trace id", "GET", "trace_id=abc", 400, "32 hex digits"},
		{"non-hex trace id", "GET", "trace_id=" + strings.Repeat("z", 32), 400, "32 hex digits"},
		{"zero trace id", "GET", "trace_id=" + strings.Repeat("0", 32), 400, "all-zero"},
		{"long span id", "GET", "span_id=" + traceA, 400, "16 hex digits"},
		{"stage with a space", "GET", "stage=gen%20erate", 400, "stage"},
		{"long stage", "GET", "stage=" + strings.Repeat("s", 65), 400, "stage"},
		{"unknown type", "GET", "type=itimer", 400, "alloc_space"},
		{"unknown format", "GET", "format=svg", 400, "json or pprof"},
		{"top zero", "GET", "top=0", 400, "top"},
		{"top not a number", "GET", "top=ten", 400, "top"},
		{"top too large", "GET", "top=10001", 400, "top"},
		{"unknown parameter", "GET", "traceid=" + traceA, 400, "unknown parameter"},
		{"repeated parameter", "GET", "stage=embed&stage=fetch", 400, "2 times"},
		{"no sample of the trace", "GET", "trace_id=" + traceC, 404, "no samples match"},
		{"no window in range", "GET", "until=2020-01-01T00:00:00Z", 404, "no profile window"},
		{"no memory window", "GET", "type=inuse_space", 404, "no profile window"},
		{"post", "POST", "", 405, "GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := get(t, h, tt.method, "/debug/profiles?"+tt.query)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("error body %q: %v", rec.Body, err)
			}
			if !strings.Contains(body.Error.Message, tt.msg) || body.Error.Type != "invalid_request_error" || body.Error.Code == "" {
				t.Errorf("error %+v, want a message containing %q", body.Error, tt.msg)
			}
		})
	}
}

func TestHandlerNilStore(t *testing.T) {
	rec := get(t, Handler(nil), http.MethodGet, "/debug/profiles")
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", rec.Code)
	}
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != "profiling_disabled" {
		t.Errorf("body %s (%v)", rec.Body, err)
	}
}

func TestPprofHandlerRoutes(t *testing.T) {
	srv := httptest.NewServer(PprofHandler())
	defer srv.Close()
	tests := []struct {
		path string
		want string // part of the body
	}{
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/cmdline", "profile.test"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
		{"/debug/pprof/symbol", "num_symbols"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, err := srv.Client().Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), tt.want) {
				t.Errorf("status %d, body lacks %q: %.200s", resp.StatusCode, tt.want, b)
			}
		})
	}
}

// TestHandlerViews checks the wall-clock view beside the CPU view: a trace that computed little
// and waited long answers both, the CPU view empty and saying why, the wall view with its stages.
func TestHandlerViews(t *testing.T) {
	const traceA, traceB = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
	s := NewStore(0, 0)
	cpu := cpuProfile(t, synthSample{stack: stack("embed", "handler"), labels: labels(LabelTraceID, traceA, LabelStage, "embed"), count: 3})
	if err := s.Add(KindCPU, t0, t0.Add(time.Second), cpu); err != nil {
		t.Fatal(err)
	}
	// A wall sampler's window, filled from a hand-written goroutine profile in its text form.
	w := newWallSampler(s, time.Now, 100, time.Minute)
	w.open = w.newWindow(t0)
	text := func(stage, trace string, n int) []byte {
		return []byte(fmt.Sprintf("%d @ 0x%x\n# labels: {\"rag_stage\":%q, \"trace_id\":%q}\n\n", n, pcOf(t), stage, trace))
	}
	for i := range 30 {
		at := t0.Add(time.Duration(i+1) * 10 * time.Millisecond)
		switch {
		case i < 10:
			w.add(text("retrieve", traceB, 4), at) // four shard goroutines, 100 ms
		default:
			w.add(text("generate", traceB, 1), at) // 200 ms
		}
	}
	w.mu.Lock()
	w.closeLocked(t0.Add(time.Second))
	w.mu.Unlock()

	h := Handler(s)
	tests := []struct {
		name, query string
		status      int
		check       func(t *testing.T, body []byte)
	}{
		{"both views, cpu empty", "trace_id=" + traceB, 200, func(t *testing.T, body []byte) {
			var v Views
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			if v.Type != "cpu" || v.Samples != 0 || !strings.Contains(v.Empty, "no samples match") {
				t.Errorf("cpu view %+v, want empty with a reason", v.Summary)
			}
			if v.Wall == nil || v.Wall.Unit != "nanoseconds" || len(v.Wall.Stages) != 2 {
				t.Fatalf("wall view %+v", v.Wall)
			}
			// Presence counts the fanned-out stage once per snapshot: 100 ms, not 400.
			want := map[string]float64{"generate": 0.2, "retrieve": 0.1}
			for _, st := range v.Wall.Stages {
				if math.Abs(st.Seconds-want[st.Stage]) > 1e-9 {
					t.Errorf("stage %s: %v s, want %v", st.Stage, st.Seconds, want[st.Stage])
				}
			}
			if v.Wall.Samples != int64(600*time.Millisecond) {
				t.Errorf("wall samples %d ns, want 600 ms of goroutine time", v.Wall.Samples)
			}
		}},
		{"both views, wall empty", "trace_id=" + traceA, 200, func(t *testing.T, body []byte) {
			var v Views
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			if v.Samples != 3 || v.Wall == nil || v.Wall.Empty == "" {
				t.Errorf("views %+v / %+v", v.Summary, v.Wall)
			}
		}},
		{"wall view alone", "view=wall&trace_id=" + traceB + "&stage=retrieve", 200, func(t *testing.T, body []byte) {
			var v Views
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			if v.Type != "wall" || v.Wall != nil || len(v.Stages) != 1 || v.Stages[0].Stage != "retrieve" {
				t.Errorf("answer %s", body)
			}
		}},
		{"wall pprof", "view=wall&format=pprof&trace_id=" + traceB, 200, func(t *testing.T, body []byte) {
			p, err := profile.ParseData(body)
			if err != nil {
				t.Fatal(err)
			}
			if p.SampleType[1].Type != "wall" || len(p.Sample) != 2 {
				t.Errorf("profile types %v, %d samples", p.SampleType, len(p.Sample))
			}
		}},
		{"type=wall", "type=wall&trace_id=" + traceB, 200, nil},
		{"neither view has samples", "trace_id=" + strings.Repeat("1", 32), 404, nil},
		{"both as pprof", "view=both&format=pprof", 400, nil},
		{"view and type", "view=wall&type=cpu", 400, nil},
		{"unknown view", "view=offcpu", 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := get(t, h, "GET", "/debug/profiles?"+tt.query)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.check != nil {
				tt.check(t, rec.Body.Bytes())
			}
		})
	}
}

// pcOf returns a return address inside the test binary, for a stack the symbolizer can name.
func pcOf(tb testing.TB) uintptr {
	tb.Helper()
	pcs := make([]uintptr, 1)
	runtime.Callers(1, pcs)
	return pcs[0]
}
