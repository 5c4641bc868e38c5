package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/dataset"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// DemoCouplings are the coupling modes the demo drives, in the order it prints them.
var DemoCouplings = []string{"sync", "fanout", "async"}

// DemoPercentiles are the percentiles the demo prints.
var DemoPercentiles = []float64{50, 90, 95, 99}

// demoGapPercentiles are the percentiles the demo's conclusion compares sync and async at.
var demoGapPercentiles = []float64{50, 95}

// DemoConfig is one run of the demo: open-loop Poisson streams, one per coupling mode, at the
// same time against one service.
type DemoConfig struct {
	URL       string   // the chat completions URL, e.g. http://127.0.0.1:8080/v1/chat/completions
	Model     string   // the model sent
	Questions []string // the prompts, drawn at random
	// Couplings are the modes driven, in the order printed; nil drives DemoCouplings.
	Couplings []string
	Rate      float64 // requests per second over all modes, an equal share per mode
	Duration  time.Duration
	MaxTokens int
	Seed      uint64
	// Progress, if set, receives a line every 5 s with the requests sent and done.
	Progress io.Writer
}

// DemoMode is one coupling mode's run.
type DemoMode struct {
	Coupling string
	Bench    *report.Bench   // TTFT and E2EL at DemoPercentiles
	Run      *loadgen.Result // the run's records, for callers that pool runs
}

// DemoResult is what a demo run measured.
type DemoResult struct {
	Modes []DemoMode // in DemoConfig.Couplings order
}

// couplings are the modes c drives.
func (c DemoConfig) couplings() []string {
	if len(c.Couplings) == 0 {
		return DemoCouplings
	}
	return c.Couplings
}

// Validate says what is wrong with c's load (modes, rate, duration, max_tokens), or nil.
func (c DemoConfig) Validate() error {
	for i, mode := range c.Couplings {
		if !slices.Contains(DemoCouplings, mode) || slices.Contains(c.Couplings[:i], mode) {
			return fmt.Errorf("coupling %.32q: want each of %s at most once", mode, strings.Join(DemoCouplings, ", "))
		}
	}
	switch {
	case !(c.Rate > 0 && c.Rate <= 10000):
		return fmt.Errorf("--request-rate must be between 0 and 10000, got %v", c.Rate)
	case c.Duration <= 0:
		return errors.New("--duration must be positive")
	case c.MaxTokens < 1:
		return errors.New("--max-tokens must be positive")
	}
	return nil
}

// RunDemo runs one open-loop Poisson stream per coupling mode, all at once: n Poisson streams
// of an n-th of the rate add up to one of the full rate, and every mode meets the same engine
// load at the same time. Each request asks for its mode in the "rag" body object.
func RunDemo(ctx context.Context, c DemoConfig) (*DemoResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.URL == "" || c.Model == "" || len(c.Questions) == 0 {
		return nil, errors.New("demo: a URL, a model and questions are needed")
	}
	prompts := make([]dataset.Prompt, len(c.Questions))
	for i, q := range c.Questions {
		prompts[i] = dataset.Prompt{Messages: []loadgen.Message{{Role: "user", Content: q}}}
	}
	modes := c.couplings()
	n := len(modes)
	p := &demoProgress{w: c.Progress, latest: make([]loadgen.Progress, n)}
	res := &DemoResult{Modes: make([]DemoMode, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, mode := range modes {
		cfg, cl, err := c.modeRun(i, mode, prompts, p)
		if err != nil {
			return nil, err
		}
		defer cl.CloseIdleConnections()
		wg.Go(func() {
			run, err := loadgen.Run(ctx, cfg)
			if err != nil {
				errs[i] = fmt.Errorf("coupling %s: %w", mode, err)
				return
			}
			res.Modes[i] = DemoMode{Coupling: mode, Run: run, Bench: report.Summarize(run, report.Options{
				Metrics: []string{report.MetricTTFT, report.MetricE2EL}, Percentiles: DemoPercentiles})}
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// modeRun is the generator configuration of mode's stream.
func (c DemoConfig) modeRun(i int, mode string, prompts []dataset.Prompt, p *demoProgress) (loadgen.Config, *client.Client, error) {
	seed := c.Seed + uint64(i)*0x9e37
	rate := c.Rate / float64(len(c.couplings()))
	cl, err := client.New(c.URL, client.WithModel(c.Model), client.WithMaxTokens(c.MaxTokens),
		client.WithBody(map[string]any{"rag": map[string]any{"coupling": mode}}))
	if err != nil {
		return loadgen.Config{}, nil, err
	}
	arrivals, err := shape.Poisson(rate, seed)
	if err != nil {
		return loadgen.Config{}, nil, err
	}
	src, err := shape.Prompts(prompts, seed)
	if err != nil {
		return loadgen.Config{}, nil, err
	}
	return loadgen.Config{
		Workload: shape.Open(arrivals, src), Client: cl, Duration: c.Duration,
		ProgressInterval: 5 * time.Second,
		Progress:         func(pr loadgen.Progress) { p.report(i, pr) },
		Info:             loadgen.NewRunInfo(c.URL, c.Model, arrivals.String()+", coupling "+mode, rate, seed).WithLimits(0, 0, c.MaxTokens),
	}, cl, nil
}

// demoProgress sums the streams' progress into one line, written when the first stream reports.
type demoProgress struct {
	w      io.Writer
	mu     sync.Mutex
	latest []loadgen.Progress
}

func (p *demoProgress) report(i int, pr loadgen.Progress) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latest[i] = pr
	if i != 0 || pr.Final {
		return
	}
	var sent, done int
	for _, q := range p.latest {
		sent, done = sent+q.Sent, done+q.Done
	}
	fmt.Fprintf(p.w, "  %3.0fs: %d sent, %d done\n", pr.Elapsed.Seconds(), sent, done)
}

// mode returns the run of coupling, or nil.
func (r *DemoResult) mode(coupling string) *DemoMode {
	for i := range r.Modes {
		if r.Modes[i].Coupling == coupling && r.Modes[i].Bench != nil {
			return &r.Modes[i]
		}
	}
	return nil
}

// DemoGap is the sync-async difference of one metric at one percentile.
type DemoGap struct {
	Metric     string
	P          float64
	Sync       report.PercentileStat
	Async      report.PercentileStat
	Gap        time.Duration // sync minus async
	GapLo      time.Duration // the gap's interval: sync's interval minus async's, end to end
	GapHi      time.Duration
	HasCI      bool // both percentiles have intervals
	Overlap    bool // with HasCI: the two intervals overlap
	SyncHigher bool // with HasCI and !Overlap: sync's interval lies above async's
}

// Gaps computes the sync-async gaps of TTFT and E2EL at P50 and P95. The gap's interval is the
// difference of the two 95% intervals taken end to end ([sync lo - async hi, sync hi - async
// lo]): whenever both intervals cover their percentiles (for two independent runs, with
// probability at least 0.95 x 0.95, about 90%), it covers the gap. It excludes zero exactly when
// the two intervals do not overlap.
func (r *DemoResult) Gaps() []DemoGap {
	sync, async := r.mode("sync"), r.mode("async")
	if sync == nil || async == nil {
		return nil
	}
	var out []DemoGap
	for _, m := range []string{report.MetricTTFT, report.MetricE2EL} {
		for _, p := range demoGapPercentiles {
			s, a := pct(sync.Bench, m, p), pct(async.Bench, m, p)
			g := DemoGap{Metric: m, P: p, Sync: s, Async: a, Gap: s.Value - a.Value, HasCI: s.HasCI && a.HasCI}
			if g.HasCI {
				g.GapLo, g.GapHi = s.Lo-a.Hi, s.Hi-a.Lo
				g.Overlap = s.Lo <= a.Hi && a.Lo <= s.Hi
				g.SyncHigher = !g.Overlap && s.Lo > a.Hi
			}
			out = append(out, g)
		}
	}
	return out
}

// Conclusion writes what the gaps say, each sentence computed from the numbers.
func (r *DemoResult) Conclusion() []string {
	gaps := r.Gaps()
	if len(gaps) == 0 && len(r.Modes) == 1 {
		return []string{fmt.Sprintf("One coupling mode driven (%s): nothing to compare it with; run without --coupling to compare sync, fanout and async.", r.Modes[0].Coupling)}
	}
	if len(gaps) == 0 {
		return []string{"No conclusion: the sync or the async run has no results."}
	}
	var lines []string
	for _, g := range gaps {
		name := map[string]string{report.MetricTTFT: "TTFT", report.MetricE2EL: "E2E"}[g.Metric]
		head := fmt.Sprintf("%s P%g: sync %s, async %s", name, g.P, demoMS(g.Sync), demoMS(g.Async))
		switch {
		case !g.HasCI:
			lines = append(lines, head+fmt.Sprintf(": gap %+.0f ms, but too few samples for an interval on both sides; run longer (--duration)", msf(g.Gap)))
		case g.Overlap:
			lines = append(lines, head+fmt.Sprintf(": gap %+.0f ms [%+.0f, %+.0f]; the intervals overlap, so this run cannot tell the two apart",
				msf(g.Gap), msf(g.GapLo), msf(g.GapHi)))
		default:
			who := "sync is slower"
			if !g.SyncHigher {
				who = "async is slower"
			}
			lines = append(lines, head+fmt.Sprintf(": gap %+.0f ms [%+.0f, %+.0f]; the intervals do not overlap: %s, beyond sampling error",
				msf(g.Gap), msf(g.GapLo), msf(g.GapHi), who))
		}
	}
	return lines
}

// WriteDemo writes the demo's tables, its failures and its conclusion.
func WriteDemo(w io.Writer, r *DemoResult) error {
	var b strings.Builder
	for _, m := range []struct{ metric, title string }{
		{report.MetricTTFT, "TTFT"},
		{report.MetricE2EL, "E2E latency"},
	} {
		fmt.Fprintf(&b, "%s, ms from each request's intended send time [95%% interval]\n", m.title)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head := "mode\tn"
		for _, p := range DemoPercentiles {
			head += fmt.Sprintf("\tp%g", p)
		}
		fmt.Fprintln(tw, head+"\t")
		for _, mode := range r.Modes {
			if mode.Bench == nil {
				continue
			}
			s, _ := mode.Bench.Metric(m.metric)
			row := fmt.Sprintf("%s\t%d", mode.Coupling, s.Count)
			for _, p := range DemoPercentiles {
				row += "\t" + demoCell(s, p)
			}
			fmt.Fprintln(tw, row+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	b.WriteString("A percentile is shown only when there are enough samples for its 95% interval (about 80\n" +
		"for p95, 300 for p99); run longer (--duration) or faster (--request-rate) for the tail.\n")
	for _, mode := range r.Modes {
		if mode.Bench == nil || mode.Bench.Failed == 0 {
			continue
		}
		var parts []string
		for _, e := range mode.Bench.Errors {
			parts = append(parts, fmt.Sprintf("%s x%d (%q)", e.Kind, e.Count, e.Example))
		}
		fmt.Fprintf(&b, "%s: %d failed: %s\n", mode.Coupling, mode.Bench.Failed, strings.Join(parts, ", "))
	}
	b.WriteString("\nConclusion (sync minus async; a gap's interval is the two 95% intervals' difference):\n")
	for _, l := range r.Conclusion() {
		b.WriteString("  " + l + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// demoCell formats the p-th percentile of s with its interval, or "-" when the samples do not
// support an interval (too few lie beyond the percentile to say anything about the tail).
func demoCell(s report.MetricStats, p float64) string {
	i := slices.IndexFunc(s.Percentiles, func(ps report.PercentileStat) bool { return ps.P == p })
	if i < 0 || !s.Percentiles[i].HasCI {
		return "-"
	}
	ps := s.Percentiles[i]
	return fmt.Sprintf("%.1f [%.1f, %.1f]", msf(ps.Value), msf(ps.Lo), msf(ps.Hi))
}

// demoMS formats a percentile in whole milliseconds with its interval when it has one.
func demoMS(s report.PercentileStat) string {
	if !s.HasCI {
		return fmt.Sprintf("%.0f ms", msf(s.Value))
	}
	return fmt.Sprintf("%.0f ms [%.0f, %.0f]", msf(s.Value), msf(s.Lo), msf(s.Hi))
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
