// Package stats is the arithmetic behind ragtail's load-generator reports: HDR histograms of
// durations that merge exactly across generators, percentiles with distribution-free confidence
// intervals (binomial order statistics), the shape of the latency tail (Hill estimator;
// exponential, lognormal and Pareto maximum-likelihood fits compared by AIC), goodput SLOs, knee
// detection on sweep curves, and bisection for the highest rate that still meets an SLO.
//
// It is pure computation: no clock, no I/O, no goroutines. A Histogram is safe for concurrent
// reads; it must not be written (Record, Merge, UnmarshalJSON) concurrently with any other use.
package stats

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// The geometry of every Histogram: values from 1 µs to 1 h at 3 significant digits, stored in
// nanoseconds. A fixed geometry makes every histogram mergeable with every other one.
const (
	HistogramLowest  = time.Microsecond
	HistogramHighest = time.Hour
	HistogramDigits  = 3
)

// maxEncodedHistogram bounds the base64 text of one serialised histogram. The largest valid
// encoding of this geometry (24,576 counters, at most 9 bytes each before compression) is far
// below it.
const maxEncodedHistogram = 1 << 20

// MaxCount bounds the values one histogram read from a file may hold, and the sum of those
// merged from files: a hundred billion, far above any run (a day at a million tokens a second is
// below it), and low enough that the exact binomial intervals computed over such a count stay
// within a few hundred MB and a fraction of a second. A crafted count of 10^18 would otherwise
// size that work, and memory, by itself.
const MaxCount = 1e11

// Histogram records durations with HDR precision (relative error below 10^-3) in constant
// memory. Values below zero are recorded as zero and values above HistogramHighest as
// HistogramHighest. Quantiles follow the nearest-rank rule and report the highest value
// equivalent to the selected bucket, as HdrHistogram does, so they never understate a latency.
//
// The zero value is an empty histogram ready to use.
type Histogram struct {
	h *hdrhistogram.Histogram
	// cache holds the non-empty buckets and their cumulative counts for rank look-ups; nil when
	// stale (every Record and Merge drops it, which they may do without the lock since writes
	// are exclusive). mu lets concurrent readers fill it once.
	mu    sync.Mutex
	cache *bucketCache
}

type bucketCache struct {
	buckets []Bucket
	cum     []int64 // cum[i] = total count of buckets[0..i]
}

// Bucket is a range of equivalent values and how many were recorded in it.
type Bucket struct {
	From, To time.Duration // lowest and highest value the bucket stands for, inclusive
	Count    int64
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{h: newHDR()}
}

func newHDR() *hdrhistogram.Histogram {
	return hdrhistogram.New(int64(HistogramLowest), int64(HistogramHighest), HistogramDigits)
}

// hdr returns the underlying histogram for writing, allocating it for a zero Histogram.
func (h *Histogram) hdr() *hdrhistogram.Histogram {
	if h.h == nil {
		h.h = newHDR()
	}
	return h.h
}

// emptyHDR stands for the data of a zero Histogram on the read paths, which must not write.
var emptyHDR = newHDR()

// view returns the underlying histogram for reading.
func (h *Histogram) view() *hdrhistogram.Histogram {
	if h.h == nil {
		return emptyHDR
	}
	return h.h
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	} else if v > int64(HistogramHighest) {
		v = int64(HistogramHighest)
	}
	_ = h.hdr().RecordValue(v) // in range by construction
	h.cache = nil
}

// Count is the number of recorded values.
func (h *Histogram) Count() int64 { return h.view().TotalCount() }

// Mean is the mean of the recorded values (each taken at its bucket's midpoint); 0 when empty.
func (h *Histogram) Mean() time.Duration { return time.Duration(h.view().Mean()) }

// StdDev is the population standard deviation of the recorded values; 0 when empty.
func (h *Histogram) StdDev() time.Duration { return time.Duration(h.view().StdDev()) }

// Min is the lowest recorded value, to HDR precision; 0 when empty.
func (h *Histogram) Min() time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.view().Min())
}

// Max is the highest recorded value, to HDR precision; 0 when empty.
func (h *Histogram) Max() time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.view().Max())
}

// Quantile returns the q-quantile (0 <= q <= 1) by the nearest-rank rule: the value of rank
// ceil(q*n). It returns 0 when the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	return h.ValueAtRank(NearestRank(n, q))
}

// ValueAtRank returns the k-th smallest recorded value (1-based, clamped to [1, Count]) to HDR
// precision; 0 when the histogram is empty.
func (h *Histogram) ValueAtRank(k int64) time.Duration {
	c := h.buckets()
	if len(c.buckets) == 0 {
		return 0
	}
	if k < 1 {
		k = 1
	}
	i := sort.Search(len(c.cum), func(i int) bool { return c.cum[i] >= k })
	if i == len(c.cum) {
		i = len(c.cum) - 1
	}
	return c.buckets[i].To
}

// Buckets returns the non-empty buckets in increasing order of value, for plotting and for
// computations over the whole distribution.
func (h *Histogram) Buckets() []Bucket {
	return append([]Bucket(nil), h.buckets().buckets...)
}

func (h *Histogram) buckets() *bucketCache {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cache != nil {
		return h.cache
	}
	c := &bucketCache{}
	var total int64
	for i, n := range h.view().Export().Counts {
		if n == 0 {
			continue
		}
		total += n
		from, to := bucketRange(i)
		c.buckets = append(c.buckets, Bucket{From: from, To: to, Count: n})
		c.cum = append(c.cum, total)
	}
	h.cache = c
	return c
}

// The layout of the counts of ragtail's geometry, as HdrHistogram defines it (and its V2
// encoding fixes): values in ns, a unit of 2^9 ns (the largest power of two <= 1 µs), 2048
// sub-buckets per bucket (the least power of two >= 2·10^3 for 3 digits), of which every bucket
// after the first only uses its upper half.
const (
	unitMagnitude          = 9
	subBucketHalfCountMag  = 10
	subBucketHalfCountSize = 1 << subBucketHalfCountMag
)

// bucketRange returns the lowest and highest value equivalent to counts index i (what
// hdrhistogram's Distribution reports, without building it: a test checks they agree).
func bucketRange(i int) (from, to time.Duration) {
	bucket := (i >> subBucketHalfCountMag) - 1
	sub := (i & (subBucketHalfCountSize - 1)) + subBucketHalfCountSize
	if bucket < 0 {
		sub -= subBucketHalfCountSize
		bucket = 0
	}
	shift := uint(bucket + unitMagnitude)
	lo := int64(sub) << shift
	return time.Duration(lo), time.Duration(lo + int64(1)<<shift - 1)
}

// Merge adds every value recorded in o to h. Both share one geometry, so the result equals the
// histogram of all the values recorded in either.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil {
		return
	}
	if o == h {
		o = h.Clone() // hdrhistogram would iterate counts it is adding to
	}
	h.hdr().Merge(o.view()) // same geometry: nothing can be dropped
	h.cache = nil
}

// Clone returns an independent copy of h.
func (h *Histogram) Clone() *Histogram { return &Histogram{h: h.view().Clone()} }

// Equal reports whether h and o hold exactly the same counts.
func (h *Histogram) Equal(o *Histogram) bool { return h.view().Equals(o.view()) }

// MarshalJSON encodes the histogram as a JSON string holding HdrHistogram's V2 compressed
// encoding in base64: compact, exact, and readable by HdrHistogram tools in other languages.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	enc, err := h.view().Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil, fmt.Errorf("encode histogram: %w", err)
	}
	return json.Marshal(string(enc))
}

// ErrHistogramGeometry is returned when a serialised histogram has another range or precision
// than HistogramLowest, HistogramHighest and HistogramDigits, so it could not merge exactly.
var ErrHistogramGeometry = errors.New("histogram geometry is not ragtail's (1µs..1h, 3 digits)")

// ErrHistogramCount is returned for a serialised histogram whose counts are out of range:
// negative, above MaxCount in total, or not adding up to its total.
var ErrHistogramCount = errors.New("histogram counts out of range")

// UnmarshalJSON decodes what MarshalJSON wrote. The header is checked before the counts are
// allocated, so a hostile file cannot make it allocate more than one histogram's worth.
func (h *Histogram) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("histogram: want a base64 string: %w", err)
	}
	if len(s) > maxEncodedHistogram {
		return fmt.Errorf("histogram: encoding of %d bytes is larger than the %d a valid one can be", len(s), maxEncodedHistogram)
	}
	if err := checkEncodedGeometry(s); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	d, err := hdrhistogram.Decode([]byte(s))
	if err != nil {
		return fmt.Errorf("histogram: decode: %w", err)
	}
	var total int64
	for _, n := range d.Export().Counts {
		if n < 0 || n > MaxCount-total {
			return fmt.Errorf("%w: more than %d values (or a negative count)", ErrHistogramCount, int64(MaxCount))
		}
		total += n
	}
	if total != d.TotalCount() {
		return fmt.Errorf("%w: total %d is not the sum of its counts, %d", ErrHistogramCount, d.TotalCount(), total)
	}
	h.h = d
	h.cache = nil
	return nil
}

// checkEncodedGeometry reads the 40-byte header of a V2 compressed encoding and checks that it
// declares ragtail's geometry.
func checkEncodedGeometry(s string) error {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("base64: %w", err)
	}
	if len(raw) < 8 {
		return errors.New("encoding too short")
	}
	n := int64(binary.BigEndian.Uint32(raw[4:8]))
	if n < 0 || n > int64(len(raw)-8) {
		return errors.New("encoding truncated")
	}
	z, err := zlib.NewReader(bytes.NewReader(raw[8 : 8+n]))
	if err != nil {
		return fmt.Errorf("zlib: %w", err)
	}
	defer func() { _ = z.Close() }()
	var hdr [40]byte
	if _, err := io.ReadFull(z, hdr[:]); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	digits := int32(binary.BigEndian.Uint32(hdr[12:16]))
	lowest := int64(binary.BigEndian.Uint64(hdr[16:24]))
	highest := int64(binary.BigEndian.Uint64(hdr[24:32]))
	if digits != HistogramDigits || lowest != int64(HistogramLowest) || highest != int64(HistogramHighest) {
		return fmt.Errorf("%w: got %dns..%dns at %d digits", ErrHistogramGeometry, lowest, highest, digits)
	}
	return nil
}
