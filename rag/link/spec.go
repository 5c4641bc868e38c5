package link

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/latency"
)

// maxSpecLen bounds the text Parse accepts.
const maxSpecLen = 256

// maxDuration bounds every duration a Spec holds: the limit of every simulated latency.
const maxDuration = latency.Limit

// Spec is what a link does to the traffic it carries: toxiproxy's toxics, all applied on the
// way back from the backend (downstream), so that Latency is added once per round trip. The
// zero Spec passes traffic through untouched.
//
// Its text form, parsed by Parse and written by String, is a comma-separated list of
// name:value items in any order, each name at most once:
//
//	latency:20ms      add 20 ms to every response chunk (toxiproxy "latency")
//	jitter:5ms        vary that latency uniformly by up to ±5 ms (needs latency, at most it)
//	bandwidth:100KB/s limit the backend's replies to 100 KB/s (also MB/s; a bare number is KB/s)
//	slow_close:1s     delay closing the connection by 1 s
//	timeout:2s        stop all data and close the connection after 2 s; timeout:0 never closes
//	reset_peer:500ms  reset the connection (TCP RST) after 500 ms
//	limit_data:4096   close the connection after 4096 bytes from the backend
//
// Durations are Go durations in whole milliseconds (toxiproxy's unit), at most an hour. The
// empty string and "none" are the zero Spec.
type Spec struct {
	Latency       time.Duration // added to each chunk from the backend; 0 for none
	Jitter        time.Duration // uniform ± variation of Latency
	BandwidthKBps int64         // KB/s (1 KB = 1000 bytes); 0 for no limit
	SlowClose     time.Duration // delay before the connection closes; 0 for none
	Timeout       time.Duration // with HasTimeout: close after this long (0: hold data forever)
	HasTimeout    bool
	ResetPeer     time.Duration // with HasResetPeer: reset the connection after this long
	HasResetPeer  bool
	LimitData     int64 // close after this many bytes from the backend; 0 for no limit
}

// IsZero reports whether the spec has no toxic.
func (s Spec) IsZero() bool { return s == Spec{} }

// Parse parses a spec's text form (see Spec). Errors match rag.ErrInvalidRequest.
func Parse(text string) (Spec, error) {
	var s Spec
	if len(text) > maxSpecLen {
		return s, invalid("link spec of %d bytes: at most %d", len(text), maxSpecLen)
	}
	text = strings.TrimSpace(text)
	if text == "" || text == "none" {
		return s, nil
	}
	seen := map[string]bool{}
	for item := range strings.SplitSeq(text, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(item), ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || value == "" {
			return Spec{}, invalid("link spec item %.40q: want name:value, e.g. latency:5ms", item)
		}
		if seen[name] {
			return Spec{}, invalid("link spec: %.20q given twice", name)
		}
		seen[name] = true
		var err error
		switch name {
		case "latency":
			s.Latency, err = parseMillis(name, value)
		case "jitter":
			s.Jitter, err = parseMillis(name, value)
		case "bandwidth":
			s.BandwidthKBps, err = parseRate(value)
		case "slow_close":
			s.SlowClose, err = parseMillis(name, value)
		case "timeout":
			s.Timeout, err = parseMillis(name, value)
			s.HasTimeout = true
		case "reset_peer":
			s.ResetPeer, err = parseMillis(name, value)
			s.HasResetPeer = true
		case "limit_data":
			s.LimitData, err = parseCount(name, value)
		default:
			return Spec{}, invalid("link spec: unknown toxic %.20q: want latency, jitter, bandwidth, slow_close, timeout, reset_peer or limit_data", name)
		}
		if err != nil {
			return Spec{}, err
		}
	}
	if s.Jitter > s.Latency {
		return Spec{}, invalid("link spec: jitter %v exceeds latency %v: a delay cannot be negative", s.Jitter, s.Latency)
	}
	return s, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{rag.ErrInvalidRequest}, args...)...)
}

func parseMillis(name, value string) (time.Duration, error) {
	if value == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(value)
	switch {
	case err != nil:
		return 0, invalid("link spec %s:%.30q: want a duration such as 5ms", name, value)
	case d < 0 || d > maxDuration:
		return 0, invalid("link spec %s:%v: want between 0 and %v", name, d, maxDuration)
	case d%time.Millisecond != 0:
		return 0, invalid("link spec %s:%v: want whole milliseconds (toxiproxy's unit)", name, d)
	}
	return d, nil
}

func parseRate(value string) (int64, error) {
	num, scale := value, int64(1)
	switch {
	case strings.HasSuffix(value, "KB/s"):
		num = strings.TrimSuffix(value, "KB/s")
	case strings.HasSuffix(value, "MB/s"):
		num, scale = strings.TrimSuffix(value, "MB/s"), 1000
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > 1<<40/scale {
		return 0, invalid("link spec bandwidth:%.30q: want a rate such as 100KB/s or 10MB/s", value)
	}
	return n * scale, nil
}

func parseCount(name, value string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSuffix(value, "B"), 10, 64)
	if err != nil || n < 0 || n > 1<<50 {
		return 0, invalid("link spec %s:%.30q: want a number of bytes", name, value)
	}
	return n, nil
}

// String returns the canonical text form: the toxics in the order Spec lists them, "" for the
// zero Spec. Parse(s.String()) == s for every Spec that Parse returns.
func (s Spec) String() string {
	var items []string
	add := func(name, value string) { items = append(items, name+":"+value) }
	if s.Latency > 0 {
		add("latency", s.Latency.String())
	}
	if s.Jitter > 0 {
		add("jitter", s.Jitter.String())
	}
	if s.BandwidthKBps > 0 {
		add("bandwidth", strconv.FormatInt(s.BandwidthKBps, 10)+"KB/s")
	}
	if s.SlowClose > 0 {
		add("slow_close", s.SlowClose.String())
	}
	if s.HasTimeout {
		add("timeout", s.Timeout.String())
	}
	if s.HasResetPeer {
		add("reset_peer", s.ResetPeer.String())
	}
	if s.LimitData > 0 {
		add("limit_data", strconv.FormatInt(s.LimitData, 10))
	}
	return strings.Join(items, ",")
}

// MarshalText implements encoding.TextMarshaler with the canonical text form.
func (s Spec) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with Parse.
func (s *Spec) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
