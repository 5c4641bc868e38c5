package retrieve

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ragtail/ragtail/rag"
)

// Defaults of NewQdrant.
const (
	// DefaultQdrantPort is Qdrant's gRPC port, used when the address has none. (6333 is its REST
	// port, which this client does not speak.)
	DefaultQdrantPort = 6334
	// DefaultQdrantPoolSize is the number of gRPC connections, the go-client's own default.
	DefaultQdrantPoolSize = 3
	// DefaultQdrantKeepalive and DefaultQdrantKeepaliveTimeout are the go-client's defaults: a
	// ping after 10 s without activity, and the connection is dropped if its ack takes over 2 s.
	DefaultQdrantKeepalive        = 10 * time.Second
	DefaultQdrantKeepaliveTimeout = 2 * time.Second
	// DefaultQdrantCallTimeout bounds one search or read. A healthy Qdrant answers a top-k query
	// in milliseconds, so two seconds only cuts off a server that is in trouble.
	DefaultQdrantCallTimeout = 2 * time.Second
	// DefaultQdrantBatchSize is the number of points per upsert request.
	DefaultQdrantBatchSize = 256
	// minWriteTimeout bounds writes and collection changes, which Qdrant acknowledges only once
	// they are applied (wait=true) and so take longer than searches.
	minWriteTimeout = 30 * time.Second
)

// Payload keys of the points ragtail writes. Collections written by other tools work too: a
// point without chunk_id is known by its point id, and its text is read from "text" or
// "page_content" (LangChain's key).
const (
	PayloadChunkID = "chunk_id"
	PayloadDocID   = "doc_id"
	PayloadTitle   = "title"
	PayloadTopic   = "topic"
	PayloadText    = "text"
	PayloadTokens  = "tokens"
)

// Collection metadata keys ragtail records when it creates a collection. Qdrant versions that
// predate collection metadata drop it, and the checks that read it are then skipped.
const (
	MetadataEmbedder = "ragtail.embedder"
	MetadataShards   = "ragtail.shards"
)

// Errors of a collection that cannot serve. Both also match rag.ErrUnavailable.
var (
	// ErrCollectionMissing means a shard collection does not exist: nothing was ingested yet, or
	// with another shard count or collection name.
	ErrCollectionMissing = errors.New("collection does not exist")
	// ErrCollectionMismatch means a shard collection exists but does not fit: another vector
	// size, distance, embedder or shard count than the service uses.
	ErrCollectionMismatch = errors.New("collection does not match")
)

type qdrantConfig struct {
	apiKey           string
	tls              bool
	tlsConfig        *tls.Config
	pool             int
	keepalive        time.Duration
	keepaliveTimeout time.Duration
	callTimeout      time.Duration
	batchSize        int
	embedder         string
	tracerProvider   trace.TracerProvider
	meterProvider    metric.MeterProvider
	propagator       propagation.TextMapPropagator
	backoffBase      time.Duration
	backoffMax       time.Duration
	dialOptions      []grpc.DialOption
	logger           *slog.Logger
}

// QdrantOption configures NewQdrant.
type QdrantOption interface{ applyQdrant(*qdrantConfig) }

type qdrantOptionFunc func(*qdrantConfig)

func (f qdrantOptionFunc) applyQdrant(c *qdrantConfig) { f(c) }

// WithAPIKey sends key in the api-key header of every call, as Qdrant Cloud and servers started
// with QDRANT__SERVICE__API_KEY require. Without TLS the key crosses the network in clear text;
// NewQdrant logs a warning then.
func WithAPIKey(key string) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.apiKey = key })
}

// WithTLS connects over TLS. A nil cfg verifies the server against the system roots with TLS 1.3
// at least, the go-client's default.
func WithTLS(cfg *tls.Config) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.tls, c.tlsConfig = true, cfg })
}

// WithPoolSize sets the number of gRPC connections calls are spread over, round robin (default
// DefaultQdrantPoolSize). Each connection is one HTTP/2 connection with its own flow-control
// window, so a larger pool spreads concurrent searches over more windows.
func WithPoolSize(n int) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.pool = n })
}

// WithKeepalive sets the client's keepalive: a ping after interval without activity (also with
// no call in flight, as the go-client does), and the connection is closed if the ping's ack takes
// longer than timeout. A negative interval turns keepalive off. gRPC raises intervals under 10 s
// to 10 s. A server whose enforcement policy allows fewer pings answers too many of them with a
// GOAWAY (ENHANCE_YOUR_CALM, "too_many_pings") and the connection is re-established: the
// keepalive pitfall of the PITFALLS document.
func WithKeepalive(interval, timeout time.Duration) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.keepalive, c.keepaliveTimeout = interval, timeout })
}

// WithCallTimeout bounds each search and read (default DefaultQdrantCallTimeout; 0 means only the
// caller's context bounds it). A call that runs past it fails with an error matching
// rag.ErrTimeout and is counted in QdrantStats.Timeouts. Writes are given at least 30 s.
func WithCallTimeout(d time.Duration) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.callTimeout = d })
}

// WithBatchSize sets the number of points per upsert request (default DefaultQdrantBatchSize).
func WithBatchSize(n int) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.batchSize = n })
}

// WithEmbedder names the embedder whose vectors the collections hold, for instance
// "hash dim=384 seed=1". EnsureCollections records it in the metadata of the collections it
// creates, and Check refuses collections whose recorded embedder differs: vectors of another
// model would retrieve nonsense without any error.
func WithEmbedder(id string) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.embedder = id })
}

// WithTracerProvider records an otelgrpc client span for every call (default: none). The spans
// are children of the span in the call's context, such as the pipeline's "Query {collection}".
func WithTracerProvider(tp trace.TracerProvider) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.tracerProvider = tp })
}

// WithMeterProvider records otelgrpc's client metrics (rpc.client.*) (default: none).
func WithMeterProvider(mp metric.MeterProvider) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.meterProvider = mp })
}

// WithPropagator injects the call's trace context into the gRPC metadata with p, typically W3C
// traceparent (default: nothing is injected).
func WithPropagator(p propagation.TextMapPropagator) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.propagator = p })
}

// WithReconnectBackoff sets how long the client waits between attempts to reconnect to a Qdrant
// that went away: base after the first failure, growing by 1.6 per attempt up to max (defaults
// 100 ms and 2 s, so service resumes within about two seconds of Qdrant's return; gRPC's own
// default grows to two minutes).
func WithReconnectBackoff(base, max time.Duration) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.backoffBase, c.backoffMax = base, max })
}

// WithDialOptions adds gRPC dial options after ragtail's own, so they take precedence.
func WithDialOptions(opts ...grpc.DialOption) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.dialOptions = append(c.dialOptions, opts...) })
}

// WithLogger sets the logger for configuration warnings (default: discard).
func WithLogger(l *slog.Logger) QdrantOption {
	return qdrantOptionFunc(func(c *qdrantConfig) { c.logger = l })
}

// Qdrant searches a Qdrant server over gRPC with the official go-client.
//
// Shards map onto collections: with one shard the collection is the name given to NewQdrant;
// with n > 1 shards, shard i is the collection "<name>_<i>". A chunk lives in shard
// FNV-1a(chunk id) mod n, exactly as in Memory, so each shard is an independent Qdrant
// collection (its own segments and HNSW graph) and the pipeline's coupling modes fan out over
// real, separately answering indexes. Point ids are UUIDs derived from chunk ids (see PointID),
// so ingesting the same chunks again overwrites them instead of adding duplicates; the chunk id
// itself travels in the payload.
//
// NewQdrant does not connect: connections are made on first use and re-made whenever Qdrant
// comes back, so a Qdrant that is down when the service starts, or dies and returns, never needs
// a restart of the service. Calls to an unreachable Qdrant fail at once with an error matching
// rag.ErrUnavailable; calls that run past the call timeout fail with rag.ErrTimeout.
//
// A Qdrant is safe for concurrent use.
type Qdrant struct {
	client      *qdrant.Client
	addr        string
	name        string
	collections []string
	callTimeout time.Duration
	batchSize   int
	embedder    string

	searches atomic.Uint64
	failures atomic.Uint64
	timeouts atomic.Uint64
	connects atomic.Uint64

	version   atomic.Pointer[string]
	closeOnce sync.Once
	closeErr  error
}

// QdrantStats counts what a Qdrant client has done since it was made.
type QdrantStats struct {
	Searches uint64 // Search calls sent to Qdrant
	Failures uint64 // calls of any kind that failed, including timeouts
	Timeouts uint64 // calls that ran past the call timeout or the caller's deadline
	Connects uint64 // TCP connections opened: one per pooled connection, plus every reconnect
}

// NewQdrant returns a client for the Qdrant at addr ("host", "host:port" or "[v6]:port"; the
// port defaults to 6334) holding collection split into shards shard collections. It validates
// the settings but does not connect.
func NewQdrant(addr, collection string, shards int, opts ...QdrantOption) (*Qdrant, error) {
	cfg := qdrantConfig{
		pool:             DefaultQdrantPoolSize,
		keepalive:        DefaultQdrantKeepalive,
		keepaliveTimeout: DefaultQdrantKeepaliveTimeout,
		callTimeout:      DefaultQdrantCallTimeout,
		batchSize:        DefaultQdrantBatchSize,
		backoffBase:      100 * time.Millisecond,
		backoffMax:       2 * time.Second,
	}
	for _, o := range opts {
		o.applyQdrant(&cfg)
	}
	host, port, err := splitQdrantAddr(addr)
	if err != nil {
		return nil, err
	}
	switch {
	case strings.TrimSpace(collection) == "":
		return nil, fmt.Errorf("%w: qdrant: collection name is empty", rag.ErrInvalidRequest)
	case shards < 1:
		return nil, fmt.Errorf("%w: qdrant: %d shards: want at least 1", rag.ErrInvalidRequest, shards)
	case cfg.pool < 1:
		return nil, fmt.Errorf("%w: qdrant: pool size %d: want at least 1", rag.ErrInvalidRequest, cfg.pool)
	case cfg.keepalive >= 0 && cfg.keepaliveTimeout <= 0:
		return nil, fmt.Errorf("%w: qdrant: keepalive timeout %v: want a positive duration", rag.ErrInvalidRequest, cfg.keepaliveTimeout)
	case cfg.callTimeout < 0:
		return nil, fmt.Errorf("%w: qdrant: call timeout %v must not be negative", rag.ErrInvalidRequest, cfg.callTimeout)
	case cfg.batchSize < 1:
		return nil, fmt.Errorf("%w: qdrant: batch size %d: want at least 1", rag.ErrInvalidRequest, cfg.batchSize)
	case cfg.backoffBase <= 0 || cfg.backoffMax < cfg.backoffBase:
		return nil, fmt.Errorf("%w: qdrant: reconnect backoff %v..%v: want 0 < base <= max", rag.ErrInvalidRequest, cfg.backoffBase, cfg.backoffMax)
	}
	q := &Qdrant{
		addr:        net.JoinHostPort(host, strconv.Itoa(port)),
		name:        collection,
		collections: shardCollections(collection, shards),
		callTimeout: cfg.callTimeout,
		batchSize:   cfg.batchSize,
		embedder:    cfg.embedder,
	}
	if cfg.apiKey != "" && !cfg.tls && cfg.logger != nil {
		cfg.logger.Warn("qdrant API key is sent without TLS: anyone on the path can read it", "qdrant", q.addr)
	}
	client, err := qdrant.NewClient(&qdrant.Config{
		Host:      host,
		Port:      port,
		UseTLS:    cfg.tls,
		TLSConfig: cfg.tlsConfig,
		PoolSize:  uint(cfg.pool),
		// ragtail sets keepalive itself with sub-second precision (the go-client takes whole
		// seconds), and checks the server version in Check rather than blocking here for up to
		// a minute when Qdrant is down.
		KeepAliveTime:          -1,
		SkipCompatibilityCheck: true,
		GrpcOptions:            q.dialOptions(cfg),
	})
	if err != nil {
		return nil, fmt.Errorf("qdrant client for %s: %w", q.addr, err)
	}
	q.client = client
	return q, nil
}

// dialOptions returns the gRPC options ragtail adds to the go-client's own.
func (q *Qdrant) dialOptions(cfg qdrantConfig) []grpc.DialOption {
	tp := cfg.tracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := cfg.meterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	prop := cfg.propagator
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator() // injects nothing
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	opts := []grpc.DialOption{
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp), otelgrpc.WithPropagators(prop))),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, "tcp", addr)
			if err == nil {
				q.connects.Add(1)
			}
			return conn, err
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: cfg.backoffBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.backoffMax},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if cfg.keepalive >= 0 {
		interval := cfg.keepalive
		if interval == 0 {
			interval = DefaultQdrantKeepalive
		}
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: interval, Timeout: cfg.keepaliveTimeout, PermitWithoutStream: true,
		}))
	}
	if cfg.apiKey != "" {
		key := cfg.apiKey
		opts = append(opts, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
			cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "api-key", key), method, req, reply, cc, callOpts...)
		}))
	}
	return append(opts, cfg.dialOptions...)
}

// splitQdrantAddr parses "host", "host:port" or "[v6]:port"; a leading http:// or https:// is
// tolerated because users copy Qdrant URLs.
func splitQdrantAddr(addr string) (string, int, error) {
	a := strings.TrimSpace(addr)
	a = strings.TrimPrefix(strings.TrimPrefix(a, "http://"), "https://")
	a = strings.TrimSuffix(a, "/")
	if a == "" {
		return "", 0, fmt.Errorf("%w: qdrant address is empty: want host:port, e.g. localhost:6334", rag.ErrInvalidRequest)
	}
	host, portText, err := net.SplitHostPort(a)
	if err != nil {
		// No port (or a bare IPv6 address): use Qdrant's gRPC port.
		if strings.Count(a, ":") > 1 && !strings.HasPrefix(a, "[") {
			return a, DefaultQdrantPort, nil
		}
		if strings.Contains(a, ":") && !strings.HasPrefix(a, "[") {
			return "", 0, fmt.Errorf("%w: qdrant address %q: %w", rag.ErrInvalidRequest, addr, err)
		}
		return strings.Trim(a, "[]"), DefaultQdrantPort, nil
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("%w: qdrant address %q: want host:port with a port between 1 and 65535", rag.ErrInvalidRequest, addr)
	}
	return host, port, nil
}

func shardCollections(name string, shards int) []string {
	if shards == 1 {
		return []string{name}
	}
	names := make([]string, shards)
	for i := range names {
		names[i] = name + "_" + strconv.Itoa(i)
	}
	return names
}

// Addr returns the host:port the client connects to.
func (q *Qdrant) Addr() string { return q.addr }

// Collection returns the collection name given to NewQdrant, for span names and attributes.
func (q *Qdrant) Collection() string { return q.name }

// ShardCollection returns the Qdrant collection that holds shard i.
func (q *Qdrant) ShardCollection(i int) string { return q.collections[i] }

// Shards returns the number of shards, fixed at construction.
func (q *Qdrant) Shards() int { return len(q.collections) }

// DBSystem returns "qdrant", the db.system.name of its spans.
func (q *Qdrant) DBSystem() string { return "qdrant" }

// ServerVersion returns the version Qdrant reported at the last successful Check, or "".
func (q *Qdrant) ServerVersion() string {
	if v := q.version.Load(); v != nil {
		return *v
	}
	return ""
}

// Stats returns the client's counters.
func (q *Qdrant) Stats() QdrantStats {
	return QdrantStats{Searches: q.searches.Load(), Failures: q.failures.Load(), Timeouts: q.timeouts.Load(), Connects: q.connects.Load()}
}

// Close closes every connection. Calls made afterwards fail. It is idempotent.
func (q *Qdrant) Close() error {
	q.closeOnce.Do(func() { q.closeErr = q.client.Close() })
	return q.closeErr
}

// PointID returns the Qdrant point id of a chunk: the name-based (version 5, SHA-1) UUID of
// "ragtail-chunk:" + chunkID in the URL namespace of RFC 4122, so other tools can compute it
// (Python: uuid.uuid5(uuid.NAMESPACE_URL, "ragtail-chunk:" + chunk_id)).
func PointID(chunkID string) string {
	// RFC 4122 NameSpace_URL, 6ba7b811-9dad-11d1-80b4-00c04fd430c8.
	namespace := [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte("ragtail-chunk:"))
	h.Write([]byte(chunkID))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// ShardOf returns the shard that holds chunkID among shards shards: FNV-1a (64 bit) of the id,
// modulo shards, the same assignment Memory uses.
func ShardOf(chunkID string, shards int) int { return shardOf(chunkID, shards) }

func (q *Qdrant) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if q.callTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, q.callTimeout)
}

func (q *Qdrant) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(q.callTimeout, minWriteTimeout))
}

// Search returns the k points of one shard most similar to vec, best first, with Qdrant's
// cosine scores. It asks only for the chunk_id payload field, so answers stay small.
func (q *Qdrant) Search(ctx context.Context, shard int, vec []float32, k int) ([]rag.Hit, error) {
	if shard < 0 || shard >= len(q.collections) {
		return nil, fmt.Errorf("search shard %d: %w: index has %d shards", shard, rag.ErrInvalidRequest, len(q.collections))
	}
	if k <= 0 {
		return nil, nil
	}
	if len(vec) == 0 {
		return nil, fmt.Errorf("search shard %d: %w: empty query vector", shard, rag.ErrInvalidRequest)
	}
	name := q.collections[shard]
	q.searches.Add(1)
	cctx, cancel := q.readContext(ctx)
	defer cancel()
	limit := uint64(k)
	points, err := q.client.Query(cctx, &qdrant.QueryPoints{
		CollectionName: name,
		Query:          qdrant.NewQueryDense(vec),
		Limit:          &limit,
		WithPayload:    qdrant.NewWithPayloadInclude(PayloadChunkID),
	})
	if err != nil {
		return nil, q.fail(ctx, "query "+name, err)
	}
	hits := make([]rag.Hit, len(points))
	for i, p := range points {
		hits[i] = rag.Hit{ChunkID: chunkIDOf(p.GetId(), p.GetPayload()), Score: p.GetScore(), Shard: shard}
	}
	return hits, nil
}

// fail turns an error of a call into one the pipeline and the HTTP layer understand.
func (q *Qdrant) fail(ctx context.Context, op string, err error) error {
	q.failures.Add(1)
	ctxErr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && ctxErr == nil && !time.Now().Before(dl) {
		// gRPC's own timer can see the caller's deadline pass before the context's timer
		// has marked the context done: it is still the caller's deadline, not ours.
		ctxErr = context.DeadlineExceeded
	}
	if ctxErr != nil {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			q.timeouts.Add(1)
			return fmt.Errorf("%s: %w (%w)", op, rag.ErrTimeout, ctxErr)
		}
		return fmt.Errorf("%s: %w", op, ctxErr)
	}
	st := grpcStatus(err)
	switch st.Code() {
	case codes.DeadlineExceeded:
		q.timeouts.Add(1)
		return fmt.Errorf("%s: %w: qdrant at %s did not answer within %v", op, rag.ErrTimeout, q.addr, q.callTimeout)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("%s: %w: qdrant at %s refused the call (%s): check the API key", op, rag.ErrUnavailable, q.addr, st.Message())
	case codes.NotFound:
		return fmt.Errorf("%s: %w: %w: %s", op, rag.ErrUnavailable, ErrCollectionMissing, st.Message())
	}
	return fmt.Errorf("%s: %w: qdrant at %s: %s: %s", op, rag.ErrUnavailable, q.addr, st.Code(), st.Message())
}

// grpcStatus returns the gRPC status inside err, which the go-client wraps in its own error.
func grpcStatus(err error) *status.Status {
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(err, &gs) {
		if st := gs.GRPCStatus(); st != nil {
			return st
		}
	}
	return status.New(codes.Unknown, err.Error())
}

// chunkIDOf returns the chunk id in a payload, or the point id for points written by other
// tools.
func chunkIDOf(id *qdrant.PointId, payload map[string]*qdrant.Value) string {
	if v := payload[PayloadChunkID].GetStringValue(); v != "" {
		return v
	}
	if u := id.GetUuid(); u != "" {
		return u
	}
	return strconv.FormatUint(id.GetNum(), 10)
}

// Check reports whether Qdrant can serve searches: it answers, every shard collection exists,
// holds single unnamed vectors of dim components (any size if dim is 0) compared by cosine
// distance, and, where Qdrant kept ragtail's collection metadata, was written by the same
// embedder with the same shard count. The error says what is wrong and what to do; it matches
// rag.ErrUnavailable, and ErrCollectionMissing or ErrCollectionMismatch when Qdrant answered.
func (q *Qdrant) Check(ctx context.Context, dim int) error {
	cctx, cancel := q.readContext(ctx)
	defer cancel()
	health, err := q.client.HealthCheck(cctx)
	if err != nil {
		return q.fail(ctx, "health check", err)
	}
	v := health.GetVersion()
	q.version.Store(&v)
	for i, name := range q.collections {
		if err := q.checkCollection(ctx, i, name, dim); err != nil {
			return err
		}
	}
	return nil
}

func (q *Qdrant) checkCollection(ctx context.Context, shard int, name string, dim int) error {
	cctx, cancel := q.readContext(ctx)
	defer cancel()
	info, err := q.client.GetCollectionInfo(cctx, name)
	if err != nil {
		err = q.fail(ctx, "collection "+name, err)
		if errors.Is(err, ErrCollectionMissing) {
			return fmt.Errorf("%w: %w: %s (shard %d of %d) is not in qdrant at %s: ingest documents first (ragtail ingest DIR --qdrant %s --shards %d)",
				rag.ErrUnavailable, ErrCollectionMissing, name, shard, len(q.collections), q.addr, q.addr, len(q.collections))
		}
		return err
	}
	params := info.GetConfig().GetParams().GetVectorsConfig().GetParams()
	mismatch := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w: collection %s: %s", rag.ErrUnavailable, ErrCollectionMismatch, name, fmt.Sprintf(format, args...))
	}
	switch {
	case params == nil:
		return mismatch("it has named or no vectors; ragtail needs one unnamed dense vector per point")
	case dim > 0 && params.GetSize() != uint64(dim):
		return mismatch("it holds vectors of %d dimensions but the embedder makes %d: ingest into another collection or use the embedder it was built with", params.GetSize(), dim)
	case params.GetDistance() != qdrant.Distance_Cosine:
		return mismatch("it uses %s distance; ragtail scores by cosine similarity", params.GetDistance())
	}
	meta := info.GetConfig().GetMetadata()
	if got := meta[MetadataEmbedder].GetStringValue(); got != "" && q.embedder != "" && got != q.embedder {
		return mismatch("it was embedded with %q but queries are embedded with %q: use the same embedder flags or ingest again", got, q.embedder)
	}
	if v, ok := meta[MetadataShards]; ok && v.GetIntegerValue() != int64(len(q.collections)) {
		return mismatch("it was ingested as one of %d shards but the service uses %d: use --shards %d or ingest again", v.GetIntegerValue(), len(q.collections), v.GetIntegerValue())
	}
	return nil
}

// EnsureCollections creates the shard collections that do not exist, with vectors of dim
// components and cosine distance, recording the embedder and shard count in their metadata. It
// checks the ones that exist like Check does. Creating is idempotent and safe to race with
// another ingest.
func (q *Qdrant) EnsureCollections(ctx context.Context, dim int) error {
	if dim < 1 {
		return fmt.Errorf("%w: qdrant: vector size %d: want at least 1", rag.ErrInvalidRequest, dim)
	}
	for i, name := range q.collections {
		cctx, cancel := q.writeContext(ctx)
		exists, err := q.client.CollectionExists(cctx, name)
		cancel()
		if err != nil {
			return q.fail(ctx, "collection "+name, err)
		}
		if !exists {
			meta := map[string]*qdrant.Value{MetadataShards: qdrant.NewValueInt(int64(len(q.collections)))}
			if q.embedder != "" {
				meta[MetadataEmbedder] = qdrant.NewValueString(q.embedder)
			}
			cctx, cancel := q.writeContext(ctx)
			err := q.client.CreateCollection(cctx, &qdrant.CreateCollection{
				CollectionName: name,
				VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: uint64(dim), Distance: qdrant.Distance_Cosine}),
				Metadata:       meta,
			})
			cancel()
			if err != nil {
				// Another ingest may have created it meanwhile (Qdrant then answers "already
				// exists"): only an error that left no collection behind is one.
				cctx, cancel := q.writeContext(ctx)
				exists, existsErr := q.client.CollectionExists(cctx, name)
				cancel()
				if existsErr != nil || !exists {
					return q.fail(ctx, "create collection "+name, err)
				}
			}
		}
		if err := q.checkCollection(ctx, i, name, dim); err != nil {
			return err
		}
	}
	return nil
}

// Upsert writes chunks and their vectors, each into its shard's collection, in batches, and
// waits until Qdrant has applied each batch. Writing the same chunk ids again replaces the points,
// so ingestion is idempotent. It returns how many points were written before any error.
func (q *Qdrant) Upsert(ctx context.Context, chunks []rag.Chunk, vecs [][]float32) (int, error) {
	if len(chunks) != len(vecs) {
		return 0, fmt.Errorf("%w: upsert: %d chunks but %d vectors", rag.ErrInvalidRequest, len(chunks), len(vecs))
	}
	byShard := make([][]*qdrant.PointStruct, len(q.collections))
	for i, c := range chunks {
		if c.ID == "" {
			return 0, fmt.Errorf("%w: upsert chunk %d: empty id", rag.ErrInvalidRequest, i)
		}
		if len(vecs[i]) == 0 {
			return 0, fmt.Errorf("%w: upsert %q: empty vector", rag.ErrInvalidRequest, c.ID)
		}
		s := shardOf(c.ID, len(q.collections))
		byShard[s] = append(byShard[s], &qdrant.PointStruct{
			Id:      qdrant.NewID(PointID(c.ID)),
			Vectors: qdrant.NewVectorsDense(vecs[i]),
			Payload: chunkPayload(c),
		})
	}
	written := 0
	wait := true
	for s, points := range byShard {
		name := q.collections[s]
		for start := 0; start < len(points); start += q.batchSize {
			batch := points[start:min(start+q.batchSize, len(points))]
			cctx, cancel := q.writeContext(ctx)
			_, err := q.client.Upsert(cctx, &qdrant.UpsertPoints{CollectionName: name, Wait: &wait, Points: batch})
			cancel()
			if err != nil {
				return written, q.fail(ctx, "upsert into "+name, err)
			}
			written += len(batch)
		}
	}
	return written, nil
}

func chunkPayload(c rag.Chunk) map[string]*qdrant.Value {
	p := map[string]*qdrant.Value{
		PayloadChunkID: qdrant.NewValueString(c.ID),
		PayloadDocID:   qdrant.NewValueString(c.DocID),
		PayloadTitle:   qdrant.NewValueString(c.Title),
		PayloadText:    qdrant.NewValueString(c.Text),
		PayloadTokens:  qdrant.NewValueInt(int64(c.Tokens)),
	}
	if c.Topic != "" {
		p[PayloadTopic] = qdrant.NewValueString(c.Topic)
	}
	return p
}

// chunkOf rebuilds a chunk from a point's payload.
func chunkOf(id *qdrant.PointId, payload map[string]*qdrant.Value) rag.Chunk {
	c := rag.Chunk{
		ID:     chunkIDOf(id, payload),
		DocID:  payload[PayloadDocID].GetStringValue(),
		Title:  payload[PayloadTitle].GetStringValue(),
		Topic:  payload[PayloadTopic].GetStringValue(),
		Text:   payload[PayloadText].GetStringValue(),
		Tokens: int(payload[PayloadTokens].GetIntegerValue()),
	}
	if c.Text == "" {
		c.Text = payload["page_content"].GetStringValue()
	}
	if c.DocID == "" {
		c.DocID = c.ID
	}
	if c.Tokens == 0 {
		c.Tokens = rag.CountTokens(c.Text)
	}
	return c
}

// Get returns the chunk stored under id, reading its payload from its shard's collection. An id
// that is not stored returns an error matching rag.ErrNotFound.
func (q *Qdrant) Get(ctx context.Context, id string) (rag.Chunk, error) {
	name := q.collections[shardOf(id, len(q.collections))]
	cctx, cancel := q.readContext(ctx)
	defer cancel()
	points, err := q.client.Get(cctx, &qdrant.GetPoints{
		CollectionName: name,
		Ids:            []*qdrant.PointId{qdrant.NewID(PointID(id))},
		WithPayload:    qdrant.NewWithPayload(true),
	})
	if err != nil {
		return rag.Chunk{}, q.fail(ctx, "get from "+name, err)
	}
	if len(points) == 0 {
		return rag.Chunk{}, fmt.Errorf("chunk %q: %w", id, rag.ErrNotFound)
	}
	return chunkOf(points[0].GetId(), points[0].GetPayload()), nil
}

// scrollPage is the number of points read per scroll request.
const scrollPage = 256

// ScrollChunks reads every point's payload, shard after shard, and calls fn with each page of
// chunks, in Qdrant's id order. It stops at fn's first error and returns it.
func (q *Qdrant) ScrollChunks(ctx context.Context, fn func([]rag.Chunk) error) error {
	return q.scroll(ctx, qdrant.NewWithPayload(true), func(_ int, points []*qdrant.RetrievedPoint) error {
		chunks := make([]rag.Chunk, len(points))
		for i, p := range points {
			chunks[i] = chunkOf(p.GetId(), p.GetPayload())
		}
		return fn(chunks)
	})
}

func (q *Qdrant) scroll(ctx context.Context, with *qdrant.WithPayloadSelector, fn func(shard int, points []*qdrant.RetrievedPoint) error) error {
	limit := uint32(scrollPage)
	for s, name := range q.collections {
		var offset *qdrant.PointId
		for {
			cctx, cancel := q.writeContext(ctx)
			points, next, err := q.client.ScrollAndOffset(cctx, &qdrant.ScrollPoints{
				CollectionName: name, Offset: offset, Limit: &limit, WithPayload: with,
			})
			cancel()
			if err != nil {
				return q.fail(ctx, "scroll "+name, err)
			}
			if len(points) > 0 {
				if err := fn(s, points); err != nil {
					return err
				}
			}
			if next == nil {
				break
			}
			offset = next
		}
	}
	return nil
}

// Count returns the number of points in all shard collections.
func (q *Qdrant) Count(ctx context.Context) (int, error) {
	total := 0
	exact := true
	for _, name := range q.collections {
		cctx, cancel := q.readContext(ctx)
		n, err := q.client.Count(cctx, &qdrant.CountPoints{CollectionName: name, Exact: &exact})
		cancel()
		if err != nil {
			return 0, q.fail(ctx, "count "+name, err)
		}
		total += int(n)
	}
	return total, nil
}

// Prune deletes every point whose chunk id keep rejects, for instance the chunks of files that
// were removed or shortened since the last ingest, and returns how many it deleted.
func (q *Qdrant) Prune(ctx context.Context, keep func(chunkID string) bool) (int, error) {
	stale := make([][]*qdrant.PointId, len(q.collections))
	err := q.scroll(ctx, qdrant.NewWithPayloadInclude(PayloadChunkID), func(s int, points []*qdrant.RetrievedPoint) error {
		for _, p := range points {
			if !keep(chunkIDOf(p.GetId(), p.GetPayload())) {
				stale[s] = append(stale[s], p.GetId())
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	deleted := 0
	wait := true
	for s, ids := range stale {
		name := q.collections[s]
		for start := 0; start < len(ids); start += q.batchSize {
			batch := ids[start:min(start+q.batchSize, len(ids))]
			cctx, cancel := q.writeContext(ctx)
			_, err := q.client.Delete(cctx, &qdrant.DeletePoints{CollectionName: name, Wait: &wait, Points: qdrant.NewPointsSelectorIDs(batch)})
			cancel()
			if err != nil {
				return deleted, q.fail(ctx, "delete from "+name, err)
			}
			deleted += len(batch)
		}
	}
	return deleted, nil
}
