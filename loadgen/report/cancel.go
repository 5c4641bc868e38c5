package report

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// Cancellations counts the measured requests the run chose to abandon (loadgen.Cancellations)
// and those it did abandon; the requests whose response ended before their cancel point
// completed and count as such. An abandoned request is neither completed nor failed: it is left
// out of throughput, goodput and every latency but TTFT (the user saw its first token), and is
// counted here.
type Cancellations struct {
	Requested int64
	Done      int64
	// Tokens counts the output tokens that abandoned requests received before they were cut.
	Tokens int64
	// LastAt is when the last request was abandoned, an offset from Bench.Start.
	LastAt time.Duration
}

// CancelServer is what the target's scraped metrics (Bench.ServerMetrics) say about the
// abandoned requests: whether it stopped their work.
type CancelServer struct {
	// Aborts is the rise of vllm:request_success_total{finished_reason="abort"} over the run;
	// NaN when the series was not scraped.
	Aborts float64
	// RunningAfter is vllm:num_requests_running and KVUsageAfter vllm:gpu_cache_usage_perc (or
	// vllm:kv_cache_usage_perc) at the last scrape, taken once every request had ended (bench
	// takes it one scrape interval after the last cancellation at the earliest); NaN when not
	// scraped.
	RunningAfter, KVUsageAfter float64
	// Freed reports whether the server stopped the work: it aborted at least as many requests
	// as were abandoned, and nothing ran nor held KV cache at the last scrape (a series not
	// scraped is not checked); nil when none of the series was scraped.
	Freed *bool
}

// add counts the record of one measured request.
func (c *Cancellations) add(r *loadgen.Record) {
	if r.CancelPlanned {
		c.Requested++
	}
	if r.Cancelled {
		c.Done++
		c.Tokens += int64(outputTokens(r))
		c.LastAt = max(c.LastAt, r.CancelledAt)
	}
}

// CancelServer reads from b's scraped server metrics whether the target stopped the work of the
// abandoned requests; ok is false without cancellations or scraped metrics.
func (b *Bench) CancelServer() (s CancelServer, ok bool) {
	if b.Cancellations == nil || b.ServerMetrics == nil {
		return s, false
	}
	s = CancelServer{Aborts: math.NaN(), RunningAfter: math.NaN(), KVUsageAfter: math.NaN()}
	first := math.Inf(1)
	for _, ser := range b.ServerMetrics.Series {
		if len(ser.Points) > 0 {
			first = min(first, ser.Points[0][0])
		}
	}
	seen := false
	for _, ser := range b.ServerMetrics.Series {
		if len(ser.Points) == 0 {
			continue
		}
		last := ser.Points[len(ser.Points)-1][1]
		switch {
		case ser.Name == "vllm:request_success_total" && ser.Labels["finished_reason"] == "abort":
			base := 0.0 // a series that appears after the first scrape started from 0
			if ser.Points[0][0] <= first {
				base = ser.Points[0][1]
			}
			s.Aborts = sumNaN(s.Aborts, last-base)
		case ser.Name == "vllm:num_requests_running":
			s.RunningAfter = sumNaN(s.RunningAfter, last)
		case ser.Name == "vllm:gpu_cache_usage_perc" || ser.Name == "vllm:kv_cache_usage_perc":
			s.KVUsageAfter = max(nanZero(s.KVUsageAfter), last)
		default:
			continue
		}
		seen = true
	}
	if seen {
		freed := (math.IsNaN(s.Aborts) || s.Aborts >= float64(b.Cancellations.Done)) &&
			(math.IsNaN(s.RunningAfter) || s.RunningAfter == 0) &&
			(math.IsNaN(s.KVUsageAfter) || s.KVUsageAfter == 0)
		s.Freed = &freed
	}
	return s, true
}

// sumNaN adds v to a sum that is NaN while empty (several model_name series add up).
func sumNaN(sum, v float64) float64 { return nanZero(sum) + v }

func nanZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// cancellationsJSON is the cancellations key of the bench document.
type cancellationsJSON struct {
	Spec      string `json:"spec,omitempty"`
	Requested count  `json:"requested"`
	Done      count  `json:"done"`
	Tokens    count  `json:"tokens_received"`
	LastS     number `json:"last_s"`
	// From the target's scraped metrics; null when they were not scraped.
	ServerAborts       *number `json:"server_aborts"`
	ServerRunningAfter *number `json:"server_running_after"`
	ServerKVUsageAfter *number `json:"server_kv_usage_after"`
	ServerFreed        *bool   `json:"server_freed"`
}

func finiteOrNil(v float64) *number {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return ptr(number(v))
}

func (b *Bench) cancellationsObject() *cancellationsJSON {
	c := b.Cancellations
	if c == nil {
		return nil
	}
	o := &cancellationsJSON{Spec: b.Config.Cancel, Requested: count(c.Requested), Done: count(c.Done),
		Tokens: count(c.Tokens), LastS: number(sig(c.LastAt.Seconds()))}
	if s, ok := b.CancelServer(); ok {
		o.ServerAborts, o.ServerRunningAfter, o.ServerKVUsageAfter = finiteOrNil(s.Aborts), finiteOrNil(s.RunningAfter), finiteOrNil(s.KVUsageAfter)
		o.ServerFreed = s.Freed
	}
	return o
}

// readCancellations reads the cancellations key back; the server's figures derive from the
// server metrics, read with them.
func (f *benchFile) readCancellations(b *Bench) {
	if f.Cancellations == nil {
		return
	}
	c := f.Cancellations
	b.Cancellations = &Cancellations{Requested: int64(c.Requested), Done: int64(c.Done), Tokens: int64(c.Tokens),
		LastAt: time.Duration(float64(c.LastS) * float64(time.Second))}
}

// cancelText describes the cancellations in one line of the text report.
func (b *Bench) cancelText() string {
	c := b.Cancellations
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d of %d chosen (%s; in no latency but TTFT)", c.Done, c.Requested, b.Config.Cancel)
	if s, ok := b.CancelServer(); ok {
		sb.WriteString("; server: ")
		var parts []string
		if !math.IsNaN(s.Aborts) {
			parts = append(parts, fmt.Sprintf("%g aborted", s.Aborts))
		}
		if !math.IsNaN(s.RunningAfter) {
			parts = append(parts, fmt.Sprintf("%g running after", s.RunningAfter))
		}
		if !math.IsNaN(s.KVUsageAfter) {
			parts = append(parts, fmt.Sprintf("KV usage %g after", s.KVUsageAfter))
		}
		switch {
		case s.Freed == nil:
			parts = append(parts, "no abort or running series scraped")
		case *s.Freed:
			parts = append(parts, "work freed")
		default:
			parts = append(parts, "work NOT freed")
		}
		sb.WriteString(strings.Join(parts, ", "))
	}
	return sb.String()
}
