package telemetry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
)

// TraceView is the JSON form of one trace on /debug/traces: the root span's summary, the time
// spent in each pipeline stage, and the waterfall of every span.
type TraceView struct {
	TraceID       string    `json:"trace_id"`
	Root          string    `json:"root"` // the root span's name, e.g. "POST /v1/chat/completions"
	Start         time.Time `json:"start"`
	StartUnixNano int64     `json:"start_unix_nano"`
	DurationMS    float64   `json:"duration_ms"`
	Status        string    `json:"status"` // ok, error or unset
	RequestID     string    `json:"request_id,omitempty"`
	// Stages holds the milliseconds spent in each pipeline stage that ran, as Server-Timing
	// reports them: the duration of each stage's own span (not its children), and for the stream
	// stage the time spent writing to the client (rag.stream.write_ms).
	Stages map[string]float64 `json:"stages"`
	// Roots lists the trace's local roots, one per request the service served within the trace
	// (several when a client reuses one trace id across calls), in the order they ended, each
	// with its own stages. Stages above sums them.
	Roots []RootView `json:"roots"`
	// Waterfall lists every span of the trace by start time.
	Waterfall    []SpanView `json:"waterfall"`
	DroppedSpans int        `json:"dropped_spans,omitempty"`
}

// RootView is one local root of a TraceView and what its subtree spent per stage. Its offset is
// from the trace's start.
type RootView struct {
	Name          string             `json:"name"`
	SpanID        string             `json:"span_id"`
	RequestID     string             `json:"request_id,omitempty"`
	StartOffsetMS float64            `json:"start_offset_ms"`
	DurationMS    float64            `json:"duration_ms"`
	Status        string             `json:"status"`
	Stages        map[string]float64 `json:"stages"`
}

// SpanView is one span of a TraceView's waterfall. Offsets are from the trace's start: the
// earliest start of its local roots.
type SpanView struct {
	Stage         string         `json:"stage"` // rag.stage; "" for spans without one
	Name          string         `json:"name"`
	SpanID        string         `json:"span_id"`
	ParentSpanID  string         `json:"parent_span_id,omitempty"`
	StartOffsetMS float64        `json:"start_offset_ms"`
	DurationMS    float64        `json:"duration_ms"`
	Status        string         `json:"status"`
	StatusMessage string         `json:"status_message,omitempty"`
	Attributes    map[string]any `json:"attributes,omitempty"`
	Events        []EventView    `json:"events,omitempty"`
}

// EventView is a span event; its offset is from the root span's start.
type EventView struct {
	Name       string         `json:"name"`
	OffsetMS   float64        `json:"offset_ms"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// View renders t for JSON.
func (t *Trace) View() TraceView {
	root := t.Root
	start := root.StartTime()
	for _, r := range t.Roots {
		if r.StartTime().Before(start) {
			start = r.StartTime()
		}
	}
	v := TraceView{
		TraceID:       t.ID.String(),
		Root:          root.Name(),
		Start:         start.UTC(),
		StartUnixNano: start.UnixNano(),
		DurationMS:    ms(t.Duration),
		Status:        statusName(root.Status().Code),
		Stages:        make(map[string]float64, len(rag.Stages)),
		Waterfall:     make([]SpanView, 0, len(t.Spans)),
		DroppedSpans:  t.Dropped,
	}
	spans := slices.Clone(t.Spans)
	stageOf := make(map[trace.SpanID]string, len(spans))
	parentOf := make(map[trace.SpanID]trace.SpanID, len(spans))
	for _, s := range spans {
		stageOf[s.SpanContext().SpanID()] = stringAttr(s.Attributes(), rag.AttrStage)
		parentOf[s.SpanContext().SpanID()] = s.Parent().SpanID()
	}
	depth := func(s sdktrace.ReadOnlySpan) int {
		d := 0
		for id := s.Parent().SpanID(); d < len(spans); d++ {
			next, ok := parentOf[id]
			if !ok {
				break
			}
			id = next
		}
		return d
	}
	// By start time; a parent before the children that start with it.
	slices.SortStableFunc(spans, func(a, b sdktrace.ReadOnlySpan) int {
		if c := a.StartTime().Compare(b.StartTime()); c != 0 {
			return c
		}
		return depth(a) - depth(b)
	})
	// rootOf walks up from a span to the local root whose subtree holds it.
	rootOf := func(id trace.SpanID) trace.SpanID {
		for range len(spans) {
			parent, ok := parentOf[id]
			if _, kept := parentOf[parent]; !ok || !kept {
				break
			}
			id = parent
		}
		return id
	}
	roots := make(map[trace.SpanID]*RootView, len(t.Roots))
	for _, r := range t.Roots {
		rv := RootView{Name: r.Name(), SpanID: r.SpanContext().SpanID().String(), StartOffsetMS: ms(r.StartTime().Sub(start)),
			DurationMS: ms(r.EndTime().Sub(r.StartTime())), Status: statusName(r.Status().Code), Stages: map[string]float64{}}
		v.Roots = append(v.Roots, rv)
	}
	for i, r := range t.Roots {
		roots[r.SpanContext().SpanID()] = &v.Roots[i]
	}
	for _, s := range spans {
		sv := spanView(s, start)
		v.Waterfall = append(v.Waterfall, sv)
		rv := roots[rootOf(s.SpanContext().SpanID())]
		if id := stringAttr(s.Attributes(), rag.AttrRequestID); id != "" {
			if v.RequestID == "" {
				v.RequestID = id
			}
			if rv != nil && rv.RequestID == "" {
				rv.RequestID = id
			}
		}
		if !slices.Contains(rag.Stages, rag.Stage(sv.Stage)) || stageOf[s.Parent().SpanID()] == sv.Stage {
			continue // not a stage, or a child of its stage's span (one shard's query)
		}
		d := sv.DurationMS
		if w, ok := sv.Attributes[string(rag.AttrStreamWriteMS)].(float64); ok && sv.Stage == string(rag.StageStream) {
			d = w
		}
		v.Stages[sv.Stage] += d
		if rv != nil {
			rv.Stages[sv.Stage] += d
		}
	}
	return v
}

func spanView(s sdktrace.ReadOnlySpan, origin time.Time) SpanView {
	attrs := s.Attributes()
	sv := SpanView{
		Stage:         stringAttr(attrs, rag.AttrStage),
		Name:          s.Name(),
		SpanID:        s.SpanContext().SpanID().String(),
		StartOffsetMS: ms(s.StartTime().Sub(origin)),
		DurationMS:    ms(s.EndTime().Sub(s.StartTime())),
		Status:        statusName(s.Status().Code),
		StatusMessage: s.Status().Description,
		Attributes:    attrMap(attrs),
	}
	if p := s.Parent(); p.IsValid() {
		sv.ParentSpanID = p.SpanID().String()
	}
	for _, e := range s.Events() {
		sv.Events = append(sv.Events, EventView{Name: e.Name, OffsetMS: ms(e.Time.Sub(origin)), Attributes: attrMap(e.Attributes)})
	}
	return sv
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func statusName(c codes.Code) string {
	switch c {
	case codes.Ok:
		return "ok"
	case codes.Error:
		return "error"
	}
	return "unset"
}

func stringAttr(attrs []attribute.KeyValue, key attribute.Key) string {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

func attrMap(attrs []attribute.KeyValue) map[string]any {
	if len(attrs) == 0 {
		return nil
	}
	m := make(map[string]any, len(attrs))
	for _, kv := range attrs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// TraceList is the JSON of a /debug/traces listing.
type TraceList struct {
	Kind   string      `json:"kind"` // recent or slowest
	Count  int         `json:"count"`
	Traces []TraceView `json:"traces"`
	Stats  RingStats   `json:"ring"`
}

// defaultListed is the number of recent traces /debug/traces lists without ?limit.
const defaultListed = 20

// Handler serves /debug/traces from the ring, as JSON:
//
//	GET /debug/traces               the 20 most recent traces, newest first (?limit=N for more)
//	GET /debug/traces?slowest=N     the N slowest traces kept, slowest first
//	GET /debug/traces?trace_id=X    one trace (404 if the ring does not hold it)
//
// Each trace has its root span's summary, "stages" (milliseconds per pipeline stage) and its
// "waterfall": every span with its stage, start offset from the root, duration and attributes.
func (r *Ring) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		if id := q.Get("trace_id"); id != "" {
			tid, err := trace.TraceIDFromHex(id)
			if err != nil {
				writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("trace_id %q: want 32 lower-case hex digits", id))
				return
			}
			t, ok := r.Find(tid)
			if !ok {
				writeJSONError(w, http.StatusNotFound, fmt.Sprintf("trace %s is not in the ring: it was not sampled, is still running, or was evicted (the ring keeps the %d most recent and %d slowest traces)", id, r.recentCap, r.slowCap))
				return
			}
			writeJSON(w, http.StatusOK, t.View())
			return
		}
		list := TraceList{Kind: "recent"}
		var traces []*Trace
		if s := q.Get("slowest"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("slowest=%q: want a positive count (at most %d are kept)", s, r.slowCap))
				return
			}
			list.Kind = "slowest"
			traces = r.Slowest(n)
		} else {
			n := defaultListed
			if s := q.Get("limit"); s != "" {
				var err error
				if n, err = strconv.Atoi(s); err != nil || n < 1 {
					writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("limit=%q: want a positive count (at most %d are kept)", s, r.recentCap))
					return
				}
			}
			traces = r.Recent(n)
		}
		list.Traces = make([]TraceView, len(traces))
		for i, t := range traces {
			list.Traces[i] = t.View()
		}
		list.Count = len(list.Traces)
		list.Stats = r.Stats()
		writeJSON(w, http.StatusOK, list)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": msg}})
}
