package lab

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// minP99Samples is the fewest requests whose P99 has a distribution-free 95% interval
// (stats.QuantileRanks at q = 0.99).
const minP99Samples = 368

// kneeArm is one engine of the knee experiment, swept over its own ladder.
type kneeArm struct {
	name      string
	env       *env
	llm       *LLMSettings
	rates     []float64
	maxTokens int
	stream    bool
}

// kneePoint is one rate of an arm's ladder.
type kneePoint struct {
	bench          *report.Bench
	peakRunning    float64
	peakWaste      float64
	requested, all float64 // KV blocks the sequences need and blocks held, summed over the samples
}

// kneeLadder is the tiny engine's ladder: from light load to past the batch's capacity.
var kneeLadder = []float64{4, 8, 12, 16, 20}

// llamaLadder is the Llama-3-8B profile's ladder at llamaMaxTokens, within what a small machine
// drives with the service in the same process.
var llamaLadder = []float64{10, 20, 40, 60, 80}

// llamaMaxTokens is the completion length of the llama arm (the article fixes batch and max
// tokens without stating them).
const llamaMaxTokens = 64

// runKnee sweeps the arrival rate on the tiny engine profile with paged and contiguous KV-cache
// allocation, and on the Llama-3-8B profile with the article's engine settings when the lab has
// that service, reading the engine's batch and waste from /admin/stats while each point runs.
func runKnee(ctx context.Context, e *env) (*Result, error) {
	doc := map[string]any{"vllm_knee_qps": 184, "vllm_knee_p99_ms": 1247, "triton_knee_qps": 92, "triton_knee_p99_ms": 2183,
		"fragmentation": []float64{0.25, 0.23}, "requested_vs_allocated_gb": [][]float64{{4.2, 5.6}, {7.8, 10.2}}}
	if !e.simulated {
		return &Result{Setup: "needs the simulated engine", Document: doc, Rows: []Row{{"knee", "vLLM 184 QPS, Triton 92 QPS", "not measured"}},
			Verdict: Verdict{NotRun, "generation goes to a real LLM: the KV allocation mode is the simulator's"}}, nil
	}
	arms := []kneeArm{
		{name: "paged", env: e, llm: &LLMSettings{Profile: ptr("tiny"), KVAlloc: ptr("paged")}, rates: kneeLadder, maxTokens: 400, stream: true},
		{name: "contiguous", env: e, llm: &LLMSettings{Profile: ptr("tiny"), KVAlloc: ptr("contiguous")}, rates: kneeLadder, maxTokens: 400, stream: true},
	}
	if e.o.Llama != nil {
		sub := &env{t: *e.o.Llama, o: e.o, simulated: true}
		if sub.t.HTTP == nil {
			sub.t.HTTP = e.t.HTTP
		}
		arms = append(arms, kneeArm{name: "llama3-8b-a100 paged", env: sub, llm: &LLMSettings{Profile: ptr("llama3-8b-a100"), KVAlloc: ptr("paged")},
			rates: llamaLadder, maxTokens: llamaMaxTokens})
	}
	npoints := 0
	for _, a := range arms {
		npoints += len(a.rates)
	}
	per := e.dur / time.Duration(npoints)
	var variants []Variant
	var rows []Row
	peaks := map[string]float64{}
	for _, a := range arms {
		pts, vs, err := a.sweep(ctx, per)
		if err != nil {
			return nil, err
		}
		variants = append(variants, vs...)
		armRows, peak := kneeRows(a, pts)
		rows = append(rows, armRows...)
		peaks[a.name] = peak
	}
	if e.o.Llama == nil {
		rows = append(rows, Row{"llama3-8b-a100 (max-num-seqs 256, max-model-len 4096)", "vLLM 184 QPS at P99 1247 ms", "not run: needs a second service with those engine arguments (the in-process lab starts one)"})
	}
	out, why := NotReproduced, fmt.Sprintf("peak running %v (paged) vs %v (contiguous)", peaks["paged"], peaks["contiguous"])
	if peaks["contiguous"] < peaks["paged"] {
		out = Reproduced
		why = "contiguous reservation holds fewer sequences: " + why
	}
	why += ". The article's QPS figures are for an A100 with vLLM/Triton; the tiny profile (256 blocks of 16 tokens, 8 seqs) is not that hardware, so only the direction compares"
	return &Result{
		Setup: fmt.Sprintf("llm-sim profile tiny (256 KV blocks of 16 tokens, 8 seqs), top_k 1, max_tokens 400, Poisson rates %v per allocation; %s; %v per point",
			kneeLadder, llamaSetup(e.o.Llama != nil), per.Round(time.Second)),
		Variants: variants, Document: doc, Rows: rows, Verdict: Verdict{out, why},
	}, nil
}

func llamaSetup(on bool) string {
	if !on {
		return "no llama arm"
	}
	return fmt.Sprintf("a second service on profile llama3-8b-a100 with --max-num-seqs 256 --max-model-len 4096, max_tokens %d, not streamed, Poisson rates %v", llamaMaxTokens, llamaLadder)
}

// sweep runs the arm's ladder, sampling the engine's counters every 200 ms at each point.
func (a kneeArm) sweep(ctx context.Context, per time.Duration) ([]kneePoint, []Variant, error) {
	e := a.env
	s := e.base()
	s.Coupling, s.TopK, s.LLM = ptr("fanout"), ptr(1), a.llm
	if err := e.put(ctx, s); err != nil {
		return nil, nil, err
	}
	var pts []kneePoint
	var variants []Variant
	for i, r := range a.rates {
		w, err := e.poisson(r, uint64(60+i), 8)
		if err != nil {
			return nil, nil, err
		}
		var pt kneePoint
		stop := e.sample(ctx, func(st serverStats) {
			if st.Engine == nil {
				return
			}
			pt.peakRunning = max(pt.peakRunning, st.Engine.Running)
			pt.peakWaste = max(pt.peakWaste, st.Engine.BlocksReservedUnused)
			pt.requested += st.Engine.BlocksUsed - st.Engine.BlocksReservedUnused
			pt.all += st.Engine.BlocksUsed
		})
		v, _, err := e.run(ctx, fmt.Sprintf("%s rate=%g", a.name, r), nil, load{workload: w, shape: fmt.Sprintf("poisson(rate=%g)", r), rate: r,
			duration: per, maxTokens: a.maxTokens, unary: !a.stream})
		stop()
		if err != nil {
			return nil, nil, err
		}
		v.Settings = s
		v.Counters = map[string]float64{"peak_running": pt.peakRunning, "peak_blocks_reserved_unused": pt.peakWaste,
			"kv_blocks_requested_sum": pt.requested, "kv_blocks_allocated_sum": pt.all}
		pt.bench = v.Bench
		pts = append(pts, pt)
		variants = append(variants, *v)
	}
	return pts, variants, nil
}

// kneeRows are an arm's rows: each point's P99 (or why it has no interval), the knee by the
// article's rule with its interval, the peak batch and the KV cache requested against allocated.
func kneeRows(a kneeArm, pts []kneePoint) ([]Row, float64) {
	var rows []Row
	var peak, req, all, waste float64
	var none []string
	benches := make([]*report.Bench, len(pts))
	for i, p := range pts {
		p99 := pct(p.bench, report.MetricE2EL, 99)
		if !p99.HasCI {
			none = append(none, fmt.Sprintf("%g (%d requests)", a.rates[i], p.bench.Completed))
		}
		rows = append(rows, Row{fmt.Sprintf("%s rate=%g: E2EL P99 / peak running / peak reserved unused", a.name, a.rates[i]), "",
			fmt.Sprintf("%s / %.0f / %.0f%s", fmtPct(p99), p.peakRunning, p.peakWaste, failedNote(p.bench))})
		peak, waste = max(peak, p.peakRunning), max(waste, p.peakWaste)
		req, all = req+p.requested, all+p.all
		benches[i] = p.bench
	}
	sw := report.SummarizeSweep(benches, report.SweepOptions{})
	k := "no knee in the ladder"
	if sw.Knee.Found {
		k = fmt.Sprintf("%.1f req/s (P99 %s ms)", sw.Knee.Rate, msStr(sw.Knee.P99E2EL))
	}
	k += "; " + kneeInterval(a.rates, benches)
	noCI := "every point has one"
	if len(none) > 0 {
		noCI = fmt.Sprintf("none at rate %s: fewer than %d requests", strings.Join(none, ", "), minP99Samples)
	}
	ratio := "n/a (no sample with a running sequence)"
	if all > 0 {
		ratio = fmt.Sprintf("%.2f (%.1f%% of allocated blocks unused; block-granular: a paged sequence's last partial block counts as requested)", req/all, 100*(1-req/all))
	}
	claim := "vLLM 184 QPS, Triton 92 QPS"
	if strings.HasPrefix(a.name, "llama") {
		claim = "vLLM 184 QPS at P99 1247 ms (max-num-seqs 256, max-model-len 4096)"
	}
	rows = append(rows,
		Row{a.name + ": points with a P99 interval", "", noCI},
		Row{a.name + ": peak running sequences (over the ladder)", "paged admits more", fmt.Sprintf("%.0f", peak)},
		Row{a.name + ": KV blocks requested / allocated (mean over 200 ms samples)", "4.2 / 5.6 GB = 0.75; 7.8 / 10.2 GB = 0.76", ratio},
		Row{a.name + ": knee (P99 slope > 120 ms per req/s)", claim, k})
	return rows, peak
}

// kneeInterval brackets the knee by the article's slope rule using each point's P99 interval:
// the earliest rate at which the slope from the previous point could exceed the threshold (upper
// end against lower end), and the earliest at which it does beyond the intervals (lower end
// against upper end). A point without an interval bounds nothing: its P99 could be anything.
func kneeInterval(rates []float64, pts []*report.Bench) string {
	first, sure := math.NaN(), math.NaN()
	for j := 1; j < len(pts); j++ {
		prev, cur := pct(pts[j-1], report.MetricE2EL, 99), pct(pts[j], report.MetricE2EL, 99)
		dq := rates[j] - rates[j-1]
		hiSlope, loSlope := math.Inf(1), math.Inf(-1)
		if prev.HasCI && cur.HasCI {
			hiSlope = float64(cur.Hi-prev.Lo) / 1e6 / dq
			loSlope = float64(cur.Lo-prev.Hi) / 1e6 / dq
		}
		if math.IsNaN(first) && hiSlope > stats.DefaultKneeSlope {
			first = rates[j]
		}
		if math.IsNaN(sure) && loSlope > stats.DefaultKneeSlope {
			sure = rates[j]
		}
	}
	switch {
	case math.IsNaN(first):
		return "interval: the slope stays below the threshold beyond the intervals over the whole ladder"
	case math.IsNaN(sure):
		return fmt.Sprintf("interval: from %g req/s to beyond the ladder (no step exceeds the threshold beyond the P99 intervals)", first)
	default:
		return fmt.Sprintf("interval: %g to %g req/s", first, sure)
	}
}
