// Package embed turns text into vectors for the RAG pipeline. It owns two embedders: Hash, the
// default, which needs nothing running and simulates the service time of a small embedding model,
// and Client, which calls any OpenAI-compatible /v1/embeddings endpoint (OpenAI, vLLM, Ollama,
// llama.cpp, Hugging Face TEI) through the openai-go SDK, as rag/llm does for chat completions.
//
// Both are safe for concurrent use and return L2-normalised vectors when the model does, so a dot
// product is a cosine similarity.
package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// DefaultDimension is the length of Hash vectors unless WithDimension says otherwise. It is the
// dimension of the small sentence-embedding models (all-MiniLM-L6-v2, bge-small) a hash embedder
// stands in for.
const DefaultDimension = 384

// defaultLatency is the per-call part of Hash's simulated service time: about one forward pass
// of a small embedding model on a GPU-backed embedding server, before its per-token work.
var defaultLatency = latency.Law{Kind: latency.LawLognormal, Scale: 1500 * time.Microsecond, Shape: 0.3, Max: 50 * time.Millisecond}

// DefaultPerToken is the per-input-token part of Hash's simulated service time.
const DefaultPerToken = 4 * time.Microsecond

// Hash is a feature-hashing embedder. Each word, each pair of neighbouring words and each
// character trigram of a word is hashed to a signed position in the vector; the result is
// L2-normalised. Texts that share words score high against each other, unrelated texts score near
// zero, and the same text gives the same vector in every process, so an index built offline
// matches queries embedded online.
//
// Embed and EmbedBatch behave like a call to an embedding server: each call is one forward pass
// taking a base latency drawn from a law plus a cost per input token, and at most a fixed number
// of passes run at once (WithConcurrency); further calls queue. Under load the embed stage
// therefore grows a queueing tail of its own. Vector computes the same embedding without any of
// that, for seeding an index.
//
// A Hash is safe for concurrent use.
type Hash struct {
	dim      int
	seed     uint64
	model    string
	delay    *latency.Delay
	perToken time.Duration
	slots    chan struct{} // nil: unlimited concurrency
	busy     atomic.Int64  // calls in their forward pass
	waiting  atomic.Int64  // calls queued for a slot
}

// Option configures NewHash.
type Option interface{ apply(*hashConfig) }

type hashConfig struct {
	dim         int
	seed        uint64
	model       string
	latency     latency.Law
	perToken    time.Duration
	concurrency int
}

type optionFunc func(*hashConfig)

func (f optionFunc) apply(c *hashConfig) { f(c) }

// WithDimension sets the length of the vectors (default DefaultDimension).
func WithDimension(n int) Option { return optionFunc(func(c *hashConfig) { c.dim = n }) }

// WithSeed selects the hash family and seeds the latency sampler (default 1). Vectors from
// embedders with different seeds are unrelated, like those of two different models.
func WithSeed(seed uint64) Option { return optionFunc(func(c *hashConfig) { c.seed = seed }) }

// WithModel sets the model name reported by Model (default "ragtail-hash-DIM").
func WithModel(name string) Option { return optionFunc(func(c *hashConfig) { c.model = name }) }

// WithLatency sets the simulated service time of one call: a draw from base plus perToken for each
// input token. The default is "lognormal:1.5ms,0.3,50ms" plus DefaultPerToken.
// WithLatency(latency.Law{}, 0) turns the simulation off.
func WithLatency(base latency.Law, perToken time.Duration) Option {
	return optionFunc(func(c *hashConfig) { c.latency, c.perToken = base, perToken })
}

// WithConcurrency sets how many calls are served at once; the rest wait in line, as requests do
// at an embedding server with that many model replicas. 0 means no limit. The default is
// GOMAXPROCS.
func WithConcurrency(n int) Option { return optionFunc(func(c *hashConfig) { c.concurrency = n }) }

// NewHash returns a hash embedder.
func NewHash(opts ...Option) (*Hash, error) {
	cfg := hashConfig{
		dim:         DefaultDimension,
		seed:        1,
		latency:     defaultLatency,
		perToken:    DefaultPerToken,
		concurrency: runtime.GOMAXPROCS(0),
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case cfg.dim < 1:
		return nil, fmt.Errorf("hash embedder: dimension %d must be at least 1", cfg.dim)
	case cfg.perToken < 0:
		return nil, fmt.Errorf("hash embedder: per-token latency %v must not be negative", cfg.perToken)
	case cfg.concurrency < 0:
		return nil, fmt.Errorf("hash embedder: concurrency %d must not be negative (0 means no limit)", cfg.concurrency)
	}
	if cfg.model == "" {
		cfg.model = "ragtail-hash-" + strconv.Itoa(cfg.dim)
	}
	h := &Hash{
		dim:      cfg.dim,
		seed:     cfg.seed,
		model:    cfg.model,
		delay:    latency.NewDelay(cfg.latency, cfg.seed),
		perToken: cfg.perToken,
	}
	if cfg.concurrency > 0 {
		h.slots = make(chan struct{}, cfg.concurrency)
	}
	return h, nil
}

// Dimension is the length of the vectors h returns.
func (h *Hash) Dimension() int { return h.dim }

// Model is the model name, for span names and metric labels.
func (h *Hash) Model() string { return h.model }

// Embed returns the embedding of text after the simulated service time. It fails with
// rag.ErrInvalidRequest if text is blank, and with ctx's error (wrapping rag.ErrTimeout for a
// deadline) if ctx ends first.
func (h *Hash) Embed(ctx context.Context, text string) ([]float32, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("%w: text to embed is empty", rag.ErrInvalidRequest)
	}
	if err := h.serve(ctx, rag.CountTokens(text)); err != nil {
		return nil, err
	}
	return h.Vector(text), nil
}

// EmbedBatch returns the embeddings of texts, in order, as one simulated forward pass: one base
// latency plus the per-token cost of all texts together.
func (h *Hash) EmbedBatch(ctx context.Context, texts []string) ([][]float32, error) {
	tokens := 0
	for i, t := range texts {
		if strings.TrimSpace(t) == "" {
			return nil, fmt.Errorf("%w: text %d to embed is empty", rag.ErrInvalidRequest, i)
		}
		tokens += rag.CountTokens(t)
	}
	if len(texts) == 0 {
		return nil, nil
	}
	if err := h.serve(ctx, tokens); err != nil {
		return nil, err
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = h.Vector(t)
	}
	return out, nil
}

// Busy is the number of calls in their forward pass, at most the concurrency limit.
func (h *Hash) Busy() int { return int(h.busy.Load()) }

// Waiting is the number of calls queued for a free slot: the embedder's queue depth.
func (h *Hash) Waiting() int { return int(h.waiting.Load()) }

// serve waits for a model slot and then for the service time of one forward pass over tokens.
func (h *Hash) serve(ctx context.Context, tokens int) error {
	if h.slots != nil {
		h.waiting.Add(1)
		select {
		case h.slots <- struct{}{}:
			h.waiting.Add(-1)
			defer func() { <-h.slots }()
		case <-ctx.Done():
			h.waiting.Add(-1)
			return ctxError("wait for a model slot", ctx.Err())
		}
	}
	h.busy.Add(1)
	defer h.busy.Add(-1)
	service := h.delay.Sample() + time.Duration(tokens)*h.perToken
	if err := latency.Sleep(ctx, service); err != nil {
		return ctxError("forward pass", err)
	}
	return nil
}

// ctxError wraps a context error; a deadline also matches rag.ErrTimeout so that the HTTP layer
// answers 504. Messages carry no "embed:" prefix because the pipeline adds the stage.
func ctxError(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w (%w)", what, rag.ErrTimeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Vector returns the embedding of text at once, without simulated latency. It is the same vector
// Embed returns. Blank text gives the zero vector.
func (h *Hash) Vector(text string) []float32 {
	v := make([]float32, h.dim)
	h.accumulate(v, text)
	normalize(v)
	return v
}

// Feature weights. Words carry the meaning; bigrams add phrase information; character trigrams
// let inflected forms ("latency", "latencies") and typos meet part-way. The trigrams of one word
// share a total weight so that long words do not dominate.
const (
	wordWeight    = 1.0
	bigramWeight  = 0.5
	trigramWeight = 0.5
)

func (h *Hash) accumulate(v []float32, text string) {
	words := rag.Words(text)
	// Punctuation says nothing about the topic and stop words are in every text; both are
	// skipped unless the text has nothing else.
	content := 0
	for _, w := range words {
		if isWord(w) && !stopWords[hashFold(w, 0)] {
			content++
		}
	}
	var prev uint64
	havePrev := false
	for _, w := range words {
		if content > 0 {
			if !isWord(w) {
				havePrev = false // punctuation ends a phrase
				continue
			}
			if stopWords[hashFold(w, 0)] {
				continue // "cost of the cache" still pairs "cost" with "cache"
			}
		}
		hw := hashFold(w, h.seed)
		h.add(v, hw, wordWeight)
		if havePrev {
			h.add(v, mix(prev^rotl(hw, 17)^0x5bd1e995), bigramWeight)
		}
		prev, havePrev = hw, true
		h.trigrams(v, w)
	}
}

// trigrams adds the character trigrams of "<w>" (w lower-cased, "<" and ">" marking its ends).
func (h *Hash) trigrams(v []float32, w string) {
	var r [3]rune
	n := 0
	count := utf8.RuneCountInString(w) // "<w>" has count+2 runes, so count trigrams
	if count < 2 {
		return
	}
	weight := float32(trigramWeight / math.Sqrt(float64(count)))
	emit := func() {
		x := h.seed ^ 0x27d4eb2f165667c5
		for _, c := range r {
			x = mix(x ^ uint64(c))
		}
		h.add(v, x, weight)
	}
	push := func(c rune) {
		r[0], r[1], r[2] = r[1], r[2], c
		if n++; n >= 3 {
			emit()
		}
	}
	push('<')
	for _, c := range w {
		push(foldRune(c))
	}
	push('>')
}

// add puts weight at the position and with the sign hash x selects.
func (h *Hash) add(v []float32, x uint64, weight float32) {
	x = mix(x)
	i := (x >> 32) * uint64(h.dim) >> 32 // multiply-shift range reduction on the high bits
	if x&1 == 0 {
		weight = -weight
	}
	v[i] += weight
}

func normalize(v []float32) {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(sum))
	for i := range v {
		v[i] *= inv
	}
}

// Cosine returns the cosine similarity of a and b, or 0 if either is zero or their lengths
// differ.
func Cosine(a, b []float32) float32 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return float32(dot / math.Sqrt(na*nb))
}
