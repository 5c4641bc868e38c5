package embed_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/latency"
)

// newHash builds a Hash without simulated latency unless opts set one.
func newHash(tb testing.TB, opts ...embed.Option) *embed.Hash {
	tb.Helper()
	h, err := embed.NewHash(append([]embed.Option{embed.WithLatency(latency.Law{}, 0)}, opts...)...)
	if err != nil {
		tb.Fatalf("NewHash: %v", err)
	}
	return h
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func TestNewHash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		opts      []embed.Option
		wantErr   bool
		wantDim   int
		wantModel string
	}{
		{name: "defaults", wantDim: embed.DefaultDimension, wantModel: "ragtail-hash-384"},
		{name: "dimension names the model", opts: []embed.Option{embed.WithDimension(64)}, wantDim: 64, wantModel: "ragtail-hash-64"},
		{name: "explicit model", opts: []embed.Option{embed.WithModel("bge-small")}, wantDim: 384, wantModel: "bge-small"},
		{name: "zero dimension", opts: []embed.Option{embed.WithDimension(0)}, wantErr: true},
		{name: "negative per-token latency", opts: []embed.Option{embed.WithLatency(latency.Law{}, -time.Millisecond)}, wantErr: true},
		{name: "negative concurrency", opts: []embed.Option{embed.WithConcurrency(-1)}, wantErr: true},
		{name: "unlimited concurrency", opts: []embed.Option{embed.WithConcurrency(0)}, wantDim: 384, wantModel: "ragtail-hash-384"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := embed.NewHash(tt.opts...)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("NewHash succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("NewHash: %v", err)
			}
			if h.Dimension() != tt.wantDim || h.Model() != tt.wantModel {
				t.Errorf("Dimension, Model = %d, %q; want %d, %q", h.Dimension(), h.Model(), tt.wantDim, tt.wantModel)
			}
		})
	}
}

func TestHashVector(t *testing.T) {
	t.Parallel()
	h := newHash(t)
	tests := []struct {
		name     string
		a, b     string
		wantSame bool
	}{
		{name: "case and white space do not matter", a: "Tail Latency of the KV cache", b: "  tail   latency of the kv CACHE\n", wantSame: true},
		{name: "stop words and punctuation do not matter", a: "The tail latency of a cache!", b: "tail latency cache", wantSame: true},
		{name: "unicode case folding", a: "ÜBER Straße", b: "über straße", wantSame: true},
		{name: "punctuation ends a phrase", a: "tail latency, cache", b: "tail latency cache", wantSame: false},
		{name: "word order matters through bigrams", a: "cache eviction policy", b: "policy eviction cache", wantSame: false},
		{name: "different words differ", a: "bloom filter", b: "admission queue", wantSame: false},
		{name: "punctuation-only text is still embedded", a: "?!", b: "...", wantSame: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			va, vb := h.Vector(tt.a), h.Vector(tt.b)
			for _, v := range [][]float32{va, vb} {
				if n := norm(v); math.Abs(n-1) > 1e-5 {
					t.Fatalf("norm = %v, want 1", n)
				}
			}
			if same := embed.Cosine(va, vb) > 1-1e-6; same != tt.wantSame {
				t.Errorf("cosine(%q, %q) = %v; same = %v, want %v", tt.a, tt.b, embed.Cosine(va, vb), same, tt.wantSame)
			}
		})
	}
}

func TestHashVectorDeterministic(t *testing.T) {
	t.Parallel()
	const text = "Continuous batching interleaves prefill and decode steps."
	a := newHash(t).Vector(text)
	b := newHash(t).Vector(text)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("two embedders with the same seed differ at %d: %v vs %v", i, a[i], b[i])
		}
	}
	// Another seed is another model: the same text comes out unrelated.
	other := newHash(t, embed.WithSeed(2)).Vector(text)
	if c := embed.Cosine(a, other); c > 0.5 {
		t.Errorf("cosine across seeds = %v, want an unrelated vector", c)
	}
	if blank := newHash(t).Vector(" \n\t"); norm(blank) != 0 {
		t.Errorf("blank text has norm %v, want the zero vector", norm(blank))
	}
}

func TestHashSimilarityRanksRelatedText(t *testing.T) {
	t.Parallel()
	h := newHash(t)
	tests := []struct {
		name, query, related, unrelated string
	}{
		{
			name:      "shared topic words",
			query:     "How does the bloom filter stop cache penetration?",
			related:   "A bloom filter of existing keys rejects lookups for missing keys before they reach the cache and the store.",
			unrelated: "Continuous batching lets the engine admit new sequences between decode steps.",
		},
		{
			name:      "inflected forms meet through trigrams",
			query:     "latencies of queued requests",
			related:   "latency of a queue of request",
			unrelated: "gradient descent optimiser",
		},
		{
			name:      "phrase order through bigrams",
			query:     "tail latency",
			related:   "tail latency grows with load",
			unrelated: "latency of the tail grows with load",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := h.Vector(tt.query)
			rel, unrel := embed.Cosine(q, h.Vector(tt.related)), embed.Cosine(q, h.Vector(tt.unrelated))
			if rel <= unrel {
				t.Errorf("cosine(related) = %.3f <= cosine(unrelated) = %.3f", rel, unrel)
			}
		})
	}
}

// randomText returns words of 5 to 9 letters drawn from alphabet.
func randomText(r *rand.Rand, alphabet string, words int) string {
	var sb strings.Builder
	for range words {
		for range 5 + r.IntN(5) {
			sb.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		sb.WriteByte(' ')
	}
	return sb.String()
}

// TestHashUnrelatedTextsAreOrthogonal checks the hash family against its analytic behaviour. Two
// texts with no feature in common land on independent random signed positions, so the cosine of
// their unit vectors has mean 0 and standard deviation 1/sqrt(dim) (the sum over feature pairs of
// w_f^2 w_g^2 / dim, with the squared weights of each unit vector summing to 1). A biased sign bit
// would shift the mean; positions that are not uniform would widen the spread.
func TestHashUnrelatedTextsAreOrthogonal(t *testing.T) {
	t.Parallel()
	const pairs = 600
	for _, dim := range []int{64, 384, 1000} {
		t.Run("dim="+strconv.Itoa(dim), func(t *testing.T) {
			t.Parallel()
			h := newHash(t, embed.WithDimension(dim))
			r := rand.New(rand.NewPCG(7, uint64(dim)))
			var m1, m2, m4 float64
			for range pairs {
				// Disjoint alphabets: no word, bigram or trigram in common.
				a := h.Vector(randomText(r, "abcdefghijklm", 12))
				b := h.Vector(randomText(r, "nopqrstuvwxyz", 12))
				c := float64(embed.Cosine(a, b))
				m1 += c / pairs
				m2 += c * c / pairs
				m4 += c * c * c * c / pairs
			}
			sd := math.Sqrt(m2)
			want := 1 / math.Sqrt(float64(dim))
			t.Logf("dim %d: mean %.4f, sd %.4f (analytic 0, %.4f)", dim, m1, sd, want)
			// Four standard errors. The mean's is sd/sqrt(n). The second moment's is
			// sqrt((m4 - m2^2)/n), and by the delta method the standard deviation's is that
			// over 2 sd; the fourth moment is measured because with few colliding features
			// the cosine is heavier-tailed than a normal.
			if tol := 4 * sd / math.Sqrt(pairs); math.Abs(m1) > tol {
				t.Errorf("mean cosine = %.4f, want 0 +- %.4f", m1, tol)
			}
			if tol := 4 * math.Sqrt((m4-m2*m2)/pairs) / (2 * sd); math.Abs(sd-want) > tol {
				t.Errorf("sd of cosine = %.4f, want %.4f +- %.4f", sd, want, tol)
			}
		})
	}
}

func TestHashEmbedMatchesVector(t *testing.T) {
	t.Parallel()
	h := newHash(t)
	ctx := t.Context()
	texts := []string{"paged attention", "load shedding under bursts", "Pareto tails"}
	got, err := h.EmbedBatch(ctx, texts)
	if err != nil {
		t.Fatalf("EmbedBatch: %v", err)
	}
	for i, text := range texts {
		one, err := h.Embed(ctx, text)
		if err != nil {
			t.Fatalf("Embed: %v", err)
		}
		if c := embed.Cosine(one, got[i]); c < 1-1e-6 || c != embed.Cosine(h.Vector(text), one) {
			t.Errorf("text %d: batch, single and Vector disagree", i)
		}
	}
}

func TestHashEmbedRejectsBlankText(t *testing.T) {
	t.Parallel()
	h := newHash(t)
	tests := []struct {
		name  string
		embed func() error
	}{
		{name: "Embed", embed: func() error { _, err := h.Embed(t.Context(), "  \n"); return err }},
		{name: "EmbedBatch", embed: func() error { _, err := h.EmbedBatch(t.Context(), []string{"ok", ""}); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.embed(); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Errorf("error = %v, want rag.ErrInvalidRequest", err)
			}
		})
	}
}

// embedConcurrently runs n Embed calls at once and returns how long all of them took.
func embedConcurrently(tb testing.TB, h *embed.Hash, n int, text string) time.Duration {
	tb.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := h.Embed(context.Background(), text)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			tb.Fatalf("Embed: %v", err)
		}
	}
	return time.Since(start)
}

// TestHashServiceTime checks the simulated server: calls beyond the concurrency limit queue, and
// the service time grows with the input's tokens. Sleeps never end early, so the lower bounds are
// exact; the upper bound for the unqueued case leaves a whole service time of slack.
func TestHashServiceTime(t *testing.T) {
	t.Parallel()
	const service = 25 * time.Millisecond
	const calls = 4
	t.Run("one slot serialises calls", func(t *testing.T) {
		t.Parallel()
		h := newHash(t, embed.WithLatency(latency.Fixed(service), 0), embed.WithConcurrency(1))
		if got := embedConcurrently(t, h, calls, "query"); got < calls*service {
			t.Errorf("%d calls through one slot took %v, want at least %v", calls, got, calls*service)
		}
	})
	t.Run("enough slots do not queue", func(t *testing.T) {
		t.Parallel()
		h := newHash(t, embed.WithLatency(latency.Fixed(service), 0), embed.WithConcurrency(calls))
		got := embedConcurrently(t, h, calls, "query")
		if got < service || got >= (calls-1)*service {
			t.Errorf("%d calls through %d slots took %v, want about %v", calls, calls, got, service)
		}
	})
	t.Run("cost per token", func(t *testing.T) {
		t.Parallel()
		h := newHash(t, embed.WithLatency(latency.Law{}, time.Millisecond))
		text := strings.Repeat("token ", 30)
		want := time.Duration(rag.CountTokens(text)) * time.Millisecond
		if got := embedConcurrently(t, h, 1, text); got < want {
			t.Errorf("embedding %d tokens took %v, want at least %v", rag.CountTokens(text), got, want)
		}
	})
}

func TestHashEmbedContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		deadline    bool
		wantTimeout bool
	}{
		{name: "deadline while queued", deadline: true, wantTimeout: true},
		{name: "cancel while queued", deadline: false, wantTimeout: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHash(t, embed.WithLatency(latency.Fixed(time.Hour), 0), embed.WithConcurrency(1))
			holderCtx, stopHolder := context.WithCancel(context.Background())
			holderDone := make(chan error, 1)
			go func() { _, err := h.Embed(holderCtx, "holds the only slot"); holderDone <- err }()
			defer func() {
				stopHolder()
				if err := <-holderDone; !errors.Is(err, context.Canceled) {
					t.Errorf("holder: error = %v, want context.Canceled", err)
				}
			}()
			testwait.For(t, "the holder to take the slot", func() bool { return h.Busy() == 1 })

			ctx, cancel := context.WithCancel(context.Background())
			if tt.deadline {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			}
			defer cancel()
			errc := make(chan error, 1)
			go func() { _, err := h.Embed(ctx, "waits"); errc <- err }()
			if !tt.deadline {
				testwait.For(t, "the second call to queue", func() bool { return h.Waiting() == 1 })
				cancel()
			}
			var err error
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				t.Fatal("Embed did not return after its context ended")
			}
			if h.Waiting() != 0 || h.Busy() != 1 {
				t.Errorf("Waiting, Busy = %d, %d after the queued call gave up; want 0, 1", h.Waiting(), h.Busy())
			}
			if got := errors.Is(err, rag.ErrTimeout); got != tt.wantTimeout {
				t.Errorf("error = %v; matches rag.ErrTimeout = %v, want %v", err, got, tt.wantTimeout)
			}
			if !errors.Is(err, ctx.Err()) {
				t.Errorf("error = %v, want it to wrap %v", err, ctx.Err())
			}
		})
	}
}
