package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/loadgen/dashboard"
	"github.com/ragtail/ragtail/loadgen"
)

// streamingServer answers every chat completion with 5 tokens, 20 ms apart, and counts them.
func streamingServer(tb testing.TB) (*httptest.Server, *atomic.Int64) {
	tb.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 5 {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, `data: {"choices":[{"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":5}}`+"\n\ndata: [DONE]\n\n")
	}))
	tb.Cleanup(srv.Close)
	return srv, &n
}

// benchOptions parses a bench command line as the bench command does.
func benchOptions(tb testing.TB, args ...string) Options {
	tb.Helper()
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		tb.Fatal(err)
	}
	o.FlagsParsed(fs)
	return o
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatal(err)
	}
	return addr
}

func getState(ctx context.Context, url string) (*dashboard.State, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/state?from=0", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st dashboard.State
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

// TestDashboardDuringARun reads the dashboard's JSON while a 5 s bench runs against a
// streaming server: the series grow, their figures are the run's, and the page ends on the
// final report.
func TestDashboardDuringARun(t *testing.T) {
	t.Parallel()
	srv, _ := streamingServer(t)
	addr := freeAddr(t)
	o := benchOptions(t, "--url", srv.URL+"/v1/chat/completions", "--model", "m", "--request-rate", "25",
		"--duration", "5s", "--max-tokens", "5", "--dataset", "short", "--quiet", "--server-metrics", "off",
		"--dashboard", addr, "--dashboard-linger", "20s")
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), o, &stdout, &stderr) }()

	url := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var reads []*dashboard.State
	for len(reads) < 2 {
		time.Sleep(1500 * time.Millisecond)
		st, err := getState(ctx, url)
		if err != nil {
			t.Fatalf("read %d: %v", len(reads)+1, err)
		}
		if st.Final {
			t.Fatal("the run ended before the second read")
		}
		reads = append(reads, st)
	}
	first, second := reads[0], reads[1]
	t.Logf("points at the two reads: %d, %d; completed %d, %d", len(first.Points), len(second.Points),
		first.Totals.Completed, second.Totals.Completed)
	if len(second.Points) <= len(first.Points) || second.Totals.Completed <= first.Totals.Completed {
		t.Errorf("the series did not grow: %d then %d points, %d then %d completed", len(first.Points),
			len(second.Points), first.Totals.Completed, second.Totals.Completed)
	}
	if !strings.Contains(second.Title, "poisson(rate=25)") {
		t.Errorf("title %q", second.Title)
	}
	last := second.Points[len(second.Points)-1]
	// 5 tokens 20 ms apart: E2EL about 100 ms, TTFT about 20 ms, a little more from the send.
	if last.E2EL.N == 0 || *last.E2EL.P50 < 100 || *last.E2EL.P50 > 400 || *last.TTFT.P50 < 20 || *last.TTFT.P50 > 300 {
		t.Errorf("last point %+v: want E2EL about 100 ms and TTFT about 20 ms", last)
	}
	if last.InFlight < 0 || last.InFlight > 25 {
		t.Errorf("%d in flight at 25 req/s of 100 ms requests", last.InFlight)
	}

	// Poll as the page does until the run ends, then load the report, which ends the linger.
	var final *dashboard.State
	for final == nil {
		time.Sleep(500 * time.Millisecond)
		st, err := getState(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if st.Final {
			final = st
		}
	}
	if final.Totals.Completed < 60 || final.Totals.Failed != 0 {
		t.Errorf("final totals %+v: want about 125 completed at 25 req/s for 5 s", final.Totals)
	}
	sum := 0
	for _, p := range final.Points {
		sum += p.Completed
	}
	if sum != final.Totals.Completed {
		t.Errorf("the points count %d completed, the totals %d", sum, final.Totals.Completed)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/report", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("ragtail bench report")) {
		t.Errorf("report: %d, %d bytes", resp.StatusCode, len(body))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bench: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dashboard lingered after a page loaded the report")
	}
	if _, err := getState(ctx, url); err == nil {
		t.Error("the dashboard still serves after the run")
	}
}

func TestDashboardAddressErrors(t *testing.T) {
	t.Parallel()
	srv, sent := streamingServer(t)
	var lc net.ListenConfig
	taken, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tt := range []struct {
		name, addr, want string
	}{
		{"in use", taken.Addr().String(), "--dashboard: listen on " + taken.Addr().String()},
		{"no port", "localhost", `--dashboard "localhost": want host:port`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := benchOptions(t, "--url", srv.URL+"/v1/chat/completions", "--model", "m", "--num-prompts", "5",
				"--quiet", "--server-metrics", "off", "--dashboard", tt.addr)
			err := Run(context.Background(), o, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
		})
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("%d requests sent: a bad --dashboard must fail before the run", n)
	}
}

// TestDashboardOfASweep runs a two-point sweep with a dashboard: the points carry the sweep's
// point and rate as their phase, and the page ends on the sweep's report.
func TestDashboardOfASweep(t *testing.T) {
	t.Parallel()
	srv, _ := streamingServer(t)
	addr := freeAddr(t)
	var o SweepOptions
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"--url", srv.URL + "/v1/chat/completions", "--model", "m", "--rates", "20,40",
		"--point-duration", "2s", "--pause", "1s", "--max-tokens", "5", "--dataset", "short", "--quiet",
		"--server-metrics", "off", "--dashboard", addr, "--dashboard-linger", "20s"}); err != nil {
		t.Fatal(err)
	}
	o.FlagsParsed(fs)
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() { done <- Sweep(context.Background(), o, io.Discard, &stderr) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var final *dashboard.State
	for final == nil {
		time.Sleep(500 * time.Millisecond)
		st, err := getState(ctx, "http://"+addr)
		if err != nil {
			select {
			case err := <-done:
				t.Fatalf("the sweep ended before its dashboard was final: %v\n%s", err, stderr.String())
			default:
			}
			t.Fatal(err)
		}
		if st.Final {
			final = st
		}
	}
	phases := map[string]int{}
	for _, p := range final.Points {
		phases[p.Phase] += p.Completed
	}
	for _, want := range []string{"point 1/2: 20 req/s", "point 2/2: 40 req/s"} {
		if phases[want] == 0 {
			t.Errorf("no completed request in phase %q: %v", want, phases)
		}
	}
	if !strings.HasPrefix(final.Title, "sweep ") {
		t.Errorf("title %q", final.Title)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/report", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte("sweep")) {
		t.Errorf("the final report is not the sweep's: %.200s", body)
	}
	if err := <-done; err != nil {
		t.Fatalf("sweep: %v\n%s", err, stderr.String())
	}
}

// TestWatchKeepsThePrintersInterval: the dashboard takes a snapshot a second, and the progress
// line is still printed at its own interval.
func TestWatchKeepsThePrintersInterval(t *testing.T) {
	t.Parallel()
	v := &liveView{store: dashboard.NewStore(time.Now())}
	var printed []time.Duration
	cfg := loadgenConfigWithProgress(func(e time.Duration) { printed = append(printed, e) }, 5*time.Second)
	v.watch(&cfg)
	if cfg.ProgressInterval != time.Second {
		t.Fatalf("progress every %s, want a second", cfg.ProgressInterval)
	}
	for i := 1; i <= 12; i++ {
		cfg.Progress(progressAt(time.Duration(i)*time.Second + time.Duration(i)*time.Millisecond))
	}
	if fmt.Sprint(printed) != "[5.005s 10.01s]" {
		t.Errorf("printed at %v, want 5 s and 10 s", printed)
	}
}

func loadgenConfigWithProgress(print func(time.Duration), every time.Duration) loadgen.Config {
	return loadgen.Config{Progress: func(p loadgen.Progress) { print(p.Elapsed) }, ProgressInterval: every}
}

func progressAt(elapsed time.Duration) loadgen.Progress { return loadgen.Progress{Elapsed: elapsed} }
