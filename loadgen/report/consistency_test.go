package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ragtail/ragtail/loadgen/stats"
)

// encodedHistogram is the JSON of a histogram of ragtail's geometry holding n values of 1 ms,
// written without recording them one by one.
func encodedHistogram(tb testing.TB, n int64) json.RawMessage {
	tb.Helper()
	h := hdrhistogram.New(int64(stats.HistogramLowest), int64(stats.HistogramHighest), stats.HistogramDigits)
	if err := h.RecordValues(int64(time.Millisecond), n); err != nil {
		tb.Fatal(err)
	}
	enc, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := json.Marshal(string(enc))
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// craftedBench writes a real bench's JSON, changed by edit, to a file and returns its path.
func craftedBench(tb testing.TB, edit func(m map[string]json.RawMessage, hists map[string]json.RawMessage)) string {
	tb.Helper()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Summarize(syntheticResult(1, 200), goldenOptions(tb))); err != nil {
		tb.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		tb.Fatal(err)
	}
	var hs struct {
		Metrics map[string]json.RawMessage `json:"metrics"`
		Stages  map[string]json.RawMessage `json:"stages"`
	}
	if err := json.Unmarshal(m["histograms"], &hs); err != nil {
		tb.Fatal(err)
	}
	edit(m, hs.Metrics)
	var err error
	if m["histograms"], err = json.Marshal(hs); err != nil {
		tb.Fatal(err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "crafted.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

func rawInt(n int64) json.RawMessage {
	raw, _ := json.Marshal(n)
	return raw
}

// TestReadRefusesInconsistentCounts feeds Read files whose numbers contradict each other, one
// of them a histogram bucket of 5·10^18 values that used to size the percentile intervals' work
// (24 GB, then the kernel's OOM killer): each is refused with the file and the field named,
// and reading it allocates no more than a sane file does.
func TestReadRefusesInconsistentCounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(m, hists map[string]json.RawMessage)
		field string
		is    error
	}{
		{"bucket of 5e18 values", func(_, h map[string]json.RawMessage) {
			h[MetricE2EL] = encodedHistogram(t, 5e18)
		}, "histograms.metrics.e2el", stats.ErrHistogramCount},
		{"completed below the e2el histogram", func(m, _ map[string]json.RawMessage) {
			m["completed"] = rawInt(10)
		}, "histograms.metrics.e2el", nil},
		{"completed above the e2el histogram", func(m, _ map[string]json.RawMessage) {
			m["completed"] = rawInt(1e12)
		}, "histograms.metrics.e2el", nil},
		{"more TTFTs than completed requests", func(m, h map[string]json.RawMessage) {
			m["completed"] = rawInt(1000)
			for _, k := range []string{MetricE2EL, MetricServiceE2EL, MetricSendLag} {
				h[k] = encodedHistogram(t, 1000)
			}
			h[MetricTTFT] = encodedHistogram(t, 1001)
		}, "histograms.metrics.ttft", nil},
		{"more good requests than completed", func(m, _ map[string]json.RawMessage) {
			m["goodput_requests"] = rawInt(1e6)
		}, "goodput_requests", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := craftedBench(t, tt.edit)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Read(path)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q names neither the file nor the field %s", err, tt.field)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
			// A file of this size decodes in a few MB; the bound is loose for the parallel
			// subtests sharing the counter.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
				t.Errorf("reading allocated %d MB", alloc>>20)
			}
		})
	}
}

// TestMergeRefusesCountsAboveTheBound merges two consistent files whose histograms hold
// stats.MaxCount values between them: the merge is refused before any interval is computed.
func TestMergeRefusesCountsAboveTheBound(t *testing.T) {
	t.Parallel()
	half := int64(stats.MaxCount/2 + 1)
	path := craftedBench(t, func(m, h map[string]json.RawMessage) {
		m["completed"] = rawInt(half)
		for _, k := range []string{MetricE2EL, MetricServiceE2EL, MetricSendLag} {
			h[k] = encodedHistogram(t, half)
		}
	})
	f, err := Read(path)
	if err != nil {
		t.Fatalf("a consistent file within the bound: %v", err)
	}
	f.Bench.Sources = []string{path}
	start := time.Now()
	_, err = Merge(f.Bench, f.Bench)
	if !errors.Is(err, stats.ErrHistogramCount) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "histograms.metrics.e2el") {
		t.Errorf("merge: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing took %v", d)
	}
}
