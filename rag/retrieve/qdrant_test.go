package retrieve_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	_ "unsafe" // for go:linkname

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/keepalive"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/rag/retrieve/qdranttest"
)

var (
	_ pipeline.Retriever = (*retrieve.Qdrant)(nil)
	_ pipeline.Retriever = (*retrieve.Memory)(nil)
)

// grpcMinPingTime is gRPC's floor under client keepalive intervals (10 s, see
// keepalive.ClientParameters). Reproducing too_many_pings needs several pings, so at that
// floor a single test would take half a minute; TestMain lowers it for this test binary only.
//
//go:linkname grpcMinPingTime google.golang.org/grpc/internal.KeepaliveMinPingTime
var grpcMinPingTime time.Duration

func TestMain(m *testing.M) {
	grpcMinPingTime = 10 * time.Millisecond
	os.Exit(m.Run())
}

// checkGoroutines fails the test if goroutines started during it are still running once its
// other cleanups have run. Call it first, so that its cleanup runs last. Tests that use it must
// not run in parallel.
func checkGoroutines(tb testing.TB) {
	tb.Helper()
	before := runtime.NumGoroutine()
	tb.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				tb.Errorf("%d goroutines before the test, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func startQdrant(tb testing.TB, opts ...qdranttest.Option) *qdranttest.Server {
	tb.Helper()
	srv, err := qdranttest.Start(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Close)
	return srv
}

func newQdrant(tb testing.TB, addr string, shards int, opts ...retrieve.QdrantOption) *retrieve.Qdrant {
	tb.Helper()
	opts = append([]retrieve.QdrantOption{retrieve.WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond)}, opts...)
	q, err := retrieve.NewQdrant(addr, "docs", shards, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = q.Close() })
	return q
}

// testCorpus returns n chunks with random unit-free vectors of dim components (fixed seed).
func testCorpus(n, dim int, seed uint64) ([]rag.Chunk, [][]float32) {
	r := mrand.New(mrand.NewPCG(seed, 7))
	chunks := make([]rag.Chunk, n)
	vecs := make([][]float32, n)
	for i := range chunks {
		chunks[i] = rag.Chunk{ID: fmt.Sprintf("doc-%03d.md#%d", i/4, i%4), DocID: fmt.Sprintf("doc-%03d.md", i/4),
			Title: fmt.Sprintf("Doc %d", i/4), Text: fmt.Sprintf("chunk %d text", i), Tokens: 3}
		vecs[i] = randomVector(r, dim)
	}
	return chunks, vecs
}

// ingest writes chunks through a fresh client, as ragtail ingest does.
func ingest(tb testing.TB, addr string, shards int, chunks []rag.Chunk, vecs [][]float32, opts ...retrieve.QdrantOption) {
	tb.Helper()
	q := newQdrant(tb, addr, shards, opts...)
	ctx := context.Background()
	if err := q.EnsureCollections(ctx, len(vecs[0])); err != nil {
		tb.Fatal(err)
	}
	if n, err := q.Upsert(ctx, chunks, vecs); err != nil || n != len(chunks) {
		tb.Fatalf("upsert: wrote %d of %d: %v", n, len(chunks), err)
	}
	_ = q.Close()
}

func TestPointID(t *testing.T) {
	// Expected values from Python: uuid.uuid5(uuid.NAMESPACE_URL, "ragtail-chunk:" + id).
	tests := []struct{ name, id, want string }{
		{"simple", "doc#0", "7aaf801f-e8ba-5368-bf4d-94ad5e7c9a72"},
		{"path", "guide/intro.md#3", "c52841ea-8fc1-5fa3-9202-9293f8eb0703"},
		{"empty", "", "e225cb23-c666-5e52-9e55-26ecd2f0450f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retrieve.PointID(tt.id); got != tt.want {
				t.Errorf("PointID(%q) = %s, want %s", tt.id, got, tt.want)
			}
		})
	}
}

func TestNewQdrantRejectsBadSettings(t *testing.T) {
	tests := []struct {
		name   string
		addr   string
		shards int
		opts   []retrieve.QdrantOption
	}{
		{name: "empty address", addr: " ", shards: 1},
		{name: "bad port", addr: "localhost:99999", shards: 1},
		{name: "no shards", addr: "localhost", shards: 0},
		{name: "empty pool", addr: "localhost", shards: 1, opts: []retrieve.QdrantOption{retrieve.WithPoolSize(0)}},
		{name: "keepalive without timeout", addr: "localhost", shards: 1, opts: []retrieve.QdrantOption{retrieve.WithKeepalive(time.Second, 0)}},
		{name: "negative call timeout", addr: "localhost", shards: 1, opts: []retrieve.QdrantOption{retrieve.WithCallTimeout(-time.Second)}},
		{name: "zero batch", addr: "localhost", shards: 1, opts: []retrieve.QdrantOption{retrieve.WithBatchSize(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := retrieve.NewQdrant(tt.addr, "docs", tt.shards, tt.opts...)
			if err == nil {
				_ = q.Close()
				t.Fatal("NewQdrant accepted bad settings")
			}
			if !errors.Is(err, rag.ErrInvalidRequest) {
				t.Errorf("error %v does not match rag.ErrInvalidRequest", err)
			}
		})
	}
}

func TestQdrantAddressAndCollections(t *testing.T) {
	tests := []struct {
		addr, wantAddr string
		shards         int
		wantNames      []string
	}{
		{"qdrant", "qdrant:6334", 1, []string{"docs"}},
		{"http://127.0.0.1:7000/", "127.0.0.1:7000", 3, []string{"docs_0", "docs_1", "docs_2"}},
		{"[::1]:6334", "[::1]:6334", 2, []string{"docs_0", "docs_1"}},
		{"::1", "[::1]:6334", 1, []string{"docs"}},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			q, err := retrieve.NewQdrant(tt.addr, "docs", tt.shards)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if q.Addr() != tt.wantAddr {
				t.Errorf("Addr() = %s, want %s", q.Addr(), tt.wantAddr)
			}
			var names []string
			for i := range q.Shards() {
				names = append(names, q.ShardCollection(i))
			}
			if !slices.Equal(names, tt.wantNames) || q.Collection() != "docs" || q.DBSystem() != "qdrant" {
				t.Errorf("collections %v (%s, %s), want %v", names, q.Collection(), q.DBSystem(), tt.wantNames)
			}
		})
	}
}

// TestQdrantSearchMatchesMemory checks that a sharded Qdrant answers exactly as the in-memory
// index holding the same vectors in the same shards: same ids, same order, same cosine scores.
func TestQdrantSearchMatchesMemory(t *testing.T) {
	checkGoroutines(t)
	const n, dim, shards, k = 240, 16, 3, 7
	srv := startQdrant(t)
	chunks, vecs := testCorpus(n, dim, 1)
	ingest(t, srv.Addr(), shards, chunks, vecs)
	mem, err := retrieve.NewMemory(dim, shards)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, c := range chunks {
		ids[i] = c.ID
	}
	if err := mem.AddBatch(ids, vecs); err != nil {
		t.Fatal(err)
	}
	q := newQdrant(t, srv.Addr(), shards)
	if err := q.Check(context.Background(), dim); err != nil {
		t.Fatal(err)
	}
	r := mrand.New(mrand.NewPCG(2, 9))
	for query := range 10 {
		vec := randomVector(r, dim)
		for shard := range shards {
			got, err := q.Search(context.Background(), shard, vec, k)
			if err != nil {
				t.Fatal(err)
			}
			want, err := mem.Search(context.Background(), shard, vec, k)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("query %d shard %d: %d hits, want %d", query, shard, len(got), len(want))
			}
			for i := range got {
				// float32 cosine of 16 components: both sides round differently by a few ulps.
				if got[i].ChunkID != want[i].ChunkID || got[i].Shard != shard || abs32(got[i].Score-want[i].Score) > 1e-5 {
					t.Errorf("query %d shard %d hit %d = %+v, want %+v", query, shard, i, got[i], want[i])
				}
			}
		}
	}
	if st := q.Stats(); st.Searches != 10*shards || st.Failures != 0 {
		t.Errorf("stats %+v, want %d searches and no failures", st, 10*shards)
	}
	if hits, err := q.Search(context.Background(), 0, randomVector(r, dim), 0); err != nil || hits != nil {
		t.Errorf("k=0: %v, %v; want no hits and no error", hits, err)
	}
	if _, err := q.Search(context.Background(), shards, randomVector(r, dim), k); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Errorf("shard out of range: %v, want rag.ErrInvalidRequest", err)
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func TestQdrantIngestIsIdempotent(t *testing.T) {
	checkGoroutines(t)
	const n, dim, shards = 100, 8, 2
	srv := startQdrant(t)
	chunks, vecs := testCorpus(n, dim, 3)
	ingest(t, srv.Addr(), shards, chunks, vecs, retrieve.WithBatchSize(7))
	chunks[5].Text = "rewritten"
	ingest(t, srv.Addr(), shards, chunks, vecs, retrieve.WithBatchSize(7))

	q := newQdrant(t, srv.Addr(), shards)
	ctx := context.Background()
	if got, err := q.Count(ctx); err != nil || got != n {
		t.Fatalf("Count after two ingests = %d, %v; want %d", got, err, n)
	}
	if got := srv.Points("docs_0") + srv.Points("docs_1"); got != n {
		t.Errorf("server holds %d points, want %d", got, n)
	}
	c, err := q.Get(ctx, chunks[5].ID)
	if err != nil || c != chunks[5] {
		t.Errorf("Get(%s) = %+v, %v; want %+v", chunks[5].ID, c, err, chunks[5])
	}
	if _, err := q.Get(ctx, "no-such#0"); !errors.Is(err, rag.ErrNotFound) {
		t.Errorf("Get of a missing chunk: %v, want rag.ErrNotFound", err)
	}

	var scrolled []rag.Chunk
	if err := q.ScrollChunks(ctx, func(page []rag.Chunk) error { scrolled = append(scrolled, page...); return nil }); err != nil {
		t.Fatal(err)
	}
	byID := func(a, b rag.Chunk) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(scrolled, byID)
	want := slices.Clone(chunks)
	slices.SortFunc(want, byID)
	if !slices.Equal(scrolled, want) {
		t.Errorf("ScrollChunks returned %d chunks, not the %d ingested", len(scrolled), len(want))
	}

	keep := map[string]bool{}
	for _, c := range chunks[10:] {
		keep[c.ID] = true
	}
	deleted, err := q.Prune(ctx, func(id string) bool { return keep[id] })
	if err != nil || deleted != 10 {
		t.Fatalf("Prune deleted %d, %v; want 10", deleted, err)
	}
	if got, _ := q.Count(ctx); got != n-10 {
		t.Errorf("Count after prune = %d, want %d", got, n-10)
	}
	if _, err := q.Get(ctx, chunks[0].ID); !errors.Is(err, rag.ErrNotFound) {
		t.Errorf("pruned chunk still there: %v", err)
	}
	hits, err := q.Search(ctx, retrieve.ShardOf(chunks[0].ID, shards), vecs[0], 3)
	if err != nil || len(hits) == 0 || hits[0].ChunkID == chunks[0].ID {
		t.Errorf("search after prune: %v, %v; the pruned chunk must not be found", hits, err)
	}
}

func TestQdrantUpsertRejectsBadInput(t *testing.T) {
	q := newQdrant(t, "127.0.0.1:1", 1)
	tests := []struct {
		name   string
		chunks []rag.Chunk
		vecs   [][]float32
	}{
		{"count mismatch", []rag.Chunk{{ID: "a"}}, nil},
		{"empty id", []rag.Chunk{{ID: ""}}, [][]float32{{1}}},
		{"empty vector", []rag.Chunk{{ID: "a"}}, [][]float32{{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := q.Upsert(context.Background(), tt.chunks, tt.vecs); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Errorf("Upsert: %v, want rag.ErrInvalidRequest", err)
			}
		})
	}
}

func TestQdrantCheck(t *testing.T) {
	checkGoroutines(t)
	chunks, vecs := testCorpus(20, 8, 4)
	tests := []struct {
		name          string
		ingestShards  int // 0: nothing ingested
		ingestOpts    []retrieve.QdrantOption
		shards        int
		dim           int
		opts          []retrieve.QdrantOption
		wantErr       error
		wantInMessage string
	}{
		{name: "ready", ingestShards: 2, shards: 2, dim: 8},
		{name: "any dimension", ingestShards: 2, shards: 2, dim: 0},
		{name: "nothing ingested", shards: 2, dim: 8, wantErr: retrieve.ErrCollectionMissing, wantInMessage: "ragtail ingest"},
		{name: "other dimension", ingestShards: 1, shards: 1, dim: 16, wantErr: retrieve.ErrCollectionMismatch, wantInMessage: "8 dimensions"},
		{name: "other embedder", ingestShards: 1, shards: 1, dim: 8,
			ingestOpts: []retrieve.QdrantOption{retrieve.WithEmbedder("hash dim=8 seed=1")},
			opts:       []retrieve.QdrantOption{retrieve.WithEmbedder("hash dim=8 seed=2")},
			wantErr:    retrieve.ErrCollectionMismatch, wantInMessage: "seed=1"},
		{name: "same embedder", ingestShards: 1, shards: 1, dim: 8,
			ingestOpts: []retrieve.QdrantOption{retrieve.WithEmbedder("hash dim=8 seed=1")},
			opts:       []retrieve.QdrantOption{retrieve.WithEmbedder("hash dim=8 seed=1")}},
		{name: "other shard count", ingestShards: 2, shards: 3, dim: 8, wantErr: retrieve.ErrCollectionMismatch, wantInMessage: "--shards 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startQdrant(t)
			if tt.ingestShards > 0 {
				ingest(t, srv.Addr(), tt.ingestShards, chunks, vecs, tt.ingestOpts...)
			}
			q := newQdrant(t, srv.Addr(), tt.shards, tt.opts...)
			err := q.Check(context.Background(), tt.dim)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if q.ServerVersion() != qdranttest.Version {
					t.Errorf("ServerVersion() = %q, want %q", q.ServerVersion(), qdranttest.Version)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !errors.Is(err, rag.ErrUnavailable) || !strings.Contains(err.Error(), tt.wantInMessage) {
				t.Errorf("Check: %v; want %v and rag.ErrUnavailable, mentioning %q", err, tt.wantErr, tt.wantInMessage)
			}
		})
	}
}

func TestQdrantEnsureCollectionsRefusesAnotherSize(t *testing.T) {
	checkGoroutines(t)
	srv := startQdrant(t)
	chunks, vecs := testCorpus(4, 8, 5)
	ingest(t, srv.Addr(), 1, chunks, vecs)
	q := newQdrant(t, srv.Addr(), 1)
	if err := q.EnsureCollections(context.Background(), 8); err != nil {
		t.Errorf("EnsureCollections on a matching collection: %v", err)
	}
	if err := q.EnsureCollections(context.Background(), 12); !errors.Is(err, retrieve.ErrCollectionMismatch) {
		t.Errorf("EnsureCollections with another size: %v, want ErrCollectionMismatch", err)
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// eventually polls f every 10 ms until it returns nil or the timeout passes, and returns f's
// last error.
func eventually(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQdrantUnreachableAtStart: a client made while Qdrant is down reports why it is not ready,
// fails searches at once (not after the call timeout), and recovers by itself once Qdrant is
// up.
func TestQdrantUnreachableAtStart(t *testing.T) {
	checkGoroutines(t)
	addr := freeAddr(t)
	// A call timeout far above the test's duration: an unavailable error proves the failure was
	// immediate rather than a timeout.
	q := newQdrant(t, addr, 2, retrieve.WithCallTimeout(time.Minute))
	err := q.Check(context.Background(), 8)
	if !errors.Is(err, rag.ErrUnavailable) || errors.Is(err, rag.ErrTimeout) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Check with Qdrant down: %v; want rag.ErrUnavailable naming %s", err, addr)
	}
	if _, err := q.Search(context.Background(), 0, []float32{1, 0, 0, 0, 0, 0, 0, 0}, 3); !errors.Is(err, rag.ErrUnavailable) {
		t.Fatalf("Search with Qdrant down: %v, want rag.ErrUnavailable", err)
	}

	srv := startQdrant(t, qdranttest.WithAddr(addr))
	chunks, vecs := testCorpus(20, 8, 6)
	ingest(t, srv.Addr(), 2, chunks, vecs)
	if err := eventually(5*time.Second, func() error { return q.Check(context.Background(), 8) }); err != nil {
		t.Fatalf("Check after Qdrant came up: %v", err)
	}
	if _, err := q.Search(context.Background(), 0, vecs[0], 3); err != nil {
		t.Errorf("Search after Qdrant came up: %v", err)
	}
}

// TestQdrantDiesAndReturns: Qdrant dies mid-run; searches fail at once with rag.ErrUnavailable
// and succeed again when it is restarted on the same port.
func TestQdrantDiesAndReturns(t *testing.T) {
	checkGoroutines(t)
	srv := startQdrant(t)
	chunks, vecs := testCorpus(40, 8, 7)
	ingest(t, srv.Addr(), 2, chunks, vecs)
	q := newQdrant(t, srv.Addr(), 2, retrieve.WithCallTimeout(time.Minute), retrieve.WithPoolSize(2))
	ctx := context.Background()
	for i := range 4 {
		if _, err := q.Search(ctx, i%2, vecs[i], 3); err != nil {
			t.Fatalf("search before the crash: %v", err)
		}
	}
	srv.Stop()
	for i := range 5 {
		_, err := q.Search(ctx, i%2, vecs[i], 3)
		if !errors.Is(err, rag.ErrUnavailable) || errors.Is(err, rag.ErrTimeout) {
			t.Fatalf("search %d with Qdrant dead: %v, want rag.ErrUnavailable", i, err)
		}
	}
	if err := q.Check(ctx, 8); !errors.Is(err, rag.ErrUnavailable) {
		t.Errorf("Check with Qdrant dead: %v", err)
	}
	before := q.Stats().Connects
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for shard := range 2 {
		err := eventually(5*time.Second, func() error { _, err := q.Search(ctx, shard, vecs[0], 3); return err })
		if err != nil {
			t.Fatalf("search of shard %d after restart: %v", shard, err)
		}
	}
	if st := q.Stats(); st.Connects <= before || st.Failures < 5 {
		t.Errorf("stats %+v: want reconnects after %d connects and at least 5 failures", st, before)
	}
}

// TestQdrantSlow: a Qdrant slower than the call timeout fails the search with rag.ErrTimeout
// and counts it; the caller's own deadline and cancellation are reported as such.
func TestQdrantSlow(t *testing.T) {
	checkGoroutines(t)
	srv := startQdrant(t)
	chunks, vecs := testCorpus(20, 8, 8)
	ingest(t, srv.Addr(), 1, chunks, vecs)
	srv.SetQueryLatency(latency.Fixed(time.Minute))
	tests := []struct {
		name         string
		callTimeout  time.Duration
		ctx          func() (context.Context, context.CancelFunc)
		wantErr      error
		wantTimeouts uint64
	}{
		{name: "call timeout", callTimeout: 50 * time.Millisecond,
			ctx: func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, wantErr: rag.ErrTimeout, wantTimeouts: 1},
		{name: "caller deadline", callTimeout: time.Minute,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			}, wantErr: context.DeadlineExceeded, wantTimeouts: 1},
		{name: "caller cancels", callTimeout: time.Minute,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
				return ctx, cancel
			}, wantErr: context.Canceled, wantTimeouts: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQdrant(t, srv.Addr(), 1, retrieve.WithCallTimeout(tt.callTimeout))
			ctx, cancel := tt.ctx()
			defer cancel()
			_, err := q.Search(ctx, 0, vecs[0], 3)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Search: %v, want %v", err, tt.wantErr)
			}
			if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, rag.ErrTimeout) {
				t.Errorf("a deadline must match rag.ErrTimeout: %v", err)
			}
			if st := q.Stats(); st.Timeouts != tt.wantTimeouts || st.Failures != 1 {
				t.Errorf("stats %+v, want %d timeouts and 1 failure", st, tt.wantTimeouts)
			}
		})
	}
}

func TestQdrantAPIKey(t *testing.T) {
	checkGoroutines(t)
	srv := startQdrant(t, qdranttest.WithAPIKey("s3cret"))
	tests := []struct {
		name    string
		key     string
		wantErr bool
	}{
		{"right key", "s3cret", false},
		{"no key", "", true},
		{"wrong key", "guess", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQdrant(t, srv.Addr(), 1, retrieve.WithAPIKey(tt.key))
			err := q.EnsureCollections(context.Background(), 4)
			if !tt.wantErr {
				if err != nil {
					t.Errorf("with the right key: %v", err)
				}
				return
			}
			if !errors.Is(err, rag.ErrUnavailable) || !strings.Contains(err.Error(), "API key") {
				t.Errorf("with key %q: %v; want rag.ErrUnavailable mentioning the API key", tt.key, err)
			}
		})
	}
}

func TestQdrantTLS(t *testing.T) {
	checkGoroutines(t)
	cert, roots := selfSignedCert(t)
	srv := startQdrant(t, qdranttest.WithTLS(&tls.Config{Certificates: []tls.Certificate{cert}}))
	tests := []struct {
		name    string
		opts    []retrieve.QdrantOption
		wantErr bool
	}{
		{"trusted certificate", []retrieve.QdrantOption{retrieve.WithTLS(&tls.Config{RootCAs: roots})}, false},
		{"unknown authority", []retrieve.QdrantOption{retrieve.WithTLS(&tls.Config{MinVersion: tls.VersionTLS13})}, true},
		{"plain text", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQdrant(t, srv.Addr(), 1, tt.opts...)
			err := q.EnsureCollections(context.Background(), 4)
			if tt.wantErr != (err != nil) {
				t.Fatalf("EnsureCollections: %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, rag.ErrUnavailable) {
				t.Errorf("%v does not match rag.ErrUnavailable", err)
			}
		})
	}
}

func selfSignedCert(tb testing.TB) (tls.Certificate, *x509.CertPool) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "qdranttest"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestQdrantKeepaliveEnforcement reproduces the keepalive pitfall: a client that pings more
// often than the server's enforcement policy allows is sent GOAWAY too_many_pings and has to
// reconnect; a policy that allows its pings leaves the connection alone.
func TestQdrantKeepaliveEnforcement(t *testing.T) {
	checkGoroutines(t)
	const ping = 20 * time.Millisecond
	tests := []struct {
		name       string
		policy     keepalive.EnforcementPolicy
		wantGoAway bool
	}{
		{"policy stricter than the client", keepalive.EnforcementPolicy{MinTime: time.Minute}, true},
		{"policy allows the client's pings", keepalive.EnforcementPolicy{MinTime: ping / 2, PermitWithoutStream: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startQdrant(t, qdranttest.WithKeepaliveEnforcement(tt.policy))
			q := newQdrant(t, srv.Addr(), 1, retrieve.WithPoolSize(1), retrieve.WithKeepalive(ping, time.Second))
			if err := q.EnsureCollections(context.Background(), 4); err != nil {
				t.Fatal(err)
			}
			// The server strikes a ping that comes sooner than its MinTime after the previous
			// one (or, without calls in flight and PermitWithoutStream off, any ping within two
			// hours) and sends the GOAWAY at the third strike: the fourth idle ping. Twenty-five
			// ping intervals leave ample margin for it, and show the quiet case stays quiet.
			window := 25 * ping
			var goAways int
			err := eventually(window, func() error {
				if goAways = srv.Stats().GoAways["too_many_pings"]; goAways == 0 {
					return errors.New("no too_many_pings GOAWAY yet")
				}
				return nil
			})
			if !tt.wantGoAway {
				time.Sleep(window)
				if goAways = srv.Stats().GoAways["too_many_pings"]; goAways != 0 {
					t.Fatalf("%d too_many_pings GOAWAYs with a policy that allows the client's pings", goAways)
				}
				if st := q.Stats(); st.Connects != 1 {
					t.Errorf("%d connections, want the first one kept", st.Connects)
				}
				return
			}
			if err != nil {
				t.Fatalf("after %v of pings every %v: %v (stats %+v)", window, ping, err, srv.Stats())
			}
			// The client drops the connection and makes a new one for the next call.
			if err := eventually(5*time.Second, func() error { return q.Check(context.Background(), 4) }); err != nil {
				t.Fatal(err)
			}
			if st := q.Stats(); st.Connects < 2 {
				t.Errorf("%d connections after a too_many_pings GOAWAY, want a reconnect", st.Connects)
			}
		})
	}
}

// TestQdrantMaxConnectionAge: a server MaxConnectionAge forces the client to reconnect once per
// age, and no call fails because of it (the GOAWAY lets calls in flight finish).
func TestQdrantMaxConnectionAge(t *testing.T) {
	checkGoroutines(t)
	const age = 100 * time.Millisecond
	srv := startQdrant(t, qdranttest.WithKeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: time.Second}))
	chunks, vecs := testCorpus(20, 8, 9)
	ingest(t, srv.Addr(), 1, chunks, vecs)
	q := newQdrant(t, srv.Addr(), 1, retrieve.WithPoolSize(1), retrieve.WithKeepalive(-1, 0))
	ctx := context.Background()
	start := time.Now()
	var failures []error
	for i := 0; i < 2000 && time.Since(start) < 12*age; i++ {
		if _, err := q.Search(ctx, 0, vecs[i%len(vecs)], 3); err != nil {
			failures = append(failures, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	st := q.Stats()
	// A connection lives at most 1.1 x age (gRPC's jitter is +-10%) plus the time the next call
	// takes to notice and dial; counting 20 ms for that, this many connections must have been
	// made at the least.
	atLeast := int(elapsed / (age*11/10 + 20*time.Millisecond))
	if int(st.Connects) < atLeast {
		t.Errorf("%d connections in %v with MaxConnectionAge %v, want at least %d", st.Connects, elapsed, age, atLeast)
	}
	if got := srv.Stats().GoAways["max_age"]; got < atLeast-1 {
		t.Errorf("%d max_age GOAWAYs, want at least %d", got, atLeast-1)
	}
	if len(failures) > 0 {
		t.Errorf("%d searches failed across forced reconnects, want none; first: %v", len(failures), failures[0])
	}
	t.Logf("%d searches over %v: %d connections, server saw %+v", st.Searches, elapsed.Round(time.Millisecond), st.Connects, srv.Stats().GoAways)
}

// TestQdrantSpans: every call is an otelgrpc client span under the caller's span, and the trace
// context reaches Qdrant.
func TestQdrantSpans(t *testing.T) {
	checkGoroutines(t)
	srv := startQdrant(t)
	chunks, vecs := testCorpus(10, 8, 10)
	ingest(t, srv.Addr(), 1, chunks, vecs)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	q := newQdrant(t, srv.Addr(), 1, retrieve.WithTracerProvider(tp), retrieve.WithPropagator(propagation.TraceContext{}))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "Query docs")
	if _, err := q.Search(ctx, 0, vecs[0], 3); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var found bool
	for _, s := range rec.Ended() {
		if s.Name() == "qdrant.Points/Query" {
			found = true
			if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
				t.Errorf("span %s: parent %s kind %v, want parent %s and kind client", s.Name(), s.Parent().SpanID(), s.SpanKind(), parent.SpanContext().SpanID())
			}
		}
	}
	if !found {
		var names []string
		for _, s := range rec.Ended() {
			names = append(names, s.Name())
		}
		t.Errorf("no qdrant.Points/Query span among %v", names)
	}
	if tp := srv.Stats().LastTraceparent; !strings.Contains(tp, parent.SpanContext().TraceID().String()) {
		t.Errorf("server saw traceparent %q, want trace %s", tp, parent.SpanContext().TraceID())
	}
}

func BenchmarkQdrantSearch(b *testing.B) {
	srv := startQdrant(b)
	chunks, vecs := testCorpus(1000, 64, 11)
	ingest(b, srv.Addr(), 1, chunks, vecs)
	q := newQdrant(b, srv.Addr(), 1)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := q.Search(ctx, 0, vecs[i%len(vecs)], 5); err != nil {
			b.Fatal(err)
		}
	}
}

var _ pipeline.DBSystemNamer = (*retrieve.Qdrant)(nil)
var _ pipeline.DBSystemNamer = (*retrieve.Memory)(nil)
