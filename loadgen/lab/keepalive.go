package lab

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
)

// keepaliveRule is the keepalive experiment's pre-registered verdict rule.
var keepaliveRule = Rule{
	Compared: "end-to-end P99 of a service retrieving over TLS, through the longest link (a 20 ms round trip in the in-process lab), " +
		"from a Qdrant-protocol server that sends GOAWAY at a short MaxConnectionAge (2 s) against the same world whose server never does",
	Interval: fmt.Sprintf("order-statistic 95%% interval of each P99, each of the two arms holding at least n requests, n computed before them from a pilot of each "+
		"(1/%d of the load time each, same load): the least n from which, taking each pilot's empirical distribution for its arm's, the max-age arm's interval lies above the other's "+
		"with at least %.0f%% probability by %s, so at least the %d a P99 interval needs; the two arms then run n x %.1f / %.0f req/s each (at least %v, at most %d times their share of the load time); "+
		"the other pairs run %v per arm",
		keepalivePilotShare, 100*verdictPower, separationRuleText("P99", "other arm's", "max-age arm's"), minP99Samples, sampleMargin, keepaliveRate, keepaliveFloor, keepaliveStretch, keepaliveFloor),
	Threshold: "the max-age arm's interval lies entirely above the other's; with fewer than n completed requests in either arm, or no n, the outcome is underpowered",
}

// The keepalive experiment's load and the sizes of its runs: the Poisson rate of every arm, the
// pilots as a share of the load time, the least time of an arm, and how far past its share of
// the load time a deciding arm may run for the rule's n. The floor expects 440 requests, so an
// arm reaches the 368 of a P99 interval with over 99.9% probability.
const (
	keepaliveRate       = 40.0
	keepalivePilotShare = 12
	keepaliveFloor      = 11 * time.Second
	keepaliveStretch    = 2
)

// keepalivePair is the two arms of one link round trip: the server with a MaxConnectionAge and
// the one without.
type keepalivePair struct {
	rtt          time.Duration
	maxAge, none int // indexes into Options.Keepalive
}

// keepalivePairs pairs the arms by LinkRTT, shortest first; an RTT without both kinds of arm
// is left out.
func keepalivePairs(arms []KeepaliveArm) []keepalivePair {
	var pairs []keepalivePair
	for i, a := range arms {
		k := slices.IndexFunc(pairs, func(p keepalivePair) bool { return p.rtt == a.LinkRTT })
		if k < 0 {
			pairs = append(pairs, keepalivePair{rtt: a.LinkRTT, maxAge: -1, none: -1})
			k = len(pairs) - 1
		}
		if a.MaxConnectionAge > 0 {
			pairs[k].maxAge = i
		} else {
			pairs[k].none = i
		}
	}
	pairs = slices.DeleteFunc(pairs, func(p keepalivePair) bool { return p.maxAge < 0 || p.none < 0 })
	slices.SortFunc(pairs, func(a, b keepalivePair) int { return cmp.Compare(a.rtt, b.rtt) })
	return pairs
}

// keepaliveArmResult is what one arm measured.
type keepaliveArmResult struct {
	variant *Variant
	p99     report.PercentileStat
}

// runKeepalive drives services that retrieve over gRPC, with TLS and through a link with a real
// round trip, from Qdrant-protocol servers whose answers outgrow a fresh connection's
// flow-control window; in each pair one server forces reconnects with a short MaxConnectionAge
// and one does not. It compares their tails with the reconnects and their handshakes counted.
func runKeepalive(ctx context.Context, e *env) (*Result, error) {
	doc := map[string]any{"max_connection_age": "30m", "grace": "5m", "ping": "10s", "timeout": "3s", "p99_increase_ms": 120}
	pairs := keepalivePairs(e.o.Keepalive)
	if len(pairs) == 0 {
		return &Result{
			Setup:    "needs services retrieving from Qdrant-protocol servers with MaxConnectionAge short vs none, through the same link (the in-process lab starts them)",
			Document: doc,
			Rows:     []Row{{"P99 increase from forced reconnects", "+120 ms", "not measured"}},
			Verdict:  Verdict{NotRun, "no keepalive arms: against --url the lab cannot change the Qdrant server's MaxConnectionAge; run `ragtail lab keepalive` without --url"},
		}, nil
	}
	deciding := pairs[len(pairs)-1]
	pilotDur := e.dur / keepalivePilotShare
	var variants []Variant
	var pilots [2][]time.Duration
	for k, i := range []int{deciding.maxAge, deciding.none} {
		v, lat, err := e.runKeepaliveArm(ctx, "pilot: "+e.o.Keepalive[i].Name, e.o.Keepalive[i], uint64(90+i), pilotDur)
		if err != nil {
			return nil, err
		}
		variants = append(variants, *v)
		pilots[k] = lat
	}
	need, powered := pilotSeparation(pilots[1], pilots[0], 0.99).samplesNeeded(0.99)
	share := (e.dur - 2*pilotDur) / time.Duration(2*len(pairs))
	per := armDuration(need, powered, keepaliveRate, keepaliveFloor, keepaliveStretch*share)
	e.logf("  pilots over the %v link: P99 %v with max-age over %d, %v without over %d -> %d requests per arm, %v each",
		deciding.rtt, quantileOf(pilots[0], 0.99), len(pilots[0]), quantileOf(pilots[1], 0.99), len(pilots[1]), need, per)
	rows := []Row{
		{fmt.Sprintf("pilots over the %v link: E2EL P99 max-age / none", deciding.rtt), "", pilotsNote(pilots[0], pilots[1], 0.99, pilotDur)},
		{"sample size: requests per arm for the P99 intervals to separate with 90% probability (from the pilots)", "", sizeNote(need, powered, per, keepaliveRate, "requests per arm")},
	}
	results := make([]keepaliveArmResult, len(e.o.Keepalive))
	held := make([]int, len(e.o.Keepalive))
	for _, p := range pairs {
		d := keepaliveFloor
		if p == deciding {
			d = per
		}
		for _, i := range []int{p.maxAge, p.none} {
			v, lat, err := e.runKeepaliveArm(ctx, e.o.Keepalive[i].Name, e.o.Keepalive[i], uint64(70+i), d)
			if err != nil {
				return nil, err
			}
			results[i] = keepaliveArmResult{variant: v, p99: pct(v.Bench, report.MetricE2EL, 99)}
			held[i] = len(lat)
			variants = append(variants, *v)
			rows = append(rows, keepaliveRows(e.o.Keepalive[i], v)...)
		}
		rows = append(rows, Row{fmt.Sprintf("%v link: P99 increase from reconnects", p.rtt), "+120 ms",
			fmt.Sprintf("%+.1f ms", float64(results[p.maxAge].p99.Value-results[p.none].p99.Value)/float64(time.Millisecond))})
	}
	out := compare(results[deciding.maxAge].p99, results[deciding.none].p99)
	got := min(held[deciding.maxAge], held[deciding.none])
	if !powered || int64(got) < need {
		out = Underpowered
	}
	why := keepaliveWhy(out, e.o.Keepalive, results, pairs)
	if out == Underpowered {
		why = underpowered(need, powered, got, "requests per arm", "an arm") + why
	}
	return &Result{
		Setup: fmt.Sprintf("retrieval over gRPC (Qdrant protocol, TLS 1.3, 1 shard, answers padded past a fresh connection's 64 KiB window) through links of %s; "+
			"servers with MaxConnectionAge %v vs none; Poisson %.0f req/s, max_tokens 4; pilots of the %v pair %v each, then %v per arm of that pair (%d requests by the rule, +%.0f%%), %v per arm of the others",
			pairRTTs(pairs), e.o.Keepalive[deciding.maxAge].MaxConnectionAge, keepaliveRate, deciding.rtt, pilotDur.Round(100*time.Millisecond), per, need, 100*(sampleMargin-1), keepaliveFloor),
		Variants: variants, Document: doc, Rows: rows,
		Verdict: Verdict{out, why},
	}, nil
}

// runKeepaliveArm drives one arm's service as a variant called name, reads its counters around
// the run, and returns the sorted end-to-end latencies of its completed requests.
func (e *env) runKeepaliveArm(ctx context.Context, name string, arm KeepaliveArm, seed uint64, per time.Duration) (*Variant, []time.Duration, error) {
	sub := &env{t: arm.Target, o: e.o, dur: per}
	if sub.t.HTTP == nil {
		sub.t.HTTP = e.t.HTTP
	}
	cfg, err := sub.getConfig(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("arm %s: %w", arm.Name, err)
	}
	sub.simulated = cfg.LLM != nil
	before, err := sub.keepaliveCounters(ctx, arm)
	if err != nil {
		return nil, nil, fmt.Errorf("arm %s: %w", arm.Name, err)
	}
	w, err := e.poisson(keepaliveRate, seed, 8)
	if err != nil {
		return nil, nil, err
	}
	s := sub.base()
	s.Coupling = ptr("fanout")
	v, res, err := sub.run(ctx, name, s,
		load{workload: w, shape: fmt.Sprintf("poisson(rate=%.0f)", keepaliveRate), rate: keepaliveRate, duration: per, maxTokens: 4})
	if err != nil {
		return nil, nil, err
	}
	after, err := sub.keepaliveCounters(ctx, arm)
	if err != nil {
		return nil, nil, fmt.Errorf("arm %s: %w", arm.Name, err)
	}
	v.Counters = map[string]float64{}
	for k, a := range after {
		v.Counters[k] = a - before[k]
	}
	return v, latenciesOf(res.Records, e2elOf), nil
}

// keepaliveCounters reads the arm's server counters and the connections its service opened
// through its links (GET /admin/stats: one per reconnect, client side).
func (e *env) keepaliveCounters(ctx context.Context, arm KeepaliveArm) (map[string]float64, error) {
	out := map[string]float64{}
	if arm.Counters != nil {
		for k, v := range arm.Counters() {
			out[k] = v
		}
	}
	var st struct {
		Links []struct {
			Connections float64 `json:"connections"`
		} `json:"links"`
	}
	if err := e.admin(ctx, http.MethodGet, "/admin/stats", nil, &st); err != nil {
		return nil, err
	}
	for _, l := range st.Links {
		out["link_connections"] += l.Connections
	}
	return out, nil
}

// keepaliveRows is one arm's part of the table.
func keepaliveRows(arm KeepaliveArm, v *Variant) []Row {
	c := v.Counters
	claim := ""
	if arm.MaxConnectionAge > 0 {
		claim = "+120 ms with reconnects"
	}
	return []Row{
		{arm.Name + ": E2EL P99", claim, fmtPct(pct(v.Bench, report.MetricE2EL, 99)) + failedNote(v.Bench)},
		{arm.Name + ": E2EL P50", "", fmtPct(pct(v.Bench, report.MetricE2EL, 50))},
		{arm.Name + ": retrieve stage P99", "", fmtPct(stagePct(v.Bench, "retrieve", 99))},
		{arm.Name + ": connections (server / through the link) · GOAWAY max_age", "",
			fmt.Sprintf("%.0f / %.0f · %.0f", c["connections"], c["link_connections"], c["goaway_max_age"])},
		{arm.Name + ": TLS handshake, server side", "", handshakeText(c)},
	}
}

// handshakeText is the mean server-side TLS handshake time of an arm's counters.
func handshakeText(c map[string]float64) string {
	n := c["tls_handshakes"]
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%.1f ms mean over %.0f handshakes", c["tls_handshake_ms"]/n, n)
}

// keepaliveWhy writes the verdict's reasons from the numbers: the deciding pair first, then the
// others for comparison.
func keepaliveWhy(out string, arms []KeepaliveArm, res []keepaliveArmResult, pairs []keepalivePair) string {
	describe := func(p keepalivePair) string {
		m, n := res[p.maxAge], res[p.none]
		text := fmt.Sprintf("over the %v link E2EL P99 %s with %s (%.0f new connections, TLS handshake %s) vs %s without (%.0f), %+.1f ms",
			p.rtt, fmtPct(m.p99), strings.TrimPrefix(arms[p.maxAge].Name, fmt.Sprintf("%v link, ", p.rtt)),
			m.variant.Counters["connections"], handshakeText(m.variant.Counters), fmtPct(n.p99), n.variant.Counters["connections"],
			float64(m.p99.Value-n.p99.Value)/float64(time.Millisecond))
		if m.variant.Bench != nil && n.variant.Bench != nil {
			sm, sn := stagePct(m.variant.Bench, "retrieve", 99), stagePct(n.variant.Bench, "retrieve", 99)
			text += fmt.Sprintf("; its retrieve stage's P99 %s vs %s (%s)", fmtPct(sm), fmtPct(sn), intervalsText(sm, sn))
		}
		return text
	}
	deciding := pairs[len(pairs)-1]
	why := describe(deciding)
	switch {
	case res[deciding.maxAge].variant.Counters["goaway_max_age"] == 0:
		why = "the max-age server sent no GOAWAY, so the mechanism did not engage: " + why
	case out == Underpowered:
		why = "measured " + why
	case out == Reproduced:
		why = "forced reconnects raised the tail: " + why + " (the article: +120 ms)"
	case out == Opposite:
		why = "the arm with reconnects had the lower tail: " + why
	case !res[deciding.maxAge].p99.HasCI || !res[deciding.none].p99.HasCI:
		why = "too few samples for both P99 intervals (run longer, --duration): " + why
	default:
		why = "no difference beyond the intervals although the reconnects happened: " + why
	}
	for _, p := range pairs[:len(pairs)-1] {
		why += "; for comparison, " + describe(p) + " (" + intervalsText(res[p.maxAge].p99, res[p.none].p99) + ")"
	}
	return why
}

// intervalsText says how the intervals of a worse and a better percentile lie.
func intervalsText(worse, better report.PercentileStat) string {
	switch {
	case !worse.HasCI || !better.HasCI:
		return "too few samples for both intervals"
	case worse.Lo > better.Hi:
		return "intervals apart"
	case worse.Hi < better.Lo:
		return "intervals apart, the other way"
	}
	return "intervals overlap"
}

func pairRTTs(pairs []keepalivePair) string {
	s := make([]string, len(pairs))
	for i, p := range pairs {
		s[i] = p.rtt.String()
	}
	return strings.Join(s, " and ") + " round trip"
}

// stagePct is percentile p of a server stage's Server-Timing durations (zero when absent).
func stagePct(b *report.Bench, stage string, p float64) report.PercentileStat {
	for _, st := range b.Stages {
		if st.Stage == stage {
			for _, s := range st.Percentiles {
				if s.P == p {
					return s
				}
			}
		}
	}
	return report.PercentileStat{}
}
