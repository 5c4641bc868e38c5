package dataset

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

// repeat is an endless reader of one pattern, as a sparse file reads zeros.
type repeat struct {
	pattern string
	at      int
}

func (r *repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.pattern[r.at%len(r.pattern)]
		r.at++
	}
	return len(p), nil
}

// TestCSVTraceRecordsAreBounded reads CSV traces whose line (or quoted record) never ends:
// the read fails at maxTraceRecord, naming the line, having allocated tens of MB at most (a
// header of 100,000 fields costs the most); it used to read the whole file into one field (a
// 2 GB sparse file passed 4 GB of memory).
func TestCSVTraceRecordsAreBounded(t *testing.T) {
	const size = 64 << 20 // the old reader took all of it
	tests := []struct {
		name   string
		format TraceFormat
		head   string
		body   string // repeated up to size
		line   string
	}{
		{"azure, a line without end", Azure, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,5\n", "\x00", "line 3"},
		{"burstgpt, a line without end", BurstGPT, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n", "7", "line 2"},
		{"burstgpt, a quoted field over endless lines", BurstGPT, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,\"", "ab\n", "line 2"},
		{"azure, a header without end", Azure, "", "TIMESTAMP,", "header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := io.MultiReader(strings.NewReader(tt.head), io.LimitReader(&repeat{pattern: tt.body}, size))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ReadTrace(r, tt.format)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, errTraceRecordTooLong) || !strings.Contains(err.Error(), tt.line) {
				t.Errorf("err = %v, want %q naming %s", err, errTraceRecordTooLong, tt.line)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 48<<20 {
				t.Errorf("allocated %d MB reading it", alloc>>20)
			}
		})
	}
}
