package report

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// Sweep is a ladder of runs at increasing load: the ragtail.sweep/v1 document.
type Sweep struct {
	Start  time.Time
	Axis   string // AxisRate or AxisConcurrency: what the ladder varies
	Points []SweepPoint

	KneeThreshold float64   // ms of P99 per extra req/s for Knee
	Knee          SweepKnee // the article's slope rule (stats.Knee)
	KneeRobust    SweepKnee // max distance below the chord (stats.KneeRobust)

	SLO            *PercentileSLO // the SLO of MaxRPSUnderSLO, if any
	MaxRPSUnderSLO *float64       // nil when no SLO was given or no point met it
	// MaxUsersUnderSLO is, on a concurrency axis, the most users of the closed loop that met
	// the SLO (bisected, or read off the ladder); nil otherwise.
	MaxUsersUnderSLO *int
	// MaxInterval brackets the max load under the SLO by the points' (and probes') 95%
	// intervals of the SLO's percentile; nil without an SLO.
	MaxInterval *SLOInterval
	Probes      []stats.Probe // bisection probes, when the sweep bisected
}

// SLOInterval brackets the highest load that meets an SLO by sampling error: Lo is the highest
// load whose whole 95% interval of the SLO's percentile is within the limit (a load the SLO
// surely holds at), Hi the lowest load whose whole interval is beyond it (one it surely fails
// at). A point whose interval straddles the limit, or that has too few requests for one, bounds
// nothing. On the concurrency axis the loads are numbers of users; on the rate axis points are
// ordered by offered rate, Lo is the achieved rate of its point (as the max RPS is) and Hi the
// offered rate of its point (an overloaded point achieves less than it is offered, and what
// fails is the load offered). HasLo or HasHi is false when no point bounds that side.
type SLOInterval struct {
	Lo, Hi       float64
	HasLo, HasHi bool
}

// BracketSLO computes the SLOInterval of benches (in any order) on axis.
func BracketSLO(slo PercentileSLO, axis string, benches []*Bench) SLOInterval {
	var iv SLOInterval
	type judged struct {
		x, lo, hi float64 // the order of the load; its value as Lo and as Hi
		sure, out bool    // the whole interval meets the limit; the whole interval exceeds it
	}
	var js []judged
	for _, b := range benches {
		h := b.Histograms[slo.Metric]
		if h == nil || h.Count() == 0 {
			continue
		}
		_, lo, hi, ok := h.QuantileCI(slo.Percentile/100, 0.95)
		if !ok {
			continue
		}
		j := judged{x: b.Config.RequestRate, lo: b.RequestThroughput, hi: b.Config.RequestRate, sure: hi <= slo.Limit, out: lo > slo.Limit}
		if axis == AxisConcurrency {
			j.x = float64(b.Config.Concurrency)
			j.lo, j.hi = j.x, j.x
		}
		js = append(js, j)
	}
	fail, loX := math.Inf(1), math.Inf(-1)
	for _, j := range js {
		if j.out && j.x < fail {
			fail, iv.Hi, iv.HasHi = j.x, j.hi, true
		}
	}
	for _, j := range js {
		if j.sure && j.x < fail && j.x > loX {
			loX, iv.Lo, iv.HasLo = j.x, j.lo, true
		}
	}
	return iv
}

// String says the interval as a report line does, in the axis's unit: "39.34 to 39.71 req/s"
// (met beyond sampling error at the first, missed beyond it at the second).
func (iv SLOInterval) String(axis string) string {
	f := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	unit := "req/s"
	if axis == AxisConcurrency {
		f = func(v float64) string { return fmt.Sprintf("%.0f", v) }
		unit = "users"
	}
	switch {
	case iv.HasLo && iv.HasHi:
		return fmt.Sprintf("%s to %s %s (met beyond sampling error at the first, missed at the second)", f(iv.Lo), f(iv.Hi), unit)
	case iv.HasLo:
		return fmt.Sprintf("at least %s %s (no point missed the SLO beyond sampling error)", f(iv.Lo), unit)
	case iv.HasHi:
		return fmt.Sprintf("below %s %s (no point met the SLO beyond sampling error)", f(iv.Hi), unit)
	}
	return "not bounded: no point met or missed the SLO beyond sampling error"
}

// Sweep axes.
const (
	AxisRate        = "rate"
	AxisConcurrency = "concurrency"
)

// SweepPoint is one rung of the ladder.
type SweepPoint struct {
	Rate        float64 // offered request rate; +Inf for a closed loop
	Concurrency int     // concurrency cap (the number of users of a closed loop); 0 for none
	AchievedRPS float64 // completed requests per second
	Bench       *Bench
}

// Partial reports whether Ctrl-C cut the point short (its bench's config says interrupted):
// the reports show it, marked, but its figures cover a shorter stretch than the other points'
// (an overloaded point's queue had less time to grow), so the knees, the max load read off the
// ladder and the interval of the max leave it out.
func (p SweepPoint) Partial() bool { return p.Bench != nil && p.Bench.Config.Interrupted }

// x is the point's position on the axis.
func (p SweepPoint) x(axis string) float64 {
	if axis == AxisConcurrency {
		return float64(p.Concurrency)
	}
	return p.Rate
}

// SweepKnee is a knee found on a sweep.
type SweepKnee struct {
	Found       bool
	Index       int     // into Points
	Rate        float64 // offered rate at the knee; the achieved rate on a concurrency axis
	Concurrency int     // on a concurrency axis
	AchievedRPS float64
	P99E2EL     time.Duration
	Method      string
}

// SweepOptions tune SummarizeSweep.
type SweepOptions struct {
	KneeThreshold float64        // ms per req/s; default stats.DefaultKneeSlope (120)
	SLO           *PercentileSLO // defines max_rps_under_slo
	// MaxRPS, when the sweep bisected for it (stats.BisectMaxRate), is the answer, and Probes
	// its trials. When nil and SLO is set, the answer is read off the ladder: the highest
	// achieved rate among the points, from the lowest load up, that meet the SLO before the
	// first one that does not.
	MaxRPS *float64
	Probes []stats.Probe
	// MaxUsers, when a concurrency sweep bisected for it (stats.BisectMaxUsers), is the answer.
	MaxUsers *int
	// Interval, when given, is the SLOInterval over every point and probe the sweep ran
	// (BracketSLO); when nil it is computed from the points.
	Interval *SLOInterval
}

// SummarizeSweep builds the sweep of the benches of its points, ordered by load. A bench whose
// request rate is infinite or zero (a closed loop) is placed by its concurrency; the axis is
// concurrency when all are closed loops, rate otherwise.
func SummarizeSweep(points []*Bench, opts SweepOptions) *Sweep {
	if !(opts.KneeThreshold > 0) {
		opts.KneeThreshold = stats.DefaultKneeSlope
	}
	s := &Sweep{Axis: AxisConcurrency, KneeThreshold: opts.KneeThreshold, SLO: opts.SLO, Probes: opts.Probes}
	for _, b := range points {
		if r := b.Config.RequestRate; r > 0 && !math.IsInf(r, 1) {
			s.Axis = AxisRate
		}
		if s.Start.IsZero() || (!b.Start.IsZero() && b.Start.Before(s.Start)) {
			s.Start = b.Start
		}
		s.Points = append(s.Points, SweepPoint{Rate: b.Config.RequestRate, Concurrency: b.Config.Concurrency,
			AchievedRPS: b.RequestThroughput, Bench: b})
	}
	slices.SortStableFunc(s.Points, func(a, b SweepPoint) int { return cmpFloat(a.x(s.Axis), b.x(s.Axis)) })
	s.analyse(opts.MaxRPS, opts.MaxUsers, opts.Interval)
	return s
}

// analyse finds the knees and, from the ladder when no bisection gave them, the max RPS, the
// max users on a concurrency axis, and the interval of the max load.
func (s *Sweep) analyse(maxRPS *float64, maxUsers *int, iv *SLOInterval) {
	var kp []stats.Point
	var at []int // the index in s.Points of each of kp
	var whole []SweepPoint
	for i, p := range s.Points {
		if p.Partial() {
			continue
		}
		kp = append(kp, stats.Point{X: p.x(s.Axis), Achieved: p.AchievedRPS, P99: p.Bench.p99E2EL()})
		at = append(at, i)
		whole = append(whole, p)
	}
	s.Knee = s.knee(stats.Knee(kp, s.KneeThreshold), at)
	s.KneeRobust = s.knee(stats.KneeRobust(kp), at)
	s.MaxRPSUnderSLO = maxRPS
	if maxRPS == nil && s.SLO != nil {
		for _, p := range whole {
			ok, _ := s.SLO.Met(p.Bench)
			if !ok {
				break
			}
			v := p.AchievedRPS
			if s.MaxRPSUnderSLO != nil {
				v = math.Max(v, *s.MaxRPSUnderSLO)
			}
			s.MaxRPSUnderSLO = &v
		}
	}
	if s.SLO == nil {
		return
	}
	s.MaxUsersUnderSLO = maxUsers
	if maxUsers == nil && s.Axis == AxisConcurrency {
		for _, p := range whole {
			if ok, _ := s.SLO.Met(p.Bench); !ok {
				break
			}
			s.MaxUsersUnderSLO = ptr(p.Concurrency)
		}
	}
	if iv == nil {
		benches := make([]*Bench, len(whole))
		for i, p := range whole {
			benches[i] = p.Bench
		}
		b := BracketSLO(*s.SLO, s.Axis, benches)
		iv = &b
	}
	s.MaxInterval = iv
}

// partialNote says which point Ctrl-C cut short, for the reports' footnote of a * beside it;
// "" when none was.
func (s *Sweep) partialNote() string {
	for _, p := range s.Points {
		if p.Partial() {
			return fmt.Sprintf("* interrupted (Ctrl-C) after %.1f s of measurement: shown, but left out of the knees and the max load",
				p.Bench.Duration.Seconds())
		}
	}
	return ""
}

// knee is the SweepKnee of k, found on the points whose indices in s.Points are at.
func (s *Sweep) knee(k stats.KneeResult, at []int) SweepKnee {
	out := SweepKnee{Found: k.Found, Method: k.Method}
	if !k.Found {
		return out
	}
	i := at[k.Index]
	p := s.Points[i]
	out.Index, out.Concurrency, out.AchievedRPS, out.P99E2EL = i, p.Concurrency, p.AchievedRPS, k.P99
	out.Rate = p.Rate
	if s.Axis == AxisConcurrency {
		out.Rate = p.AchievedRPS
	}
	return out
}

// p99E2EL is the bench's P99 end-to-end latency, from its histogram when it has one.
func (b *Bench) p99E2EL() time.Duration {
	if h := b.Histograms[MetricE2EL]; h != nil && h.Count() > 0 {
		return h.Quantile(0.99)
	}
	if s, ok := b.Metric(MetricE2EL); ok {
		for _, p := range s.Percentiles {
			if p.P == 99 {
				return p.Value
			}
		}
	}
	return 0
}

// sweepJSON is the ragtail.sweep/v1 document.
type sweepJSON struct {
	Schema                string             `json:"schema"`
	Start                 timestamp          `json:"start"`
	Axis                  string             `json:"axis"`
	Knee                  derived[*kneeJSON] `json:"knee"`
	KneeRobust            derived[*kneeJSON] `json:"knee_robust"`
	KneeThresholdMSPerRPS amount             `json:"knee_threshold_ms_per_rps"`
	SLO                   *string            `json:"slo"`
	MaxRPSUnderSLO        *amount            `json:"max_rps_under_slo"`
	MaxUsersUnderSLO      *int               `json:"max_users_under_slo,omitempty"`
	MaxUnderSLOInterval   *intervalJSON      `json:"max_under_slo_interval,omitempty"`
	Probes                []probeJSON        `json:"probes"`
	Points                []pointDoc         `json:"points"`
}

// pointDoc is a point of a sweep: its rate or concurrency and its achieved rate, then its
// bench's document (without the schema).
type pointDoc struct {
	pointJSON
	bench benchFile
}

type pointJSON struct {
	Rate        *derived[rate] `json:"rate,omitempty"`
	Concurrency *derived[int]  `json:"concurrency,omitempty"`
	AchievedRPS amount         `json:"achieved_rps"`
}

// MarshalJSON writes the point's keys, then its bench's.
func (p pointDoc) MarshalJSON() ([]byte, error) { return members{p.pointJSON, p.bench}.MarshalJSON() }

// UnmarshalJSON reads the point's keys and its bench's.
func (p *pointDoc) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &p.pointJSON); err != nil {
		return err
	}
	return p.bench.UnmarshalJSON(b)
}

type probeJSON struct {
	Rate  *amount `json:"rate,omitempty"`
	Users *int    `json:"users,omitempty"`
	Meets bool    `json:"meets"`
}

// intervalJSON is an SLOInterval as written: null for a side no point bounds.
type intervalJSON struct {
	Lo *amount `json:"lo"`
	Hi *amount `json:"hi"`
}

// kneeJSON is a knee as written; reading, the knees are found again from the points.
type kneeJSON struct {
	Rate        number `json:"rate"`
	Concurrency *int   `json:"concurrency,omitempty"`
	AchievedRPS number `json:"achieved_rps"`
	P99E2ELMS   number `json:"p99_e2el_ms"`
	Method      string `json:"method"`
	Index       int    `json:"index"`
}

// MarshalJSON writes the ragtail.sweep/v1 document. Each point is its bench's document (without
// the schema) preceded by rate or concurrency and achieved_rps.
func (s *Sweep) MarshalJSON() ([]byte, error) {
	doc := sweepJSON{
		Schema: SchemaSweep, Start: timestamp(s.Start), Axis: s.Axis,
		Knee: derived[*kneeJSON]{s.kneeObject(s.Knee)}, KneeRobust: derived[*kneeJSON]{s.kneeObject(s.KneeRobust)},
		KneeThresholdMSPerRPS: amount(sig(s.KneeThreshold)),
		Probes:                make([]probeJSON, 0, len(s.Probes)),
		Points:                make([]pointDoc, 0, len(s.Points)),
	}
	if s.SLO != nil {
		doc.SLO = ptr(s.SLO.String())
	}
	if s.MaxRPSUnderSLO != nil {
		doc.MaxRPSUnderSLO = ptr(amount(sig(*s.MaxRPSUnderSLO)))
	}
	doc.MaxUsersUnderSLO = s.MaxUsersUnderSLO
	if iv := s.MaxInterval; iv != nil {
		doc.MaxUnderSLOInterval = &intervalJSON{}
		if iv.HasLo {
			doc.MaxUnderSLOInterval.Lo = ptr(amount(sig(iv.Lo)))
		}
		if iv.HasHi {
			doc.MaxUnderSLOInterval.Hi = ptr(amount(sig(iv.Hi)))
		}
	}
	for _, p := range s.Probes {
		pj := probeJSON{Meets: p.Meets}
		if p.Users > 0 {
			pj.Users = ptr(p.Users)
		} else {
			pj.Rate = ptr(amount(sig(p.Rate)))
		}
		doc.Probes = append(doc.Probes, pj)
	}
	for i, p := range s.Points {
		pj := pointJSON{AchievedRPS: amount(sig(p.AchievedRPS))}
		if s.Axis == AxisConcurrency || p.Concurrency > 0 {
			pj.Concurrency = &derived[int]{p.Concurrency}
		}
		if s.Axis != AxisConcurrency {
			pj.Rate = &derived[rate]{rate(p.Rate)}
		}
		bf, err := p.Bench.file("")
		if err != nil {
			return nil, fmt.Errorf("points[%d]: %w", i, err)
		}
		doc.Points = append(doc.Points, pointDoc{pj, bf})
	}
	return marshalJSON(doc)
}

func (s *Sweep) kneeObject(k SweepKnee) *kneeJSON {
	if !k.Found {
		return nil
	}
	o := &kneeJSON{Rate: number(sig(k.Rate)), AchievedRPS: number(sig(k.AchievedRPS)), P99E2ELMS: number(msv(k.P99E2EL)),
		Method: k.Method, Index: k.Index}
	if s.Axis == AxisConcurrency {
		o.Concurrency = &k.Concurrency
	}
	return o
}

// UnmarshalJSON reads a ragtail.sweep/v1 document. The knees and the max RPS read off the
// ladder are recomputed from the points (with the file's threshold and SLO); a max RPS found
// by bisection is kept as written.
func (s *Sweep) UnmarshalJSON(data []byte) error {
	var f sweepJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return readable(err)
	}
	if f.Schema != SchemaSweep {
		return fmt.Errorf("schema %q is not %s", f.Schema, SchemaSweep)
	}
	ns, err := f.sweep()
	if err != nil {
		return err
	}
	*s = *ns
	return nil
}

// sweep is the Sweep of the document.
func (f *sweepJSON) sweep() (*Sweep, error) {
	c := &checker{}
	ns := &Sweep{Start: time.Time(f.Start), Axis: f.Axis, KneeThreshold: float64(f.KneeThresholdMSPerRPS)}
	if ns.Axis != AxisRate && ns.Axis != AxisConcurrency {
		c.fail("axis", "want %q or %q", AxisRate, AxisConcurrency)
	}
	if !(ns.KneeThreshold > 0) {
		ns.KneeThreshold = stats.DefaultKneeSlope
	}
	if f.SLO != nil && *f.SLO != "" {
		slo, err := ParsePercentileSLO(*f.SLO)
		c.failErr("slo", err)
		ns.SLO = &slo
	}
	for _, p := range f.Probes {
		pr := stats.Probe{Meets: p.Meets}
		if p.Rate != nil {
			pr.Rate = float64(*p.Rate)
		}
		if p.Users != nil {
			pr.Users = *p.Users
		}
		ns.Probes = append(ns.Probes, pr)
	}
	for i := range f.Points {
		if c.err != nil {
			return nil, c.err
		}
		p := &f.Points[i]
		b, err := p.bench.bench(fmt.Sprintf("points[%d]", i))
		if err != nil {
			return nil, err
		}
		ns.Points = append(ns.Points, SweepPoint{Bench: b, Rate: b.Config.RequestRate, Concurrency: b.Config.Concurrency,
			AchievedRPS: float64(p.AchievedRPS)})
	}
	if c.err != nil {
		return nil, c.err
	}
	var maxRPS *float64
	var maxUsers *int
	var iv *SLOInterval
	if len(ns.Probes) > 0 {
		// A bisection's answer and interval come from probes the file does not hold.
		if f.MaxRPSUnderSLO != nil {
			maxRPS = ptr(float64(*f.MaxRPSUnderSLO))
		}
		maxUsers = f.MaxUsersUnderSLO
		if j := f.MaxUnderSLOInterval; j != nil {
			iv = &SLOInterval{}
			if j.Lo != nil {
				iv.Lo, iv.HasLo = float64(*j.Lo), true
			}
			if j.Hi != nil {
				iv.Hi, iv.HasHi = float64(*j.Hi), true
			}
		}
	}
	slices.SortStableFunc(ns.Points, func(a, b SweepPoint) int { return cmpFloat(a.x(ns.Axis), b.x(ns.Axis)) })
	ns.analyse(maxRPS, maxUsers, iv)
	return ns, nil
}

// Read reads a result file from disk (see Decode).
func Read(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open result: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	rf, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rf.Path = path
	return rf, nil
}
