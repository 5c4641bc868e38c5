package llmsim

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// ServerConfig is the configuration of the engine served alone (the flags of `ragtail
// llm-sim`): the listener, the profile and vLLM's engine arguments that reshape it. Register
// its flags with RegisterFlags, then call FlagsParsed.
type ServerConfig struct {
	Addr, Profile, KVAlloc, LogLevel string
	SchedulingPolicy                 string
	Seed                             uint64
	ShutdownGrace                    time.Duration
	ReasoningTokens                  int
	// ToolCalls is the law of how many tool calls a question needs (--tool-calls).
	ToolCalls ToolCallLaw
	Engine    EngineArgs

	bools *engineBools // the boolean engine flags, resolved by FlagsParsed
}

// engineBools hold vLLM's boolean engine flags, which come in two spellings, --enable-X and
// --no-enable-X; resolve turns them into EngineArgs' tri-state fields.
type engineBools struct {
	chunked, noChunked, prefix, noPrefix bool
}

// ProfileNames lists the names of the built-in profiles, comma-separated.
func ProfileNames() string {
	var names []string
	for _, p := range Profiles() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// RegisterFlags registers the flags of llm-sim on fs, filling c.
func (c *ServerConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", ":8000", "listen address")
	fs.StringVar(&c.Profile, "profile", DefaultProfile, "engine profile: "+ProfileNames())
	fs.StringVar(&c.KVAlloc, "kv-alloc", "", "KV-cache allocation: paged or contiguous (default: the profile's)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the generated text and of the tool-call law")
	fs.StringVar(&c.SchedulingPolicy, "scheduling-policy", string(PolicyFCFS),
		"fcfs or priority (vLLM's): with priority the request field \"priority\" (lower first) orders the\n"+
			"queue and the highest value is preempted first when KV blocks run out")
	fs.IntVar(&c.ReasoningTokens, "reasoning-tokens", 0,
		"reasoning tokens each request streams (as reasoning_content) before its answer, out of its\n"+
			"max_tokens; a request's thinking_token_budget field overrides it")
	c.ToolCalls = DefaultToolCallLaw
	fs.Var(&c.ToolCalls, "tool-calls", ToolCallLawUsage+";\na request with tools gets tool calls of its first tool (or the one tool_choice names) until its\nconversation holds that many tool messages after the question, then a text answer")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 30*time.Second, "how long running requests may take to finish on shutdown")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	c.bools = c.Engine.registerFlags(fs)
}

// registerFlags registers vLLM's engine arguments on fs, with vLLM's meaning; 0 keeps the
// profile's value.
func (a *EngineArgs) registerFlags(fs *flag.FlagSet) *engineBools {
	var b engineBools
	fs.IntVar(&a.MaxNumSeqs, "max-num-seqs", 0,
		"maximum number of sequences in one step (the running batch); more wait in the queue\n(default: the profile's, 256 for the Llama profiles)")
	fs.IntVar(&a.MaxModelLen, "max-model-len", 0,
		"model context length: the longest prompt + completion accepted; longer requests get 400\ncontext_length_exceeded (default: the profile's, 8192 for Llama 3)")
	fs.IntVar(&a.MaxNumBatchedTokens, "max-num-batched-tokens", 0,
		"maximum number of tokens processed in one step, decodes and prefill chunks together\n(default: the profile's, 2048; without chunked prefill at least --max-model-len)")
	fs.IntVar(&a.BlockSize, "block-size", 0,
		"size of a KV-cache block in tokens; the number of blocks is derived again from the memory\nleft for the cache (default: the profile's, 16)")
	fs.IntVar(&a.NumGPUBlocksOverride, "num-gpu-blocks-override", 0,
		"number of KV-cache blocks to use instead of the number derived from memory (vLLM uses it\nto test preemption)")
	fs.Float64Var(&a.GPUMemoryUtilization, "gpu-memory-utilization", 0,
		"fraction of device memory the engine may use, 0 to 1; the KV cache gets what weights and\nactivations leave of it (default 0.9)")
	fs.BoolVar(&b.chunked, "enable-chunked-prefill", false,
		"split long prompts into chunks that share steps with the decodes (on in the built-in profiles)")
	fs.BoolVar(&b.noChunked, "no-enable-chunked-prefill", false, "prefill each prompt in one step")
	fs.BoolVar(&b.prefix, "enable-prefix-caching", false,
		"keep the KV blocks of prompts so that later requests sharing a prefix skip its prefill\n(off by default here; vLLM V1 turns it on by default)")
	fs.BoolVar(&b.noPrefix, "no-enable-prefix-caching", false, "do not cache prompt blocks")
	return &b
}

// resolve turns the boolean flag pairs given on fs into a's fields, refusing contradictions.
func (b *engineBools) resolve(fs *flag.FlagSet, a *EngineArgs) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, pair := range []struct {
		name    string
		on, off bool
		dst     **bool
	}{
		{"chunked-prefill", b.chunked, b.noChunked, &a.ChunkedPrefill},
		{"prefix-caching", b.prefix, b.noPrefix, &a.PrefixCaching},
	} {
		onSet, offSet := set["enable-"+pair.name], set["no-enable-"+pair.name]
		switch {
		case onSet && offSet:
			return fmt.Errorf("--enable-%s and --no-enable-%s contradict each other: give one", pair.name, pair.name)
		case onSet:
			v := pair.on
			*pair.dst = &v
		case offSet:
			v := !pair.off
			*pair.dst = &v
		}
	}
	return nil
}

// FlagsParsed completes c after fs, on which RegisterFlags registered c's flags, has parsed a
// command line: it resolves the boolean engine flags and checks the rest.
func (c *ServerConfig) FlagsParsed(fs *flag.FlagSet) error {
	if c.bools != nil {
		if err := c.bools.resolve(fs, &c.Engine); err != nil {
			return err
		}
	}
	if c.ReasoningTokens < 0 {
		return fmt.Errorf("--reasoning-tokens must be 0 or more, got %d", c.ReasoningTokens)
	}
	if _, err := ParseSchedulingPolicy(c.SchedulingPolicy); err != nil {
		return fmt.Errorf("--scheduling-policy: %w", err)
	}
	return nil
}

// NewEngine builds the engine c describes: its profile reshaped by the engine arguments.
func (c *ServerConfig) NewEngine(logger *slog.Logger) (*Engine, error) {
	policy, err := ParseSchedulingPolicy(c.SchedulingPolicy)
	if err != nil {
		return nil, fmt.Errorf("--scheduling-policy: %w", err)
	}
	prof, err := ProfileByName(c.Profile)
	if err != nil {
		return nil, err
	}
	if prof, err = c.Engine.Apply(prof); err != nil {
		return nil, fmt.Errorf("llm-sim profile %s: %w", c.Profile, err)
	}
	opts := []Option{WithSeed(c.Seed), WithLogger(logger), WithReasoningTokens(c.ReasoningTokens), WithSchedulingPolicy(policy),
		WithToolCalls(c.ToolCalls)}
	if c.KVAlloc != "" {
		mode, err := ParseAllocMode(c.KVAlloc)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithAlloc(mode))
	}
	return New(prof, opts...)
}

// EngineFlagNames are the llm-sim flags that ParseEngineArgs takes: vLLM's engine arguments.
var EngineFlagNames = []string{"max-num-seqs", "max-model-len", "max-num-batched-tokens", "block-size",
	"num-gpu-blocks-override", "gpu-memory-utilization", "enable-chunked-prefill", "no-enable-chunked-prefill",
	"enable-prefix-caching", "no-enable-prefix-caching"}

// ParseEngineArgs parses llm-sim's engine flags given in one string, separated by spaces
// ("--enable-prefix-caching --max-num-seqs 64"), as serve's --llm-sim-args takes them. Other
// llm-sim flags and stray arguments are errors.
func ParseEngineArgs(v string) (EngineArgs, error) {
	var c ServerConfig
	fs := flag.NewFlagSet("llm-sim-args", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	names := strings.Join(EngineFlagNames, ", --")
	if err := fs.Parse(strings.Fields(v)); err != nil {
		return c.Engine, fmt.Errorf("%w (engine flags: --%s)", err, names)
	}
	if fs.NArg() > 0 {
		return c.Engine, fmt.Errorf("unexpected argument %.64q: give engine flags only", fs.Arg(0))
	}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		if bad == nil && !slices.Contains(EngineFlagNames, f.Name) {
			bad = fmt.Errorf("--%s is not an engine flag (engine flags: --%s)", f.Name, names)
		}
	})
	if bad != nil {
		return c.Engine, bad
	}
	err := c.bools.resolve(fs, &c.Engine)
	return c.Engine, err
}
