package loadgen_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// lookups is a source of GETs of the endpoint's root.
type lookups struct{}

func (lookups) Next() loadgen.Request { return loadgen.Request{Path: "/"} }

// BenchmarkRequest is the generator's cost per request as bench runs it (client, scheduler,
// records streamed into a Summarizer), against a trivial loopback endpoint by 8 closed-loop
// users: its ns/op, B/op and allocs/op are per request, the server's share included.
func BenchmarkRequest(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	}))
	defer srv.Close()
	c := newClient(b, srv.URL)
	s := report.NewSummarizer(report.Options{})
	b.ReportAllocs()
	b.ResetTimer()
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Workload: shape.Closed(lookups{}), Client: c, ClosedLoop: true, Concurrency: 8, NumItems: b.N,
		Stream: func(recs []loadgen.Record) { s.Add(recs...) },
	})
	if err != nil {
		b.Fatal(err)
	}
	if bench := s.Bench(res); bench.Completed < int64(b.N)*99/100 {
		b.Fatalf("%d of %d completed", bench.Completed, b.N)
	}
}

// BenchmarkOpenLoop is the generator's cost per request in the open loop, paced at a constant
// 5,000 req/s against a trivial loopback endpoint: its ns/op is the pace (1/rate), so read its
// B/op and allocs/op, which are per request, the server's share included.
func BenchmarkOpenLoop(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	}))
	defer srv.Close()
	c := newClient(b, srv.URL)
	p, err := shape.Constant(5000)
	if err != nil {
		b.Fatal(err)
	}
	s := report.NewSummarizer(report.Options{})
	b.ReportAllocs()
	b.ResetTimer()
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Workload: shape.Open(p, lookups{}), Client: c, NumItems: b.N,
		Stream: func(recs []loadgen.Record) { s.Add(recs...) },
	})
	if err != nil {
		b.Fatal(err)
	}
	if bench := s.Bench(res); bench.Completed < int64(b.N)*99/100 {
		b.Fatalf("%d of %d completed", bench.Completed, b.N)
	}
}
