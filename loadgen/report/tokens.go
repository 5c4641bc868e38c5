package report

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

// tokenDetailFields are the JSON fields of the token details, only those the server reported.
func (b *Bench) tokenDetailFields() []field {
	var o []field
	if ratio, ok := b.PrefixCacheHitRatio(); ok {
		o = append(o, field{"total_cached_tokens", b.CachedTokens},
			field{"mean_cached_tokens", sig(float64(b.CachedTokens) / float64(max(b.Completed, 1)))},
			field{"prefix_cache_hit_ratio", sig(ratio)})
	}
	if b.ReasoningTokens > 0 {
		o = append(o, field{"total_reasoning_tokens", b.ReasoningTokens})
	}
	return o
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
