package docstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
)

// Defaults of OpenRedis.
const (
	// DefaultRedisTTL is how long a cached chunk lives.
	DefaultRedisTTL = 10 * time.Minute
	// DefaultRedisTimeout bounds each command's reads and writes: a cache slower than this is
	// treated as down, and the lookup goes to the backing store.
	DefaultRedisTimeout = 100 * time.Millisecond
	// DefaultRedisDialTimeout bounds establishing one connection.
	DefaultRedisDialTimeout = 250 * time.Millisecond
	// DefaultRedisKeyPrefix prefixes every chunk id to make its key.
	DefaultRedisKeyPrefix = "ragtail:chunk:"
)

type redisConfig struct {
	ttl         time.Duration
	timeout     time.Duration
	dialTimeout time.Duration
	prefix      string
	poolSize    int
	tp          trace.TracerProvider
	mp          metric.MeterProvider
	logger      *slog.Logger
}

// RedisOption configures OpenRedis.
type RedisOption interface{ applyRedis(*redisConfig) }

type redisOptionFunc func(*redisConfig)

func (f redisOptionFunc) applyRedis(c *redisConfig) { f(c) }

// WithRedisTTL sets how long a cached chunk lives (default DefaultRedisTTL).
func WithRedisTTL(d time.Duration) RedisOption {
	return redisOptionFunc(func(c *redisConfig) {
		if d > 0 {
			c.ttl = d
		}
	})
}

// WithRedisTimeout bounds each command's reads and writes (default DefaultRedisTimeout).
func WithRedisTimeout(d time.Duration) RedisOption {
	return redisOptionFunc(func(c *redisConfig) {
		if d > 0 {
			c.timeout = d
		}
	})
}

// WithRedisDialTimeout bounds establishing one connection (default DefaultRedisDialTimeout).
func WithRedisDialTimeout(d time.Duration) RedisOption {
	return redisOptionFunc(func(c *redisConfig) {
		if d > 0 {
			c.dialTimeout = d
		}
	})
}

// WithRedisKeyPrefix sets the prefix of every key (default DefaultRedisKeyPrefix), so several
// stores can share one Redis.
func WithRedisKeyPrefix(prefix string) RedisOption {
	return redisOptionFunc(func(c *redisConfig) { c.prefix = prefix })
}

// WithRedisPoolSize sets the most connections the client opens (default: go-redis's, ten per
// CPU).
func WithRedisPoolSize(n int) RedisOption {
	return redisOptionFunc(func(c *redisConfig) { c.poolSize = max(n, 0) })
}

// WithRedisTracerProvider sets where the client spans go (default: the global provider).
func WithRedisTracerProvider(tp trace.TracerProvider) RedisOption {
	return redisOptionFunc(func(c *redisConfig) { c.tp = tp })
}

// WithRedisMeterProvider sets where the client's connection-pool metrics go (default: the
// global provider).
func WithRedisMeterProvider(mp metric.MeterProvider) RedisOption {
	return redisOptionFunc(func(c *redisConfig) { c.mp = mp })
}

// WithRedisLogger sets where go-redis's own messages (failed dials and the like) go, at most one
// line per 10 s (default slog.Default()). go-redis has one logger per process, so the last
// OpenRedis sets it for all.
func WithRedisLogger(l *slog.Logger) RedisOption {
	return redisOptionFunc(func(c *redisConfig) { c.logger = l })
}

// redisLog is go-redis's process-wide logger, rate-limited: a dead Redis makes it report every
// failed dial.
type redisLog struct {
	logger atomic.Pointer[slog.Logger]
	last   atomic.Int64 // unix nanoseconds of the last line written
}

// redisLogger is installed in go-redis once; OpenRedis only swaps the slog.Logger it writes to,
// so that no client is ever logging while go-redis's logger variable changes.
var (
	redisLogger     redisLog
	redisLoggerOnce sync.Once
)

// Printf implements go-redis's internal.Logging.
func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	now, last := time.Now().UnixNano(), l.last.Load()
	if now-last < int64(cacheFailureLogEvery) || !l.last.CompareAndSwap(last, now) {
		return
	}
	msg := fmt.Sprintf(format, v...)
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	l.logger.Load().Warn("redis client", "message", msg, "rate_limit", cacheFailureLogEvery)
}

// Redis is a cache tier in Redis: cache-aside, each chunk a JSON value under prefix+id with a
// TTL. Commands time out quickly and are not retried, so a dead or slow Redis costs a lookup
// little before the Store falls back to the backing store. Commands are client spans
// (redisotel; db.system.name redis, without the command's arguments). It is safe for concurrent
// use.
type Redis struct {
	client *redis.Client
	ttl    time.Duration
	prefix string
}

var _ Cache = (*Redis)(nil)

// OpenRedis returns a cache on the Redis named by url (redis://[user:password@]host:port/db, or
// rediss:// for TLS). It does not connect yet: a Redis that is down at start is a cache that
// fails, which the Store survives. Close it when done.
func OpenRedis(url string, opts ...RedisOption) (*Redis, error) {
	cfg := redisConfig{ttl: DefaultRedisTTL, timeout: DefaultRedisTimeout, dialTimeout: DefaultRedisDialTimeout, prefix: DefaultRedisKeyPrefix}
	for _, o := range opts {
		o.applyRedis(&cfg)
	}
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: redis url: %v (want redis://host:6379/0)", rag.ErrInvalidRequest, redactedURLError(err))
	}
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = cfg.dialTimeout, cfg.timeout, cfg.timeout
	ro.PoolTimeout = cfg.timeout + cfg.dialTimeout
	ro.ContextTimeoutEnabled = true
	ro.MaxRetries = -1 // no retries: the Store retries the cache after its own interval
	ro.DialerRetries = 1
	ro.DisableIdentity = true
	if cfg.poolSize > 0 {
		ro.PoolSize = cfg.poolSize
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	redisLogger.logger.Store(cfg.logger)
	redisLoggerOnce.Do(func() { redis.SetLogger(&redisLogger) })
	client := redis.NewClient(ro)
	tp, mp := cfg.tp, cfg.mp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	err = errors.Join(
		redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(tp), redisotel.WithDBStatement(false),
			redisotel.WithCallerEnabled(false), redisotel.WithAttributes(semconv.DBSystemNameRedis)),
		redisotel.InstrumentMetrics(client, redisotel.WithMeterProvider(mp)))
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis instrumentation: %w", err)
	}
	return &Redis{client: client, ttl: cfg.ttl, prefix: cfg.prefix}, nil
}

// redactedURLError drops the URL from a parse error, since it may hold a password.
func redactedURLError(err error) string {
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return msg
}

func (r *Redis) key(id string) string { return r.prefix + id }

func unavailable(op string, err error) error {
	return fmt.Errorf("redis %s: %w: %w", op, rag.ErrUnavailable, err)
}

// Get implements Cache.
func (r *Redis) Get(ctx context.Context, id string) (rag.Chunk, bool, error) {
	b, err := r.client.Get(ctx, r.key(id)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return rag.Chunk{}, false, nil
	case err != nil:
		return rag.Chunk{}, false, unavailable("get", err)
	}
	var c rag.Chunk
	if err := json.Unmarshal(b, &c); err != nil || c.ID != id {
		// Not ours or corrupt: treat as a miss; the fill that follows overwrites it.
		return rag.Chunk{}, false, nil
	}
	return c, true, nil
}

// Add implements Cache: SET with the TTL.
func (r *Redis) Add(ctx context.Context, chunk rag.Chunk) error {
	b, err := json.Marshal(chunk)
	if err != nil {
		return fmt.Errorf("encode chunk: %w", err)
	}
	if err := r.client.Set(ctx, r.key(chunk.ID), b, r.ttl).Err(); err != nil {
		return unavailable("set", err)
	}
	return nil
}

// Replace implements Cache: SET XX, keeping the key's remaining TTL.
func (r *Redis) Replace(ctx context.Context, chunk rag.Chunk) error {
	b, err := json.Marshal(chunk)
	if err != nil {
		return fmt.Errorf("encode chunk: %w", err)
	}
	err = r.client.SetArgs(ctx, r.key(chunk.ID), b, redis.SetArgs{Mode: "XX", KeepTTL: true}).Err()
	if err != nil && !errors.Is(err, redis.Nil) { // Nil: the key was not there, nothing to replace
		return unavailable("set xx", err)
	}
	return nil
}

// Remove implements Cache.
func (r *Redis) Remove(ctx context.Context, id string) error {
	if err := r.client.Del(ctx, r.key(id)).Err(); err != nil {
		return unavailable("del", err)
	}
	return nil
}

// Kind implements Cache.
func (r *Redis) Kind() string { return "redis" }

// Ping checks that Redis answers, for readiness probes.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.client.Ping(ctx).Err(); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

// Close closes the client's connections.
func (r *Redis) Close() error { return r.client.Close() }
