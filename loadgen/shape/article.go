package shape

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// ArticleConfig is the article's load shaper (PITFALLS.md, section 8). Each request draws a
// popularity rank r from a Zipf law over Ranks (exponent Alpha) and a burst size b from a
// Poisson law (mean BurstLambda). Its context is BaseTokens + RankTokens x r / Ranks tokens,
// multiplied by 1 + b (a burst sends more context), capped at MaxPromptTokens; the next
// request follows after Gap / (b + 1) (a burst shrinks the gap). The same rank always sends the
// same context, so popular contexts repeat as they would in a cache or prefix cache.
//
// The mean gap is Gap x E[1/(b+1)] = Gap x (1 - e^-lambda) / lambda: with the defaults
// (100 ms, lambda 2.75) about 34.0 ms, 29.4 requests per second. WithRate rescales Gap to
// another mean rate.
type ArticleConfig struct {
	Ranks           int           // popularity ranks N (default 1000)
	Alpha           float64       // Zipf exponent (default 1.2)
	BaseTokens      int           // context tokens at rank 0 (default 512)
	RankTokens      int           // extra context tokens at rank N (default 1024)
	BurstLambda     float64       // mean burst size (default 2.75, the middle of the article's 2.5 to 3)
	Gap             time.Duration // gap before bursts shrink it (default 100 ms)
	MaxPromptTokens int           // cap on a request's context (default 3584: 4096-token context, 512 out); -1 for 32768
}

// DefaultArticle returns the article's figures.
func DefaultArticle() ArticleConfig {
	return ArticleConfig{Ranks: 1000, Alpha: 1.2, BaseTokens: 512, RankTokens: 1024, BurstLambda: 2.75,
		Gap: 100 * time.Millisecond, MaxPromptTokens: 3584}
}

// MeanRate returns the mean request rate the configuration produces, per second.
func (c ArticleConfig) MeanRate() float64 {
	l := c.BurstLambda
	meanShrink := 1.0
	if l > 0 {
		meanShrink = (1 - math.Exp(-l)) / l // E[1/(b+1)] for b ~ Poisson(l)
	}
	return 1 / (c.Gap.Seconds() * meanShrink)
}

// WithRate returns c with Gap rescaled so that the mean rate is rate per second.
func (c ArticleConfig) WithRate(rate float64) ArticleConfig {
	c.Gap = time.Duration(float64(c.Gap) * c.MeanRate() / rate)
	return c
}

// Article returns the article's shaper as a workload; it never ends (stop it with a count or
// a duration).
func Article(c ArticleConfig, seed uint64) (loadgen.Workload, error) {
	switch {
	case c.Ranks < 1:
		return nil, fmt.Errorf("article shape: ranks must be positive, got %d", c.Ranks)
	case c.BaseTokens < 1 || c.RankTokens < 0:
		return nil, fmt.Errorf("article shape: base tokens must be positive and rank tokens not negative, got %d and %d", c.BaseTokens, c.RankTokens)
	case c.BurstLambda < 0 || math.IsNaN(c.BurstLambda) || c.BurstLambda > 50:
		return nil, fmt.Errorf("article shape: burst lambda must be between 0 and 50, got %v", c.BurstLambda)
	case c.Gap <= 0:
		return nil, fmt.Errorf("article shape: gap must be positive, got %v", c.Gap)
	case c.MaxPromptTokens == 0 || c.MaxPromptTokens > corpusWords:
		return nil, fmt.Errorf("article shape: max prompt tokens must be -1 (none) or between 1 and %d, got %d", corpusWords, c.MaxPromptTokens)
	}
	z, err := newZipf(c.Ranks, c.Alpha)
	if err != nil {
		return nil, fmt.Errorf("article shape: %w", err)
	}
	return &article{c: c, zipf: z, rng: newRand(seed, streamArticle)}, nil
}

type article struct {
	c    ArticleConfig
	zipf *zipf
	rng  *rand.Rand
	t    time.Duration
}

func (a *article) Next() (loadgen.Item, bool) {
	rank := a.zipf.rank(a.rng)
	burst := poissonVariate(a.rng, a.c.BurstLambda)
	tokens := float64(a.c.BaseTokens) + float64(a.c.RankTokens)*float64(rank)/float64(a.c.Ranks)
	n := int(math.Round(tokens * float64(burst+1)))
	room := corpusWords / 2
	if a.c.MaxPromptTokens > 0 {
		room = a.c.MaxPromptTokens
	}
	n = min(n, room)
	item := loadgen.Item{At: a.t, Request: loadgen.Request{
		// The rank picks the context: the same rank, the same words (longer when bursting).
		Messages:     []loadgen.Message{{Role: "user", Content: syntheticText(nil, uint64(rank), n, room)}},
		PromptTokens: n,
	}}
	a.t += a.c.Gap / time.Duration(burst+1)
	return item, true
}

// String describes the configuration for reports.
func (c ArticleConfig) String() string {
	return fmt.Sprintf("article(zipf alpha=%g over %d ranks, context %d+%d*rank/N tokens, bursts poisson(%g), gap %v/(burst+1))",
		c.Alpha, c.Ranks, c.BaseTokens, c.RankTokens, c.BurstLambda, c.Gap)
}
