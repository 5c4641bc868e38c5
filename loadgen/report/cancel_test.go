package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// TestSummarizeCancellations: an abandoned request is neither completed nor failed, keeps its
// TTFT and nothing else, and the counts survive the JSON and a merge.
func TestSummarizeCancellations(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	done := func(i int, planned bool) loadgen.Record {
		return loadgen.Record{Index: i, Intended: 0, Sent: ms, FirstToken: 10 * ms, End: 100 * ms, Status: 200,
			OutputTokens: 10, CancelPlanned: planned, Chunks: []loadgen.Chunk{{At: 10 * ms, Tokens: 5}, {At: 100 * ms, Tokens: 5}}}
	}
	cut := func(i int, firstToken time.Duration) loadgen.Record {
		r := loadgen.Record{Index: i, Sent: ms, FirstToken: firstToken, End: 50 * ms, Status: 200, CancelPlanned: true,
			Cancelled: true, CancelledAt: 40 * ms}
		if firstToken > 0 {
			r.Chunks = []loadgen.Chunk{{At: firstToken, Tokens: 3}}
		}
		return r
	}
	res := &loadgen.Result{Start: time.Unix(1e9, 0), Duration: time.Second,
		Config:  loadgen.RunInfo{URL: "http://x", Cancel: "fraction=0.5,after=ttft+30ms"},
		Records: []loadgen.Record{done(0, false), done(1, true), cut(2, 10*ms), cut(3, 0), done(4, false)}}
	res.Records[3].CancelledAt = 45 * ms
	b := Summarize(res, Options{})
	c := b.Cancellations
	if b.Completed != 3 || b.Failed != 0 || c == nil || *c != (Cancellations{Requested: 3, Done: 2, Tokens: 3, LastAt: 45 * ms}) {
		t.Fatalf("completed %d, failed %d, cancellations %+v", b.Completed, b.Failed, c)
	}
	if n := b.Histograms[MetricTTFT].Count(); n != 4 {
		t.Errorf("TTFT holds %d, want 4: the 3 completed and the cancelled one that saw a token", n)
	}
	if n := b.Histograms[MetricE2EL].Count(); n != 3 {
		t.Errorf("E2EL holds %d, want the 3 completed", n)
	}
	if _, ok := b.CancelServer(); ok {
		t.Error("server figures without scraped metrics")
	}

	var js bytes.Buffer
	if err := WriteJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"cancelled": 2`) || !strings.Contains(js.String(), `"cancel": "fraction=0.5,after=ttft+30ms"`) {
		t.Errorf("JSON lacks the cancellations:\n%.600s", js.String())
	}
	f, err := Decode(&js)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Bench.Cancellations; got == nil || *got != *c {
		t.Errorf("read back %+v, want %+v", got, c)
	}
	m, err := Merge(b, f.Bench)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Cancellations; got == nil || got.Requested != 6 || got.Done != 4 || m.Completed != 6 {
		t.Errorf("merged %+v, completed %d", got, m.Completed)
	}
	var text bytes.Buffer
	if err := WriteText(&text, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "2 of 3 chosen (fraction=0.5,after=ttft+30ms") {
		t.Errorf("text:\n%s", text.String())
	}
}

// TestCancelServer reads from the scraped series whether the server stopped the work.
func TestCancelServer(t *testing.T) {
	t.Parallel()
	abort := func(pts ...[2]float64) ServerSeries {
		return ServerSeries{Name: "vllm:request_success_total", Labels: map[string]string{"finished_reason": "abort"}, Points: pts}
	}
	running := func(pts ...[2]float64) ServerSeries {
		return ServerSeries{Name: "vllm:num_requests_running", Points: pts}
	}
	kv := func(pts ...[2]float64) ServerSeries {
		return ServerSeries{Name: "vllm:gpu_cache_usage_perc", Points: pts}
	}
	stop := ServerSeries{Name: "vllm:request_success_total", Labels: map[string]string{"finished_reason": "stop"}, Points: [][2]float64{{0, 5}, {2, 9}}}
	yes, no := true, false
	for _, tc := range []struct {
		name   string
		series []ServerSeries
		aborts float64 // -1: NaN
		freed  *bool
	}{
		{"freed", []ServerSeries{stop, abort([2]float64{0, 4}, [2]float64{2, 7}), running([2]float64{0, 0}, [2]float64{1, 5}, [2]float64{2, 0}), kv([2]float64{2, 0})}, 3, &yes},
		{"abort series appears late counts from 0", []ServerSeries{running([2]float64{0, 0}, [2]float64{2, 0}), abort([2]float64{1, 3})}, 3, &yes},
		{"too few aborts", []ServerSeries{abort([2]float64{0, 0}, [2]float64{2, 2}), running([2]float64{2, 0})}, 2, &no},
		{"still running", []ServerSeries{abort([2]float64{0, 0}, [2]float64{2, 3}), running([2]float64{2, 1})}, 3, &no},
		{"KV still held", []ServerSeries{abort([2]float64{0, 0}, [2]float64{2, 3}), kv([2]float64{2, 0.01})}, 3, &no},
		{"no such series", []ServerSeries{stop}, -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Bench{Cancellations: &Cancellations{Requested: 4, Done: 3}, ServerMetrics: &ServerMetrics{Interval: time.Second, Series: tc.series}}
			s, ok := b.CancelServer()
			if !ok {
				t.Fatal("no server figures")
			}
			if (tc.aborts < 0) != math.IsNaN(s.Aborts) || (tc.aborts >= 0 && s.Aborts != tc.aborts) {
				t.Errorf("aborts %v, want %v", s.Aborts, tc.aborts)
			}
			if (s.Freed == nil) != (tc.freed == nil) || (s.Freed != nil && *s.Freed != *tc.freed) {
				t.Errorf("freed %v, want %v", s.Freed, tc.freed)
			}
		})
	}
}
