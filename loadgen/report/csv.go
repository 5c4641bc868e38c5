package report

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ragtail/ragtail/loadgen"
)

// SchemaRequests names the per-request JSONL written by DetailedWriter.
const SchemaRequests = "ragtail.requests/v1"

// csvHeader is the columns of WriteCSV, one row per request.
var csvHeader = []string{"i", "session", "step", "warmup", "not_sent", "cancelled", "ok", "status", "err_kind",
	"intended_s", "sent_s", "ttft_ms", "tpot_ms", "e2el_ms", "service_e2el_ms", "send_lag_ms",
	"prompt_tokens", "output_tokens", "chunks", "trace_id", "server_timing"}

// maxJSONLLine bounds one line of the per-request JSONL (a request with many chunks is long).
const maxJSONLLine = 64 << 20

// csvRecord is what WriteCSV reads of a line of the per-request JSONL.
type csvRecord struct {
	loadgen.Record
	OK            bool     `json:"ok"`
	TTFTMS        *float64 `json:"ttft_ms"`
	TPOTMS        *float64 `json:"tpot_ms"`
	E2ELMS        float64  `json:"e2el_ms"`
	ServiceE2ELMS float64  `json:"service_e2el_ms"`
	SendLagMS     float64  `json:"send_lag_ms"`
}

// WriteCSV converts the per-request JSONL of "bench --save-detailed" (see DetailedWriter)
// read from r into CSV on w: a header, then one row per request in the file's order with the
// columns of csvHeader. server_timing holds the server's stages as "stage=ms;stage=ms", sorted
// by stage, as one cell, so that rows stream whatever stages a run reports. A file that does
// not start with the ragtail.requests/v1 line is an error.
func WriteCSV(w io.Writer, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxJSONLLine)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read requests: %w", err)
		}
		return errors.New("read requests: empty file")
	}
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(sc.Bytes(), &head); err != nil || head.Schema != SchemaRequests {
		return fmt.Errorf("read requests: line 1 is not a %s header (want the file of bench --save-detailed)", SchemaRequests)
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	row := make([]string, len(csvHeader))
	for line := 2; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec csvRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return fmt.Errorf("read requests: line %d: %w", line, err)
		}
		csvRow(row, &rec)
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("write csv: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read requests: %w", err)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

func csvRow(row []string, r *csvRecord) {
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	opt := func(x *float64) string {
		if x == nil {
			return ""
		}
		return f(*x)
	}
	copy(row, []string{strconv.Itoa(r.Index), r.Session, strconv.Itoa(r.Step), strconv.FormatBool(r.Warmup),
		strconv.FormatBool(r.NotSent), strconv.FormatBool(r.Cancelled), strconv.FormatBool(r.OK), strconv.Itoa(r.Status), r.ErrKind,
		f(roundTo(r.Intended.Seconds(), 9)), f(roundTo(r.Sent.Seconds(), 9)), opt(r.TTFTMS), opt(r.TPOTMS),
		f(r.E2ELMS), f(r.ServiceE2ELMS), f(r.SendLagMS), strconv.Itoa(r.PromptTokens), strconv.Itoa(r.OutputTokens),
		strconv.Itoa(len(r.Chunks)), r.TraceID, serverTimingCell(r.ServerTiming)})
}

// serverTimingCell is stages as "stage=ms;stage=ms", sorted by stage name.
func serverTimingCell(st map[string]float64) string {
	if len(st) == 0 {
		return ""
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(st)) {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.FormatFloat(st[k], 'f', -1, 64))
	}
	return b.String()
}
