package profile

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// frame is one location of a synthetic stack: the functions at it, innermost (inlined) first.
type frame []string

// synthSample is one sample of a synthetic CPU profile: its stack, leaf first, its labels, and
// its count (the CPU nanoseconds are count × 10 ms, as at pyroscope's 100 Hz).
type synthSample struct {
	stack  []frame
	labels map[string]string
	count  int64
}

// cpuProfile encodes samples as a gzipped CPU profile shaped like the Go runtime's.
func cpuProfile(tb testing.TB, samples ...synthSample) []byte {
	tb.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     int64(10 * time.Millisecond),
	}
	funcs := map[string]*profile.Function{}
	locs := map[string]*profile.Location{}
	for _, s := range samples {
		smp := &profile.Sample{Value: []int64{s.count, s.count * int64(10*time.Millisecond)}}
		for _, fr := range s.stack {
			key := strings.Join(fr, "|")
			loc, ok := locs[key]
			if !ok {
				loc = &profile.Location{ID: uint64(len(locs) + 1), Address: uint64(0x1000 * (len(locs) + 1))}
				for _, name := range fr {
					fn, ok := funcs[name]
					if !ok {
						fn = &profile.Function{ID: uint64(len(funcs) + 1), Name: name, SystemName: name}
						funcs[name] = fn
						p.Function = append(p.Function, fn)
					}
					loc.Line = append(loc.Line, profile.Line{Function: fn, Line: 1})
				}
				locs[key] = loc
				p.Location = append(p.Location, loc)
			}
			smp.Location = append(smp.Location, loc)
		}
		if len(s.labels) > 0 {
			smp.Label = map[string][]string{}
			for k, v := range s.labels {
				smp.Label[k] = []string{v}
			}
		}
		p.Sample = append(p.Sample, smp)
	}
	if err := p.CheckValid(); err != nil {
		tb.Fatalf("synthetic profile: %v", err)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		tb.Fatalf("encode synthetic profile: %v", err)
	}
	return buf.Bytes()
}

// stack builds a stack of single-function frames, leaf first.
func stack(names ...string) []frame {
	out := make([]frame, len(names))
	for i, n := range names {
		out[i] = frame{n}
	}
	return out
}

// labels builds a label map from key, value pairs.
func labels(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// logRecorder is a slog handler that keeps every record for assertions.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// count returns how many records at level or above contain substr in their message.
func (l *logRecorder) count(level slog.Level, substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.records {
		if r.Level >= level && strings.Contains(r.Message, substr) {
			n++
		}
	}
	return n
}

// dump returns the records at level or above, one a line, for failure messages.
func (l *logRecorder) dump(level slog.Level) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.records {
		if r.Level >= level {
			b.WriteString(r.Level.String() + " " + r.Message + "\n")
		}
	}
	return b.String()
}

// waitFor polls cond every 20 ms until it holds or timeout passes, and reports whether it held.
func waitFor(tb testing.TB, timeout time.Duration, cond func() bool) bool {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
}
