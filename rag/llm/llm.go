// Package llm is the pipeline's generator for a real LLM: a client of any OpenAI-compatible
// chat-completions server (vLLM, Ollama, llama.cpp server, OpenAI), driven through the official
// openai-go SDK.
//
// The SDK builds requests and decodes the event stream; the client adds what a latency-sensitive
// service needs around it, through the SDK's middleware and context hooks:
//
//   - three timeouts: connecting, the first token (measured from Generate, across retries) and
//     the gap between tokens (an idle stream is cut, not waited on forever);
//   - one retry, and only before the first token, when nothing has been handed to the caller
//     yet: retrying later would repeat text the user already saw. The SDK's own retries are off;
//   - errors a user can read: HTTP error bodies are parsed by the client, because the SDK drops
//     bodies that are not OpenAI JSON (a proxy's HTML 502, Ollama's {"error":"..."}), and
//     llama.cpp's non-standard "error:" stream lines are turned into OpenAI error events, which
//     the SDK would otherwise skip. Every error matches one of rag's sentinels;
//   - usage on the last delta: the finish chunk is held back until the usage chunk that follows
//     it (stream_options.include_usage), or llama.cpp's timings, have arrived;
//   - trace context: an otelhttp transport with the injected providers, or a propagator alone.
//
// A Client is safe for concurrent use; each TokenStream is used by one goroutine.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// Defaults of New.
const (
	// DefaultConnectTimeout bounds establishing a connection (TCP and TLS).
	DefaultConnectTimeout = 5 * time.Second
	// DefaultFirstTokenTimeout bounds the wait for the first content token, retries included.
	// It is generous because a loaded engine queues requests before their prefill.
	DefaultFirstTokenTimeout = 60 * time.Second
	// DefaultIdleTimeout bounds the gap between two events of a stream once tokens flow.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultRetries is the number of retries before the first token.
	DefaultRetries = 1
	// DefaultRetryBackoff is the wait before the first retry (doubled for each further one)
	// unless the server says when to retry (Retry-After).
	DefaultRetryBackoff = 200 * time.Millisecond
)

type config struct {
	apiKey              string
	models              []string
	connectTimeout      time.Duration
	firstTokenTimeout   time.Duration
	idleTimeout         time.Duration
	retries             int
	retryBackoff        time.Duration
	httpClient          *http.Client
	tracerProvider      trace.TracerProvider
	meterProvider       metric.MeterProvider
	propagator          propagation.TextMapPropagator
	noStream            bool
	noUsage             bool
	maxCompletionTokens bool
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithAPIKey sends key as a bearer token. Without it no Authorization header is sent, even if
// OPENAI_API_KEY is set: reading the environment is the command line's business.
func WithAPIKey(key string) Option { return optionFunc(func(c *config) { c.apiKey = key }) }

// WithModels sets the models the client serves (Models), so that no request to /v1/models is
// needed. Without it, call FetchModels before serving.
func WithModels(names ...string) Option {
	return optionFunc(func(c *config) { c.models = append(c.models, names...) })
}

// WithConnectTimeout bounds establishing a connection (default DefaultConnectTimeout).
func WithConnectTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.connectTimeout = d })
}

// WithFirstTokenTimeout bounds the time from Generate to the first content token, retries
// included (default DefaultFirstTokenTimeout). Without streaming it bounds the whole response.
func WithFirstTokenTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.firstTokenTimeout = d })
}

// WithIdleTimeout bounds the gap between two events once tokens flow (default
// DefaultIdleTimeout).
func WithIdleTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.idleTimeout = d })
}

// WithRetries sets how many times a request that failed before its first token is retried
// (default DefaultRetries; 0 disables retries). Failures after the first token are never
// retried.
func WithRetries(n int) Option { return optionFunc(func(c *config) { c.retries = n }) }

// WithRetryBackoff sets the wait before the first retry, doubled for each further one (default
// DefaultRetryBackoff). A Retry-After header takes precedence. A retry that would start after
// the first-token deadline is not made.
func WithRetryBackoff(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retryBackoff = d })
}

// WithHTTPClient sends requests with hc instead of the client's own, whose transport applies
// the connect timeout and keeps up to 256 idle connections. The connect timeout and the
// tracing options do not apply to hc.
func WithHTTPClient(hc *http.Client) Option {
	return optionFunc(func(c *config) { c.httpClient = hc })
}

// WithTracerProvider wraps the transport with otelhttp, recording an HTTP client span per
// request under the caller's span (default: no spans).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tracerProvider = tp })
}

// WithMeterProvider records otelhttp's client metrics; it takes effect with WithTracerProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meterProvider = mp })
}

// WithPropagator injects the caller's trace context into every request with p, typically W3C
// traceparent, so the LLM server's spans join the trace (default: nothing is injected).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) { c.propagator = p })
}

// WithoutStreaming makes Generate ask for the whole completion at once (stream false) and hand
// it over as one delta, for servers or proxies that cannot stream.
func WithoutStreaming() Option { return optionFunc(func(c *config) { c.noStream = true }) }

// WithoutUsageOption stops sending stream_options.include_usage, for old servers that reject the
// field. Usage then comes from llama.cpp's timings when present, and is otherwise left to the
// caller to count.
func WithoutUsageOption() Option { return optionFunc(func(c *config) { c.noUsage = true }) }

// WithMaxCompletionTokens sends the output budget as max_completion_tokens rather than
// max_tokens, as OpenAI's reasoning models require. vLLM, Ollama and llama.cpp accept
// max_tokens, the default.
func WithMaxCompletionTokens() Option {
	return optionFunc(func(c *config) { c.maxCompletionTokens = true })
}

// Client generates completions with an OpenAI-compatible server.
type Client struct {
	oai       openai.Client
	baseURL   string
	cfg       config
	transport *http.Transport // the client's own transport; nil with WithHTTPClient
	models    atomic.Pointer[[]string]

	requests           atomic.Uint64
	retries            atomic.Uint64
	failures           atomic.Uint64
	firstTokenTimeouts atomic.Uint64
	idleTimeouts       atomic.Uint64
}

// Stats counts what a Client has done since it was made.
type Stats struct {
	Requests           uint64 // HTTP requests sent, retries included
	Retries            uint64 // requests retried before their first token
	Failures           uint64 // generations that ended in an error
	FirstTokenTimeouts uint64 // generations cut off waiting for their first token
	IdleTimeouts       uint64 // streams cut off after a silent gap between tokens
}

// New returns a client of the server at baseURL: its OpenAI base URL ("http://host:8000/v1"), a
// server root (to which "/v1" is added) or the full chat-completions URL. It does not connect.
func New(baseURL string, opts ...Option) (*Client, error) {
	cfg := config{
		connectTimeout:    DefaultConnectTimeout,
		firstTokenTimeout: DefaultFirstTokenTimeout,
		idleTimeout:       DefaultIdleTimeout,
		retries:           DefaultRetries,
		retryBackoff:      DefaultRetryBackoff,
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	base, err := normalizeBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.connectTimeout <= 0 || cfg.firstTokenTimeout <= 0 || cfg.idleTimeout <= 0:
		return nil, fmt.Errorf("%w: llm client: timeouts must be positive (connect %v, first token %v, idle %v)",
			rag.ErrInvalidRequest, cfg.connectTimeout, cfg.firstTokenTimeout, cfg.idleTimeout)
	case cfg.retries < 0 || cfg.retryBackoff < 0:
		return nil, fmt.Errorf("%w: llm client: retries %d and backoff %v must not be negative", rag.ErrInvalidRequest, cfg.retries, cfg.retryBackoff)
	}
	for _, m := range cfg.models {
		if strings.TrimSpace(m) == "" {
			return nil, fmt.Errorf("%w: llm client: empty model name", rag.ErrInvalidRequest)
		}
	}
	c := &Client{baseURL: base, cfg: cfg}
	hc := cfg.httpClient
	if hc == nil {
		dialer := &net.Dialer{Timeout: cfg.connectTimeout, KeepAlive: 30 * time.Second}
		c.transport = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   cfg.connectTimeout,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		var rt http.RoundTripper = c.transport
		if cfg.tracerProvider != nil {
			mp := cfg.meterProvider
			if mp == nil {
				mp = metricnoop.NewMeterProvider()
			}
			prop := cfg.propagator
			if prop == nil {
				prop = propagation.NewCompositeTextMapPropagator()
			}
			rt = otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(cfg.tracerProvider), otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(prop))
		}
		hc = &http.Client{Transport: rt}
	}
	c.oai = openai.NewClient(
		option.WithBaseURL(base),
		option.WithAPIKey(cfg.apiKey),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0), // retries are ours: only before the first token
		option.WithMiddleware(c.middleware),
	)
	if len(cfg.models) > 0 {
		models := slices.Clone(cfg.models)
		c.models.Store(&models)
	}
	return c, nil
}

func normalizeBaseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w: llm url %q: want http(s)://host[:port]/v1", rag.ErrInvalidRequest, raw)
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, "/chat/completions")
	if p == "" {
		p = "/v1"
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment = p+"/", "", "", ""
	return u.String(), nil
}

// BaseURL returns the OpenAI base URL requests go to, ending in a slash.
func (c *Client) BaseURL() string { return c.baseURL }

// Models returns the models the client serves: those given to WithModels, or the server's list
// after FetchModels.
func (c *Client) Models() []string {
	if m := c.models.Load(); m != nil {
		return slices.Clone(*m)
	}
	return nil
}

// FetchModels asks the server for its models (GET /v1/models) and serves those from then on,
// unless WithModels fixed the list, which it then returns unchanged.
func (c *Client) FetchModels(ctx context.Context) ([]string, error) {
	if len(c.cfg.models) > 0 {
		return c.Models(), nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.cfg.firstTokenTimeout, errFirstToken)
	defer cancel()
	page, err := c.oai.Models.List(ctx)
	if err != nil {
		return nil, c.requestError(ctx, "list models", err)
	}
	var names []string
	for _, m := range page.Data {
		if m.ID != "" {
			names = append(names, m.ID)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("list models: %w: %s serves no models", rag.ErrUnavailable, c.baseURL)
	}
	c.models.Store(&names)
	return slices.Clone(names), nil
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{Requests: c.requests.Load(), Retries: c.retries.Load(), Failures: c.failures.Load(),
		FirstTokenTimeouts: c.firstTokenTimeouts.Load(), IdleTimeouts: c.idleTimeouts.Load()}
}

// Close closes the idle connections of the client's own transport. Streams still open keep
// their connections until they are closed.
func (c *Client) Close() error {
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	return nil
}

// middleware runs around every HTTP request the SDK makes.
func (c *Client) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if c.cfg.propagator != nil && c.cfg.tracerProvider == nil {
		c.cfg.propagator.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	}
	c.requests.Add(1)
	resp, err := next(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		return nil, readStatusError(resp)
	}
	if strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream") {
		resp.Body = newSSENormalizer(resp.Body)
	}
	return resp, nil
}

// checkModel rejects a model the client does not serve.
func (c *Client) checkModel(model string) error {
	models := c.Models()
	if len(models) > 0 && !slices.Contains(models, model) {
		return fmt.Errorf("%w: %q is not served by %s (models: %s)", rag.ErrUnknownModel, model, c.baseURL, strings.Join(models, ", "))
	}
	return nil
}

// params builds the request body.
func (c *Client) params(req rag.GenRequest, stream bool) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: req.Model}
	for i, m := range req.Messages {
		switch m.Role {
		case "system":
			p.Messages = append(p.Messages, openai.SystemMessage(m.Content))
		case "developer":
			p.Messages = append(p.Messages, openai.DeveloperMessage(m.Content))
		case "user":
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case "assistant":
			p.Messages = append(p.Messages, assistantMessage(m))
		case "tool":
			p.Messages = append(p.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		default:
			return p, fmt.Errorf("%w: message %d has role %q: the LLM client sends system, developer, user, assistant and tool messages", rag.ErrInvalidRequest, i, m.Role)
		}
	}
	for _, t := range req.Tools {
		def := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		if t.Parameters != "" {
			if err := json.Unmarshal([]byte(t.Parameters), &def.Parameters); err != nil {
				return p, fmt.Errorf("%w: tool %q: parameters are not a JSON object: %w", rag.ErrInvalidRequest, t.Name, err)
			}
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
	}
	if req.ToolChoice != "" && len(req.Tools) > 0 {
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String(req.ToolChoice)}
	}
	if len(req.Tools) > 0 && req.ParallelToolCalls {
		p.ParallelToolCalls = openai.Bool(true)
	}
	if req.MaxTokens > 0 {
		if c.cfg.maxCompletionTokens {
			p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
		} else {
			p.MaxTokens = openai.Int(int64(req.MaxTokens))
		}
	}
	p.Temperature = openai.Float(req.Temperature)
	if stream && !c.cfg.noUsage {
		p.StreamOptions.IncludeUsage = openai.Bool(true)
	}
	if req.Priority != 0 {
		// vLLM's extension, not in the OpenAI schema; 0 is its default, so it is sent only when set.
		p.SetExtraFields(map[string]any{"priority": req.Priority})
	}
	return p, nil
}

// assistantMessage is m as the SDK sends an assistant message: its text, and its tool calls.
func assistantMessage(m rag.Message) openai.ChatCompletionMessageParamUnion {
	msg := openai.AssistantMessage(m.Content)
	for _, c := range m.ToolCalls {
		msg.OfAssistant.ToolCalls = append(msg.OfAssistant.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: c.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments}}})
	}
	if len(m.ToolCalls) > 0 && m.Content == "" {
		msg.OfAssistant.Content = openai.ChatCompletionAssistantMessageParamContentUnion{} // null, as OpenAI sends it
	}
	return msg
}

// Sentinel causes of the client's own cancellations, told apart with context.Cause.
var (
	errFirstToken = errors.New("first-token timeout")
	errIdle       = errors.New("idle timeout")
	errClosed     = errors.New("stream closed")
)

// waitRetry waits before retry number attempt (from 1), or returns false if the wait would end
// after deadline or ctx ends first.
func (c *Client) waitRetry(ctx context.Context, attempt int, err error, deadline time.Time) bool {
	wait := c.cfg.retryBackoff << (attempt - 1)
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > 0 {
		wait = se.RetryAfter
	}
	if time.Now().Add(wait).After(deadline) {
		return false
	}
	if latency.Sleep(ctx, wait) != nil {
		return false
	}
	c.retries.Add(1)
	return true
}

// ProviderName returns "openai", the gen_ai.provider.name of its spans: the client speaks the
// OpenAI API, whichever server (vLLM, Ollama, llama.cpp, OpenAI) is behind it.
func (c *Client) ProviderName() string { return "openai" }
