package telemetry

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/ragtail/ragtail/rag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// SpanRecord is one line of the --trace-file JSONL output: one ended span, with absolute times
// in Unix nanoseconds of the service's clock.
type SpanRecord struct {
	TraceID       string         `json:"trace_id"`
	SpanID        string         `json:"span_id"`
	ParentSpanID  string         `json:"parent_span_id,omitempty"`
	Name          string         `json:"name"`
	Kind          string         `json:"kind"`
	Stage         string         `json:"stage,omitempty"`
	StartUnixNano int64          `json:"start_unix_nano"`
	EndUnixNano   int64          `json:"end_unix_nano"`
	DurationMS    float64        `json:"duration_ms"`
	Status        string         `json:"status"`
	StatusMessage string         `json:"status_message,omitempty"`
	Attributes    map[string]any `json:"attributes,omitempty"`
	Events        []EventRecord  `json:"events,omitempty"`
	Service       string         `json:"service"`
}

// EventRecord is a span event in a SpanRecord.
type EventRecord struct {
	Name         string         `json:"name"`
	TimeUnixNano int64          `json:"time_unix_nano"`
	Attributes   map[string]any `json:"attributes,omitempty"`
}

// NewSpanRecord converts an ended span to its JSONL record.
func NewSpanRecord(s sdktrace.ReadOnlySpan) SpanRecord {
	rec := SpanRecord{
		TraceID:       s.SpanContext().TraceID().String(),
		SpanID:        s.SpanContext().SpanID().String(),
		Name:          s.Name(),
		Kind:          s.SpanKind().String(),
		Stage:         stringAttr(s.Attributes(), rag.AttrStage),
		StartUnixNano: s.StartTime().UnixNano(),
		EndUnixNano:   s.EndTime().UnixNano(),
		DurationMS:    ms(s.EndTime().Sub(s.StartTime())),
		Status:        statusName(s.Status().Code),
		StatusMessage: s.Status().Description,
		Attributes:    attrMap(s.Attributes()),
	}
	if p := s.Parent(); p.IsValid() {
		rec.ParentSpanID = p.SpanID().String()
	}
	if res := s.Resource(); res != nil {
		if v, ok := res.Set().Value("service.name"); ok {
			rec.Service = v.AsString()
		}
	}
	for _, e := range s.Events() {
		rec.Events = append(rec.Events, EventRecord{Name: e.Name, TimeUnixNano: e.Time.UnixNano(), Attributes: attrMap(e.Attributes)})
	}
	return rec
}

// fileExporter is an sdktrace.SpanExporter appending spans as JSON lines to a file. It runs
// behind a batch span processor, so requests never wait for the disk.
type fileExporter struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	enc    *json.Encoder
	closed bool
}

func newFileExporter(path string) (*fileExporter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("trace file: %w", err)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	return &fileExporter{f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *fileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	for _, s := range spans {
		if err := e.enc.Encode(NewSpanRecord(s)); err != nil {
			return fmt.Errorf("trace file: %w", err)
		}
	}
	if err := e.w.Flush(); err != nil {
		return fmt.Errorf("trace file: %w", err)
	}
	return nil
}

// Shutdown implements sdktrace.SpanExporter: it flushes and closes the file.
func (e *fileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.w.Flush()
	if cerr := e.f.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return fmt.Errorf("trace file: %w", err)
	}
	return nil
}
