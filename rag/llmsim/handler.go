package llmsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

type handlerConfig struct {
	limits    openai.Limits
	limitsSet bool
	registry  *prometheus.Registry
}

// HandlerOption configures NewHandler.
type HandlerOption interface{ apply(*handlerConfig) }

type handlerOptionFunc func(*handlerConfig)

func (f handlerOptionFunc) apply(c *handlerConfig) { f(c) }

// WithLimits sets the request limits. The default is openai.DefaultLimits with max_tokens capped
// at the profile's MaxModelLen rather than at openai.DefaultLimits.MaxTokensCap, as vLLM caps it.
func WithLimits(l openai.Limits) HandlerOption {
	return handlerOptionFunc(func(c *handlerConfig) { c.limits, c.limitsSet = l, true })
}

// WithRegistry makes GET /metrics serve reg, on which the handler registers the engine's
// collector (unless it already is), so that the caller can add collectors of its own. The
// default is a fresh registry holding only the engine's metrics.
func WithRegistry(reg *prometheus.Registry) HandlerOption {
	return handlerOptionFunc(func(c *handlerConfig) { c.registry = reg })
}

// NewHandler returns the OpenAI-compatible API of e, as vLLM's server exposes it:
//
//	POST /v1/chat/completions  streaming (SSE, stream_options.include_usage) or not
//	POST /v1/messages          Anthropic's Messages API, streaming (its named events) or not
//	POST /v1/responses         OpenAI's Responses API, streaming (its named events) or not
//	GET  /v1/models            the served model names
//	GET  /health               200 while the engine runs, 503 once it is closed
//	GET  /metrics              Prometheus text: vllm:num_requests_running, vllm:num_requests_waiting,
//	                           vllm:gpu_cache_usage_perc, vllm:num_preemptions_total,
//	                           vllm:prompt_tokens_total, vllm:generation_tokens_total,
//	                           vllm:request_success_total{finished_reason},
//	                           vllm:time_to_first_token_seconds, vllm:time_per_output_token_seconds,
//	                           vllm:e2e_request_latency_seconds,
//	                           vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total
//	                           (tokens), all labelled model_name; and the simulated device
//	                           memory in use as dcgm-exporter's DCGM_FI_DEV_FB_USED (MiB)
//
// A request may set vLLM's thinking_token_budget: the simulated model then reasons exactly that
// many tokens (0: none) before answering, instead of the engine's WithReasoningTokens. Reasoning
// streams first, as reasoning_content (and reasoning, vLLM's current name) deltas, and is
// counted in usage.completion_tokens_details.reasoning_tokens; prefix-cache hits are in
// usage.prompt_tokens_details.cached_tokens.
//
// A request with tools is answered with tool calls while its question needs more (see
// Engine.Submit and --tool-calls), streamed as vLLM streams them: a chunk with the call's index,
// id ("chatcmpl-tool-..."), type and function name and empty arguments, then one chunk per
// argument token, then finish_reason "tool_calls"; non-streamed, in message.tool_calls with
// "content": null. tool_choice "none" makes the model answer in text, "required" or a named
// function makes it call one. parallel_tool_calls true lets two calls out at once when the
// question needs two or more; it is off unless the request sets it (OpenAI's default is on), so
// that a question takes the same number of model calls whatever the client.
//
// The Messages API runs on the same engine (same batching, KV cache and prefix cache, same
// metrics). Its model answers in text: tools are accepted and counted in the prompt, as are
// tool_use and tool_result blocks, but not called. usage.input_tokens leaves out the prompt
// tokens found in the prefix cache, which cache_read_input_tokens counts; thinking
// {"type":"enabled","budget_tokens":N} makes the model reason N tokens first, streamed as a
// thinking block. Streamed, message_start waits for the first token (the headers go out at
// once), so that its usage knows the prefix cache's share; stop_reason is max_tokens, as every
// simulated answer runs to its budget. Its errors are Anthropic's error JSON.
//
// The Responses API runs on the same engine too. input is a string or message items
// (input_text and output_text parts), function_call and function_call_output items count in
// the prompt, instructions become the system message; nothing is stored, so
// previous_response_id, conversation and background are refused. The model answers in text.
// Streamed, the events are response.created, response.in_progress, then per output item (a
// reasoning item when the model reasons, then the message) response.output_item.added,
// response.content_part.added, the text's deltas and done event, response.content_part.done
// and response.output_item.done, then response.completed, every event numbered by
// sequence_number. As in vLLM the stream ends with response.completed, while the response's
// status is "incomplete" (incomplete_details.reason max_output_tokens) when the answer ran to
// its budget, which a simulated answer always does. Its errors are OpenAI error JSON.
//
// Errors are OpenAI error JSON. A client that disconnects aborts its sequence, which frees its
// KV-cache blocks at once. The "rag" request object of the RAG API is ignored here.
func NewHandler(e *Engine, opts ...HandlerOption) http.Handler {
	cfg := handlerConfig{}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if !cfg.limitsSet {
		cfg.limits = openai.DefaultLimits
		cfg.limits.MaxTokensCap = e.prof.MaxModelLen
	}
	if cfg.registry == nil {
		cfg.registry = prometheus.NewRegistry()
	}
	if err := cfg.registry.Register(e.Collector()); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			panic(fmt.Sprintf("llm-sim handler: register metrics: %v", err)) // conflicting names: a wiring bug
		}
	}
	h := &handler{e: e, limits: cfg.limits}
	r := chi.NewRouter()
	r.Post("/v1/chat/completions", h.chat)
	r.Post("/v1/messages", h.messages)
	r.Post("/v1/responses", h.responses)
	r.Get("/v1/models", h.models)
	r.Get("/health", h.health)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(cfg.registry, promhttp.HandlerOpts{}))
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, fmt.Errorf("%w: no route %s %s", rag.ErrNotFound, r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, &openai.HTTPError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
			Message: fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path), Err: rag.ErrInvalidRequest})
	})
	return r
}

type handler struct {
	e      *Engine
	limits openai.Limits
}

func (h *handler) health(w http.ResponseWriter, _ *http.Request) {
	h.e.mu.Lock()
	closed := h.e.closed
	h.e.mu.Unlock()
	if closed {
		openai.WriteError(w, ErrClosed)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *handler) models(w http.ResponseWriter, _ *http.Request) {
	list := openai.ModelList{Object: "list", Data: []openai.ModelCard{}}
	for _, m := range h.e.Models() {
		list.Data = append(list.Data, openai.ModelCard{ID: m, Object: "model", Created: h.e.started.Unix(), OwnedBy: "ragtail"})
	}
	openai.WriteJSON(w, http.StatusOK, list)
}

// engineFields are the request fields the engine reads beyond the OpenAI ones.
type engineFields struct {
	// ThinkingTokenBudget is vLLM's cap on a request's reasoning tokens; a simulated model
	// always spends all of it.
	ThinkingTokenBudget *int `json:"thinking_token_budget"`
}

func (h *handler) chat(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	req, err := openai.DecodeChatRequest(io.TeeReader(http.MaxBytesReader(w, r.Body, openai.MaxBodyBytes), &body))
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	var ext engineFields
	if err := json.NewDecoder(&body).Decode(&ext); err != nil {
		openai.WriteError(w, &openai.HTTPError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "thinking_token_budget",
			Message: "thinking_token_budget must be an integer: " + err.Error(), Err: rag.ErrInvalidRequest})
		return
	}
	var opts []RequestOption
	if b := ext.ThinkingTokenBudget; b != nil {
		if *b < 0 {
			openai.WriteError(w, &openai.HTTPError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "thinking_token_budget",
				Message: fmt.Sprintf("thinking_token_budget must be 0 or more, got %d: the simulated model spends its whole budget, so it needs a finite one", *b),
				Err:     rag.ErrInvalidRequest})
			return
		}
		opts = append(opts, WithRequestReasoning(*b))
	}
	req.RAG = nil // RAG options mean nothing to a bare engine
	q, err := req.Query(h.limits)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	if req.ParallelToolCalls != nil && *req.ParallelToolCalls {
		opts = append(opts, WithRequestParallelToolCalls(true))
	}
	if name := namedTool(req.ToolChoice); name != "" {
		opts = append(opts, WithRequestTool(name))
	}
	id := openai.NewCompletionID()
	st, err := h.e.Submit(r.Context(), rag.GenRequest{
		ID: id, Model: q.Model, Messages: q.Messages, MaxTokens: q.MaxTokens, Temperature: q.Temperature, Priority: q.Priority,
		Tools: q.Tools, ToolChoice: q.ToolChoice,
	}, opts...)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	defer func() { _ = st.Close() }() // a client that went away frees its blocks here
	if req.Stream {
		includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		streamChat(r.Context(), openai.NewChatStream(w, id, q.Model, includeUsage), st)
		return
	}
	out, err := collect(st)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	c := openai.Completion(id, q.Model, out.text, out.finishReason, out.usage)
	if out.reasoning != "" {
		c = openai.ReasoningCompletion(id, q.Model, out.reasoning, out.text, out.finishReason, out.usage)
	}
	if len(out.calls) > 0 {
		c.Choices[0].Message.ToolCalls = openai.WireToolCalls(out.calls)
	}
	openai.WriteJSON(w, http.StatusOK, c)
}

// namedTool returns the function a tool_choice object names ({"type":"function","function":
// {"name":...}}), or "" for the other forms; the request's validation checked its form.
func namedTool(choice json.RawMessage) string {
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if len(choice) == 0 || choice[0] != '{' || json.Unmarshal(choice, &named) != nil {
		return ""
	}
	return named.Function.Name
}

// output is a whole generation, as a non-streamed response reports it.
type output struct {
	text, reasoning string
	calls           []rag.ToolCall
	finishReason    string
	usage           rag.Usage
}

// collect reads st to its end.
func collect(st *Stream) (output, error) {
	var out output
	var text, reasoning strings.Builder
	for {
		d, err := st.RecvOutput()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("llm-sim stream ended without a finish reason")
			}
			return out, err
		}
		reasoning.WriteString(d.Reasoning)
		text.WriteString(d.Text)
		out.calls = rag.AppendToolCalls(out.calls, d.ToolCalls)
		if d.FinishReason != "" {
			out.text, out.reasoning = text.String(), reasoning.String()
			out.finishReason, out.usage = d.FinishReason, *d.Usage
			return out, nil
		}
	}
}

// streamChat relays st as an OpenAI event stream. The role chunk goes out at once, as vLLM
// sends it, so the client sees the response start before the first token.
func streamChat(ctx context.Context, cs *openai.ChatStream, st *Stream) {
	if err := cs.Start(); err != nil {
		return
	}
	for {
		d, err := st.RecvOutput()
		if err != nil {
			if ctx.Err() == nil { // nobody to tell when the client is gone
				_ = cs.Fail(err)
			}
			return
		}
		if d.Reasoning != "" {
			if err := cs.Reasoning(d.Reasoning); err != nil {
				return
			}
		}
		if d.Text != "" {
			if err := cs.Content(d.Text); err != nil {
				return
			}
		}
		if len(d.ToolCalls) > 0 {
			if err := cs.ToolCalls(d.ToolCalls); err != nil {
				return
			}
		}
		if d.FinishReason != "" {
			_ = cs.Finish(d.FinishReason, *d.Usage, "")
			return
		}
	}
}
