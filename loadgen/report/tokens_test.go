package report

import (
	"bytes"
	"strings"
	"testing"
)

func TestTokenDetails(t *testing.T) {
	t.Parallel()
	res := syntheticResult(5, 200)
	var cached, reasoning, input int64
	var completed int64
	for i := range res.Records {
		r := &res.Records[i]
		r.CachedTokens, r.ReasoningTokens = r.PromptTokens/2, 3
		if r.OK() {
			completed++
			cached += int64(r.CachedTokens)
			reasoning += 3
			input += int64(r.PromptTokens)
		}
	}
	b := Summarize(res, Options{})
	if b.Completed != completed || b.CachedTokens != cached || b.ReasoningTokens != reasoning {
		t.Fatalf("completed %d cached %d reasoning %d, want %d %d %d (failed requests count in none)",
			b.Completed, b.CachedTokens, b.ReasoningTokens, completed, cached, reasoning)
	}
	ratio, ok := b.PrefixCacheHitRatio()
	if want := float64(cached) / float64(input); !ok || ratio != want {
		t.Fatalf("hit ratio %v, %v; want %v", ratio, ok, want)
	}

	var js, text bytes.Buffer
	if err := WriteJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"total_cached_tokens"`, `"mean_cached_tokens"`, `"prefix_cache_hit_ratio"`, `"total_reasoning_tokens"`} {
		if !strings.Contains(js.String(), key) {
			t.Errorf("JSON has no %s", key)
		}
	}
	f, err := Decode(bytes.NewReader(js.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Bench.CachedTokens != cached || f.Bench.ReasoningTokens != reasoning {
		t.Errorf("read back cached %d reasoning %d, want %d %d", f.Bench.CachedTokens, f.Bench.ReasoningTokens, cached, reasoning)
	}
	if err := WriteText(&text, b); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"Cached prompt tokens", "Prefix cache hit ratio", "Reasoning tokens"} {
		if !strings.Contains(text.String(), row) {
			t.Errorf("text summary has no %q row", row)
		}
	}

	// A server that reports no details: nothing about them in the reports.
	plain := Summarize(syntheticResult(5, 200), Options{})
	js.Reset()
	if err := WriteJSON(&js, plain); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "cached_tokens") || strings.Contains(js.String(), "reasoning_tokens") {
		t.Error("JSON reports token details the server never gave")
	}
}
