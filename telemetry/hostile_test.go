package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/pipeline"
	"github.com/ragtail/ragtail/telemetry"
)

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// modelLabels scrapes /metrics and returns the distinct values of the gen_ai_request_model
// label and the number of series carrying it.
func modelLabels(tb testing.TB, s *stack) (values map[string]bool, series int) {
	tb.Helper()
	resp, err := http.Get(s.admin.URL + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	re := regexp.MustCompile(`gen_ai_request_model="([^"]*)"`)
	values = map[string]bool{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if m := re.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "#") {
			values[m[1]] = true
			series++
		}
	}
	return values, series
}

// TestHostileModelNamesStayBounded names a different model in every request, with the whole
// telemetry on (traces into the ring, metrics on the Prometheus registry): 10,000 names of 50 KB
// straight into the pipeline, as a caller without the HTTP API's length check would, and through
// the HTTP API 300 names of 50 KB (refused at the edge) and 1,000 of the longest accepted length
// (unknown to the engine). The live heap grows by less than 50 MB, and the gen_ai_request_model
// label takes only the served model's name, the embedder's, and one value for every other.
func TestHostileModelNamesStayBounded(t *testing.T) {
	s := newStack(t, telemetry.Config{}, stackOptions{})
	ctx := context.Background()
	// One good and one bad request first, so that every series and pool exists before measuring.
	if a := s.ask(ctx, s.questions[0], 8); a.err != nil || a.status != 200 {
		t.Fatalf("warm-up: %+v", a)
	}
	post := func(model string) int {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"What is a KV cache?"}]}`
		resp, err := s.api.Client().Post(s.api.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	run := func(model string) int {
		q := rag.Query{ID: "hostile", Model: model, MaxTokens: 8, Messages: []rag.Message{{Role: "user", Content: "What is a KV cache?"}}}
		if _, err := s.pipeline.Run(ctx, q, nil); !errors.Is(err, rag.ErrUnknownModel) {
			t.Errorf("Run with an unknown model: %v", err)
			return 0
		}
		return 404
	}
	post("warm-up-unknown")
	before := liveHeap()

	type batch struct {
		count, size int
		send        func(string) int
		status      int
	}
	batches := []batch{
		{count: 10_000, size: 50 << 10, send: run, status: 404},
		{count: 300, size: 50 << 10, send: post, status: 400},
		{count: 1_000, size: 256, send: post, status: 404},
	}
	start := time.Now()
	total := 0
	for bi, b := range batches {
		total += b.count
		var (
			next  atomic.Int64
			wrong atomic.Int64
			wg    sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				var name strings.Builder
				for {
					i := next.Add(1) - 1
					if i >= int64(b.count) {
						return
					}
					name.Reset()
					prefix := fmt.Sprintf("model-%d-%06d-", bi, i)
					name.WriteString(prefix)
					name.WriteString(strings.Repeat("m", b.size-len(prefix)))
					if b.send(name.String()) != b.status {
						wrong.Add(1)
					}
				}
			})
		}
		wg.Wait()
		t.Logf("batch %d: %d requests with %d-byte names in %v", bi, b.count, b.size, time.Since(start))
		if n := wrong.Load(); n > 0 {
			t.Errorf("batch %d: %d of %d requests did not get %d", bi, n, b.count, b.status)
		}
	}
	t.Logf("%d requests in %v", total, time.Since(start))
	after := liveHeap()

	growth := int64(after) - int64(before)
	t.Logf("live heap %.1f MB before, %.1f MB after: growth %.1f MB", float64(before)/(1<<20), float64(after)/(1<<20), float64(growth)/(1<<20))
	if growth > 50<<20 {
		t.Errorf("live heap grew by %.1f MB, want under 50 MB", float64(growth)/(1<<20))
	}
	values, series := modelLabels(t, s)
	unknown := 0
	for v := range values {
		if strings.HasPrefix(v, "model-") {
			unknown++
		}
	}
	// The served model, the embedder's model (gen_ai_client_* of the embeddings operation) and
	// pipeline.OtherModel for every other name.
	if unknown > 0 || len(values) > 3 || !values[s.model] || !values[pipeline.OtherModel] {
		keys := make([]string, 0, len(values))
		for v := range values {
			keys = append(keys, fmt.Sprintf("%.40s", v))
		}
		t.Errorf("gen_ai_request_model takes %d values (%v), want the served model, the embedder's and %s", len(values), keys, pipeline.OtherModel)
	}
	t.Logf("gen_ai_request_model values %d, series %d", len(values), series)
}

// TestSpanLimitsCutLongAttributes checks that Setup configures the SDK's span limits: a 1 MB
// attribute value is kept as its first DefaultAttributeValueLength bytes.
func TestSpanLimitsCutLongAttributes(t *testing.T) {
	t.Setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "")
	t.Setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "")
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	_, span := tel.TracerProvider.Tracer("test").Start(context.Background(), "root")
	span.SetAttributes(attribute.String("user_agent.original", strings.Repeat("a", 1<<20)))
	for i := range 200 {
		span.AddEvent(fmt.Sprintf("event %d", i))
	}
	span.End()
	traces := tel.Ring.Recent(1)
	if len(traces) != 1 {
		t.Fatalf("%d traces in the ring", len(traces))
	}
	root := traces[0].Root
	for _, kv := range root.Attributes() {
		if kv.Key == "user_agent.original" && len(kv.Value.AsString()) != telemetry.DefaultAttributeValueLength {
			t.Errorf("attribute kept %d bytes, want %d", len(kv.Value.AsString()), telemetry.DefaultAttributeValueLength)
		}
	}
	if n := len(root.Events()); n != telemetry.DefaultSpanLimits().EventCountLimit {
		t.Errorf("%d events kept, want the limit %d", n, telemetry.DefaultSpanLimits().EventCountLimit)
	}
}
