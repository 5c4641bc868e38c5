// Package client is ragtail's HTTP client for OpenAI-compatible APIs (vLLM, Ollama, llama.cpp,
// OpenAI, ragtail itself), and for Anthropic's Messages and OpenAI's Responses APIs (a URL
// ending in /messages or /responses; see Client.API). It implements loadgen.Doer: one call sends one request and fills in a
// loadgen.Record with the moment the request was written, the first response byte, the first
// content token, every content chunk with its tokens, the end, the status, a bounded error kind,
// the trace id and the server's per-stage timings.
//
// The SSE parser survives the streams real servers send: comments and keep-alives, CRLF or CR
// line ends, multi-line data, several tokens in a chunk, a role-only first chunk, a usage chunk
// with empty choices, error events (`data: {"error":...}`, vLLM's `{"object":"error"}`,
// `event: error`), error bodies of any status that are not SSE, and a stream cut without
// [DONE]. Output tokens come from the server's usage (stream_options.include_usage is asked
// for; vLLM's continuous usage stats give per-chunk counts); without usage each content chunk
// counts as one token, a lower bound when a server packs several tokens into a chunk.
//
// Every request carries a fresh W3C traceparent; the trace id the server returns (or the one
// sent) is recorded. Server-Timing is read from the response header, the HTTP trailer, or the
// last chunk's "server_timing" field (ragtail puts it in all three). When the server reports its
// clock in a response header, the client estimates the offset between the two clocks.
//
// Requests to http:// targets go through package h1's transport by default, whose round trip
// runs on the caller's goroutine; https:// and proxied targets, and every target with
// WithHTTPClient(HTTPClientNetHTTP), go through net/http's.
//
// With WithTracerProvider every request is also an OpenTelemetry client span whose context is
// the traceparent sent, so the server's spans hang under it.
//
// A Client is safe for concurrent use.
package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client/internal/h1"
)

var _ loadgen.Doer = (*Client)(nil)

// Client sends requests to one OpenAI-compatible endpoint.
type Client struct {
	cfg         config
	url         string // the endpoint, e.g. http://host:8000/v1/chat/completions
	origin      string // scheme://host, for Path requests
	completions bool   // the legacy /v1/completions endpoint: a prompt, not messages
	embeddings  bool   // a /v1/embeddings endpoint: requests carry Input
	api         api    // the generation API: chat completions, Anthropic Messages, OpenAI Responses
	hc          *http.Client
	extra       map[string]json.RawMessage
	auth        []string // the Authorization (or Anthropic's X-Api-Key) header value, if an API key is set
	clock       clockEstimator
	readers     sync.Pool
	transport   string // HTTPClientH1 or HTTPClientNetHTTP; "" for one given by WithTransport
}

type config struct {
	model        string
	apiKey       string
	maxTokens    int
	outputLimit  int // 0: OutputTokenLimit(max_tokens)
	temperature  *float64
	stream       bool
	streamUsage  bool
	extra        map[string]any
	header       http.Header
	timeout      time.Duration
	transport    http.RoundTripper
	maxConns     int    // MaxConnsPerHost of the default transport; 0 for no limit
	httpClient   string // HTTPClientH1 or HTTPClientNetHTTP: the default transport's kind
	clockHeaders []string
	tracing      *tracing // client spans (see WithTracerProvider); nil for none
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithModel sets the "model" of every request.
func WithModel(model string) Option { return optionFunc(func(c *config) { c.model = model }) }

// WithAPIKey sends key as a bearer token, or as the x-api-key header to a Messages endpoint.
func WithAPIKey(key string) Option { return optionFunc(func(c *config) { c.apiKey = key }) }

// WithMaxTokens sets max_tokens for requests that do not set their own; 0 leaves it out.
func WithMaxTokens(n int) Option { return optionFunc(func(c *config) { c.maxTokens = n }) }

// WithOutputTokenLimit sets how many output tokens one response may carry (by its chunks or its
// usage) before the client cuts it as loadgen.ErrKindOverlong, in place of
// OutputTokenLimit(max_tokens): for a target whose one response spans several model calls, each
// allowed max_tokens (ragtail's agentic mode, whose usage sums its calls). n <= 0 keeps the
// default.
func WithOutputTokenLimit(n int) Option { return optionFunc(func(c *config) { c.outputLimit = n }) }

// outputLimitOf is the output token limit of a response to a request with maxTokens.
func (c *Client) outputLimitOf(maxTokens int) int {
	if c.cfg.outputLimit > 0 {
		return c.cfg.outputLimit
	}
	return OutputTokenLimit(maxTokens)
}

// WithTemperature sets the sampling temperature of every request.
func WithTemperature(t float64) Option {
	return optionFunc(func(c *config) { c.temperature = &t })
}

// WithStream chooses streamed (SSE, the default) or non-streamed responses. Without streaming
// there is no first token: TTFT, TPOT and ITL are undefined and only E2EL is measured.
func WithStream(stream bool) Option { return optionFunc(func(c *config) { c.stream = stream }) }

// WithStreamUsage asks for the usage chunk (stream_options.include_usage, on by default). Turn it
// off for servers that reject stream_options; output tokens are then counted from chunks.
func WithStreamUsage(on bool) Option { return optionFunc(func(c *config) { c.streamUsage = on }) }

// WithBody adds top-level fields to every request body, such as ragtail's
// {"rag": {"coupling": "async"}} or vLLM's {"ignore_eos": true}. A request's own Extra fields
// win over these, and these over the standard fields.
func WithBody(fields map[string]any) Option {
	return optionFunc(func(c *config) {
		if c.extra == nil {
			c.extra = map[string]any{}
		}
		for k, v := range fields {
			c.extra[k] = v
		}
	})
}

// WithHeader adds a header to every request.
func WithHeader(key, value string) Option {
	return optionFunc(func(c *config) { c.header.Add(key, value) })
}

// WithTimeout bounds each request from the call to Do (connecting included) to its last byte; a
// request over it ends with loadgen.ErrKindTimeout. 0 (the default) sets no bound.
func WithTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.timeout = d }) }

// WithTransport replaces the HTTP transport. The default (see WithHTTPClient) keeps any number
// of connections open to the target and does not ask for compression.
func WithTransport(rt http.RoundTripper) Option {
	return optionFunc(func(c *config) { c.transport = rt })
}

// The HTTP clients WithHTTPClient chooses from.
const (
	// HTTPClientH1 is the lean HTTP/1.1 transport of package h1 for http:// targets reached
	// without a proxy (the default): a round trip on the caller's goroutine, no goroutines per
	// connection. https:// and proxied targets still go through net/http.
	HTTPClientH1 = "h1"
	// HTTPClientNetHTTP is net/http's Transport (NewTransport) for every target.
	HTTPClientNetHTTP = "net/http"
)

// HTTPClients lists the values WithHTTPClient accepts.
var HTTPClients = []string{HTTPClientH1, HTTPClientNetHTTP}

// WithHTTPClient chooses the default transport: HTTPClientH1 (the default) or
// HTTPClientNetHTTP. New rejects other names. It does not apply with WithTransport.
func WithHTTPClient(name string) Option {
	return optionFunc(func(c *config) { c.httpClient = name })
}

// WithMaxConns limits the default transport to n connections to the target (0: no limit),
// dialling no more while n are open. A load generator that caps its requests in flight at n
// gives the same n here: then a connection dialled for a request that an idle one served first
// cannot add to the open ones beyond the cap. It does not apply with WithTransport.
func WithMaxConns(n int) Option { return optionFunc(func(c *config) { c.maxConns = max(n, 0) }) }

// WithClockHeaders sets the response headers that may carry the server's clock, tried in
// order (see DefaultClockHeaders for the accepted formats).
func WithClockHeaders(names ...string) Option {
	return optionFunc(func(c *config) { c.clockHeaders = names })
}

// DefaultClockHeaders are the response headers read for the server's clock: ragtail's
// X-Ragtail-Time (Unix nanoseconds when the response headers were written), then a generic
// name. A value is Unix time as an integer (seconds, milliseconds, microseconds or
// nanoseconds, told apart by size), a decimal number of seconds, or an RFC 3339 time.
var DefaultClockHeaders = []string{"X-Ragtail-Time", "X-Server-Time"}

// ResolveURL returns the endpoint a URL names: a chat-completions URL
// (http://host:8000/v1/chat/completions), a legacy completions one (/v1/completions), an
// embeddings one (/v1/embeddings), an Anthropic Messages one (/v1/messages) or an OpenAI
// Responses one (/v1/responses) as it is; a base URL gets the route appended as OpenAI clients do: http://host:8000/v1 becomes
// http://host:8000/v1/chat/completions, and a URL without a path (http://host:8000) gets
// /v1/chat/completions.
func ResolveURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil {
		return nil, fmt.Errorf("parse url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("url %q: want http:// or https:// with a host", rawURL)
	}
	p := strings.TrimSuffix(u.Path, "/")
	switch {
	case p == "":
		u.Path = "/v1/chat/completions"
	case strings.HasSuffix(p, "/completions") || strings.HasSuffix(p, "/embeddings") ||
		strings.HasSuffix(p, "/messages") || strings.HasSuffix(p, "/responses"):
		u.Path = p
	default:
		u.Path = p + "/chat/completions"
	}
	u.RawPath = ""
	return u, nil
}

// New returns a client of the endpoint at rawURL (see ResolveURL): a chat-completions URL, a
// legacy completions one, an embeddings, Anthropic Messages or OpenAI Responses one, or a base
// URL the chat-completions route is appended to. Requests
// with a Path go to the same scheme and host.
func New(rawURL string, opts ...Option) (*Client, error) {
	u, err := ResolveURL(rawURL)
	if err != nil {
		return nil, err
	}
	cfg := config{stream: true, streamUsage: true, header: http.Header{}, clockHeaders: DefaultClockHeaders, httpClient: HTTPClientH1}
	for _, o := range opts {
		o.apply(&cfg)
	}
	var transportName string
	if cfg.transport == nil {
		cfg.transport, transportName, err = defaultTransport(u, cfg, http.ProxyFromEnvironment)
		if err != nil {
			return nil, err
		}
	}
	c := &Client{
		cfg:         cfg,
		transport:   transportName,
		url:         u.String(),
		origin:      u.Scheme + "://" + u.Host,
		completions: strings.HasSuffix(u.Path, "/completions") && !strings.HasSuffix(u.Path, "/chat/completions"),
		embeddings:  strings.HasSuffix(u.Path, "/embeddings"),
		api:         apiOf(u.Path),
		// Redirects are not followed: a load generator should measure the endpoint it was given.
		hc: &http.Client{Transport: cfg.transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
	if len(cfg.extra) > 0 {
		c.extra = make(map[string]json.RawMessage, len(cfg.extra))
		for k, v := range cfg.extra {
			b, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("body field %q: %w", k, err)
			}
			c.extra[k] = b
		}
	}
	switch {
	case cfg.apiKey != "" && c.api == apiMessages:
		c.auth = []string{cfg.apiKey}
	case cfg.apiKey != "":
		c.auth = []string{"Bearer " + cfg.apiKey}
	}
	c.readers.New = func() any { return newSSEReader(nil) }
	return c, nil
}

// defaultTransport returns the transport cfg asks for to reach u, and its name: h1's for a
// plaintext target that proxy (the environment's settings) reaches without a proxy, else
// net/http's.
func defaultTransport(u *url.URL, cfg config, proxy func(*http.Request) (*url.URL, error)) (http.RoundTripper, string, error) {
	switch cfg.httpClient {
	case HTTPClientH1:
		if p, err := proxy(&http.Request{URL: u}); u.Scheme == "http" && err == nil && p == nil {
			return h1.New(h1.WithMaxConns(cfg.maxConns)), HTTPClientH1, nil
		}
	case HTTPClientNetHTTP:
	default:
		return nil, "", fmt.Errorf("http client %q: want one of %s", cfg.httpClient, strings.Join(HTTPClients, ", "))
	}
	t := NewTransport()
	t.MaxConnsPerHost = cfg.maxConns
	return t, HTTPClientNetHTTP, nil
}

// HTTPClient returns the kind of transport the client sends with: HTTPClientH1 or
// HTTPClientNetHTTP, or "" for one given by WithTransport.
func (c *Client) HTTPClient() string { return c.transport }

// NewTransport returns net/http's transport as New uses it (see WithHTTPClient): connections kept for reuse without a
// per-host limit (a load generator must not queue behind its own pool), no compression asked
// for (servers that compress an event stream delay its events), and the proxy from the
// environment.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   1 << 16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     true,
	}
}

// CloseIdleConnections closes the connections kept for reuse.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// URL returns the endpoint the client sends chat requests to.
func (c *Client) URL() string { return c.url }

// timing holds what the transport's trace hooks saw, written from its goroutines.
type timing struct {
	origin    time.Time
	wrote     atomic.Int64 // offset at which the request was written; 0 if not yet
	firstByte atomic.Int64
	// The connection's phases, as offsets: the first start and the last end of each (a dual-stack
	// dial may try several addresses), and whether the connection was a kept-alive one.
	dnsStart, dnsDone, connectStart, connectDone, tlsStart, tlsDone atomic.Int64
	gotConn, reused                                                 atomic.Bool
	trace                                                           httptrace.ClientTrace
	tp                                                              [1]string // the traceparent header's value, in the same allocation
}

// now is the offset of the present from the origin, at least 1 (0 means "not seen").
func (t *timing) now() int64 { return max(int64(time.Since(t.origin)), 1) }

func (t *timing) dnsStarted(httptrace.DNSStartInfo) { t.dnsStart.CompareAndSwap(0, t.now()) }
func (t *timing) dnsFinished(httptrace.DNSDoneInfo) { t.dnsDone.Store(t.now()) }
func (t *timing) connectStarted(_, _ string)        { t.connectStart.CompareAndSwap(0, t.now()) }
func (t *timing) connectFinished(_, _ string, _ error) {
	t.connectDone.Store(t.now())
}
func (t *timing) tlsStarted()                            { t.tlsStart.CompareAndSwap(0, t.now()) }
func (t *timing) tlsFinished(tls.ConnectionState, error) { t.tlsDone.Store(t.now()) }
func (t *timing) gotConnection(info httptrace.GotConnInfo) {
	t.reused.Store(info.Reused)
	t.gotConn.Store(true)
}
func phase(start, done *atomic.Int64) time.Duration {
	s, d := start.Load(), done.Load()
	if s == 0 || d < s {
		return 0
	}
	return time.Duration(d - s)
}

// phases fills rec's connection phases: on a new connection, how long its DNS lookup, TCP
// connect and TLS handshake took (each 0 when it did not happen: an IP address needs no
// lookup, http:// no handshake); on a kept-alive one, only ConnReused.
func (t *timing) phases(rec *loadgen.Record) {
	if !t.gotConn.Load() {
		return
	}
	if t.reused.Load() {
		rec.ConnReused = true
		return
	}
	rec.NewConn = true
	rec.DNS = phase(&t.dnsStart, &t.dnsDone)
	rec.Connect = phase(&t.connectStart, &t.connectDone)
	rec.TLSHandshake = phase(&t.tlsStart, &t.tlsDone)
}

func (t *timing) wroteRequest(httptrace.WroteRequestInfo) {
	t.wrote.CompareAndSwap(0, int64(time.Since(t.origin)))
}

func (t *timing) gotFirstResponseByte() {
	t.firstByte.CompareAndSwap(0, int64(time.Since(t.origin)))
}

// Do sends req and fills rec; see loadgen.Doer. It never panics on a bad response: every
// failure becomes rec.Err and rec.ErrKind.
func (c *Client) Do(ctx context.Context, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	if c.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
	}
	// One allocation holds the trace hooks' state; net/http's transport calls the hooks from its
	// own goroutines, possibly after Do returned, so the state is never reused.
	tm := &timing{origin: origin}
	tm.trace.WroteRequest = tm.wroteRequest
	tm.trace.GotFirstResponseByte = tm.gotFirstResponseByte
	tm.trace.DNSStart, tm.trace.DNSDone = tm.dnsStarted, tm.dnsFinished
	tm.trace.ConnectStart, tm.trace.ConnectDone = tm.connectStarted, tm.connectFinished
	tm.trace.TLSHandshakeStart, tm.trace.TLSHandshakeDone = tm.tlsStarted, tm.tlsFinished
	tm.trace.GotConn = tm.gotConnection
	ctx = httptrace.WithClientTrace(ctx, &tm.trace)

	hreq, err := c.newRequest(ctx, req)
	if err != nil {
		now := time.Since(origin)
		rec.Sent, rec.End = now, now
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("build request: %w", err))
		return
	}
	var traceID, traceparent string
	if c.cfg.tracing != nil {
		var span trace.Span
		span, traceID, traceparent = c.startSpan(ctx, req, origin, rec)
		defer endSpan(span, origin, rec)
	} else {
		traceID, traceparent = newTraceparent()
	}
	tm.tp[0] = traceparent
	hreq.Header["Traceparent"] = tm.tp[:]
	rec.TraceID = traceID

	var abandon *abandoner
	if req.Cancel != nil {
		var actx context.Context
		actx, abandon = newAbandoner(hreq.Context(), *req.Cancel, origin, rec)
		hreq = hreq.WithContext(actx)
		ctx = actx
		defer abandon.finish()
	}

	before := time.Since(origin)
	resp, err := c.roundTrip(hreq)
	tm.phases(rec)
	if err != nil {
		rec.Sent, rec.End = sentAt(tm, before), time.Since(origin)
		written := tm.wrote.Load() != 0
		fail(rec, classify(ctx, err, written), err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if fb := tm.firstByte.Load(); fb != 0 {
		rec.FirstByte = time.Duration(fb)
	} else {
		rec.FirstByte = time.Since(origin)
	}
	// A server may answer before it has read the whole request: then the write ends after the
	// first byte came, and the send is taken from before the round trip.
	if rec.Sent = sentAt(tm, before); rec.Sent > rec.FirstByte {
		rec.Sent = before
	}
	rec.Status = resp.StatusCode
	if tc, ok := parseTraceparent(resp.Header.Get("traceparent")); ok {
		rec.TraceID = tc
	}
	if st := resp.Header.Values("Server-Timing"); len(st) > 0 {
		rec.ServerTiming = parseServerTimingInto(rec.ServerTiming, st...)
	}
	// The server may stamp its clock while the request is still being written (on loopback
	// the kernel delivers it within the write), so the sample's lower bound is the instant
	// before the round trip, not the end of the write that rec.Sent is.
	c.clock.observe(resp.Header, c.cfg.clockHeaders, origin.Add(before), origin.Add(rec.FirstByte))

	body := io.Reader(resp.Body)
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			rec.End = time.Since(origin)
			fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("gzip body: %w", err))
			return
		}
		body = zr
	}
	if abandon != nil {
		body = abandon.wrap(body)
	}

	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		c.readError(ctx, resp, body, origin, rec)
	case req.Path != "":
		c.readPlain(ctx, body, origin, rec)
	case req.Input != nil:
		c.readEmbeddings(ctx, body, req, origin, rec)
	case isEventStream(resp.Header.Get("Content-Type")) || (c.cfg.stream && !isJSON(resp.Header.Get("Content-Type"))):
		switch c.api {
		case apiMessages:
			c.readMessagesStream(ctx, body, req, origin, rec)
		case apiResponses:
			c.readResponsesStream(ctx, body, req, origin, rec)
		default:
			c.readStream(ctx, body, req, origin, rec)
		}
	case c.api == apiMessages:
		c.readMessage(ctx, body, req, origin, rec)
	case c.api == apiResponses:
		c.readResponse(ctx, body, req, origin, rec)
	default:
		c.readCompletion(ctx, body, req, origin, rec)
	}
	// Trailers are complete once the body has been read to its end.
	if st := resp.Trailer.Values("Server-Timing"); len(st) > 0 {
		rec.ServerTiming = parseServerTimingInto(rec.ServerTiming, st...)
	}
	if rec.PromptTokens == 0 {
		rec.PromptTokens = req.PromptTokens
	}
}

// roundTrip sends hreq on the client's transport directly. http.Client.Do would clone the
// request's headers and URL for redirects the client never follows (its CheckRedirect stops at
// the first response), a copy per request; its error is kept: a *url.Error naming the method
// and URL.
func (c *Client) roundTrip(hreq *http.Request) (*http.Response, error) {
	resp, err := c.hc.Transport.RoundTrip(hreq)
	if err != nil {
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		return nil, &url.Error{Op: urlErrorOp(hreq.Method), URL: hreq.URL.Redacted(), Err: err}
	}
	if resp == nil {
		return nil, &url.Error{Op: urlErrorOp(hreq.Method), URL: hreq.URL.Redacted(), Err: errors.New("transport returned neither a response nor an error")}
	}
	return resp, nil
}

// urlErrorOp is the Op of a round trip's *url.Error, as http.Client spells it: "Get", "Post".
func urlErrorOp(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}

// sentAt is when the request was written: from the transport's hook, or before the round trip.
func sentAt(tm *timing, before time.Duration) time.Duration {
	if w := tm.wrote.Load(); w != 0 {
		return time.Duration(w)
	}
	return before
}

// newRequest builds the HTTP request for req. A GET has no body; a chat request's body buffer
// is its own, never pooled: the transport may still be writing it when a server that answered
// early has made Do return.
func (c *Client) newRequest(ctx context.Context, req *loadgen.Request) (*http.Request, error) {
	if req.Path != "" {
		target := c.origin + req.Path
		if !strings.HasPrefix(req.Path, "/") {
			target = c.origin + "/" + req.Path
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, err
		}
		c.setHeaders(hreq, acceptJSON)
		return hreq, nil
	}
	if (req.Input != nil) != c.embeddings {
		if c.embeddings {
			return nil, errNoInput
		}
		return nil, fmt.Errorf("an embeddings request needs an /embeddings URL, not %s", c.url)
	}
	buf := new(bytes.Buffer)
	if err := c.encodeBody(req, buf); err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(buf.Bytes()))
	if err != nil {
		return nil, err
	}
	accept := acceptJSON
	if c.cfg.stream && !c.embeddings {
		accept = acceptEvents
	}
	hreq.Header["Content-Type"] = acceptJSON
	c.setHeaders(hreq, accept)
	return hreq, nil
}

// Header values shared by every request: net/http only reads them.
var (
	acceptJSON   = []string{"application/json"}
	acceptEvents = []string{"text/event-stream"}
	userAgent    = []string{"ragtail-bench"}

	anthropicVersionHeader = []string{anthropicVersion}
)

func (c *Client) setHeaders(hreq *http.Request, accept []string) {
	h := hreq.Header
	h["Accept"] = accept
	h["User-Agent"] = userAgent
	switch {
	case c.api == apiMessages:
		h["Anthropic-Version"] = anthropicVersionHeader
		if c.auth != nil {
			h["X-Api-Key"] = c.auth
		}
	case c.auth != nil:
		h["Authorization"] = c.auth
	}
	for k, vs := range c.cfg.header { // the user's own headers win
		h[k] = vs
	}
}

// chatBody is the JSON of a chat (or legacy completions) request.
type chatBody struct {
	Model         string            `json:"model,omitempty"`
	Messages      []loadgen.Message `json:"messages,omitempty"`
	Prompt        *string           `json:"prompt,omitempty"`
	MaxTokens     int               `json:"max_tokens,omitempty"`
	Temperature   *float64          `json:"temperature,omitempty"`
	Stream        bool              `json:"stream"`
	StreamOptions *streamOptions    `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

var includeUsage = &streamOptions{IncludeUsage: true}

func (c *Client) encodeBody(req *loadgen.Request, buf *bytes.Buffer) error {
	if c.embeddings {
		if err := c.encodeEmbeddings(req, buf); err != nil {
			return err
		}
		return c.mergeExtra(req, buf)
	}
	switch c.api {
	case apiMessages:
		if err := c.encodeMessages(req, buf); err != nil {
			return err
		}
		return c.mergeExtra(req, buf)
	case apiResponses:
		if err := c.encodeResponses(req, buf); err != nil {
			return err
		}
		return c.mergeExtra(req, buf)
	}
	b := chatBody{Model: c.cfg.model, MaxTokens: c.cfg.maxTokens, Temperature: c.cfg.temperature, Stream: c.cfg.stream}
	if req.MaxTokens > 0 {
		b.MaxTokens = req.MaxTokens
	}
	if c.cfg.stream && c.cfg.streamUsage {
		b.StreamOptions = includeUsage
	}
	if c.completions {
		var sb strings.Builder
		for i, m := range req.Messages {
			if i > 0 {
				sb.WriteString("\n\n")
			}
			sb.WriteString(m.Content)
		}
		p := sb.String()
		b.Prompt = &p
	} else {
		b.Messages = req.Messages
		if b.Messages == nil {
			b.Messages = []loadgen.Message{}
		}
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b); err != nil {
		return err
	}
	return c.mergeExtra(req, buf)
}

// mergeExtra merges the extra body fields into the JSON object in buf: the request's over the
// client's over the standard ones.
func (c *Client) mergeExtra(req *loadgen.Request, buf *bytes.Buffer) error {
	if len(c.extra) == 0 && len(req.Extra) == 0 {
		return nil
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(buf.Bytes(), &fields); err != nil {
		return err
	}
	for k, v := range c.extra {
		fields[k] = v
	}
	for k, v := range req.Extra {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("body field %q: %w", k, err)
		}
		fields[k] = raw
	}
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(fields)
}

// readPlain reads a successful non-chat response (a document lookup) to its end.
func (c *Client) readPlain(ctx context.Context, body io.Reader, origin time.Time, rec *loadgen.Record) {
	_, err := io.Copy(io.Discard, body)
	rec.End = time.Since(origin)
	if err != nil {
		fail(rec, classifyRead(ctx, err), fmt.Errorf("read body: %w", err))
	}
}

// maxErrorBody bounds how much of an error body is read for its message.
const maxErrorBody = 64 << 10

// readError reads a response whose status is not 2xx, whatever its body.
func (c *Client) readError(ctx context.Context, resp *http.Response, body io.Reader, origin time.Time, rec *loadgen.Record) {
	b, err := io.ReadAll(io.LimitReader(body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20)) // let the connection be reused
	rec.End = time.Since(origin)
	kind := loadgen.ErrKindProtocol
	switch {
	case resp.StatusCode >= 500:
		kind = loadgen.ErrKindHTTP5xx
	case resp.StatusCode >= 400:
		kind = loadgen.ErrKindHTTP4xx
	}
	msg := errorMessage(b)
	if msg == "" && err != nil {
		msg = err.Error()
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	limit := maxErrText
	if fullErrors(ctx) {
		limit = maxPreflightError
	}
	if rec.ErrKind == "" {
		rec.ErrKind, rec.Err = kind, truncateTo(fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg), limit)
	}
}

// errText returns the chunk's error message if it is an error event.
func (ch *chunkInfo) errText() (string, bool) {
	if !ch.isError {
		return "", false
	}
	return truncate(rawMessage(ch.errRaw)), true
}

// rawMessage turns a raw JSON error value into a message: the "message" of an object, the
// text of a string, else the JSON itself.
func rawMessage(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var obj struct {
		Message string `json:"message"`
	}
	if raw[0] == '{' && json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return obj.Message
	}
	var str string
	if raw[0] == '"' && json.Unmarshal(raw, &str) == nil {
		return str
	}
	return string(raw)
}

// unquoteJSON unquotes a raw JSON string of a chunk ("server_timing", "model"); "" if it is not one.
func unquoteJSON(raw []byte) string {
	if len(raw) < 2 {
		return ""
	}
	var str string
	if json.Unmarshal(raw, &str) != nil {
		return ""
	}
	return str
}

// readStream reads an SSE response.
func (c *Client) readStream(ctx context.Context, body io.Reader, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	sr := c.readers.Get().(*sseReader)
	sr.reset(body)
	defer func() {
		sr.reset(nil)
		c.readers.Put(sr)
	}()
	var (
		ch         chunkInfo
		done       bool
		finished   bool
		usageSeen  bool
		lastCumOut int    // completion tokens of the last chunk that carried usage
		answer     []byte // the answer's text, when the request asks to keep it
		tokens     int    // output tokens counted over the content chunks
		events     int    // data events read
		calls      toolCallAcc
	)
	maxTokens := c.maxTokensOf(req)
	limit := c.outputLimitOf(maxTokens)
	if req.KeepAnswer {
		defer func() { rec.Answer = string(answer) }()
	}
	defer calls.record(rec, req.KeepAnswer)
	for {
		event, data, at, err := sr.next()
		if err != nil {
			rec.End = time.Since(origin)
			if errors.Is(err, io.EOF) {
				break
			}
			fail(rec, classifyRead(ctx, err), fmt.Errorf("read stream: %w", err))
			return
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 {
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			done = true
			continue // read on to the end of the body, where the trailers are
		}
		offset := at.Sub(origin)
		// Events that carry no content (a role, a usage, empty deltas) are a few per response;
		// an endless run of them is cut like an endless run of tokens.
		if events++; events > 2*limit {
			rec.End = offset
			fail(rec, loadgen.ErrKindOverlong, overlong(events, "events", maxTokens, limit))
			return
		}
		if err := scanChunk(data, &ch); err != nil {
			if string(event) == "error" {
				rec.End = offset
				fail(rec, loadgen.ErrKindStream, fmt.Errorf("error event: %s", truncate(string(data))))
				return
			}
			rec.End = offset
			fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("chunk is not JSON: %s", truncate(string(data))))
			return
		}
		if msg, isErr := ch.errText(); isErr || string(event) == "error" {
			if msg == "" {
				msg = truncate(string(data))
			}
			rec.End = offset
			fail(rec, loadgen.ErrKindStream, fmt.Errorf("error event: %s", msg))
			return
		}
		if ch.serverTiming != nil {
			rec.ServerTiming = parseServerTimingInto(rec.ServerTiming, unquoteJSON(ch.serverTiming))
		}
		if ch.model != nil && rec.ResponseModel == "" && c.cfg.tracing != nil {
			rec.ResponseModel = truncateTo(unquoteJSON(ch.model), maxAttrText)
		}
		if ch.hasUsage && ch.completionTokens > limit {
			rec.End = offset
			fail(rec, loadgen.ErrKindOverlong, overlong(ch.completionTokens, "tokens by its usage", maxTokens, limit))
			return
		}
		if len(ch.toolCalls) > 0 {
			if err := calls.add(ch.toolCalls, req.KeepAnswer); err != nil {
				rec.End = offset
				fail(rec, loadgen.ErrKindProtocol, err)
				return
			}
		}
		if ch.content {
			n := 1
			if ch.hasUsage && ch.completionTokens > lastCumOut {
				// vLLM's continuous usage stats: the running total tells how many tokens came.
				n = ch.completionTokens - lastCumOut
			}
			if tokens += n; tokens > limit {
				rec.End = offset
				fail(rec, loadgen.ErrKindOverlong, overlong(tokens, "tokens", maxTokens, limit))
				return
			}
			if rec.FirstToken == 0 {
				rec.FirstToken = offset
			}
			if ch.output && rec.FirstOutput == 0 {
				rec.FirstOutput = offset
			}
			rec.Reasoned = rec.Reasoned || ch.reasoning
			if req.KeepAnswer {
				answer = ch.appendText(answer, maxAnswerBytes)
			}
			rec.Chunks = append(rec.Chunks, loadgen.Chunk{At: offset, Tokens: n})
		}
		if ch.hasUsage {
			usageSeen = true
			lastCumOut = max(lastCumOut, ch.completionTokens)
			rec.PromptTokens = ch.promptTokens
			rec.OutputTokens = ch.completionTokens
			rec.CachedTokens, rec.ReasoningTokens = ch.cachedTokens, ch.reasoningTokens
		}
		if ch.finished {
			finished = true
		}
	}
	if usageSeen {
		rec.TokensFromUsage = true
	} else {
		rec.OutputTokens = 0
		for _, k := range rec.Chunks {
			rec.OutputTokens += k.Tokens
		}
	}
	// A stream cut after its finish chunk lost nothing a benchmark measures; one cut before it
	// did.
	if !done && !finished {
		fail(rec, loadgen.ErrKindStream, errors.New("stream ended without [DONE] or a finish reason"))
	}
}

// readCompletion reads a non-streamed completion.
func (c *Client) readCompletion(ctx context.Context, body io.Reader, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	rec.End = time.Since(origin)
	if err != nil {
		fail(rec, classifyRead(ctx, err), fmt.Errorf("read body: %w", err))
		return
	}
	var ch chunkInfo
	if err := scanChunk(b, &ch); err != nil {
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("response is not JSON: %s", truncate(string(b))))
		return
	}
	if msg, isErr := ch.errText(); isErr {
		fail(rec, loadgen.ErrKindStream, fmt.Errorf("error response: %s", msg))
		return
	}
	if !ch.content && !ch.finished {
		fail(rec, loadgen.ErrKindProtocol, errors.New("response has no choice with content or a finish reason"))
		return
	}
	maxTokens := c.maxTokensOf(req)
	if limit := c.outputLimitOf(maxTokens); ch.hasUsage && ch.completionTokens > limit {
		fail(rec, loadgen.ErrKindOverlong, overlong(ch.completionTokens, "tokens by its usage", maxTokens, limit))
		return
	}
	if ch.hasUsage {
		rec.PromptTokens, rec.OutputTokens, rec.TokensFromUsage = ch.promptTokens, ch.completionTokens, true
		rec.CachedTokens, rec.ReasoningTokens = ch.cachedTokens, ch.reasoningTokens
	}
	if ch.serverTiming != nil {
		rec.ServerTiming = parseServerTimingInto(rec.ServerTiming, unquoteJSON(ch.serverTiming))
	}
	rec.Reasoned = ch.reasoning
	if ch.model != nil && c.cfg.tracing != nil {
		rec.ResponseModel = truncateTo(unquoteJSON(ch.model), maxAttrText)
	}
	if req.KeepAnswer {
		rec.Answer = string(ch.appendText(nil, maxAnswerBytes))
	}
	var calls toolCallAcc
	if err := calls.add(ch.toolCalls, req.KeepAnswer); err != nil {
		fail(rec, loadgen.ErrKindProtocol, err)
		return
	}
	calls.record(rec, req.KeepAnswer)
}

// DefaultOutputTokenLimit bounds the output of a request sent without max_tokens: no model
// streams that many tokens in one answer, and its chunk records stay within a few MB.
const DefaultOutputTokenLimit = 1 << 18

// OutputTokenLimit is how many output tokens a response to a request with max_tokens may
// carry before the client cuts it and records it as loadgen.ErrKindOverlong:
// max(2·max_tokens, max_tokens+64), which leaves room for servers that count a little over
// (special tokens, a final chunk), or DefaultOutputTokenLimit when max_tokens is not set. A
// stream is also cut after twice that many events. It bounds the chunk records, the memory and
// the time one response can take, whatever the server sends.
func OutputTokenLimit(maxTokens int) int {
	if maxTokens <= 0 {
		return DefaultOutputTokenLimit
	}
	if maxTokens >= math.MaxInt32/2 {
		return math.MaxInt32
	}
	return max(2*maxTokens, maxTokens+64)
}

// overlong is the error of a response cut at the output token limit.
func overlong(n int, what string, maxTokens, limit int) error {
	if maxTokens <= 0 {
		return fmt.Errorf("response cut after %d %s: a request without max_tokens may take %d", n, what, limit)
	}
	return fmt.Errorf("response cut after %d %s: max_tokens is %d, and the client allows max(2·max_tokens, max_tokens+64) = %d", n, what, maxTokens, limit)
}

// maxTokensOf is the max_tokens (or max_completion_tokens, or the Responses API's
// max_output_tokens) req is sent with; 0 when none.
func (c *Client) maxTokensOf(req *loadgen.Request) int {
	for _, key := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if v, ok := req.Extra[key]; ok {
			return tokenCount(v)
		}
		if raw, ok := c.extra[key]; ok {
			var v any
			if json.Unmarshal(raw, &v) == nil {
				return tokenCount(v)
			}
			return 0
		}
	}
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	return c.cfg.maxTokens
}

// tokenCount reads a token count from a decoded JSON value; 0 if it is not a positive number.
func tokenCount(v any) int {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case int:
		f = float64(n)
	case json.Number:
		f, _ = n.Float64()
	default:
		return 0
	}
	if !(f > 0) {
		return 0
	}
	return int(min(f, math.MaxInt32))
}

// maxAnswerBytes bounds the answer text kept for a conversation's next turn.
const maxAnswerBytes = 1 << 20

// fail marks rec failed with kind and err, keeping the first failure.
func fail(rec *loadgen.Record, kind string, err error) {
	if rec.ErrKind != "" {
		return
	}
	rec.ErrKind, rec.Err = kind, truncate(err.Error())
}

// classify maps a round-trip error to an error kind.
func classify(ctx context.Context, err error, written bool) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return loadgen.ErrKindTimeout
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return loadgen.ErrKindCanceled
	case written:
		return loadgen.ErrKindProtocol // the connection broke before a response came
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return loadgen.ErrKindTimeout
	}
	return loadgen.ErrKindConnect
}

// classifyRead maps an error reading the body to an error kind.
func classifyRead(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return loadgen.ErrKindTimeout
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return loadgen.ErrKindCanceled
	case errors.Is(err, errEventTooLarge):
		return loadgen.ErrKindProtocol
	}
	return loadgen.ErrKindStream
}

// errorMessage extracts a human message from an error body: OpenAI's {"error":{"message"}},
// {"error":"..."}, vLLM's {"message"}, FastAPI's {"detail"}, or the text itself. It is as
// long as the body (bounded by maxErrorBody); callers truncate it.
func errorMessage(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	var obj struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &obj) == nil {
		if msg := rawMessage(obj.Error); msg != "" && string(obj.Error) != "null" {
			return msg
		}
		if obj.Message != "" {
			return obj.Message
		}
		if len(obj.Detail) > 0 {
			var s string
			if json.Unmarshal(obj.Detail, &s) == nil {
				return s
			}
			return string(obj.Detail)
		}
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// maxErrText bounds error strings kept in records.
const maxErrText = 300

// maxPreflightError bounds the error message of a preflight request: the server's whole
// message, such as a list of the models it serves, up to this.
const maxPreflightError = 4096

func truncate(s string) string { return truncateTo(s, maxErrText) }

func truncateTo(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "..."
}

func isEventStream(ct string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
}

func isJSON(ct string) bool {
	ct = strings.ToLower(ct)
	return strings.Contains(ct, "/json") || strings.Contains(ct, "+json")
}

// Models lists the model ids the server serves: GET models beside the endpoint, as OpenAI
// clients do (/v1/chat/completions: /v1/models).
func (c *Client) Models(ctx context.Context) ([]string, error) {
	u, err := c.modelsURL()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	c.setHeaders(req, acceptJSON)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list models: HTTP %d: %s", resp.StatusCode, truncateTo(errorMessage(b), maxPreflightError))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, nil
}

// fullErrorsKey marks a request context whose error record keeps the server's whole message.
type fullErrorsKey struct{}

func fullErrors(ctx context.Context) bool { return ctx.Value(fullErrorsKey{}) != nil }

// PreflightError is the failure of a preflight request.
type PreflightError struct {
	URL    string
	Kind   string // a loadgen.ErrKind
	Status int    // HTTP status; 0 without a response
	Msg    string // what failed: the server's message (up to 4 KB) or the connection error
}

func (e *PreflightError) Error() string {
	var hint string
	switch {
	case e.Kind == loadgen.ErrKindConnect:
		hint = " (is the server running, and is --url right?)"
	case e.Status == http.StatusNotFound || e.Status == http.StatusMethodNotAllowed:
		hint = " (is --url the server's OpenAI API? a base URL such as http://host:8000/v1 gets /chat/completions appended)"
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		hint = " (pass --api-key or set OPENAI_API_KEY)"
	}
	return fmt.Sprintf("preflight request to %s failed: %s%s", e.URL, e.Msg, hint)
}

// Preflight sends req once and returns nil when it completed, or a *PreflightError carrying
// the server's whole error message (up to 4 KB, where a request record keeps 300 bytes): a
// run whose every request would fail, against a dead URL or with a wrong model, stops before
// it starts.
func (c *Client) Preflight(ctx context.Context, req *loadgen.Request) error {
	var rec loadgen.Record
	c.Do(context.WithValue(ctx, fullErrorsKey{}, true), req, time.Now(), &rec)
	if rec.OK() {
		return nil
	}
	msg := rec.Err
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d", rec.Status)
	}
	kind := rec.ErrKind
	if kind == "" {
		kind = loadgen.ErrKindProtocol
	}
	return &PreflightError{URL: c.url, Kind: kind, Status: rec.Status, Msg: msg}
}

// ClockOffset is the estimated offset of the server's clock: server time minus client time,
// within plus or minus Uncertainty (half the round trip of the best sample).
type ClockOffset struct {
	Offset      time.Duration
	Uncertainty time.Duration
	Samples     int
}

// ProbeClock sends n GET requests for the model list, whose headers the server writes at once,
// and feeds their clock headers to the offset estimate: a chat request's headers wait for the
// pipeline, so its round trip bounds the offset loosely, while a probe's is about one network
// round trip. It returns the first error; a server without a model list only leaves the
// estimate to the requests of the run.
func (c *Client) ProbeClock(ctx context.Context, n int) error {
	u, err := c.modelsURL()
	if err != nil {
		return err
	}
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		c.setHeaders(req, acceptJSON)
		sent := time.Now()
		resp, err := c.hc.Do(req)
		if err != nil {
			return fmt.Errorf("clock probe: %w", err)
		}
		firstByte := time.Now()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // reuse the connection
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("clock probe: HTTP %d", resp.StatusCode)
		}
		c.clock.observe(resp.Header, c.cfg.clockHeaders, sent, firstByte)
	}
	return nil
}

// modelsURL is the model list's URL beside the completions endpoint.
func (c *Client) modelsURL() (string, error) {
	u, err := url.Parse(c.url)
	if err != nil {
		return "", err
	}
	base := u.Path
	for _, route := range []string{"/chat/completions", "/completions", "/embeddings", "/messages", "/responses"} {
		if b, ok := strings.CutSuffix(u.Path, route); ok {
			base = b
			break
		}
	}
	u.Path = base + "/models"
	return u.String(), nil
}

// ClockOffset returns the estimate from the responses seen so far; false when no response
// carried the server's clock.
func (c *Client) ClockOffset() (ClockOffset, bool) { return c.clock.estimate() }

// clockEstimator keeps the tightest NTP-style sample: a server time stamped while the request
// was being served lies between the client's send and first byte, so the offset lies within
// half that round trip of server - midpoint.
type clockEstimator struct {
	mu      sync.Mutex
	best    ClockOffset
	samples int
}

func (e *clockEstimator) observe(h http.Header, names []string, sent, firstByte time.Time) {
	for _, name := range names {
		v := h.Get(name)
		if v == "" {
			continue
		}
		server, ok := ParseServerTime(v)
		if !ok {
			continue
		}
		half := firstByte.Sub(sent) / 2
		mid := sent.Add(half)
		off := server.Sub(mid)
		e.mu.Lock()
		e.samples++
		if e.samples == 1 || half < e.best.Uncertainty {
			e.best = ClockOffset{Offset: off, Uncertainty: half}
		}
		e.mu.Unlock()
		return
	}
}

func (e *clockEstimator) estimate() (ClockOffset, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.samples == 0 {
		return ClockOffset{}, false
	}
	est := e.best
	est.Samples = e.samples
	return est, true
}

// ParseServerTime parses a server clock header value: Unix time as an integer in seconds,
// milliseconds, microseconds or nanoseconds (told apart by magnitude), a decimal number of
// seconds, or an RFC 3339 time.
func ParseServerTime(v string) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, true
	}
	if !strings.ContainsAny(v, ".eE") {
		var n int64
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 && fmt.Sprint(n) == v {
			switch {
			case n >= 1e17:
				return time.Unix(0, n), true
			case n >= 1e14:
				return time.UnixMicro(n), true
			case n >= 1e11:
				return time.UnixMilli(n), true
			default:
				return time.Unix(n, 0), true
			}
		}
		return time.Time{}, false
	}
	var f float64
	if _, err := fmt.Sscan(v, &f); err != nil || f <= 0 || math.IsInf(f, 0) || f > 1e12 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9))), true
}
