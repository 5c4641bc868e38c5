package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/lab"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/rag/service"
	"github.com/ragtail/ragtail/telemetry/profile"
)

// The observer effect's run: pairs of phases, each phase one arm serving the demo's load.
var (
	observerPairs = flag.Int("observer.pairs", 4, "BenchmarkObserverEffect: pairs of phases (telemetry on, off), in ABBA order")
	observerPhase = flag.Duration("observer.phase", 20*time.Second, "BenchmarkObserverEffect: how long each phase sends")
	observerRate  = flag.Float64("observer.rate", 4.5, "BenchmarkObserverEffect: requests per second over the three coupling modes (the demo's default)")
)

// BenchmarkObserverEffect measures what telemetry does to the latency users see, in the demo's
// default world (shards on a Qdrant-protocol server behind a link, heavy-tailed search latency,
// the simulated engine): the demo's load (Poisson, a third of the rate per coupling mode,
// max_tokens 24) against the service with telemetry fully on (the OTel SDK's spans into the ring
// and metrics, the stages' pprof labels, the continuous profiler with its wall sampler) and fully
// off (no-op providers, no labels, no profiler), in alternating phases of one run (ABBA, after an
// unmeasured warm-up phase of each), each phase on a service built for it, the two phases of a
// pair sending the same schedule. It pools each arm's
// requests and reports TTFT and E2E at P50 and P95 for each arm with their 95% intervals, the
// difference (on minus off), and whether the two intervals overlap. It is a figure, not a gate:
// b.N is ignored (run it with -benchtime 1x).
func BenchmarkObserverEffect(b *testing.B) {
	if *observerPairs < 1 || *observerPhase <= 0 || !(*observerRate > 0) {
		b.Fatalf("-observer.pairs, -observer.phase and -observer.rate must be positive")
	}
	ctx := context.Background()
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var so serviceOptions
	so.register(fs)
	if err := fs.Parse(nil); err != nil {
		b.Fatal(err)
	}
	cfg := so.config(false)
	world, err := startDemoWorld(ctx, &cfg, &so)
	if err != nil {
		b.Fatal(err)
	}
	defer world.Close()
	b.Logf("world: %s; load: Poisson %.1f req/s over sync, fanout and async, max_tokens 24; %d pairs of %v phases",
		world, *observerRate, *observerPairs, *observerPhase)

	arms := []observerArm{{name: "on", telemetry: true}, {name: "off"}}
	for i := range arms {
		if _, err := arms[i].phase(ctx, cfg, 5*time.Second, *observerRate, 0); err != nil { // warm-up, not counted
			b.Fatal(err)
		}
	}
	for pair := range *observerPairs {
		order := []int{0, 1}
		if pair%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			// The two phases of a pair send the same schedule (arrivals and prompts from one
			// seed), so that the arms differ by telemetry, not by their draws.
			runs, err := arms[i].phase(ctx, cfg, *observerPhase, *observerRate, uint64(1+pair))
			if err != nil {
				b.Fatal(err)
			}
			arms[i].records = append(arms[i].records, runs...)
		}
	}
	on, off := arms[0].summary(), arms[1].summary()
	b.Logf("%-9s %28s %28s %10s  %s", "", "telemetry on (ms)", "telemetry off (ms)", "on - off", "intervals")
	for _, m := range []struct{ key, name string }{{report.MetricTTFT, "TTFT"}, {report.MetricE2EL, "E2E"}} {
		for _, p := range []float64{50, 95} {
			a, o := percentile(on, m.key, p), percentile(off, m.key, p)
			overlap := "overlap"
			if a.HasCI && o.HasCI && (a.Lo > o.Hi || o.Lo > a.Hi) {
				overlap = "apart"
			} else if !a.HasCI || !o.HasCI {
				overlap = "too few samples"
			}
			diff := ms(a.Value - o.Value)
			b.Logf("%-9s %28s %28s %+10.1f  %s", fmt.Sprintf("%s P%g", m.name, p), interval(a), interval(o), diff, overlap)
			key := fmt.Sprintf("%s_p%g", map[string]string{report.MetricTTFT: "ttft", report.MetricE2EL: "e2e"}[m.key], p)
			b.ReportMetric(ms(a.Value), "on_"+key+"_ms")
			b.ReportMetric(ms(o.Value), "off_"+key+"_ms")
			b.ReportMetric(diff, "diff_"+key+"_ms")
		}
	}
	b.ReportMetric(float64(on.Completed), "on_requests")
	b.ReportMetric(float64(off.Completed), "off_requests")
	// The default world sheds a burst now and then (docs/shedding.md): a request in a few
	// hundred may get a 503 in either arm, and the figures above leave it out in both. More than
	// 1% in an arm means the world was not healthy and the comparison says nothing.
	for _, a := range []struct {
		name string
		b    *report.Bench
	}{{"on", on}, {"off", off}} {
		if a.b.Failed == 0 {
			continue
		}
		var kinds []string
		for _, e := range a.b.Errors {
			kinds = append(kinds, fmt.Sprintf("%s x%d", e.Kind, e.Count))
		}
		b.Logf("telemetry %s: %d of %d requests failed (%s)", a.name, a.b.Failed, a.b.Failed+a.b.Completed, strings.Join(kinds, ", "))
		if float64(a.b.Failed) > 0.01*float64(a.b.Failed+a.b.Completed) {
			b.Errorf("telemetry %s: more than 1%% of the requests failed", a.name)
		}
	}
}

// observerArm is one arm of BenchmarkObserverEffect and the records of its phases.
type observerArm struct {
	name      string
	telemetry bool
	records   []loadgen.Record
}

// phase builds the arm's service in the world cfg points at, serves the demo's load for d at
// rate from seed, shuts the service down and returns the records.
func (a *observerArm) phase(ctx context.Context, cfg service.Config, d time.Duration, rate float64, seed uint64) (_ []loadgen.Record, err error) {
	logger := slog.New(slog.DiscardHandler)
	var svc *service.Service
	if a.telemetry {
		rs, err := buildService(ctx, cfg, telemetryOptions{profiling: true, profileWindow: profile.DefaultWindow,
			profileKeep: profile.DefaultKeep, wallRate: profile.DefaultWallRate}, logger)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, rs.Close()) }()
		svc = rs.Service
	} else {
		s, err := service.New(ctx, cfg, service.WithLogger(logger))
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, s.Close()) }()
		svc = s
	}
	ln, err := listen(ctx, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := service.NewServer(svc.API, service.DefaultTimeouts, logger)
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, srv.Shutdown(sctx))
	}()
	base := "http://" + ln.Addr().String()
	if err := waitReady(ctx, base); err != nil {
		return nil, err
	}
	res, err := lab.RunDemo(ctx, lab.DemoConfig{URL: base + "/v1/chat/completions", Model: svc.Model, Questions: svc.Questions,
		Rate: rate, Duration: d, MaxTokens: 24, Seed: seed})
	if err != nil {
		return nil, fmt.Errorf("telemetry %s: %w", a.name, err)
	}
	var out []loadgen.Record
	for _, m := range res.Modes {
		out = append(out, m.Run.Records...)
	}
	return out, nil
}

// summary returns TTFT and E2E at P50 and P95, with intervals, over every phase's requests.
func (a *observerArm) summary() *report.Bench {
	return report.Summarize(&loadgen.Result{Records: a.records}, report.Options{
		Metrics: []string{report.MetricTTFT, report.MetricE2EL}, Percentiles: []float64{50, 95}})
}

func percentile(b *report.Bench, metric string, p float64) report.PercentileStat {
	m, _ := b.Metric(metric)
	for _, s := range m.Percentiles {
		if s.P == p {
			return s
		}
	}
	return report.PercentileStat{}
}

func interval(s report.PercentileStat) string {
	if !s.HasCI {
		return fmt.Sprintf("%.1f", ms(s.Value))
	}
	return fmt.Sprintf("%.1f [%.1f, %.1f]", ms(s.Value), ms(s.Lo), ms(s.Hi))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
