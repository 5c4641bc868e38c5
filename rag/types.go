package rag

import "time"

// Message is one chat message.
type Message struct {
	Role    string // system, user, assistant, tool
	Content string
	// ToolCalls are the calls an assistant message makes (OpenAI's tool_calls).
	ToolCalls []ToolCall
	// ToolCallID is the call a tool message answers (OpenAI's tool_call_id).
	ToolCallID string
}

// Tool is a function the model may call (OpenAI's tool of type "function").
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the function's arguments, as JSON text.
	Parameters string
}

// ToolCall is one call of a tool the model asked for.
type ToolCall struct {
	ID        string // the id a tool message answering it names
	Name      string
	Arguments string // JSON text
}

// ToolCallDelta is a piece of a tool call a model is streaming, as OpenAI streams them: the
// first piece of a call carries its Index, ID and Name, later pieces of the same Index add to its
// Arguments.
type ToolCallDelta struct {
	Index     int
	ID, Name  string
	Arguments string
}

// AppendToolCalls adds the pieces in deltas to calls, the calls assembled so far (indexed by
// their Index), and returns the result.
func AppendToolCalls(calls []ToolCall, deltas []ToolCallDelta) []ToolCall {
	for _, d := range deltas {
		if d.Index < 0 || d.Index > len(calls) {
			continue // a piece of a call that never started: nothing to add it to
		}
		if d.Index == len(calls) {
			calls = append(calls, ToolCall{})
		}
		c := &calls[d.Index]
		if d.ID != "" {
			c.ID = d.ID
		}
		if d.Name != "" {
			c.Name = d.Name
		}
		c.Arguments += d.Arguments
	}
	return calls
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
	// Mode is single-shot (the default) or agentic; MaxSteps bounds an agentic request's model
	// calls (0 means DefaultMaxSteps).
	Mode     Mode
	MaxSteps int
	// ParallelToolCalls, in the agentic mode, lets the model ask for several searches in one
	// call; the pipeline runs them at once.
	ParallelToolCalls bool
	// Tools and ToolChoice are the client's own tools, for a generator that serves them (the
	// simulated engine); the RAG pipeline refuses them.
	Tools      []Tool
	ToolChoice string
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

// Delta is a piece of generated output: one or more tokens of text, or pieces of the tool calls
// the model makes. The last delta of a stream carries the finish reason and usage.
type Delta struct {
	Text         string
	Tokens       int             // number of tokens in Text or ToolCalls
	ToolCalls    []ToolCallDelta // pieces of tool calls (see AppendToolCalls)
	FinishReason string          // "" until the last delta: "stop", "length", "tool_calls" or "abort"
	Usage        *Usage          // set on the last delta
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
