// Package llmsim is a simulated LLM inference engine and its OpenAI-compatible HTTP handler. It
// is ragtail's default generator and what `ragtail llm-sim` serves.
//
// The engine is not a sleep per token: a loop runs steps the way vLLM's scheduler does, with
// continuous batching. Each step decodes one token for every running sequence and spends the
// rest of a token budget on prefilling prompts; a step's duration follows a cost model
// (Profile.StepTime) in which a fixed weight read, the batch size, the context lengths and the
// prefill tokens all count. Requests beyond the running-sequence cap wait in a queue (first come
// first served, or by request priority under PolicyPriority), the KV cache is a finite number of
// blocks handed out paged (on demand, preempting a running sequence when they run out: the most
// recently admitted, or the lowest-priority one) or contiguous (reserved up front), and time to
// first token, time per output token and throughput emerge from these mechanisms. With prefix
// caching (Profile.PrefixCaching) full prompt blocks are named by a hash chain and shared:
// a request whose prompt starts with cached blocks skips their prefill, and cached blocks no
// request holds are kept until their memory is needed. A request may reason (produce reasoning
// tokens) before its answer.
//
// In real time the loop sleeps each step's duration, so tokens pace like a real server's. In
// virtual time (WithVirtualTime) steps only advance the engine clock: runs are deterministic
// and instant, which is how the tests check queueing and batching against the cost model.
package llmsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/openai"
)

// ErrClosed is returned by Generate, and by the streams still running, once the engine is
// closed. It matches rag.ErrUnavailable, so the API reports it as 503.
var ErrClosed = fmt.Errorf("llm-sim engine closed: %w", rag.ErrUnavailable)

// errStreamClosed is what Recv returns after the caller closed the stream itself.
var errStreamClosed = errors.New("llm-sim stream closed")

type config struct {
	virtual     bool
	seed        uint64
	alloc       AllocMode
	logger      *slog.Logger
	startPaused bool
	aliases     []string
	reasoning   int
	policy      SchedulingPolicy
	toolLaw     ToolCallLaw
}

// Option configures an Engine.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithVirtualTime makes steps advance the engine clock without sleeping: a run is as fast as
// the machine allows and deterministic, and every time the engine reports (Now, Timeline,
// metrics) is simulated time. The engine does not wait for clients in virtual time: a request
// arrives at whatever time the loop has reached, so submit a workload while the engine is
// paused (WithStartPaused, Pause) and then Resume or Step, rather than trickling requests in
// from other goroutines.
func WithVirtualTime() Option { return optionFunc(func(c *config) { c.virtual = true }) }

// WithSeed sets the seed mixed into the choice of output words (default 1).
func WithSeed(seed uint64) Option { return optionFunc(func(c *config) { c.seed = seed }) }

// WithAlloc overrides the profile's KV-cache allocation mode.
func WithAlloc(mode AllocMode) Option { return optionFunc(func(c *config) { c.alloc = mode }) }

// WithLogger sets the logger for engine events (preemptions at debug level). The default
// discards them.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithStartPaused creates the engine paused: requests queue up but no step runs until Resume
// (or Step in virtual time). Tests use it to submit a burst that the scheduler sees at once.
func WithStartPaused() Option { return optionFunc(func(c *config) { c.startPaused = true }) }

// WithModelNames adds names under which the engine also serves the profile's model (like
// vLLM's --served-model-name).
func WithModelNames(names ...string) Option {
	return optionFunc(func(c *config) { c.aliases = append(c.aliases, names...) })
}

// WithReasoningTokens makes every request think n tokens before its answer, unless the request
// says otherwise (WithRequestReasoning): the engine produces them like any output token, the
// stream delivers them apart (Stream.RecvOutput) and usage counts them in CompletionTokens and
// ReasoningTokens. They come out of the request's max_tokens, as in vLLM: a request whose
// max_tokens is not above n produces only reasoning. The default is 0.
func WithReasoningTokens(n int) Option {
	return optionFunc(func(c *config) { c.reasoning = max(n, 0) })
}

// WithToolCalls sets the law of how many tool calls a question needs before the model answers
// in text (default DefaultToolCallLaw). See Submit.
func WithToolCalls(law ToolCallLaw) Option {
	return optionFunc(func(c *config) { c.toolLaw = law.orDefault() })
}

// RequestOption configures one request of Submit.
type RequestOption interface{ applyRequest(*requestConfig) }

type requestConfig struct {
	reasoning int
	parallel  bool   // parallel tool calls allowed
	tool      string // the function tool_choice names, if any
}

type requestOptionFunc func(*requestConfig)

func (f requestOptionFunc) applyRequest(c *requestConfig) { f(c) }

// WithRequestReasoning sets the reasoning tokens of one request, overriding WithReasoningTokens;
// 0 means none.
func WithRequestReasoning(n int) RequestOption {
	return requestOptionFunc(func(c *requestConfig) { c.reasoning = max(n, 0) })
}

// WithRequestParallelToolCalls allows the request's model to make two tool calls in one answer
// (OpenAI's parallel_tool_calls), which it does when its question needs two or more further
// calls. The default is one call per answer.
func WithRequestParallelToolCalls(allowed bool) RequestOption {
	return requestOptionFunc(func(c *requestConfig) { c.parallel = allowed })
}

// WithRequestTool makes the request's model call the named function, which must be one of the
// request's tools (OpenAI's tool_choice naming a function): it calls it whatever the law says.
func WithRequestTool(name string) RequestOption {
	return requestOptionFunc(func(c *requestConfig) { c.tool = name })
}

// Engine is a simulated inference engine running one profile. Its methods are safe for
// concurrent use. Close it to stop its loop.
type Engine struct {
	prof    Profile
	cfg     config
	models  []string
	started time.Time
	log     *slog.Logger
	metrics *metrics
	toolLaw atomic.Pointer[ToolCallLaw] // starts as cfg.toolLaw; SetToolCalls changes it

	ctx      context.Context // cancelled by Close; interrupts a real-time step
	cancel   context.CancelFunc
	wake     chan struct{} // 1-buffered: new work, resume or freed blocks
	loopDone chan struct{}
	closing  sync.Once

	mu      sync.Mutex
	closed  bool
	paused  bool
	clock   time.Duration // virtual time: sum of step durations
	waiting []*sequence   // in policy order (see SchedulingPolicy)
	running []*sequence   // in admission order
	policy  SchedulingPolicy
	arrived uint64 // sequences submitted so far: the arrival order of the next one
	kv      *kvCache
	plan    []planItem
	stats   Stats
	// stepStart and stepLen describe the step running in real time (stepLen 0: none), so that a
	// request arriving during it is charged only the rest of it (modelledNow).
	stepStart time.Time
	stepLen   time.Duration
}

// sequence states.
type seqState int

const (
	seqWaiting seqState = iota
	seqRunning
	seqDone // finished, aborted or failed: holds no blocks and is in no queue
)

// sequence is one request inside the engine. Its scheduling fields are guarded by Engine.mu;
// its output queue has its own lock so that readers never hold up the engine loop.
type sequence struct {
	id        string
	prompt    int // prompt tokens
	maxTokens int
	usage     rag.Usage

	reasoning int       // the first output tokens that are reasoning
	outputLen int       // output tokens the sequence produces: maxTokens, or fewer when its tool calls end first
	finishAs  string    // its finish reason: "length", or "tool_calls" when its tool calls end before max_tokens
	tools     *toolPlan // the tool calls it makes after its reasoning; nil for a text answer
	priority  int       // lower runs first under PolicyPriority
	order     uint64    // arrival order, the tie-break between equal priorities
	hashes    []uint64  // hash chain of the prompt's full blocks; nil without prefix caching

	state         seqState
	generated     int // output tokens produced so far
	prefillTarget int // tokens to prefill since the last admission: prompt (+ output after a preemption)
	prefilled     int // tokens whose KV is in the cache: prefix-cache hits and prefill so far
	blocks        int // private blocks held
	shared        []*cachedBlock
	registered    int // prompt blocks offered to the prefix cache since the last admission
	lastTokenAt   time.Duration
	arrivedBusy   time.Duration // modelledNow at arrival
	words         *wordSource
	timeline      Timeline

	out outbox
}

// planItem is one sequence's work in a step: prefill tokens, or a decode when prefill is 0.
type planItem struct {
	seq     *sequence
	prefill int
}

// New returns an engine running profile p and starts its loop. The profile is validated first.
func New(p Profile, opts ...Option) (*Engine, error) {
	cfg := config{seed: 1, alloc: p.Alloc, toolLaw: DefaultToolCallLaw}
	for _, o := range opts {
		o.apply(&cfg)
	}
	policy, err := ParseSchedulingPolicy(string(cfg.policy))
	if err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	p.Alloc = cfg.alloc
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	models := []string{p.Model}
	for _, a := range cfg.aliases {
		if a != "" && !slices.Contains(models, a) {
			models = append(models, a)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		prof:     p,
		cfg:      cfg,
		models:   models,
		started:  time.Now(),
		log:      cfg.logger.With("component", "llm-sim", "profile", p.Name),
		ctx:      ctx,
		cancel:   cancel,
		wake:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
		paused:   cfg.startPaused,
		policy:   policy,
		kv:       newKVCache(p.NumBlocks, p.PrefixCaching),
	}
	e.toolLaw.Store(&cfg.toolLaw)
	e.metrics = newMetrics(e)
	go e.loop()
	return e, nil
}

// Profile returns the profile the engine runs (with any WithAlloc override applied).
func (e *Engine) Profile() Profile { return e.prof }

// ToolCalls returns the engine's law of how many tool calls a question needs.
func (e *Engine) ToolCalls() ToolCallLaw { return *e.toolLaw.Load() }

// SetToolCalls changes the law of a running engine; requests planned from then on follow it
// (a conversation already under way gets its further calls from the new law).
func (e *Engine) SetToolCalls(law ToolCallLaw) {
	law = law.orDefault()
	e.toolLaw.Store(&law)
}

// Models lists the model names the engine serves: the profile's model, then the aliases.
func (e *Engine) Models() []string { return slices.Clone(e.models) }

// Collector returns the engine's Prometheus metrics under vLLM's names (see NewHandler), to
// register on any registry.
func (e *Engine) Collector() prometheus.Collector { return e.metrics }

// Now returns the engine clock: the time since New in real time, the sum of the step durations
// in virtual time.
func (e *Engine) Now() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now()
}

func (e *Engine) now() time.Duration {
	if e.cfg.virtual {
		return e.clock
	}
	return time.Since(e.started)
}

// Pause stops the engine from starting further steps; requests keep queueing.
func (e *Engine) Pause() {
	e.mu.Lock()
	e.paused = true
	e.mu.Unlock()
}

// Resume lets a paused engine step again.
func (e *Engine) Resume() {
	e.mu.Lock()
	e.paused = false
	e.mu.Unlock()
	e.signal()
}

// Step runs one step at once, in the caller's goroutine, and describes it; a zero StepInfo
// means there was nothing to do. It needs a paused engine in virtual time, so that tests can
// drive the scheduler step by step.
func (e *Engine) Step() (StepInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return StepInfo{}, ErrClosed
	case !e.cfg.virtual || !e.paused:
		return StepInfo{}, errors.New("llm-sim step: the engine must be paused and in virtual time")
	}
	info := e.schedule()
	if info.Seqs == 0 {
		return StepInfo{}, nil
	}
	e.clock += info.Duration
	e.apply(&info)
	return info, nil
}

// Close stops the engine loop, fails every outstanding stream with ErrClosed and frees its
// blocks. It is idempotent and always returns nil.
func (e *Engine) Close() error {
	e.closing.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		e.cancel()
		<-e.loopDone
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, s := range append(e.running, e.waiting...) {
			e.release(s)
			s.out.fail(ErrClosed)
		}
		e.running, e.waiting = nil, nil
	})
	return nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Generate starts a completion; it implements the pipeline's Generator. See Submit.
func (e *Engine) Generate(ctx context.Context, req rag.GenRequest) (rag.TokenStream, error) {
	s, err := e.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Submit queues a completion and returns its stream. An empty req.Model means the profile's
// model; any other name must be one of Models (else the error wraps rag.ErrUnknownModel).
// MaxTokens 0 means the rest of the context window, as vLLM does without max_tokens. A
// request whose prompt and completion exceed MaxModelLen is refused with an error wrapping
// rag.ErrInvalidRequest. A text answer is always MaxTokens tokens long (finish reason
// "length"), reasoning included. Cancelling ctx aborts the sequence and frees its blocks at once.
//
// A request that offers tools (req.Tools, with req.ToolChoice not "none") is answered with
// tool calls while its question needs more (see ToolCallLaw and planToolCalls): the calls'
// tokens are generated like any output token after the reasoning, and the stream delivers
// them as rag.ToolCallDelta pieces, as OpenAI streams them (a call's first piece carries its
// index, id and name, the next ones its arguments), ending with finish reason "tool_calls"
// (or "length" when max_tokens cuts them short). The tools' definitions and the tool calls of
// the conversation count in the prompt, laid out as a chat template does (templated), so a
// tool loop's next prompt extends the previous one and finds its blocks in the prefix cache.
func (e *Engine) Submit(ctx context.Context, req rag.GenRequest, opts ...RequestOption) (*Stream, error) {
	rc := requestConfig{reasoning: e.cfg.reasoning, parallel: req.ParallelToolCalls}
	for _, o := range opts {
		o.applyRequest(&rc)
	}
	model := req.Model
	if model == "" {
		model = e.prof.Model
	}
	if !slices.Contains(e.models, model) {
		return nil, fmt.Errorf("%w: the model %q does not exist here: use one of %s", rag.ErrUnknownModel, req.Model, strings.Join(e.models, ", "))
	}
	if len(req.Messages) == 0 {
		return nil, fmt.Errorf("%w: generate: no messages", rag.ErrInvalidRequest)
	}
	laidOut := templated(req)
	prompt := rag.PromptTokens(laidOut)
	maxTokens := req.MaxTokens
	switch {
	case maxTokens < 0:
		return nil, fmt.Errorf("%w: max_tokens must be at least 1, got %d", rag.ErrInvalidRequest, maxTokens)
	case maxTokens == 0:
		maxTokens = e.prof.MaxModelLen - prompt
	}
	if maxTokens < 1 || prompt+maxTokens > e.prof.MaxModelLen {
		return nil, &openai.HTTPError{
			Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Param: "messages",
			Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens "+
				"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				e.prof.MaxModelLen, prompt+max(maxTokens, 0), prompt, max(maxTokens, 0)),
			Err: rag.ErrInvalidRequest,
		}
	}
	if req.Priority < -MaxPriority || req.Priority > MaxPriority {
		return nil, &openai.HTTPError{Status: 400, Type: "invalid_request_error", Param: "priority",
			Message: fmt.Sprintf("priority must be between %d and %d, got %d", -MaxPriority, MaxPriority, req.Priority),
			Err:     rag.ErrInvalidRequest}
	}
	plan, err := e.planToolCalls(req, rc)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &sequence{
		id:        req.ID,
		prompt:    prompt,
		maxTokens: maxTokens,
		reasoning: min(rc.reasoning, maxTokens),
		outputLen: maxTokens,
		finishAs:  "length",
		tools:     plan,
		priority:  req.Priority,
		usage:     rag.Usage{PromptTokens: prompt},
		words:     newWordSource(req, e.cfg.seed),
	}
	if plan != nil {
		if n := s.reasoning + len(plan.tokens); n <= maxTokens {
			s.outputLen, s.finishAs = n, "tool_calls"
		}
	}
	if e.prof.PrefixCaching {
		s.hashes = promptBlockHashes(laidOut, e.prof.BlockSize)
	}
	s.out.notify = make(chan struct{}, 1)
	st := &Stream{e: e, seq: s, ctx: ctx}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	s.timeline.Arrived = e.now()
	s.timeline.PromptTokens = prompt
	s.arrivedBusy = e.modelledNow()
	s.order = e.arrived
	e.arrived++
	e.enqueue(s, false)
	e.mu.Unlock()
	st.stopAbort = context.AfterFunc(ctx, func() { e.abort(s, ctx.Err()) })
	e.signal()
	return st, nil
}

// modelledNow is the engine's clock on the cost model: the modelled durations of the steps run
// so far, and of the part of the running step that has elapsed.
func (e *Engine) modelledNow() time.Duration {
	if e.stepLen == 0 {
		return e.stats.BusyTime
	}
	return e.stats.BusyTime + min(time.Since(e.stepStart), e.stepLen)
}

// abort takes s out of the engine, frees its blocks and fails its stream with cause. It does
// nothing to a sequence that is already done.
func (e *Engine) abort(s *sequence, cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch s.state {
	case seqWaiting:
		e.waiting = slices.DeleteFunc(e.waiting, func(w *sequence) bool { return w == s })
	case seqRunning:
		e.running = slices.DeleteFunc(e.running, func(r *sequence) bool { return r == s })
	default:
		return
	}
	e.release(s)
	e.stats.Aborted++
	s.out.fail(cause)
	e.signal() // the freed blocks may admit a waiting sequence
}

// release frees the blocks of s and marks it done. The caller removes it from its queue.
func (e *Engine) release(s *sequence) {
	e.freeBlocksOf(s)
	s.state = seqDone
}

// freeBlocksOf gives back every block s holds; its cached blocks stay in the prefix cache.
func (e *Engine) freeBlocksOf(s *sequence) {
	e.kv.release(s.shared)
	e.kv.give(s.blocks)
	s.shared, s.blocks, s.registered = nil, 0, 0
}

// heldBlocks is the number of blocks s holds, shared and private.
func (s *sequence) heldBlocks() int { return len(s.shared) + s.blocks }

// cacheComputed offers to the prefix cache the prompt blocks of s that are full once its KV
// covers upTo tokens. vLLM does this when it schedules the tokens, so a request admitted later
// in the same step already finds them.
func (e *Engine) cacheComputed(s *sequence, upTo int) {
	full := min(len(s.hashes), upTo/e.prof.BlockSize)
	for ; s.registered < full; s.registered++ {
		if b := e.kv.register(s.hashes[s.registered]); b != nil {
			s.blocks--
			s.shared = append(s.shared, b)
		}
	}
}

// loop runs steps while there is work and the engine is not paused, and blocks on the wake
// channel otherwise.
func (e *Engine) loop() {
	defer close(e.loopDone)
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return
		}
		var info StepInfo
		if !e.paused {
			info = e.schedule()
		}
		if info.Seqs == 0 {
			e.mu.Unlock()
			select {
			case <-e.wake:
				continue
			case <-e.ctx.Done():
				return
			}
		}
		if e.cfg.virtual {
			e.clock += info.Duration
			e.apply(&info)
			e.mu.Unlock()
			continue
		}
		// Real time: the step "runs on the GPU" while the lock is free, so requests can arrive
		// and streams can be closed meanwhile; apply skips sequences closed during the step.
		e.stepStart, e.stepLen = time.Now(), info.Duration
		e.mu.Unlock()
		if err := latency.Sleep(e.ctx, info.Duration); err != nil {
			return
		}
		e.mu.Lock()
		e.stepLen = 0
		e.apply(&info)
		e.mu.Unlock()
	}
}

func blocksFor(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }

// schedule plans one step as vLLM's scheduler does and returns its description; e.plan holds
// the work. First the running sequences: each decoding one gets the block its next token
// needs, preempting the policy's victim (see victim) while none is free; then the running
// prefills get their chunks; then, if nothing was preempted, waiting sequences are admitted in
// queue order while a sequence slot, token budget and blocks are available.
func (e *Engine) schedule() StepInfo {
	p := &e.prof
	info := StepInfo{Start: e.now()}
	e.plan = e.plan[:0]

	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		if s.prefilled < s.prefillTarget {
			continue
		}
		contextLen := s.prompt + s.generated // the KV cache holds all but the last token, which this step adds
		if more := blocksFor(contextLen, p.BlockSize) - s.heldBlocks(); more > 0 {
			preemptedSelf := false
			for e.kv.available() < more {
				v := e.victim()
				if v == s {
					preemptedSelf = true
					break
				}
				if slices.Index(e.running, v) < i {
					i-- // an earlier sequence leaves: s moves down one place
				}
				e.preempt(v, &info)
			}
			if preemptedSelf {
				e.preempt(s, &info) // s is the next victim and no block is left
				i--
				continue
			}
			e.kv.take(more)
			s.blocks += more
		}
		e.plan = append(e.plan, planItem{seq: s})
		info.DecodeSeqs++
		info.KVTokens += contextLen
	}

	budget := p.MaxNumBatchedTokens
	if p.ChunkedPrefill {
		budget -= info.DecodeSeqs // decodes first, one token each
	}
	for _, s := range e.running {
		if rest := s.prefillTarget - s.prefilled; rest > 0 && budget > 0 {
			chunk := min(rest, budget)
			e.cacheComputed(s, s.prefilled+chunk)
			e.plan = append(e.plan, planItem{seq: s, prefill: chunk})
			budget -= chunk
			info.PrefillTokens += chunk
		}
	}

	for info.Preempted == 0 && len(e.waiting) > 0 && len(e.running) < p.MaxNumSeqs && budget > 0 {
		s := e.waiting[0]
		target := s.prompt + s.generated // a preempted sequence recomputes its output too
		// The prefix cache can spare the full blocks of the prompt but the last token, which
		// must be computed to give the logits of the next one.
		hits := e.kv.lookup(s.hashes[:min(len(s.hashes), (target-1)/p.BlockSize)])
		cached := len(hits) * p.BlockSize
		need := blocksFor(target, p.BlockSize) - len(hits)
		if p.Alloc == AllocContiguous {
			need = blocksFor(s.prompt+s.maxTokens, p.BlockSize) - len(hits)
		}
		if need+idleAmong(hits) > e.kv.available() {
			break // FCFS: the head of the queue blocks the others
		}
		chunk := target - cached
		if chunk > budget {
			if !p.ChunkedPrefill {
				break
			}
			chunk = budget
		}
		e.waiting = e.waiting[1:]
		e.kv.acquire(hits)
		e.kv.take(need)
		s.shared, s.blocks, s.registered = hits, need, len(hits)
		s.state = seqRunning
		s.prefillTarget, s.prefilled = target, cached
		e.cacheComputed(s, cached+chunk)
		if s.timeline.Admissions == 0 {
			s.timeline.Scheduled = info.Start
			s.timeline.CachedTokens = cached
			s.usage.CachedTokens = cached
			if p.PrefixCaching {
				e.stats.PrefixCacheQueries += int64(s.prompt)
				e.stats.PrefixCacheHits += int64(cached)
			}
		} else if p.PrefixCaching {
			// Counted apart, as vLLM does, so that a preempted sequence finding its own
			// blocks again does not raise the hit rate.
			e.stats.PreemptedPrefixCacheQueries += int64(target)
			e.stats.PreemptedPrefixCacheHits += int64(cached)
		}
		s.timeline.Admissions++
		e.running = append(e.running, s)
		e.plan = append(e.plan, planItem{seq: s, prefill: chunk})
		budget -= chunk
		info.PrefillTokens += chunk
		info.CachedTokens += cached
		info.Admitted++
	}

	info.Seqs = len(e.plan)
	if info.Seqs > 0 {
		info.Duration = p.StepTime(info.PrefillTokens, info.DecodeSeqs, info.KVTokens)
	}
	return info
}

// preempt evicts running sequence s in vLLM's recompute mode: its blocks are freed, the tokens
// it has streamed stay streamed, and it goes back to the front of the queue to prefill its
// prompt and output again.
func (e *Engine) preempt(s *sequence, info *StepInfo) {
	e.running = slices.DeleteFunc(e.running, func(r *sequence) bool { return r == s })
	// Under priority the victim may already have a decode planned in this step: take it out.
	if j := slices.IndexFunc(e.plan, func(it planItem) bool { return it.seq == s }); j >= 0 {
		e.plan = slices.Delete(e.plan, j, j+1)
		info.DecodeSeqs--
		info.KVTokens -= s.prompt + s.generated
	}
	e.freeBlocksOf(s)
	s.state = seqWaiting
	s.prefillTarget, s.prefilled = 0, 0
	s.timeline.Preemptions++
	e.enqueue(s, true)
	e.stats.Preemptions++
	info.Preempted++
	e.log.Debug("preempted sequence: KV cache full", "request_id", s.id,
		"free_blocks", e.kv.available(), "running", len(e.running), "waiting", len(e.waiting))
}

// apply carries out the planned step at its end: prefill progress, one token for each sequence
// that decoded or finished its prefill, and the end of the sequences that reached max_tokens.
func (e *Engine) apply(info *StepInfo) {
	now := e.now()
	e.stats.BusyTime += info.Duration // first: the sequences finishing now are charged this step
	finished := 0
	for _, it := range e.plan {
		s := it.seq
		if s.state != seqRunning {
			continue // closed while the step ran
		}
		if it.prefill > 0 {
			s.prefilled += it.prefill
			if s.prefilled < s.prefillTarget {
				continue
			}
			if s.generated == 0 {
				e.stats.PromptTokens += int64(s.prompt)
			}
		}
		e.emit(s, now)
		if s.generated >= s.outputLen {
			e.finish(s, now)
			finished++
		}
	}
	if finished > 0 {
		e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s.state != seqRunning })
	}
	info.Finished = finished
	e.plan = e.plan[:0]
	e.stats.Steps++
	e.stats.MaxRunning = max(e.stats.MaxRunning, len(e.running)+finished)
	e.stats.LastStep = *info
}

func (e *Engine) emit(s *sequence, now time.Duration) {
	s.generated++
	e.stats.GenerationTokens++
	if s.generated == 1 {
		s.timeline.FirstToken = now
		e.metrics.ttft.Observe((now - s.timeline.Arrived).Seconds())
	} else {
		e.metrics.tpot.Observe((now - s.lastTokenAt).Seconds())
	}
	s.lastTokenAt = now
	s.timeline.OutputTokens = s.generated
	reasoning := s.generated <= s.reasoning
	if reasoning {
		e.stats.ReasoningTokens++
	} else if s.generated == s.reasoning+1 {
		s.timeline.FirstAnswerToken = now
		s.words.startAnswer()
	}
	if !reasoning && s.tools != nil {
		s.out.pushTool(s.tools.nextToken())
		return
	}
	s.out.push(s.words, reasoning)
}

func (e *Engine) finish(s *sequence, now time.Duration) {
	e.release(s)
	s.timeline.Finished = now
	s.timeline.ModelledE2E = e.stats.BusyTime - s.arrivedBusy
	s.timeline.Done = true
	e.stats.Finished++
	if s.finishAs != "length" {
		e.stats.Stopped++
	}
	e.metrics.e2e.Observe((now - s.timeline.Arrived).Seconds())
	s.usage.CompletionTokens = s.generated
	s.usage.ReasoningTokens = s.reasoning
	s.out.finish(s.finishAs, s.usage)
}

// StepInfo describes one engine step.
type StepInfo struct {
	Start         time.Duration // engine clock when the step started
	Duration      time.Duration // modelled duration (Profile.StepTime)
	Seqs          int           // sequences in the batch: decodes and prefills
	DecodeSeqs    int           // sequences that decoded one token
	KVTokens      int           // sum of the context lengths of the decoding sequences
	PrefillTokens int           // prompt tokens prefilled
	CachedTokens  int           // prompt tokens of the admitted sequences found in the prefix cache
	Admitted      int           // sequences admitted from the queue
	Preempted     int           // sequences preempted to free blocks
	Finished      int           // sequences that produced their last token
}

// Stats is a snapshot of the engine's state and counters.
type Stats struct {
	Now                  time.Duration // engine clock
	Running              int           // sequences admitted and not finished
	Waiting              int           // sequences queued, including preempted ones
	MaxRunning           int           // the most sequences ever running at once
	BatchSize            int           // sequences in the last step
	BlocksUsed           int           // KV-cache blocks held by running sequences
	BlocksTotal          int           // KV-cache capacity in blocks
	KVUsage              float64       // BlocksUsed / BlocksTotal, 0..1 like vllm:gpu_cache_usage_perc
	BlocksReservedUnused int           // blocks held beyond the sequences' current lengths (contiguous waste)
	BlocksCached         int           // blocks the prefix cache can find, held by sequences or idle
	BlocksCachedIdle     int           // cached blocks no sequence holds: free, but kept until needed
	MemoryUsedBytes      int64         // simulated device memory in use: Profile.MemoryUsed(BlocksUsed)
	Preemptions          int64         // total preemptions
	Steps                int64         // steps run
	BusyTime             time.Duration // sum of step durations
	PromptTokens         int64         // prompt tokens prefilled (once per request, recomputation not counted)
	GenerationTokens     int64         // output tokens produced, reasoning included
	ReasoningTokens      int64         // output tokens that were reasoning
	// PrefixCacheQueries and PrefixCacheHits count, in tokens, the prompts looked up in the
	// prefix cache at their first admission and the part found there (vLLM's
	// vllm:prefix_cache_queries and vllm:prefix_cache_hits). Re-admissions after preemption
	// are counted in the Preempted pair instead.
	PrefixCacheQueries          int64
	PrefixCacheHits             int64
	PreemptedPrefixCacheQueries int64
	PreemptedPrefixCacheHits    int64
	Finished                    int64 // requests that produced all their tokens
	// Stopped counts the finished requests that ended before max_tokens, at the model's end of
	// turn: those that made tool calls. The others ended at max_tokens.
	Stopped  int64
	Aborted  int64    // requests closed or cancelled before finishing
	LastStep StepInfo // the last step run
	// PowerWatts is the simulated device's power now: Profile.StepPower of the last step while
	// sequences run, its idle power otherwise. EnergyJoules is what it has drawn since the
	// engine started (Profile.Energy). Both 0 for a profile without a power model.
	PowerWatts   float64
	EnergyJoules float64
	// KVTokensRequested and KVTokensAllocated are, summed over the running sequences, the token
	// positions their KV entries fill (prompt and generated tokens so far) and the positions
	// their blocks hold (blocks x BlockSize): 1 - requested/allocated is the allocation's waste,
	// the partly filled last block of a paged sequence included. Counted per sequence, so a
	// prefix-cache block two sequences share counts for each.
	KVTokensRequested int
	KVTokensAllocated int
}

// Stats returns a snapshot of the engine's state and counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats
	st.Now = e.now()
	st.Running = len(e.running)
	st.Waiting = len(e.waiting)
	st.BatchSize = st.LastStep.Seqs
	st.BlocksTotal = e.prof.NumBlocks
	st.BlocksUsed = e.kv.used()
	st.KVUsage = float64(st.BlocksUsed) / float64(st.BlocksTotal)
	st.BlocksCached = e.kv.cached()
	st.BlocksCachedIdle = e.kv.idle.len
	st.MemoryUsedBytes = e.prof.MemoryUsed(st.BlocksUsed)
	st.PowerWatts = e.prof.IdleWatts
	if st.Running > 0 {
		st.PowerWatts = e.prof.StepPower(st.LastStep.Duration)
	}
	st.EnergyJoules = e.prof.Energy(st.Now, st.BusyTime, st.Steps)
	for _, s := range e.running {
		if used := blocksFor(s.prompt+s.generated, e.prof.BlockSize); s.heldBlocks() > used {
			st.BlocksReservedUnused += s.heldBlocks() - used
		}
		held := s.heldBlocks() * e.prof.BlockSize
		st.KVTokensRequested += min(s.prompt+s.generated, held)
		st.KVTokensAllocated += held
	}
	return st
}
