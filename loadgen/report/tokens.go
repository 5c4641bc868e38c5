package report

import (
	"fmt"
	"math"
	"math/bits"
)

// maxTokenBins bounds the bins of TokenLengths (2^63 tokens is beyond any length).
const maxTokenBins = 64

// TokenLengths counts the completed requests by prompt (Input) and output token length in
// power-of-two bins: bin 0 holds lengths 0 and 1, bin k >= 1 the lengths in [2^k, 2^(k+1)).
// Bins are exact counts, so merged runs add up bin by bin.
type TokenLengths struct {
	Input, Output []int64
}

// tokenBin is the bin of a length n.
func tokenBin(n int) int {
	if n < 2 {
		return 0
	}
	return bits.Len(uint(n)) - 1
}

func countInto(dst []int64, bin int) []int64 {
	for len(dst) <= bin {
		dst = append(dst, 0)
	}
	dst[bin]++
	return dst
}

func (t *TokenLengths) add(in, out int) {
	t.Input = countInto(t.Input, tokenBin(in))
	t.Output = countInto(t.Output, tokenBin(out))
}

func addBins(dst, src []int64) []int64 {
	for len(dst) < len(src) {
		dst = append(dst, 0)
	}
	for i, c := range src {
		dst[i] += c
	}
	return dst
}

func (t *TokenLengths) merge(o TokenLengths) {
	t.Input = addBins(t.Input, o.Input)
	t.Output = addBins(t.Output, o.Output)
}

// tokenBinRange is the lengths [lo, hi] of bin k.
func tokenBinRange(k int) (lo, hi float64) {
	if k == 0 {
		return 0, 1
	}
	return math.Ldexp(1, k), math.Ldexp(1, k+1) - 1
}

// tokenLengthsJSON is the file form of TokenLengths.
type tokenLengthsJSON struct {
	Bins   string  `json:"bins"`
	Input  []count `json:"input"`
	Output []count `json:"output"`
}

func tokenLengthsObject(t TokenLengths) tokenLengthsJSON {
	counts := func(bins []int64) []count {
		out := make([]count, len(bins))
		for i, n := range bins {
			out[i] = count(n)
		}
		return out
	}
	return tokenLengthsJSON{Bins: "log2", Input: counts(t.Input), Output: counts(t.Output)}
}

// lengths are the TokenLengths of the file's object.
func (t *tokenLengthsJSON) lengths(c *checker) TokenLengths {
	if t.Bins != "" && t.Bins != "log2" {
		c.fail("token_lengths.bins", "unknown binning %q (want log2)", t.Bins)
	}
	counts := func(key string, bins []count) []int64 {
		if len(bins) > maxTokenBins {
			c.fail("token_lengths."+key, "%d bins, more than %d", len(bins), maxTokenBins)
			return nil
		}
		var out []int64
		for _, n := range bins {
			out = append(out, int64(n))
		}
		return out
	}
	return TokenLengths{Input: counts("input", t.Input), Output: counts("output", t.Output)}
}

// tokenLengthsHTML draws the two distributions as bars over log-scaled lengths.
func tokenLengthCharts(b *Bench) blocks {
	var v blocks
	for i, s := range []struct {
		name string
		bins []int64
	}{{"Input (prompt)", b.TokenLengths.Input}, {"Output", b.TokenLengths.Output}} {
		var n int64
		pts := make([]pt, 0, len(s.bins))
		for k, c := range s.bins {
			n += c
			if n == 0 {
				continue // leading empty bins would only stretch the axis
			}
			lo, hi := tokenBinRange(k)
			pts = append(pts, pt{X: math.Max(lo, 0.5), X2: hi + 1, Y: float64(c)})
		}
		if n == 0 || (len(s.bins) == 1 && i == 0) {
			continue // no requests, or no prompt counts reported (every length in bin 0)
		}
		v.Pair = append(v.Pair, chart{Title: fmt.Sprintf("%s token lengths (n=%d, power-of-two bins)", s.name, n),
			XLabel: "tokens (log scale)", YLabel: "requests", XLog: true, YFromZero: true, W: 480, H: 300,
			Series: []series{{Mode: modeBars, Color: palette[[]int{0, 4}[i]], Pts: pts}}}.render())
	}
	if len(v.Pair) == 0 {
		v.Empty = "No token counts: no request completed, or the target reported no usage."
	}
	return v
}

// Token details the server reports in usage: prompt tokens its prefix cache held
// (usage.prompt_tokens_details.cached_tokens) and reasoning tokens among the output
// (usage.completion_tokens_details.reasoning_tokens). A server that reports neither leaves both
// zero, and the reports leave them out.

// PrefixCacheHitRatio is the fraction of the completed requests' prompt tokens the server's
// prefix cache held; ok is false when the server reported no cached token.
func (b *Bench) PrefixCacheHitRatio() (ratio float64, ok bool) {
	if b.CachedTokens <= 0 || b.InputTokens <= 0 {
		return 0, false
	}
	return float64(b.CachedTokens) / float64(b.InputTokens), true
}

// tokenDetailsJSON are the token details of a bench document, only those the server reported.
type tokenDetailsJSON struct {
	TotalCachedTokens    count            `json:"total_cached_tokens,omitempty"`
	MeanCachedTokens     *derived[amount] `json:"mean_cached_tokens,omitempty"`
	PrefixCacheHitRatio  *derived[amount] `json:"prefix_cache_hit_ratio,omitempty"`
	TotalReasoningTokens count            `json:"total_reasoning_tokens,omitempty"`
}

// tokenDetails are the token details of b, only those the server reported.
func (b *Bench) tokenDetails() tokenDetailsJSON {
	var t tokenDetailsJSON
	if ratio, ok := b.PrefixCacheHitRatio(); ok {
		t.TotalCachedTokens = count(b.CachedTokens)
		t.MeanCachedTokens = &derived[amount]{amount(sig(float64(b.CachedTokens) / float64(max(b.Completed, 1))))}
		t.PrefixCacheHitRatio = &derived[amount]{amount(sig(ratio))}
	}
	t.TotalReasoningTokens = count(max(b.ReasoningTokens, 0))
	return t
}

// tokenDetailRows writes the token details to the text summary.
func (t *textWriter) tokenDetailRows(b *Bench) {
	if ratio, ok := b.PrefixCacheHitRatio(); ok {
		t.row("Cached prompt tokens", "%d (%.1f per request)", b.CachedTokens, float64(b.CachedTokens)/float64(max(b.Completed, 1)))
		t.row("Prefix cache hit ratio", "%.3f", ratio)
	}
	if b.ReasoningTokens > 0 {
		t.row("Reasoning tokens", "%d (within the generated tokens)", b.ReasoningTokens)
	}
}
