package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"html/template"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ragtail/ragtail/internal/loadgen/dashboard"
	"github.com/ragtail/ragtail/internal/redact"
	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
)

// DashboardOptions configure the live view of a run (--dashboard).
type DashboardOptions struct {
	// Addr is the host:port the dashboard serves on; "" for none.
	Addr string
	// Linger is how long the dashboard stays up after the run, serving the final report,
	// when no page loads it sooner; 0 closes it at once.
	Linger time.Duration
}

// DefaultDashboardLinger is --dashboard-linger's default: long enough for a page polling every
// second to fetch the final report, short enough not to hold up a CI job.
const DefaultDashboardLinger = 5 * time.Second

// registerFlags registers --dashboard and --dashboard-linger on fs; what names the run.
func (o *DashboardOptions) registerFlags(fs *flag.FlagSet, what string) {
	fs.StringVar(&o.Addr, "dashboard", "", fmt.Sprintf("serve a live view of %s at http://`ADDR`/ (host:port, e.g. 127.0.0.1:5665; port 0 picks one): per-second\n"+
		"throughput, TTFT and E2E latency P50/P95/P99 over the last %s of completed requests, requests in flight,\n"+
		"errors by kind and the --server-metrics gauges; the page polls its JSON (/api/state) every second, keeps\n"+
		"the last %d points and ends on the final report (/report). It has no authentication: keep it on loopback",
		what, dashboard.DefaultWindow, dashboard.DefaultMaxPoints))
	fs.DurationVar(&o.Linger, "dashboard-linger", DefaultDashboardLinger, "after the run, keep --dashboard serving the final report until a page has loaded it or this long\n"+
		"has passed, whichever is first (Ctrl-C closes it at once; 0: close it when the run ends)")
}

// validate checks the flags of o.
func (o DashboardOptions) validate() error {
	if o.Addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return fmt.Errorf("--dashboard %q: want host:port, e.g. 127.0.0.1:5665", o.Addr)
	}
	if o.Linger < 0 {
		return fmt.Errorf("--dashboard-linger %s must not be negative", o.Linger)
	}
	return nil
}

// liveView is a run's dashboard. Its methods do nothing on a nil liveView (no --dashboard).
type liveView struct {
	store  *dashboard.Store
	srv    *dashboard.Server
	linger time.Duration
}

// start binds the dashboard's address and serves it, before the run starts, so that an address
// in use fails the command at once; nil for no --dashboard.
func (o DashboardOptions) start(ctx context.Context, title string, stderr io.Writer) (*liveView, error) {
	if o.Addr == "" {
		return nil, nil
	}
	store := dashboard.NewStore(time.Now(), dashboard.WithTitle(redact.String(title)))
	srv, err := dashboard.Listen(ctx, o.Addr, store)
	if err != nil {
		return nil, fmt.Errorf("--dashboard: %w", err)
	}
	fmt.Fprintf(stderr, "dashboard: %s (live while the run goes)\n", srv.URL())
	if host, _, _ := net.SplitHostPort(o.Addr); !isLoopback(host) {
		fmt.Fprintf(stderr, "warning: --dashboard %s is reachable beyond this host and has no authentication; it shows the target's URL and results\n", o.Addr)
	}
	return &liveView{store: store, srv: srv, linger: o.Linger}, nil
}

// isLoopback reports whether host names the loopback interface only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// title sets the page's title.
func (v *liveView) title(t string) {
	if v != nil {
		v.store.SetTitle(redact.String(t))
	}
}

// phase names what a sweep runs now.
func (v *liveView) phase(p string) {
	if v != nil {
		v.store.SetPhase(p)
	}
}

// gauges makes the scrape the source of the server's gauges; nil for none.
func (v *liveView) gauges(s *metricsScrape) {
	if v == nil {
		return
	}
	if s == nil {
		v.store.SetGauges(nil)
		return
	}
	v.store.SetGauges(s.Scraper)
}

// watch feeds cfg's records and progress to the dashboard besides cfg's own Stream and
// Progress. The dashboard wants a snapshot a second: Progress is then called that often, and
// the callback cfg had is still called at its own interval.
func (v *liveView) watch(cfg *loadgen.Config) {
	if v == nil {
		return
	}
	stream := cfg.Stream
	cfg.Stream = func(recs []loadgen.Record) {
		if stream != nil {
			stream(recs)
		}
		v.store.Add(recs...)
	}
	print, every := cfg.Progress, cfg.ProgressInterval
	if every <= 0 {
		every = time.Second
	}
	cfg.ProgressInterval = min(every, dashboard.TickInterval)
	last := time.Duration(0)
	cfg.Progress = func(p loadgen.Progress) {
		v.store.Progress(p)
		// Half an interval of slack: the snapshots come a little after each second.
		if print != nil && (p.Final || p.Elapsed-last >= every-cfg.ProgressInterval/2) {
			last = p.Elapsed
			print(p)
		}
	}
}

// finish ends the dashboard on doc, the run's final report, and keeps serving it for a page to
// load (see DashboardOptions.Linger), or until Ctrl-C.
func (v *liveView) finish(ctx context.Context, doc report.Document, stderr io.Writer) {
	if v == nil {
		return
	}
	var html bytes.Buffer
	if err := report.WriteHTML(&html, doc); err != nil {
		html.Reset()
		fmt.Fprintf(&html, "<!doctype html><title>report</title><p>the report could not be rendered: %s", template.HTMLEscapeString(err.Error()))
	}
	v.store.Finish(time.Now(), html.Bytes())
	if v.linger > 0 {
		fmt.Fprintf(stderr, "dashboard: the final report is at %sreport; closing once a page has loaded it, or in %s (Ctrl-C closes it now)\n",
			v.srv.URL(), v.linger)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stop, done := make(chan struct{}), make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			close(stop)
		case <-done:
		}
	}()
	if err := v.srv.Linger(ctx, v.linger, stop); err != nil {
		fmt.Fprintf(stderr, "dashboard: %v\n", err)
	}
}

// close shuts the dashboard at once (a run that failed before its report).
func (v *liveView) close() {
	if v == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = v.srv.Close(ctx)
}
