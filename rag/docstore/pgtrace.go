package docstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/dbconv"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName is the OTel scope of the doc store's own instrumentation.
const instrumentationName = "github.com/ragtail/ragtail/rag/docstore"

// bucketsDB are db.client.operation.duration's advised bucket boundaries, in seconds, the same
// the pipeline uses for its retrieval spans.
var bucketsDB = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// opKey carries the operation and table of the query about to run to the tracer, so span names
// and attributes come from a closed set instead of from parsing SQL.
type opKey struct{}

type queryOp struct{ operation, collection string }

func withOp(ctx context.Context, operation, collection string) context.Context {
	return context.WithValue(ctx, opKey{}, queryOp{operation, collection})
}

// pgTracer is a pgx.QueryTracer producing OTel database client spans (semconv v1.41:
// db.system.name postgresql, db.operation.name, db.collection.name, db.namespace,
// server.address, server.port, db.query.text for the store's own parameterised SQL, never the
// parameters) and db.client.operation.duration samples.
type pgTracer struct {
	tracer   trace.Tracer
	duration dbconv.ClientOperationDuration
	base     []attribute.KeyValue // on every span
	metric   []attribute.KeyValue // on every sample
}

var _ pgx.QueryTracer = (*pgTracer)(nil)

func newPGTracer(tp trace.TracerProvider, mp metric.MeterProvider, host string, port int, database string) *pgTracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := &pgTracer{tracer: tp.Tracer(instrumentationName)}
	// An instrument that cannot be created records nothing; spans are still made.
	t.duration, _ = dbconv.NewClientOperationDuration(mp.Meter(instrumentationName),
		metric.WithExplicitBucketBoundaries(bucketsDB...))
	server := []attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(port)}
	t.base = append([]attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.DBNamespace(database)}, server...)
	t.metric = append([]attribute.KeyValue{semconv.DBNamespace(database)}, server...)
	return t
}

type spanKey struct{}

type querySpan struct {
	span  trace.Span
	start time.Time
	op    queryOp
}

// operationOf names a query that came without withOp by its first keyword, from a closed set.
func operationOf(sql string) string {
	word, _, _ := strings.Cut(strings.TrimSpace(sql), " ")
	switch w := strings.ToUpper(word); w {
	case "SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "BEGIN", "COMMIT", "ROLLBACK":
		return w
	}
	return "other"
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	op, ok := ctx.Value(opKey{}).(queryOp)
	if !ok {
		op = queryOp{operation: operationOf(data.SQL)}
	}
	name := op.operation
	attrs := append(t.base[:len(t.base):len(t.base)], semconv.DBOperationName(op.operation))
	if op.collection != "" {
		name += " " + op.collection
		attrs = append(attrs, semconv.DBCollectionName(op.collection))
	}
	if ok { // the store's own SQL: parameterised, no values in it
		attrs = append(attrs, semconv.DBQueryText(data.SQL))
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, spanKey{}, querySpan{span: span, start: time.Now(), op: op})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *pgTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	qs, ok := ctx.Value(spanKey{}).(querySpan)
	if !ok {
		return
	}
	attrs := append(t.metric[:len(t.metric):len(t.metric)], semconv.DBOperationName(qs.op.operation))
	if qs.op.collection != "" {
		attrs = append(attrs, semconv.DBCollectionName(qs.op.collection))
	}
	if err := data.Err; err != nil && !errors.Is(err, pgx.ErrNoRows) {
		errType := "_OTHER"
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			errType = pgErr.Code // SQLSTATE: five characters from a closed set
			qs.span.SetAttributes(semconv.DBResponseStatusCode(pgErr.Code))
		case errors.Is(err, context.DeadlineExceeded):
			errType = "timeout"
		case errors.Is(err, context.Canceled):
			errType = "canceled"
		}
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
		qs.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
		qs.span.SetStatus(codes.Error, errType)
	}
	qs.span.End()
	t.duration.Record(ctx, time.Since(qs.start).Seconds(), dbconv.SystemNamePostgreSQL, attrs...)
}
