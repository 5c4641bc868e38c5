package scrape

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ragtail/ragtail/loadgen/report"
)

// target is a Prometheus endpoint with one metric of each kind, from client_golang's handler.
type target struct {
	srv      *httptest.Server
	running  prometheus.Gauge
	memory   prometheus.Gauge
	requests prometheus.Counter
	ttft     prometheus.Histogram
}

func newTarget(tb testing.TB) *target {
	tb.Helper()
	reg := prometheus.NewRegistry()
	t := &target{
		running:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:num_requests_running", ConstLabels: prometheus.Labels{"model_name": "m"}}),
		memory:   prometheus.NewGauge(prometheus.GaugeOpts{Name: MemoryMetric, ConstLabels: prometheus.Labels{"gpu": "0"}}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{Name: "rag_requests_total"}),
		ttft:     prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gen_ai_server_time_to_first_token_seconds"}),
	}
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "process_open_fds"})
	reg.MustRegister(t.running, t.memory, t.requests, t.ttft, other)
	other.Set(7)
	t.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	tb.Cleanup(t.srv.Close)
	return t
}

func newScraper(tb testing.TB, cfg Config) *Scraper {
	tb.Helper()
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// scrapeAt records one scrape at t seconds, as the loop would.
func scrapeAt(s *Scraper, t float64) {
	s.mu.Lock()
	s.start = time.Now().Add(-time.Duration(t * float64(time.Second)))
	s.mu.Unlock()
	s.scrapeOnce(context.Background())
}

func seriesByName(r *Result) map[string][][2]float64 {
	m := map[string][][2]float64{}
	for _, s := range r.Series {
		m[s.Name] = s.Points
	}
	return m
}

func TestScrapeKeepsFamiliesOfEachKind(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	s := newScraper(t, Config{URL: tg.srv.URL})
	for i, v := range []float64{3, 9, 5} {
		tg.running.Set(v)
		tg.memory.Set(1000 * v)
		tg.requests.Add(v)
		tg.ttft.Observe(v / 10)
		scrapeAt(s, float64(i))
	}
	r := s.Stop(context.Background())
	got := seriesByName(r)
	want := map[string][]float64{
		"vllm:num_requests_running": {3, 9, 5},
		MemoryMetric:                {3000, 9000, 5000},
		"rag_requests_total":        {3, 12, 17},
		"gen_ai_server_time_to_first_token_seconds_count": {1, 2, 3},
		"gen_ai_server_time_to_first_token_seconds_sum":   {0.3, 1.2, 1.7},
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %d of them (process_open_fds is no kept family)", got, len(want))
	}
	for name, vals := range want {
		pts := got[name]
		if len(pts) != len(vals) {
			t.Errorf("%s: %v, want values %v", name, pts, vals)
			continue
		}
		for i, v := range vals {
			if math.Abs(pts[i][1]-v) > 1e-9 {
				t.Errorf("%s point %d = %v, want %g", name, i, pts[i], v)
			}
			// Each scrape is stamped at the middle of its round trip, just after the offset it was given.
			if d := pts[i][0] - float64(i); d < 0 || d > 1 {
				t.Errorf("%s point %d at t=%g, want just after %d", name, i, pts[i][0], i)
			}
		}
	}
	if peak, ok := r.PeakMemory(); !ok || peak != 9000 {
		t.Errorf("PeakMemory = %g, %v; want 9000", peak, ok)
	}
	for _, ser := range r.Series {
		if ser.Name == "vllm:num_requests_running" && ser.Labels["model_name"] != "m" {
			t.Errorf("labels %v", ser.Labels)
		}
	}
	if r.Stats.Scrapes != 3 || r.Stats.Failed != 0 || r.FirstErr != nil {
		t.Errorf("stats %+v, first error %v", r.Stats, r.FirstErr)
	}
}

func TestServerMetricsOnTheRunsClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	r := &Result{Start: start, Interval: time.Second, Series: []report.ServerSeries{{Name: "vllm:x", Points: [][2]float64{{0, 1}, {1, 2}}}}}
	m := r.ServerMetrics(start.Add(1500 * time.Millisecond)) // the measured run began after a warmup
	if m.Interval != time.Second || len(m.Series) != 1 {
		t.Fatalf("%+v", m)
	}
	if p := m.Series[0].Points; p[0] != [2]float64{-1.5, 1} || p[1] != [2]float64{-0.5, 2} {
		t.Errorf("points %v, want t shifted by -1.5 s", p)
	}
	if r.Series[0].Points[0][0] != 0 {
		t.Error("ServerMetrics changed the result's own points")
	}
	if (&Result{}).ServerMetrics(start) != nil {
		t.Error("no series: want nil, so the JSON has no server_metrics key")
	}
}

func TestStartStopTakesFirstAndLastScrape(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	s := newScraper(t, Config{URL: tg.srv.URL, Interval: time.Hour})
	tg.running.Set(1)
	s.Start(context.Background(), time.Now())
	// The first scrape happens at once; wait for it without sleeping a guessed time.
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.mu.Lock()
		n := s.stats.Scrapes
		s.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no scrape within 10 s of Start")
		}
		time.Sleep(time.Millisecond)
	}
	tg.running.Set(2)
	r := s.Stop(context.Background())
	pts := seriesByName(r)["vllm:num_requests_running"]
	if len(pts) != 2 || pts[0][1] != 1 || pts[1][1] != 2 || pts[1][0] < pts[0][0] {
		t.Errorf("points %v: want the state at Start (1) and at Stop (2), in order", pts)
	}
	if again := s.Stop(context.Background()); len(again.Series) != len(r.Series) {
		t.Error("a second Stop changed the result")
	}
	if unstarted := newScraper(t, Config{URL: tg.srv.URL}).Stop(context.Background()); len(unstarted.Series) != 0 || unstarted.Stats.Scrapes != 0 {
		t.Errorf("Stop without Start: %+v", unstarted)
	}
}

func TestScrapeFailuresAreCountedNotFatal(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/metrics"
	_ = ln.Close() // nothing listens there now
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hang.Close)
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>vllm:num_requests_running 1</html>")
	}))
	t.Cleanup(html.Close)
	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "vllm:num_requests_running{model=\"m\" 1\n")
	}))
	t.Cleanup(garbage.Close)
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := "# " + strings.Repeat("c", 1<<10-3) + "\n" // comment lines, 1 KiB each
		for range 65 {
			if _, err := fmt.Fprint(w, line); err != nil {
				return
			}
		}
	}))
	t.Cleanup(huge.Close)

	for _, tc := range []struct {
		name, url, want string
		wantErr         error
		timeout         time.Duration
	}{
		{"dead endpoint", dead, "connect", nil, 0},
		{"hanging endpoint", hang.URL, "", context.DeadlineExceeded, 100 * time.Millisecond},
		{"html page", html.URL, "not Prometheus", nil, 0},
		{"404", missing.URL, "HTTP 404", nil, 0},
		{"malformed exposition", garbage.URL, "parse", nil, 0},
		{"oversized scrape", huge.URL, "more than 65536 bytes", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScraper(t, Config{URL: tc.url, Timeout: tc.timeout, MaxBytes: 64 << 10}) // default timeout: 1 s
			if err := s.Probe(context.Background()); err == nil {
				t.Fatal("Probe: nil error")
			}
			scrapeAt(s, 0)
			scrapeAt(s, 1)
			r := s.Stop(context.Background())
			if r.Stats.Scrapes != 2 || r.Stats.Failed != 2 || len(r.Series) != 0 || r.ServerMetrics(time.Now()) != nil {
				t.Errorf("stats %+v, %d series", r.Stats, len(r.Series))
			}
			switch {
			case r.FirstErr == nil:
				t.Fatal("no first error")
			case tc.wantErr != nil && !errors.Is(r.FirstErr, tc.wantErr):
				t.Errorf("first error %v, want %v", r.FirstErr, tc.wantErr)
			case !strings.Contains(r.FirstErr.Error(), tc.want):
				t.Errorf("first error %q, want it to say %q", r.FirstErr, tc.want)
			}
		})
	}
}

func TestScrapeBounds(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rag_g"}, []string{"k"})
	reg.MustRegister(g)
	for i := range 5 {
		g.WithLabelValues(fmt.Sprint(i, strings.Repeat("v", 300))).Set(float64(i))
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	s := newScraper(t, Config{URL: srv.URL, Interval: time.Second, MaxSeries: 2, MaxSamples: 8})
	for i := range 9 {
		scrapeAt(s, float64(i))
	}
	r := s.Stop(context.Background())
	if len(r.Series) != 2 || r.Stats.DroppedSeries != 3 {
		t.Errorf("%d series, %d dropped: want 2 kept and 3 dropped", len(r.Series), r.Stats.DroppedSeries)
	}
	total := 0
	for _, ser := range r.Series {
		total += len(ser.Points)
		if v := ser.Labels["k"]; len(v) > maxLabelLen+len("…") {
			t.Errorf("label value of %d bytes kept", len(v))
		}
		for i := 1; i < len(ser.Points); i++ {
			if ser.Points[i][0] <= ser.Points[i-1][0] {
				t.Errorf("points out of order after thinning: %v", ser.Points)
			}
		}
	}
	// 2 series x 4 scrapes reach 8 samples: halved to 4 (interval 2 s); each 2 scrapes more
	// reach 8 again (scrapes 6 and 8): halved to 4 (4 s, then 8 s); the ninth adds 2.
	if r.Stats.Thinned != 3 || r.Interval != 8*time.Second || total != 6 {
		t.Errorf("thinned %d times, interval %s, %d points: want 3, 8s, 6", r.Stats.Thinned, r.Interval, total)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no scheme", Config{URL: "localhost:8000/metrics"}, "http://"},
		{"ftp", Config{URL: "ftp://h/metrics"}, "http://"},
		{"no host", Config{URL: "http:///metrics"}, "http://"},
		{"tiny interval", Config{URL: "http://h/metrics", Interval: time.Millisecond}, "at least 10ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	s := newScraper(t, Config{URL: "http://h/metrics", Interval: 30 * time.Second})
	if s.cfg.Timeout != maxTimeout || s.cfg.MaxSeries != DefaultMaxSeries || len(s.cfg.Families) != len(DefaultFamilies) {
		t.Errorf("defaults %+v", s.cfg)
	}
}

func TestLatestIsTheLastValueOfEachSeries(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	s := newScraper(t, Config{URL: tg.srv.URL})
	if got := s.Latest(); len(got) != 0 {
		t.Fatalf("before any scrape: %v", got)
	}
	for i, v := range []float64{3, 9} {
		tg.running.Set(v)
		tg.requests.Add(v)
		tg.ttft.Observe(v / 10)
		scrapeAt(s, float64(i))
	}
	want := map[string]struct {
		value float64
		gauge bool
	}{
		"vllm:num_requests_running": {9, true},
		MemoryMetric:                {0, true},
		"rag_requests_total":        {12, false},
		"gen_ai_server_time_to_first_token_seconds_count": {2, false},
		"gen_ai_server_time_to_first_token_seconds_sum":   {1.2, false},
	}
	got := s.Latest()
	if len(got) != len(want) {
		t.Fatalf("Latest = %+v, want %d series", got, len(want))
	}
	for _, smp := range got {
		w, ok := want[smp.Name]
		if !ok || math.Abs(smp.Value-w.value) > 1e-9 || smp.Gauge != w.gauge {
			t.Errorf("%s = %g (gauge %v), want %g (gauge %v)", smp.Name, smp.Value, smp.Gauge, w.value, w.gauge)
		}
		if d := smp.At - 1; d < 0 || d > 1 {
			t.Errorf("%s at t=%g, want the second scrape's, just after 1", smp.Name, smp.At)
		}
	}
}
