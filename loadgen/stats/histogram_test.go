package stats

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// lognormalSamples draws n values of exp(N(ln median, sigma²)).
func lognormalSamples(tb testing.TB, seed uint64, n int, median time.Duration, sigma float64) []time.Duration {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(float64(median) * math.Exp(sigma*r.NormFloat64()))
	}
	return out
}

// hdrSlack is how far above the exact value HDR may report at 3 significant digits: a bucket
// spans at most 1/1024 of its lower bound (2048 sub-buckets per power of two, half of them
// fresh), and the first buckets are 512 ns wide (the unit below the 1 µs lowest value).
func hdrSlack(d time.Duration) time.Duration { return d/1024 + 512 }

func TestHistogramQuantilesMatchSorted(t *testing.T) {
	t.Parallel()
	samples := lognormalSamples(t, 1, 20000, 80*time.Millisecond, 1)
	h := NewHistogram()
	for _, s := range samples {
		h.Record(s)
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	n := int64(len(sorted))
	for _, q := range []float64{0, 0.001, 0.5, 0.9, 0.95, 0.99, 0.999, 1} {
		exact := sorted[NearestRank(n, q)-1]
		got := h.Quantile(q)
		if got < exact || got > exact+hdrSlack(exact) {
			t.Errorf("q=%g: hdr %v, exact %v (allowed [%v, %v])", q, got, exact, exact, exact+hdrSlack(exact))
		}
	}
	if h.Count() != n {
		t.Errorf("count %d, want %d", h.Count(), n)
	}
	var sum float64
	for _, s := range samples {
		sum += float64(s)
	}
	mean := time.Duration(sum / float64(n))
	if d := h.Mean() - mean; d < -hdrSlack(mean) || d > hdrSlack(mean) {
		t.Errorf("mean %v, exact %v", h.Mean(), mean)
	}
	if h.Min() > sorted[0] || h.Min() < sorted[0]-hdrSlack(sorted[0]) {
		t.Errorf("min %v, exact %v", h.Min(), sorted[0])
	}
	if h.Max() < sorted[n-1] || h.Max() > sorted[n-1]+hdrSlack(sorted[n-1]) {
		t.Errorf("max %v, exact %v", h.Max(), sorted[n-1])
	}
	var total int64
	for _, b := range h.Buckets() {
		if b.Count <= 0 || b.To < b.From {
			t.Fatalf("bad bucket %+v", b)
		}
		total += b.Count
	}
	if total != n {
		t.Errorf("buckets hold %d values, want %d", total, n)
	}
}

// TestBucketLayout checks the index-to-value layout bucketRange assumes against
// hdrhistogram's own Distribution, over every counter up to the highest trackable value.
func TestBucketLayout(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	h.Record(HistogramHighest) // Distribution walks up to the highest recorded value
	bars := h.hdr().Distribution()
	if last := bars[len(bars)-1]; last.From > int64(HistogramHighest) || last.To < int64(HistogramHighest) {
		t.Fatalf("the last bar [%d, %d] does not hold the highest value", last.From, last.To)
	}
	for i, bar := range bars {
		from, to := bucketRange(i)
		if int64(from) != bar.From || int64(to) != bar.To {
			t.Fatalf("index %d: [%d, %d], hdrhistogram says [%d, %d]", i, from, to, bar.From, bar.To)
		}
	}
}

func TestHistogramMergeEqualsPooled(t *testing.T) {
	t.Parallel()
	a := lognormalSamples(t, 2, 5000, 10*time.Millisecond, 1.5)
	b := lognormalSamples(t, 3, 7000, 300*time.Millisecond, 0.5)
	ha, hb, all := NewHistogram(), NewHistogram(), NewHistogram()
	for _, s := range a {
		ha.Record(s)
		all.Record(s)
	}
	for _, s := range b {
		hb.Record(s)
		all.Record(s)
	}
	_ = ha.Quantile(0.5) // fill the cache, which Merge must drop
	ha.Merge(hb)
	if !ha.Equal(all) {
		t.Fatal("merged histogram differs from the histogram of all samples")
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		if ha.Quantile(q) != all.Quantile(q) {
			t.Errorf("q=%g: merged %v, pooled %v", q, ha.Quantile(q), all.Quantile(q))
		}
	}
}

// TestHistogramConcurrentReads runs rank look-ups from several goroutines on a histogram whose
// bucket cache is not filled yet (the race detector checks the cache fill), and merges a
// histogram into itself.
func TestHistogramConcurrentReads(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	for _, s := range lognormalSamples(t, 6, 1000, time.Millisecond, 1) {
		h.Record(s)
	}
	want := h.Clone().Quantile(0.99)
	var wg sync.WaitGroup
	got := make([]time.Duration, 4)
	for i := range got {
		wg.Go(func() { got[i] = h.Quantile(0.99) })
	}
	wg.Wait()
	for i, g := range got {
		if g != want {
			t.Errorf("reader %d: %v, want %v", i, g, want)
		}
	}
	var zero Histogram
	wg.Go(func() { _ = zero.Quantile(0.5) })
	wg.Go(func() { _ = zero.Count() })
	wg.Wait()

	h.Merge(h)
	if h.Count() != 2000 || h.Quantile(0.99) != want {
		t.Errorf("self-merge: count %d, p99 %v", h.Count(), h.Quantile(0.99))
	}
}

func TestHistogramEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		record []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"negative is zero", []time.Duration{-time.Second}, 0.5, 0},
		{"above one hour is one hour", []time.Duration{5 * time.Hour}, 1, HistogramHighest},
		{"sub-microsecond", []time.Duration{300}, 1, 511},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram // the zero value works
			for _, d := range tt.record {
				h.Record(d)
			}
			got := h.Quantile(tt.q)
			if got < tt.want || got > tt.want+hdrSlack(tt.want) {
				t.Errorf("quantile %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHistogramJSON(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	for _, s := range lognormalSamples(t, 4, 3000, 50*time.Millisecond, 2) {
		h.Record(s)
	}
	data, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var back Histogram
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(h) {
		t.Fatal("round trip changed the histogram")
	}

	other := hdrhistogram.New(1, 1000, 2)
	_ = other.RecordValue(5)
	enc, err := other.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := json.Marshal(string(enc))
	// Counts no run produces: a bucket of 5·10^18 values, and two that add up to just above MaxCount.
	counted := func(counts ...int64) string {
		snap := newHDR().Export()
		copy(snap.Counts[5000:], counts) // Import, unlike RecordValues, lets a sum overflow
		enc, err := hdrhistogram.Import(snap).Encode(hdrhistogram.V2CompressedEncodingCookieBase)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(string(enc))
		return string(raw)
	}
	bad := []struct {
		name string
		data string
		is   error
	}{
		{"other geometry", string(foreign), ErrHistogramGeometry},
		{"bucket of 5e18 values", counted(5e18), ErrHistogramCount},
		{"just above MaxCount", counted(MaxCount/2, MaxCount/2+1), ErrHistogramCount},
		{"not a string", `123`, nil},
		{"not base64", `"***"`, nil},
		{"too short", `"AAAA"`, nil},
		{"truncated", string(data[:len(data)/2]) + `"`, nil},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			err := json.Unmarshal([]byte(tt.data), &h)
			if err == nil {
				t.Fatal("accepted")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
		})
	}
}

func FuzzHistogramUnmarshal(f *testing.F) {
	h := NewHistogram()
	h.Record(time.Millisecond)
	h.Record(time.Second)
	good, _ := json.Marshal(h)
	f.Add(good)
	f.Add([]byte(`"HISTFAAAAB94nJNpmSzMwMDAwwABzFCaEUzOmNZgDxEAAEOLA2E="`))
	f.Add([]byte(`""`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Histogram
		if err := json.Unmarshal(data, &h); err != nil {
			return
		}
		// Whatever decodes must answer queries and re-encode to an equal histogram.
		_ = h.Quantile(0.99)
		_ = h.FitTail()
		again, err := json.Marshal(&h)
		if err != nil {
			t.Fatal(err)
		}
		var back Histogram
		if err := json.Unmarshal(again, &back); err != nil {
			t.Fatal(err)
		}
		if !back.Equal(&h) {
			t.Fatal("re-encoding changed the histogram")
		}
	})
}

func BenchmarkHistogramRecord(b *testing.B) {
	samples := lognormalSamples(b, 5, 4096, 100*time.Millisecond, 1)
	h := NewHistogram()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		h.Record(samples[i&4095])
	}
}
