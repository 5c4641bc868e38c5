package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag/embed"
	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/llm"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/rag/service"
)

// backendOptions are the flags that replace a part of the embedded default by a real backend:
// Qdrant for the index, an OpenAI-compatible server for generation or embeddings, or a corpus
// snapshot written by ingest. A zero field leaves the embedded default in place.
type backendOptions struct {
	qdrantAddr             string
	qdrantCollection       string
	qdrantAPIKey           string
	qdrantTLS              bool
	qdrantPool             int
	qdrantKeepalive        time.Duration
	qdrantKeepaliveTimeout time.Duration
	qdrantTimeout          time.Duration

	llmURL               string
	llmModel             string
	llmAPIKey            string
	llmConnectTimeout    time.Duration
	llmFirstTokenTimeout time.Duration
	llmIdleTimeout       time.Duration
	llmRetries           int

	embedURL     string
	embedModel   string
	embedAPIKey  string
	embedTimeout time.Duration
	embedBatch   int

	snapshot string

	docstore     string
	docstorePool int
	cache        string

	// getenv reads the environment (os.Getenv unless a test sets it).
	getenv func(string) string
	// readyEvery is how often the Qdrant readiness watch checks again (default 2 s).
	readyEvery time.Duration
}

// config returns the backends the flags select, with API keys defaulted from the environment.
func (o *backendOptions) config() service.Backends {
	var models []string
	for m := range strings.SplitSeq(o.llmModel, ",") {
		if m = strings.TrimSpace(m); m != "" {
			models = append(models, m)
		}
	}
	return service.Backends{
		Qdrant: service.Qdrant{Addr: o.qdrantAddr, Collection: o.qdrantCollection, APIKey: cmp.Or(o.qdrantAPIKey, o.env(envQdrantAPIKey)),
			TLS: o.qdrantTLS, Pool: o.qdrantPool, Keepalive: o.qdrantKeepalive, KeepaliveTimeout: o.qdrantKeepaliveTimeout, Timeout: o.qdrantTimeout},
		LLM: service.LLM{URL: o.llmURL, Models: models, APIKey: cmp.Or(o.llmAPIKey, o.env(envOpenAIAPIKey)),
			ConnectTimeout: o.llmConnectTimeout, FirstTokenTimeout: o.llmFirstTokenTimeout, IdleTimeout: o.llmIdleTimeout, Retries: o.llmRetries},
		Embed: service.Embeddings{URL: o.embedURL, Model: o.embedModel, APIKey: cmp.Or(o.embedAPIKey, o.env(envOpenAIAPIKey)),
			Timeout: o.embedTimeout, Batch: o.embedBatch},
		Snapshot:     o.snapshot,
		ReadyEvery:   o.readyEvery,
		DocStore:     o.docstore,
		DocStorePool: o.docstorePool,
		Cache:        cmp.Or(o.cache, "lru"),
	}
}

// Environment variables backendOptions read. Flags win over them.
const (
	envQdrant       = "RAGTAIL_QDRANT"
	envQdrantAPIKey = "QDRANT_API_KEY"
	envLLMURL       = "RAGTAIL_LLM_URL"
	envEmbedURL     = "RAGTAIL_EMBED_URL"
	envOpenAIAPIKey = "OPENAI_API_KEY"
	envDocstore     = "RAGTAIL_DOCSTORE"
	envCache        = "RAGTAIL_CACHE"
)

func (o *backendOptions) env(name string) string {
	if o.getenv != nil {
		return o.getenv(name)
	}
	return os.Getenv(name)
}

// register adds every backend flag: what serve takes.
func (o *backendOptions) register(fs *flag.FlagSet) {
	o.registerQdrant(fs)
	o.registerEmbed(fs)
	o.registerLLM(fs)
	o.registerDocstore(fs)
	fs.StringVar(&o.cache, "cache", cmp.Or(o.env(envCache), "lru"), "doc-store cache tier: lru, 2q or arc in memory (--cache-size entries; 2q and arc resist scans),\nor redis://host:6379/0 for Redis, cache-aside with a TTL (env "+envCache+")")
	fs.StringVar(&o.snapshot, "snapshot", "", "serve the corpus from this snapshot (written by ragtail ingest --snapshot) instead of the built-in one")
}

// registerDocstore adds the PostgreSQL doc-store flags (serve and ingest).
func (o *backendOptions) registerDocstore(fs *flag.FlagSet) {
	fs.StringVar(&o.docstore, "docstore", o.env(envDocstore), "PostgreSQL URL (postgres://user:password@host:5432/db) of the chunk payloads instead of the\nin-memory store (env "+envDocstore+")")
	fs.IntVar(&o.docstorePool, "docstore-pool", 8, "PostgreSQL connections: the doc store's finite capacity")
}

// registerQdrant adds the Qdrant flags (serve and ingest).
func (o *backendOptions) registerQdrant(fs *flag.FlagSet) {
	fs.StringVar(&o.qdrantAddr, "qdrant", o.env(envQdrant), "Qdrant gRPC address host:port (port 6334) to retrieve from instead of the in-memory index (env "+envQdrant+")")
	fs.StringVar(&o.qdrantCollection, "qdrant-collection", retrieve.DefaultCollection, "Qdrant collection; with several --shards, shard i is the collection NAME_i")
	fs.StringVar(&o.qdrantAPIKey, "qdrant-api-key", "", "Qdrant API key (default $"+envQdrantAPIKey+")")
	fs.BoolVar(&o.qdrantTLS, "qdrant-tls", false, "connect to Qdrant over TLS, verifying its certificate against the system roots")
	fs.IntVar(&o.qdrantPool, "qdrant-pool", retrieve.DefaultQdrantPoolSize, "gRPC connections to Qdrant; calls are spread over them round robin")
	fs.DurationVar(&o.qdrantKeepalive, "qdrant-keepalive", retrieve.DefaultQdrantKeepalive, "gRPC keepalive: ping Qdrant after this long without activity (gRPC's minimum is 10s; negative disables)")
	fs.DurationVar(&o.qdrantKeepaliveTimeout, "qdrant-keepalive-timeout", retrieve.DefaultQdrantKeepaliveTimeout, "gRPC keepalive: drop the connection if a ping is not answered within this")
	fs.DurationVar(&o.qdrantTimeout, "qdrant-timeout", retrieve.DefaultQdrantCallTimeout, "longest a Qdrant search may take before it fails with 504")
}

// registerEmbed adds the embeddings flags (serve and ingest).
func (o *backendOptions) registerEmbed(fs *flag.FlagSet) {
	fs.StringVar(&o.embedURL, "embed-url", o.env(envEmbedURL), "OpenAI-compatible embeddings base URL (e.g. http://localhost:11434/v1) instead of the hash embedder (env "+envEmbedURL+")")
	fs.StringVar(&o.embedModel, "embed-model", "", "embedding model to ask --embed-url for (required with it)")
	fs.StringVar(&o.embedAPIKey, "embed-api-key", "", "embeddings API key (default $"+envOpenAIAPIKey+")")
	fs.DurationVar(&o.embedTimeout, "embed-timeout", 10*time.Second, "longest an embeddings request may take before it fails with 504")
	fs.IntVar(&o.embedBatch, "embed-batch", embed.DefaultBatchSize, "texts per embeddings request when ingesting")
}

// registerLLM adds the LLM flags (serve).
func (o *backendOptions) registerLLM(fs *flag.FlagSet) {
	fs.StringVar(&o.llmURL, "llm-url", o.env(envLLMURL), "OpenAI-compatible base URL (vLLM, Ollama, llama.cpp, OpenAI: e.g. http://localhost:8000/v1)\nto generate with instead of the simulated engine (env "+envLLMURL+")")
	fs.StringVar(&o.llmModel, "llm-model", "", "model(s) to serve from --llm-url, comma-separated (default: the server's list from GET /v1/models at start)")
	fs.StringVar(&o.llmAPIKey, "llm-api-key", "", "LLM API key (default $"+envOpenAIAPIKey+")")
	fs.DurationVar(&o.llmConnectTimeout, "llm-connect-timeout", llm.DefaultConnectTimeout, "longest connecting to --llm-url may take")
	fs.DurationVar(&o.llmFirstTokenTimeout, "llm-first-token-timeout", llm.DefaultFirstTokenTimeout, "longest wait for the first token, retries included, before a 504")
	fs.DurationVar(&o.llmIdleTimeout, "llm-idle-timeout", llm.DefaultIdleTimeout, "longest silence between two tokens before the stream is cut")
	fs.IntVar(&o.llmRetries, "llm-retries", llm.DefaultRetries, "retries of a request that failed before its first token (never after)")
}

// validate checks the backend flags together; the flags of a backend that is not selected are
// not checked (ingest does not even register the LLM's).
func (o *backendOptions) validate() error { return o.config().Validate() }

// linkFlags is the repeatable --link NAME=SPEC flag.
type linkFlags map[string]link.Spec

func (l *linkFlags) String() string {
	var parts []string
	for _, name := range service.LinkNames {
		if spec, ok := (*l)[name]; ok {
			parts = append(parts, name+"="+spec.String())
		}
	}
	return strings.Join(parts, " ")
}

func (l *linkFlags) Set(s string) error {
	name, text, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=TOXICS (e.g. llm=latency:20ms,jitter:2ms), NAME one of %s", strings.Join(service.LinkNames, ", "))
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
