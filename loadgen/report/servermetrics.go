package report

import (
	"fmt"
	"html/template"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// ServerMetrics is what the target's own metrics did during the run: series scraped from its
// Prometheus endpoint on the run's clock (t in seconds from Bench.Start). The bench JSON holds
// it as {"interval_s": 1, "series": [{"name", "labels", "points": [[t_s, v], ...], "peak",
// "mean"}]}; peak and mean are computed from the points when written.
type ServerMetrics struct {
	Interval time.Duration
	Series   []ServerSeries
}

// ServerSeries is one scraped series: a metric family's name, its labels and its samples.
type ServerSeries struct {
	Name   string
	Labels map[string]string
	Points [][2]float64 // [t_s, value]; non-finite values are left out when written
}

// Limits on a server_metrics object read from a file.
const (
	maxServerSeries = 4096
	maxSeriesPoints = 1 << 20
)

// PeakMean is the largest and the mean finite value of the series; NaN without one.
func (s ServerSeries) PeakMean() (peak, mean float64) {
	peak, mean = math.NaN(), math.NaN()
	var sum float64
	n := 0
	for _, p := range s.Points {
		v := p[1]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if n == 0 || v > peak {
			peak = v
		}
		sum += v
		n++
	}
	if n > 0 {
		mean = sum / float64(n)
	}
	return peak, mean
}

// serverSeriesJSON is the file form of one series.
type serverSeriesJSON struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	Points [][2]float64      `json:"points"`
	Peak   *float64          `json:"peak"`
	Mean   *float64          `json:"mean"`
}

type serverMetricsJSON struct {
	IntervalS float64            `json:"interval_s"`
	Series    []serverSeriesJSON `json:"series"`
}

func finitePtr(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	x = sig(x)
	return &x
}

func serverMetricsValue(m *ServerMetrics) serverMetricsJSON {
	out := serverMetricsJSON{IntervalS: roundTo(m.Interval.Seconds(), 6), Series: make([]serverSeriesJSON, 0, len(m.Series))}
	for _, s := range m.Series {
		pts := make([][2]float64, 0, len(s.Points))
		for _, p := range s.Points {
			if !math.IsNaN(p[1]) && !math.IsInf(p[1], 0) && !math.IsNaN(p[0]) && !math.IsInf(p[0], 0) {
				pts = append(pts, [2]float64{roundTo(p[0], 3), sig(p[1])})
			}
		}
		labels := s.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		peak, mean := s.PeakMean()
		out.Series = append(out.Series, serverSeriesJSON{Name: s.Name, Labels: labels, Points: pts,
			Peak: finitePtr(peak), Mean: finitePtr(mean)})
	}
	return out
}

// metrics are the ServerMetrics of the file's object at key; peak and mean are recomputed from
// the points.
func (v *serverMetricsJSON) metrics(c *checker, key string) *ServerMetrics {
	if !(v.IntervalS >= 0 && v.IntervalS <= 86400) {
		c.fail(key+".interval_s", "want seconds between 0 and 86400, got %g", v.IntervalS)
		return nil
	}
	if len(v.Series) > maxServerSeries {
		c.fail(key+".series", "%d series, more than %d", len(v.Series), maxServerSeries)
		return nil
	}
	m := &ServerMetrics{Interval: time.Duration(math.Round(v.IntervalS * 1e9))}
	for i, s := range v.Series {
		if len(s.Points) > maxSeriesPoints {
			c.fail(fmt.Sprintf("%s.series[%d].points", key, i), "%d points, more than %d", len(s.Points), maxSeriesPoints)
			return nil
		}
		m.Series = append(m.Series, ServerSeries{Name: s.Name, Labels: s.Labels, Points: s.Points})
	}
	return m
}

// seriesLabel is name{k="v",...} with sorted labels.
func seriesLabel(s ServerSeries) string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	return s.Name + "{" + labelsText(s.Labels, 0) + "}"
}

// labelsText is k="v",... with sorted keys, cut at limit runes (0: no limit).
func labelsText(labels map[string]string, limit int) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	s := strings.Join(parts, ",")
	if r := []rune(s); limit > 0 && len(r) > limit {
		return string(r[:limit-1]) + "…"
	}
	return s
}

type serverMetricsPanel struct {
	Interval time.Duration
	RunEnd   string
	Table    table
	Charts   []template.HTML
}

// serverMetricsView draws each series over the run's clock with its peak and mean.
func serverMetricsView(m *ServerMetrics, runEnd time.Duration) serverMetricsPanel {
	v := serverMetricsPanel{Interval: m.Interval, RunEnd: fmt.Sprintf("%.1f", runEnd.Seconds()),
		Table: table{Heads: []string{"series", "peak", "mean", "points"}}}
	for _, s := range m.Series {
		peak, mean := s.PeakMean()
		v.Table.row(seriesLabel(s), fmt.Sprintf("%.6g", peak), fmt.Sprintf("%.6g", mean), fmt.Sprint(len(s.Points)))
	}
	for i, s := range m.Series {
		pts := make([]pt, 0, len(s.Points))
		for _, p := range s.Points {
			if !math.IsNaN(p[1]) && !math.IsInf(p[1], 0) {
				pts = append(pts, pt{X: p[0], Y: p[1]})
			}
		}
		if len(pts) < 2 {
			continue
		}
		v.Charts = append(v.Charts, chart{Title: s.Name, Subtitle: labelsText(s.Labels, 64), XLabel: "s since the run's start",
			YLabel: "value", W: 480, H: 240, YFromZero: true,
			Series: []series{{Mode: modeLine, Color: palette[i%len(palette)], Pts: pts}}}.render())
	}
	return v
}
