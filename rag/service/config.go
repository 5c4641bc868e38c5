package service

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/llm"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/openai"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// Config is everything a user sets about the service, one field per serve flag (the flag named
// in each field's error message). Start from DefaultConfig: its zero value is not usable.
type Config struct {
	// Profile names the simulated engine's profile (llmsim.Profiles); KVAlloc overrides its
	// KV-cache allocation ("", "paged" or "contiguous").
	Profile, KVAlloc string
	// EngineArgs reshape the simulated engine's profile with vLLM's engine arguments (prefix
	// caching, max-num-seqs, ...), as `ragtail llm-sim`'s flags do; they apply to every profile
	// the engine is switched to at run time as well.
	EngineArgs llmsim.EngineArgs
	// ToolCalls is the simulated engine's law of how many searches a question needs in the
	// agentic mode (llm-sim's --tool-calls).
	ToolCalls llmsim.ToolCallLaw
	// Dim is the hash embedder's vector size.
	Dim int
	// Shards is the number of index shards; ShardLatency holds one law for all of them or one
	// per shard.
	Shards       int
	ShardLatency []latency.Law
	// EmbedLatency is the hash embedder's service time; FetchLatency a doc-store lookup's on a
	// cache miss.
	EmbedLatency, FetchLatency latency.Law
	// CacheSize is the doc store's LRU cache in entries (0: no cache).
	CacheSize int
	// Bloom guards the doc store with a Bloom filter of existing ids at false-positive rate
	// BloomFP.
	Bloom   bool
	BloomFP float64
	// Coupling is the default coupling of retrieval and generation (sync, fanout or async);
	// TopK the chunks retrieved; AsyncQuorum and AsyncDeadline bound async coupling.
	Coupling      string
	TopK          int
	AsyncQuorum   int
	AsyncDeadline time.Duration
	// HedgeAfter hedges shard searches after this long (pipeline.Config.HedgeAfter); 0: off.
	HedgeAfter time.Duration
	// ChunkOrder places the chunks in the prompt by score or stable (by id); "" is score.
	ChunkOrder string
	// Admission sizes the worker pool in front of the pipeline.
	Admission admission.Config
	// MaxTokensCap is the largest max_tokens a request may ask for.
	MaxTokensCap int
	// CorpusDocs sizes the built-in corpus (0: its default).
	CorpusDocs int
	// Seed seeds the corpus and every latency law.
	Seed uint64
	// Faults are the fault-injection rules in force at start.
	Faults fault.Rules
	// Backends replace parts of the embedded default by real servers.
	Backends Backends
	// Links put a network link (toxiproxy, in process) between the service and a real backend:
	// qdrant, llm, embed, docstore or cache, with its toxics (latency, jitter, bandwidth, ...).
	Links map[string]link.Spec
	// AdminToken, when set, is required as a bearer token by the admin API's protected routes
	// (RAGTAIL_ADMIN_TOKEN).
	AdminToken string
	// AdminAddr is the address the admin listener binds (--admin-addr). Off loopback, every
	// admin route needs AdminToken, and New refuses to build a service without one. Empty: the
	// caller serves the admin handler on a listener bound to one address, and each connection's
	// local address decides (httpapi.AdminAccess).
	AdminAddr string
}

// Backends are the real servers that replace parts of the embedded default. A zero field keeps
// the default part.
type Backends struct {
	Qdrant Qdrant
	LLM    LLM
	Embed  Embeddings
	// Snapshot serves the corpus and vectors of this snapshot file (written by Ingest) instead of
	// the built-in corpus.
	Snapshot string
	// DocStore is the backing store of chunk payloads: "" keeps the in-memory store, a
	// postgres:// URL selects PostgreSQL (--docstore, RAGTAIL_DOCSTORE).
	DocStore string
	// DocStorePool is PostgreSQL's connection pool: the store's finite capacity.
	DocStorePool int
	// DocStoreConcurrency bounds the in-memory store's concurrent lookups, each holding a slot
	// for its FetchLatency (0: unbounded).
	DocStoreConcurrency int
	// Cache is the cache tier in front of the store: lru, 2q or arc in memory, or a redis:// URL.
	Cache string
	// ReadyEvery is how often Qdrant's readiness is checked again (default 2 s).
	ReadyEvery time.Duration
}

// Qdrant is the Qdrant retriever's connection (--qdrant and its companions).
type Qdrant struct {
	Addr             string // host:port of the gRPC API; "" keeps the in-memory index
	Collection       string
	APIKey           string
	TLS              bool
	Pool             int
	Keepalive        time.Duration
	KeepaliveTimeout time.Duration
	Timeout          time.Duration
	// ServerName is the name TLS verifies Qdrant's certificate against; "" takes Addr's host.
	// A link in front of Qdrant sets it, since Addr is then the link's.
	ServerName string
	// RootCAs, when set, is the pool TLS verifies Qdrant's certificate against instead of the
	// system roots (a private or self-signed certificate).
	RootCAs *x509.CertPool
}

// LLM is the OpenAI-compatible generation server (--llm-url and its companions).
type LLM struct {
	URL               string   // base URL; "" keeps the simulated engine
	Models            []string // models to serve; empty asks the server at start
	APIKey            string
	ConnectTimeout    time.Duration
	FirstTokenTimeout time.Duration
	IdleTimeout       time.Duration
	Retries           int
}

// Embeddings is the OpenAI-compatible embeddings server (--embed-url and its companions).
type Embeddings struct {
	URL     string // base URL; "" keeps the hash embedder
	Model   string
	APIKey  string
	Timeout time.Duration
	Batch   int
}

// Defaults of the embedded service. Shard latency is lognormal with a capped tail: each shard
// stands for a remote index partition answering in a few milliseconds with an occasional slow
// reply, which is what makes the slowest-shard effect of fan-out visible.
const (
	DefaultShardLatency = "lognormal:6ms,0.6,2s"
	DefaultEmbedLatency = "lognormal:2ms,0.3,1s"
	DefaultFetchLatency = "lognormal:1.5ms,0.5,1s"
)

// MaxShards bounds Config.Shards and RuntimeConfig.Shards.
const MaxShards = 256

// DefaultConfig returns the embedded default: what `ragtail serve` runs with no flags.
func DefaultConfig() Config {
	return Config{
		Profile:       llmsim.DefaultProfile,
		Dim:           embed.DefaultDimension,
		Shards:        4,
		ShardLatency:  []latency.Law{mustLaw(DefaultShardLatency)},
		EmbedLatency:  mustLaw(DefaultEmbedLatency),
		FetchLatency:  mustLaw(DefaultFetchLatency),
		CacheSize:     1024,
		Bloom:         true,
		BloomFP:       0.01,
		Coupling:      string(rag.CouplingSync),
		TopK:          pipeline.DefaultTopK,
		AsyncDeadline: pipeline.DefaultAsyncDeadline,
		Admission:     admission.DefaultConfig(),
		MaxTokensCap:  openai.DefaultLimits.MaxTokensCap,
		Seed:          1,
		ToolCalls:     llmsim.DefaultToolCallLaw,
		Backends: Backends{
			Qdrant: Qdrant{Collection: retrieve.DefaultCollection, Pool: retrieve.DefaultQdrantPoolSize,
				Keepalive: retrieve.DefaultQdrantKeepalive, KeepaliveTimeout: retrieve.DefaultQdrantKeepaliveTimeout,
				Timeout: retrieve.DefaultQdrantCallTimeout},
			LLM: LLM{ConnectTimeout: llm.DefaultConnectTimeout, FirstTokenTimeout: llm.DefaultFirstTokenTimeout,
				IdleTimeout: llm.DefaultIdleTimeout, Retries: llm.DefaultRetries},
			Embed:        Embeddings{Timeout: 10 * time.Second, Batch: embed.DefaultBatchSize},
			DocStorePool: 8,
			Cache:        string(docstore.PolicyLRU),
		},
	}
}

func mustLaw(s string) latency.Law {
	law, err := latency.Parse(s)
	if err != nil {
		panic(err)
	}
	return law
}

// Validate checks the settings New needs before it builds anything.
func (c Config) Validate() error {
	if _, err := rag.ParseCoupling(c.Coupling); err != nil {
		return fmt.Errorf("--coupling: %w", err)
	}
	if _, err := pipeline.ParseChunkOrder(c.ChunkOrder); err != nil {
		return fmt.Errorf("--chunk-order: %w", err)
	}
	switch {
	case c.Shards < 1 || c.Shards > MaxShards:
		return fmt.Errorf("--shards must be between 1 and %d, got %d", MaxShards, c.Shards)
	case len(c.ShardLatency) != 1 && len(c.ShardLatency) != c.Shards:
		return fmt.Errorf("--shard-latency has %d laws for %d shards: give one for all or one per shard", len(c.ShardLatency), c.Shards)
	case c.CorpusDocs < 0:
		return fmt.Errorf("--corpus-docs must not be negative, got %d", c.CorpusDocs)
	case c.Dim < 1:
		return fmt.Errorf("--dim must be at least 1, got %d", c.Dim)
	case c.Admission.Adaptive.Tolerance != 0 && !(c.Admission.Adaptive.Tolerance >= admission.MinTolerance && c.Admission.Adaptive.Tolerance <= admission.MaxTolerance):
		return fmt.Errorf("--adaptive-tolerance must be between %g and %g (0: the default %g), got %g", admission.MinTolerance, admission.MaxTolerance, admission.DefaultTolerance, c.Admission.Adaptive.Tolerance)
	case c.Admission.Adaptive.MinLimit < 0 || c.Admission.Adaptive.MinLimit > admission.MaxWorkers:
		return fmt.Errorf("--adaptive-min-limit must be between 1 and %d (0: the default %d), got %d", admission.MaxWorkers, admission.DefaultMinLimit, c.Admission.Adaptive.MinLimit)
	case c.AdminAddr != "" && !httpapi.IsLoopbackAddr(c.AdminAddr) && c.AdminToken == "":
		return fmt.Errorf("--admin-addr %s is not a loopback address, so anyone who can reach it could read profiles and traces and change the configuration: set RAGTAIL_ADMIN_TOKEN (every admin route then needs 'Authorization: Bearer TOKEN'), or bind --admin-addr to loopback (127.0.0.1:9464)", c.AdminAddr)
	}
	for i, law := range c.ShardLatency {
		if err := law.CheckLimit(MaxLatency); err != nil {
			return fmt.Errorf("--shard-latency (law %d): %w", i+1, err)
		}
	}
	if err := c.EmbedLatency.CheckLimit(MaxLatency); err != nil {
		return fmt.Errorf("--embed-latency: %w", err)
	}
	if err := c.FetchLatency.CheckLimit(MaxLatency); err != nil {
		return fmt.Errorf("--fetch-latency: %w", err)
	}
	if err := c.Backends.Validate(); err != nil {
		return err
	}
	for name := range c.Links {
		if err := c.Backends.linkable(name); err != nil {
			return err
		}
	}
	return nil
}

// LinkNames are the backends a link can be put in front of.
var LinkNames = []string{"qdrant", "llm", "embed", "docstore", "cache"}

// linkable reports why no link can go in front of the backend name, or nil.
func (b Backends) linkable(name string) error {
	target := map[string]string{"qdrant": b.Qdrant.Addr, "llm": b.LLM.URL, "embed": b.Embed.URL, "docstore": b.DocStore}
	if name == "cache" {
		if isRedisURL(b.Cache) {
			target["cache"] = b.Cache
		}
	}
	t, known := target[name]
	switch {
	case !known:
		return fmt.Errorf("--link %s: no such backend: links go in front of %s", name, strings.Join(LinkNames, ", "))
	case t == "":
		return fmt.Errorf("--link %s: that backend is the embedded default, which no network reaches: give it a real server (--qdrant, --llm-url, --embed-url, --docstore postgres://..., --cache redis://...)", name)
	}
	return nil
}

func isRedisURL(s string) bool {
	return strings.HasPrefix(s, "redis://") || strings.HasPrefix(s, "rediss://")
}

// Validate checks the settings of the backends that are selected; those of a backend left out
// are not checked.
func (b Backends) Validate() error {
	if q := b.Qdrant; q.Addr != "" {
		switch {
		case b.Snapshot != "":
			return errors.New("--qdrant and --snapshot both give the index: choose one")
		case strings.TrimSpace(q.Collection) == "":
			return errors.New("--qdrant-collection must not be empty")
		case q.Pool < 1:
			return fmt.Errorf("--qdrant-pool must be at least 1, got %d", q.Pool)
		case q.Timeout <= 0 || q.KeepaliveTimeout <= 0:
			return fmt.Errorf("--qdrant-timeout and --qdrant-keepalive-timeout must be positive, got %v and %v", q.Timeout, q.KeepaliveTimeout)
		}
	}
	if e := b.Embed; e.URL != "" {
		switch {
		case strings.TrimSpace(e.Model) == "":
			return fmt.Errorf("--embed-url %s needs --embed-model (the server's embedding model, e.g. nomic-embed-text)", e.URL)
		case e.Timeout <= 0 || e.Batch < 1:
			return fmt.Errorf("--embed-timeout must be positive and --embed-batch at least 1, got %v and %d", e.Timeout, e.Batch)
		}
	}
	switch {
	case b.DocStore != "" && !strings.HasPrefix(b.DocStore, "postgres://") && !strings.HasPrefix(b.DocStore, "postgresql://"):
		return errors.New("--docstore takes a PostgreSQL URL such as postgres://user:password@localhost:5432/ragtail")
	case b.DocStore != "" && (b.DocStorePool < 1 || b.DocStorePool > 1024):
		return fmt.Errorf("--docstore-pool must be between 1 and 1024, got %d", b.DocStorePool)
	case b.DocStoreConcurrency < 0:
		return fmt.Errorf("--docstore-concurrency must not be negative, got %d", b.DocStoreConcurrency)
	case !isRedisURL(b.Cache):
		if _, err := docstore.ParseCachePolicy(b.Cache); err != nil {
			return fmt.Errorf("--cache %q: want lru, 2q, arc or a redis:// URL", b.Cache)
		}
	}
	if l := b.LLM; l.URL != "" {
		switch {
		case l.ConnectTimeout <= 0 || l.FirstTokenTimeout <= 0 || l.IdleTimeout <= 0:
			return errors.New("--llm-connect-timeout, --llm-first-token-timeout and --llm-idle-timeout must be positive")
		case l.Retries < 0:
			return fmt.Errorf("--llm-retries must not be negative, got %d", l.Retries)
		}
	}
	return nil
}

// EmbedderID names the vectors of the embedder b selects: the embeddings server's model with
// an embeddings URL, else the hash embedder of dim and seed. Snapshots and Qdrant collections
// record it, so that queries are never embedded differently from what was indexed.
func (b Backends) EmbedderID(dim int, seed uint64) string {
	if b.Embed.URL != "" {
		return fmt.Sprintf("openai model=%s dim=%d", b.Embed.Model, dim)
	}
	return HashEmbedderID(dim, seed)
}

// HashEmbedderID names the hash embedder's vectors.
func HashEmbedderID(dim int, seed uint64) string {
	return fmt.Sprintf("hash dim=%d seed=%d", dim, seed)
}

// ChunkText is the text of a chunk that is embedded: its title, then its body. Ingest and the
// service must agree on it, or queries will not find what was indexed.
func ChunkText(c rag.Chunk) string { return c.Title + "\n" + c.Text }
