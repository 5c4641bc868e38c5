package loadgen_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// The benchmarks below run ragtail's generator and vegeta side by side against the same
// trivial endpoint on loopback (GET / answering a 12-byte JSON body), in the same process, in
// alternating phases of benchPhase (so that a neighbour's load on a shared machine falls on
// both alike), pooling each generator's phases. They report figures, not pass/fail:
//
//   - max-rate: requests completed per second by 32 closed-loop users (ragtail's
//     --request-rate inf --concurrency 32) and by vegeta with 32 workers at rate 0 (as fast
//     as possible), and their ratio;
//   - 2000rps: the send lag of each generator at a constant 2,000 requests per second: how
//     late each request went out against its schedule. ragtail records it per request (from
//     the intended time to the moment the request was written to the connection); vegeta's is
//     reconstructed from its results (timestamp against seq/rate, the attack's start taken from
//     the least late request, so a lower bound) and, like vegeta's timestamps, taken before the
//     HTTP round trip starts: ragtail's dispatch lag (intended time to the client's call) is the
//     figure to compare with it.

const (
	benchPhase  = time.Second
	benchRounds = 3 // phases per generator
)

func trivialServer(tb testing.TB) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// lookups is a source of GETs of the endpoint's root.
type lookups struct{}

func (lookups) Next() loadgen.Request { return loadgen.Request{Path: "/"} }

func oursMaxRate(tb testing.TB, url string, users int) (completed int, elapsed time.Duration) {
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Workload: shape.Closed(lookups{}), Client: newClient(tb, url),
		ClosedLoop: true, Concurrency: users, Duration: benchPhase,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return completedOK(tb, res), res.Duration
}

func completedOK(tb testing.TB, res *loadgen.Result) int {
	tb.Helper()
	ok := 0
	for i := range res.Records {
		if res.Records[i].OK() {
			ok++
		}
	}
	if ok < len(res.Records)*99/100 {
		tb.Fatalf("%d of %d requests failed", len(res.Records)-ok, len(res.Records))
	}
	return ok
}

func vegetaAttack(tb testing.TB, url string, pacer vegeta.Pacer, opts ...func(*vegeta.Attacker)) (results []*vegeta.Result, elapsed time.Duration) {
	tb.Helper()
	atk := vegeta.NewAttacker(append([]func(*vegeta.Attacker){vegeta.KeepAlive(true)}, opts...)...)
	targeter := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: url + "/"})
	start := time.Now()
	var last time.Time
	for r := range atk.Attack(targeter, pacer, benchPhase, "bench") {
		if r.Error != "" || r.Code != http.StatusOK {
			tb.Fatalf("vegeta: %d %s", r.Code, r.Error)
		}
		results = append(results, r)
		if e := r.End(); e.After(last) {
			last = e
		}
	}
	return results, last.Sub(start)
}

func BenchmarkVersusVegeta(b *testing.B) {
	srv := trivialServer(b)
	b.Run("max-rate", func(b *testing.B) {
		const users = 32
		var ours, theirs float64
		for b.Loop() {
			var oursN, theirsN int
			var oursT, theirsT time.Duration
			for range benchRounds {
				n, d := oursMaxRate(b, srv.URL, users)
				oursN, oursT = oursN+n, oursT+d
				res, elapsed := vegetaAttack(b, srv.URL, vegeta.Rate{Freq: 0, Per: time.Second}, vegeta.Workers(users), vegeta.MaxWorkers(users))
				theirsN, theirsT = theirsN+len(res), theirsT+elapsed
			}
			ours, theirs = float64(oursN)/oursT.Seconds(), float64(theirsN)/theirsT.Seconds()
		}
		b.ReportMetric(ours, "ragtail-req/s")
		b.ReportMetric(theirs, "vegeta-req/s")
		b.ReportMetric(ours/theirs, "ratio")
	})
	b.Run("2000rps", func(b *testing.B) {
		const rate = 2000
		var ours, theirs []time.Duration
		var dispatch dispatchLags
		for b.Loop() {
			ours, theirs, dispatch.lags = ours[:0], theirs[:0], dispatch.lags[:0]
			for range benchRounds {
				arrivals, err := shape.Constant(rate)
				if err != nil {
					b.Fatal(err)
				}
				dispatch.inner = newClient(b, srv.URL)
				res, err := loadgen.Run(context.Background(), loadgen.Config{
					Workload: shape.Open(arrivals, lookups{}), Client: &dispatch, Duration: benchPhase,
				})
				if err != nil {
					b.Fatal(err)
				}
				completedOK(b, res)
				for i := range res.Records {
					ours = append(ours, res.Records[i].SendLag())
				}
				vres, _ := vegetaAttack(b, srv.URL, vegeta.Rate{Freq: rate, Per: time.Second})
				theirs = append(theirs, vegetaLags(vres, rate)...)
			}
			slices.Sort(ours)
			slices.Sort(theirs)
			slices.Sort(dispatch.lags)
		}
		b.ReportMetric(ms(quantile(ours, 0.5)), "ragtail-lag-p50-ms")
		b.ReportMetric(ms(quantile(ours, 0.99)), "ragtail-lag-p99-ms")
		b.ReportMetric(ms(ours[len(ours)-1]), "ragtail-lag-max-ms")
		b.ReportMetric(ms(quantile(dispatch.lags, 0.99)), "ragtail-dispatch-lag-p99-ms")
		b.ReportMetric(ms(quantile(theirs, 0.5)), "vegeta-lag-p50-ms")
		b.ReportMetric(ms(quantile(theirs, 0.99)), "vegeta-lag-p99-ms")
		b.ReportMetric(ms(theirs[len(theirs)-1]), "vegeta-lag-max-ms")
	})
}

// dispatchLags wraps a Doer and notes how late each call came against its intended time.
type dispatchLags struct {
	inner loadgen.Doer
	mu    sync.Mutex
	lags  []time.Duration
}

func (d *dispatchLags) Do(ctx context.Context, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	lag := time.Since(origin) - rec.Intended
	d.inner.Do(ctx, req, origin, rec)
	d.mu.Lock()
	d.lags = append(d.lags, lag)
	d.mu.Unlock()
}

// vegetaLags reconstructs vegeta's send lags: at a constant rate its pacer sends request seq
// at (seq+1)/rate after the attack began; the beginning is taken as the earliest
// timestamp - (seq+1)/rate, i.e. the least late request is taken to be on time.
func vegetaLags(results []*vegeta.Result, rate float64) []time.Duration {
	began := time.Time{}
	due := func(r *vegeta.Result) time.Duration {
		return time.Duration(float64(r.Seq+1) / rate * float64(time.Second))
	}
	for i, r := range results {
		if b := r.Timestamp.Add(-due(r)); i == 0 || b.Before(began) {
			began = b
		}
	}
	lags := make([]time.Duration, len(results))
	for i, r := range results {
		lags[i] = r.Timestamp.Sub(began.Add(due(r)))
	}
	slices.Sort(lags)
	return lags
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
