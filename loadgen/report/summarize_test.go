package report

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

func benchJSON(tb testing.TB, b *Bench) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, b); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// items groups a result's records as a run hands them to its Stream: one item per lone request
// or per session, a session's steps together and in order.
func items(res *loadgen.Result) [][]loadgen.Record {
	var out [][]loadgen.Record
	at := map[string]int{}
	for _, r := range res.Records {
		if r.Session == "" {
			out = append(out, []loadgen.Record{r})
			continue
		}
		i, ok := at[r.Session]
		if !ok {
			i = len(out)
			at[r.Session] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], r)
	}
	return out
}

func TestSummarizerStreamEqualsSummarize(t *testing.T) {
	t.Parallel()
	// The records arrive item by item in an order unrelated to their intended times (as items
	// end); the bench is byte for byte the one of Summarize.
	for _, bin := range []time.Duration{0, 30 * time.Second} {
		res := syntheticResult(11, 8000)
		opts := goldenOptions(t)
		opts.TimelineBin = bin
		want := benchJSON(t, Summarize(res, opts))
		its := items(res)
		rand.New(rand.NewPCG(3, 4)).Shuffle(len(its), func(i, j int) { its[i], its[j] = its[j], its[i] })
		s := NewSummarizer(opts)
		for _, it := range its {
			s.Add(it...)
		}
		if got := benchJSON(t, s.Bench(&loadgen.Result{Start: res.Start, Duration: res.Duration, Config: res.Config})); !bytes.Equal(got, want) {
			t.Errorf("bin %v: streamed bench differs from Summarize's", bin)
		}
	}
}

func TestSummarizerBoundedAgainstExact(t *testing.T) {
	t.Parallel()
	// 8,000 requests over about 200 s in 30 s bins: each bin holds over a thousand samples, past
	// binExact, so its percentiles come from buckets. Each must be at or above the exact
	// nearest-rank value and within binPrecision of it; counts, means and maxima are exact, and
	// the slowest requests are those of a full sort.
	res := syntheticResult(5, 8000)
	opts := Options{TimelineBin: 30 * time.Second, Slowest: 25}
	b := Summarize(res, opts)
	type exactBin struct{ e2el, ttft []time.Duration }
	exact := map[int]*exactBin{}
	for i := range res.Records {
		r := &res.Records[i]
		if !r.OK() {
			continue
		}
		k := int(r.Intended / opts.TimelineBin)
		if exact[k] == nil {
			exact[k] = &exactBin{}
		}
		lat := latencies(r, outputTokens(r))
		exact[k].e2el = append(exact[k].e2el, lat.E2EL)
		if lat.HasTTFT {
			exact[k].ttft = append(exact[k].ttft, lat.TTFT)
		}
	}
	check := func(k int, name string, xs []time.Duration, n int64, mean, maxV time.Duration, p50, p99 *time.Duration) {
		slices.Sort(xs)
		if n != int64(len(xs)) || maxV != xs[len(xs)-1] {
			t.Errorf("bin %d %s: n %d max %v, want %d %v", k, name, n, maxV, len(xs), xs[len(xs)-1])
		}
		var sum float64
		for _, x := range xs {
			sum += float64(x)
		}
		if want := time.Duration(sum / float64(len(xs))); mean != want {
			t.Errorf("bin %d %s: mean %v, want %v", k, name, mean, want)
		}
		for _, q := range []struct {
			q   float64
			got *time.Duration
		}{{0.5, p50}, {0.99, p99}} {
			if q.got == nil {
				t.Errorf("bin %d %s: no P%g from %d samples", k, name, 100*q.q, len(xs))
				continue
			}
			want := xs[stats.NearestRank(int64(len(xs)), q.q)-1]
			if *q.got < want || float64(*q.got-want) > binPrecision*float64(want) {
				t.Errorf("bin %d %s: P%g %v, exact %v: off by more than %.2f%%", k, name, 100*q.q, *q.got, want, 100*binPrecision)
			}
		}
	}
	bucketed := 0
	for k, tb := range b.Timeline {
		e := exact[k]
		if e == nil || len(e.e2el) <= binExact {
			continue
		}
		bucketed++
		check(k, "e2el", e.e2el, tb.N, tb.MeanE2EL, tb.MaxE2EL, tb.P50E2EL, tb.P99E2EL)
		check(k, "ttft", e.ttft, tb.NTTFT, tb.MeanTTFT, tb.MaxTTFT, tb.P50TTFT, tb.P99TTFT)
	}
	if bucketed < 5 {
		t.Fatalf("only %d bins past binExact: the test exercises nothing", bucketed)
	}

	idx := make([]int, len(res.Records))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, c int) int {
		return cmp.Or(cmp.Compare(res.Records[c].E2EL(), res.Records[a].E2EL()), cmp.Compare(a, c))
	})
	if len(b.Slowest) != opts.Slowest {
		t.Fatalf("%d slowest, want %d", len(b.Slowest), opts.Slowest)
	}
	for i, s := range b.Slowest {
		if r := res.Records[idx[i]]; s.Index != r.Index || s.E2EL != r.E2EL() {
			t.Errorf("slowest %d: request %d (%v), want %d (%v)", i, s.Index, s.E2EL, r.Index, r.E2EL())
		}
	}
}

func TestTimelineWidensInPlace(t *testing.T) {
	t.Parallel()
	// 60,000 requests at 40 req/s last about 1,500 s: 1 s bins would be too many, the timeline
	// doubles its width to 4 s (375 bins), and what it adds up stays exact.
	res := syntheticResult(2, 60000)
	b := Summarize(res, Options{})
	if n := len(b.Timeline); n > maxTimelineBins || b.Timeline[0].Width != 4*time.Second {
		t.Fatalf("%d bins of %v, want at most %d of 4s", n, b.Timeline[0].Width, maxTimelineBins)
	}
	var sent, done, failed, n int64
	for _, tb := range b.Timeline {
		sent, done, failed, n = sent+tb.Sent, done+tb.Completed, failed+tb.Failed, n+tb.N
	}
	if sent != int64(len(res.Records)) || done != b.Completed || failed != b.Failed || n != b.Completed {
		t.Errorf("timeline adds up to %d sent, %d completed (%d intended), %d failed; bench has %d, %d, %d",
			sent, done, n, failed, len(res.Records), b.Completed, b.Failed)
	}
}

func TestWarmupInNoStatistic(t *testing.T) {
	t.Parallel()
	// Marking the requests intended in the first 3 s as warmup gives the bench of the run
	// without them that began 3 s later, plus the warmup count.
	res := syntheticResult(9, 2000)
	const off = 3 * time.Second
	warm := *res
	warm.Records = slices.Clone(res.Records)
	warm.MeasuredFrom = off
	rest := *res
	rest.Start, rest.Records, rest.Duration = res.Start.Add(off), nil, res.Duration-off
	nWarm := 0
	for i := range warm.Records {
		r := &warm.Records[i]
		if r.Intended < off {
			r.Warmup = true
			nWarm++
			continue
		}
		s := *r
		s.Chunks = slices.Clone(s.Chunks)
		s.Intended, s.Sent, s.FirstByte, s.FirstToken, s.End = s.Intended-off, s.Sent-off, s.FirstByte-off, s.FirstToken-off, s.End-off
		if r.FirstToken == 0 {
			s.FirstToken = 0
		}
		for k := range s.Chunks {
			s.Chunks[k].At -= off
		}
		rest.Records = append(rest.Records, s)
	}
	if nWarm < 50 {
		t.Fatalf("only %d warmup requests", nWarm)
	}
	// Sessions that straddle the warmup's end are sessions of both; keep them out of the
	// comparison by giving every request its own.
	for _, rs := range []*loadgen.Result{&warm, &rest} {
		for i := range rs.Records {
			rs.Records[i].Session, rs.Records[i].Step = "", 0
		}
	}
	got, want := Summarize(&warm, Options{}), Summarize(&rest, Options{})
	if got.Warmup != int64(nWarm) || want.Warmup != 0 {
		t.Fatalf("warmup %d, want %d", got.Warmup, nWarm)
	}
	got.Warmup = 0
	if g, w := benchJSON(t, got), benchJSON(t, want); !bytes.Equal(g, w) {
		t.Errorf("the bench with warmup differs from the one without the warmup requests")
	}
	got.Warmup = int64(nWarm)
	if !bytes.Contains(benchJSON(t, got), []byte(`"warmup": `)) {
		t.Errorf("no warmup key in the JSON")
	}
	back, err := Decode(bytes.NewReader(benchJSON(t, got)))
	if err != nil || back.Bench == nil || back.Bench.Warmup != int64(nWarm) {
		t.Errorf("decoded warmup %v (%v), want %d", back, err, nWarm)
	}
}

func TestSessionCutWhileThinkingIsTruncated(t *testing.T) {
	t.Parallel()
	// A session whose second step the run never sent (its user was thinking at Ctrl-C or when
	// the drain timed out) is truncated, not completed, and the step is in no request figure.
	ok := loadgen.Record{Session: "a", Intended: 0, Sent: 1000, End: 5 * time.Millisecond, Status: 200}
	res := &loadgen.Result{Start: testStart, Duration: time.Second, Records: []loadgen.Record{
		ok,
		{Index: 1, Session: "a", Step: 1, Intended: time.Second, Sent: time.Second, End: time.Second, NotSent: true, ErrKind: loadgen.ErrKindCanceled},
		{Index: 2, Session: "b", Intended: time.Millisecond, Sent: time.Millisecond, End: 9 * time.Millisecond, Status: 200},
	}}
	b := Summarize(res, Options{})
	if s := b.Sessions; s == nil || s.Count != 2 || s.Completed != 1 || s.Truncated != 1 {
		t.Fatalf("sessions %+v: want 2, one completed, one truncated", b.Sessions)
	}
	if b.Completed != 2 || b.Failed != 0 || len(b.Errors) != 0 {
		t.Errorf("completed %d, failed %d, errors %v: the step not sent counts in none", b.Completed, b.Failed, b.Errors)
	}
}

func TestMergeOfSegmentsIsTheWholeRun(t *testing.T) {
	t.Parallel()
	// One run's requests split among n hosts as --segment splits them (by session id), each
	// host's share summarised on its own, then merged: the figures are those of the bench of
	// all the requests, but for what a merge cannot keep (per-bin timeline percentiles) and
	// records what it merged.
	res := syntheticResult(21, 4000)
	res.Config.ScheduleHash = "0123456789abcdef"
	whole := Summarize(res, Options{})
	for _, n := range []int{2, 3, 5} {
		parts := make([]*loadgen.Result, n)
		for i := range parts {
			p := *res
			p.Records = nil
			p.Config.Segment = &loadgen.SegmentOf{Index: i, Count: n}
			parts[i] = &p
		}
		for k, r := range res.Records {
			for _, p := range parts {
				if p.Config.Segment.Owns(k, &loadgen.Item{Session: r.Session}) {
					p.Records = append(p.Records, r)
				}
			}
		}
		benches := make([]*Bench, n)
		for i, p := range parts {
			p.Duration = 0
			for _, r := range p.Records {
				p.Duration = max(p.Duration, r.End)
			}
			benches[i] = Summarize(p, Options{})
		}
		note, err := CheckSegments(benches)
		if err != nil || note == "" {
			t.Fatalf("%d segments: %q, %v", n, note, err)
		}
		merged, err := Merge(benches...)
		if err != nil {
			t.Fatal(err)
		}
		if merged.MergedFrom != n {
			t.Errorf("merged from %d, want %d", merged.MergedFrom, n)
		}
		merged.MergedFrom = 0
		want := *whole
		want.Timeline = slices.Clone(whole.Timeline)
		for i := range want.Timeline {
			want.Timeline[i].P50E2EL, want.Timeline[i].P99E2EL, want.Timeline[i].P50TTFT, want.Timeline[i].P99TTFT = nil, nil, nil, nil
		}
		// An error kind's example is the first one each host saw.
		want.Errors = slices.Clone(whole.Errors)
		for i := range want.Errors {
			want.Errors[i].Example = merged.Errors[i].Example
		}
		if g, w := benchJSON(t, merged), benchJSON(t, &want); !bytes.Equal(g, w) {
			t.Errorf("%d segments: the merge differs from the bench of the whole run", n)
		}
	}
	// A segment missing, or given twice, is said so.
	b := func(i, n int, hash string) *Bench {
		return &Bench{Config: loadgen.RunInfo{Segment: &loadgen.SegmentOf{Index: i, Count: n}, ScheduleHash: hash}}
	}
	for _, tt := range []struct {
		name    string
		benches []*Bench
		want    string
	}{
		{"missing", []*Bench{b(0, 3, "h"), b(2, 3, "h")}, "segments 1 of 3 of schedule h are missing"},
		{"doubled", []*Bench{b(0, 2, "h"), b(0, 2, "h"), b(1, 2, "h")}, "more than once"},
		{"other schedule", []*Bench{b(0, 2, "h"), b(1, 2, "g")}, "differ"},
		{"other count", []*Bench{b(0, 2, "h"), b(1, 3, "h")}, "one file is of 2 segments"},
		{"not all segments", []*Bench{b(0, 2, "h"), {}}, "the others are not"},
	} {
		if _, err := CheckSegments(tt.benches); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
