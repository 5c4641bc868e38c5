// Package scrape samples a target's Prometheus metrics while a load runs: what the server's
// own gauges and counters did (vLLM's engine, ragtail's stages, GenAI server histograms, GPU
// memory from dcgm-exporter), on the run's clock, beside what the load generator measured.
// It reads the text exposition format with prometheus/common's parser, keeps the series of a
// few metric families, and bounds what it keeps: series, samples and the size of a scrape.
// A scrape that fails is counted and warned about once; it never stops the run.
package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ragtail/ragtail/loadgen/report"
)

// DefaultFamilies are the metric name prefixes kept by default: vLLM's engine (vllm:*),
// ragtail's service (rag_*), the OTel GenAI server metrics (gen_ai_server_*) and
// dcgm-exporter's GPU metrics (DCGM_*, DCGM_FI_DEV_FB_USED for memory in use).
var DefaultFamilies = []string{"vllm:", "rag_", "gen_ai_server_", "DCGM_"}

// MemoryMetric is dcgm-exporter's name for the device memory in use, in MiB.
const MemoryMetric = "DCGM_FI_DEV_FB_USED"

// Defaults and limits of a Config.
const (
	DefaultInterval   = time.Second
	DefaultMaxSeries  = 500
	DefaultMaxSamples = 1 << 20 // about 16 MiB of points
	MinInterval       = 10 * time.Millisecond
	minTimeout        = time.Second
	maxTimeout        = 10 * time.Second
	DefaultMaxBytes   = 16 << 20
	maxNameLen        = 200
	maxLabels         = 16
	maxLabelLen       = 200
)

// Config configures a Scraper. URL is required; zero values get the defaults.
type Config struct {
	URL      string        // the Prometheus endpoint, e.g. http://127.0.0.1:8000/metrics
	Interval time.Duration // between scrapes (DefaultInterval)
	// Timeout limits one scrape, connecting included; default the interval, within 1 s to 10 s
	// (a scrape slower than the interval delays the next one, it never overlaps it).
	Timeout   time.Duration
	Families  []string // metric name prefixes to keep (DefaultFamilies)
	MaxSeries int      // series kept; later new series are dropped and counted (DefaultMaxSeries)
	// MaxSamples bounds the points of all series together: reaching it halves every series
	// (every other point is kept) and doubles the interval, so a run of any length fits.
	MaxSamples int
	// MaxBytes bounds the size of one scrape; a larger one fails (DefaultMaxBytes).
	MaxBytes int64
	// BearerToken, when set, is sent as Authorization: Bearer on every scrape (ragtail serve's
	// admin listener asks for its admin token when it is not on loopback).
	BearerToken string
	Client      *http.Client // default: a client with the timeout above
}

// Scraper samples one endpoint. Start begins, Stop ends and returns what was kept; a Scraper
// runs once. Its methods are safe for concurrent use.
type Scraper struct {
	cfg    Config
	client *http.Client

	mu       sync.Mutex
	start    time.Time // t = 0 of the points kept
	interval time.Duration
	series   []*series
	index    map[string]int
	samples  int
	stats    Stats
	firstErr error

	started  bool
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// Stats count what a Scraper did.
type Stats struct {
	Scrapes, Failed int // scrapes attempted and failed
	DroppedSeries   int // series not kept for MaxSeries
	Thinned         int // times every series was halved for MaxSamples
}

type series struct {
	name   string
	labels map[string]string
	gauge  bool         // a gauge (or untyped) value, not a counter or a histogram's count or sum
	points [][2]float64 // [seconds from Scraper.start, value]
}

// New checks cfg and returns a Scraper that has not started.
func New(cfg Config) (*Scraper, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q: want an http:// or https:// URL of a Prometheus endpoint", cfg.URL)
	}
	switch {
	case cfg.Interval == 0:
		cfg.Interval = DefaultInterval
	case cfg.Interval < MinInterval:
		return nil, fmt.Errorf("interval %s: want at least %s", cfg.Interval, MinInterval)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = min(max(cfg.Interval, minTimeout), maxTimeout)
	}
	if cfg.Families == nil {
		cfg.Families = DefaultFamilies
	}
	if cfg.MaxSeries <= 0 {
		cfg.MaxSeries = DefaultMaxSeries
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = DefaultMaxSamples
	}
	c := cfg.Client
	if c == nil {
		c = &http.Client{Timeout: cfg.Timeout}
	}
	return &Scraper{cfg: cfg, client: c,
		interval: cfg.Interval, index: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// URL is the endpoint scraped.
func (s *Scraper) URL() string { return s.cfg.URL }

// Probe scrapes once and keeps nothing: nil when the endpoint answers in the exposition format.
func (s *Scraper) Probe(ctx context.Context) error {
	_, err := s.fetch(ctx)
	return err
}

// Start scrapes at once, then every interval, from at (the run's start; at once if it has
// passed) until Stop or ctx ends.
func (s *Scraper) Start(ctx context.Context, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.start, s.started = at, true
	go s.loop(ctx, at)
}

func (s *Scraper) loop(ctx context.Context, at time.Time) {
	defer close(s.done)
	wait := time.NewTimer(time.Until(at))
	select {
	case <-wait.C:
	case <-s.stop:
		wait.Stop()
		return
	case <-ctx.Done():
		wait.Stop()
		return
	}
	interval := s.scrapeOnce(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if next := s.scrapeOnce(ctx); next != interval {
				interval = next
				tick.Reset(interval)
			}
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Stop ends the scrapes, takes a last one (the state at the run's end) unless ctx is done,
// and returns what was kept.
func (s *Scraper) Stop(ctx context.Context) *Result {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		s.stopOnce.Do(func() {
			close(s.stop)
			<-s.done
			if ctx.Err() == nil {
				s.scrapeOnce(ctx)
			}
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &Result{URL: s.cfg.URL, Start: s.start, Interval: s.interval, Stats: s.stats, FirstErr: s.firstErr}
	for _, ser := range s.series {
		r.Series = append(r.Series, report.ServerSeries{Name: ser.name, Labels: ser.labels, Points: slices.Clone(ser.points)})
	}
	return r
}

// Sample is the last value of one kept series, as Latest returns it.
type Sample struct {
	Name   string
	Labels map[string]string // shared with the Scraper: do not modify
	Gauge  bool              // a gauge (or untyped) value; false for a counter, or a histogram's _count or _sum
	At     float64           // seconds from the scrape's start
	Value  float64
}

// Latest returns the last value of every series kept so far, in the order the series first
// appeared: what a live view shows while the run goes.
func (s *Scraper) Latest() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, len(s.series))
	for _, ser := range s.series {
		if n := len(ser.points); n > 0 {
			p := ser.points[n-1]
			out = append(out, Sample{Name: ser.name, Labels: ser.labels, Gauge: ser.gauge, At: p[0], Value: p[1]})
		}
	}
	return out
}

// scrapeOnce scrapes and records, and returns the interval to wait for the next one.
func (s *Scraper) scrapeOnce(ctx context.Context) time.Duration {
	sent := time.Now()
	fams, err := s.fetch(ctx)
	at := sent.Add(time.Since(sent) / 2) // the middle of the round trip
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Scrapes++
	if err != nil {
		s.stats.Failed++
		if s.firstErr == nil {
			s.firstErr = err
		}
		return s.interval
	}
	s.record(at.Sub(s.start).Seconds(), fams)
	return s.interval
}

// fetch reads and parses one scrape.
func (s *Scraper) fetch(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return nil, err
	}
	// The classic text format: OpenMetrics (which ragtail serve offers when asked) adds
	// exemplars and # EOF that the text parser does not read.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	if s.cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.BearerToken)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			if s.cfg.BearerToken == "" {
				return nil, fmt.Errorf("HTTP %d: %w: none was sent", resp.StatusCode, ErrUnauthorized)
			}
			return nil, fmt.Errorf("HTTP %d: %w: it refused the one sent", resp.StatusCode, ErrUnauthorized)
		}
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("content type %.60q, not Prometheus' text format", ct)
	}
	body := &limitedReader{r: resp.Body, n: s.cfg.MaxBytes}
	p := expfmt.NewTextParser(model.UTF8Validation) // it keeps state: one per scrape
	fams, err := p.TextToMetricFamilies(body)
	switch {
	case body.over:
		return nil, fmt.Errorf("a scrape of more than %d bytes", s.cfg.MaxBytes)
	case err != nil:
		return nil, fmt.Errorf("parse: %w", err)
	}
	return fams, nil
}

// limitedReader fails past n bytes, where io.LimitReader would end quietly.
type limitedReader struct {
	r    io.Reader
	n    int64
	over bool
}

var errTooLarge = errors.New("scrape too large")

// ErrUnauthorized is in the error of a scrape the endpoint refused (HTTP 401 or 403): it wants
// a bearer token (Config.BearerToken), or another one.
var ErrUnauthorized = errors.New("the endpoint wants a bearer token")

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.over = true
		return 0, errTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// record keeps the samples of the kept families at t seconds. Called with s.mu held.
func (s *Scraper) record(t float64, fams map[string]*dto.MetricFamily) {
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		if !s.kept(name) {
			continue
		}
		f := fams[name]
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.add(name, m.GetLabel(), false, t, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				s.add(name, m.GetLabel(), true, t, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				s.add(name, m.GetLabel(), true, t, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				// Buckets would multiply the series; the count and the sum give rate and mean.
				h := m.GetHistogram()
				s.add(name+"_count", m.GetLabel(), false, t, float64(h.GetSampleCount()))
				s.add(name+"_sum", m.GetLabel(), false, t, h.GetSampleSum())
			case dto.MetricType_SUMMARY:
				sm := m.GetSummary()
				s.add(name+"_count", m.GetLabel(), false, t, float64(sm.GetSampleCount()))
				s.add(name+"_sum", m.GetLabel(), false, t, sm.GetSampleSum())
			}
		}
	}
	if s.samples >= s.cfg.MaxSamples {
		s.thin()
	}
}

func (s *Scraper) kept(name string) bool {
	if len(name) > maxNameLen {
		return false
	}
	for _, p := range s.cfg.Families {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// add appends one sample to its series, making the series if there is room.
func (s *Scraper) add(name string, labels []*dto.LabelPair, gauge bool, t, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	key := seriesKey(name, labels)
	i, ok := s.index[key]
	if !ok {
		if len(s.series) >= s.cfg.MaxSeries {
			s.stats.DroppedSeries++
			s.index[key] = -1
			return
		}
		i = len(s.series)
		s.index[key] = i
		s.series = append(s.series, &series{name: name, labels: labelMap(labels), gauge: gauge})
	}
	if i < 0 {
		return
	}
	s.series[i].points = append(s.series[i].points, [2]float64{t, v})
	s.samples++
}

// seriesKey names a series by its name and labels (the parser sorts labels by name).
func seriesKey(name string, labels []*dto.LabelPair) string {
	var b strings.Builder
	b.WriteString(name)
	for _, l := range labels {
		b.WriteByte(0xff)
		b.WriteString(l.GetName())
		b.WriteByte('=')
		b.WriteString(l.GetValue())
	}
	return b.String()
}

// labelMap keeps at most maxLabels labels, each value cut to maxLabelLen bytes.
func labelMap(labels []*dto.LabelPair) map[string]string {
	m := make(map[string]string, min(len(labels), maxLabels))
	for _, l := range labels[:min(len(labels), maxLabels)] {
		m[truncate(l.GetName())] = truncate(l.GetValue())
	}
	return m
}

func truncate(s string) string {
	if len(s) <= maxLabelLen {
		return s
	}
	return strings.ToValidUTF8(s[:maxLabelLen], "") + "…"
}

// thin keeps every other point of each series and doubles the interval. Called with s.mu held.
func (s *Scraper) thin() {
	s.samples = 0
	for _, ser := range s.series {
		kept := ser.points[:0]
		for i, p := range ser.points {
			if i%2 == 0 {
				kept = append(kept, p)
			}
		}
		clear(ser.points[len(kept):])
		ser.points = kept
		s.samples += len(kept)
	}
	s.interval *= 2
	s.stats.Thinned++
}

// Result is what a Scraper kept.
type Result struct {
	URL      string
	Start    time.Time     // t = 0 of the points
	Interval time.Duration // between scrapes at the end (doubled by each thinning)
	Series   []report.ServerSeries
	Stats    Stats
	FirstErr error // the first failed scrape's error; nil when none failed
}

// ServerMetrics puts the series on the clock of a run that started at origin (the report's
// Bench.Start): t in seconds from it. Nil when no series was kept.
func (r *Result) ServerMetrics(origin time.Time) *report.ServerMetrics {
	if len(r.Series) == 0 {
		return nil
	}
	shift := r.Start.Sub(origin).Seconds()
	m := &report.ServerMetrics{Interval: r.Interval, Series: make([]report.ServerSeries, len(r.Series))}
	for i, ser := range r.Series {
		pts := make([][2]float64, len(ser.Points))
		for j, p := range ser.Points {
			pts[j] = [2]float64{p[0] + shift, p[1]}
		}
		m.Series[i] = report.ServerSeries{Name: ser.Name, Labels: ser.Labels, Points: pts}
	}
	return m
}

// PeakMemory is the highest DCGM_FI_DEV_FB_USED of any device (MiB); ok false without one.
func (r *Result) PeakMemory() (mib float64, ok bool) {
	for _, ser := range r.Series {
		if ser.Name != MemoryMetric {
			continue
		}
		if peak, _ := ser.PeakMean(); !math.IsNaN(peak) && (!ok || peak > mib) {
			mib, ok = peak, true
		}
	}
	return mib, ok
}
