package docstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ragtail/ragtail/internal/testpeer"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/docstore"
)

// openRedis opens a cache on r and closes it when the test ends.
func openRedis(tb testing.TB, r *testpeer.Redis, opts ...docstore.RedisOption) *docstore.Redis {
	tb.Helper()
	c, err := docstore.OpenRedis(r.URL, opts...)
	if err != nil {
		tb.Fatalf("OpenRedis: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// rawRedis is a plain client for looking at what the cache wrote.
func rawRedis(tb testing.TB, r *testpeer.Redis) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRedisCacheAside(t *testing.T) {
	t.Parallel()
	r := testpeer.StartRedis(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	const ttl = time.Minute
	cache := openRedis(t, r, docstore.WithRedisTTL(ttl), docstore.WithRedisTracerProvider(tp))
	ctx := context.Background()
	if err := cache.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	chunks := makeChunks(t, 100)
	s, err := docstore.Compose(ctx, docstore.NewMemory(chunks, docstore.MemoryConfig{}), docstore.WithCacheTier(cache))
	if err != nil {
		t.Fatal(err)
	}
	id := chunks[9].ID
	for _, want := range []docstore.Result{docstore.ResultMiss, docstore.ResultHit, docstore.ResultHit} {
		got, res, err := lookup(t, s, id)
		if err != nil || res != want || got != chunks[9] {
			t.Fatalf("Lookup = %+v, %s, %v; want %s of %+v", got, res, err, want, chunks[9])
		}
	}
	raw := rawRedis(t, r)
	if left := raw.TTL(ctx, docstore.DefaultRedisKeyPrefix+id).Val(); left <= 0 || left > ttl {
		t.Fatalf("TTL of the cached key = %v, want in (0, %v]", left, ttl)
	}
	// A Put replaces the cached copy; a Delete drops it.
	revised := chunks[9]
	revised.Text = "revised"
	if err := s.Put(revised); err != nil {
		t.Fatal(err)
	}
	if got, res, _ := lookup(t, s, id); res != docstore.ResultHit || got.Text != "revised" {
		t.Fatalf("Lookup after Put = %+v, %s; want the revised chunk from Redis", got, res)
	}
	s.Delete(id)
	if n := raw.Exists(ctx, docstore.DefaultRedisKeyPrefix+id).Val(); n != 0 {
		t.Fatal("Delete left the chunk in Redis")
	}
	if _, res, err := s.Lookup(ctx, id); res != docstore.ResultMiss || !errors.Is(err, rag.ErrNotFound) {
		t.Fatalf("Lookup after Delete = %s, %v; want a miss, not found", res, err)
	}
	if st := s.Stats(); st.CacheKind != "redis" || st.Hits != 3 || st.CacheErrors != 0 {
		t.Fatalf("Stats = %+v; want redis, 3 hits, no cache errors", st)
	}

	var redisSpans int
	for _, sp := range spans.Ended() {
		if sys, _ := attrValue(sp.Attributes(), "db.system.name"); sys != "redis" {
			continue
		}
		redisSpans++
		for _, a := range sp.Attributes() {
			if strings.Contains(a.Value.String(), "text of") || strings.Contains(a.Value.String(), "revised") {
				t.Errorf("span %q: attribute %s carries a payload: %s", sp.Name(), a.Key, a.Value.String())
			}
		}
	}
	if redisSpans < 4 {
		t.Fatalf("%d spans with db.system.name redis, want at least 4", redisSpans)
	}
}

// TestRedisDownDegradesToStore kills Redis in the middle of a run of lookups: every lookup
// still succeeds, from the backing store, the failures are counted and logged once, and the
// cache is used again once Redis is back.
func TestRedisDownDegradesToStore(t *testing.T) {
	t.Parallel()
	r := testpeer.StartRedis(t)
	pg := testpeer.StartPostgres(t)
	ctx := context.Background()
	p := openPostgres(t, pg)
	chunks := makeChunks(t, 50)
	if err := p.Upsert(ctx, chunks...); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	const retry = 100 * time.Millisecond
	s, err := docstore.Compose(ctx, p, docstore.WithCacheTier(openRedis(t, r, docstore.WithRedisLogger(logger))),
		docstore.WithCacheRetry(retry), docstore.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	// lookupAll looks every chunk up, fails the test on a wrong answer, and returns how many
	// lookups were not hits.
	lookupAll := func(phase string) (notHits int) {
		t.Helper()
		for _, c := range chunks {
			got, res, err := s.Lookup(ctx, c.ID)
			if err != nil || got != c {
				t.Fatalf("%s: Lookup(%s) = %+v, %v; want the chunk", phase, c.ID, got, err)
			}
			if res != docstore.ResultHit {
				notHits++
			}
		}
		return notHits
	}
	// untilAllHits repeats lookupAll until a pass is all hits: a pass may skip the cache for its
	// retry interval after a failure (a connection broken by the restart), and leave some
	// chunks uncached for the next pass.
	untilAllHits := func(phase string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := lookupAll(phase)
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d lookups still not hits after 10 s", phase, n, len(chunks))
			}
		}
	}
	if n := lookupAll("cold"); n != len(chunks) {
		t.Fatalf("cold: %d of %d lookups were not hits, want all", n, len(chunks))
	}
	untilAllHits("cached")

	r.Kill()
	start := time.Now()
	for range 5 {
		if n := lookupAll("redis down"); n != len(chunks) {
			t.Fatalf("redis down: %d of %d lookups were hits", len(chunks)-n, len(chunks))
		}
	}
	st := s.Stats()
	if st.CacheErrors == 0 || st.StoreErrors != 0 {
		t.Fatalf("Stats with redis down = %+v; want cache errors and no store errors", st)
	}
	if st.CacheErrors+st.CacheBypassed < 5*uint64(len(chunks)) {
		t.Fatalf("cache errors %d + bypassed %d, want every one of %d lookups to have skipped redis",
			st.CacheErrors, st.CacheBypassed, 5*len(chunks))
	}
	if n := strings.Count(logs.String(), "doc store cache failed"); time.Since(start) < 10*time.Second && n != 1 {
		t.Fatalf("%d log lines about the failed cache within %v, want 1:\n%s", n, time.Since(start), logs.String())
	}

	// Slow rather than dead: a paused Redis answers nothing; lookups wait at most the command
	// timeout before going to the store.
	r.Restart()
	time.Sleep(2 * retry)
	untilAllHits("redis back") // persistence is off: it came back empty, and is filled again
	r.Pause()
	t.Cleanup(r.Resume)
	time.Sleep(2 * retry)
	for _, c := range chunks[:5] {
		begin := time.Now()
		if got, _, err := s.Lookup(ctx, c.ID); err != nil || got != c {
			t.Fatalf("Lookup(%s) with redis paused = %+v, %v", c.ID, got, err)
		}
		if took := time.Since(begin); took > 10*docstore.DefaultRedisTimeout {
			t.Fatalf("Lookup with redis paused took %v, want under %v", took, 10*docstore.DefaultRedisTimeout)
		}
	}
}
