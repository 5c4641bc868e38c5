package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSlices(t *testing.T) {
	t.Parallel()
	// The synthetic run: 600 arrivals at 40 req/s (about 15 s), TTFT stalled by 800 ms for the
	// arrivals between 6 and 7 s.
	b := Summarize(syntheticResult(9, 600), Options{Slice: 5 * time.Second})
	if len(b.Slices) != 4 {
		t.Fatalf("%d slices of 5 s over %v, want 4", len(b.Slices), b.Duration)
	}
	var sent, completed, failed int64
	for i, sl := range b.Slices {
		// The last slice covers what is left of the run: from 15 s to its end.
		want := 5 * time.Second
		if i == len(b.Slices)-1 {
			want = b.Duration - 15*time.Second
		}
		if sl.T != time.Duration(i)*5*time.Second || (sl.Width-want).Abs() > time.Millisecond {
			t.Errorf("slice %d at %v width %v, want %v", i, sl.T, sl.Width, want)
		}
		sent, completed, failed = sent+sl.Sent, completed+sl.Completed, failed+sl.Failed
	}
	if completed != b.Completed || failed != b.Failed || sent != b.Completed+b.Failed {
		t.Errorf("slices count %d sent, %d completed, %d failed; the run %d and %d", sent, completed, failed, b.Completed, b.Failed)
	}
	// About 200 arrivals per slice at 40 req/s, 5% failing: ~38 completions per second.
	if r := b.Slices[1].RequestThroughput; r < 30 || r > 45 {
		t.Errorf("slice 1 throughput %g req/s, want about 38", r)
	}
	stalled, _ := b.Slices[1].quantile(MetricTTFT, 99)
	calm, _ := b.Slices[0].quantile(MetricTTFT, 99)
	if stalled.Value < 800*time.Millisecond || calm.Value > 800*time.Millisecond {
		t.Errorf("P99 TTFT %v in the stalled slice, %v in the calm one", stalled.Value, calm.Value)
	}
	if p50, ok := b.Slices[0].quantile(MetricTTFT, 50); !ok || !p50.HasCI || p50.Lo > p50.Value || p50.Hi < p50.Value {
		t.Errorf("slice 0 P50 TTFT %+v, want an interval around it", p50)
	}

	var buf bytes.Buffer
	if err := WriteJSON(&buf, b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"slices": [`, `"t_s": 5,`, `"p99_ttft_ms_ci"`, `"request_throughput"`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("the JSON lacks %s", key)
		}
	}
	f, err := Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	back := f.Bench.Slices
	if len(back) != 4 || back[1].Sent != b.Slices[1].Sent || back[1].Stats[0].Percentiles[4].Value != b.Slices[1].Stats[0].Percentiles[4].Value.Round(time.Microsecond) {
		t.Errorf("slices read back: %+v", back)
	}
	var text bytes.Buffer
	if err := WriteText(&text, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "Slices of 5s") || strings.Count(text.String(), "\n     5.0 ") != 1 {
		t.Errorf("text report:\n%s", text.String())
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `id="slices"`) || !strings.Contains(page.String(), "TTFT by slice") {
		t.Error("the HTML has no slices section")
	}
	if plain := Summarize(syntheticResult(9, 100), Options{}); plain.Slices != nil {
		t.Error("slices without --slice")
	}
}
