package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func goldenOptions(tb testing.TB) Options {
	tb.Helper()
	slos, err := stats.ParseGoodput("ttft:300,e2el:2000")
	if err != nil {
		tb.Fatal(err)
	}
	return Options{Goodput: slos}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(tb testing.TB, name string, got []byte) {
	tb.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				tb.Fatalf("%s differs at line %d:\n got: %s\nwant: %s\n(run go test -update if the change is intended)", name, i+1, gl[i], wl[i])
			}
		}
		tb.Fatalf("%s differs in length: %d lines, want %d", name, len(gl), len(wl))
	}
}

func TestGolden(t *testing.T) {
	b := Summarize(syntheticResult(7, 600), goldenOptions(t))
	var txt, js bytes.Buffer
	if err := WriteText(&txt, b); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	golden(t, "bench.txt", txt.Bytes())
	golden(t, "bench.json", js.Bytes())

	sw := testSweep(t)
	txt.Reset()
	if err := WriteSweepText(&txt, sw); err != nil {
		t.Fatal(err)
	}
	golden(t, "sweep.txt", txt.Bytes())
}

// TestSummarizeDefinitions checks each metric definition (report.go) on hand-made records.
func TestSummarizeDefinitions(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	res := &loadgen.Result{Start: testStart, Duration: 2 * time.Second, Records: []loadgen.Record{
		{ // intended 0, sent 10 ms late, first token at 110, chunks 110/130/160, end 170; 4 tokens by usage
			Index: 0, Intended: 0, Sent: 10 * ms, FirstToken: 110 * ms, End: 170 * ms, Status: 200,
			Chunks:       []loadgen.Chunk{{At: 110 * ms, Tokens: 2}, {At: 130 * ms, Tokens: 1}, {At: 160 * ms, Tokens: 1}},
			OutputTokens: 4, TokensFromUsage: true, PromptTokens: 10, TraceID: "a",
			ServerTiming: map[string]float64{"embed": 2, "generate": 100},
		},
		{ // no usage: tokens counted from chunks (3); misses the ttft SLO
			Index: 1, Intended: 500 * ms, Sent: 500 * ms, FirstToken: 900 * ms, End: 1000 * ms, Status: 200,
			Chunks:       []loadgen.Chunk{{At: 900 * ms, Tokens: 1}, {At: 950 * ms, Tokens: 2}},
			PromptTokens: 20, TraceID: "b",
		},
		{Index: 2, Intended: time.Second, Sent: time.Second, End: 1100 * ms, Status: 503, Err: "overloaded", TraceID: "c"},
		{Index: 3, Intended: time.Second, Sent: time.Second, End: 2 * time.Second, ErrKind: loadgen.ErrKindTimeout, TraceID: "d"},
	}}
	slos, _ := stats.ParseGoodput("ttft:300")
	b := Summarize(res, Options{Goodput: slos, Percentiles: []float64{50}})
	check := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("completed", b.Completed, int64(2))
	check("failed", b.Failed, int64(2))
	check("input tokens", b.InputTokens, int64(30))
	check("output tokens", b.OutputTokens, int64(7))
	check("request throughput", b.RequestThroughput, 1.0)
	check("output throughput", b.OutputThroughput, 3.5)
	check("total token throughput", b.TotalTokenThroughput, 18.5)
	check("good requests", b.GoodRequests, int64(1))
	check("goodput", *b.GoodputRate, 0.5)

	// Samples per metric, each recorded in its histogram: compare with the definitions.
	want := map[string][]time.Duration{
		MetricTTFT:        {110 * ms, 400 * ms},        // first token - intended
		MetricE2EL:        {170 * ms, 500 * ms},        // end - intended
		MetricServiceE2EL: {160 * ms, 500 * ms},        // end - sent
		MetricSendLag:     {10 * ms, 0},                // sent - intended
		MetricTPOT:        {20 * ms, 100 * ms},         // (e2el - ttft)/(out - 1): 60/3, 100/1... see below
		MetricITL:         {20 * ms, 30 * ms, 50 * ms}, // chunk gaps, pooled
	}
	// Request 1 has 3 output tokens counted from chunks: (500-400)/2 = 50 ms.
	want[MetricTPOT] = []time.Duration{20 * ms, 50 * ms}
	for m, xs := range want {
		h := stats.NewHistogram()
		for _, x := range xs {
			h.Record(x)
		}
		if !h.Equal(b.Histograms[m]) {
			t.Errorf("%s: histogram differs from %v (n=%d, max %v)", m, xs, b.Histograms[m].Count(), b.Histograms[m].Max())
		}
	}
	if len(b.Errors) != 2 || b.Errors[0].Kind != loadgen.ErrKindHTTP5xx && b.Errors[1].Kind != loadgen.ErrKindHTTP5xx {
		t.Errorf("errors %+v, want http_5xx and timeout", b.Errors)
	}
	if b.Slowest[0].TraceID != "d" || b.Slowest[0].ErrKind != loadgen.ErrKindTimeout || b.Slowest[1].TraceID != "b" {
		t.Errorf("slowest %+v", b.Slowest)
	}
	if len(b.Stages) != 2 || b.Stages[0].Stage != "embed" || b.Stages[1].Stage != "generate" {
		t.Errorf("stages %+v", b.Stages)
	}
	if b.Sessions != nil {
		t.Error("sessions without session ids")
	}
	if len(b.Timeline) != 2 || b.Timeline[0].Sent != 2 || b.Timeline[1].Sent != 2 || b.Timeline[0].N != 2 || b.Timeline[1].Failed != 2 || b.Timeline[1].Completed != 1 {
		t.Errorf("timeline %+v", b.Timeline)
	}
	s, _ := b.Metric(MetricTTFT)
	if s.Percentiles[0].HasCI {
		t.Error("an interval from two samples")
	}
}

func TestSessions(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	ok := func(session string, step int, e2el time.Duration) loadgen.Record {
		return loadgen.Record{Session: session, Step: step, End: e2el, Status: 200}
	}
	fail := func(session string, step int, kind string) loadgen.Record {
		return loadgen.Record{Session: session, Step: step, End: ms, ErrKind: kind}
	}
	recs := []loadgen.Record{
		ok("done", 1, 100*ms), ok("done", 0, 100*ms), // out of order, all good
		ok("slow-first", 0, 900*ms), ok("slow-first", 1, 100*ms), // first step over the limit
		ok("failed-later", 0, 100*ms), fail("failed-later", 1, loadgen.ErrKindHTTP5xx),
		ok("cut", 0, 100*ms), fail("cut", 1, loadgen.ErrKindCanceled),
		fail("cut-first", 0, loadgen.ErrKindDrain),
	}
	b := Summarize(&loadgen.Result{Records: recs}, Options{SessionStepLimit: 500 * ms})
	s := b.Sessions
	if s == nil {
		t.Fatal("no sessions")
	}
	got := [6]int64{s.Count, s.Completed, s.Interrupted, s.Truncated, s.FirstSteps, s.FirstStepsGood}
	if want := [6]int64{5, 1, 2, 2, 4, 3}; got != want {
		t.Errorf("count, completed, interrupted, truncated, first steps, good first steps = %v, want %v", got, want)
	}
	if r := s.CompletionRate(); math.Abs(r-1.0/3) > 1e-12 {
		t.Errorf("completion rate %g", r)
	}
	// Without a limit, the slow first step is good.
	b = Summarize(&loadgen.Result{Records: recs}, Options{})
	if b.Sessions.Completed != 2 || b.Sessions.StepLimit != 0 {
		t.Errorf("no limit: %+v", b.Sessions)
	}
	// The goodput e2el SLO is the default limit.
	slos, _ := stats.ParseGoodput("e2el:500")
	b = Summarize(&loadgen.Result{Records: recs}, Options{Goodput: slos})
	if b.Sessions.StepLimit != 500*ms || b.Sessions.Completed != 1 {
		t.Errorf("goodput limit: %+v", b.Sessions)
	}
}

// designKeys are the keys ragtail.bench/v1 promises its readers.
func designKeys() []string {
	keys := []string{"schema", "completed", "failed", "duration_s", "request_throughput", "output_throughput",
		"total_token_throughput", "goodput", "stages", "tail", "sessions", "slowest", "timeline", "errors"}
	for _, m := range AllMetrics {
		if m == MetricTTFO {
			continue // only where a response reasoned (TestTTFO)
		}
		keys = append(keys, "mean_"+m+"_ms", "median_"+m+"_ms")
		for _, p := range []string{"50", "90", "95", "99", "99.9"} {
			keys = append(keys, "p"+p+"_"+m+"_ms", "p"+p+"_"+m+"_ms_ci")
		}
	}
	return keys
}

func TestJSONHasDesignKeys(t *testing.T) {
	t.Parallel()
	b := Summarize(syntheticResult(3, 800), goldenOptions(t))
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range designKeys() {
		if _, ok := m[k]; !ok {
			t.Errorf("missing key %q", k)
		}
	}
	var ci []float64
	if err := json.Unmarshal(m["p99_e2el_ms_ci"], &ci); err != nil || len(ci) != 2 || ci[0] > ci[1] {
		t.Errorf("p99_e2el_ms_ci = %s", m["p99_e2el_ms_ci"])
	}
	if string(m["p99.9_e2el_ms_ci"]) != "null" {
		t.Errorf("p99.9 interval from %d samples: %s", b.Completed, m["p99.9_e2el_ms_ci"])
	}
	var tail map[string]struct {
		Hill *struct{ Alpha float64 } `json:"hill"`
		Fits []struct {
			Model string  `json:"model"`
			P99   float64 `json:"p99_ms"`
		} `json:"fits"`
		Best string `json:"best"`
	}
	if err := json.Unmarshal(m["tail"], &tail); err != nil {
		t.Fatal(err)
	}
	for _, metric := range TailMetrics {
		tt := tail[metric]
		if tt.Hill == nil || len(tt.Fits) != 3 || tt.Best == "" {
			t.Errorf("tail.%s = %+v", metric, tt)
		}
	}
}

func TestClosedLoopRateIsInf(t *testing.T) {
	t.Parallel()
	res := syntheticResult(1, 50)
	res.Config.RequestRate, res.Config.Concurrency = math.Inf(1), 8
	b := Summarize(res, Options{})
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"request_rate":"inf"`)) {
		t.Errorf("closed loop rate not written as \"inf\"")
	}
	f, err := Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(f.Bench.Config.RequestRate, 1) || f.Bench.Config.Concurrency != 8 {
		t.Errorf("config read back %+v", f.Bench.Config)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
	}{
		{"bench", Summarize(syntheticResult(5, 700), goldenOptions(t))},
		{"empty bench", Summarize(&loadgen.Result{Start: testStart}, Options{})},
		{"bench with clock", withClock(Summarize(syntheticResult(6, 50), goldenOptions(t)))},
		{"bench with server metrics", withServerMetrics(Summarize(syntheticResult(6, 50), goldenOptions(t)))},
		{"sweep", testSweep(t)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first bytes.Buffer
			if err := WriteJSON(&first, tt.v); err != nil {
				t.Fatal(err)
			}
			f, err := Decode(bytes.NewReader(first.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			var again bytes.Buffer
			var v any = f.Bench
			if f.Sweep != nil {
				v = f.Sweep
			}
			if err := WriteJSON(&again, v); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first.Bytes(), again.Bytes()) {
				a, b := strings.Split(first.String(), "\n"), strings.Split(again.String(), "\n")
				for i := range min(len(a), len(b)) {
					if a[i] != b[i] {
						t.Fatalf("line %d: %s\nread back: %s", i+1, a[i], b[i])
					}
				}
				t.Fatalf("read back has %d lines, want %d", len(b), len(a))
			}
		})
	}
}

// withClock gives b a clock estimate with a negative offset (the server behind the generator).
func withClock(b *Bench) *Bench {
	b.Clock = &Clock{Offset: -1234567 * time.Nanosecond, Uncertainty: 321 * time.Microsecond, Samples: 50,
		Method: ClockMethod}
	return b
}

// withServerMetrics gives b two scraped series, one with a NaN sample.
func withServerMetrics(b *Bench) *Bench {
	b.ServerMetrics = &ServerMetrics{Interval: time.Second, Series: []ServerSeries{
		{Name: "vllm:num_requests_running", Labels: map[string]string{"model_name": "m"},
			Points: [][2]float64{{0, 1}, {1, 4}, {2, 7}, {3, 4}}},
		{Name: "DCGM_FI_DEV_FB_USED", Points: [][2]float64{{0, 100}, {1, math.NaN()}, {2, 300}}},
	}}
	return b
}

func TestServerMetrics(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, withServerMetrics(Summarize(syntheticResult(6, 50), goldenOptions(t)))); err != nil {
		t.Fatal(err)
	}
	var got struct {
		SM struct {
			IntervalS float64 `json:"interval_s"`
			Series    []struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
				Points [][2]float64      `json:"points"`
				Peak   *float64          `json:"peak"`
				Mean   *float64          `json:"mean"`
			} `json:"series"`
		} `json:"server_metrics"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	sm := got.SM
	if sm.IntervalS != 1 || len(sm.Series) != 2 {
		t.Fatalf("server_metrics = %+v", sm)
	}
	run, fb := sm.Series[0], sm.Series[1]
	if run.Labels["model_name"] != "m" || *run.Peak != 7 || *run.Mean != 4 || len(run.Points) != 4 {
		t.Errorf("running series = %+v", run)
	}
	if len(fb.Points) != 2 || *fb.Peak != 300 || *fb.Mean != 200 {
		t.Errorf("memory series (NaN left out) = %+v", fb)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, withServerMetrics(Summarize(syntheticResult(6, 50), goldenOptions(t)))); err != nil {
		t.Fatal(err)
	}
	checkHTML(t, page.Bytes(), syntheticResult(6, 1).Config.URL, true, "server-metrics")
	if !strings.Contains(page.String(), `vllm:num_requests_running{model_name=&#34;m&#34;}`) {
		t.Error("page lacks the series label")
	}
	if _, err := Decode(strings.NewReader(`{"schema":"ragtail.bench/v1","server_metrics":{"interval_s":-1,"series":[]}}`)); err == nil {
		t.Error("read a negative interval")
	}
}

func TestClockKeys(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, withClock(Summarize(syntheticResult(6, 50), goldenOptions(t)))); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Clock map[string]any `json:"clock"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"offset_ms": -1.235, "uncertainty_ms": 0.321, "samples": 50.0, "method": ClockMethod}
	if !maps.Equal(got.Clock, want) {
		t.Fatalf("clock = %v, want %v", got.Clock, want)
	}
	merged, err := Merge(withClock(Summarize(syntheticResult(6, 50), goldenOptions(t))),
		withClock(Summarize(syntheticResult(7, 50), goldenOptions(t))))
	if err != nil {
		t.Fatal(err)
	}
	if merged.Clock != nil {
		t.Fatalf("merged clock = %+v, want none: each host has its own offset", merged.Clock)
	}
}

// splitBySession divides a run's records between two generators by session, as two hosts
// replaying different sessions would.
func splitBySession(res *loadgen.Result, startB time.Duration) (*loadgen.Result, *loadgen.Result) {
	a := &loadgen.Result{Start: res.Start, Config: res.Config}
	b := &loadgen.Result{Start: res.Start.Add(startB), Config: res.Config}
	for _, r := range res.Records {
		dst := a
		if r.Index/4%2 == 1 {
			dst = b
		}
		dst.Records = append(dst.Records, r)
		dst.Duration = max(dst.Duration, r.End)
	}
	return a, b
}

func TestMergeEqualsPooled(t *testing.T) {
	t.Parallel()
	opts := goldenOptions(t)
	all := syntheticResult(11, 1500)
	whole := Summarize(all, opts)
	ra, rb := splitBySession(all, 0)
	a, b := Summarize(ra, opts), Summarize(rb, opts)

	// Through files, as from two hosts.
	var fa, fb bytes.Buffer
	if err := WriteJSON(&fa, a); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&fb, b); err != nil {
		t.Fatal(err)
	}
	da, err := Decode(&fa)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Decode(&fb)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Merge(da.Bench, db.Bench)
	if err != nil {
		t.Fatal(err)
	}
	if m.MergedFrom != 2 {
		t.Errorf("merged from %d", m.MergedFrom)
	}
	for _, name := range AllMetrics {
		if !m.Histograms[name].Equal(whole.Histograms[name]) {
			t.Errorf("%s: merged histogram differs from the pooled one", name)
		}
	}
	for st, h := range whole.StageHistograms {
		if !m.StageHistograms[st].Equal(h) {
			t.Errorf("stage %s: merged histogram differs", st)
		}
	}
	// Every derived figure is then identical: compare the JSON of the parts that do not
	// depend on how the run was split (config and timeline percentiles excepted).
	strip := func(b *Bench) *Bench {
		c := *b
		c.MergedFrom, c.Config, c.Timeline = 0, loadgen.RunInfo{}, nil
		return &c
	}
	jm, _ := json.Marshal(strip(m))
	jw, _ := json.Marshal(strip(whole))
	if !bytes.Equal(jm, jw) {
		var om, ow map[string]json.RawMessage
		_ = json.Unmarshal(jm, &om)
		_ = json.Unmarshal(jw, &ow)
		for k, v := range ow {
			if !bytes.Equal(v, om[k]) {
				t.Errorf("%s: merged %s\nwhole %s", k, clip(om[k]), clip(v))
			}
		}
	}
	var sent, done, n int64
	for i, bin := range m.Timeline {
		w := whole.Timeline[i]
		sent, done, n = sent+bin.Sent, done+bin.Completed, n+bin.N
		if bin.Sent != w.Sent || bin.Completed != w.Completed || bin.Failed != w.Failed || bin.N != w.N {
			t.Errorf("timeline bin %d: merged %+v, whole %+v", i, bin, w)
		}
		// The files hold ms rounded to the microsecond.
		if d := bin.MeanE2EL - w.MeanE2EL; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("timeline bin %d: mean %v vs %v", i, bin.MeanE2EL, w.MeanE2EL)
		}
		if d := bin.MaxE2EL - w.MaxE2EL; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("timeline bin %d: max %v vs %v", i, bin.MaxE2EL, w.MaxE2EL)
		}
		if bin.P99E2EL != nil || bin.P50E2EL != nil {
			t.Errorf("timeline bin %d: percentiles survived a merge", i)
		}
	}
	if sent != int64(len(all.Records)) || done != whole.Completed || n != whole.Completed {
		t.Errorf("timeline totals sent %d done %d n %d", sent, done, n)
	}
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

func TestMergeWindow(t *testing.T) {
	t.Parallel()
	ra, rb := splitBySession(syntheticResult(2, 400), 30*time.Second)
	a, b := Summarize(ra, Options{}), Summarize(rb, Options{})
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	wantDur := 30*time.Second + rb.Duration
	if m.Duration != wantDur || !m.Start.Equal(testStart) {
		t.Errorf("window %v from %v, want %v from %v", m.Duration, m.Start, wantDur, testStart)
	}
	if want := float64(a.Completed+b.Completed) / wantDur.Seconds(); math.Abs(m.RequestThroughput-want) > 1e-9 {
		t.Errorf("throughput %g, want %g", m.RequestThroughput, want)
	}
	if m.Config.RequestRate != 80 || m.Config.NumPrompts != 800 {
		t.Errorf("config %+v", m.Config)
	}
	// B's first bin lands 30 s in.
	if got := m.Timeline[30].Sent; got != b.Timeline[0].Sent {
		t.Errorf("bin 30 sent %d, want %d", got, b.Timeline[0].Sent)
	}
}

func TestMergeErrors(t *testing.T) {
	t.Parallel()
	a := Summarize(syntheticResult(1, 100), Options{})
	slos, _ := stats.ParseGoodput("ttft:100")
	withSLO := Summarize(syntheticResult(1, 100), Options{Goodput: slos})
	noHist := Summarize(syntheticResult(1, 100), Options{})
	delete(noHist.Histograms, MetricITL)
	tests := []struct {
		name    string
		benches []*Bench
		is      error
	}{
		{"nothing", nil, nil},
		{"goodput differs", []*Bench{a, withSLO}, nil},
		{"no histograms", []*Bench{a, noHist}, ErrNoHistograms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Merge(tt.benches...)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
		})
	}
}

// sweepBenches are the points of testSweep, summarised once: tests only read them.
var sweepBenches = sync.OnceValue(func() []*Bench {
	var benches []*Bench
	for _, rate := range []float64{10, 20, 30, 40, 50, 60, 70, 80} {
		benches = append(benches, Summarize(hockeyResult(1, rate, 400, 50, 150), Options{}))
	}
	return benches
})

func testSweep(tb testing.TB) *Sweep {
	tb.Helper()
	benches := slices.Clone(sweepBenches())
	slo, err := ParsePercentileSLO("e2el:p95:2000")
	if err != nil {
		tb.Fatal(err)
	}
	slices.Reverse(benches) // SummarizeSweep orders them
	return SummarizeSweep(benches, SweepOptions{SLO: &slo})
}

func TestSweep(t *testing.T) {
	t.Parallel()
	s := testSweep(t)
	if s.Axis != AxisRate || len(s.Points) != 8 || s.Points[0].Rate != 10 {
		t.Fatalf("axis %s, %d points from %g", s.Axis, len(s.Points), s.Points[0].Rate)
	}
	// 200 ms ± 10% up to 50 req/s, then +150 ms per req/s: the step 50 -> 60 climbs 1500 ms,
	// 150 ms per req/s > 120.
	if !s.Knee.Found || s.Knee.Rate != 60 {
		t.Errorf("knee %+v, want 60 req/s", s.Knee)
	}
	if !s.KneeRobust.Found || s.KneeRobust.Rate != 50 {
		t.Errorf("robust knee %+v, want 50 req/s", s.KneeRobust)
	}
	// P95 stays under 2 s up to 60 req/s (at most 1700·1.1 = 1870 ms) and not at 70 (3200 ms).
	// The answer is the best achieved rate of those six points.
	best := 0.0
	for _, p := range s.Points[:6] {
		best = math.Max(best, p.AchievedRPS)
	}
	if s.MaxRPSUnderSLO == nil || *s.MaxRPSUnderSLO != best {
		t.Errorf("max rps %v, want %g", s.MaxRPSUnderSLO, best)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "points", "knee", "max_rps_under_slo"} {
		if _, ok := m[k]; !ok {
			t.Errorf("sweep JSON lacks %q", k)
		}
	}
	var knee struct {
		Rate   float64 `json:"rate"`
		P99    float64 `json:"p99_e2el_ms"`
		Method string  `json:"method"`
	}
	if err := json.Unmarshal(m["knee"], &knee); err != nil || knee.Rate != 60 || knee.P99 < 1500 || knee.Method == "" {
		t.Errorf("knee JSON %s", m["knee"])
	}
	var points []map[string]json.RawMessage
	if err := json.Unmarshal(m["points"], &points); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rate", "achieved_rps", "p99_e2el_ms", "p50_ttft_ms"} {
		if _, ok := points[0][k]; !ok {
			t.Errorf("sweep point lacks %q", k)
		}
	}

	// A bisection result, when given, is the answer.
	v := 63.5
	slo := *s.SLO
	var benches []*Bench
	for _, p := range s.Points {
		benches = append(benches, p.Bench)
	}
	bs := SummarizeSweep(benches, SweepOptions{SLO: &slo, MaxRPS: &v, Probes: []stats.Probe{{Rate: 60, Meets: true}, {Rate: 70}}})
	buf.Reset()
	if err := WriteJSON(&buf, bs); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if f.Sweep.MaxRPSUnderSLO == nil || *f.Sweep.MaxRPSUnderSLO != 63.5 || len(f.Sweep.Probes) != 2 {
		t.Errorf("bisection result read back as %v, %d probes", f.Sweep.MaxRPSUnderSLO, len(f.Sweep.Probes))
	}
}

// TestSweepPartialPoint: a point Ctrl-C cut short is shown, marked, and left out of the knees,
// the max load read off the ladder and its interval, in the sweep and in the sweep read back.
// The ladder is testSweep's first six points with the sixth (60 req/s, where the P99 climbs
// 150 ms per req/s) interrupted: without it the curve is flat, so no knee, and the max under
// the SLO is the best achieved rate of the first five.
func TestSweepPartialPoint(t *testing.T) {
	t.Parallel()
	benches := slices.Clone(sweepBenches()[:6])
	cut := *benches[5]
	cut.Config.Interrupted = true
	benches[5] = &cut
	slo, err := ParsePercentileSLO("e2el:p95:2000")
	if err != nil {
		t.Fatal(err)
	}
	best := 0.0
	for _, b := range benches[:5] {
		best = math.Max(best, b.RequestThroughput)
	}
	check := func(what string, s *Sweep) {
		t.Helper()
		if len(s.Points) != 6 || !s.Points[5].Partial() || s.Points[4].Partial() {
			t.Fatalf("%s: %d points, want 6 with the last partial", what, len(s.Points))
		}
		// (Kneedle may still pick a point of the flat five's noise; never the partial one.)
		if s.Knee.Found || s.KneeRobust.Found && s.KneeRobust.Index == 5 {
			t.Errorf("%s: knees %+v %+v, want none from the partial point", what, s.Knee, s.KneeRobust)
		}
		// JSON keeps rates to 4 decimals.
		if s.MaxRPSUnderSLO == nil || math.Abs(*s.MaxRPSUnderSLO-best) > 1e-4 {
			t.Errorf("%s: max rps %v, want %g (the whole points')", what, s.MaxRPSUnderSLO, best)
		}
		if s.MaxInterval == nil || s.MaxInterval.HasHi || s.MaxInterval.HasLo && s.MaxInterval.Lo > best+1e-4 {
			t.Errorf("%s: interval %+v, want one from the whole points", what, s.MaxInterval)
		}
	}
	s := SummarizeSweep(benches, SweepOptions{SLO: &slo})
	check("summarised", s)
	var text bytes.Buffer
	if err := WriteSweepText(&text, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "     60* ") || !strings.Contains(text.String(), "* interrupted (Ctrl-C) after") {
		t.Errorf("text report does not mark the partial point:\n%s", text.String())
	}
	var html bytes.Buffer
	if err := WriteHTML(&html, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), ">60*<") || !strings.Contains(html.String(), "left out of the knees") {
		t.Error("HTML report does not mark the partial point")
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	check("read back", f.Sweep)
}

func TestSweepConcurrencyAxis(t *testing.T) {
	t.Parallel()
	var benches []*Bench
	for _, c := range []int{1, 2, 4, 8} {
		res := hockeyResult(2, float64(10*c), 300, 1e9, 0)
		res.Config.RequestRate, res.Config.Concurrency = math.Inf(1), c
		benches = append(benches, Summarize(res, Options{}))
	}
	s := SummarizeSweep(benches, SweepOptions{})
	if s.Axis != AxisConcurrency || s.Points[3].Concurrency != 8 {
		t.Errorf("axis %s", s.Axis)
	}
	if s.Knee.Found || s.KneeRobust.Found {
		t.Errorf("knee on a flat curve: %+v %+v", s.Knee, s.KneeRobust)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"concurrency": 8`)) {
		t.Error("points lack their concurrency")
	}
	f, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if f.Sweep.Axis != AxisConcurrency || len(f.Sweep.Points) != 4 {
		t.Errorf("read back %s with %d points", f.Sweep.Axis, len(f.Sweep.Points))
	}
}

func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, v any) string {
		var buf bytes.Buffer
		if err := WriteJSON(&buf, v); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bench := write("b.json", Summarize(syntheticResult(1, 200), Options{}))
	sweep := write("s.json", testSweep(t))
	other := write("o.json", map[string]any{"schema": "vllm.bench"})
	f, err := Read(bench)
	if err != nil || f.Bench == nil || f.Sweep != nil || f.Path != bench {
		t.Errorf("bench: %+v %v", f, err)
	}
	f, err = Read(sweep)
	if err != nil || f.Sweep == nil || f.Bench != nil {
		t.Errorf("sweep: %+v %v", f, err)
	}
	if _, err := Read(other); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("other schema: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	bad := []struct{ name, data string }{
		{"not json", "hello"},
		{"no schema", `{"completed": 1}`},
		{"negative count", `{"schema":"ragtail.bench/v1","completed":-1}`},
		{"fractional count", `{"schema":"ragtail.bench/v1","completed":1.5}`},
		{"bad interval", `{"schema":"ragtail.bench/v1","p99_e2el_ms":3,"p99_e2el_ms_ci":[5,1]}`},
		{"bad histogram", `{"schema":"ragtail.bench/v1","histograms":{"metrics":{"e2el":"xx"}}}`},
		{"bad rate", `{"schema":"ragtail.bench/v1","config":{"request_rate":"fast"}}`},
		{"bad sweep axis", `{"schema":"ragtail.sweep/v1","axis":"time"}`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode(strings.NewReader(tt.data)); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// TestDecodeErrorsNameTheKey reads files with one bad value each: the error names its key and
// says what it wants; keys that are not ragtail's are ignored.
func TestDecodeErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Summarize(syntheticResult(1, 50), goldenOptions(t))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, edit, want string
	}{
		{"negative count", `"completed":-1`, "completed: want a whole number from 0 to 1e+15, got number -1"},
		{"fractional count", `"failed":1.5`, "failed: want a whole number"},
		{"rate", `"config":{"request_rate":"fast"}`, `config.request_rate: want a number from 0 to 1e+15 or "inf", got string`},
		{"start", `"start":"noon"`, "start: want an RFC 3339 time"},
		{"latency", `"mean_e2el_ms":-3`, "mean_e2el_ms: want milliseconds"},
		{"interval", `"p99_e2el_ms_ci":[5,1]`, "p99_e2el_ms_ci: want [lo, hi]"},
		{"percentile", `"p100_e2el_ms":1`, "p100_e2el_ms: want a percentile"},
		{"stage", `"stages":{"embed":{"mean_ms":"x"}}`, "stages.embed.mean_ms: want milliseconds"},
		{"token details", `"total_cached_tokens":"x"`, "total_cached_tokens: want a whole number"},
		{"goodput", `"options":{"goodput":"fast"}`, "options.goodput: goodput"},
		{"segment", `"config":{"segment":{"index":3,"count":2}}`, "config.segment: segment"},
		{"histogram", `"histograms":{"metrics":{"e2el":"xx"}}`, "histograms.metrics.e2el: histogram"},
		{"unknown key", `"zz_extra":{"any":[1,"thing"]}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			var edit map[string]json.RawMessage
			if err := json.Unmarshal([]byte("{"+tt.edit+"}"), &edit); err != nil {
				t.Fatal(err)
			}
			maps.Copy(doc, edit)
			data, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Decode(bytes.NewReader(data))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), "ragtail.bench/v1: "+tt.want)):
				t.Fatalf("err = %v, want one with %q", err, tt.want)
			}
		})
	}
}

// FuzzDecodeRoundTrip checks that what Decode accepts survives a write and a read unchanged:
// for x = Decode(data), Decode(WriteJSON(x)) writes the same bytes as x.
func FuzzDecodeRoundTrip(f *testing.F) {
	docs, err := filepath.Glob(filepath.Join("testdata", "json", "*.json"))
	if err != nil || len(docs) == 0 {
		f.Fatalf("no golden documents to seed from: %v", err)
	}
	for _, path := range docs {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"schema":"ragtail.bench/v1","p99.9_ttft_ms":1,"p99.9_ttft_ms_ci":[0,2],"options":{"metrics":["ttft"]},"stages":{"x":{"count":1,"p50_ms":2}}}`))
	f.Add([]byte(`{"schema":"ragtail.sweep/v1","axis":"concurrency","points":[{"completed":3,"config":{"concurrency":2,"request_rate":"inf"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		first := encodeDocument(t, file)
		again, err := Decode(bytes.NewReader(first))
		if err != nil {
			t.Fatalf("read back: %v\n%s", err, first)
		}
		if second := encodeDocument(t, again); !bytes.Equal(first, second) {
			fl, sl := strings.Split(string(first), "\n"), strings.Split(string(second), "\n")
			for i := range min(len(fl), len(sl)) {
				if fl[i] != sl[i] {
					t.Fatalf("line %d written %s, then %s after a read", i+1, fl[i], sl[i])
				}
			}
			t.Fatalf("%d lines written, then %d after a read", len(fl), len(sl))
		}
	})
}

// encodeDocument writes the bench or the sweep of file.
func encodeDocument(t *testing.T, file *File) []byte {
	t.Helper()
	var v any = file.Bench
	if file.Sweep != nil {
		v = file.Sweep
	}
	var out bytes.Buffer
	if err := WriteJSON(&out, v); err != nil {
		t.Fatalf("write: %v", err)
	}
	return out.Bytes()
}

// FuzzDecode feeds Decode with arbitrary bytes: it must fail cleanly or return something that
// renders in every format and survives a write and a second read.
func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	_ = WriteJSON(&buf, Summarize(syntheticResult(1, 120), Options{}))
	f.Add(buf.Bytes())
	buf.Reset()
	_ = WriteJSON(&buf, testSweep(f))
	f.Add(buf.Bytes())
	f.Add([]byte(`{"schema":"ragtail.bench/v1","p99.9_ttft_ms":1,"p99.9_ttft_ms_ci":[0,2],"options":{"metrics":["ttft"]}}`))
	f.Add([]byte(`{"schema":"ragtail.sweep/v1","axis":"rate","points":[{"completed":3}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		var v any = file.Bench
		if file.Sweep != nil {
			v = file.Sweep
		}
		var out bytes.Buffer
		if err := WriteJSON(&out, v); err != nil {
			t.Fatalf("write back: %v", err)
		}
		if _, err := Decode(bytes.NewReader(out.Bytes())); err != nil {
			t.Fatalf("read back: %v\n%s", err, out.String())
		}
		if err := WriteHTML(&bytes.Buffer{}, file); err != nil {
			t.Fatal(err)
		}
		if file.Bench != nil {
			if err := WriteText(&bytes.Buffer{}, file.Bench); err != nil {
				t.Fatal(err)
			}
			if _, err := Merge(file.Bench, file.Bench); err != nil && !errors.Is(err, ErrNoHistograms) && !errors.Is(err, stats.ErrHistogramCount) {
				t.Fatalf("merge with itself: %v", err)
			}
		} else if err := WriteSweepText(&bytes.Buffer{}, file.Sweep); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWriteDetailedJSONL(t *testing.T) {
	t.Parallel()
	res := syntheticResult(4, 50)
	var buf bytes.Buffer
	if err := WriteDetailedJSONL(&buf, res); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(res.Records)+1 {
		t.Fatalf("%d lines for %d records", len(lines), len(res.Records))
	}
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &head); err != nil || head.Schema != "ragtail.requests/v1" {
		t.Errorf("header %s", lines[0])
	}
	for i, line := range lines[1:] {
		var d struct {
			loadgen.Record
			OK     bool      `json:"ok"`
			TTFTMS *float64  `json:"ttft_ms"`
			E2ELMS float64   `json:"e2el_ms"`
			ITLMS  []float64 `json:"itl_ms"`
		}
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("line %d: %v", i+2, err)
		}
		r := res.Records[i]
		if d.Index != r.Index || d.OK != r.OK() || d.E2ELMS != msv(r.E2EL()) || len(d.ITLMS) != len(r.ITLs()) {
			t.Errorf("line %d: %+v", i+2, d)
		}
		if ttft, ok := r.TTFT(); ok != (d.TTFTMS != nil) || ok && *d.TTFTMS != msv(ttft) {
			t.Errorf("line %d: ttft %v", i+2, d.TTFTMS)
		}
	}
}

func TestParsers(t *testing.T) {
	t.Parallel()
	if p, err := ParsePercentiles("99, 50,99.9,50"); err != nil || !slices.Equal(p, []float64{50, 99, 99.9}) {
		t.Errorf("ParsePercentiles = %v, %v", p, err)
	}
	for _, bad := range []string{"", "0", "100", "x", "50,,abc"} {
		if _, err := ParsePercentiles(bad); err == nil {
			t.Errorf("ParsePercentiles(%q) accepted", bad)
		}
	}
	if m, err := ParseMetrics("e2el,ttft"); err != nil || !slices.Equal(m, []string{"ttft", "e2el"}) {
		t.Errorf("ParseMetrics = %v, %v", m, err)
	}
	if m, err := ParseMetrics("all"); err != nil || len(m) != len(AllMetrics) {
		t.Errorf("ParseMetrics(all) = %v, %v", m, err)
	}
	if _, err := ParseMetrics("latency"); err == nil {
		t.Error("ParseMetrics accepted an unknown metric")
	}
	slo, err := ParsePercentileSLO("e2el:p95:2000")
	if err != nil || slo.Metric != "e2el" || slo.Percentile != 95 || slo.Limit != 2*time.Second || slo.String() != "e2el:p95:2000" {
		t.Errorf("ParsePercentileSLO = %+v, %v", slo, err)
	}
	for _, bad := range []string{"e2el:95", "lat:p95:1", "e2el:p100:1", "e2el:p95:-1", "e2el:p95:x"} {
		if _, err := ParsePercentileSLO(bad); err == nil {
			t.Errorf("ParsePercentileSLO(%q) accepted", bad)
		}
	}
}

// TestGoodputTTFO: a ttfo SLO judges the first answer token, after the reasoning, not the first
// token of any kind.
func TestGoodputTTFO(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	reasoned := func(i int, firstOutput time.Duration) loadgen.Record {
		return loadgen.Record{Index: i, Intended: 0, Sent: 0, FirstToken: 50 * ms, FirstOutput: firstOutput, Reasoned: true,
			End: firstOutput + 20*ms, Status: 200, OutputTokens: 3, TokensFromUsage: true,
			Chunks: []loadgen.Chunk{{At: 50 * ms, Tokens: 1}, {At: firstOutput, Tokens: 1}, {At: firstOutput + 20*ms, Tokens: 1}}}
	}
	res := &loadgen.Result{Start: testStart, Duration: time.Second, Records: []loadgen.Record{
		reasoned(0, 200*ms), // answers within 300 ms
		reasoned(1, 700*ms), // first token at 50 ms, but the answer at 700 ms
	}}
	for _, tt := range []struct {
		slo  string
		want int64
	}{{"ttft:300", 2}, {"ttfo:300", 1}, {"ttfo:800", 2}} {
		slos, err := stats.ParseGoodput(tt.slo)
		if err != nil {
			t.Fatal(err)
		}
		if got := Summarize(res, Options{Goodput: slos, Percentiles: []float64{50}}).GoodRequests; got != tt.want {
			t.Errorf("%s: %d good requests, want %d", tt.slo, got, tt.want)
		}
	}
}
