package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/rag/service"
	"github.com/ragtail/ragtail/telemetry"
)

// tracedRagtail starts an in-process ragtail on the simulated engine profile (empty: the
// default) whose spans go to the returned recorder.
func tracedRagtail(t *testing.T, profile string) (*httptest.Server, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := service.DefaultConfig()
	if profile != "" {
		cfg.Profile = profile
	}
	svc, err := service.New(context.Background(), cfg, service.WithTelemetry(service.Telemetry{
		TracerProvider: tp, Propagator: propagation.TraceContext{}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	srv := httptest.NewServer(svc.API)
	t.Cleanup(srv.Close)
	return srv, rec
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestBenchClientSpanJoinsServerTrace checks that a client span's context is the traceparent
// sent: the server span of ragtail is its child, and the stage spans hang under that.
func TestBenchClientSpanJoinsServerTrace(t *testing.T) {
	srv, serverSpans := tracedRagtail(t, "tiny")
	clientSpans := tracetest.NewSpanRecorder()
	ctp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	defer func() { _ = ctp.Shutdown(context.Background()) }()

	ctx := context.Background()
	probe, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	models, err := probe.Models(ctx)
	if err != nil || len(models) == 0 {
		t.Fatalf("models: %v %v", models, err)
	}
	c, err := client.New(srv.URL, client.WithModel(models[0]), client.WithMaxTokens(8), client.WithTracerProvider(ctp))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		model   string
		wantErr bool
	}{
		{name: "ok", model: models[0]},
		{name: "unknown model", model: "no-such-model", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := c
			if tt.model != models[0] {
				if cl, err = client.New(srv.URL, client.WithModel(tt.model), client.WithTracerProvider(ctp)); err != nil {
					t.Fatal(err)
				}
			}
			origin := time.Now()
			rec := loadgen.Record{Intended: time.Millisecond, Warmup: true}
			time.Sleep(time.Millisecond)
			cl.Do(ctx, &loadgen.Request{Messages: []loadgen.Message{{Role: "user", Content: "what is a tail latency?"}}}, origin, &rec)
			if rec.OK() == tt.wantErr {
				t.Fatalf("record ok=%v, want %v: %+v", rec.OK(), !tt.wantErr, rec)
			}
			cs := findSpan(clientSpans.Ended(), func(s sdktrace.ReadOnlySpan) bool {
				return s.SpanContext().TraceID().String() == rec.TraceID
			})
			if cs == nil {
				t.Fatalf("no client span of trace %s", rec.TraceID)
			}
			checkClientSpan(t, cs, tt.model, origin, &rec)
			ss := findSpan(serverSpans.Ended(), func(s sdktrace.ReadOnlySpan) bool {
				return s.SpanKind() == trace.SpanKindServer && s.SpanContext().TraceID() == cs.SpanContext().TraceID()
			})
			if ss == nil {
				t.Fatalf("no server span in the client's trace %s", rec.TraceID)
			}
			if ss.Parent().SpanID() != cs.SpanContext().SpanID() || !ss.Parent().IsRemote() {
				t.Errorf("server span's parent = %s (remote %v), want the client span %s", ss.Parent().SpanID(), ss.Parent().IsRemote(), cs.SpanContext().SpanID())
			}
			if tt.wantErr {
				return
			}
			names := map[string]bool{}
			for _, s := range serverSpans.Ended() {
				if s.SpanContext().TraceID() == cs.SpanContext().TraceID() {
					names[s.Name()] = true
				}
			}
			for _, want := range []string{"rag.pipeline", "rag.admission", "rag.fetch", "rag.stream", "chat " + tt.model} {
				if !names[want] {
					t.Errorf("server trace lacks span %q; has %v", want, names)
				}
			}
		})
	}
}

func checkClientSpan(t *testing.T, cs sdktrace.ReadOnlySpan, model string, origin time.Time, rec *loadgen.Record) {
	t.Helper()
	if cs.Name() != "chat "+model || cs.SpanKind() != trace.SpanKindClient {
		t.Errorf("client span %q kind %v, want %q kind client", cs.Name(), cs.SpanKind(), "chat "+model)
	}
	if !cs.StartTime().Equal(origin.Add(rec.Intended)) || !cs.EndTime().Equal(origin.Add(rec.End)) {
		t.Errorf("client span %v..%v, want the record's intended %v..end %v", cs.StartTime(), cs.EndTime(), origin.Add(rec.Intended), origin.Add(rec.End))
	}
	a := attrsOf(cs)
	want := map[attribute.Key]attribute.Value{
		"gen_ai.operation.name":     attribute.StringValue("chat"),
		"gen_ai.request.model":      attribute.StringValue(model),
		"http.response.status_code": attribute.IntValue(rec.Status),
		"server.address":            attribute.StringValue("127.0.0.1"),
		"ragtail.bench.warmup":      attribute.BoolValue(true),
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("client span %s = %v, want %v", k, a[k].String(), v.String())
		}
	}
	if _, ok := a["server.port"]; !ok {
		t.Error("client span lacks server.port")
	}
	if rec.OK() {
		// ragtail serve names the model it answered with in every chunk.
		if got := a["gen_ai.response.model"]; got != attribute.StringValue(model) {
			t.Errorf("client span gen_ai.response.model = %v, want %q", got.String(), model)
		}
		if a["gen_ai.usage.output_tokens"].AsInt64() != int64(rec.OutputTokens) || rec.OutputTokens == 0 {
			t.Errorf("output tokens on span %v, record %d", a["gen_ai.usage.output_tokens"].String(), rec.OutputTokens)
		}
		if a["gen_ai.usage.input_tokens"].AsInt64() != int64(rec.PromptTokens) || rec.PromptTokens == 0 {
			t.Errorf("input tokens on span %v, record %d", a["gen_ai.usage.input_tokens"].String(), rec.PromptTokens)
		}
		ttft, _ := rec.TTFT()
		var found bool
		for _, e := range cs.Events() {
			if e.Name == "gen_ai.first_token" {
				found = e.Time.Equal(origin.Add(rec.FirstToken))
			}
		}
		if !found || a["gen_ai.response.time_to_first_chunk"].AsFloat64() != ttft.Seconds() {
			t.Errorf("first-token event at the record's first token: %v; ttft attr %v, want %v", found, a["gen_ai.response.time_to_first_chunk"].String(), ttft.Seconds())
		}
		if cs.Status().Code == codes.Error {
			t.Errorf("ok request has span status %v", cs.Status())
		}
		return
	}
	if a["error.type"].AsString() != "404" && a["error.type"].AsString() != "400" {
		t.Errorf("failed request's error.type = %q, want its HTTP status", a["error.type"].String())
	}
	if cs.Status().Code != codes.Error {
		t.Errorf("failed request has span status %v, want error", cs.Status())
	}
}

func findSpan(spans []sdktrace.ReadOnlySpan, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if match(s) {
			return s
		}
	}
	return nil
}

// TestBenchOTLPDeadCollector: a bench run exporting to a port nobody listens on completes as
// without it, and --otlp rejects what is not a URL.
func TestBenchOTLPDeadCollector(t *testing.T) {
	srv, _ := tracedRagtail(t, "")
	dead := httptest.NewServer(nil)
	deadURL := dead.URL
	dead.Close()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := runBench(context.Background(), []string{"--url", srv.URL, "--num-prompts", "20", "--concurrency", "4",
		"--max-tokens", "8", "--quiet", "--otlp", deadURL}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench with a dead collector: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "client spans (ragtail-bench) to otlp http "+deadURL+"/v1/traces") {
		t.Errorf("stderr does not say where the spans go:\n%s", stderr.String())
	}
	if d := time.Since(start); d > telemetry.ClientShutdownTimeout+telemetry.ClientExportTimeout+30*time.Second {
		t.Errorf("bench took %v with a dead collector", d)
	}
	for _, bad := range []string{"127.0.0.1:4318", "ftp://x", "http://"} {
		err := runBench(context.Background(), []string{"--url", srv.URL, "--num-prompts", "1", "--otlp", bad}, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--otlp") {
			t.Errorf("--otlp %q: err %v, want a --otlp error", bad, err)
		}
	}
}
