package bench

import (
	"bytes"
	"context"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
)

func mustHoldObjective(tb testing.TB, s string) *HoldObjective {
	tb.Helper()
	h, err := ParseHoldObjective(s)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func TestParseHoldObjective(t *testing.T) {
	tests := []struct {
		name, in, want, err string
	}{
		{name: "fail-on form", in: "p95_ttft_ms<=2000", want: "p95_ttft_ms<=2000"},
		{name: "strict", in: "p99.9_e2el_ms<500", want: "p99.9_e2el_ms<500"},
		{name: "sweep form", in: "p95_ttft:2000", want: "p95_ttft_ms<=2000"},
		{name: "sweep long form", in: "e2el:p90:300", want: "p90_e2el_ms<=300"},
		{name: "lower bound", in: "p95_ttft_ms>=2000", err: "use < or <="},
		{name: "not a percentile", in: "mean_ttft_ms<=2000", err: "want a percentile of ttft, ttfo, e2el"},
		{name: "metric not from the intended send", in: "p95_tpot_ms<=50", err: "want a percentile of ttft, ttfo, e2el"},
		{name: "two", in: "p95_ttft_ms<=2000,p99_e2el_ms<=9000", err: "give one SLO"},
		{name: "nonsense", in: "fast", err: "want KEY<=MS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHoldObjective(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || h.String() != tt.want {
				t.Fatalf("got %v, %v; want %s", h, err, tt.want)
			}
		})
	}
}

// TestRateSearchBracketsAStep runs the search against a service that meets the SLO exactly up
// to R* req/s: wherever it starts, it ends with a bracket [lo, hi) around R* at most the
// tolerance wide, and holds lo.
func TestRateSearchBracketsAStep(t *testing.T) {
	tests := []struct {
		name             string
		start, edge, tol float64
	}{
		{"from below", 1, 37, 0},
		{"from above", 500, 37, 0},
		{"fixed tolerance", 10, 123.4, 2},
		{"edge at the start", 37, 37, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newRateSearch(tt.start, 2, tt.tol)
			for i := 0; !s.done(); i++ {
				if i > 100 {
					t.Fatal("the search did not end")
				}
				s.observe(s.next <= tt.edge)
			}
			if s.outcome != report.HoldHeld || s.lo > tt.edge || s.hi <= tt.edge || s.hi-s.lo > s.tolerance() {
				t.Errorf("outcome %s, bracket [%g, %g) (tolerance %g), want one around %g", s.outcome, s.lo, s.hi, s.tolerance(), tt.edge)
			}
		})
	}
	s := newRateSearch(1, 2, 0)
	for !s.done() {
		s.observe(false)
	}
	if s.outcome != report.HoldNeverMet || s.lo != 0 {
		t.Errorf("never met: outcome %s, lo %g", s.outcome, s.lo)
	}
}

// TestHoldFindsMM1Edge runs the search against an M/M/1 queue of service rate mu = 100/s,
// whose response time at arrival rate lambda is exponential with rate mu - lambda, so its P95
// is ln(20)/(mu - lambda) and P95 <= 200 ms holds up to R* = mu - ln(20)/0.2 = 85.0 req/s.
// Each window of 10 s draws its rate x 10 s response times (seeded) and is judged as the
// controller judges one. The P95 of n exponential draws has a relative standard error of
// sqrt(0.05 x 0.95 / n) / 0.05 / ln(20), so a window near R* tells lambda apart to within
// sigma = (mu - R*) x that: the held rate is within the tolerance of R*, give or take 3 sigma.
func TestHoldFindsMM1Edge(t *testing.T) {
	const mu, window = 100.0, 10 * time.Second
	slo := mustHoldObjective(t, "p95_e2el_ms<=200")
	edge := mu - math.Log(20)/0.2
	n := edge * window.Seconds()
	sigma := (mu - edge) * math.Sqrt(0.05*0.95/n) / 0.05 / math.Log(20)
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := newRateSearch(10, 2, 0)
		windows := 0
		for !s.done() {
			rate := s.next
			w := &holdWindow{rate: rate}
			for range int(rate * window.Seconds()) {
				w.sent++
				w.received++
				if rate >= mu { // unstable: the queue grows without bound
					w.values = append(w.values, time.Hour)
					continue
				}
				w.values = append(w.values, time.Duration(rng.ExpFloat64()/(mu-rate)*float64(time.Second)))
			}
			s.observe(w.judge(slo).Met)
			windows++
		}
		if s.outcome != report.HoldHeld {
			t.Fatalf("seed %d: outcome %s", seed, s.outcome)
		}
		if s.lo < edge-s.tolerance()-3*sigma || s.lo > edge+3*sigma || s.hi < edge-3*sigma {
			t.Errorf("seed %d: held %.2f, bracket [%.2f, %.2f) after %d windows; want the edge %.2f within the tolerance %.2f and 3 sigma %.2f",
				seed, s.lo, s.lo, s.hi, windows, edge, s.tolerance(), 3*sigma)
		}
	}
}

// TestHoldWindowCountsFailuresAsOver checks a window's verdict and interval from its records:
// failures and unfinished requests count as over the limit.
func TestHoldWindowCountsFailuresAsOver(t *testing.T) {
	slo := mustHoldObjective(t, "p90_e2el_ms<=100")
	w := &holdWindow{sent: 100, received: 95, failed: 6}
	for i := range 89 {
		w.values = append(w.values, time.Duration(i)*time.Millisecond)
	}
	// 89 values of 0..88 ms, then 11 over the limit: the P90 (rank 90) is over.
	r := w.judge(slo)
	if r.Met || r.ValueMS != nil || r.Requests != 100 || r.Failed != 6 || r.Unfinished != 5 {
		t.Errorf("window %+v: want missed, the P90 over the limit, 100 requests, 6 failed, 5 unfinished", r)
	}
	w = &holdWindow{sent: 100, received: 100, failed: 1}
	for i := range 99 {
		w.values = append(w.values, time.Duration(i)*time.Millisecond)
	}
	r = w.judge(slo)
	if !r.Met || r.ValueMS == nil || *r.ValueMS != 89 || !r.HasCI || r.LoMS == nil || r.HiMS == nil || *r.LoMS > 89 || *r.HiMS < 89 {
		t.Errorf("window %+v: want met at 89 ms with an interval around it", r)
	}
}

// stepService is a Doer whose latency is a known function of the rate it is offered: each
// request's gap from the one intended before it gives the rate, and requests at a rate above
// edge take slow, the others fast. It answers at once (the times are set, not slept), and as if
// each request left at its intended time: what the controller is offered is then the law alone,
// not how late a loaded machine's scheduler sent.
type stepService struct {
	edge       float64
	fast, slow time.Duration
	mu         sync.Mutex
	last, gap  time.Duration
}

func (s *stepService) Do(_ context.Context, _ *loadgen.Request, _ time.Time, rec *loadgen.Record) {
	s.mu.Lock()
	if rec.Intended > s.last {
		s.gap, s.last = rec.Intended-s.last, rec.Intended
	}
	gap := s.gap
	s.mu.Unlock()
	lat := s.fast
	if gap > 0 && 1/gap.Seconds() > s.edge*1.0001 {
		lat = s.slow
	}
	rec.Sent = rec.Intended
	rec.Status = 200
	rec.FirstByte = rec.Intended + lat
	rec.FirstToken, rec.End = rec.FirstByte, rec.FirstByte+time.Millisecond
}

// TestHoldControllerOnRun runs the controller beside loadgen.Run against a service that meets
// P90 E2EL <= 100 ms up to 230 req/s, with evenly spaced arrivals (so the offered rate is
// exact): the held rate lands within the tolerance below 230, the held stretch meets the SLO,
// and the summary covers only the held stretch.
func TestHoldControllerOnRun(t *testing.T) {
	const edge = 230.0
	o := &HoldOptions{SLO: mustHoldObjective(t, "p90_e2el_ms<=100"), Window: 300 * time.Millisecond, HoldFor: 500 * time.Millisecond, Growth: 2}
	var stderr bytes.Buffer
	h, err := newHoldController(o, 40, 0, 1, time.Minute, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	src, err := shape.Synthetic([]shape.Length{shape.Short}, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.start = time.Now()
	cfg := loadgen.Config{Workload: shape.Open(h.process(), src), Client: &stepService{edge: edge, fast: 5 * time.Millisecond, slow: time.Second},
		Start: h.start, Info: loadgen.NewRunInfo("test", "", h.process().String(), 40, 1)}
	res, b, err := measure(context.Background(), cfg, report.Options{}, nil, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	hs := b.HoldSLO
	t.Logf("%s", stderr.String())
	if hs == nil || hs.HeldRPS == nil || hs.HeldMet == nil || hs.IntervalHiRPS == nil {
		t.Fatalf("hold_slo %+v: want a held rate, its verdict and a bracket", hs)
	}
	if held := *hs.HeldRPS; held > edge || held < edge-hs.ToleranceRPS || *hs.IntervalHiRPS <= edge || !*hs.HeldMet || hs.Outcome != report.HoldHeld {
		t.Errorf("held %g (bracket to %g, tolerance %g), met %v, outcome %s: want within the tolerance below %g, met", held,
			*hs.IntervalHiRPS, hs.ToleranceRPS, *hs.HeldMet, hs.Outcome, edge)
	}
	last := hs.Windows[len(hs.Windows)-1]
	if last.Phase != report.HoldPhaseHold || b.Completed != int64(last.Requests) || b.Warmup == 0 || res.MeasuredFrom <= 0 {
		t.Errorf("held stretch %+v, summary of %d completed (%d warmup, measured from %s): want the summary to be the held stretch",
			last, b.Completed, b.Warmup, res.MeasuredFrom)
	}
	for _, w := range hs.Windows {
		want := math.Round(w.RateRPS * (w.EndS - w.StartS))
		if math.Abs(float64(w.Requests)-want) > 1 {
			t.Errorf("window %+v: %d requests, want %g (evenly spaced at its rate)", w, w.Requests, want)
		}
	}
}

// TestHoldControllerStops stops a search mid-way as a first Ctrl-C does: the run drains and
// ends, the controller with it, and the section says the search was interrupted, with no held
// stretch.
func TestHoldControllerStops(t *testing.T) {
	o := &HoldOptions{SLO: mustHoldObjective(t, "p90_e2el_ms<=100"), Window: 300 * time.Millisecond, HoldFor: time.Minute, Growth: 2}
	h, err := newHoldController(o, 40, 0, 1, time.Minute, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	src, err := shape.Synthetic([]shape.Length{shape.Short}, 1)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	time.AfterFunc(700*time.Millisecond, func() { close(stop) })
	h.start = time.Now()
	cfg := loadgen.Config{Workload: shape.Open(h.process(), src), Client: &stepService{edge: 1000, fast: 5 * time.Millisecond, slow: time.Second},
		Start: h.start, Stop: stop, Info: loadgen.NewRunInfo("test", "", h.process().String(), 40, 1)}
	began := time.Now()
	_, b, err := measure(context.Background(), cfg, report.Options{}, nil, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("the run took %s after a stop at 0.7 s", d)
	}
	hs := b.HoldSLO
	if hs.Outcome != report.HoldInterrupted || hs.HeldMet != nil || len(hs.Windows) == 0 || hs.Windows[len(hs.Windows)-1].Phase != report.HoldPhaseSearch {
		t.Errorf("hold_slo %+v: want an interrupted search with its judged windows and no held stretch", hs)
	}
}
