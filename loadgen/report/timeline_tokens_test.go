package report

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// TestTimelineOutputTokens checks that output tokens are placed at their chunks' arrival (the
// rest of the usage count at the request's end) and that the bins add up to the run's total,
// also after a merge and a round trip through the file.
func TestTimelineOutputTokens(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	res := &loadgen.Result{Start: testStart, Duration: 2600 * ms, Records: []loadgen.Record{{
		Index: 0, Status: 200, Sent: 100 * ms, FirstByte: 200 * ms, FirstToken: 500 * ms, End: 2500 * ms,
		OutputTokens: 12, TokensFromUsage: true,
		Chunks: []loadgen.Chunk{{At: 500 * ms, Tokens: 5}, {At: 1500 * ms, Tokens: 5}},
	}, {
		Index: 1, Status: 503, Sent: 300 * ms, End: 400 * ms, OutputTokens: 7, // failed: no tokens
	}}}
	b := Summarize(res, Options{})
	var got []int64
	for _, bin := range b.Timeline {
		got = append(got, bin.OutputTokens)
	}
	if want := []int64{5, 5, 2}; !slices.Equal(got, want) {
		t.Errorf("output tokens per bin %v, want %v", got, want)
	}

	sum := func(b *Bench) (n int64) {
		for _, bin := range b.Timeline {
			n += bin.OutputTokens
		}
		return n
	}
	big := Summarize(syntheticResult(8, 400), Options{})
	if sum(big) != big.OutputTokens || big.OutputTokens == 0 {
		t.Errorf("timeline holds %d output tokens, the run %d", sum(big), big.OutputTokens)
	}
	other := Summarize(syntheticResult(9, 300), Options{})
	merged, err := Merge(big, other)
	if err != nil {
		t.Fatal(err)
	}
	if sum(merged) != big.OutputTokens+other.OutputTokens {
		t.Errorf("merged timeline holds %d output tokens, want %d", sum(merged), big.OutputTokens+other.OutputTokens)
	}
	back := roundTrip(t, merged)
	if sum(back) != sum(merged) {
		t.Errorf("read back %d output tokens, wrote %d", sum(back), sum(merged))
	}
}

// roundTrip writes b and reads it back.
func roundTrip(tb testing.TB, b *Bench) *Bench {
	tb.Helper()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, b); err != nil {
		tb.Fatal(err)
	}
	f, err := Decode(&buf)
	if err != nil {
		tb.Fatal(err)
	}
	return f.Bench
}
