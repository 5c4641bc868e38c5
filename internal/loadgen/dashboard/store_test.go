package dashboard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/loadgen/scrape"
	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

var t0 = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// ok is a completed request with the given TTFT and E2EL from its intended send.
func ok(ttft, e2el time.Duration) loadgen.Record {
	return loadgen.Record{Status: 200, FirstToken: ttft, End: e2el, OutputTokens: 10}
}

func TestPercentilesOfAKnownDistribution(t *testing.T) {
	t.Parallel()
	// E2EL exponential with mean 200 ms, TTFT uniform on [50, 150) ms: 20000 requests spread
	// over the 10 ticks of a 10 s window, so that the last point's percentiles cover them all.
	const (
		n     = 20000
		mean  = 200 * time.Millisecond
		ticks = 10
	)
	rng := rand.New(rand.NewPCG(38, 7))
	s := NewStore(t0, WithWindow(ticks*time.Second))
	var e2els, ttfts []time.Duration
	for tick := 1; tick <= ticks; tick++ {
		for range n / ticks {
			e2el := time.Duration(rng.ExpFloat64() * float64(mean))
			ttft := 50*time.Millisecond + time.Duration(rng.Float64()*float64(100*time.Millisecond))
			e2el += ttft // a request ends after its first token
			e2els, ttfts = append(e2els, e2el), append(ttfts, ttft)
			s.Add(ok(ttft, e2el))
		}
		s.Tick(at(float64(tick)))
	}
	pts := s.State(0, at(ticks)).Points
	last := pts[len(pts)-1]
	if last.E2EL.N != n || last.TTFT.N != n {
		t.Fatalf("the window holds %d E2EL and %d TTFT values, want %d each", last.E2EL.N, last.TTFT.N, n)
	}
	slices.Sort(e2els)
	slices.Sort(ttfts)
	for _, c := range []struct {
		name   string
		got    *float64
		sorted []time.Duration
		q      float64
	}{
		{"e2el p50", last.E2EL.P50, e2els, 0.50}, {"e2el p95", last.E2EL.P95, e2els, 0.95},
		{"e2el p99", last.E2EL.P99, e2els, 0.99}, {"ttft p50", last.TTFT.P50, ttfts, 0.50},
		{"ttft p95", last.TTFT.P95, ttfts, 0.95}, {"ttft p99", last.TTFT.P99, ttfts, 0.99},
	} {
		// The store's percentile is the sample's nearest-rank value within the histogram's
		// relative precision (10^-3).
		exact := float64(c.sorted[stats.NearestRank(n, c.q)-1]) / 1e6
		if c.got == nil || math.Abs(*c.got-exact) > 1e-3*exact+1e-3 {
			t.Errorf("%s = %v ms, want the sample's %.3f ms within 0.1%%", c.name, deref(c.got), exact)
		}
	}
	// And the sample agrees with the law: E2EL = U(50,150) + Exp(200) ms; its quantiles are
	// checked against the exponential part's, shifted by the uniform's range, and the
	// sampling error of a quantile, sqrt(q(1-q)/n)/f(x_q), sets the tolerance (4 standard
	// errors).
	for _, q := range []float64{0.5, 0.95, 0.99} {
		expo := -math.Log(1-q) * 200 // ms
		lo, hi := expo+50, expo+150  // the sum's quantile lies between the shifted ones
		se := 200 * math.Sqrt(q/((1-q)*n))
		got := float64(e2els[stats.NearestRank(n, q)-1]) / 1e6
		if got < lo-4*se || got > hi+4*se {
			t.Errorf("sample e2el p%g = %.1f ms, want within [%.1f, %.1f] ms +- %.1f", 100*q, got, lo, hi, 4*se)
		}
	}
	for _, q := range []float64{0.5, 0.95, 0.99} {
		want := 50 + 100*q
		se := 100 * math.Sqrt(q*(1-q)/n) // the uniform's density is 1/100 per ms
		got := float64(ttfts[stats.NearestRank(n, q)-1]) / 1e6
		if math.Abs(got-want) > 4*se+0.01 {
			t.Errorf("sample ttft p%g = %.2f ms, want %.2f +- %.2f", 100*q, got, want, 4*se)
		}
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestWindowForgetsOlderRequests(t *testing.T) {
	t.Parallel()
	s := NewStore(t0, WithWindow(3*time.Second))
	for range 100 {
		s.Add(ok(100*time.Millisecond, time.Second))
	}
	s.Tick(at(1))
	for range 300 {
		s.Add(ok(10*time.Millisecond, 20*time.Millisecond))
	}
	s.Tick(at(2))
	s.Tick(at(3))
	s.Tick(at(4)) // the first second's requests leave the 3 s window (1, 4]
	s.Tick(at(5)) // and the second's
	s.Tick(at(6))
	pts := s.State(0, at(6)).Points
	wantN := []int64{100, 400, 400, 300, 0, 0}
	wantP99 := []float64{1000, 1000, 1000, 20, math.NaN(), math.NaN()}
	for i, p := range pts {
		if p.E2EL.N != wantN[i] {
			t.Errorf("point %d: window of %d requests, want %d", i, p.E2EL.N, wantN[i])
		}
		switch {
		case math.IsNaN(wantP99[i]) && p.E2EL.P99 != nil:
			t.Errorf("point %d: p99 %v over no request", i, *p.E2EL.P99)
		case !math.IsNaN(wantP99[i]) && (p.E2EL.P99 == nil || math.Abs(*p.E2EL.P99-wantP99[i]) > 1e-3*wantP99[i]):
			t.Errorf("point %d: p99 %v, want %g ms", i, deref(p.E2EL.P99), wantP99[i])
		}
	}
}

func TestRetentionIsBounded(t *testing.T) {
	t.Parallel()
	s := NewStore(t0, WithMaxPoints(5))
	for i := 1; i <= 12; i++ {
		s.Tick(at(float64(i)))
	}
	tests := []struct {
		name        string
		from        int64
		wantSeqs    []int64
		wantDropped int64
	}{
		{"from the start", 0, []int64{7, 8, 9, 10, 11}, 7},
		{"from a kept point", 9, []int64{9, 10, 11}, 0},
		{"past the last", 12, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := s.State(tt.from, at(12))
			var seqs []int64
			for _, p := range st.Points {
				seqs = append(seqs, p.Seq)
			}
			if !slices.Equal(seqs, tt.wantSeqs) || st.Dropped != tt.wantDropped {
				t.Errorf("points %v (dropped %d), want %v (dropped %d)", seqs, st.Dropped, tt.wantSeqs, tt.wantDropped)
			}
			if st.MaxPoints != 5 || len(s.points) > 5 {
				t.Errorf("keeps %d points, max %d", len(s.points), st.MaxPoints)
			}
		})
	}
	if p := s.State(11, at(12)).Points[0]; p.T != 12 {
		t.Errorf("the last point is at t=%g, want 12", p.T)
	}
}

func TestCountsPerInterval(t *testing.T) {
	t.Parallel()
	s := NewStore(t0)
	for range 30 {
		s.Add(ok(10*time.Millisecond, 50*time.Millisecond))
	}
	s.Add(loadgen.Record{ErrKind: loadgen.ErrKindTimeout}, loadgen.Record{ErrKind: loadgen.ErrKindTimeout},
		loadgen.Record{ErrKind: loadgen.ErrKindTimeout}, loadgen.Record{Status: 503}, loadgen.Record{Status: 429},
		ok(time.Millisecond, time.Millisecond), loadgen.Record{Status: 200, Warmup: true},
		loadgen.Record{Status: 200, Cancelled: true}, loadgen.Record{NotSent: true, ErrKind: loadgen.ErrKindCanceled})
	s.Progress(loadgen.Progress{Sent: 50, InFlight: 7, Queued: 2})
	s.Tick(at(0.5))
	s.Progress(loadgen.Progress{Sent: 50, InFlight: 3, Final: true})
	s.Tick(at(1.5))
	st := s.State(0, at(1.5))
	p, q := st.Points[0], st.Points[1]
	if p.Completed != 31 || p.Failed != 5 || p.RPS != 72 || p.OutputTPS != 620 || p.InFlight != 7 || p.Queued != 2 {
		t.Errorf("first point %+v: want 31 completed, 5 failed, 72 req/s (36 in 0.5 s), 620 tok/s, 7 in flight, 2 queued", p)
	}
	wantErrs := map[string]int{loadgen.ErrKindTimeout: 3, loadgen.ErrKindHTTP5xx: 1, loadgen.ErrKindHTTP4xx: 1}
	if fmt.Sprint(p.Errors) != fmt.Sprint(wantErrs) {
		t.Errorf("errors %v, want %v", p.Errors, wantErrs)
	}
	if q.Completed != 0 || q.Failed != 0 || q.RPS != 0 || q.Errors != nil || q.InFlight != 0 {
		t.Errorf("second point %+v: want an empty interval, nothing in flight after the final progress", q)
	}
	if q.E2EL.N != 31 {
		t.Errorf("second point's window holds %d requests, want the 31 of the first second", q.E2EL.N)
	}
	want := Totals{Sent: 50, Completed: 31, Failed: 5, Cancelled: 1, Warmup: 1}
	if st.Totals != want {
		t.Errorf("totals %+v, want %+v", st.Totals, want)
	}
}

func TestErrorKindsAreBounded(t *testing.T) {
	t.Parallel()
	s := NewStore(t0)
	for i := range 3 * MaxErrorKinds {
		s.Add(loadgen.Record{ErrKind: fmt.Sprintf("kind%02d", i)})
	}
	s.Tick(at(1))
	errs := s.State(0, at(1)).Points[0].Errors
	if len(errs) != MaxErrorKinds+1 || errs["other"] != 2*MaxErrorKinds {
		t.Errorf("%d kinds, %d other; want %d kinds and %d other", len(errs), errs["other"], MaxErrorKinds+1, 2*MaxErrorKinds)
	}
}

// gauges is a fixed set of scraped samples.
type gauges []scrape.Sample

func (g gauges) Latest() []scrape.Sample { return g }

func TestServerGaugesArePreferredAndBounded(t *testing.T) {
	t.Parallel()
	var g gauges
	for i := range MaxServerSeries + 4 {
		g = append(g, scrape.Sample{Name: "rag_gauge", Labels: map[string]string{"i": fmt.Sprint(i)}, Gauge: true, Value: float64(i)})
	}
	g = append(g, scrape.Sample{Name: "vllm:prompt_tokens_total", Value: 1e6}, // a counter: not drawn
		scrape.Sample{Name: "vllm:num_requests_waiting", Labels: map[string]string{"model_name": "m"}, Gauge: true, Value: 12},
		scrape.Sample{Name: "vllm:num_requests_running", Labels: map[string]string{"model_name": "m"}, Gauge: true, Value: 34})
	s := NewStore(t0)
	s.Tick(at(1)) // no source yet
	s.SetGauges(g)
	s.Tick(at(2))
	s.Tick(at(3))
	st := s.State(0, at(3))
	if st.Points[0].Server != nil {
		t.Errorf("server values %v before any source", st.Points[0].Server)
	}
	for _, p := range st.Points[1:] {
		if len(p.Server) != MaxServerSeries {
			t.Errorf("point %d: %d gauges, want %d", p.Seq, len(p.Server), MaxServerSeries)
		}
		if p.Server[`vllm:num_requests_running{model_name="m"}`] != 34 || p.Server[`vllm:num_requests_waiting{model_name="m"}`] != 12 {
			t.Errorf("point %d: the engine's gauges are not kept first: %v", p.Seq, p.Server)
		}
		if _, ok := p.Server["vllm:prompt_tokens_total"]; ok {
			t.Error("a counter is drawn as a gauge")
		}
	}
	if len(st.ServerKeys) != MaxServerSeries || st.ServerKeys[0] != `vllm:num_requests_running{model_name="m"}` ||
		st.ServerKeys[1] != `vllm:num_requests_waiting{model_name="m"}` {
		t.Errorf("server keys %v: want the engine's running and waiting gauges first", st.ServerKeys)
	}
	if st.Totals.DroppedServerSeries != 6 {
		t.Errorf("%d gauges dropped, want 6 (22 gauges, %d kept), counted once", st.Totals.DroppedServerSeries, MaxServerSeries)
	}
}

func TestFinishEndsTheSeries(t *testing.T) {
	t.Parallel()
	s := NewStore(t0)
	s.SetPhase("point 1/2: 10 req/s")
	s.Add(ok(time.Millisecond, 2*time.Millisecond))
	s.Tick(at(1))
	s.Add(ok(time.Millisecond, 2*time.Millisecond))
	if s.finalHTML() != nil {
		t.Fatal("a report before the end")
	}
	s.Finish(at(1.5), []byte("<html>report</html>"))
	s.Tick(at(2))
	st := s.State(0, at(9))
	if st.Elapsed != 1.5 {
		t.Errorf("elapsed %g s after the end, want the run's 1.5 s", st.Elapsed)
	}
	if !st.Final || len(st.Points) != 2 || st.Points[1].Completed != 1 || st.Points[1].T != 1.5 || st.Phase != "" {
		t.Errorf("after Finish: final %v, points %+v, phase %q; want the last interval closed at 1.5 s and no tick after", st.Final, st.Points, st.Phase)
	}
	if st.Points[0].Phase != "point 1/2: 10 req/s" {
		t.Errorf("phase %q", st.Points[0].Phase)
	}
	select {
	case <-s.FinalSeen():
		t.Fatal("seen before anyone read it")
	default:
	}
	if string(s.finalHTML()) != "<html>report</html>" {
		t.Error("the final report is not kept")
	}
	<-s.FinalSeen()
}

func TestKey(t *testing.T) {
	t.Parallel()
	if k := Key("vllm:x", map[string]string{"model_name": "m", "engine": "0"}); k != `vllm:x{engine="0",model_name="m"}` {
		t.Errorf("Key = %s", k)
	}
	if k := Key("rag_inflight_requests", nil); k != "rag_inflight_requests" {
		t.Errorf("Key = %s", k)
	}
}

func BenchmarkAdd(b *testing.B) {
	s := NewStore(t0)
	r := ok(100*time.Millisecond, time.Second)
	b.ReportAllocs()
	for b.Loop() {
		s.Add(r)
	}
}
