package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

var testStart = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// syntheticResult builds a deterministic run of n streamed requests: Poisson arrivals at 40
// req/s, a small send lag, lognormal time to first token with a one-second stall of 800 ms for
// the arrivals between 6 and 7 s, Pareto-tailed inter-token gaps, Server-Timing stages, four-step
// sessions, eight connections opened then kept alive, 3% HTTP 503s, 1% timeouts and the last three requests cut by Ctrl-C.
func syntheticResult(seed uint64, n int) *loadgen.Result {
	r := rand.New(rand.NewPCG(seed, 1))
	res := &loadgen.Result{Start: testStart, Config: loadgen.RunInfo{
		URL: "http://127.0.0.1:8000/v1/chat/completions", Model: "meta-llama/Meta-Llama-3-8B-Instruct",
		Shape: "poisson(rate=40)", RequestRate: 40, Burstiness: 1, NumPrompts: n, MaxTokens: 64, Seed: seed,
	}}
	var t time.Duration
	for i := range n {
		t += time.Duration(r.ExpFloat64() / 40 * float64(time.Second))
		rec := loadgen.Record{
			Index: i, Session: fmt.Sprintf("s%03d", i/4), Step: i % 4,
			Intended: t, TraceID: fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15),
			PromptTokens: 100 + r.IntN(500),
		}
		rec.Sent = t + time.Duration(20000+r.IntN(80000))
		rec.FirstByte = rec.Sent + 2*time.Millisecond
		// Eight connections opened by the first requests (no random draw, so that the rest is
		// as before), kept alive for the others.
		if i < 8 {
			rec.NewConn, rec.Connect = true, time.Duration(150+10*i)*time.Microsecond
		} else {
			rec.ConnReused = true
		}
		switch u := r.Float64(); {
		case i >= n-3:
			rec.End, rec.ErrKind, rec.Err = rec.Sent+50*time.Millisecond, loadgen.ErrKindCanceled, "context canceled"
		case u < 0.03:
			rec.End, rec.Status, rec.Err = rec.Sent+4*time.Millisecond, 503, `{"error":{"message":"engine overloaded"}}`
		case u < 0.04:
			rec.End, rec.ErrKind, rec.Err = rec.Sent+3*time.Second, loadgen.ErrKindTimeout, "context deadline exceeded"
		default:
			rec.Status = 200
			ttft := time.Duration(120 * math.Exp(0.5*r.NormFloat64()) * float64(time.Millisecond))
			if t >= 6*time.Second && t < 7*time.Second {
				ttft += 800 * time.Millisecond
			}
			rec.FirstToken = rec.Sent + ttft
			at := rec.FirstToken
			tokens := 0
			chunks := 20 + r.IntN(40)
			for c := range chunks {
				if c > 0 {
					at += time.Duration(8 * math.Pow(1-r.Float64(), -1/3.0) * float64(time.Millisecond))
				}
				k := 1 + r.IntN(2)
				tokens += k
				rec.Chunks = append(rec.Chunks, loadgen.Chunk{At: at, Tokens: k})
			}
			rec.End = at + time.Millisecond
			rec.OutputTokens, rec.TokensFromUsage = tokens, true
			rec.ServerTiming = map[string]float64{
				"embed":    1 + r.Float64(),
				"retrieve": 3 + 4*r.ExpFloat64(),
				"fetch":    0.5 + r.Float64(),
				"generate": float64(rec.End-rec.FirstByte) / 1e6,
			}
		}
		res.Records = append(res.Records, rec)
	}
	for _, rec := range res.Records {
		res.Duration = max(res.Duration, rec.End)
	}
	return res
}

// hockeyResult is one sweep point at an offered rate: n requests sent on time, whose e2el is
// 200 ms ± 10% until knee req/s and climbs by steep ms per req/s beyond it.
func hockeyResult(seed uint64, rate float64, n int, knee, steep float64) *loadgen.Result {
	r := rand.New(rand.NewPCG(seed, uint64(rate)))
	res := &loadgen.Result{Start: testStart, Config: loadgen.RunInfo{URL: "http://127.0.0.1:8000/v1/chat/completions",
		Shape: fmt.Sprintf("poisson(rate=%g)", rate), RequestRate: rate, Seed: seed}}
	base := 200.0
	if rate > knee {
		base += (rate - knee) * steep
	}
	for i := range n {
		intended := time.Duration(float64(i) / rate * float64(time.Second))
		e2el := time.Duration(base * (0.9 + 0.2*r.Float64()) * float64(time.Millisecond))
		rec := loadgen.Record{Index: i, Intended: intended, Sent: intended, FirstToken: intended + e2el/4,
			End: intended + e2el, Status: 200, OutputTokens: 10,
			Chunks: []loadgen.Chunk{{At: intended + e2el/4, Tokens: 5}, {At: intended + e2el, Tokens: 5}}}
		res.Records = append(res.Records, rec)
		res.Duration = max(res.Duration, rec.End)
	}
	return res
}
