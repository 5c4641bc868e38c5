package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for one writer goroutine and a reading test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	// Every command's summary starts in one column, two spaces or more after the longest name.
	column := -1
	for _, c := range commands() {
		line := ""
		for l := range strings.Lines(out.String()) {
			if strings.HasPrefix(l, "  "+c.name+" ") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("usage does not list %s:\n%s", c.name, out.String())
			continue
		}
		at := strings.Index(line, c.summary)
		if at < 0 || strings.TrimSpace(line[2+len(c.name):at]) != "" || at-2-len(c.name) < 2 {
			t.Errorf("usage line of %s: %q, want the name, two spaces or more, the summary", c.name, line)
		}
		if column >= 0 && at != column {
			t.Errorf("summary of %s starts at column %d, others at %d:\n%s", c.name, at, column, out.String())
		}
		column = at
	}
	for _, c := range commands() {
		if c.name == "version" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), []string{c.name, "--help"}, &out, io.Discard)
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("err = %v, want flag.ErrHelp", err)
			}
			if !strings.Contains(out.String(), "Usage: ragtail "+c.name) || !strings.Contains(out.String(), "-") {
				t.Errorf("help of %s:\n%s", c.name, out.String())
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want error
		msg  string
	}{
		{"unknown command", []string{"frobnicate"}, errUsage, "unknown command"},
		{"unknown flag", []string{"serve", "--no-such-flag"}, errUsage, "no-such-flag"},
		{"stray argument", []string{"serve", "extra"}, errUsage, "unexpected argument"},
		{"bad latency law", []string{"serve", "--shard-latency", "gauss:5ms"}, errUsage, "unknown kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tt.args, io.Discard, &stderr)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.msg)
			}
		})
	}
}

func TestServeRejectsBadSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"profile", []string{"--profile", "gpt-5"}, "unknown llm-sim profile"},
		{"coupling", []string{"--coupling", "psychic"}, "coupling"},
		{"shards", []string{"--shards", "0"}, "--shards"},
		{"law count", []string{"--shards", "3", "--shard-latency", "fixed:1ms;fixed:2ms"}, "2 laws for 3 shards"},
		{"kv alloc", []string{"--kv-alloc", "buddy"}, "allocation mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", ""}, tt.args...)
			err := run(context.Background(), args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.msg)
			}
		})
	}
}

var servingLine = regexp.MustCompile(`on http://(127\.0\.0\.1:\d+)`)

// servingOut keeps the stdout of each serve startServe started, by API address.
var (
	servingMu  sync.Mutex
	servingOut = map[string]*syncBuffer{}
)

// startServe runs `ragtail serve` with args until the returned cancel is called; it returns the
// API address and a channel with run's result.
func startServe(t *testing.T, args ...string) (addr string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-level", "warn"}, args...), stdout, io.Discard)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := servingLine.FindStringSubmatch(stdout.String()); m != nil {
			t.Cleanup(cancel)
			servingMu.Lock()
			servingOut[m[1]] = stdout
			servingMu.Unlock()
			return m[1], cancel, errc
		}
		select {
		case err := <-errc:
			t.Fatalf("serve exited early: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("serve did not start within 30 s")
		}
	}
}

func TestServeStreamsAndShutsDownGracefully(t *testing.T) {
	t.Parallel()
	addr, cancel, done := startServe(t, "--profile", "tiny", "--corpus-docs", "40", "--shutdown-grace", "20s")
	body := `{"model":"ragtail-tiny","stream":true,"stream_options":{"include_usage":true},"max_tokens":400,
	          "messages":[{"role":"user","content":"How do shards and caches shape tail latency?"}]}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n') // the role chunk: the stream is running
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel() // SIGTERM: stop accepting, let the running stream finish
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("stream cut during graceful shutdown: %v", err)
	}
	if !bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")) || !bytes.Contains(rest, []byte(`"completion_tokens":400`)) {
		t.Errorf("stream did not finish cleanly; tail: %q", rest[max(0, len(rest)-300):])
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not return after shutdown")
	}
}

func TestDemoPrintsEveryCoupling(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	// 24 req/s of requests that spend up to half a second in the demo's retrieval (more under
	// the race detector) keep about 12 in flight: under the adaptive limit's initial 20 slots, so
	// that the service sheds nothing on an idle machine. On a loaded one the service time grows
	// and the default service rightly sheds (HTTP 503 from admission): that is allowed, and
	// nothing else is.
	err := run(context.Background(), []string{"demo", "--profile", "tiny", "--corpus-docs", "60", "--duration", "2s",
		"--request-rate", "24", "--max-tokens", "16", "--log-level", "warn"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"sync", "fanout", "async"} {
		row := regexp.MustCompile(`(?m)^\s*` + mode + `\s+(\d+)\s+[\d.]+`).FindStringSubmatch(out.String())
		if row == nil {
			t.Errorf("no %s row in:\n%s", mode, out.String())
		}
	}
	// A mode's failures line reads "sync: N failed: KIND xM (EXAMPLE), ...": allowed only when
	// all N are HTTP 5xx (M == N) and the example is admission's 503.
	shed := regexp.MustCompile(`^\w+: (\d+) failed: http_5xx x(\d+) \("HTTP 503: admission: overloaded: `)
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.Contains(line, " failed: ") {
			continue
		}
		if m := shed.FindStringSubmatch(strings.TrimSpace(line)); m == nil || m[1] != m[2] {
			t.Errorf("demo requests failed other than by admission's shedding:\n%s", out.String())
			break
		}
		t.Logf("shed by admission on this loaded machine: %s", line[:min(len(line), 120)])
	}
	for _, want := range []string{"chunks in shards on a Qdrant-protocol server behind a link", "Conclusion", "TTFT P50: sync", "E2E P95: sync"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDemoCouplingFlag runs the demo with --coupling async: it drives that mode alone, at the
// whole rate (the flag was parsed and then overridden by every request's own mode).
func TestDemoCouplingFlag(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), []string{"demo", "--profile", "tiny", "--corpus-docs", "60", "--duration", "1500ms",
		"--request-rate", "20", "--max-tokens", "16", "--log-level", "warn", "--coupling", "async"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	row := func(mode string) []string {
		return regexp.MustCompile(`(?m)^\s*` + mode + `\s+(\d+)\s+[\d.]+`).FindStringSubmatch(out.String())
	}
	if row("async") == nil || row("sync") != nil || row("fanout") != nil {
		t.Errorf("want an async row alone:\n%s", out.String())
	}
	for _, want := range []string{"all in coupling mode async (--coupling)", "One coupling mode driven (async)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(context.Background(), []string{"demo", "--coupling", "eventually"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "coupling") {
		t.Errorf("--coupling eventually: %v", err)
	}
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	addr, _, _ := startServe(t, "--profile", "tiny", "--corpus-docs", "20", "--profiling=false")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"ready", []string{"http://" + addr + "/readyz"}, ""},
		{"404", []string{"http://" + addr + "/nope"}, "HTTP 404"},
		{"refused", []string{"--timeout", "2s", "http://127.0.0.1:1/healthz"}, "connect"},
		{"no url", nil, "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"healthcheck"}, tt.args...), io.Discard, io.Discard)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestVersionLine(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/ragtail/ragtail", Version: "v0.1.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-04T18:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	tests := []struct {
		name, linked string
		info         *debug.BuildInfo
		want         string
	}{
		{"module version and revision", "dev", info, "ragtail v0.1.0 (revision abc123 of 2026-12-04T18:00:00Z, with local changes), go1.26.8"},
		{"linked version wins", "v0.2.0-rc1", info, "ragtail v0.2.0-rc1 (revision abc123 of 2026-12-04T18:00:00Z, with local changes), go1.26.8"},
		{"no VCS", "dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "ragtail (devel) (unknown revision), go1.26.8"},
		{"no build info", "dev", nil, "ragtail dev"},
	}
	for _, tt := range tests {
		if got := versionLine(tt.linked, tt.info); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "ragtail ") {
		t.Errorf("ragtail version: %q, %v", out.String(), err)
	}
}

// TestErrorLineHidesPasswords: the line a failed command ends with may quote a flag's URL.
func TestErrorLineHidesPasswords(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("list the models of --llm-url %s: %w", "http://u:pw-7070@llm:8000/v1", errors.New("connection refused"))
	if got, want := errorLine(err), "ragtail: list the models of --llm-url http://u:xxxxx@llm:8000/v1: connection refused"; got != want {
		t.Errorf("errorLine = %q, want %q", got, want)
	}
}
