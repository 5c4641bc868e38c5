package bench

import (
	"bytes"
	"context"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

func TestWatchInterrupts(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 2)
	unwatched := false
	runCtx, stop, release := WatchInterrupts(context.Background(), sigs, func() { unwatched = true }, io.Discard, time.Minute)
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

func TestProgressPrinter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := newProgressPrinter(&buf, false)
	if p.tty || p.interval != 5*time.Second {
		t.Fatalf("a buffer is taken for a terminal: %+v", p)
	}
	p.print(loadgen.Progress{Elapsed: 2500 * time.Millisecond, Sent: 10, Done: 8, Failed: 1, InFlight: 2, Queued: 3, Rate: 4.25, P99E2EL: 1234500 * time.Microsecond})
	p.print(loadgen.Progress{Final: true})
	want := "    2.5s  sent 10  done 8  failed 1  in flight 2  queued 3  4.2 req/s  p99 e2el 1234.5 ms\n"
	if buf.String() != want {
		t.Errorf("progress:\n%q\nwant\n%q", buf.String(), want)
	}
	quiet := newProgressPrinter(&buf, true)
	quiet.print(loadgen.Progress{Sent: 1})
	if buf.String() != want {
		t.Error("--quiet printed progress")
	}
}

func TestParseSLO(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"p95_e2el:2000", "e2el:p95:2000", "P99.9_ttft:300"} {
		if _, err := ParseSLO(s); err != nil {
			t.Errorf("ParseSLO(%q): %v", s, err)
		}
	}
	for _, s := range []string{"fast", "p95_e2el", "p95_e2el:x"} {
		if _, err := ParseSLO(s); err == nil {
			t.Errorf("ParseSLO(%q): no error", s)
		}
	}
}
