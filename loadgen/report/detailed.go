package report

import (
	"bufio"
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
	TPOTMS        *float64  `json:"tpot_ms,omitempty"`
	E2ELMS        float64   `json:"e2el_ms"`
	ServiceE2ELMS float64   `json:"service_e2el_ms"`
	SendLagMS     float64   `json:"send_lag_ms"`
	ITLMS         []float64 `json:"itl_ms,omitempty"`
}

// WriteDetailedJSONL writes one JSON object per request (for --save-detailed): a first line
// {"schema":"ragtail.requests/v1","start":...,"config":...} describes the run, and each line
// after it is a loadgen.Record with its derived latencies (ttft_ms, tpot_ms, e2el_ms,
// service_e2el_ms, send_lag_ms, itl_ms) by the definitions of the bench JSON.
func WriteDetailedJSONL(w io.Writer, res *loadgen.Result) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	head := object{
		{"schema", "ragtail.requests/v1"},
		{"start", res.Start.UTC().Format(time.RFC3339Nano)},
		{"duration_s", roundTo(res.Duration.Seconds(), 6)},
		{"config", configObject(res.Config)},
	}
	if err := enc.Encode(head); err != nil {
		return fmt.Errorf("write detailed: %w", err)
	}
	for i := range res.Records {
		r := &res.Records[i]
		d := detailedRecord{Record: r, OK: r.OK(), E2ELMS: msv(r.E2EL()), ServiceE2ELMS: msv(r.ServiceE2EL()),
			SendLagMS: msv(r.SendLag())}
		lat := latencies(r, outputTokens(r))
		if lat.HasTTFT {
			v := msv(lat.TTFT)
			d.TTFTMS = &v
		}
		if lat.HasTPOT {
			v := msv(lat.TPOT)
			d.TPOTMS = &v
		}
		for _, g := range r.ITLs() {
			d.ITLMS = append(d.ITLMS, msv(g))
		}
		if err := enc.Encode(d); err != nil {
			return fmt.Errorf("write detailed: request %d: %w", r.Index, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write detailed: %w", err)
	}
	return nil
}
