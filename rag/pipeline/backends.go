// Package pipeline runs one RAG request through its stages (admission, embed, retrieve, fetch,
// generate, stream) and couples retrieval to generation in one of three modes: sync, fanout or
// async. It declares the interfaces its backends implement; the backends live in sibling
// packages and know nothing of each other.
package pipeline

import (
	"context"
	"time"

	"github.com/ragtail/ragtail/rag"
)

// Embedder turns a query into a vector.
type Embedder interface {
	// Embed returns the embedding of text.
	Embed(ctx context.Context, text string) ([]float32, error)
	// Dimension is the length of the vectors Embed returns.
	Dimension() int
}

// Retriever searches a sharded vector index. The pipeline drives the shards itself, so that the
// coupling mode decides whether they are searched one after another or concurrently.
type Retriever interface {
	// Shards is the number of shards; shard numbers run from 0 to Shards()-1.
	Shards() int
	// Search returns the k best hits of one shard for vec, best first.
	Search(ctx context.Context, shard int, vec []float32, k int) ([]rag.Hit, error)
	// Collection names the collection searched, for span names and attributes.
	Collection() string
}

// DocStore returns chunk payloads by id. It returns an error matching rag.ErrNotFound for ids
// that do not exist.
type DocStore interface {
	Get(ctx context.Context, id string) (rag.Chunk, error)
}

// Generator is an LLM.
type Generator interface {
	// Generate starts a completion. Errors before the first token are returned here; errors
	// after it come from the stream's Recv.
	Generate(ctx context.Context, req rag.GenRequest) (rag.TokenStream, error)
	// Models lists the model names the generator serves; a query for any other model fails with
	// rag.ErrUnknownModel.
	Models() []string
}

// Admitter bounds how many requests run the pipeline at once.
type Admitter interface {
	// Acquire waits for a slot. It returns a release func to call exactly once when the request
	// is done, or an error matching rag.ErrOverloaded if the request is shed, or ctx's error.
	Acquire(ctx context.Context) (release func(), err error)
}

// Optional interfaces a backend may implement so that its spans and metrics are named properly.
// The pipeline checks for them with a type assertion; a backend without them gets the default
// documented on each.

// ModelNamer names the model behind an Embedder, for the "embeddings {model}" span and the
// gen_ai.request.model attribute. Default: "unknown".
type ModelNamer interface{ Model() string }

// ProviderNamer names the GenAI provider behind an Embedder or Generator (gen_ai.provider.name,
// e.g. "openai"). Default: "ragtail", meaning the backend runs inside ragtail (the hash embedder
// and the simulated engine).
type ProviderNamer interface{ ProviderName() string }

// DBSystemNamer names the database behind a Retriever (db.system.name, e.g. "qdrant").
// Default: "ragtail.memory", the in-process sharded index.
type DBSystemNamer interface{ DBSystem() string }

// CacheReporter is a DocStore that says how each lookup was answered: rag.CacheHit (from the
// cache), rag.CacheMiss (from the backing store) or rag.CacheBlocked (ruled out by a Bloom guard). The pipeline counts
// the results in rag_cache_requests_total{result} and on the rag.fetch span. Without it, fetches
// go through DocStore.Get and are not counted.
type CacheReporter interface {
	LookupResult(ctx context.Context, id string) (rag.Chunk, rag.CacheResult, error)
}

// WaitReporter is an Admitter that reports how long a request waited for its slot, for
// rag_admission_queue_wait_seconds. Without it the admission stage's duration is used.
type WaitReporter interface {
	AcquireWait(ctx context.Context) (release func(), wait time.Duration, err error)
}
