package service

import (
	"cmp"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// Environment variables the flags read. Flags win over them.
const (
	EnvAdminToken   = "RAGTAIL_ADMIN_TOKEN"
	EnvQdrant       = "RAGTAIL_QDRANT"
	EnvQdrantAPIKey = "QDRANT_API_KEY"
	EnvLLMURL       = "RAGTAIL_LLM_URL"
	EnvEmbedURL     = "RAGTAIL_EMBED_URL"
	EnvOpenAIAPIKey = "OPENAI_API_KEY"
	EnvDocStore     = "RAGTAIL_DOCSTORE"
	EnvCache        = "RAGTAIL_CACHE"
)

// RegisterFlags registers on fs the flags of the service on its embedded default (those that
// serve, demo and lab share), with c's values as defaults: start from DefaultConfig. The flags
// of real backends are Backends.RegisterFlags'. After fs has parsed a command line, call
// FlagsParsed.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Profile, "profile", c.Profile, "simulated LLM engine profile: "+llmsim.ProfileNames())
	fs.StringVar(&c.KVAlloc, "kv-alloc", c.KVAlloc, "KV-cache allocation of the simulated engine: paged or contiguous (default: the profile's)")
	fs.Func("llm-sim-args", "vLLM engine `flags` of the embedded simulated engine, as ragtail llm-sim takes them, in one\nstring: '--enable-prefix-caching --max-num-seqs 64' (engine flags only)", func(v string) error {
		a, err := llmsim.ParseEngineArgs(v)
		c.EngineArgs = a
		return err
	})
	fs.Var(&c.ToolCalls, "tool-calls", "simulated engine: how many searches a question needs before the model answers in the agentic\nmode (\"rag\": {\"mode\": \"agentic\"}), drawn from --seed and the question: fixed:N, uniform:A,B,\ngeometric:P[,max=M] or none, as llm-sim's --tool-calls")
	fs.IntVar(&c.Dim, "dim", c.Dim, "embedding dimension of the hash embedder")
	fs.IntVar(&c.Shards, "shards", c.Shards, "number of index shards")
	fs.Var((*lawList)(&c.ShardLatency), "shard-latency", "latency law of each shard search, one for all or one per shard separated by ';'\n(none, fixed:5ms, uniform:2ms,8ms, lognormal:MEDIAN,SIGMA[,CAP], pareto:XM,ALPHA[,CAP])")
	fs.Var(lawFlag{&c.EmbedLatency}, "embed-latency", "latency law of the embedder")
	fs.Var(lawFlag{&c.FetchLatency}, "fetch-latency", "latency law of a doc-store lookup on a cache miss")
	fs.IntVar(&c.CacheSize, "cache-size", c.CacheSize, "doc-store LRU cache entries; 0 disables the cache")
	fs.BoolVar(&c.Bloom, "bloom", c.Bloom, "guard the doc store with a Bloom filter of existing ids")
	fs.Float64Var(&c.BloomFP, "bloom-fp", c.BloomFP, "Bloom filter false-positive rate")
	fs.StringVar(&c.Coupling, "coupling", c.Coupling, "default coupling of retrieval and generation: sync, fanout or async")
	fs.IntVar(&c.TopK, "top-k", c.TopK, "default number of chunks retrieved per request")
	fs.StringVar(&c.ChunkOrder, "chunk-order", "score", "order of the retrieved chunks in the prompt: score (best first) or stable (by chunk id,\nso that requests retrieving the same chunks share a prompt prefix for the engine's prefix cache)")
	fs.IntVar(&c.AsyncQuorum, "async-quorum", c.AsyncQuorum, "async coupling: shards that must answer before generation starts (0: a majority)")
	fs.DurationVar(&c.AsyncDeadline, "async-deadline", c.AsyncDeadline, "async coupling: start generation after this long with whatever arrived")
	fs.DurationVar(&c.HedgeAfter, "hedge-after", 0, "send a shard search still unanswered after this long a second time, the first answer winning\n(\"The Tail at Scale\"; the in-memory index draws the second one's latency anew); 0: no hedging")
	registerAdmission(fs, &c.Admission)
	fs.IntVar(&c.MaxTokensCap, "max-tokens-cap", c.MaxTokensCap, "largest max_tokens a request may ask for")
	fs.IntVar(&c.CorpusDocs, "corpus-docs", c.CorpusDocs, "documents in the built-in corpus (0: the default size)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the corpus and every latency law")
	fs.Var(&c.Faults, "fault", fault.FlagUsage)
	fs.IntVar(&c.Backends.DocStoreConcurrency, "docstore-concurrency", c.Backends.DocStoreConcurrency, "lookups the in-memory doc store serves at once, each for its --fetch-latency (0: unbounded)")
	fs.Var((*linkFlags)(&c.Links), "link", "network link to a real backend, repeatable: NAME=TOXICS, NAME one of qdrant, llm, embed, docstore,\ncache; TOXICS comma-separated: latency:5ms, jitter:1ms, bandwidth:1000 (KB/s), slow_close:100ms,\ntimeout:1s, reset_peer:0, limit_data:1000000, or none (a link whose toxics change at run time)")
}

// registerAdmission registers the flags of the admission pool in front of the pipeline.
func registerAdmission(fs *flag.FlagSet, a *admission.Config) {
	fs.IntVar(&a.Workers, "workers", a.Workers, "admission: requests running the pipeline at once")
	fs.IntVar(&a.QueueCapacity, "queue", a.QueueCapacity, "admission: requests that may wait for a worker (-1: unbounded)")
	fs.DurationVar(&a.QueueTimeout, "queue-timeout", a.QueueTimeout, "admission: longest wait for a worker before a 503 (0: no limit)")
	fs.Var((*policyFlag)(&a.Policy), "admission-policy", "admission: when the queue is full, reject (503) or wait")
	fs.Var((*queueTargetFlag)(&a.QueueTarget), "queue-target", "admission: shed on arrival (503 + Retry-After) a request whose wait, predicted from the measured\nservice time, exceeds this: auto (half the mean service time, at most 500ms), off, or a duration")
	fs.BoolVar(&a.Adaptive.Enabled, "adaptive-limit", a.Adaptive.Enabled, "admission: cap the requests running at once by an adaptive limit that follows the simulated\nengine's latency against its unloaded latency (docs/shedding.md); off with --llm-url")
	fs.Float64Var(&a.Adaptive.Tolerance, "adaptive-tolerance", a.Adaptive.Tolerance, "admission: the mean slowdown (latency / unloaded latency) above which the adaptive limit\nshrinks, between 1.5 and 100")
	fs.IntVar(&a.Adaptive.MinLimit, "adaptive-min-limit", a.Adaptive.MinLimit, "admission: the lowest the adaptive limit goes")
}

// FlagsParsed completes c after fs has parsed a command line: the admin token comes from
// RAGTAIL_ADMIN_TOKEN, and a real doc store (--docstore) drops the simulated lookup latency
// unless --fetch-latency was given: a real store has its own service time. With the backend
// flags registered, call Backends.FlagsParsed first.
func (c *Config) FlagsParsed(fs *flag.FlagSet, getenv func(string) string) {
	c.AdminToken = getenv(EnvAdminToken)
	if c.Backends.DocStore != "" && !given(fs, "fetch-latency") {
		c.FetchLatency = latency.Law{}
	}
}

// given reports whether the flag name was given on fs's command line.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// RegisterFlags registers on fs every flag that replaces a part of the embedded default by a
// real backend (what serve takes), with b's values as defaults, except the server addresses,
// which default from getenv (RAGTAIL_QDRANT, RAGTAIL_LLM_URL, ...). API keys never show in the
// help: FlagsParsed reads them from the environment.
func (b *Backends) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	b.registerQdrant(fs, getenv)
	b.registerEmbed(fs, getenv)
	b.registerLLM(fs, getenv)
	b.registerDocStore(fs, getenv)
	fs.StringVar(&b.Cache, "cache", cmp.Or(getenv(EnvCache), b.Cache), "doc-store cache tier: lru, 2q or arc in memory (--cache-size entries; 2q and arc resist scans),\nor redis://host:6379/0 for Redis, cache-aside with a TTL (env "+EnvCache+")")
	fs.StringVar(&b.Snapshot, "snapshot", b.Snapshot, "serve the corpus from this snapshot (written by ragtail ingest --snapshot) instead of the built-in one")
}

// FlagsParsed completes b after fs, on which RegisterFlags registered b's flags, has parsed a
// command line: it splits --llm-model's list, fills the API keys left empty from getenv
// (QDRANT_API_KEY, OPENAI_API_KEY), and an empty cache tier with the in-memory LRU.
func (b *Backends) FlagsParsed(fs *flag.FlagSet, getenv func(string) string) {
	if f := fs.Lookup("llm-model"); f != nil {
		b.LLM.Models = nil
		for m := range strings.SplitSeq(f.Value.String(), ",") {
			if m = strings.TrimSpace(m); m != "" {
				b.LLM.Models = append(b.LLM.Models, m)
			}
		}
	}
	b.Qdrant.APIKey = cmp.Or(b.Qdrant.APIKey, getenv(EnvQdrantAPIKey))
	b.LLM.APIKey = cmp.Or(b.LLM.APIKey, getenv(EnvOpenAIAPIKey))
	b.Embed.APIKey = cmp.Or(b.Embed.APIKey, getenv(EnvOpenAIAPIKey))
	b.Cache = cmp.Or(b.Cache, "lru")
}

// registerDocStore registers the PostgreSQL doc-store flags (serve and ingest).
func (b *Backends) registerDocStore(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&b.DocStore, "docstore", getenv(EnvDocStore), "PostgreSQL URL (postgres://user:password@host:5432/db) of the chunk payloads instead of the\nin-memory store (env "+EnvDocStore+")")
	fs.IntVar(&b.DocStorePool, "docstore-pool", b.DocStorePool, "PostgreSQL connections: the doc store's finite capacity")
}

// registerQdrant registers the Qdrant flags (serve and ingest).
func (b *Backends) registerQdrant(fs *flag.FlagSet, getenv func(string) string) {
	q := &b.Qdrant
	fs.StringVar(&q.Addr, "qdrant", getenv(EnvQdrant), "Qdrant gRPC address host:port (port 6334) to retrieve from instead of the in-memory index (env "+EnvQdrant+")")
	fs.StringVar(&q.Collection, "qdrant-collection", q.Collection, "Qdrant collection; with several --shards, shard i is the collection NAME_i")
	fs.StringVar(&q.APIKey, "qdrant-api-key", "", "Qdrant API key (default $"+EnvQdrantAPIKey+")")
	fs.BoolVar(&q.TLS, "qdrant-tls", q.TLS, "connect to Qdrant over TLS, verifying its certificate against the system roots")
	fs.IntVar(&q.Pool, "qdrant-pool", q.Pool, "gRPC connections to Qdrant; calls are spread over them round robin")
	fs.DurationVar(&q.Keepalive, "qdrant-keepalive", q.Keepalive, "gRPC keepalive: ping Qdrant after this long without activity (gRPC's minimum is 10s; negative disables)")
	fs.DurationVar(&q.KeepaliveTimeout, "qdrant-keepalive-timeout", q.KeepaliveTimeout, "gRPC keepalive: drop the connection if a ping is not answered within this")
	fs.DurationVar(&q.Timeout, "qdrant-timeout", q.Timeout, "longest a Qdrant search may take before it fails with 504")
}

// registerEmbed registers the embeddings flags (serve and ingest).
func (b *Backends) registerEmbed(fs *flag.FlagSet, getenv func(string) string) {
	e := &b.Embed
	fs.StringVar(&e.URL, "embed-url", getenv(EnvEmbedURL), "OpenAI-compatible embeddings base URL (e.g. http://localhost:11434/v1) instead of the hash embedder (env "+EnvEmbedURL+")")
	fs.StringVar(&e.Model, "embed-model", e.Model, "embedding model to ask --embed-url for (required with it)")
	fs.StringVar(&e.APIKey, "embed-api-key", "", "embeddings API key (default $"+EnvOpenAIAPIKey+")")
	fs.DurationVar(&e.Timeout, "embed-timeout", e.Timeout, "longest an embeddings request may take before it fails with 504")
	fs.IntVar(&e.Batch, "embed-batch", e.Batch, "texts per embeddings request when ingesting")
}

// registerLLM registers the flags of the OpenAI-compatible generation server (serve).
func (b *Backends) registerLLM(fs *flag.FlagSet, getenv func(string) string) {
	l := &b.LLM
	fs.StringVar(&l.URL, "llm-url", getenv(EnvLLMURL), "OpenAI-compatible base URL (vLLM, Ollama, llama.cpp, OpenAI: e.g. http://localhost:8000/v1)\nto generate with instead of the simulated engine (env "+EnvLLMURL+")")
	fs.String("llm-model", strings.Join(l.Models, ","), "model(s) to serve from --llm-url, comma-separated (default: the server's list from GET /v1/models at start)")
	fs.StringVar(&l.APIKey, "llm-api-key", "", "LLM API key (default $"+EnvOpenAIAPIKey+")")
	fs.DurationVar(&l.ConnectTimeout, "llm-connect-timeout", l.ConnectTimeout, "longest connecting to --llm-url may take")
	fs.DurationVar(&l.FirstTokenTimeout, "llm-first-token-timeout", l.FirstTokenTimeout, "longest wait for the first token, retries included, before a 504")
	fs.DurationVar(&l.IdleTimeout, "llm-idle-timeout", l.IdleTimeout, "longest silence between two tokens before the stream is cut")
	fs.IntVar(&l.Retries, "llm-retries", l.Retries, "retries of a request that failed before its first token (never after)")
}

// RegisterFlags registers the flags of ragtail ingest on fs, with o's values as defaults
// (start from DefaultIngestConfig); the server addresses default from getenv. After fs has
// parsed a command line, call FlagsParsed.
func (o *IngestConfig) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	o.Backends.registerQdrant(fs, getenv)
	o.Backends.registerEmbed(fs, getenv)
	o.Backends.registerDocStore(fs, getenv)
	fs.StringVar(&o.Snapshot, "snapshot", o.Snapshot, "write the chunks and their vectors to this snapshot file (for serve --snapshot)")
	fs.IntVar(&o.Shards, "shards", o.Shards, "Qdrant shards, one collection each; serve must use the same number")
	fs.IntVar(&o.Dim, "dim", o.Dim, "embedding dimension of the hash embedder")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the hash embedder and of the built-in corpus")
	fs.IntVar(&o.CorpusDocs, "corpus-docs", o.CorpusDocs, "documents of the built-in corpus, when no DIR is given (0: the default size)")
	fs.IntVar(&o.ChunkTokens, "chunk-tokens", o.ChunkTokens, "target chunk length in tokens")
	fs.IntVar(&o.ChunkOverlap, "chunk-overlap", o.ChunkOverlap, "tokens at the end of a chunk repeated at the start of the next (0: none)")
	fs.IntVar(&o.Batch, "batch", o.Batch, "chunks embedded and written per round")
	fs.BoolVar(&o.Prune, "prune", o.Prune, "delete the Qdrant points of chunks not in this ingest (files removed or shortened)")
}

// FlagsParsed completes o after fs has parsed a command line: the API keys left empty come
// from getenv.
func (o *IngestConfig) FlagsParsed(fs *flag.FlagSet, getenv func(string) string) {
	o.Backends.FlagsParsed(fs, getenv)
}

// policyFlag is a flag.Value holding an admission policy.
type policyFlag admission.Policy

func (p *policyFlag) String() string { return string(*p) }

func (p *policyFlag) Set(s string) error { *p = policyFlag(s); return nil }

// queueTargetFlag is a flag.Value holding an admission queue target.
type queueTargetFlag time.Duration

func (q *queueTargetFlag) String() string { return admission.FormatQueueTarget(time.Duration(*q)) }

func (q *queueTargetFlag) Set(s string) error {
	d, err := admission.ParseQueueTarget(s)
	*q = queueTargetFlag(d)
	return err
}

// lawFlag is a flag.Value holding one latency law.
type lawFlag struct{ law *latency.Law }

func (f lawFlag) String() string {
	if f.law == nil {
		return ""
	}
	return f.law.String()
}

func (f lawFlag) Set(s string) error {
	law, err := latency.Parse(s)
	if err != nil {
		return err
	}
	*f.law = law
	return nil
}

// lawList is a flag.Value holding latency laws separated by ';'.
type lawList []latency.Law

func (l *lawList) String() string {
	var parts []string
	for _, law := range *l {
		parts = append(parts, law.String())
	}
	return strings.Join(parts, ";")
}

func (l *lawList) Set(s string) error {
	var out lawList
	for part := range strings.SplitSeq(s, ";") {
		law, err := latency.Parse(part)
		if err != nil {
			return err
		}
		out = append(out, law)
	}
	*l = out
	return nil
}

// linkFlags is the repeatable --link NAME=SPEC flag.
type linkFlags map[string]link.Spec

func (l *linkFlags) String() string {
	var parts []string
	for _, name := range LinkNames {
		if spec, ok := (*l)[name]; ok {
			parts = append(parts, name+"="+spec.String())
		}
	}
	return strings.Join(parts, " ")
}

func (l *linkFlags) Set(s string) error {
	name, text, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=TOXICS (e.g. llm=latency:20ms,jitter:2ms), NAME one of %s", strings.Join(LinkNames, ", "))
	}
	spec, err := link.Parse(text)
	if err != nil {
		return err
	}
	if *l == nil {
		*l = linkFlags{}
	}
	(*l)[name] = spec
	return nil
}
