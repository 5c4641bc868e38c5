package report

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// HoldSLO is what bench --hold-slo did: the windows of its search for the highest offered rate
// that meets a percentile SLO, each judged from the requests intended in it, and the stretch it
// then held at that rate, judged as a whole. It is the hold_slo section of the bench JSON, kept
// as written.
type HoldSLO struct {
	// SLO is the objective as --hold-slo reads it (p95_ttft_ms<=2000); Metric, Percentile,
	// Op and LimitMS are its parts.
	SLO        string  `json:"slo"`
	Metric     string  `json:"metric"`
	Percentile float64 `json:"percentile"`
	Op         string  `json:"op"` // < or <=
	LimitMS    float64 `json:"limit_ms"`
	// The search's settings: the window each rate is judged over, how long the found rate is
	// held, the factor the rate grows (or shrinks) by until a window misses (meets), the
	// bracket width at which bisection stops, and the first rate tried.
	WindowS      float64 `json:"window_s"`
	HoldForS     float64 `json:"hold_for_s"`
	Growth       float64 `json:"growth"`
	ToleranceRPS float64 `json:"tolerance_rps"`
	StartRPS     float64 `json:"start_rps"`
	// Windows are the search's windows in order, then the held stretch (phase "hold").
	Windows []HoldWindow `json:"windows"`
	// Outcome is HoldHeld, HoldNeverMet, HoldAlwaysMet or HoldInterrupted.
	Outcome string `json:"outcome"`
	// HeldRPS is the rate held: the highest rate a search window met; nil when none met.
	HeldRPS *float64 `json:"held_rps"`
	// IntervalLoRPS and IntervalHiRPS are the search's bracket of the highest rate that meets
	// the SLO: the highest rate a window met (the held rate) and the lowest rate a window
	// missed, the search having stopped when they were at most ToleranceRPS apart; the edge
	// lies in [lo, hi) if meeting the SLO is monotone in the rate and each window's verdict is
	// right. IntervalHiRPS is nil when no window missed (HoldAlwaysMet).
	IntervalLoRPS *float64 `json:"interval_lo_rps"`
	IntervalHiRPS *float64 `json:"interval_hi_rps"`
	// HeldMet says whether the held stretch as a whole met the SLO; nil when nothing was held.
	HeldMet *bool `json:"held_met"`
}

// Outcomes of a HoldSLO.
const (
	HoldHeld        = "held"        // a rate was found and held for the whole stretch
	HoldNeverMet    = "never_met"   // no window met the SLO, down to the lowest rate tried
	HoldAlwaysMet   = "always_met"  // every window met it, up to the highest rate tried
	HoldInterrupted = "interrupted" // Ctrl-C (or the run's end) stopped the search or the hold
	HoldPhaseSearch = "search"      // a window of the search
	HoldPhaseHold   = "hold"        // the held stretch
	holdOver        = "over"        // a percentile that fell on a failed or unfinished request
)

// HoldWindow is one window of the search, or the held stretch: the requests intended in
// [StartS, EndS) of the run, at the offered rate RateRPS, and their percentile of the SLO's
// metric with its distribution-free 95% interval. A request that failed, or that had not
// finished when the window was judged (it had waited longer than the limit by then), counts
// as over the limit with no value: a percentile or interval bound that falls on one is nil
// (above every value measured). Failed counts too the successes that lack the metric (no token
// streamed, for a TTFT bound).
type HoldWindow struct {
	Phase      string   `json:"phase"` // HoldPhaseSearch or HoldPhaseHold
	StartS     float64  `json:"start_s"`
	EndS       float64  `json:"end_s"`
	RateRPS    float64  `json:"rate_rps"`
	Requests   int      `json:"requests"`
	Failed     int      `json:"failed"`
	Unfinished int      `json:"unfinished"`
	ValueMS    *float64 `json:"value_ms"`
	LoMS       *float64 `json:"lo_ms"`
	HiMS       *float64 `json:"hi_ms"`
	HasCI      bool     `json:"has_ci"` // false: too few requests for the interval
	Met        bool     `json:"met"`
}

// holdRows writes the hold's windows and verdict to the text summary.
func (t *textWriter) holdRows(b *Bench) {
	h := b.HoldSLO
	if h == nil {
		return
	}
	t.rule("SLO edge (--hold-slo "+h.SLO+")", '-')
	label := fmt.Sprintf("P%s %s (ms) [95%% CI]", formatP(h.Percentile), strings.ToUpper(h.Metric))
	t.printf("%-6s %8s %8s %9s %8s  %-30s %s\n", "phase", "from (s)", "to (s)", "req/s", "requests", label, "verdict")
	for _, w := range h.Windows {
		t.printf("%-6s %8.1f %8.1f %9.3g %8d  %-30s %s\n", w.Phase, w.StartS, w.EndS, w.RateRPS, w.Requests, w.ValueText(), w.VerdictText())
	}
	t.row("Held rate (req/s)", "%s", h.heldText())
	t.row("Interval (req/s)", "%s", h.intervalText())
}

// ValueText is the window's percentile in ms with its interval, as the text and the HTML show
// it; "over" stands for a failed or unfinished request.
func (w HoldWindow) ValueText() string {
	f := func(v *float64) string {
		if v == nil {
			return holdOver
		}
		return strconv.FormatFloat(*v, 'f', 1, 64)
	}
	switch {
	case w.Requests == 0:
		return "-"
	case w.ValueMS == nil:
		return holdOver + " (failed or unfinished)"
	case !w.HasCI:
		return f(w.ValueMS)
	}
	return f(w.ValueMS) + " [" + f(w.LoMS) + ", " + f(w.HiMS) + "]"
}

// VerdictText says whether the window met the SLO, with its failed and unfinished requests.
func (w HoldWindow) VerdictText() string {
	v := "missed"
	if w.Met {
		v = "met"
	}
	if w.Failed > 0 || w.Unfinished > 0 {
		v += fmt.Sprintf(" (%d failed, %d unfinished)", w.Failed, w.Unfinished)
	}
	return v
}

// heldText says the rate held and whether the held stretch met the SLO.
func (h *HoldSLO) heldText() string {
	switch {
	case h.HeldRPS == nil && h.Outcome == HoldNeverMet:
		return "none: no window met the SLO, down to the lowest rate tried"
	case h.HeldRPS == nil:
		return "none: the search was stopped before a window met the SLO"
	}
	s := fmt.Sprintf("%.3g", *h.HeldRPS)
	switch {
	case h.HeldMet == nil:
		s += " (not held: " + h.Outcome + ")"
	case *h.HeldMet:
		s += fmt.Sprintf(" held for %gs, and the held stretch met the SLO", h.HoldForS)
	default:
		s += fmt.Sprintf(" held for %gs, and the held stretch MISSED the SLO", h.HoldForS)
	}
	if h.Outcome == HoldInterrupted && h.HeldMet != nil {
		s += " (interrupted: the stretch was cut short)"
	}
	return s
}

// intervalText says the search's bracket.
func (h *HoldSLO) intervalText() string {
	switch {
	case h.IntervalLoRPS != nil && h.IntervalHiRPS != nil:
		return fmt.Sprintf("%.3g to %.3g: a window met the SLO at the first and missed it at the second (tolerance %.3g)",
			*h.IntervalLoRPS, *h.IntervalHiRPS, h.ToleranceRPS)
	case h.IntervalLoRPS != nil:
		return fmt.Sprintf("at least %.3g: no window missed the SLO", *h.IntervalLoRPS)
	case h.IntervalHiRPS != nil:
		return fmt.Sprintf("below %.3g: no window met the SLO", *h.IntervalHiRPS)
	}
	return "none: no window was judged"
}

// holdBlocks is the HTML section of the hold: the offered rate over time with each window's
// verdict, and the windows' table.
func holdBlocks(h *HoldSLO) blocks {
	var rate, met, missed []pt
	for _, w := range h.Windows {
		rate = append(rate, pt{X: w.StartS, Y: w.RateRPS}, pt{X: w.EndS, Y: w.RateRPS}, pt{X: w.EndS, Y: math.NaN()})
		mid := pt{X: (w.StartS + w.EndS) / 2, Y: w.RateRPS}
		if w.Met {
			met = append(met, mid)
		} else {
			missed = append(missed, mid)
		}
	}
	c := chart{Title: "Offered rate by window", XLabel: "seconds since start (intended send)", YLabel: "req/s", YFromZero: true,
		Series: []series{
			{Name: "offered rate", Mode: modeLine, Color: palette[0], Pts: rate},
			{Name: "met the SLO", Mode: modeDots, Color: palette[2], Pts: met},
			{Name: "missed the SLO", Mode: modeDots, Color: palette[1], Pts: missed},
		}}
	if h.HeldRPS != nil {
		c.HLines = append(c.HLines, refLine{At: *h.HeldRPS, Label: "held", Color: palette[6]})
	}
	t := table{Heads: []string{"phase", "from (s)", "to (s)", "req/s", "requests",
		fmt.Sprintf("P%s %s ms [95%% CI]", formatP(h.Percentile), strings.ToUpper(h.Metric)), "verdict"}}
	for _, w := range h.Windows {
		t.row(w.Phase, fmt.Sprintf("%.1f", w.StartS), fmt.Sprintf("%.1f", w.EndS), fmt.Sprintf("%.3g", w.RateRPS),
			fmt.Sprint(w.Requests), w.ValueText(), w.VerdictText())
	}
	return blocks{Charts: []template.HTML{c.render()}, Tables: []table{t}, Notes: []string{
		"SLO " + h.SLO + ". Held rate: " + h.heldText() + ".",
		"Interval: " + h.intervalText() + ".",
		"Each window holds the requests intended in it; a failed request, or one still running when its window was judged, " +
			"counts as over the limit. Between windows, while a window's last requests finish, the load goes on at the highest rate met so far " +
			"divided by the growth (" + strconv.FormatFloat(h.Growth, 'g', -1, 64) + "); the search's requests, these included, count as warmup: the result's figures are the held stretch's.",
	}}
}
