package embed

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/propagation"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

// DefaultBatchSize is how many texts EmbedBatch sends in one request unless WithBatchSize says
// otherwise.
const DefaultBatchSize = 64

// maxResponseBytes bounds what the client reads from a response: a batch of 64 vectors of 3072
// floats is about 4 MB as JSON, so this leaves room for large batches and big models.
const maxResponseBytes = 128 << 20

// Client embeds text by calling an OpenAI-compatible embeddings endpoint through the openai-go
// SDK's embeddings API. It learns the vector dimension from the first response unless
// WithOutputDimensions fixes it, and rejects later responses of another length. A Client is
// safe for concurrent use.
//
// The SDK builds and sends the requests; the client adds, through the SDK's middleware, the
// bounded reading of answers, error bodies parsed whatever their shape (openai.ReadError: the
// SDK keeps only OpenAI's own), and its own strict decoding of the vectors: the SDK's decoder
// turns a malformed base64 or non-numeric embedding into an empty vector without saying why.
type Client struct {
	endpoint   string
	model      string
	oai        oai.Client
	dimensions int // requested with "dimensions"; 0: the model's own
	batchSize  int
	timeout    time.Duration // per request; 0: only the caller's context
	propagator propagation.TextMapPropagator
	dim        atomic.Int64 // learned, requested or expected dimension; 0 until known
}

// ClientOption configures NewClient.
type ClientOption interface{ applyClient(*clientConfig) }

type clientConfig struct {
	apiKey     string
	httpClient *http.Client
	dimensions int
	expected   int
	batchSize  int
	timeout    time.Duration
	propagator propagation.TextMapPropagator
}

type clientOptionFunc func(*clientConfig)

func (f clientOptionFunc) applyClient(c *clientConfig) { f(c) }

// WithAPIKey sends key as a bearer token.
func WithAPIKey(key string) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.apiKey = key })
}

// WithHTTPClient sets the HTTP client, for instance one whose transport is instrumented with
// otelhttp. The default client keeps up to 64 idle connections to the server, so that concurrent
// queries reuse connections instead of paying a handshake each.
func WithHTTPClient(hc *http.Client) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.httpClient = hc })
}

// WithOutputDimensions asks the model for vectors of n dimensions (OpenAI's "dimensions" request
// field, honoured by text-embedding-3 models and Matryoshka models on vLLM and TEI). Dimension
// then reports n before any request is made.
func WithOutputDimensions(n int) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.dimensions = n })
}

// WithExpectedDimension makes the client reject vectors that do not have n components, without
// asking the model for them (unlike WithOutputDimensions). Use it to check an embedding server
// against the index it must match, such as a Qdrant collection's vector size: a model swapped
// behind the URL then fails loudly instead of retrieving nonsense. Dimension reports n at once.
func WithExpectedDimension(n int) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.expected = n })
}

// WithTimeout bounds each request; one that runs longer fails with an error matching
// rag.ErrTimeout (default: only the caller's context bounds it).
func WithTimeout(d time.Duration) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.timeout = d })
}

// WithPropagator injects the caller's trace context into every request with p, typically W3C
// traceparent (default: nothing is injected).
func WithPropagator(p propagation.TextMapPropagator) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.propagator = p })
}

// WithBatchSize sets the most texts EmbedBatch sends in one request (default DefaultBatchSize).
func WithBatchSize(n int) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.batchSize = n })
}

// ErrCrossOriginRedirect is the redirect the client refuses to follow: one to another scheme,
// host or port than the request's.
var ErrCrossOriginRedirect = errors.New("the embeddings server redirected to another origin; the request was not sent there: set --embed-url to the server's final address")

// sameOriginRedirects returns a copy of hc that follows redirects only within the origin of
// the request that was redirected (and then as hc would), so that the texts and headers meant
// for the configured server never reach another one.
func sameOriginRedirects(hc *http.Client) *http.Client {
	c := *hc
	next := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > 0 && !sameOrigin(req.URL, via[0].URL) {
			return ErrCrossOriginRedirect
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// NewClient returns a client for the embeddings endpoint at baseURL serving model. baseURL is
// either the full endpoint (".../v1/embeddings"), an OpenAI-style base URL ending in "/v1", or a
// server root, to which "/v1/embeddings" is appended.
func NewClient(baseURL, model string, opts ...ClientOption) (*Client, error) {
	cfg := clientConfig{batchSize: DefaultBatchSize}
	for _, o := range opts {
		o.applyClient(&cfg)
	}
	endpoint, base, err := endpointURL(baseURL)
	if err != nil {
		return nil, err
	}
	switch {
	case strings.TrimSpace(model) == "":
		return nil, errors.New("embeddings client: model name is required (the server's embedding model, e.g. text-embedding-3-small)")
	case cfg.dimensions < 0:
		return nil, fmt.Errorf("embeddings client: dimensions %d must not be negative", cfg.dimensions)
	case cfg.batchSize < 1:
		return nil, fmt.Errorf("embeddings client: batch size %d must be at least 1", cfg.batchSize)
	case cfg.expected < 0:
		return nil, fmt.Errorf("embeddings client: expected dimension %d must not be negative", cfg.expected)
	case cfg.expected > 0 && cfg.dimensions > 0 && cfg.expected != cfg.dimensions:
		return nil, fmt.Errorf("embeddings client: output dimensions %d and expected dimension %d differ", cfg.dimensions, cfg.expected)
	case cfg.timeout < 0:
		return nil, fmt.Errorf("embeddings client: timeout %v must not be negative", cfg.timeout)
	}
	if cfg.httpClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		cfg.httpClient = &http.Client{Transport: tr}
	}
	c := &Client{
		endpoint:   endpoint,
		model:      model,
		dimensions: cfg.dimensions,
		batchSize:  cfg.batchSize,
		timeout:    cfg.timeout,
		propagator: cfg.propagator,
	}
	c.oai = oai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(base),
		option.WithAPIKey(cfg.apiKey), // "" sends none, whatever OPENAI_API_KEY says
		option.WithHTTPClient(sameOriginRedirects(cfg.httpClient)),
		option.WithMaxRetries(0), // a failed embedding fails the request; the caller decides
		option.WithHeader("User-Agent", "ragtail-embed"),
		option.WithMiddleware(c.middleware),
	}, queryOptions(endpoint)...)...)
	c.dim.Store(int64(max(cfg.dimensions, cfg.expected)))
	return c, nil
}

// endpointURL returns the embeddings endpoint that base names and the SDK's base URL it lies
// under (ending in a slash).
func endpointURL(base string) (endpoint, sdkBase string, err error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil {
		return "", "", fmt.Errorf("embeddings client: url %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("embeddings client: url %q must be http(s)://host[:port][/v1]", base)
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/embeddings"):
	case strings.HasSuffix(p, "/v1"):
		p += "/embeddings"
	default:
		p += "/v1/embeddings"
	}
	u.Path, u.RawPath = p, ""
	endpoint = u.String()
	u.Path, u.RawQuery, u.Fragment = strings.TrimSuffix(p, "embeddings"), "", ""
	return endpoint, u.String(), nil
}

// queryOptions are the SDK options that send the query of the endpoint (an api-version, say)
// with every request: the SDK resolves its routes against the base URL, which drops a query.
func queryOptions(endpoint string) []option.RequestOption {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil
	}
	var opts []option.RequestOption
	for k, vs := range u.Query() {
		for _, v := range vs {
			opts = append(opts, option.WithQueryAdd(k, v))
		}
	}
	return opts
}

// Endpoint is the URL the client posts to.
func (c *Client) Endpoint() string { return c.endpoint }

// Model is the model name sent with every request.
func (c *Client) Model() string { return c.model }

// Dimension is the length of the vectors the server returns, or 0 until the first successful
// response when neither WithOutputDimensions nor WithExpectedDimension was given (see Probe).
func (c *Client) Dimension() int { return int(c.dim.Load()) }

// Probe embeds a short text to check that the server answers and to learn the dimension. Call it
// at start-up before anything needs Dimension.
func (c *Client) Probe(ctx context.Context) error {
	_, err := c.Embed(ctx, "ragtail probe")
	return err
}

// Embed returns the embedding of text.
func (c *Client) Embed(ctx context.Context, text string) ([]float32, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("%w: text to embed is empty", rag.ErrInvalidRequest)
	}
	vecs, err := c.post(ctx, text, 1)
	if err != nil {
		return nil, err
	}
	return vecs[0], nil
}

// EmbedBatch returns the embeddings of texts, in order, sending at most the batch size per
// request, one request after another.
func (c *Client) EmbedBatch(ctx context.Context, texts []string) ([][]float32, error) {
	for i, t := range texts {
		if strings.TrimSpace(t) == "" {
			return nil, fmt.Errorf("%w: text %d to embed is empty", rag.ErrInvalidRequest, i)
		}
	}
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += c.batchSize {
		batch := texts[start:min(start+c.batchSize, len(texts))]
		vecs, err := c.post(ctx, batch, len(batch))
		if err != nil {
			return nil, fmt.Errorf("texts %d to %d: %w", start, start+len(batch)-1, err)
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// post sends one request whose input holds n texts (a string, or n strings) and returns n
// vectors in input order.
func (c *Client) post(ctx context.Context, input any, n int) ([][]float32, error) {
	params := oai.EmbeddingNewParams{Model: c.model, EncodingFormat: oai.EmbeddingNewParamsEncodingFormatFloat}
	switch in := input.(type) {
	case string:
		params.Input.OfString = oai.String(in)
	case []string:
		params.Input.OfArrayOfStrings = in
	}
	if c.dimensions > 0 {
		params.Dimensions = oai.Int(int64(c.dimensions))
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var raw []byte
	if _, err := c.oai.Embeddings.New(ctx, params, option.WithResponseBodyInto(&raw)); err != nil {
		return nil, c.requestError(ctx, err)
	}
	vecs, err := decodeResponse(raw, n)
	if err != nil {
		return nil, fmt.Errorf("%w: embeddings server sent a bad response: %w", rag.ErrUnavailable, err)
	}
	dim := int64(len(vecs[0]))
	if c.dim.CompareAndSwap(0, dim) {
		return vecs, nil
	}
	if want := c.dim.Load(); want != dim {
		return nil, fmt.Errorf("%w: embeddings server returned %d dimensions, want %d", rag.ErrUnavailable, dim, want)
	}
	return vecs, nil
}

// middleware runs around every HTTP request the SDK makes: it injects the trace context, turns
// an error answer into the client's error, and bounds what is read of a good one.
func (c *Client) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if c.propagator != nil {
		c.propagator.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	}
	resp, err := next(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		a := openai.ReadError(resp, maxMessageLen)
		return nil, answerError{statusError(a.Status, a.Message)}
	}
	resp.Body = &limitedBody{rc: resp.Body, left: maxResponseBytes}
	return resp, nil
}

// answerError carries an error answer of the server through the SDK unchanged.
type answerError struct{ err error }

func (e answerError) Error() string { return e.err.Error() }
func (e answerError) Unwrap() error { return e.err }

// errTooLarge is what limitedBody returns past its limit.
var errTooLarge = fmt.Errorf("%w: embeddings response is larger than %d bytes: lower the batch size", rag.ErrUnavailable, maxResponseBytes)

// limitedBody is a response body that fails with errTooLarge past its limit, so that a huge
// answer is refused rather than read whole.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// requestError describes the failure of a request that got no usable answer: the context ended
// (the caller's, or the client's timeout), the server answered with an error or too much, a
// redirect left the origin, or the connection failed.
func (c *Client) requestError(ctx context.Context, err error) error {
	var ae answerError
	switch {
	case ctx.Err() != nil:
		return ctxError("embeddings request", ctx.Err())
	case errors.As(err, &ae):
		return ae.err
	case errors.Is(err, errTooLarge):
		return errTooLarge
	case errors.Is(err, ErrCrossOriginRedirect):
		// Not the *url.Error, which would show the redirect target.
		return fmt.Errorf("embeddings request: %w: %w", rag.ErrUnavailable, ErrCrossOriginRedirect)
	}
	return fmt.Errorf("embeddings request: %w: %w", rag.ErrUnavailable, err)
}

// statusError describes a non-200 answer with the server's message. The server rejecting the
// input (400, 413, 422) is the caller's problem; anything else means the embedding service is
// not usable right now.
func statusError(status int, msg string) error {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: embeddings server rejected the input (%d): %s", rag.ErrInvalidRequest, status, msg)
	}
	return fmt.Errorf("%w: embeddings server answered %d %s: %s", rag.ErrUnavailable, status, http.StatusText(status), msg)
}

// maxMessageLen bounds the server's error message in an error.
const maxMessageLen = 200

type embeddingResponse struct {
	Data []struct {
		Index     *int            `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
}

// decodeResponse parses an embeddings response that should hold n vectors of equal length and
// returns them ordered by their index. Embeddings may be JSON arrays or base64 strings of
// little-endian float32s (what the server sends if it ignores encoding_format "float").
func decodeResponse(raw []byte, n int) ([][]float32, error) {
	var resp embeddingResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	if len(resp.Data) != n {
		return nil, fmt.Errorf("response has %d embeddings for %d inputs", len(resp.Data), n)
	}
	out := make([][]float32, n)
	for i, d := range resp.Data {
		idx := i
		if d.Index != nil {
			idx = *d.Index
		}
		if idx < 0 || idx >= n || out[idx] != nil {
			return nil, fmt.Errorf("response embedding %d has index %d: want each of 0 to %d once", i, idx, n-1)
		}
		v, err := decodeVector(d.Embedding)
		if err != nil {
			return nil, fmt.Errorf("response embedding %d: %w", i, err)
		}
		if len(v) == 0 {
			return nil, fmt.Errorf("response embedding %d is empty", i)
		}
		out[idx] = v
	}
	for i := 1; i < n; i++ {
		if len(out[i]) != len(out[0]) {
			return nil, fmt.Errorf("response embeddings differ in length: %d and %d", len(out[0]), len(out[i]))
		}
	}
	return out, nil
}

func decodeVector(raw json.RawMessage) ([]float32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("base64 embedding: %w", err)
		}
		if len(b)%4 != 0 {
			return nil, fmt.Errorf("base64 embedding has %d bytes, not a whole number of float32s", len(b))
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, checkFinite(v)
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("embedding is neither an array of numbers nor a base64 string: %w", err)
	}
	return v, nil
}

func checkFinite(v []float32) error {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("embedding value %d is %v", i, x)
		}
	}
	return nil
}

// ProviderName returns "openai", the gen_ai.provider.name of its spans: the client speaks the
// OpenAI embeddings API, whichever server is behind it.
func (c *Client) ProviderName() string { return "openai" }
