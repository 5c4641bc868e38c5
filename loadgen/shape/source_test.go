package shape

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

func TestSynthetic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec string
		want []Length
	}{
		{"short", []Length{Short}},
		{"mixed", []Length{Short, Medium, Long}},
		{"256", []Length{{256, 256}}},
		{"100-200", []Length{{100, 200}}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			lengths, err := ParseLengths(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if len(lengths) != len(tt.want) || lengths[0] != tt.want[0] {
				t.Fatalf("ParseLengths(%q) = %v, want %v", tt.spec, lengths, tt.want)
			}
			src, err := Synthetic(lengths, 1)
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := lengths[0].Min, lengths[0].Max
			for _, l := range lengths {
				lo, hi = min(lo, l.Min), max(hi, l.Max)
			}
			for range 200 {
				req := src.Next()
				words := len(strings.Fields(req.Messages[0].Content))
				if words != req.PromptTokens || words < lo || words > hi {
					t.Fatalf("prompt of %d words, PromptTokens %d, want %d..%d", words, req.PromptTokens, lo, hi)
				}
			}
		})
	}
	for _, bad := range []string{"huge", "0", "9-3", "1-99999999"} {
		if _, err := ParseLengths(bad); err == nil {
			t.Errorf("ParseLengths(%q) accepted", bad)
		}
	}
}

func TestSyntheticTextSharesPrefixes(t *testing.T) {
	t.Parallel()
	short, long := syntheticText(nil, 7, 50, 400), syntheticText(nil, 7, 300, 400)
	if !strings.HasPrefix(long, short) {
		t.Error("a longer text of the same key does not extend the shorter one")
	}
	if syntheticText(nil, 8, 50, 400) == short {
		t.Error("two keys gave the same text")
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	p, _ := Constant(10)
	src, _ := Synthetic([]Length{{5, 5}}, 1)
	w := Open(p, src)
	for i := range 3 {
		item, ok := w.Next()
		if !ok || item.At != time.Duration(i)*100*time.Millisecond || item.Request.PromptTokens != 5 {
			t.Fatalf("item %d = %+v", i, item)
		}
	}
	steps, _ := Steps([]float64{2}, []time.Duration{time.Second}, 0, 1)
	w = Open(steps, src)
	n := 0
	for _, ok := w.Next(); ok; _, ok = w.Next() {
		n++
	}
	if n != 3 { // Lambda = 0, 1, 2 within the second
		t.Errorf("%d items from a 1 s profile at 2/s, want 3", n)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	const n = 50000
	src, err := Keys(KeyConfig{Count: 200, Hot: 100, Alpha: 1.2, ColdFraction: 0.01, InvalidFraction: 0.02}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var invalid, cold, top int
	for range n {
		req := src.Next()
		if req.Path != dataset.DefaultKeyPath+dataset.EscapeKey(req.Key) {
			t.Fatalf("path %q for key %q", req.Path, req.Key)
		}
		switch {
		case strings.HasPrefix(req.Key, "missing-"):
			invalid++
		case req.Key >= "doc-00100#0":
			cold++
		case req.Key == "doc-00000#0":
			top++
		}
	}
	// Each count is Binomial(n, p): within 4.5 standard errors of n p. The top key's p is the
	// hot share (0.97) times its Zipf probability over 100 ranks.
	h := 0.0
	for k := 1; k <= 100; k++ {
		h += math.Pow(float64(k), -1.2)
	}
	for _, c := range []struct {
		name  string
		got   int
		share float64
	}{{"invalid", invalid, 0.02}, {"cold", cold, 0.01}, {"top", top, 0.97 / h}} {
		if se := math.Sqrt(n * c.share * (1 - c.share)); math.Abs(float64(c.got)-n*c.share) > 4.5*se {
			t.Errorf("%s keys: %d of %d, want %.0f +- %.0f", c.name, c.got, n, n*c.share, 4.5*se)
		}
	}
	if got := dataset.EscapeKey("guides/kv.md#0"); got != "guides/kv.md%230" {
		t.Errorf("EscapeKey = %q", got)
	}
	for _, bad := range []KeyConfig{
		{Pattern: "doc"}, {Pattern: "doc-%d-%d"}, {Count: -1}, {ColdFraction: 0.1},
		{Hot: 10, ColdFraction: 0.7, InvalidFraction: 0.5}, {Alpha: -1},
	} {
		if _, err := Keys(bad, 1); err == nil {
			t.Errorf("Keys(%+v) accepted", bad)
		}
	}
	keys, err := dataset.ReadKeys(strings.NewReader("a#0\n\n  b/c#1  \n"))
	if err != nil || len(keys) != 2 || keys[1] != "b/c#1" {
		t.Errorf("ReadKeys = %q, %v", keys, err)
	}
}

func TestArticle(t *testing.T) {
	t.Parallel()
	const n = 8000
	cfg := DefaultArticle()
	w, err := Article(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Each gap is Gap / (b + 1), so the burst b of every request can be read back from its
	// gap, and with it the rank's share of the context: tokens = (512 + 1024 r/N)(1 + b).
	prev, _ := w.Next()
	var sumB, sumGap float64
	for range n {
		item, _ := w.Next()
		gap := item.At - prev.At
		b := int(math.Round(float64(cfg.Gap)/float64(gap))) - 1
		if b < 0 || cfg.Gap/time.Duration(b+1) != gap {
			t.Fatalf("gap %v is not %v/(b+1)", gap, cfg.Gap)
		}
		sumB += float64(b)
		sumGap += gap.Seconds()
		tokens := prev.Request.PromptTokens
		if words := len(strings.Fields(prev.Request.Messages[0].Content)); words != tokens {
			t.Fatalf("%d words, PromptTokens %d", words, tokens)
		}
		if tokens < cfg.MaxPromptTokens {
			base := float64(tokens) / float64(b+1) // 512 + 1024 r/N, rounded
			if base < 512+1024.0/1000-1 || base > 512+1024+1 {
				t.Fatalf("context %d tokens with burst %d: base %.1f outside [513, 1536]", tokens, b, base)
			}
		} else if tokens != cfg.MaxPromptTokens {
			t.Fatalf("context %d tokens over the cap", tokens)
		}
		prev = item
	}
	// The burst sizes are Poisson(2.75): mean 2.75, standard error sqrt(2.75/n).
	if mean := sumB / n; math.Abs(mean-2.75) > 4.5*math.Sqrt(2.75/n) {
		t.Errorf("mean burst %.3f, want 2.75", mean)
	}
	// The mean rate is 1 / (Gap E[1/(b+1)]); 1/(b+1) lies in (0, 1], so its standard error is
	// at most 0.5/sqrt(n) of Gap.
	wantGap := 1 / cfg.MeanRate()
	if mean := sumGap / n; math.Abs(mean-wantGap) > 4.5*0.5*cfg.Gap.Seconds()/math.Sqrt(n) {
		t.Errorf("mean gap %.5f s, want %.5f s", mean, wantGap)
	}
	if r := cfg.WithRate(100).MeanRate(); math.Abs(r-100) > 1e-4 { // Gap is rounded to whole nanoseconds
		t.Errorf("WithRate(100) gives %v req/s", r)
	}
	for _, bad := range []ArticleConfig{{}, func() ArticleConfig { c := DefaultArticle(); c.Alpha = 0; return c }(),
		func() ArticleConfig { c := DefaultArticle(); c.Gap = 0; return c }()} {
		if _, err := Article(bad, 1); err == nil {
			t.Errorf("Article(%+v) accepted", bad)
		}
	}
}

var _ loadgen.Workload = Open(Infinite(), nil)

func TestEmbeddingsSource(t *testing.T) {
	t.Parallel()
	prompts := []dataset.Prompt{
		{Messages: []loadgen.Message{{Role: "user", Content: "abcdefgh"}}},
		{Messages: []loadgen.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "q"}}},
	}
	src, err := Prompts(prompts, 3)
	if err != nil {
		t.Fatal(err)
	}
	emb, err := Embeddings(src, 4)
	if err != nil {
		t.Fatal(err)
	}
	req := emb.Next()
	if len(req.Input) != 4 || req.Messages != nil {
		t.Fatalf("request %+v: want 4 inputs and no messages", req)
	}
	counts := map[string]int{}
	for _, in := range req.Input {
		counts[in]++
	}
	// Prompts draws each entry once a pass: two passes of two entries.
	if counts["abcdefgh"] != 2 || counts["s\n\nq"] != 2 || req.PromptTokens != 2*(2+1+1) {
		t.Errorf("inputs %q, prompt tokens %d", req.Input, req.PromptTokens)
	}
	for _, bad := range []int{0, -1, MaxEmbeddingBatch + 1} {
		if _, err := Embeddings(src, bad); err == nil {
			t.Errorf("batch %d accepted", bad)
		}
	}
}
