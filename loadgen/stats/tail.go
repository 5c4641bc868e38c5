package stats

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// MinTailSamples is the fewest samples a tail analysis is made from. Below it the empirical P99
// is one of the two largest values and a tail index rests on fewer than ten of them.
const MinTailSamples = 100

// Models fitted by FitTail.
const (
	ModelExponential = "exponential" // params rate_per_ms
	ModelLognormal   = "lognormal"   // params mu, sigma (of ln of the value in ms)
	ModelPareto      = "pareto"      // params xm_ms, alpha
)

// z99 is the standard normal's 0.99 quantile.
const z99 = 2.3263478740408408

// floorMS is the smallest value, in ms, the fits take logarithms of: the histogram's resolution.
// A recorded zero (a clock tie) would otherwise make every log-likelihood infinite.
const floorMS = 0.001

// Tail describes the upper tail of a latency distribution: how heavy it is (the Hill estimate
// of the tail index) and which parametric model explains the data best (maximum likelihood,
// compared by AIC), with each model's P99 against the empirical one.
type Tail struct {
	N            int64         // samples analysed
	EmpiricalP99 time.Duration // nearest-rank P99 of the data
	Hill         *Hill         // nil when there are too few samples or the top values are all equal
	Fits         []Fit         // in the order exponential, lognormal, pareto; a degenerate fit is left out
	Best         string        // the model with the lowest AIC; "" when nothing could be fitted
}

// Hill is the Hill estimate of the tail index α of a distribution whose survival function falls
// like x^-α: α̂ = k / Σ_{i<k} ln(X_(n-i) / X_(n-k)) over the k largest of n values, with
// asymptotic standard error α̂/√k. FitTail takes k = ceil(√n): deep enough into the data for a
// usable error (±10% at n = 10,000) and shallow enough to stay in the tail of latencies that
// are Pareto only asymptotically, as the usual bias-variance compromise. α < 2 means infinite
// variance, α < 1 an infinite mean.
type Hill struct {
	Alpha     float64
	SE        float64
	K         int64
	Threshold time.Duration // X_(n-k): the largest value below the top k
}

// Fit is one maximum-likelihood fit. Log-likelihoods are of values in milliseconds, the same
// unit for every model, so their AICs compare.
type Fit struct {
	Model         string
	Params        []Param
	LogLikelihood float64
	AIC           float64       // 2·len(Params) - 2·LogLikelihood
	P99           time.Duration // the fitted model's 0.99 quantile
}

// Param is one fitted parameter with its asymptotic standard error (0 when not estimated).
type Param struct {
	Name  string
	Value float64
	SE    float64
}

// Param returns the value of the named parameter, or NaN.
func (f Fit) Param(name string) float64 {
	for _, p := range f.Params {
		if p.Name == name {
			return p.Value
		}
	}
	return math.NaN()
}

// Quantile is the fitted model's q-quantile, for plotting it against the data. It returns 0
// for an unknown model or a q outside (0, 1).
func (f Fit) Quantile(q float64) time.Duration {
	if !(q > 0 && q < 1) {
		return 0
	}
	var ms float64
	switch f.Model {
	case ModelExponential:
		ms = -math.Log1p(-q) / f.Param("rate_per_ms")
	case ModelLognormal:
		ms = math.Exp(f.Param("mu") + f.Param("sigma")*math.Sqrt2*math.Erfinv(2*q-1))
	case ModelPareto:
		ms = f.Param("xm_ms") * math.Pow(1-q, -1/f.Param("alpha"))
	default:
		return 0
	}
	if math.IsNaN(ms) || ms < 0 {
		return 0
	}
	return msToDuration(ms)
}

// RelativeError is (P99 - empirical) / empirical, e.g. -0.36 for a model that understates the
// P99 by 36%; NaN when empirical is zero.
func (f Fit) RelativeError(empirical time.Duration) float64 {
	if empirical == 0 {
		return math.NaN()
	}
	return float64(f.P99-empirical) / float64(empirical)
}

// Fit returns the fit of the named model, if there is one.
func (t Tail) Fit(model string) (Fit, bool) {
	for _, f := range t.Fits {
		if f.Model == model {
			return f, true
		}
	}
	return Fit{}, false
}

// wsample is a value in ms with a weight: one sample, or a histogram bucket's count.
type wsample struct {
	ms float64
	w  int64
}

// FitTail analyses raw samples (in any order; the slice is not modified). It returns only N when
// there are fewer than MinTailSamples.
func FitTail(samples []time.Duration) Tail {
	n := int64(len(samples))
	if n < MinTailSamples {
		return Tail{N: n}
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	ws := make([]wsample, len(sorted))
	for i, d := range sorted {
		ws[i] = wsample{ms: durationToMS(d), w: 1}
	}
	return fitTail(ws, n, sorted[NearestRank(n, 0.99)-1])
}

// FitTail analyses the recorded values, each bucket taken at its midpoint (HDR precision, a
// relative error below 10^-3, is far inside the estimators' standard errors). A merged
// histogram gives the analysis of the pooled samples.
func (h *Histogram) FitTail() Tail {
	n := h.Count()
	if n < MinTailSamples {
		return Tail{N: n}
	}
	bs := h.buckets().buckets
	ws := make([]wsample, len(bs))
	for i, b := range bs {
		ws[i] = wsample{ms: durationToMS((b.From + b.To) / 2), w: b.Count}
	}
	return fitTail(ws, n, h.Quantile(0.99))
}

// fitTail does the work over values sorted ascending with total weight n >= MinTailSamples.
func fitTail(ws []wsample, n int64, p99 time.Duration) Tail {
	for i := range ws {
		ws[i].ms = math.Max(ws[i].ms, floorMS)
	}
	t := Tail{N: n, EmpiricalP99: p99, Hill: hill(ws, n)}
	nf := float64(n)
	// Logs are taken relative to the minimum: ties with it contribute exactly zero, so a
	// degenerate sample gives exactly zero spread instead of rounding noise.
	xm := ws[0].ms
	var sum, sumRel float64 // Σx and Σ ln(x/x_m)
	for _, s := range ws {
		sum += float64(s.w) * s.ms
		sumRel += float64(s.w) * math.Log(s.ms/xm)
	}
	sumLn := sumRel + nf*math.Log(xm) // Σ ln x

	// Exponential: rate = 1/mean; ℓ = n ln λ - λ Σx = n ln λ - n.
	if mean := sum / nf; mean > 0 {
		rate := 1 / mean
		ll := nf*math.Log(rate) - nf
		t.Fits = append(t.Fits, newFit(ModelExponential, ll, math.Log(100)/rate,
			Param{Name: "rate_per_ms", Value: rate, SE: rate / math.Sqrt(nf)}))
	}

	// Lognormal: μ and σ are the mean and (biased, MLE) standard deviation of ln x;
	// ℓ = -Σ ln x - n ln σ - n/2 ln 2π - n/2.
	relMean := sumRel / nf
	var ss float64
	for _, s := range ws {
		d := math.Log(s.ms/xm) - relMean
		ss += float64(s.w) * d * d
	}
	if sigma := math.Sqrt(ss / nf); sigma > 0 {
		mu := math.Log(xm) + relMean
		ll := -sumLn - nf*math.Log(sigma) - nf/2*math.Log(2*math.Pi) - nf/2
		t.Fits = append(t.Fits, newFit(ModelLognormal, ll, math.Exp(mu+sigma*z99),
			Param{Name: "mu", Value: mu, SE: sigma / math.Sqrt(nf)},
			Param{Name: "sigma", Value: sigma, SE: sigma / math.Sqrt(2*nf)}))
	}

	// Pareto: x_m = min x; α = n / Σ ln(x/x_m); ℓ = n ln α + nα ln x_m - (α+1) Σ ln x. The
	// minimum overshoots x_m by about x_m/(nα), which stands as its error.
	if sumRel > 0 {
		alpha := nf / sumRel
		ll := nf*math.Log(alpha) + nf*alpha*math.Log(xm) - (alpha+1)*sumLn
		t.Fits = append(t.Fits, newFit(ModelPareto, ll, xm*math.Pow(100, 1/alpha),
			Param{Name: "xm_ms", Value: xm, SE: xm / (nf * alpha)},
			Param{Name: "alpha", Value: alpha, SE: alpha / math.Sqrt(nf)}))
	}

	best := math.Inf(1)
	for _, f := range t.Fits {
		if f.AIC < best {
			best, t.Best = f.AIC, f.Model
		}
	}
	return t
}

func newFit(model string, ll, p99ms float64, params ...Param) Fit {
	return Fit{
		Model:         model,
		Params:        params,
		LogLikelihood: ll,
		AIC:           2*float64(len(params)) - 2*ll,
		P99:           msToDuration(p99ms),
	}
}

// hill computes the Hill estimator over the top k = ceil(√n) of values sorted ascending.
func hill(ws []wsample, n int64) *Hill {
	k := int64(math.Ceil(math.Sqrt(float64(n))))
	if k >= n {
		return nil
	}
	remaining := k
	var sumLn, threshold float64
	for i := len(ws) - 1; i >= 0; i-- {
		take := min(ws[i].w, remaining)
		sumLn += float64(take) * math.Log(ws[i].ms)
		remaining -= take
		if remaining == 0 {
			if take < ws[i].w {
				threshold = ws[i].ms
			} else if i > 0 {
				threshold = ws[i-1].ms
			}
			break
		}
	}
	if threshold <= 0 {
		return nil
	}
	denom := sumLn - float64(k)*math.Log(threshold)
	if !(denom > 0) {
		return nil
	}
	alpha := float64(k) / denom
	return &Hill{Alpha: alpha, SE: alpha / math.Sqrt(float64(k)), K: k, Threshold: msToDuration(threshold)}
}

// Verdict says in one or two sentences how heavy the tail is and how far each model's P99 is
// from the data's.
func (t Tail) Verdict() string {
	if t.N < MinTailSamples {
		return fmt.Sprintf("too few samples for a tail analysis (%d < %d)", t.N, MinTailSamples)
	}
	var b strings.Builder
	if h := t.Hill; h != nil {
		switch {
		case h.Alpha < 1:
			fmt.Fprintf(&b, "very heavy tail: Hill α = %.2f ± %.2f (< 1: infinite mean)", h.Alpha, h.SE)
		case h.Alpha < 2:
			fmt.Fprintf(&b, "heavy tail: Hill α = %.2f ± %.2f (< 2: infinite variance; mean and std are unstable)", h.Alpha, h.SE)
		case h.Alpha < 4:
			fmt.Fprintf(&b, "moderately heavy tail: Hill α = %.2f ± %.2f", h.Alpha, h.SE)
		default:
			fmt.Fprintf(&b, "light tail: Hill α = %.1f ± %.1f", h.Alpha, h.SE)
		}
		b.WriteString(". ")
	}
	if t.Best == "" {
		b.WriteString("No model could be fitted (all values equal).")
		return b.String()
	}
	best, _ := t.Fit(t.Best)
	fmt.Fprintf(&b, "Best fit by AIC: %s, P99 %s vs %s empirical (%+.0f%%)", best.Model,
		FormatMS(best.P99), FormatMS(t.EmpiricalP99), 100*best.RelativeError(t.EmpiricalP99))
	var others []string
	for _, f := range t.Fits {
		if f.Model != t.Best {
			others = append(others, fmt.Sprintf("%s %s (%+.0f%%)", f.Model, FormatMS(f.P99), 100*f.RelativeError(t.EmpiricalP99)))
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(&b, "; %s would predict %s", pluralModels(len(others)), strings.Join(others, ", "))
	}
	b.WriteString(".")
	return b.String()
}

func pluralModels(n int) string {
	if n == 1 {
		return "the other model"
	}
	return "the others"
}

// FormatMS formats a duration in milliseconds with three significant digits or more, e.g.
// "215 ms", "1.25 ms", "1247 ms".
func FormatMS(d time.Duration) string {
	ms := durationToMS(d)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.2f ms", ms)
	}
}

func durationToMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msToDuration(ms float64) time.Duration {
	ns := ms * float64(time.Millisecond)
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Round(ns))
}
