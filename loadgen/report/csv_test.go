package report

import (
	"bytes"
	"encoding/csv"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestWriteCSV(t *testing.T) {
	t.Parallel()
	res := syntheticResult(3, 200)
	var jsonl bytes.Buffer
	if err := WriteDetailedJSONL(&jsonl, res); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteCSV(&out, bytes.NewReader(jsonl.Bytes())); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(res.Records)+1 {
		t.Fatalf("%d rows, want a header and %d", len(rows), len(res.Records))
	}
	if strings.Join(rows[0], ",") != strings.Join(csvHeader, ",") {
		t.Fatalf("header %v", rows[0])
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for k, rec := range res.Records {
		row := rows[k+1]
		if row[col["i"]] != strconv.Itoa(rec.Index) || row[col["trace_id"]] != rec.TraceID {
			t.Fatalf("row %d: i=%s trace=%s, want %d %s", k, row[col["i"]], row[col["trace_id"]], rec.Index, rec.TraceID)
		}
		e2el, err := strconv.ParseFloat(row[col["e2el_ms"]], 64)
		if err != nil || e2el != msv(rec.E2EL()) {
			t.Fatalf("row %d: e2el_ms %q, want %v", k, row[col["e2el_ms"]], msv(rec.E2EL()))
		}
		if _, ok := rec.TTFT(); ok != (row[col["ttft_ms"]] != "") {
			t.Fatalf("row %d: ttft_ms %q for a request with first token %v", k, row[col["ttft_ms"]], ok)
		}
		if got, want := row[col["server_timing"]], serverTimingCell(rec.ServerTiming); got != want {
			t.Fatalf("row %d: server_timing %q, want %q", k, got, want)
		}
		if len(rec.ServerTiming) > 0 && !strings.HasPrefix(row[col["server_timing"]], "embed=") {
			t.Fatalf("row %d: server_timing %q not sorted by stage", k, row[col["server_timing"]])
		}
	}
}

func TestWriteCSVRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"empty", "", "empty file"},
		{"bench json", `{"schema":"ragtail.bench/v1"}`, "not a ragtail.requests/v1 header"},
		{"bad line", "{\"schema\":\"ragtail.requests/v1\"}\n{\"i\":\"x\"}\n", "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := WriteCSV(&bytes.Buffer{}, strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestTokenLengths(t *testing.T) {
	t.Parallel()
	res := syntheticResult(4, 400)
	var want TokenLengths
	for _, r := range res.Records {
		if !r.OK() {
			continue
		}
		in, out := tokenBin(r.PromptTokens), tokenBin(r.OutputTokens)
		want.Input = countInto(want.Input, in)
		want.Output = countInto(want.Output, out)
		if lo, hi := tokenBinRange(in); float64(r.PromptTokens) < lo || float64(r.PromptTokens) > hi {
			t.Fatalf("%d tokens in bin %d [%g, %g]", r.PromptTokens, in, lo, hi)
		}
	}
	b := Summarize(res, Options{})
	if !slices.Equal(b.TokenLengths.Input, want.Input) || !slices.Equal(b.TokenLengths.Output, want.Output) {
		t.Fatalf("token lengths %+v, want %+v", b.TokenLengths, want)
	}
	ra, rb := splitBySession(res, 0)
	m, err := Merge(Summarize(ra, Options{}), Summarize(rb, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.TokenLengths.Input, want.Input) || !slices.Equal(m.TokenLengths.Output, want.Output) {
		t.Fatalf("merged token lengths %+v, want %+v", m.TokenLengths, want)
	}
	for _, tt := range []struct{ n, bin int }{{0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 2}, {511, 8}, {512, 9}} {
		if got := tokenBin(tt.n); got != tt.bin {
			t.Errorf("tokenBin(%d) = %d, want %d", tt.n, got, tt.bin)
		}
	}
}

func TestComparisonHTML(t *testing.T) {
	t.Parallel()
	res := syntheticResult(9, 300)
	c, err := NewComparison([]string{"a.json", "b.json"}, []*Bench{Summarize(res, Options{}), Summarize(syntheticResult(10, 200), Options{})})
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, c); err != nil {
		t.Fatal(err)
	}
	checkHTML(t, page.Bytes(), res.Config.URL, true, "compare-summary", "compare-spectrum")
	if _, err := NewComparison([]string{"a"}, []*Bench{Summarize(res, Options{})}); err == nil {
		t.Error("compared one result")
	}
}

func TestInFlight(t *testing.T) {
	t.Parallel()
	res := syntheticResult(11, 500)
	b := Summarize(res, Options{})
	got := inFlight(b.Timeline)
	for i, bin := range b.Timeline {
		end := bin.T + bin.Width
		var want int
		for _, r := range res.Records {
			if r.Sent < end && r.End >= end {
				want++
			}
		}
		if int(got[i].Y) != want {
			t.Fatalf("bin %d (end %v): %v in flight, want %d", i, end, got[i].Y, want)
		}
	}
}

// TestComparisonTTFO: the side-by-side table gives TTFO for a run whose responses reasoned and
// says there was none for a run without reasoning.
func TestComparisonTTFO(t *testing.T) {
	t.Parallel()
	reasoned := syntheticResult(12, 400)
	for i := range reasoned.Records {
		r := &reasoned.Records[i]
		if r.FirstToken > 0 {
			r.FirstOutput, r.Reasoned = r.FirstToken+(r.End-r.FirstToken)/2, true
		}
	}
	a, b := Summarize(reasoned, Options{}), Summarize(syntheticResult(13, 400), Options{})
	if a.ReasoningRequests == 0 {
		t.Fatal("the reasoned run has no reasoning requests")
	}
	c, err := NewComparison([]string{"reasoned.json", "plain.json"}, []*Bench{a, b})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, r := range compareTable(c).Tables[0].Rows {
		rows[r[0]] = r[1:]
	}
	got := rows["TTFO p50 ms"]
	if len(got) != 2 {
		t.Fatalf("no TTFO p50 row: %v", rows)
	}
	if want := fmtMS(a.Histograms[MetricTTFO].Quantile(0.5)); got[0] != want {
		t.Errorf("reasoned run's TTFO p50 cell %q, want %q", got[0], want)
	}
	if got[1] != "- (no reasoning)" {
		t.Errorf("plain run's TTFO p50 cell %q, want it to say there was no reasoning", got[1])
	}
}
