package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startSlowChat serves a streamed chat completion that takes delay (the first, the preflight,
// is answered at once); fail(n) makes the n-th request (from 1) answer 503 instead.
func startSlowChat(tb testing.TB, delay time.Duration, fail func(n int64) bool) *httptest.Server {
	tb.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		i := n.Add(1)
		if fail != nil && fail(i) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"engine overloaded","type":"server_error"}}`)
			return
		}
		if i > 1 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"a", "b"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// readDetailed reads a --save-detailed file: its head and its records.
func readDetailed(tb testing.TB, path string) (map[string]any, []map[string]any) {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var head map[string]any
	var recs []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		if head == nil {
			head = m
			continue
		}
		recs = append(recs, m)
	}
	return head, recs
}

func TestBenchGracefulStopDrainsInFlight(t *testing.T) {
	t.Parallel()
	// Requests take 400 ms; the first Ctrl-C comes at 300 ms. Sending stops, the requests in
	// flight complete (none is cancelled), and the files cover them.
	srv := startSlowChat(t, 400*time.Millisecond, nil)
	dir := t.TempDir()
	out, detailed := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The Ctrl-C comes 300 ms into the run: after the line bench prints once the preflight
	// request succeeded.
	var stderr bytes.Buffer
	started := &lineWatch{w: &stderr, prefix: "ragtail bench:", seen: func() { time.AfterFunc(300*time.Millisecond, cancel) }}
	start := time.Now()
	err := run(ctx, []string{"bench", "--url", srv.URL, "--model", "m", "--request-rate", "40", "--duration", "30s",
		"--json", out, "--save-detailed", detailed, "--quiet"}, io.Discard, started)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v, want interrupted\n%s", err, stderr.String())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
	r := readJSON(t, out)
	cfg, _ := r["config"].(map[string]any)
	if cfg["interrupted"] != true || r["failed"] != 0.0 || r["completed"].(float64) < 5 {
		t.Errorf("interrupted %v, completed %v, failed %v (%v): want the in-flight requests completed",
			cfg["interrupted"], r["completed"], r["failed"], r["errors"])
	}
	_, recs := readDetailed(t, detailed)
	if float64(len(recs)) != r["completed"].(float64) {
		t.Errorf("%d detailed records, %v completed", len(recs), r["completed"])
	}
	for _, rec := range recs {
		if rec["ok"] != true || rec["e2el_ms"].(float64) < 400 {
			t.Errorf("record %v", rec)
		}
	}
	if !strings.Contains(stderr.String(), "Ctrl-C again to abort") {
		t.Errorf("stderr does not say how to abort:\n%s", stderr.String())
	}
}

// lineWatch passes writes through to w and calls seen once, when a write starts with prefix.
type lineWatch struct {
	w      io.Writer
	prefix string
	seen   func()
	once   sync.Once
}

func (l *lineWatch) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte(l.prefix)) {
		l.once.Do(l.seen)
	}
	return l.w.Write(p)
}

func TestBenchWarmup(t *testing.T) {
	t.Parallel()
	srv := startSlowChat(t, time.Millisecond, nil)
	dir := t.TempDir()
	out, detailed := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.jsonl")
	if err := run(context.Background(), []string{"bench", "--url", srv.URL + "/v1", "--model", "m", "--request-rate", "200",
		"--num-prompts", "20", "--warmup", "5", "--json", out, "--save-detailed", detailed, "--quiet"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	r := readJSON(t, out)
	if r["warmup"] != 5.0 || r["completed"] != 20.0 {
		t.Errorf("warmup %v, completed %v; want 5 and 20", r["warmup"], r["completed"])
	}
	_, recs := readDetailed(t, detailed)
	warm := 0
	for _, rec := range recs {
		if rec["warmup"] == true {
			warm++
		}
	}
	if len(recs) != 25 || warm != 5 {
		t.Errorf("%d records, %d warmup; want 25 and 5", len(recs), warm)
	}
}

func TestBenchFailsLoudly(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	dead := closed.URL
	closed.Close()
	// Seven of every ten requests fail, after a first that succeeds (the preflight).
	flaky := func() string {
		return startSlowChat(t, time.Millisecond, func(n int64) bool { return n > 1 && n%10 < 7 }).URL
	}
	wrongRoute := startSlowChat(t, time.Millisecond, nil)
	tests := []struct {
		name string
		args []string
		want []string // in the error; none: success
	}{
		{"nothing listening, model given", []string{"--url", dead, "--model", "m"}, []string{"preflight request", "connection refused", "is the server running"}},
		{"nothing listening, model asked", []string{"--url", dead}, []string{"cannot reach", "connection refused"}},
		{"wrong route", []string{"--url", wrongRoute.URL + "/api", "--model", "m"}, []string{"preflight request", "HTTP 404"}},
		{"failure rate above the default", []string{"--url", flaky(), "--model", "m"}, []string{"more than --max-error-rate 0.5", "http_5xx", "engine overloaded"}},
		{"failure rate allowed", []string{"--url", flaky(), "--model", "m", "--max-error-rate", "0.8"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "r.json")
			args := append([]string{"bench", "--request-rate", "500", "--num-prompts", "40", "--json", out, "--quiet"}, tt.args...)
			err := run(context.Background(), args, io.Discard, io.Discard)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("not one line: %q", err)
			}
			_, statErr := os.Stat(out)
			if ranLoad := strings.Contains(tt.name, "failure rate"); ranLoad == (statErr != nil) {
				t.Errorf("result file: %v (a run that happened writes it, one stopped by the preflight does not)", statErr)
			}
		})
	}
}

func TestBenchSegmentsMergeIntoTheRun(t *testing.T) {
	t.Parallel()
	// Two hosts (here two runs at once) send the two segments of one seeded schedule from one
	// --start-at instant; report merges their files into the whole run and says all are there.
	srv := startSlowChat(t, time.Millisecond, nil)
	dir := t.TempDir()
	startAt := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			errs <- run(context.Background(), []string{"bench", "--url", srv.URL + "/v1", "--model", "m", "--request-rate", "200",
				"--num-prompts", "200", "--seed", "7", "--segment", fmt.Sprintf("%d/2", i), "--start-at", startAt,
				"--json", filepath.Join(dir, fmt.Sprintf("seg%d.json", i)), "--quiet"}, io.Discard, io.Discard)
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s0, s1 := readJSON(t, filepath.Join(dir, "seg0.json")), readJSON(t, filepath.Join(dir, "seg1.json"))
	c0, _ := s0["config"].(map[string]any)
	c1, _ := s1["config"].(map[string]any)
	if c0["schedule_hash"] == nil || c0["schedule_hash"] != c1["schedule_hash"] || c0["segment"] == nil {
		t.Fatalf("configs %v and %v: want one schedule hash and a segment each", c0, c1)
	}
	if n := s0["completed"].(float64) + s1["completed"].(float64); n != 200 || s0["completed"].(float64) < 60 {
		t.Errorf("segments completed %v and %v, want 200 together, shared about evenly", s0["completed"], s1["completed"])
	}
	if s0["start"] != s1["start"] {
		// Both started on the --start-at instant (to the clock's resolution).
		a, _ := time.Parse(time.RFC3339Nano, s0["start"].(string))
		b, _ := time.Parse(time.RFC3339Nano, s1["start"].(string))
		if d := a.Sub(b); d > 50*time.Millisecond || d < -50*time.Millisecond {
			t.Errorf("starts %v and %v", a, b)
		}
	}

	merged := filepath.Join(dir, "merged.json")
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"report", filepath.Join(dir, "seg0.json"), filepath.Join(dir, "seg1.json"),
		"--json", merged, "--quiet"}, io.Discard, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "all 2 segments of schedule") {
		t.Errorf("report did not say the segments are all there: %q", stderr.String())
	}
	m := readJSON(t, merged)
	mc, _ := m["config"].(map[string]any)
	if m["completed"] != 200.0 || mc["segment"] != nil || mc["num_prompts"] != 200.0 || mc["request_rate"] != 200.0 || mc["schedule_hash"] != c0["schedule_hash"] {
		t.Errorf("merged: completed %v, config %v", m["completed"], mc)
	}
	// One segment alone is part of a run: report says so, and merges it only with --partial.
	err := run(context.Background(), []string{"report", filepath.Join(dir, "seg0.json"), filepath.Join(dir, "seg0.json"), "--quiet"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("a segment twice: %v", err)
	}

	// Without --segment, hosts started together send the same schedule: a warning says so.
	stderr.Reset()
	if err := run(context.Background(), []string{"bench", "--url", srv.URL, "--model", "m", "--request-rate", "200", "--num-prompts", "5",
		"--start-at", time.Now().Add(200 * time.Millisecond).UTC().Format(time.RFC3339Nano), "--quiet"}, io.Discard, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "synchronised bursts") {
		t.Errorf("no warning about identical schedules: %q", stderr.String())
	}
	for _, bad := range [][]string{{"--segment", "2/2"}, {"--segment", "0/2", "--concurrency", "4"}, {"--start-at", "2001-01-01T00:00:00Z"}} {
		args := append([]string{"bench", "--url", srv.URL, "--model", "m", "--num-prompts", "5", "--quiet"}, bad...)
		if !slices.Contains(bad, "--concurrency") {
			args = append(args, "--request-rate", "100")
		}
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestSweepFailsLoudly(t *testing.T) {
	t.Parallel()
	// Every request after the preflight fails: the first point fails too often, the sweep stops
	// there, writes its file, and exits with the failure rate.
	srv := startSlowChat(t, time.Millisecond, func(n int64) bool { return n > 1 })
	out := filepath.Join(t.TempDir(), "sweep.json")
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"sweep", "--url", srv.URL, "--model", "m", "--rates", "50,100",
		"--point-duration", "300ms", "--pause", "0s", "--json", out, "--quiet"}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "more than --max-error-rate 0.5") {
		t.Fatalf("err = %v, want the failure rate", err)
	}
	r := readJSON(t, out)
	if points, _ := r["points"].([]any); len(points) != 1 || !strings.Contains(stderr.String(), "sweep stops here") {
		t.Errorf("%d points, stderr %q: want the sweep stopped after the first", len(points), stderr.String())
	}
}
