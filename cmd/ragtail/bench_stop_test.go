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
	"strings"
	"sync/atomic"
	"syscall"
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
	timer := time.AfterFunc(300*time.Millisecond, cancel)
	defer timer.Stop()
	var stderr bytes.Buffer
	start := time.Now()
	err := run(ctx, []string{"bench", "--url", srv.URL, "--model", "m", "--request-rate", "40", "--duration", "30s",
		"--json", out, "--save-detailed", detailed, "--quiet"}, io.Discard, &stderr)
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

func TestWatchInterrupts(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 2)
	unwatched := false
	runCtx, stop, release := watchInterrupts(context.Background(), sigs, func() { unwatched = true }, io.Discard, time.Minute)
	sigs <- syscall.SIGINT
	select {
	case <-stop:
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not stop the run")
	}
	if runCtx.Err() != nil {
		t.Fatal("the first signal aborted the run")
	}
	sigs <- syscall.SIGTERM
	select {
	case <-runCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal did not abort the run")
	}
	release()
	if !unwatched {
		t.Error("release did not stop watching the signals")
	}
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
