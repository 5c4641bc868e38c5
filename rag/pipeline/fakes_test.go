package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// The test doubles below wait with latency.Sleep on the request context, exactly as the real
// backends do, so that the pipeline's timing and cancellation are exercised on real code paths.

var (
	_ pipeline.Embedder  = (*fakeEmbedder)(nil)
	_ pipeline.Retriever = (*fakeRetriever)(nil)
	_ pipeline.DocStore  = (*fakeDocs)(nil)
	_ pipeline.Generator = (*fakeGenerator)(nil)
	_ pipeline.Admitter  = (*fakeAdmitter)(nil)
	_ pipeline.Sink      = (*recordingSink)(nil)
)

type fakeEmbedder struct {
	delay time.Duration
	err   error
	calls atomic.Int32
	text  atomic.Pointer[string]
}

func (e *fakeEmbedder) Embed(ctx context.Context, text string) ([]float32, error) {
	e.calls.Add(1)
	e.text.Store(&text)
	if err := latency.Sleep(ctx, e.delay); err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, e.err
	}
	return []float32{1, 0, 0, 0}, nil
}

func (e *fakeEmbedder) Dimension() int { return 4 }

// fakeRetriever answers shard s after delays[s] with k hits "s<s>-c<j>" scored 100-10j-s, so
// the merged order is known: every shard's best hit first (shard 0 ahead), then the second
// hits, and so on. hits, if set, replaces that rule.
type fakeRetriever struct {
	delays []time.Duration
	// delayOf, if set, replaces delays: the delay of the call-th search (from 1) of shard.
	delayOf func(call int32, shard int) time.Duration
	errs    []error // per shard; nil entries answer normally
	// errOf, if set, is the error of the call-th search (from 1) of shard, after its delay.
	errOf func(call int32, shard int) error
	hits  func(shard, k int) []rag.Hit

	calls     atomic.Int32
	cancelled atomic.Int32 // searches that ended because their context did
	running   atomic.Int32
	maxRun    atomic.Int32 // most searches running at once
}

func (f *fakeRetriever) Shards() int        { return len(f.delays) }
func (f *fakeRetriever) Collection() string { return "test" }

func (f *fakeRetriever) Search(ctx context.Context, shard int, _ []float32, k int) ([]rag.Hit, error) {
	call := f.calls.Add(1)
	n := f.running.Add(1)
	defer f.running.Add(-1)
	for {
		m := f.maxRun.Load()
		if n <= m || f.maxRun.CompareAndSwap(m, n) {
			break
		}
	}
	d := f.delays[shard]
	if f.delayOf != nil {
		d = f.delayOf(call, shard)
	}
	if err := latency.Sleep(ctx, d); err != nil {
		f.cancelled.Add(1)
		return nil, err
	}
	if shard < len(f.errs) && f.errs[shard] != nil {
		return nil, f.errs[shard]
	}
	if f.errOf != nil {
		if err := f.errOf(call, shard); err != nil {
			return nil, err
		}
	}
	if f.hits != nil {
		return f.hits(shard, k), nil
	}
	hits := make([]rag.Hit, k)
	for j := range hits {
		hits[j] = rag.Hit{ChunkID: chunkID(shard, j), Score: float32(100 - 10*j - shard), Shard: shard}
	}
	return hits, nil
}

func chunkID(shard, rank int) string { return fmt.Sprintf("s%d-c%d", shard, rank) }

type fakeDocs struct {
	delay   time.Duration
	chunks  map[string]rag.Chunk // if set, the store's content; otherwise any id is present
	missing map[string]bool
	errs    map[string]error
	calls   atomic.Int32
}

func (d *fakeDocs) Get(ctx context.Context, id string) (rag.Chunk, error) {
	d.calls.Add(1)
	if err := latency.Sleep(ctx, d.delay); err != nil {
		return rag.Chunk{}, err
	}
	if d.missing[id] {
		return rag.Chunk{}, fmt.Errorf("chunk %q: %w", id, rag.ErrNotFound)
	}
	if err := d.errs[id]; err != nil {
		return rag.Chunk{}, err
	}
	if d.chunks != nil {
		c, ok := d.chunks[id]
		if !ok {
			return rag.Chunk{}, fmt.Errorf("chunk %q: %w", id, rag.ErrNotFound)
		}
		return c, nil
	}
	return rag.Chunk{ID: id, DocID: strings.Split(id, "-")[0], Title: "Title " + id, Text: "text of " + id}, nil
}

// fakeGenerator streams tokens one per delta: the first after firstDelay, each next after
// tokenDelay; the last delta carries the finish reason and, unless noUsage, the usage.
type fakeGenerator struct {
	models     []string
	firstDelay time.Duration
	tokenDelay time.Duration
	tokens     []string
	genErr     error // returned by Generate
	recvErrAt  int   // if > 0, Recv number recvErrAt (1-based) fails with recvErr
	recvErr    error
	noUsage    bool
	noRecord   bool // benchmarks: keep no request or stream

	mu      sync.Mutex
	reqs    []rag.GenRequest
	streams []*fakeStream
}

func (g *fakeGenerator) Models() []string { return g.models }

func (g *fakeGenerator) Generate(ctx context.Context, req rag.GenRequest) (rag.TokenStream, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.genErr != nil {
		return nil, g.genErr
	}
	s := &fakeStream{g: g, ctx: ctx}
	if !g.noRecord {
		g.reqs = append(g.reqs, req)
		g.streams = append(g.streams, s)
	}
	return s, nil
}

func (g *fakeGenerator) lastStream(tb testing.TB) *fakeStream {
	tb.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.streams) == 0 {
		tb.Fatal("Generate was never called")
	}
	return g.streams[len(g.streams)-1]
}

func (g *fakeGenerator) lastRequest(tb testing.TB) rag.GenRequest {
	tb.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.reqs) == 0 {
		tb.Fatal("Generate was never called")
	}
	return g.reqs[len(g.reqs)-1]
}

type fakeStream struct {
	g      *fakeGenerator
	ctx    context.Context
	sent   int
	recvs  atomic.Int32
	closed atomic.Int32 // Close calls
}

func (s *fakeStream) Recv() (rag.Delta, error) {
	n := s.recvs.Add(1)
	if s.closed.Load() > 0 {
		return rag.Delta{}, fmt.Errorf("recv on a closed stream")
	}
	if s.sent == len(s.g.tokens) {
		return rag.Delta{}, io.EOF
	}
	delay := s.g.tokenDelay
	if s.sent == 0 {
		delay = s.g.firstDelay
	}
	if err := latency.Sleep(s.ctx, delay); err != nil {
		return rag.Delta{}, err
	}
	if s.g.recvErrAt > 0 && int(n) == s.g.recvErrAt {
		return rag.Delta{}, s.g.recvErr
	}
	d := rag.Delta{Text: s.g.tokens[s.sent], Tokens: 1}
	s.sent++
	if s.sent == len(s.g.tokens) {
		d.FinishReason = "stop"
		if !s.g.noUsage {
			d.Usage = &rag.Usage{PromptTokens: 42, CompletionTokens: len(s.g.tokens)}
		}
	}
	return d, nil
}

func (s *fakeStream) Close() error {
	s.closed.Add(1)
	return nil
}

// fakeAdmitter hands out slots up to cap and then blocks until ctx ends, or fails with err.
type fakeAdmitter struct {
	err      error
	block    bool
	acquires atomic.Int32
	releases atomic.Int32
}

func (a *fakeAdmitter) Acquire(ctx context.Context) (func(), error) {
	a.acquires.Add(1)
	if a.err != nil {
		return nil, a.err
	}
	if a.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return func() { a.releases.Add(1) }, nil
}

// recordingSink records what the pipeline hands it and fails the test if it is ever called from
// two goroutines at once. onDelta and onProgress, if set, run inside the call and may return an
// error, as a client that went away does.
type recordingSink struct {
	tb         testing.TB
	busy       atomic.Bool
	delay      time.Duration // spent in each Delta call
	onDelta    func(n int) error
	onProgress func(ev pipeline.Progress) error

	mu       sync.Mutex
	events   []string // "progress" or "delta", in call order
	progress []pipeline.Progress
	deltas   []rag.Delta
}

func (s *recordingSink) enter() {
	if !s.busy.CompareAndSwap(false, true) {
		s.tb.Error("sink called concurrently")
	}
}

func (s *recordingSink) Progress(ev pipeline.Progress) error {
	s.enter()
	defer s.busy.Store(false)
	s.mu.Lock()
	s.events = append(s.events, "progress")
	s.progress = append(s.progress, ev)
	s.mu.Unlock()
	if s.onProgress != nil {
		return s.onProgress(ev)
	}
	return nil
}

func (s *recordingSink) Delta(d rag.Delta) error {
	s.enter()
	defer s.busy.Store(false)
	time.Sleep(s.delay) // test double of a slow client write
	s.mu.Lock()
	s.events = append(s.events, "delta")
	s.deltas = append(s.deltas, d)
	n := len(s.deltas)
	s.mu.Unlock()
	if s.onDelta != nil {
		return s.onDelta(n)
	}
	return nil
}

func (s *recordingSink) snapshot() (events []string, progress []pipeline.Progress, deltas []rag.Delta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events), slices.Clone(s.progress), slices.Clone(s.deltas)
}

// backends bundles one set of test doubles.
type backends struct {
	emb  *fakeEmbedder
	ret  *fakeRetriever
	docs *fakeDocs
	gen  *fakeGenerator
}

// zeroLatency returns backends that answer at once: shards of k hits each, every chunk present,
// and a five-token answer.
func zeroLatency(shards int) backends {
	return backends{
		emb:  &fakeEmbedder{},
		ret:  &fakeRetriever{delays: make([]time.Duration, shards)},
		docs: &fakeDocs{},
		gen:  &fakeGenerator{models: []string{"model-a", "model-b"}, tokens: []string{"The", " answer", " is", " 42", "."}},
	}
}

func (b backends) pipeline(tb testing.TB, cfg pipeline.Config, opts ...pipeline.Option) *pipeline.Pipeline {
	tb.Helper()
	p, err := pipeline.New(b.emb, b.ret, b.docs, b.gen, cfg, opts...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return p
}

func query(coupling rag.Coupling, topK int) rag.Query {
	return rag.Query{
		ID: "req-1", Model: "model-a", MaxTokens: 64, Temperature: 0.5, Coupling: coupling, TopK: topK,
		Messages: []rag.Message{{Role: "user", Content: "What is the answer?"}},
	}
}

// checkNoLeak records the goroutine count and returns a func that fails the test unless the
// count comes back down to it. Goroutines that have returned may take a moment to be reaped,
// hence the short poll. Tests using it must not run in parallel with others.
func checkNoLeak(tb testing.TB) func() {
	tb.Helper()
	before := runtime.NumGoroutine()
	return func() {
		tb.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for {
			after := runtime.NumGoroutine()
			if after <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				tb.Fatalf("goroutines: %d before, %d after\n%s", before, after, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func stageDuration(tb testing.TB, res *pipeline.Result, stage rag.Stage) time.Duration {
	tb.Helper()
	t, ok := res.Timing(stage)
	if !ok {
		tb.Fatalf("no %s timing in %v", stage, res.Timings)
	}
	return t.Duration
}

// text returns the text of the deltas the sink got.
func (s *recordingSink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, d := range s.deltas {
		b.WriteString(d.Text)
	}
	return b.String()
}

// progressEvents returns the progress events the sink got.
func (s *recordingSink) progressEvents() []pipeline.Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.progress)
}
