package docstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// Defaults of OpenPostgres.
const (
	// DefaultPostgresTable is the table chunk payloads are kept in.
	DefaultPostgresTable = "ragtail_chunks"
	// DefaultPostgresQueryTimeout bounds every query, including the wait for a pool connection.
	DefaultPostgresQueryTimeout = 2 * time.Second
	// DefaultPostgresConnectTimeout bounds establishing one connection.
	DefaultPostgresConnectTimeout = 2 * time.Second
)

// upsertBatch is the most rows one INSERT carries.
const upsertBatch = 1000

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

type pgConfig struct {
	poolSize       int32
	queryTimeout   time.Duration
	connectTimeout time.Duration
	table          string
	serviceTime    latency.Law
	seed           uint64
	tp             trace.TracerProvider
	mp             metric.MeterProvider
}

// PostgresOption configures OpenPostgres.
type PostgresOption interface{ applyPostgres(*pgConfig) }

type pgOptionFunc func(*pgConfig)

func (f pgOptionFunc) applyPostgres(c *pgConfig) { f(c) }

// WithPoolSize sets the most connections the pool opens, which is the store's capacity: lookups
// beyond it queue for a connection (default: the DSN's pool_max_conns, else pgxpool's default of
// the larger of 4 and the number of CPUs).
func WithPoolSize(n int) PostgresOption {
	return pgOptionFunc(func(c *pgConfig) { c.poolSize = int32(min(max(n, 0), 1<<20)) })
}

// WithQueryTimeout bounds each operation, the wait for a pool connection included (default
// DefaultPostgresQueryTimeout). An operation that runs over fails with rag.ErrUnavailable.
func WithQueryTimeout(d time.Duration) PostgresOption {
	return pgOptionFunc(func(c *pgConfig) {
		if d > 0 {
			c.queryTimeout = d
		}
	})
}

// WithConnectTimeout bounds establishing one connection (default DefaultPostgresConnectTimeout).
func WithConnectTimeout(d time.Duration) PostgresOption {
	return pgOptionFunc(func(c *pgConfig) {
		if d > 0 {
			c.connectTimeout = d
		}
	})
}

// WithTable sets the table name (default DefaultPostgresTable): lower-case letters, digits and
// underscores, at most 63, not starting with a digit.
func WithTable(name string) PostgresOption {
	return pgOptionFunc(func(c *pgConfig) { c.table = name })
}

// WithPostgresServiceTime adds a simulated service time to each Fetch, paid while it holds its
// pool connection, seeded by seed, so a lab can make the real pool saturate at a chosen load.
// None by default; Store.SetFetchLatency changes it at run time.
func WithPostgresServiceTime(law latency.Law, seed uint64) PostgresOption {
	return pgOptionFunc(func(c *pgConfig) { c.serviceTime, c.seed = law, seed })
}

// WithPostgresTracerProvider sets where the client spans go (default: the global provider).
func WithPostgresTracerProvider(tp trace.TracerProvider) PostgresOption {
	return pgOptionFunc(func(c *pgConfig) { c.tp = tp })
}

// WithPostgresMeterProvider sets where db.client.operation.duration goes (default: the global
// provider).
func WithPostgresMeterProvider(mp metric.MeterProvider) PostgresOption {
	return pgOptionFunc(func(c *pgConfig) { c.mp = mp })
}

// Postgres is a backing store of chunk payloads in a PostgreSQL table, reached through a pgxpool
// connection pool. Every query is a client span (db.system.name postgresql) and a
// db.client.operation.duration sample. A PostgreSQL that is down or too slow gives errors
// matching rag.ErrUnavailable; the pool reconnects by itself when it is back. It is safe for
// concurrent use.
type Postgres struct {
	pool         *pgxpool.Pool
	table        string
	queryTimeout time.Duration
	seed         uint64
	delay        atomic.Pointer[latency.Delay]
	sqlGet       string
	sqlUpsert    string
	sqlDelete    string
	sqlDeleteAny string
	sqlIDs       string
	sqlCount     string

	lookups, missing, errs atomic.Uint64
	waiting                atomic.Int64
}

var _ Backend = (*Postgres)(nil)

// OpenPostgres connects to the database named by dsn (a postgres:// URL or key=value string, as
// pgx parses it) and creates the chunk table if it is missing; concurrent openers serialise on
// an advisory lock. It fails, with an error matching rag.ErrUnavailable, if the database cannot
// be reached. Close the store when done.
func OpenPostgres(ctx context.Context, dsn string, opts ...PostgresOption) (*Postgres, error) {
	cfg := pgConfig{
		queryTimeout:   DefaultPostgresQueryTimeout,
		connectTimeout: DefaultPostgresConnectTimeout,
		table:          DefaultPostgresTable,
		serviceTime:    latency.Law{Kind: latency.LawNone},
		seed:           defaultSeed,
	}
	for _, o := range opts {
		o.applyPostgres(&cfg)
	}
	if !tableName.MatchString(cfg.table) {
		return nil, fmt.Errorf("%w: postgres table %.70q: want lower-case letters, digits and underscores, at most 63", rag.ErrInvalidRequest, cfg.table)
	}
	pc, err := pgxpool.ParseConfig(dsn) // its errors redact the password
	if err != nil {
		return nil, fmt.Errorf("%w: postgres dsn: %w (want postgres://user@host:5432/db)", rag.ErrInvalidRequest, err)
	}
	if cfg.poolSize > 0 {
		pc.MaxConns = cfg.poolSize
		pc.MinConns = min(pc.MinConns, pc.MaxConns)
	}
	pc.ConnConfig.ConnectTimeout = cfg.connectTimeout
	port := int(pc.ConnConfig.Port)
	pc.ConnConfig.Tracer = newPGTracer(cfg.tp, cfg.mp, pc.ConnConfig.Host, port, pc.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres pool: %w", rag.ErrInvalidRequest, err)
	}
	t := pgx.Identifier{cfg.table}.Sanitize()
	p := &Postgres{
		pool:         pool,
		table:        cfg.table,
		queryTimeout: cfg.queryTimeout,
		seed:         cfg.seed,
		sqlGet:       "SELECT doc_id, title, topic, body, tokens FROM " + t + " WHERE id = $1",
		sqlUpsert: "INSERT INTO " + t + " (id, doc_id, title, topic, body, tokens) " +
			"SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[]) " +
			"ON CONFLICT (id) DO UPDATE SET doc_id = EXCLUDED.doc_id, title = EXCLUDED.title, " +
			"topic = EXCLUDED.topic, body = EXCLUDED.body, tokens = EXCLUDED.tokens, updated_at = now()",
		sqlDelete:    "DELETE FROM " + t + " WHERE id = $1",
		sqlDeleteAny: "DELETE FROM " + t + " WHERE id = ANY($1::text[])",
		sqlIDs:       "SELECT id FROM " + t,
		sqlCount:     "SELECT count(*) FROM " + t,
	}
	p.delay.Store(latency.NewDelay(cfg.serviceTime, cfg.seed))
	if err := p.ensureSchema(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

// ensureSchema creates the table if it does not exist, under a transaction-scoped advisory lock
// so that two processes opening an empty database at once do not race on the catalog.
func (p *Postgres) ensureSchema(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.queryTimeout)
	defer cancel()
	ddl := "CREATE TABLE IF NOT EXISTS " + pgx.Identifier{p.table}.Sanitize() + ` (
	id         text PRIMARY KEY,
	doc_id     text NOT NULL,
	title      text NOT NULL DEFAULT '',
	topic      text NOT NULL DEFAULT '',
	body       text NOT NULL,
	tokens     integer NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL DEFAULT now()
)`
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "ragtail.schema."+p.table); err != nil {
			return err
		}
		_, err := tx.Exec(withOp(ctx, "CREATE", p.table), ddl)
		return err
	})
	if err != nil {
		return p.fail(ctx, "create table "+p.table, err)
	}
	return nil
}

// fail turns a pgx error into the store's error: the caller's own cancellation as is, anything
// else (unreachable, timed out, refused) as rag.ErrUnavailable. When a connection broke, the
// pool's idle connections are dropped too, since they most likely broke with it.
func (p *Postgres) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("postgresql %s: %w", op, ctx.Err())
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded) {
		p.pool.Reset()
	}
	return &unavailableError{op: op, reason: p.reason(err), err: err}
}

// reason says in a few bounded words why an operation failed; the full pgx error, which names
// hosts, users and databases, stays behind Unwrap for logs and errors.As.
func (p *Postgres) reason(err error) string {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	switch {
	case errors.As(err, &pgErr):
		msg := pgErr.Message
		if len(msg) > 120 {
			msg = msg[:120] + "..."
		}
		return "server error " + pgErr.Code + ": " + msg
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %v", p.queryTimeout)
	case errors.As(err, &connErr):
		return "cannot connect"
	}
	return "connection failed"
}

// unavailableError is a failed PostgreSQL operation: it matches rag.ErrUnavailable and the pgx
// error, and its message is short enough for an API client.
type unavailableError struct {
	op, reason string
	err        error
}

func (e *unavailableError) Error() string {
	return "postgresql " + e.op + ": " + rag.ErrUnavailable.Error() + ": " + e.reason
}

func (e *unavailableError) Unwrap() []error { return []error{rag.ErrUnavailable, e.err} }

// Fetch implements Backend: take a pool connection (queueing while all are busy), pay the
// simulated service time if any, select the row.
func (p *Postgres) Fetch(ctx context.Context, id string) (rag.Chunk, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, p.queryTimeout)
	defer cancel()
	p.waiting.Add(1)
	conn, err := p.pool.Acquire(ctx)
	p.waiting.Add(-1)
	if err != nil {
		return rag.Chunk{}, p.lookupFailed(parent, id, err)
	}
	defer conn.Release()
	if _, err := p.delay.Load().Wait(ctx); err != nil {
		return rag.Chunk{}, p.lookupFailed(parent, id, err)
	}
	c := rag.Chunk{ID: id}
	err = conn.QueryRow(withOp(ctx, "SELECT", p.table), p.sqlGet, id).Scan(&c.DocID, &c.Title, &c.Topic, &c.Text, &c.Tokens)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		p.lookups.Add(1)
		p.missing.Add(1)
		return rag.Chunk{}, fmt.Errorf("chunk %q: %w", truncate(id), rag.ErrNotFound)
	case err != nil:
		return rag.Chunk{}, p.lookupFailed(parent, id, err)
	}
	p.lookups.Add(1)
	return c, nil
}

func (p *Postgres) lookupFailed(parent context.Context, id string, err error) error {
	if parent.Err() == nil {
		p.errs.Add(1)
	}
	return p.fail(parent, fmt.Sprintf("fetch chunk %q", truncate(id)), err)
}

// Upsert implements Backend, in one transaction of multi-row inserts.
func (p *Postgres) Upsert(ctx context.Context, chunks ...rag.Chunk) error {
	if len(chunks) == 0 {
		return nil
	}
	for _, c := range chunks {
		if c.ID == "" {
			return fmt.Errorf("%w: put chunk: empty id", rag.ErrInvalidRequest)
		}
	}
	// Scale the timeout with the work: a large ingest is many batches.
	ctx, cancel := context.WithTimeout(ctx, p.queryTimeout*time.Duration(1+len(chunks)/upsertBatch))
	defer cancel()
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		for start := 0; start < len(chunks); start += upsertBatch {
			batch := chunks[start:min(start+upsertBatch, len(chunks))]
			var ids, docs, titles, topics, bodies []string
			var tokens []int32
			for _, c := range batch {
				ids, docs, titles = append(ids, c.ID), append(docs, c.DocID), append(titles, c.Title)
				topics, bodies = append(topics, c.Topic), append(bodies, c.Text)
				tokens = append(tokens, int32(min(max(c.Tokens, 0), 1<<31-1)))
			}
			if _, err := tx.Exec(withOp(ctx, "INSERT", p.table), p.sqlUpsert, ids, docs, titles, topics, bodies, tokens); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return p.fail(ctx, fmt.Sprintf("upsert %d chunks", len(chunks)), err)
	}
	return nil
}

// Remove implements Backend.
func (p *Postgres) Remove(ctx context.Context, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, p.queryTimeout)
	defer cancel()
	tag, err := p.pool.Exec(withOp(ctx, "DELETE", p.table), p.sqlDelete, id)
	if err != nil {
		return false, p.fail(ctx, fmt.Sprintf("delete chunk %q", truncate(id)), err)
	}
	return tag.RowsAffected() > 0, nil
}

// EachID implements Backend.
func (p *Postgres) EachID(ctx context.Context, fn func(id string)) error {
	ids, err := p.ids(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		fn(id)
	}
	return nil
}

func (p *Postgres) ids(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*p.queryTimeout) // a full scan of the ids
	defer cancel()
	rows, err := p.pool.Query(withOp(ctx, "SELECT", p.table), p.sqlIDs)
	if err != nil {
		return nil, p.fail(ctx, "list chunk ids", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, p.fail(ctx, "list chunk ids", err)
	}
	return ids, nil
}

// Count implements Backend.
func (p *Postgres) Count(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.queryTimeout)
	defer cancel()
	var n int64
	if err := p.pool.QueryRow(withOp(ctx, "SELECT", p.table), p.sqlCount).Scan(&n); err != nil {
		return 0, p.fail(ctx, "count chunks", err)
	}
	return int(n), nil
}

// Prune deletes every chunk whose id keep rejects, for instance the chunks of files that an
// ingest no longer has, and returns how many it deleted.
func (p *Postgres) Prune(ctx context.Context, keep func(id string) bool) (int, error) {
	ids, err := p.ids(ctx)
	if err != nil {
		return 0, err
	}
	var drop []string
	for _, id := range ids {
		if !keep(id) {
			drop = append(drop, id)
		}
	}
	if len(drop) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.queryTimeout*time.Duration(1+len(drop)/upsertBatch))
	defer cancel()
	tag, err := p.pool.Exec(withOp(ctx, "DELETE", p.table), p.sqlDeleteAny, drop)
	if err != nil {
		return 0, p.fail(ctx, fmt.Sprintf("prune %d chunks", len(drop)), err)
	}
	return int(tag.RowsAffected()), nil
}

// Ping checks that the database answers, for readiness probes.
func (p *Postgres) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.queryTimeout)
	defer cancel()
	if err := p.pool.Ping(ctx); err != nil {
		return p.fail(ctx, "ping", err)
	}
	return nil
}

// SetFetchLatency replaces the simulated service time of each Fetch.
func (p *Postgres) SetFetchLatency(law latency.Law) { p.delay.Store(latency.NewDelay(law, p.seed)) }

// FetchLatency returns the simulated service time of each Fetch.
func (p *Postgres) FetchLatency() latency.Law { return p.delay.Load().Law() }

// BackendStats returns the store's lookup counters and its pool's state: Concurrency is the
// pool size, Waited counts acquires that found no idle connection and WaitSeconds their wait.
func (p *Postgres) BackendStats() BackendStats {
	st := p.pool.Stat()
	return BackendStats{
		Kind:         "postgresql",
		Lookups:      p.lookups.Load(),
		Missing:      p.missing.Load(),
		Errors:       p.errs.Load(),
		Concurrency:  int(st.MaxConns()),
		InUse:        int(st.AcquiredConns()),
		Waiting:      int(p.waiting.Load()),
		Waited:       uint64(st.EmptyAcquireCount()),
		WaitSeconds:  st.EmptyAcquireWaitTime().Seconds(),
		FetchLatency: p.FetchLatency().String(),
	}
}

// PoolSize returns the most connections the pool opens.
func (p *Postgres) PoolSize() int { return int(p.pool.Config().MaxConns) }

// Table returns the table chunk payloads are kept in.
func (p *Postgres) Table() string { return p.table }

// Close closes the pool's connections, waiting for those in use to be released.
func (p *Postgres) Close() { p.pool.Close() }
