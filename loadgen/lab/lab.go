// Package lab runs ragtail's pitfall experiments (PITFALLS.md): each one switches a mechanism off
// and on through a service's admin API (PUT /admin/config), drives the service with the load
// generator over HTTP, and reports the figures the article claims beside what was measured, with
// 95% intervals and a verdict computed from the measurement. It speaks HTTP only, so it works
// against the in-process service `ragtail lab` starts as well as against a deployed stack.
//
// The claims are reported, never tuned toward: a verdict says whether the direction and size
// of the effect were reproduced, and why not when they were not.
package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// Schema is the value of the "schema" key of a lab result.
const Schema = "ragtail.lab/v1"

// Verdict outcomes.
const (
	Reproduced    = "reproduced"
	NotReproduced = "not reproduced"
	Opposite      = "opposite"
	NotRun        = "not run"
	// Underpowered is the outcome of a run with fewer samples than its rule's power calculation
	// asks for: no verdict either way.
	Underpowered = "underpowered"
)

// quickDivisor shortens each experiment's default duration under Options.Quick.
const quickDivisor = 4

// ErrUnknownExperiment is returned by Run for a name Names does not list.
var ErrUnknownExperiment = errors.New("unknown experiment")

// Target is the service an experiment drives.
type Target struct {
	URL        string       // API base URL, e.g. http://127.0.0.1:8080
	AdminURL   string       // admin base URL, e.g. http://127.0.0.1:9464
	AdminToken string       // sent as Authorization: Bearer on PUT /admin/config, if set
	HTTP       *http.Client // for admin calls; nil means a client with a 30 s timeout
}

// Options tune a run of experiments.
type Options struct {
	// Duration is the total load time of one experiment, split among its variants; 0 means the
	// experiment's default (28 to 165 s). An experiment whose rule sizes its runs by a power
	// calculation runs what the rule needs, within bounds its rule derives from this duration, and
	// reports underpowered when the runs hold fewer samples.
	Duration time.Duration
	// Quick, when Duration is 0, runs each experiment for a quarter of its default: a first look,
	// with wider intervals and more verdicts left undecided.
	Quick bool
	// Seed seeds every arrival process and prompt source.
	Seed uint64
	// Log, if set, receives one line per variant as it starts and ends.
	Log io.Writer
	// Keepalive are the arms of the keepalive experiment: services retrieving over gRPC (TLS,
	// through a link) from Qdrant-protocol servers with and without a MaxConnectionAge, in pairs
	// of the same LinkRTT. Without such a pair the experiment reports that it did not run.
	Keepalive []KeepaliveArm
	// Llama, if set, is a service whose simulated engine runs the llama3-8b-a100 profile with
	// the article's engine settings (--max-num-seqs 256 --max-model-len 4096): the knee
	// experiment sweeps it as a second arm. Without it that arm reports that it did not run.
	Llama *Target
}

// KeepaliveArm is one service of the keepalive experiment.
type KeepaliveArm struct {
	Name             string        // e.g. "20ms link, max-age 2s"
	MaxConnectionAge time.Duration // the server's setting; 0 for none
	LinkRTT          time.Duration // the round trip the link between service and server adds
	Target           Target
	// Counters, if set, reads counters the service does not expose over HTTP (the Qdrant
	// server's accepted connections and GOAWAYs); the experiment reports their deltas.
	Counters func() map[string]float64
}

// Result is one experiment's outcome: the ragtail.lab/v1 document.
type Result struct {
	Experiment string         `json:"experiment"`
	Title      string         `json:"title"`
	Setup      string         `json:"setup"`    // what the experiment set, in words
	Variants   []Variant      `json:"variants"` // each a bench result with its settings
	Document   map[string]any `json:"document"` // the figures PITFALLS.md quotes
	Rows       []Row          `json:"rows"`     // the table: claim beside measurement
	Rule       Rule           `json:"rule"`     // the verdict rule, fixed before the run
	Verdict    Verdict        `json:"verdict"`
}

// Rule is an experiment's pre-registered verdict rule: fixed in code (and quoted in
// PITFALLS.md) before any load runs, so that no threshold is chosen after the data.
type Rule struct {
	Compared  string `json:"compared"`  // the figures set against each other
	Interval  string `json:"interval"`  // the interval each figure carries
	Threshold string `json:"threshold"` // what counts as reproduced
}

// String writes the rule as one sentence.
func (r Rule) String() string {
	return fmt.Sprintf("compared: %s; interval: %s; reproduced when %s", r.Compared, r.Interval, r.Threshold)
}

// Variant is one arm of an experiment.
type Variant struct {
	Name     string             `json:"name"`
	Settings *Settings          `json:"settings"`           // the PUT /admin/config body applied
	Bench    *report.Bench      `json:"bench,omitempty"`    // the ragtail.bench/v1 summary
	Counters map[string]float64 `json:"counters,omitempty"` // server counters read from /admin/stats (deltas)
}

// Row is one line of an experiment's table.
type Row struct {
	Metric   string `json:"metric"`
	Claim    string `json:"claim"`    // the article's figure (corrected where its math is wrong)
	Measured string `json:"measured"` // ours, with a 95% interval where it has one
}

// Verdict is what the measurement says about the claim.
type Verdict struct {
	Outcome string `json:"outcome"` // Reproduced, NotReproduced, Opposite, NotRun or Underpowered
	Why     string `json:"why"`
}

// MarshalJSON writes the result with its schema key.
func (r *Result) MarshalJSON() ([]byte, error) {
	type plain Result
	return json.Marshal(struct {
		Schema string `json:"schema"`
		*plain
	}{Schema, (*plain)(r)})
}

type experiment struct {
	name, title string
	def         time.Duration
	run         func(ctx context.Context, e *env) (*Result, error)
	rule        Rule
	claim       string // the article's headline figure, for the summary table
}

var experiments = []experiment{
	{"p99-model", "P99 distorted by the wrong distribution (PITFALLS.md §2)", 42 * time.Second, runP99Model, p99ModelRule,
		"exponential/normal models under-estimate a heavy-tailed P99 (-40.1%, -51.4%)"},
	{"coupling", "sync vs fanout vs async coupling of retrieval and generation (§3)", 28 * time.Second, runCoupling, couplingRule,
		"sync mean 890 ms vs async 320 ms"},
	{"cache-penetration", "cache penetration and hot/cold mixes (§4)", 56 * time.Second, runCachePenetration, Rule{
		Compared:  "end-to-end P99.7 of hot+1% cold keys against hot keys only (a 1% mix puts the P99 on the boundary between hot and cold requests, the P99.7 well into the cold ones); invalid keys reaching the store with the Bloom guard off and on",
		Interval:  "order-statistic 95% interval of each P99.7, each arm holding at least n requests, n computed before the run as the least from which, if every miss is slower than every hit, 1% cold keys put the two intervals apart with at least 90% probability (the slow count S ~ Binomial(n, 1%) reaches n - l + 1, l the interval's lower rank), raised until the first m keys of the arm's seeded key schedule hold at least m - l + 3 cold keys (l the lower rank at m) for every m from n to 1.25 n, the arms running n x 1.1 / the calibrated rate (at least their share of the load time, at most 4 times it); Wilson 95% interval of the share of invalid keys passing the guard",
		Threshold: "the hot+cold interval lies entirely above the hot-only one, with the guard on the share of invalid keys reaching the store is consistent with the filter's 1% false-positive rate (its Wilson interval's lower end is at most 1%), and with it off some reach it; with fewer than n requests in either compared arm the outcome is underpowered",
	}, "1% cold keys: P99 18 -> 142 ms; Bloom guard stops invalid keys"},
	{"pool-saturation", "worker-pool configuration under bursts (§5)", 68 * time.Second, runPoolSaturation, Rule{
		Compared:  "share of all offered requests meeting an SLO of 5 x a calibration run's median end-to-end latency (shed and failed ones count as misses), the article's advised pool (core = 2 x CPUs workers, a bounded queue of as many, rejecting) against its risky one (one worker, unbounded queue), same bursty load",
		Interval:  "Wilson 95% interval of each share; each arm offers about 500 requests (20 s at 25/s after an 8 s calibration), above the 368 an order-statistic 95% interval of the P99 over all offered requests needs",
		Threshold: "the advised pool's interval lies entirely above the risky pool's",
	}, "risky pool (core 1, unbounded) raises P99/P99.9 under bursts"},
	{"latency-injection", "relative latency injection on replayed sessions (§6)", 64 * time.Second, runLatencyInjection, Rule{
		Compared:  "session interruption rate with the article's relative delay on the latency-sensitive stage against without it, at a step budget of the P98.2 of the steps of a calibration run of baseline sessions made before either arm (a quarter of the load time; 98.2% is the article's baseline first-screen completion), the latency-sensitive stage being the fault-able stage with the largest mean Server-Timing per calibration step; in both arms a step that fails or runs over the budget ends its session (the generator sends none of its later steps)",
		Interval:  "Wilson 95% interval of each rate, each arm holding at least n sessions, n computed from the calibration as the least from which, at the calibration's own rates at that budget, the article's rise in interruption (11.3 points) and fall in first-screen completion (14.5 points) each put the two arms' Wilson intervals apart with at least 90% probability (summed exactly over both binomials), the arms running n x 1.1 / 5 sessions/s (at most 2.5 times half the rest of the load time)",
		Threshold: "the faulted arm's interval lies entirely above the baseline's; with fewer than n sessions in either arm, or no n that separates the effects below 100%, the outcome is underpowered",
	}, "interruption 1.1% -> 12.4%, first screen 98.2% -> 83.7%"},
	{"knee", "KV-cache allocation and the QPS-latency knee (§7)", kneeDefault, runKnee, kneeRule,
		"contiguous KV wastes ~25%; knee 184 QPS (vLLM) vs 92 (Triton)"},
	{"keepalive", "gRPC MaxConnectionAge reconnects over TLS through a link, and the P99 (§7)", 52 * time.Second, runKeepalive, keepaliveRule,
		"MaxConnectionAge reconnects: P99 +120 ms"},
	{"priority", "stream priority under a low-priority flood (§7)", 36 * time.Second, runPriority, priorityRule,
		"priority scheduling keeps high-priority TTFT low under a flood"},
	{"agent-amplification", "agent tail amplification: a slow step in N (not in the article)", 134 * time.Second, runAgentAmplification, agentRule,
		"not in the article: a 5-step agent meets a step beyond its P99 about 1 - 0.99^5 = 4.9% of the time"},
}

// RuleOf returns the pre-registered verdict rule of the experiment called name.
func RuleOf(name string) (Rule, bool) {
	for _, e := range experiments {
		if e.name == name {
			return e.rule, true
		}
	}
	return Rule{}, false
}

// Names lists the experiments in the order `all` runs them.
func Names() []string {
	out := make([]string, len(experiments))
	for i, e := range experiments {
		out[i] = e.name
	}
	return out
}

// DefaultDuration returns the default load time of the experiment called name.
func DefaultDuration(name string) time.Duration {
	for _, e := range experiments {
		if e.name == name {
			return e.def
		}
	}
	return 0
}

// LoadDuration returns the load time Run gives the experiment called name under o.
func LoadDuration(name string, o Options) time.Duration {
	switch {
	case o.Duration > 0:
		return o.Duration
	case o.Quick:
		return DefaultDuration(name) / quickDivisor
	default:
		return DefaultDuration(name)
	}
}

// Run runs the experiment called name against t. It restores the service's configuration as it
// found it before returning.
func Run(ctx context.Context, name string, t Target, o Options) (*Result, error) {
	i := slices.IndexFunc(experiments, func(e experiment) bool { return e.name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w %q: want one of %s", ErrUnknownExperiment, name, strings.Join(Names(), ", "))
	}
	ex := experiments[i]
	e := &env{t: t, o: o, dur: LoadDuration(name, o)}
	if e.t.HTTP == nil {
		e.t.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	orig, err := e.getConfig(ctx)
	if err != nil {
		return nil, err
	}
	e.simulated = orig.LLM != nil
	defer func() {
		restore := orig
		if restore.Faults == nil {
			restore.Faults = noFaults()
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := e.put(rctx, restore); err != nil {
			e.logf("restoring the configuration failed: %v", err)
		}
	}()
	res, err := ex.run(ctx, e)
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	res.Experiment, res.Title, res.Rule = ex.name, ex.title, ex.rule
	return res, nil
}

// env is the state an experiment works with.
type env struct {
	t         Target
	o         Options
	dur       time.Duration
	simulated bool       // the service generates with its simulated engine (its config has "llm")
	logMu     sync.Mutex // runs of one experiment may log at once
}

func (e *env) logf(format string, args ...any) {
	if e.o.Log != nil {
		e.logMu.Lock()
		defer e.logMu.Unlock()
		fmt.Fprintf(e.o.Log, format+"\n", args...)
	}
}

func (e *env) admin(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s body: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(e.t.AdminURL, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.t.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+e.t.AdminToken)
	}
	resp, err := e.t.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return nil
}

// serverStats is the subset of GET /admin/stats the experiments read.
type serverStats struct {
	Docs struct {
		StoreLookups        float64 `json:"StoreLookups"`
		StoreMissingLookups float64 `json:"StoreMissingLookups"`
		Blocked             float64 `json:"Blocked"`
		Hits                float64 `json:"Hits"`
		Misses              float64 `json:"Misses"`
		Backend             struct {
			Kind        string  `json:"Kind"`
			Concurrency float64 `json:"Concurrency"`
			Waited      float64 `json:"Waited"`
			WaitSeconds float64 `json:"WaitSeconds"`
		} `json:"Backend"`
	} `json:"docs"`
	Admission struct {
		Rejected float64 `json:"Rejected"`
		TimedOut float64 `json:"TimedOut"`
		Admitted float64 `json:"Admitted"`
	} `json:"admission"`
	Faults map[string]struct {
		Evaluated float64 `json:"evaluated"`
		Fired     float64 `json:"fired"`
	} `json:"faults"`
	Engine *struct {
		Running              float64 `json:"Running"`
		MaxRunning           float64 `json:"MaxRunning"`
		BlocksUsed           float64 `json:"BlocksUsed"`
		BlocksTotal          float64 `json:"BlocksTotal"`
		BlocksReservedUnused float64 `json:"BlocksReservedUnused"`
		KVTokensRequested    float64 `json:"KVTokensRequested"`
		KVTokensAllocated    float64 `json:"KVTokensAllocated"`
		Preemptions          float64 `json:"Preemptions"`
		BatchSize            float64 `json:"BatchSize"`
	} `json:"engine"`
}

func (e *env) stats(ctx context.Context) (serverStats, error) {
	var s serverStats
	err := e.admin(ctx, http.MethodGet, "/admin/stats", nil, &s)
	return s, err
}

// models returns the models the API serves.
func (e *env) model(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(e.t.URL, "/")+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	resp, err := e.t.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("list models: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Data) == 0 {
		return "", fmt.Errorf("list models: %s: no model in the answer (%w)", resp.Status, err)
	}
	return body.Data[0].ID, nil
}

// load describes one run of the generator.
type load struct {
	workload    loadgen.Workload
	shape       string
	rate        float64
	concurrency int
	closed      bool
	duration    time.Duration
	maxTokens   int
	body        map[string]any // extra chat body fields (the "rag" object)
	report      report.Options
	// unary asks for non-streamed answers (E2EL only: no token timings), which cost the client
	// and the server less per request.
	unary bool
	// outputLimit, if set, is the output tokens one response may carry (an agent's usage sums
	// its model calls); 0: the client's default for maxTokens.
	outputLimit int
	// stepLimit ends a replayed session whose step runs over it (its later steps are not
	// sent) and counts the session as interrupted; 0: only a failed step ends a session.
	stepLimit time.Duration
}

// run applies settings, runs l and summarises it.
func (e *env) run(ctx context.Context, name string, settings *Settings, l load) (*Variant, *loadgen.Result, error) {
	if settings != nil {
		if err := e.put(ctx, settings); err != nil {
			return nil, nil, fmt.Errorf("variant %s: %w", name, err)
		}
	}
	model, err := e.model(ctx)
	if err != nil {
		return nil, nil, err
	}
	opts := []client.Option{client.WithModel(model), client.WithStream(!l.unary), client.WithTimeout(30 * time.Second)}
	if l.maxTokens > 0 {
		opts = append(opts, client.WithMaxTokens(l.maxTokens))
	}
	if l.body != nil {
		opts = append(opts, client.WithBody(l.body))
	}
	if l.outputLimit > 0 {
		opts = append(opts, client.WithOutputTokenLimit(l.outputLimit))
	}
	c, err := client.New(strings.TrimRight(e.t.URL, "/")+"/v1/chat/completions", opts...)
	if err != nil {
		return nil, nil, err
	}
	e.logf("  %-28s %s for %v", name, l.shape, l.duration.Round(time.Second))
	rate := l.rate
	if l.closed {
		rate = math.Inf(1) // a closed loop has no arrival rate: each user sends when its last request ended
	}
	res, err := loadgen.Run(ctx, loadgen.Config{
		Workload: l.workload, Client: c, Concurrency: l.concurrency, ClosedLoop: l.closed,
		Duration: l.duration, DrainTimeout: 30 * time.Second, SessionStepLimit: l.stepLimit,
		Info: loadgen.NewRunInfo(e.t.URL, model, l.shape, rate, e.o.Seed).WithLimits(l.concurrency, 0, l.maxTokens),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("variant %s: %w", name, err)
	}
	ro := l.report
	ro.SessionStepLimit = l.stepLimit
	b := report.Summarize(res, ro)
	e.logf("  %-28s %d completed, %d failed, P99 E2EL %v", name, b.Completed, b.Failed, pct(b, report.MetricE2EL, 99).Value.Round(time.Millisecond))
	return &Variant{Name: name, Settings: settings, Bench: b}, res, nil
}

// poisson is an open-loop Poisson workload of chat prompts.
func (e *env) poisson(rate float64, seed uint64, words int) (loadgen.Workload, error) {
	p, err := shape.Poisson(rate, e.o.Seed+seed)
	if err != nil {
		return nil, err
	}
	src, err := shape.Synthetic([]shape.Length{{Min: words, Max: words * 2}}, e.o.Seed+seed)
	if err != nil {
		return nil, err
	}
	return shape.Open(p, src), nil
}

// pct returns percentile p of metric m of b (zero when absent).
func pct(b *report.Bench, m string, p float64) report.PercentileStat {
	ms, ok := b.Metric(m)
	if !ok {
		return report.PercentileStat{}
	}
	for _, s := range ms.Percentiles {
		if s.P == p {
			return s
		}
	}
	return report.PercentileStat{}
}

func mean(b *report.Bench, m string) time.Duration {
	ms, _ := b.Metric(m)
	return ms.Mean
}

// fmtPct formats a percentile with its interval.
func fmtPct(s report.PercentileStat) string {
	if !s.HasCI {
		return fmt.Sprintf("%s ms (too few samples for a 95%% CI)", msStr(s.Value))
	}
	return fmt.Sprintf("%s ms [%s, %s]", msStr(s.Value), msStr(s.Lo), msStr(s.Hi))
}

func msStr(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// compare decides the direction of a "worse must exceed better" effect from two percentile
// intervals: reproduced when the intervals do not overlap in the claimed direction, opposite when
// they do not overlap the other way, not reproduced when they overlap or an interval is missing
// (too few samples to tell).
func compare(worse, better report.PercentileStat) string {
	switch {
	case !worse.HasCI || !better.HasCI:
		return NotReproduced
	case worse.Lo > better.Hi:
		return Reproduced
	case worse.Hi < better.Lo:
		return Opposite
	default:
		return NotReproduced
	}
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}

// binomialCI is the Wilson 95% interval of k successes in n trials.
func binomialCI(k, n float64) (p, lo, hi float64) {
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	const z = 1.959964
	p = k / n
	den := 1 + z*z/n
	c := (p + z*z/(2*n)) / den
	h := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / den
	return p, math.Max(0, c-h), math.Min(1, c+h)
}

func fmtRate(k, n float64) string {
	p, lo, hi := binomialCI(k, n)
	if math.IsNaN(p) {
		return "n/a (no samples)"
	}
	return fmt.Sprintf("%.1f%% [%.1f, %.1f] (%d/%d)", 100*p, 100*lo, 100*hi, int(k), int(n))
}

// WriteSummary writes the closing table of a run of several experiments: each one's article
// claim beside its computed verdict and the figures it rests on.
func WriteSummary(w io.Writer, results []*Result) error {
	var b strings.Builder
	b.WriteString("== summary\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPERIMENT\tVERDICT\tARTICLE CLAIM\tMEASURED")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Experiment, strings.ToUpper(r.Verdict.Outcome), ClaimOf(r.Experiment), r.Verdict.Why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ClaimOf returns the article's headline claim for the experiment called name.
func ClaimOf(name string) string {
	for _, e := range experiments {
		if e.name == name {
			return e.claim
		}
	}
	return ""
}

// WriteText writes r as a terminal table.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s — %s\n", r.Experiment, r.Title)
	if r.Setup != "" {
		fmt.Fprintf(&b, "setup: %s\n", r.Setup)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tARTICLE CLAIM\tMEASURED (95% CI)")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.Metric, row.Claim, row.Measured)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Rule != (Rule{}) {
		fmt.Fprintf(&b, "rule: %s\n", r.Rule)
	}
	fmt.Fprintf(&b, "verdict: %s — %s\n\n", strings.ToUpper(r.Verdict.Outcome), r.Verdict.Why)
	_, err := io.WriteString(w, b.String())
	return err
}
