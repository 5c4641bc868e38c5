package rag

// GenRequest asks a generator for one completion.
type GenRequest struct {
	ID          string // request id, for logs and the engine's bookkeeping
	Model       string
	Messages    []Message
	MaxTokens   int
	Temperature float64
	Priority    int // scheduling priority, lower runs first (vLLM's request field); 0 by default
	// Tools are the functions the model may call; with none it answers in text.
	Tools []Tool
	// ToolChoice is OpenAI's tool_choice: "" or "auto" (the model decides), "none" (answer in
	// text), "required" (call a tool).
	ToolChoice string
	// ParallelToolCalls lets the model ask for several tool calls in one answer (OpenAI's
	// parallel_tool_calls: true). False leaves it to the generator's default: OpenAI's allows
	// parallel calls, the simulated engine's does not.
	ParallelToolCalls bool
}

// TokenStream is a running generation. Recv returns deltas in order; after the last delta (the
// one with FinishReason set) it returns io.EOF. If the context given to Generate is cancelled,
// Recv returns the context's error. Close stops the generation and frees everything it holds
// (in the simulated engine: its KV-cache blocks) at once; it is idempotent and must be called.
// A TokenStream is used by one goroutine at a time.
type TokenStream interface {
	Recv() (Delta, error)
	Close() error
}
