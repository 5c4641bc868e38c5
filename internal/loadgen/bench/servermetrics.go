package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ragtail/ragtail/internal/loadgen/scrape"
	"github.com/ragtail/ragtail/loadgen/report"
)

// ServerMetricsOptions configure the scrape of the target's Prometheus endpoint during a run.
type ServerMetricsOptions struct {
	// URL is the endpoint; "" (or "auto") tries the target origin's /metrics and goes without
	// when it does not answer; "off" disables the scrape.
	URL      string
	Interval time.Duration // between scrapes; 0: scrape.DefaultInterval
	// Token is sent as a bearer token on every scrape; "": $RAGTAIL_ADMIN_TOKEN, if set (the
	// token ragtail serve's admin listener asks for off loopback).
	Token string
}

// EnvAdminToken is the environment variable --server-metrics-token defaults to: the admin
// token of ragtail serve.
const EnvAdminToken = "RAGTAIL_ADMIN_TOKEN"

// probeTimeout bounds the check that the endpoint answers, before the run.
const probeTimeout = 2 * time.Second

// metricsScrape is a scrape under way, and whether it was warned about already.
type metricsScrape struct {
	*scrape.Scraper
	cfg    scrape.Config
	warned bool
}

// again returns a new scrape of the same endpoint, for the next point of a sweep: a Scraper
// runs once.
func (s *metricsScrape) again() (*metricsScrape, error) {
	sc, err := scrape.New(s.cfg)
	if err != nil {
		return nil, err
	}
	return &metricsScrape{Scraper: sc, cfg: s.cfg, warned: s.warned}, nil
}

// indent writes every line it is given behind two spaces, as a sweep's point lines are.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	if _, err := i.w.Write(append([]byte("  "), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// scraper returns the scrape of o for a target at targetURL, nil when there is none. A given
// URL that does not answer is warned about and scraped anyway (it may come up); the default
// one is dropped with a note.
func (o ServerMetricsOptions) scraper(ctx context.Context, targetURL string, stderr io.Writer) (*metricsScrape, error) {
	u := strings.TrimSpace(o.URL)
	if strings.EqualFold(u, "off") {
		return nil, nil
	}
	auto := u == "" || strings.EqualFold(u, "auto")
	if auto {
		t, err := url.Parse(targetURL)
		if err != nil {
			return nil, fmt.Errorf("--url: %w", err)
		}
		u = (&url.URL{Scheme: t.Scheme, Host: t.Host, Path: "/metrics"}).String()
	}
	token := o.Token
	if token == "" {
		token = os.Getenv(EnvAdminToken)
	}
	cfg := scrape.Config{URL: u, Interval: o.Interval, BearerToken: token}
	s, err := scrape.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--server-metrics: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	err = s.Probe(pctx)
	cancel()
	switch {
	case err == nil:
		return &metricsScrape{Scraper: s, cfg: cfg}, nil
	case errors.Is(err, scrape.ErrUnauthorized):
		fmt.Fprintf(stderr, "warning: server metrics: %s: %v (give it with --server-metrics-token or $%s); scraping it during the run anyway\n", u, err, EnvAdminToken)
		return &metricsScrape{Scraper: s, cfg: cfg, warned: true}, nil
	case auto:
		fmt.Fprintf(stderr, "server metrics: none at %s (%v); --server-metrics URL names the endpoint (ragtail serve: its admin /metrics)\n", u, err)
		return nil, nil
	default:
		fmt.Fprintf(stderr, "warning: server metrics: %s: %v; scraping it during the run anyway (the run does not depend on it)\n", u, err)
		return &metricsScrape{Scraper: s, cfg: cfg, warned: true}, nil
	}
}

// validate checks the flags of o.
func (o ServerMetricsOptions) validate() error {
	if o.Interval != 0 && o.Interval < scrape.MinInterval {
		return fmt.Errorf("--server-metrics-interval %s: want at least %s", o.Interval, scrape.MinInterval)
	}
	return nil
}

// start begins the scrape at the run's start; a nil scrape does nothing.
func (s *metricsScrape) start(ctx context.Context, at time.Time) {
	if s != nil {
		s.Start(ctx, at)
	}
}

// stop ends the scrape, puts its series into b on the run's clock, and says on stderr what
// was kept: one line, a warning when scrapes failed that was not given before the run.
func (s *metricsScrape) stop(ctx context.Context, b *report.Bench, stderr io.Writer) {
	if s == nil {
		return
	}
	r := s.Stop(ctx)
	if b != nil {
		b.ServerMetrics = r.ServerMetrics(b.Start)
	}
	fmt.Fprintln(stderr, describeScrape(r, !s.warned))
}

// describeScrape is the line that sums up a scrape, marked as a warning when scrapes failed
// and warn is set.
func describeScrape(r *scrape.Result, warn bool) string {
	var b strings.Builder
	if r.Stats.Failed > 0 && warn {
		b.WriteString("warning: ")
	}
	fmt.Fprintf(&b, "server metrics: %d series from %s every %s (%d scrapes", len(r.Series), r.URL, r.Interval, r.Stats.Scrapes)
	if r.Stats.Failed > 0 {
		fmt.Fprintf(&b, ", %d failed, the first with: %v", r.Stats.Failed, r.FirstErr)
	}
	b.WriteString(")")
	if mib, ok := r.PeakMemory(); ok {
		fmt.Fprintf(&b, "; peak memory %.0f MiB (%s)", mib, scrape.MemoryMetric)
	}
	if n := r.Stats.DroppedSeries; n > 0 {
		fmt.Fprintf(&b, "; %d more series left out (at most %d kept)", n, scrape.DefaultMaxSeries)
	}
	if n := r.Stats.Thinned; n > 0 {
		fmt.Fprintf(&b, "; halved %d times to stay under %d samples", n, scrape.DefaultMaxSamples)
	}
	return b.String()
}
