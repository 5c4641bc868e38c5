package fault_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/openai"
)

func newInjector(tb testing.TB, rules []fault.Rule, seed uint64, opts ...fault.Option) *fault.Injector {
	tb.Helper()
	in, err := fault.NewInjector(rules, seed, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// decisions is the number of calls the statistical tests make. With n = 20000 the binomial
// standard error of a 10% share is sqrt(0.1 x 0.9 / 20000) = 0.0021, so 4 standard errors
// (+-0.0085) separate a correct 10% from 9% or 11%. A correct injector misses a 4-standard-error
// band with probability 6e-5 per check; the seeds are fixed, so the outcome is deterministic.
const decisions = 20000

// within4SE fails the test unless the observed share of hits in n trials is within 4 binomial
// standard errors, sqrt(p(1-p)/n), of p.
func within4SE(tb testing.TB, what string, hits, n int, p float64) {
	tb.Helper()
	se := math.Sqrt(p * (1 - p) / float64(n))
	if got := float64(hits) / float64(n); math.Abs(got-p) > 4*se {
		tb.Errorf("%s: %d of %d = %.4f, want %.4f +- %.4f (4 standard errors)", what, hits, n, got, p, 4*se)
	}
}

func TestPercentFiresBinomialShare(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 42, 0xdecafbad} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			t.Parallel()
			in := newInjector(t, []fault.Rule{{Name: "ten", Stage: rag.StageRetrieve, Percent: 10, Delay: latency.Fixed(time.Millisecond)}}, seed)
			hits := 0
			for range decisions {
				if in.Decide(rag.StageRetrieve, "").Injected() {
					hits++
				}
			}
			within4SE(t, "10% rule", hits, decisions, 0.10)
			st := in.Stats()["ten"]
			if st.Evaluated != decisions || st.Fired != uint64(hits) || st.InjectedDelay != time.Duration(hits)*time.Millisecond {
				t.Errorf("stats %+v, want %d evaluated, %d fired, %d ms injected", st, decisions, hits, hits)
			}
		})
	}
}

// TestTwoRulesFireIndependently checks both marginal shares and the joint one: independent 10%
// and 30% rules both fire on 3% of calls (standard error sqrt(0.03 x 0.97 / 20000) = 0.0012). A
// shared or correlated random stream would put the joint share anywhere from 0% to 10%.
func TestTwoRulesFireIndependently(t *testing.T) {
	t.Parallel()
	in := newInjector(t, []fault.Rule{
		{Name: "a", Stage: rag.StageFetch, Percent: 10, Delay: latency.Fixed(time.Millisecond)},
		{Name: "b", Stage: rag.StageFetch, Percent: 30, Delay: latency.Fixed(time.Millisecond)},
	}, 7)
	var a, b, both int
	for range decisions {
		dec := in.Decide(rag.StageFetch, "")
		fa := slices.ContainsFunc(dec.Fired, func(f fault.Firing) bool { return f.Rule == "a" })
		fb := slices.ContainsFunc(dec.Fired, func(f fault.Firing) bool { return f.Rule == "b" })
		if fa {
			a++
		}
		if fb {
			b++
		}
		if fa && fb {
			both++
		}
	}
	within4SE(t, "rule a (10%)", a, decisions, 0.10)
	within4SE(t, "rule b (30%)", b, decisions, 0.30)
	within4SE(t, "both (10% x 30%)", both, decisions, 0.03)
}

func TestDecisionsAreReproducible(t *testing.T) {
	t.Parallel()
	rules := []fault.Rule{{Name: "p", Stage: rag.StageEmbed, Percent: 50, Delay: mustLaw(t, "pareto:1ms,1.5")}}
	run := func(seed uint64) []time.Duration {
		in := newInjector(t, rules, seed)
		out := make([]time.Duration, 200)
		for i := range out {
			out[i] = in.Decide(rag.StageEmbed, "").Delay
		}
		return out
	}
	if a, b := run(3), run(3); !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave different decisions")
	}
	if a, b := run(3), run(4); reflect.DeepEqual(a, b) {
		t.Fatal("different seeds gave the same 200 decisions")
	}
}

func TestPercentEdges(t *testing.T) {
	t.Parallel()
	in := newInjector(t, []fault.Rule{
		{Name: "never", Stage: rag.StageEmbed, Percent: 0, Delay: latency.Fixed(time.Millisecond)},
		{Name: "always", Stage: rag.StageEmbed, Percent: 100, Delay: latency.Fixed(time.Millisecond)},
	}, 1)
	for range 5000 {
		dec := in.Decide(rag.StageEmbed, "")
		if len(dec.Fired) != 1 || dec.Fired[0].Rule != "always" {
			t.Fatalf("fired %v, want only the 100%% rule", dec.Fired)
		}
	}
}

// TestDelayLawQuantiles checks the delays a rule adds against the law's analytic quantiles: the
// share of n delays at or below Quantile(p) is binomial(n, p)/n, so it must lie within 4 standard
// errors of p (0.0028 at p = 0.99 with n = 20000, see within4SE).
func TestDelayLawQuantiles(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"uniform:10ms,50ms", "lognormal:20ms,0.5", "pareto:10ms,1.5", "pareto:1ms,3"} {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			law := mustLaw(t, s)
			in := newInjector(t, []fault.Rule{{Name: "d", Stage: rag.StageRetrieve, Percent: 100, Delay: law}}, 11)
			delays := make([]time.Duration, decisions)
			for i := range delays {
				delays[i] = in.Decide(rag.StageRetrieve, "").Delay
			}
			for _, p := range []float64{0.5, 0.9, 0.99} {
				q := law.Quantile(p)
				below := 0
				for _, d := range delays {
					if d <= q {
						below++
					}
				}
				within4SE(t, fmt.Sprintf("share at or below Q(%v) = %v", p, q), below, decisions, p)
			}
		})
	}
	t.Run("fixed", func(t *testing.T) {
		t.Parallel()
		in := newInjector(t, []fault.Rule{{Name: "f", Stage: rag.StageRetrieve, Percent: 100, Delay: latency.Fixed(25 * time.Millisecond)}}, 1)
		for range 1000 {
			if d := in.Decide(rag.StageRetrieve, "").Delay; d != 25*time.Millisecond {
				t.Fatalf("fixed law gave %v", d)
			}
		}
	})
}

func TestMaxDelayCapsEachRule(t *testing.T) {
	t.Parallel()
	// Pareto(1 ms, 0.3), capped at a minute, exceeds 50 ms with probability 50^-0.3 = 0.31.
	in := newInjector(t, []fault.Rule{{Name: "heavy", Stage: rag.StageRetrieve, Percent: 100, Delay: mustLaw(t, "pareto:1ms,0.3,1m")}},
		1, fault.WithMaxDelay(50*time.Millisecond))
	capped := 0
	for range 2000 {
		d := in.Decide(rag.StageRetrieve, "").Delay
		if d > 50*time.Millisecond {
			t.Fatalf("delay %v above the 50ms cap", d)
		}
		if d == 50*time.Millisecond {
			capped++
		}
	}
	if capped == 0 {
		t.Fatal("no delay reached the cap, so the test tests nothing")
	}
}

// relativeMean is E[max(L, a + U)] for U uniform on [0, J]: a share t = clamp((L-a)/J, 0, 1) of
// the draws is raised to the floor L, and the rest is uniform on [a + tJ, a + J], whose mean is
// a + J(1+t)/2.
func relativeMean(floor, a, jitter float64) float64 {
	if jitter == 0 {
		return math.Max(floor, a)
	}
	t := math.Min(math.Max((floor-a)/jitter, 0), 1)
	return t*floor + (1-t)*(a+jitter*(1+t)/2)
}

// TestRelativeRule checks the article's rule, max(100ms, baseline x 1.8 + U(0, 200ms)), against
// its bounds and its mean. The delay is a 1-Lipschitz function of U, so its variance is at most
// that of U, J²/12: with J = 200 ms and n = 20000 the standard error of the mean is at most
// 57.7 ms / sqrt(20000) = 0.41 ms, and the test allows 4 of them.
func TestRelativeRule(t *testing.T) {
	t.Parallel()
	const ms = float64(time.Millisecond)
	tests := []struct {
		name      string
		baseline  time.Duration
		lo, hi    time.Duration // bounds of the delay
		floorMass float64       // share of draws raised to the floor
	}{
		// 200 ms x 1.8 = 360 ms, above the floor: uniform on [360, 560] ms, mean 460 ms.
		{"baseline 200ms", 200 * time.Millisecond, 360 * time.Millisecond, 560 * time.Millisecond, 0},
		// 10 ms x 1.8 = 18 ms: the floor takes the draws with U <= 82 ms, 41% of them; the
		// mean is 0.41 x 100 + 0.59 x (18 + 141) = 134.81 ms.
		{"baseline 10ms", 10 * time.Millisecond, 100 * time.Millisecond, 218 * time.Millisecond, 0.41},
		// No observation yet: baseline 0, delay max(100 ms, U(0, 200 ms)), mean 125 ms.
		{"no baseline", 0, 100 * time.Millisecond, 200 * time.Millisecond, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Learn the baseline: 101 observations from baseline/2 to 3 x baseline/2, in a
			// scrambled order, have the median baseline.
			in := newInjector(t, []fault.Rule{{Name: "rel", Stage: rag.StageRetrieve, Percent: 100, Relative: fault.DefaultRelative()}},
				5, fault.WithBaselineWindow(101))
			if tt.baseline > 0 {
				for i := range 101 {
					step := (i * 37) % 101 // 37 is prime to 101: a permutation of 0..100
					in.Observe(rag.StageRetrieve, tt.baseline/2+time.Duration(step)*tt.baseline/100)
				}
			}
			if got, n := in.Baseline(rag.StageRetrieve, ""); got != tt.baseline {
				t.Fatalf("baseline %v from %d observations, want %v", got, n, tt.baseline)
			}
			var sum float64
			atFloor := 0
			lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
			for range decisions {
				d := in.Decide(rag.StageRetrieve, "").Delay
				sum += float64(d)
				lo, hi = min(lo, d), max(hi, d)
				if d == fault.DefaultFloor {
					atFloor++
				}
			}
			if lo < tt.lo || hi > tt.hi {
				t.Errorf("delays in [%v, %v], want within [%v, %v]", lo, hi, tt.lo, tt.hi)
			}
			// The extremes are reached: P(no draw within 1 ms of an end) = (1 - 1/200)^20000 ~ e^-100.
			if lo > tt.lo+time.Millisecond || hi < tt.hi-time.Millisecond {
				t.Errorf("delays in [%v, %v] do not span [%v, %v]", lo, hi, tt.lo, tt.hi)
			}
			wantMean := relativeMean(float64(fault.DefaultFloor), float64(tt.baseline)*fault.DefaultFactor, float64(fault.DefaultJitter))
			se := float64(fault.DefaultJitter) / math.Sqrt(12) / math.Sqrt(decisions)
			if mean := sum / decisions; math.Abs(mean-wantMean) > 4*se {
				t.Errorf("mean delay %.2f ms, want %.2f +- %.2f ms", mean/ms, wantMean/ms, 4*se/ms)
			}
			within4SE(t, "share at the floor", atFloor, decisions, tt.floorMass)
		})
	}
}

func TestRelativeMeanFormula(t *testing.T) {
	t.Parallel()
	// The figures quoted in TestRelativeRule, from the closed form.
	for _, tt := range []struct{ a, want float64 }{{360, 460}, {18, 134.81}, {0, 125}, {100, 200}} {
		if got := relativeMean(100, tt.a, 200); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("relativeMean(100, %v, 200) = %v, want %v", tt.a, got, tt.want)
		}
	}
}

func TestRelativeRuleOnRoutesAndPinnedBaseline(t *testing.T) {
	t.Parallel()
	in := newInjector(t, []fault.Rule{
		{Name: "route", Route: "/v1/chat/completions", Percent: 100, Relative: &fault.Relative{Factor: 2}},
		{Name: "pinned", Stage: rag.StageEmbed, Percent: 100, Relative: &fault.Relative{Factor: 3, Baseline: 7 * time.Millisecond}},
	}, 1)
	in.ObserveRoute("/v1/chat/completions", 40*time.Millisecond)
	in.Observe(rag.StageEmbed, time.Second) // ignored: the rule pins its baseline
	if d := in.Decide("", "/v1/chat/completions").Delay; d != 80*time.Millisecond {
		t.Errorf("route rule delay %v, want 2 x the route's 40ms = 80ms", d)
	}
	if d := in.Decide(rag.StageEmbed, "").Delay; d != 21*time.Millisecond {
		t.Errorf("pinned rule delay %v, want 3 x 7ms = 21ms", d)
	}
}

func TestBaselineIsRollingMedian(t *testing.T) {
	t.Parallel()
	in := newInjector(t, nil, 1, fault.WithBaselineWindow(4))
	ms := time.Millisecond
	steps := []struct {
		observe time.Duration
		want    time.Duration
		n       int
	}{
		{10 * ms, 10 * ms, 1},
		{30 * ms, 20 * ms, 2}, // even count: mean of the middle two
		{20 * ms, 20 * ms, 3},
		{1000 * ms, 25 * ms, 4}, // an outlier barely moves it
		{40 * ms, 35 * ms, 4},   // 10 ms drops out: {30, 20, 1000, 40}
		{50 * ms, 45 * ms, 4},   // {20, 1000, 40, 50}
		{60 * ms, 55 * ms, 4},   // {1000, 40, 50, 60}
		{70 * ms, 55 * ms, 4},   // {40, 50, 60, 70}: the outlier is gone
	}
	for i, s := range steps {
		in.Observe(rag.StageFetch, s.observe)
		if got, n := in.Baseline(rag.StageFetch, ""); got != s.want || n != s.n {
			t.Fatalf("after observation %d (%v): baseline %v of %d, want %v of %d", i+1, s.observe, got, n, s.want, s.n)
		}
	}
	if got, n := in.Baseline(rag.StageEmbed, ""); got != 0 || n != 0 {
		t.Fatalf("unobserved stage has baseline %v of %d", got, n)
	}
}

func TestAbortStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status   int
		sentinel error
	}{
		{http.StatusBadRequest, rag.ErrInvalidRequest},
		{http.StatusNotFound, rag.ErrNotFound},
		{http.StatusTooManyRequests, rag.ErrOverloaded},
		{http.StatusInternalServerError, rag.ErrUnavailable},
		{http.StatusBadGateway, rag.ErrUnavailable},
		{http.StatusServiceUnavailable, rag.ErrUnavailable},
		{http.StatusGatewayTimeout, rag.ErrTimeout},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			t.Parallel()
			in := newInjector(t, []fault.Rule{{Name: "boom", Stage: rag.StageRetrieve, Percent: 100, Abort: &fault.Abort{Status: tt.status}}}, 1)
			dec := in.Decide(rag.StageRetrieve, "")
			err := rag.AtStage(rag.StageRetrieve, dec.Err) // as the pipeline reports it
			if !errors.Is(err, fault.ErrInjected) || !errors.Is(err, tt.sentinel) {
				t.Fatalf("err = %v, want it to match fault.ErrInjected and %v", err, tt.sentinel)
			}
			var ae *fault.AbortError
			if !errors.As(err, &ae) || ae.Rule != "boom" || ae.Stage != rag.StageRetrieve || ae.Status != tt.status {
				t.Fatalf("AbortError = %+v", ae)
			}
			he := openai.ToHTTPError(err)
			if he.Status != tt.status || he.Code != "fault_injected" || !strings.Contains(he.Message, http.StatusText(tt.status)) {
				t.Fatalf("reported as %d %q %q, want %d fault_injected", he.Status, he.Code, he.Message, tt.status)
			}
			if len(dec.Fired) != 1 || dec.Fired[0].Status != tt.status {
				t.Fatalf("fired %+v", dec.Fired)
			}
		})
	}
}

func TestAbortMessageAndOrder(t *testing.T) {
	t.Parallel()
	in := newInjector(t, []fault.Rule{
		{Name: "slow", Stage: rag.StageFetch, Percent: 100, Delay: latency.Fixed(3 * time.Millisecond)},
		{Name: "down", Stage: rag.StageFetch, Percent: 100, Abort: &fault.Abort{Status: 503, Message: "doc store is down"}},
		{Name: "later", Stage: rag.StageFetch, Percent: 100, Delay: latency.Fixed(time.Second)},
	}, 1)
	dec := in.Decide(rag.StageFetch, "")
	if dec.Delay != 3*time.Millisecond || len(dec.Fired) != 2 || dec.Fired[1].Rule != "down" {
		t.Fatalf("decision %+v: want the delay before the abort and nothing after it", dec)
	}
	if got := openai.ToHTTPError(dec.Err).Message; got != `doc store is down (injected by fault rule "down")` {
		t.Fatalf("message %q", got)
	}
	st := in.Stats()
	if st["down"].Aborted != 1 || st["later"].Evaluated != 0 {
		t.Fatalf("stats %+v: an aborted call must not evaluate later rules", st)
	}
}

func TestCutAfterTokens(t *testing.T) {
	t.Parallel()
	in := newInjector(t, []fault.Rule{
		{Name: "cut5", Stage: rag.StageGenerate, Percent: 100, CutAfterTokens: 5},
		{Name: "cut3", Stage: rag.StageGenerate, Percent: 100, CutAfterTokens: 3},
	}, 1)
	dec := in.Decide(rag.StageGenerate, "")
	if dec.CutAfterTokens != 3 || dec.Err != nil || dec.Delay != 0 {
		t.Fatalf("decision %+v, want the smaller cut, 3", dec)
	}
	err := dec.CutError()
	if !errors.Is(err, fault.ErrInjected) || !errors.Is(err, rag.ErrUnavailable) {
		t.Fatalf("cut error %v, want an injected unavailability", err)
	}
	var ae *fault.AbortError
	if !errors.As(err, &ae) || ae.Rule != "cut3" || ae.CutAfterTokens != 3 {
		t.Fatalf("AbortError %+v", ae)
	}
	if st := in.Stats(); st["cut3"].Cut != 1 || st["cut5"].Cut != 1 {
		t.Fatalf("stats %+v", st)
	}

	if (fault.Decision{}).CutError() != nil {
		t.Fatal("a decision without a cut must have no cut error")
	}
}

func TestApplyWaitsAndReturnsAbort(t *testing.T) {
	t.Parallel()
	in := newInjector(t, []fault.Rule{{Name: "slow-fail", Stage: rag.StageEmbed, Percent: 100,
		Delay: latency.Fixed(20 * time.Millisecond), Abort: &fault.Abort{Status: 500}}}, 1)
	start := time.Now()
	dec, err := in.Apply(context.Background(), rag.StageEmbed, "")
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("Apply returned after %v, before the 20ms delay", waited)
	}
	if err == nil || !errors.Is(err, dec.Err) {
		t.Errorf("Apply error %v, want the decision's abort %v", err, dec.Err)
	}
	// Nothing to inject: no wait and no error, even on a finished context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := in.Apply(ctx, rag.StageFetch, ""); err != nil {
		t.Errorf("Apply with no matching rule returned %v", err)
	}
}

func TestApplyStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	in := newInjector(t, []fault.Rule{{Name: "minute", Stage: rag.StageEmbed, Percent: 100, Delay: latency.Fixed(time.Minute)}}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start := time.Now()
	dec, err := in.Apply(ctx, rag.StageEmbed, "")
	if !errors.Is(err, context.DeadlineExceeded) || dec.Delay != time.Minute {
		t.Fatalf("Apply = %v, %v; want the context's error and the decided minute", dec.Delay, err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("the wait was not cut short by the context")
	}
}

func TestRouteAndStageTargets(t *testing.T) {
	t.Parallel()
	in := newInjector(t, []fault.Rule{
		{Name: "route-only", Route: "/v1/chat/completions", Percent: 100, Delay: latency.Fixed(time.Millisecond)},
		{Name: "stage-only", Stage: rag.StageRetrieve, Percent: 100, Delay: latency.Fixed(2 * time.Millisecond)},
		{Name: "stage-on-route", Stage: rag.StageFetch, Route: "/v1/documents/*", Percent: 100, Delay: latency.Fixed(4 * time.Millisecond)},
	}, 1)
	tests := []struct {
		stage rag.Stage
		route string
		want  []string
	}{
		{"", "/v1/chat/completions", []string{"route-only"}},
		{rag.StageRetrieve, "/v1/chat/completions", []string{"stage-only"}}, // a route rule never fires at a stage
		{rag.StageRetrieve, "", []string{"stage-only"}},
		{rag.StageFetch, "/v1/documents/doc-1", []string{"stage-on-route"}},
		{rag.StageFetch, "/v1/chat/completions", nil},
		{rag.StageFetch, "", nil},
		{"", "/v1/models", nil},
	}
	for _, tt := range tests {
		var names []string
		for _, f := range in.Decide(tt.stage, tt.route).Fired {
			names = append(names, f.Rule)
		}
		if !reflect.DeepEqual(names, tt.want) {
			t.Errorf("Decide(%q, %q) fired %v, want %v", tt.stage, tt.route, names, tt.want)
		}
	}
}

// TestSetRulesIsAtomic swaps between two rule sets while other goroutines decide: every decision
// must come wholly from one set (both of its rules fire, at 100%), never from a mix. Run with
// -race.
func TestSetRulesIsAtomic(t *testing.T) {
	t.Parallel()
	set := func(a, b string) []fault.Rule {
		return []fault.Rule{
			{Name: a, Stage: rag.StageRetrieve, Percent: 100, Delay: latency.Fixed(time.Millisecond)},
			{Name: b, Stage: rag.StageRetrieve, Percent: 100, Delay: latency.Fixed(time.Millisecond)},
		}
	}
	setA, setB := set("a1", "a2"), set("b1", "b2")
	in := newInjector(t, setA, 1)
	const deciders, perDecider, swaps = 4, 3000, 400
	var wg sync.WaitGroup
	errs := make(chan string, deciders)
	for range deciders {
		wg.Go(func() {
			for range perDecider {
				f := in.Decide(rag.StageRetrieve, "").Fired
				if len(f) != 2 || f[0].Rule[0] != f[1].Rule[0] {
					errs <- fmt.Sprintf("decision from a mixed or partial rule set: %+v", f)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range swaps {
			next := setA
			if i%2 == 0 {
				next = setB
			}
			if err := in.SetRules(next); err != nil {
				errs <- err.Error()
				return
			}
			_ = in.Rules()
			_ = in.Stats()
		}
	})
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	st := in.Stats()
	total := st["a1"].Evaluated + st["b1"].Evaluated
	if total != deciders*perDecider || st["a1"].Evaluated != st["a2"].Evaluated || st["b1"].Fired != st["b2"].Fired {
		t.Fatalf("stats %+v, want %d decisions split between the sets, each rule of a set counted alike", st, deciders*perDecider)
	}
}

func TestSetRulesValidatesAndKeepsOldSet(t *testing.T) {
	t.Parallel()
	good := []fault.Rule{{Name: "ok", Stage: rag.StageEmbed, Percent: 10, Delay: latency.Fixed(time.Millisecond)}}
	in := newInjector(t, good, 1)
	tests := []struct {
		name  string
		rules []fault.Rule
		want  []string
	}{
		{"duplicate names", []fault.Rule{
			{Name: "x", Stage: rag.StageEmbed, Delay: latency.Fixed(time.Millisecond)},
			{Name: "x", Stage: rag.StageFetch, Delay: latency.Fixed(time.Millisecond)}},
			[]string{`rules 1 and 2 are both named "x"`}},
		{"filled-in name collides", []fault.Rule{
			{Stage: rag.StageEmbed, Delay: latency.Fixed(time.Millisecond)},
			{Name: "rule-1", Stage: rag.StageFetch, Delay: latency.Fixed(time.Millisecond)}},
			[]string{`both named "rule-1"`}},
		{"every invalid rule reported", []fault.Rule{
			{Name: "a", Stage: rag.StageEmbed, Percent: 101, Delay: latency.Fixed(time.Millisecond)},
			{Name: "b", Stage: rag.StageEmbed}},
			[]string{"rule 1:", "percent", "rule 2:", "does nothing"}},
		{"too many", make([]fault.Rule, fault.MaxRules+1), []string{"at most 256"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := in.SetRules(tt.rules)
			if !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("SetRules error %v, want rag.ErrInvalidRequest", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if got := in.Rules(); !reflect.DeepEqual(got, good) {
				t.Fatalf("a rejected set changed the rules to %+v", got)
			}
		})
	}
}

func TestRulesAreCopiedAndNamed(t *testing.T) {
	t.Parallel()
	abort := &fault.Abort{Status: 503}
	in := newInjector(t, []fault.Rule{
		{Stage: rag.StageEmbed, Percent: 100, Abort: abort},
		{Name: "named", Stage: rag.StageFetch, Percent: 100, Delay: latency.Law{Kind: latency.LawNone}, Abort: &fault.Abort{Status: 500}},
	}, 1)
	abort.Status = 400 // the caller's later change must not reach the installed rule
	got := in.Rules()
	if got[0].Name != "rule-1" || got[0].Abort.Status != 503 || got[1].Delay != (latency.Law{}) {
		t.Fatalf("rules %+v", got)
	}
	got[0].Abort.Status = 404
	if in.Rules()[0].Abort.Status != 503 {
		t.Fatal("changing the returned rules changed the installed ones")
	}
}

func TestStatsSurviveRuleChanges(t *testing.T) {
	t.Parallel()
	rule := fault.Rule{Name: "keep", Stage: rag.StageEmbed, Percent: 100, Delay: latency.Fixed(time.Millisecond)}
	in := newInjector(t, []fault.Rule{rule}, 1)
	in.Decide(rag.StageEmbed, "")
	if err := in.SetRules(nil); err != nil {
		t.Fatal(err)
	}
	if in.Decide(rag.StageEmbed, "").Injected() {
		t.Fatal("a removed rule fired")
	}
	if st := in.Stats()["keep"]; st.Active || st.Fired != 1 {
		t.Fatalf("removed rule stats %+v, want inactive with its count", st)
	}
	if err := in.SetRules([]fault.Rule{rule}); err != nil {
		t.Fatal(err)
	}
	in.Decide(rag.StageEmbed, "")
	if st := in.Stats()["keep"]; !st.Active || st.Fired != 2 || st.InjectedDelay != 2*time.Millisecond {
		t.Fatalf("restored rule stats %+v, want its counts continued", st)
	}
}

func TestNewInjectorOptions(t *testing.T) {
	t.Parallel()
	for _, opt := range []fault.Option{fault.WithBaselineWindow(0), fault.WithMaxDelay(0)} {
		if _, err := fault.NewInjector(nil, 1, opt); !errors.Is(err, rag.ErrInvalidRequest) {
			t.Errorf("NewInjector with a bad option: %v", err)
		}
	}
	if _, err := fault.NewInjector([]fault.Rule{{Stage: rag.StageEmbed}}, 1); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Errorf("NewInjector with a bad rule: %v", err)
	}
}

func TestNilInjectorInjectsNothing(t *testing.T) {
	t.Parallel()
	var in *fault.Injector
	if dec, err := in.Apply(context.Background(), rag.StageEmbed, "/v1/chat/completions"); err != nil || dec.Injected() {
		t.Fatalf("nil injector: %+v, %v", dec, err)
	}
	in.Observe(rag.StageEmbed, time.Second)
	in.ObserveRoute("/x", time.Second)
	if in.Rules() != nil || in.Stats() != nil {
		t.Fatal("nil injector has rules or stats")
	}
	if err := in.SetRules(nil); err == nil {
		t.Fatal("SetRules on a nil injector must fail")
	}
}

// BenchmarkDecide measures the per-stage cost the pipeline pays: a stage no rule targets, a 10%
// rule that mostly does not fire, and rules that always fire (a law, the relative rule).
func BenchmarkDecide(b *testing.B) {
	rules := []fault.Rule{
		{Name: "ten", Stage: rag.StageRetrieve, Percent: 10, Delay: mustLaw(b, "pareto:10ms,1.5")},
		{Name: "law", Stage: rag.StageFetch, Percent: 100, Delay: mustLaw(b, "lognormal:5ms,0.5")},
		{Name: "rel", Stage: rag.StageGenerate, Percent: 100, Relative: fault.DefaultRelative()},
		{Name: "route", Stage: rag.StageEmbed, Route: "/v1/documents/*", Percent: 100, Delay: latency.Fixed(time.Millisecond)},
	}
	in := newInjector(b, rules, 1)
	for i := range 100 {
		in.Observe(rag.StageGenerate, time.Duration(100+i)*time.Millisecond)
	}
	cases := []struct {
		name  string
		stage rag.Stage
		route string
	}{
		{"untargeted stage", rag.StageStream, ""},
		{"10% law", rag.StageRetrieve, ""},
		{"route miss", rag.StageEmbed, "/v1/chat/completions"},
		{"100% law", rag.StageFetch, ""},
		{"100% relative", rag.StageGenerate, ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = in.Decide(c.stage, c.route)
			}
		})
	}
	b.Run("10% law parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = in.Decide(rag.StageRetrieve, "")
			}
		})
	})
}
