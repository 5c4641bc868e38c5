package dataset

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceFormat names a request-trace file format.
type TraceFormat string

// The trace formats ReadTrace understands.
const (
	// Mooncake is the Mooncake trace's JSONL: {"timestamp": ms, "input_length": N,
	// "output_length": N, "hash_ids": [...]}, one hash id per 512-token block of the prompt.
	Mooncake TraceFormat = "mooncake"
	// Azure is the Azure LLM inference trace's CSV: TIMESTAMP,ContextTokens,GeneratedTokens
	// with absolute timestamps ("2023-11-16 18:15:46.6805900").
	Azure TraceFormat = "azure"
	// BurstGPT is BurstGPT's CSV: Timestamp (seconds from the trace's start),Model,Request
	// tokens,Response tokens,Total tokens,Log Type.
	BurstGPT TraceFormat = "burstgpt"
)

// MooncakeBlockTokens is the tokens of a Mooncake hash block.
const MooncakeBlockTokens = 512

// Bounds on a trace, so that a hostile file cannot take the memory or make absurd prompts.
const (
	maxTraceRequests = 10_000_000
	MaxTraceTokens   = 1 << 20 // per request, input or output
	maxTraceHashIDs  = MaxTraceTokens / MooncakeBlockTokens
)

// TraceRequest is one request of a trace.
type TraceRequest struct {
	At           time.Duration // offset from the trace's first request
	InputTokens  int
	OutputTokens int
	HashIDs      []int64 // Mooncake: the prompt's block ids, one per 512 tokens; nil otherwise
}

// ParseTraceFormat parses a format name (case-insensitive).
func ParseTraceFormat(s string) (TraceFormat, error) {
	switch f := TraceFormat(strings.ToLower(strings.TrimSpace(s))); f {
	case Mooncake, Azure, BurstGPT:
		return f, nil
	}
	return "", fmt.Errorf("trace format %q: want mooncake, azure or burstgpt", s)
}

// ReadTrace reads a trace of the given format. Requests come out ordered by time, offset from
// the earliest one. Rows without input tokens are skipped (BurstGPT logs failed requests with 0
// response tokens: those are kept and ask for one token); a trace with no request is an error,
// and so is a malformed row (with its line number).
func ReadTrace(r io.Reader, f TraceFormat) ([]TraceRequest, error) {
	var out []TraceRequest
	var err error
	switch f {
	case Mooncake:
		out, err = readMooncake(r)
	case Azure:
		out, err = readTraceCSV(r, azureColumns)
	case BurstGPT:
		out, err = readTraceCSV(r, burstColumns)
	default:
		return nil, fmt.Errorf("trace format %q: want mooncake, azure or burstgpt", f)
	}
	if err != nil {
		return nil, fmt.Errorf("%s trace: %w", f, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s trace: no requests", f)
	}
	slices.SortStableFunc(out, func(a, b TraceRequest) int { return cmp.Compare(a.At, b.At) })
	first := out[0].At
	for i := range out {
		out[i].At -= first
	}
	return out, nil
}

func readMooncake(r io.Reader) ([]TraceRequest, error) {
	var out []TraceRequest
	err := readLines(r, func(n int, raw json.RawMessage) error {
		var l struct {
			Timestamp    *float64 `json:"timestamp"`
			InputLength  *int     `json:"input_length"`
			OutputLength *int     `json:"output_length"`
			HashIDs      []int64  `json:"hash_ids"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			return err
		}
		if l.Timestamp == nil || l.InputLength == nil || l.OutputLength == nil {
			return errors.New(`want "timestamp", "input_length" and "output_length"`)
		}
		at, err := traceTime(*l.Timestamp * float64(time.Millisecond))
		if err != nil {
			return fmt.Errorf(`"timestamp" %v ms: %w`, *l.Timestamp, err)
		}
		in, out2 := *l.InputLength, *l.OutputLength
		if err := checkTokens(in, out2); err != nil {
			return err
		}
		if len(l.HashIDs) > maxTraceHashIDs {
			return fmt.Errorf(`%d "hash_ids": more than %d`, len(l.HashIDs), maxTraceHashIDs)
		}
		if len(l.HashIDs) > 0 && in > len(l.HashIDs)*MooncakeBlockTokens {
			return fmt.Errorf(`"input_length" %d exceeds %d "hash_ids" of %d tokens`, in, len(l.HashIDs), MooncakeBlockTokens)
		}
		if in == 0 {
			return nil
		}
		if len(out) == maxTraceRequests {
			return fmt.Errorf("more than %d requests", maxTraceRequests)
		}
		out = append(out, TraceRequest{At: at, InputTokens: in, OutputTokens: max(out2, 1), HashIDs: l.HashIDs})
		return nil
	})
	return out, err
}

// traceColumns says where a CSV trace keeps its fields and how its time reads.
type traceColumns struct {
	at, in, out string
	parseAt     func(string) (int64, error) // nanoseconds, on any origin
}

var (
	azureColumns = traceColumns{at: "timestamp", in: "contexttokens", out: "generatedtokens", parseAt: azureTime}
	burstColumns = traceColumns{at: "timestamp", in: "request tokens", out: "response tokens", parseAt: secondsTime}
)

// azureLayouts are the timestamp forms of the Azure traces (2023: no zone, 7 fraction digits;
// 2024: with a zone offset). Go reads any fraction after the seconds.
var azureLayouts = []string{"2006-01-02 15:04:05", "2006-01-02 15:04:05Z07:00", time.RFC3339Nano}

func azureTime(s string) (int64, error) {
	for _, layout := range azureLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			if t.Year() < 1970 || t.Year() > 2200 {
				return 0, errors.New("year out of range")
			}
			return t.UnixNano(), nil
		}
	}
	return 0, errors.New(`want "2006-01-02 15:04:05.999" (optionally with a zone)`)
}

func secondsTime(s string) (int64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, errors.New("want seconds")
	}
	ns := v * float64(time.Second)
	if math.IsNaN(ns) || math.Abs(ns) > float64(MaxTraceSpan) {
		return 0, errors.New("out of range (a year from the first request at most)")
	}
	return int64(ns), nil
}

// maxTraceRecord bounds one record (a line, or several when a quoted field spans them) of a CSV
// trace: its lines are some 60 bytes. encoding/csv has no bound of its own, so a file without
// a newline (a 2 GB sparse file) was read whole into one field.
const maxTraceRecord = 1 << 20

// errTraceRecordTooLong is returned when a CSV trace's record passes maxTraceRecord.
var errTraceRecordTooLong = fmt.Errorf("a record longer than %d bytes", maxTraceRecord)

// recordLimit is the reader under a CSV trace's csv.Reader: it fails once more than
// maxTraceRecord bytes (plus what a read buffers ahead) were read since the start of the
// record being read, which the caller sets after each record.
type recordLimit struct {
	r           io.Reader
	read        int64 // bytes handed to the csv.Reader's buffer
	recordStart int64 // offset of the record being read
}

func (l *recordLimit) Read(p []byte) (int, error) {
	if l.read-l.recordStart > maxTraceRecord+traceReadBuffer {
		return 0, errTraceRecordTooLong
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
}

// traceReadBuffer is the read buffer of a CSV trace.
const traceReadBuffer = 64 << 10

func readTraceCSV(r io.Reader, cols traceColumns) ([]TraceRequest, error) {
	lim := &recordLimit{r: r}
	cr := csv.NewReader(bufio.NewReaderSize(lim, traceReadBuffer))
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	lim.recordStart = cr.InputOffset()
	lastLine := 1
	idx := map[string]int{}
	for i, h := range header {
		idx[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\uFEFF")))] = i
	}
	at, okAt := idx[cols.at]
	in, okIn := idx[cols.in]
	outCol, okOut := idx[cols.out]
	if !okAt || !okIn || !okOut {
		return nil, fmt.Errorf("header %q: want the columns %q, %q and %q", truncate(strings.Join(header, ","), 200), cols.at, cols.in, cols.out)
	}
	need := max(at, in, outCol)
	var out []TraceRequest
	var origin int64
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errTraceRecordTooLong) {
			return nil, fmt.Errorf("line %d: %w", lastLine+1, err)
		}
		if err != nil {
			return nil, err // a csv.ParseError names its line
		}
		lim.recordStart = cr.InputOffset()
		line, _ := cr.FieldPos(0)
		lastLine = line
		if len(rec) <= need {
			return nil, fmt.Errorf("line %d: %d fields, want at least %d", line, len(rec), need+1)
		}
		ns, err := cols.parseAt(strings.TrimSpace(rec[at]))
		if err != nil {
			return nil, fmt.Errorf("line %d: timestamp %q: %w", line, truncate(rec[at], 64), err)
		}
		nIn, err1 := strconv.Atoi(strings.TrimSpace(rec[in]))
		nOut, err2 := strconv.Atoi(strings.TrimSpace(rec[outCol]))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("line %d: token counts %q, %q: want integers", line, truncate(rec[in], 32), truncate(rec[outCol], 32))
		}
		if err := checkTokens(nIn, nOut); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if len(out) == 0 {
			origin = ns // absolute timestamps: keep offsets small before they become durations
		}
		d := time.Duration(ns - origin) // both within 1970..2200, or within a year of 0
		if d < -MaxTraceSpan || d > MaxTraceSpan {
			return nil, fmt.Errorf("line %d: timestamp %q: more than a year from the first request", line, truncate(rec[at], 64))
		}
		if nIn == 0 {
			continue
		}
		if len(out) == maxTraceRequests {
			return nil, fmt.Errorf("more than %d requests", maxTraceRequests)
		}
		out = append(out, TraceRequest{At: d, InputTokens: nIn, OutputTokens: max(nOut, 1)})
	}
	return out, nil
}

// MaxTraceSpan bounds the offsets of a trace's requests from its first (a year either way), and
// the length of a replay.
const MaxTraceSpan = 365 * 24 * time.Hour

func traceTime(ns float64) (time.Duration, error) {
	if math.IsNaN(ns) || math.Abs(ns) > float64(MaxTraceSpan) {
		return 0, errors.New("out of range (a year from the first request at most)")
	}
	return time.Duration(ns), nil
}

func checkTokens(in, out int) error {
	if in < 0 || out < 0 || in > MaxTraceTokens || out > MaxTraceTokens {
		return fmt.Errorf("token counts %d and %d must lie within 0..%d", in, out, MaxTraceTokens)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
