package shape

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

// Source says what each request sends. Next is called once per request, in order.
type Source interface {
	Next() loadgen.Request
}

// Open is the open-loop workload: the process says when each request is due, the source what
// it sends. It ends when the process does.
func Open(p Process, s Source) loadgen.Workload { return &open{p: p, s: s} }

type open struct {
	p Process
	s Source
}

func (o *open) Next() (loadgen.Item, bool) {
	at, ok := o.p.Next()
	if !ok {
		return loadgen.Item{}, false
	}
	return loadgen.Item{At: at, Request: o.s.Next()}, true
}

// Length is a range of prompt lengths in tokens, drawn uniformly.
type Length struct {
	Min, Max int
}

// The synthetic prompt lengths, in tokens: short, medium and long prompts as LLM benchmarks
// mix them. Long stays under 1.3k tokens so that it fits a 2k context with 512 output tokens.
var (
	Short  = Length{Min: 64, Max: 192}
	Medium = Length{Min: 384, Max: 640}
	Long   = Length{Min: 768, Max: 1280}
)

// Synthetic returns a source of prompts of random words whose lengths are drawn from the given
// ranges in turn at random (one range for a fixed class, several for a mix). Each word is one
// token for common tokenizers, so PromptTokens is the word count.
func Synthetic(lengths []Length, seed uint64) (Source, error) {
	if len(lengths) == 0 {
		return nil, errors.New("synthetic prompts: no lengths")
	}
	for _, l := range lengths {
		if l.Min < 1 || l.Max < l.Min || l.Max > corpusWords {
			return nil, fmt.Errorf("synthetic prompts: length %d..%d must lie within 1..%d", l.Min, l.Max, corpusWords)
		}
	}
	return &synthetic{lengths: lengths, rng: newRand(seed, streamPrompts)}, nil
}

type synthetic struct {
	lengths []Length
	rng     *rand.Rand
}

func (s *synthetic) Next() loadgen.Request {
	l := s.lengths[s.rng.IntN(len(s.lengths))]
	n := l.Min + s.rng.IntN(l.Max-l.Min+1)
	return loadgen.Request{
		Messages:     []loadgen.Message{{Role: "user", Content: syntheticText(s.rng, 0, n, n)}},
		PromptTokens: n,
	}
}

// ParseLengths parses a synthetic prompt spec: short, medium, long, mixed (all three),
// N (tokens), or MIN-MAX.
func ParseLengths(spec string) ([]Length, error) {
	switch strings.ToLower(strings.TrimSpace(spec)) {
	case "short":
		return []Length{Short}, nil
	case "medium":
		return []Length{Medium}, nil
	case "long":
		return []Length{Long}, nil
	case "mixed", "mix", "":
		return []Length{Short, Medium, Long}, nil
	}
	lo, hi, isRange := strings.Cut(spec, "-")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil {
		return nil, fmt.Errorf("synthetic length %q: want short, medium, long, mixed, N or MIN-MAX tokens", spec)
	}
	b := a
	if isRange {
		if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
			return nil, fmt.Errorf("synthetic length %q: want MIN-MAX tokens", spec)
		}
	}
	if a < 1 || b < a || b > corpusWords {
		return nil, fmt.Errorf("synthetic length %q: want 1 <= MIN <= MAX <= %d", spec, corpusWords)
	}
	return []Length{{Min: a, Max: b}}, nil
}

// Prompts returns a source cycling through the prompts in a seeded random order, shuffled
// afresh on every pass, as vLLM samples its datasets.
func Prompts(prompts []dataset.Prompt, seed uint64) (Source, error) {
	if len(prompts) == 0 {
		return nil, errors.New("dataset has no prompts")
	}
	s := &promptSource{prompts: prompts, rng: newRand(seed, streamPrompts), order: make([]int, len(prompts))}
	s.shuffle()
	return s, nil
}

type promptSource struct {
	prompts []dataset.Prompt
	rng     *rand.Rand
	order   []int
	i       int
}

func (d *promptSource) shuffle() {
	for i := range d.order {
		d.order[i] = i
	}
	d.rng.Shuffle(len(d.order), func(i, j int) { d.order[i], d.order[j] = d.order[j], d.order[i] })
	d.i = 0
}

func (d *promptSource) Next() loadgen.Request {
	if d.i == len(d.order) {
		d.shuffle()
	}
	p := &d.prompts[d.order[d.i]]
	d.i++
	tokens := 0
	for _, m := range p.Messages {
		tokens += dataset.EstimateTokens(m.Content)
	}
	return loadgen.Request{Messages: p.Messages, MaxTokens: p.MaxTokens, PromptTokens: tokens, Extra: p.Extra}
}

// Closed returns a workload for a closed loop: the source's requests, all at offset 0 (a
// closed loop ignores intended times).
func Closed(s Source) loadgen.Workload { return Open(Infinite(), s) }

// Embeddings returns a source of embeddings requests (loadgen.Request.Input): each batches the
// texts of the next batch requests of src, one input per request (its messages' contents
// joined by blank lines), and estimates their tokens as src does.
func Embeddings(src Source, batch int) (Source, error) {
	if batch < 1 || batch > MaxEmbeddingBatch {
		return nil, fmt.Errorf("embeddings batch %d: want 1 to %d inputs", batch, MaxEmbeddingBatch)
	}
	return &embeddings{src: src, batch: batch}, nil
}

// MaxEmbeddingBatch is the most inputs one embeddings request may carry (OpenAI's limit).
const MaxEmbeddingBatch = 2048

type embeddings struct {
	src   Source
	batch int
}

func (e *embeddings) Next() loadgen.Request {
	req := loadgen.Request{Input: make([]string, e.batch)}
	for i := range req.Input {
		r := e.src.Next()
		req.Input[i] = joinContents(r.Messages)
		req.PromptTokens += r.PromptTokens
	}
	return req
}

// joinContents is the text of messages, joined by blank lines.
func joinContents(msgs []loadgen.Message) string {
	if len(msgs) == 1 {
		return msgs[0].Content
	}
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n\n")
}
