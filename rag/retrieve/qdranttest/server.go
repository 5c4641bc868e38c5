// Package qdranttest runs an in-process server that speaks Qdrant's gRPC protocol, for tests and
// for the pitfall lab, where no Qdrant is running. It is built on the go-client's generated
// server interfaces, so the real client talks to it exactly as to Qdrant, and keeps each
// collection in a retrieve.Memory index (exact cosine search, so its answers are Qdrant's answers
// without HNSW's approximation).
//
// Beyond the protocol it lets a test break things the way production breaks them: Stop and
// Restart on the same port (Qdrant dies and returns, data kept), SetQueryLatency (Qdrant is
// slow), a keepalive enforcement policy and MaxConnectionAge (gRPC's GOAWAYs: too_many_pings and
// forced reconnects), an API key and TLS (SelfSigned makes a certificate in process), and
// answers padded past a fresh connection's flow-control window (WithAnswerPadding). Stats counts
// accepted connections, TLS handshakes and their time, GOAWAYs by reason and calls by method,
// read from the HTTP/2 frames the server writes.
//
// Supported calls: HealthCheck; collection Create (one unnamed dense vector, cosine distance),
// Get, List, Delete, CollectionExists; points Upsert, Get, Delete (by ids), Query (nearest to a
// dense vector, limit, offset, score threshold, payload selection), Scroll and Count. Filters,
// named vectors and the other query kinds answer Unimplemented or InvalidArgument.
package qdranttest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"github.com/ragtail/ragtail/rag/latency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Version is the Qdrant version the server reports unless WithVersion says otherwise.
const Version = "1.17.0"

type config struct {
	addr        string
	enforcement *keepalive.EnforcementPolicy
	params      *keepalive.ServerParameters
	apiKey      string
	tlsConfig   *tls.Config
	version     string
	seed        uint64
	padding     int
}

// Option configures Start.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithAddr sets the listen address (default "127.0.0.1:0", a free loopback port).
func WithAddr(addr string) Option { return optionFunc(func(c *config) { c.addr = addr }) }

// WithKeepaliveEnforcement sets the server's keepalive enforcement policy: the shortest ping
// interval it tolerates and whether pings without calls in flight are allowed. A client that
// pings more often gets a GOAWAY with ENHANCE_YOUR_CALM and "too_many_pings" after three
// offending pings. gRPC's default policy is a 5-minute minimum without streams forbidden.
func WithKeepaliveEnforcement(p keepalive.EnforcementPolicy) Option {
	return optionFunc(func(c *config) { c.enforcement = &p })
}

// WithKeepaliveParams sets the server's keepalive parameters, notably MaxConnectionAge (a
// connection older than this, jittered by +-10%, is sent a GOAWAY "max_age" and must be
// re-established) and MaxConnectionAgeGrace (how long calls in flight may then finish).
func WithKeepaliveParams(p keepalive.ServerParameters) Option {
	return optionFunc(func(c *config) { c.params = &p })
}

// WithAPIKey requires every call to carry key in its api-key metadata, as a Qdrant started with
// QDRANT__SERVICE__API_KEY does; other calls fail with Unauthenticated.
func WithAPIKey(key string) Option { return optionFunc(func(c *config) { c.apiKey = key }) }

// WithTLS serves TLS with cfg, which must hold a certificate. "h2" is added to its NextProtos,
// which gRPC clients require.
func WithTLS(cfg *tls.Config) Option { return optionFunc(func(c *config) { c.tlsConfig = cfg }) }

// WithVersion sets the version HealthCheck reports (default Version).
func WithVersion(v string) Option { return optionFunc(func(c *config) { c.version = v }) }

// MaxPadding bounds WithAnswerPadding.
const MaxPadding = 4 << 20

// WithAnswerPadding makes every Query answer n bytes larger (at most MaxPadding): its first
// point carries them in a payload field PaddingField, whatever payload the query selected. It
// stands for the payloads and vectors a production search returns (ragtail asks for chunk ids
// only), so that an answer can outgrow a fresh HTTP/2 connection's 64 KiB flow-control window.
// Clients ignore the field.
func WithAnswerPadding(n int) Option {
	return optionFunc(func(c *config) { c.padding = min(max(n, 0), MaxPadding) })
}

// PaddingField is the payload field WithAnswerPadding fills.
const PaddingField = "qdranttest_padding"

// WithSeed seeds the query latency draws (default 1).
func WithSeed(seed uint64) Option { return optionFunc(func(c *config) { c.seed = seed }) }

// Server is a running Qdrant-protocol server. Its data outlives Stop, like a Qdrant with
// persistent storage. A Server is safe for concurrent use.
type Server struct {
	cfg   config
	store *store

	mu      sync.Mutex // guards addr, grpc, running
	addr    string
	grpc    *grpc.Server
	running bool

	latency     atomic.Pointer[latency.Delay]
	collDelayMu sync.Mutex
	collDelay   map[string]*latency.Delay // SetCollectionLatency's laws, by collection

	connections atomic.Int64
	padding     *qdrant.Value // WithAnswerPadding's field, made once; nil without

	statsMu           sync.Mutex
	handshakes        int
	handshakeFailures int
	handshakeTime     time.Duration
	goAways           map[string]int
	calls             map[string]int
	traceparent       string
}

// Stats is what the server has seen since Start, across restarts.
type Stats struct {
	// Connections is the number of connections accepted: a client's pool, plus one per
	// reconnect.
	Connections int
	// GoAways counts connections sent a GOAWAY, by reason: "too_many_pings" (keepalive
	// enforcement), "max_age" (MaxConnectionAge), "graceful_stop", or the HTTP/2 error code.
	GoAways map[string]int
	// Calls counts calls by method name ("Query", "Upsert", "HealthCheck", ...), including
	// rejected ones.
	Calls map[string]int
	// LastTraceparent is the traceparent metadata of the last call that carried one.
	LastTraceparent string
	// TLSHandshakes counts completed TLS handshakes (with WithTLS): one per connection.
	TLSHandshakes int
	// TLSHandshakeFailures counts TLS handshakes that failed or timed out.
	TLSHandshakeFailures int
	// TLSHandshakeTime is the total time of the completed handshakes, each from the accept of
	// its connection to the handshake's end: the round trips a handshake costs, server side.
	TLSHandshakeTime time.Duration
}

// Start starts a server and returns once it accepts connections.
func Start(opts ...Option) (*Server, error) {
	cfg := config{addr: "127.0.0.1:0", version: Version, seed: 1}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.tlsConfig != nil {
		cfg.tlsConfig = cfg.tlsConfig.Clone()
		if !contains(cfg.tlsConfig.NextProtos, "h2") {
			cfg.tlsConfig.NextProtos = append(cfg.tlsConfig.NextProtos, "h2")
		}
	}
	s := &Server{cfg: cfg, store: newStore(), goAways: map[string]int{}, calls: map[string]int{}}
	if cfg.padding > 0 {
		s.padding = qdrant.NewValueString(strings.Repeat("x", cfg.padding))
	}
	s.latency.Store(latency.NewDelay(latency.Law{Kind: latency.LawNone}, cfg.seed))
	if err := s.listen(cfg.addr); err != nil {
		return nil, err
	}
	return s, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// listen binds addr and serves on it; the caller holds no lock.
func (s *Server) listen(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return errors.New("qdranttest: server is already running")
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("qdranttest: listen on %s: %w", addr, err)
	}
	inner := net.Listener(lis)
	if s.cfg.tlsConfig != nil {
		inner = tls.NewListener(lis, s.cfg.tlsConfig)
	}
	// Qdrant accepts requests of up to 32 MB (service.max_request_size_mb), gRPC's default 4.
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.intercept), grpc.MaxRecvMsgSize(32 << 20)}
	if s.cfg.enforcement != nil {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(*s.cfg.enforcement))
	}
	if s.cfg.params != nil {
		opts = append(opts, grpc.KeepaliveParams(*s.cfg.params))
	}
	gs := grpc.NewServer(opts...)
	qdrant.RegisterQdrantServer(gs, qdrantService{s: s})
	qdrant.RegisterCollectionsServer(gs, collectionsService{s: s})
	qdrant.RegisterPointsServer(gs, pointsService{s: s})
	s.addr, s.grpc, s.running = lis.Addr().String(), gs, true
	go func() { _ = gs.Serve(&watchedListener{Listener: inner, s: s}) }()
	return nil
}

// Addr returns the host:port the server listens on; it stays the same across Restart.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Port returns the port the server listens on.
func (s *Server) Port() int {
	_, port, _ := net.SplitHostPort(s.Addr())
	var p int
	_, _ = fmt.Sscan(port, &p)
	return p
}

// Running reports whether the server is serving.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// Stop kills the server the way a crash does: the listener closes, every connection is cut and
// calls in flight fail. The data stays for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	gs, running := s.grpc, s.running
	s.running = false
	s.mu.Unlock()
	if running {
		gs.Stop()
	}
}

// Restart serves again on the same address after Stop, with the data it held.
func (s *Server) Restart() error { return s.listen(s.Addr()) }

// Close stops the server for good. It is idempotent.
func (s *Server) Close() { s.Stop() }

// SetQueryLatency makes every Query wait a draw of law before it answers, or until the caller
// gives up. The none law (the default) answers at once.
func (s *Server) SetQueryLatency(law latency.Law) {
	s.latency.Store(latency.NewDelay(law, s.cfg.seed))
}

// SetCollectionLatency makes every Query of collection wait a draw of law instead of
// SetQueryLatency's, so that the shards of an index (one collection each) answer with laws of
// their own. The draws are seeded by the server's seed and the collection's name.
func (s *Server) SetCollectionLatency(collection string, law latency.Law) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(collection))
	d := latency.NewDelay(law, s.cfg.seed^h.Sum64())
	s.collDelayMu.Lock()
	defer s.collDelayMu.Unlock()
	if s.collDelay == nil {
		s.collDelay = map[string]*latency.Delay{}
	}
	s.collDelay[collection] = d
}

// queryDelay is the delay a Query of collection waits.
func (s *Server) queryDelay(collection string) *latency.Delay {
	s.collDelayMu.Lock()
	d := s.collDelay[collection]
	s.collDelayMu.Unlock()
	if d != nil {
		return d
	}
	return s.latency.Load()
}

// Stats returns what the server has seen.
func (s *Server) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	st := Stats{Connections: int(s.connections.Load()), GoAways: map[string]int{}, Calls: map[string]int{}, LastTraceparent: s.traceparent,
		TLSHandshakes: s.handshakes, TLSHandshakeFailures: s.handshakeFailures, TLSHandshakeTime: s.handshakeTime}
	for k, v := range s.goAways {
		st.GoAways[k] = v
	}
	for k, v := range s.calls {
		st.Calls[k] = v
	}
	return st
}

// Points returns the number of points in a collection, or -1 if it does not exist.
func (s *Server) Points(collection string) int {
	c := s.store.get(collection)
	if c == nil {
		return -1
	}
	return c.len()
}

func (s *Server) countGoAway(reason string) {
	s.statsMu.Lock()
	s.goAways[reason]++
	s.statsMu.Unlock()
}

// intercept counts calls, records traceparent and enforces the API key.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.statsMu.Lock()
	s.calls[path.Base(info.FullMethod)]++
	if tp := md.Get("traceparent"); len(tp) > 0 {
		s.traceparent = tp[0]
	}
	s.statsMu.Unlock()
	if s.cfg.apiKey != "" {
		if keys := md.Get("api-key"); len(keys) == 0 || keys[0] != s.cfg.apiKey {
			return nil, status.Error(codes.Unauthenticated, "Must provide an API key or an Authorization bearer token")
		}
	}
	return handler(ctx, req)
}

// qdrantService answers the health check.
type qdrantService struct {
	qdrant.UnimplementedQdrantServer
	s *Server
}

func (q qdrantService) HealthCheck(context.Context, *qdrant.HealthCheckRequest) (*qdrant.HealthCheckReply, error) {
	return &qdrant.HealthCheckReply{Title: "qdrant - vector search engine (ragtail qdranttest)", Version: q.s.cfg.version}, nil
}
