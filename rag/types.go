package rag

import "time"

// Message is one chat message.
type Message struct {
	Role    string // system, user, assistant, tool
	Content string
}

// Query is one RAG request as the pipeline sees it, after validation.
type Query struct {
	ID          string    // request id, unique per request
	Model       string    // model served by the generator
	Messages    []Message // the conversation; the last user message is the question
	MaxTokens   int       // output token budget
	Temperature float64
	Coupling    Coupling // "" means the pipeline's default
	TopK        int      // 0 means the pipeline's default
	UserID      string   // from X-User-ID, for dye only
	Priority    int      // scheduling priority passed to the generator, lower runs first
}

// Question returns the content of the last user message, which is what gets embedded.
func (q Query) Question() string {
	for i := len(q.Messages) - 1; i >= 0; i-- {
		if q.Messages[i].Role == "user" {
			return q.Messages[i].Content
		}
	}
	return ""
}

// Chunk is a piece of a document: the unit that is embedded, indexed, fetched and put in a prompt.
type Chunk struct {
	ID     string `json:"id"`     // unique chunk id, e.g. "doc-00042#3"
	DocID  string `json:"doc_id"` // the document it came from
	Title  string `json:"title"`
	Topic  string `json:"topic,omitempty"`
	Text   string `json:"text"`
	Tokens int    `json:"tokens"` // approximate token count of Text (see CountTokens)
}

// Hit is one search result: a chunk id with its similarity score and the shard that found it.
type Hit struct {
	ChunkID string
	Score   float32
	Shard   int
}

// Usage counts the tokens of one generation.
type Usage struct {
	PromptTokens     int
	CompletionTokens int // includes ReasoningTokens, as OpenAI counts them
	CachedTokens     int // prompt tokens served from the engine's prefix cache (OpenAI's prompt_tokens_details.cached_tokens)
	ReasoningTokens  int // completion tokens spent reasoning before the answer (completion_tokens_details.reasoning_tokens)
}

// Delta is a piece of generated output: one or more tokens of text. The last delta of a stream
// carries the finish reason and usage.
type Delta struct {
	Text         string
	Tokens       int    // number of tokens in Text
	FinishReason string // "" until the last delta: "stop", "length" or "abort"
	Usage        *Usage // set on the last delta
}

// StageTiming is how long one stage took for one request.
type StageTiming struct {
	Stage    Stage
	Start    time.Time
	Duration time.Duration
}

// CacheResult says how a doc store lookup was answered. Its String values are the result label
// of rag_cache_requests_total and of the rag.fetch span's counts.
type CacheResult uint8

// The ways a doc store lookup can be answered.
const (
	// CacheHit means the chunk came from the cache, without touching the backing store.
	CacheHit CacheResult = iota
	// CacheMiss means the lookup went to the backing store and paid its latency, whether or not
	// the id existed there.
	CacheMiss
	// CacheBlocked means a Bloom guard ruled the id out: ErrNotFound at once, no cache or store
	// lookup.
	CacheBlocked
	// NumCacheResults is the number of CacheResult values; a CacheResult at or past it is
	// invalid and labelled "other".
	NumCacheResults
)

// cacheResultNames are the labels of the CacheResult values, and "other" for an invalid one.
var cacheResultNames = [NumCacheResults + 1]string{"hit", "miss", "blocked", "other"}

// String returns "hit", "miss" or "blocked", and "other" for a value past NumCacheResults.
func (r CacheResult) String() string {
	if r >= NumCacheResults {
		return cacheResultNames[NumCacheResults]
	}
	return cacheResultNames[r]
}
