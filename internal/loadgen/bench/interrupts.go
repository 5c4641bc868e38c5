package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// interrupts maps the first Ctrl-C (SIGINT or SIGTERM, or ctx done) to a graceful stop and the
// second to an abort. Run the load under runCtx with Stop set to stop; release ends the watch.
func interrupts(ctx context.Context, stderr io.Writer, drain time.Duration) (runCtx context.Context, stop <-chan struct{}, release func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	return WatchInterrupts(ctx, sigs, func() { signal.Stop(sigs) }, stderr, drain)
}

// WatchInterrupts is interrupts with the signals read from sigs; unwatch is called on release.
func WatchInterrupts(ctx context.Context, sigs <-chan os.Signal, unwatch func(), stderr io.Writer, drain time.Duration) (context.Context, <-chan struct{}, func()) {
	runCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	stopC := make(chan struct{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		stopped := false
		stopNow := func() {
			if !stopped {
				stopped = true
				close(stopC)
				limit := "as long as they take"
				if drain > 0 {
					limit = "up to " + drain.String()
				}
				fmt.Fprintf(stderr, "\nstopping: no more requests; waiting %s for those in flight (Ctrl-C again to abort)\n", limit)
			}
		}
		ctxDone := ctx.Done()
		n := 0
		for {
			select {
			case <-done:
				return
			case <-ctxDone:
				ctxDone = nil
				stopNow()
			case <-sigs:
				if n++; n == 1 {
					stopNow()
					continue
				}
				fmt.Fprintln(stderr, "aborting: cancelling the requests in flight")
				abort()
				return
			}
		}
	})
	return runCtx, stopC, func() {
		close(done)
		wg.Wait()
		unwatch()
		abort()
	}
}

// progressPrinter shows a run's progress: one line rewritten in place on a terminal, a plain
// line every few seconds otherwise.
type progressPrinter struct {
	w        io.Writer
	tty      bool
	quiet    bool
	interval time.Duration
	mu       sync.Mutex
	width    int
}

func newProgressPrinter(w io.Writer, quiet bool) *progressPrinter {
	p := &progressPrinter{w: w, tty: isTerminal(w), quiet: quiet, interval: 5 * time.Second}
	if p.tty {
		p.interval = 250 * time.Millisecond
	}
	return p
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progressPrinter) print(pr loadgen.Progress) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	line := progressLine(pr)
	switch {
	case p.tty && pr.Final:
		fmt.Fprintf(p.w, "\r%-*s\n", p.width, line)
	case p.tty:
		fmt.Fprintf(p.w, "\r%-*s", p.width, line)
		p.width = max(p.width, len(line))
	case !pr.Final:
		fmt.Fprintln(p.w, line)
	}
}

func progressLine(pr loadgen.Progress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%7.1fs  sent %d  done %d  failed %d  in flight %d", pr.Elapsed.Seconds(), pr.Sent, pr.Done, pr.Failed, pr.InFlight)
	if pr.Queued > 0 {
		fmt.Fprintf(&b, "  queued %d", pr.Queued)
	}
	fmt.Fprintf(&b, "  %.1f req/s", pr.Rate)
	if pr.P99E2EL > 0 {
		fmt.Fprintf(&b, "  p99 e2el %s ms", strconv.FormatFloat(float64(pr.P99E2EL)/1e6, 'f', 1, 64))
	}
	return b.String()
}
