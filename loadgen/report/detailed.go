package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// detailedRecord is one line of the per-request JSONL: the record as measured (times are
// nanosecond offsets from the run's start) plus its latencies in ms, ready for a data frame.
type detailedRecord struct {
	*loadgen.Record
	OK            bool      `json:"ok"`
	TTFTMS        *float64  `json:"ttft_ms,omitempty"`
	TTFOMS        *float64  `json:"ttfo_ms,omitempty"` // first answer token, reasoning excluded
	TPOTMS        *float64  `json:"tpot_ms,omitempty"`
	E2ELMS        float64   `json:"e2el_ms"`
	ServiceE2ELMS float64   `json:"service_e2el_ms"`
	SendLagMS     float64   `json:"send_lag_ms"`
	ITLMS         []float64 `json:"itl_ms,omitempty"`
}

// DetailedWriter writes the per-request JSONL (for --save-detailed) as a run goes: a first
// line {"schema":"ragtail.requests/v1","start":...,"config":...} describes the run, and each
// line after it is a loadgen.Record with its derived latencies (ttft_ms, ttfo_ms, tpot_ms, e2el_ms,
// service_e2el_ms, send_lag_ms, itl_ms) by the definitions of the bench JSON. Warmup requests
// are there, marked "warmup": true, and session steps the run never sent "not_sent": true.
// Lines come in the order the requests ended; "i" numbers them.
type DetailedWriter struct {
	bw      *bufio.Writer
	enc     *json.Encoder
	itl     []float64
	line    []byte       // one record's line, reused
	scratch bytes.Buffer // for strings that need escaping
	err     error
}

// NewDetailedWriter writes the first line, for a run starting at start, and returns the
// writer of the records. Close flushes it.
func NewDetailedWriter(w io.Writer, start time.Time, info loadgen.RunInfo) *DetailedWriter {
	return newDetailedWriter(w, start, info, nil)
}

// requestsHead is the first line of a ragtail.requests/v1 file.
type requestsHead struct {
	Schema    string     `json:"schema"`
	Start     string     `json:"start"`
	DurationS *seconds   `json:"duration_s,omitempty"`
	Config    configJSON `json:"config"`
}

func newDetailedWriter(w io.Writer, start time.Time, info loadgen.RunInfo, duration *time.Duration) *DetailedWriter {
	d := &DetailedWriter{bw: bufio.NewWriterSize(w, 64<<10)}
	d.enc = json.NewEncoder(d.bw)
	d.enc.SetEscapeHTML(false)
	head := requestsHead{Schema: "ragtail.requests/v1", Start: start.UTC().Format(time.RFC3339Nano), Config: configObject(info)}
	if duration != nil {
		head.DurationS = ptr(seconds(*duration))
	}
	if err := d.enc.Encode(head); err != nil {
		d.err = fmt.Errorf("write detailed: %w", err)
	}
	return d
}

// Write writes records, one line each. The first error is kept and returned by Close.
func (d *DetailedWriter) Write(records ...loadgen.Record) {
	for i := range records {
		if d.err != nil {
			return
		}
		r := &records[i]
		var rec detailedRecord
		rec, d.itl = detailedLine(r, d.itl)
		d.line = appendDetailed(d.line[:0], &rec, &d.scratch)
		if _, err := d.bw.Write(d.line); err != nil {
			d.err = fmt.Errorf("write detailed: request %d: %w", r.Index, err)
		}
	}
}

// Close flushes what is buffered and returns the first error.
func (d *DetailedWriter) Close() error {
	if d.err != nil {
		return d.err
	}
	if err := d.bw.Flush(); err != nil {
		return fmt.Errorf("write detailed: %w", err)
	}
	return nil
}

// WriteDetailedJSONL writes the per-request JSONL of a run whose records are kept (see
// DetailedWriter), in index order; its first line also has "duration_s".
func WriteDetailedJSONL(w io.Writer, res *loadgen.Result) error {
	d := newDetailedWriter(w, res.Start, res.Config, &res.Duration)
	d.Write(res.Records...)
	return d.Close()
}
