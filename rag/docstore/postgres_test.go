package docstore_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ragtail/ragtail/internal/testpeer"
	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/docstore"
	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/openai"
)

// openPostgres opens a store on pg and closes it when the test ends.
func openPostgres(tb testing.TB, pg *testpeer.Postgres, opts ...docstore.PostgresOption) *docstore.Postgres {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := docstore.OpenPostgres(ctx, pg.DSN, opts...)
	if err != nil {
		tb.Fatalf("OpenPostgres: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

func attrValue(attrs []attribute.KeyValue, key string) (string, bool) {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.String(), true
		}
	}
	return "", false
}

func TestPostgresBackend(t *testing.T) {
	t.Parallel()
	pg := testpeer.StartPostgres(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ctx := context.Background()

	p := openPostgres(t, pg, docstore.WithPostgresTracerProvider(tp), docstore.WithPostgresMeterProvider(mp), docstore.WithPoolSize(3))
	openPostgres(t, pg) // the schema is created idempotently
	if got := p.PoolSize(); got != 3 {
		t.Fatalf("PoolSize = %d, want 3", got)
	}
	chunks := makeChunks(t, 2500) // more than one INSERT batch
	if err := p.Upsert(ctx, chunks...); err != nil {
		t.Fatal(err)
	}
	revised := chunks[5]
	revised.Text, revised.Topic = "revised text", "topic"
	if err := p.Upsert(ctx, revised); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Count(ctx); err != nil || n != len(chunks) {
		t.Fatalf("Count = %d, %v; want %d", n, err, len(chunks))
	}

	cases := []struct {
		name    string
		id      string
		want    rag.Chunk
		wantErr error
	}{
		{name: "present", id: chunks[0].ID, want: chunks[0]},
		{name: "replaced", id: revised.ID, want: revised},
		{name: "absent", id: "absent-00001", wantErr: rag.ErrNotFound},
		{name: "quote in id", id: "it's'; DROP TABLE ragtail_chunks; --", wantErr: rag.ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Fetch(ctx, tc.id)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Fetch(%q) error %v, want %v", tc.id, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Fetch(%q) = %+v, %v; want %+v", tc.id, got, err, tc.want)
			}
		})
	}

	if ok, err := p.Remove(ctx, chunks[1].ID); err != nil || !ok {
		t.Fatalf("Remove(present) = %v, %v; want true", ok, err)
	}
	if ok, err := p.Remove(ctx, chunks[1].ID); err != nil || ok {
		t.Fatalf("Remove(removed) = %v, %v; want false", ok, err)
	}
	keep := map[string]bool{}
	for _, c := range chunks[:2000] {
		keep[c.ID] = true
	}
	pruned, err := p.Prune(ctx, func(id string) bool { return keep[id] })
	if err != nil || pruned != 500 {
		t.Fatalf("Prune = %d, %v; want 500", pruned, err)
	}
	seen := 0
	if err := p.EachID(ctx, func(id string) {
		if !keep[id] {
			t.Errorf("EachID gave %s, pruned", id)
		}
		seen++
	}); err != nil || seen != 1999 {
		t.Fatalf("EachID saw %d ids, %v; want 1999", seen, err)
	}
	if st := p.BackendStats(); st.Kind != "postgresql" || st.Lookups != 4 || st.Missing != 2 || st.Concurrency != 3 {
		t.Fatalf("BackendStats = %+v; want 4 lookups, 2 missing, concurrency 3", st)
	}

	// Spans: named "{operation} {table}", client kind, bounded attributes, never the parameters.
	var selects int
	for _, s := range spans.Ended() {
		attrs := s.Attributes()
		if sys, _ := attrValue(attrs, "db.system.name"); sys != "postgresql" {
			t.Errorf("span %q: db.system.name %q, want postgresql", s.Name(), sys)
		}
		for _, a := range attrs {
			if strings.Contains(a.Value.String(), "chunk-00000") || strings.Contains(a.Value.String(), "DROP TABLE") {
				t.Errorf("span %q: attribute %s carries a query parameter: %s", s.Name(), a.Key, a.Value.String())
			}
		}
		if s.Name() == "SELECT ragtail_chunks" {
			selects++
			if op, _ := attrValue(attrs, "db.operation.name"); op != "SELECT" {
				t.Errorf("span %q: db.operation.name %q", s.Name(), op)
			}
			if coll, _ := attrValue(attrs, "db.collection.name"); coll != "ragtail_chunks" {
				t.Errorf("span %q: db.collection.name %q", s.Name(), coll)
			}
			if port, _ := attrValue(attrs, "server.port"); port == "" {
				t.Errorf("span %q: no server.port", s.Name())
			}
		}
	}
	if selects < len(cases) {
		t.Fatalf("%d SELECT spans, want at least %d (one per Fetch)", selects, len(cases))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var samples uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "db.client.operation.duration" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				if v, _ := dp.Attributes.Value("db.system.name"); v.AsString() == "postgresql" {
					samples += dp.Count
				}
			}
		}
	}
	if samples < uint64(len(cases)) {
		t.Fatalf("db.client.operation.duration has %d postgresql samples, want at least %d", samples, len(cases))
	}
}

func TestPostgresStoreThroughGuardAndCache(t *testing.T) {
	t.Parallel()
	pg := testpeer.StartPostgres(t)
	ctx := context.Background()
	p := openPostgres(t, pg)
	chunks := makeChunks(t, 200)
	if err := p.Upsert(ctx, chunks...); err != nil {
		t.Fatal(err)
	}
	s, err := docstore.Compose(ctx, p, docstore.WithCachePolicy(docstore.Policy2Q))
	if err != nil {
		t.Fatal(err)
	}
	ref := referenceFilter(t, idsOf(chunks), docstore.DefaultBloomFalsePositiveRate)
	var absent string
	for _, id := range absentIDs(100) {
		if !ref.TestString(id) {
			absent = id
			break
		}
	}
	steps := []struct {
		id   string
		want docstore.Result
	}{
		{chunks[3].ID, docstore.ResultMiss},
		{chunks[3].ID, docstore.ResultHit},
		{absent, docstore.ResultBlocked},
	}
	for _, st := range steps {
		if _, res, _ := lookup(t, s, st.id); res != st.want {
			t.Fatalf("Lookup(%s) = %s, want %s", st.id, res, st.want)
		}
	}
	fresh := rag.Chunk{ID: "fresh#0", DocID: "fresh", Text: "new"}
	if err := s.Put(fresh); err != nil {
		t.Fatal(err)
	}
	if got, _, err := lookup(t, s, fresh.ID); err != nil || got != fresh {
		t.Fatalf("Lookup(put id) = %+v, %v", got, err)
	}
	if n := s.Len(); n != len(chunks)+1 {
		t.Fatalf("Len = %d, want %d", n, len(chunks)+1)
	}
	if st := s.Stats(); st.CacheKind != "2q" || st.Backend.Kind != "postgresql" || st.StoreLookups != 2 {
		t.Fatalf("Stats = %+v; want a 2q cache over postgresql with 2 store lookups", st)
	}
	if err := s.SetConcurrency(4); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Fatalf("SetConcurrency on postgres: %v, want rag.ErrInvalidRequest (the pool size is fixed)", err)
	}
}

// TestPostgresDownThenBack kills the server: lookups fail fast with rag.ErrUnavailable. It
// restarts it on the same port: lookups succeed again without reopening the store.
func TestPostgresDownThenBack(t *testing.T) {
	t.Parallel()
	pg := testpeer.StartPostgres(t)
	ctx := context.Background()
	const timeout = 500 * time.Millisecond
	p := openPostgres(t, pg, docstore.WithQueryTimeout(timeout), docstore.WithConnectTimeout(timeout), docstore.WithPoolSize(4))
	chunks := makeChunks(t, 10)
	if err := p.Upsert(ctx, chunks...); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fetch(ctx, chunks[0].ID); err != nil {
		t.Fatal(err)
	}

	pg.Kill()
	for i := range 5 {
		start := time.Now()
		_, err := p.Fetch(ctx, chunks[i].ID)
		if !errors.Is(err, rag.ErrUnavailable) {
			t.Fatalf("Fetch with postgres down: %v, want rag.ErrUnavailable", err)
		}
		// The message reaches API clients: it names the operation, not hosts or users.
		if msg := err.Error(); strings.Contains(msg, pg.Addr) || strings.Contains(msg, "user=") || len(msg) > 200 {
			t.Fatalf("error message %q names the server or runs long", msg)
		}
		if i == 0 {
			t.Logf("with postgres down: %v", err)
			// What the API makes of it once the pipeline has put it at the fetch stage.
			he := openai.ToHTTPError(rag.AtStage(rag.StageFetch, err))
			if he.Status != http.StatusServiceUnavailable || !strings.HasPrefix(he.Message, "fetch: ") {
				t.Fatalf("API error %d %q, want 503 naming fetch", he.Status, he.Message)
			}
		}
		// Bounded by the query timeout (plus scheduling), never by TCP's own timeouts.
		if took := time.Since(start); took > 4*timeout {
			t.Fatalf("Fetch with postgres down took %v, want under %v", took, 4*timeout)
		}
	}
	if err := p.Ping(ctx); !errors.Is(err, rag.ErrUnavailable) {
		t.Fatalf("Ping with postgres down: %v, want rag.ErrUnavailable", err)
	}
	if st := p.BackendStats(); st.Errors < 5 {
		t.Fatalf("BackendStats.Errors = %d, want at least 5", st.Errors)
	}

	pg.Restart()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := p.Fetch(ctx, chunks[1].ID)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fetch still fails 15 s after postgres came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range chunks { // every pooled connection works again
		if got, err := p.Fetch(ctx, c.ID); err != nil || got != c {
			t.Fatalf("Fetch(%s) after recovery = %+v, %v", c.ID, got, err)
		}
	}
}

// TestPostgresPoolQueues shows the pool as finite capacity: with 2 connections each held for
// 40 ms, 8 concurrent lookups need at least 4 rounds, and some of them wait for a connection.
func TestPostgresPoolQueues(t *testing.T) {
	t.Parallel()
	pg := testpeer.StartPostgres(t)
	ctx := context.Background()
	const service = 40 * time.Millisecond
	p := openPostgres(t, pg, docstore.WithPoolSize(2), docstore.WithPostgresServiceTime(latency.Fixed(service), 1))
	chunks := makeChunks(t, 8)
	if err := p.Upsert(ctx, chunks...); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range chunks {
		wg.Go(func() {
			if _, err := p.Fetch(ctx, c.ID); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took < 4*service {
		t.Fatalf("8 lookups on 2 connections of %v each took %v, want at least %v", service, took, 4*service)
	}
	if st := p.BackendStats(); st.Waited == 0 || st.WaitSeconds <= 0 {
		t.Fatalf("BackendStats = %+v; want lookups that waited for a connection", st)
	}
}
