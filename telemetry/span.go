package telemetry

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// newTraceID returns a random, valid trace id from the runtime's per-thread generator, which
// needs no lock.
func newTraceID() (id trace.TraceID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// newSpanID returns a random, valid span id, like newTraceID.
func newSpanID() (id trace.SpanID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// localSpan is a span TracerProvider records itself. It is laid out for the garbage collector:
// a request keeps about ten of them alive in the trace ring, and every byte of a span with
// pointers in it is scanned at each collection. Times are Unix nanoseconds of the service's
// clock, attributes are encoded into one pointer-free buffer (attrBuf), and what most spans never
// have (events, links, an error status, composite values, drop counts) lives apart, in extra.
//
// A localSpan is safe for concurrent use; once ended it does not change.
type localSpan struct {
	embedded.Span
	tracer *tracer

	mu           sync.Mutex
	name         string
	sc           trace.SpanContext
	parentID     trace.SpanID // zero for a root
	parentFlags  trace.TraceFlags
	parentRemote bool
	kind         trace.SpanKind
	ended        bool
	children     int32
	start, end   int64 // Unix nanoseconds
	attrs        attrBuf
	extra        *spanExtra
	local        *localTrace // where the ring gathers the request's spans; nil for none
	localRoot    bool        // the span is local's root
}

// spanExtra is what few spans have.
type spanExtra struct {
	droppedAttrs  int
	events        []sdktrace.Event
	firstEvent    [1]sdktrace.Event // the room of events' first one: a span of the pipeline has one at most
	droppedEvents int
	links         []sdktrace.Link
	droppedLinks  int
	status        sdktrace.Status
}

var (
	_ trace.Span = (*localSpan)(nil)
	_ SpanData   = (*localSpan)(nil)
)

func (s *localSpan) more() *spanExtra {
	if s.extra == nil {
		s.extra = &spanExtra{}
	}
	return s.extra
}

func (s *localSpan) SpanContext() trace.SpanContext { return s.sc }

func (s *localSpan) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

func (s *localSpan) TracerProvider() trace.TracerProvider { return s.tracer.p }

func (s *localSpan) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.name = name
	}
}

// SetStatus sets the status as the SDK does: Ok is final, Unset never replaces a status, and
// only Error keeps its description.
func (s *localSpan) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || code == codes.Unset || s.extra != nil && s.extra.status.Code > code {
		return
	}
	st := sdktrace.Status{Code: code}
	if code == codes.Error {
		st.Description = description
	}
	s.more().status = st
}

// SetAttributes sets attributes, a later value of a key replacing an earlier one, within the
// span limits: values are cut to AttributeValueLengthLimit, and keys past AttributeCountLimit
// are dropped (and counted), as the SDK does.
func (s *localSpan) SetAttributes(kv ...attribute.KeyValue) {
	if len(kv) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.setAttributesLocked(kv)
	}
}

// setAttributesLocked is SetAttributes with s.mu held, before the end.
func (s *localSpan) setAttributesLocked(kv []attribute.KeyValue) {
	lim := s.tracer.p.limits
	switch {
	case lim.AttributeCountLimit == 0:
		s.more().droppedAttrs += len(kv)
	case lim.AttributeCountLimit > 0 && s.attrs.n+len(kv) > lim.AttributeCountLimit:
		s.addOverLimit(lim, kv)
	default:
		if dropped := s.attrs.append(kv, lim.AttributeValueLengthLimit); dropped > 0 {
			s.more().droppedAttrs += dropped
		}
	}
}

// addOverLimit adds kv to attributes that would outgrow the count limit: keys already there
// take their new values, new keys fill what room is left, and the rest are dropped.
func (s *localSpan) addOverLimit(lim sdktrace.SpanLimits, kv []attribute.KeyValue) {
	all := dedupe(s.attrs.decode(lim.AttributeValueLengthLimit))
	dropped := 0
	for _, a := range kv {
		if !a.Valid() {
			dropped++
			continue
		}
		a = truncateAttr(a, lim.AttributeValueLengthLimit)
		if i := indexKey(all, a.Key); i >= 0 {
			all[i] = a
			continue
		}
		if len(all) >= lim.AttributeCountLimit {
			dropped++
			continue
		}
		all = append(all, a)
	}
	s.attrs.reset()
	s.attrs.append(all, -1)
	if dropped > 0 {
		s.more().droppedAttrs += dropped
	}
}

// dedupe keeps one attribute per key, at the place of its first setting with its last value,
// as the SDK does. It reuses attrs.
func dedupe(attrs []attribute.KeyValue) []attribute.KeyValue {
	unique := attrs[:0]
	for _, a := range attrs {
		if i := indexKey(unique, a.Key); i >= 0 {
			unique[i] = a
			continue
		}
		unique = append(unique, a)
	}
	clear(attrs[len(unique):])
	return unique
}

// indexKey returns the index of key in attrs, or -1. A linear scan: a span has tens of
// attributes at most, and the count limit bounds them.
func indexKey(attrs []attribute.KeyValue, key attribute.Key) int {
	for i := range attrs {
		if attrs[i].Key == key {
			return i
		}
	}
	return -1
}

// AddEvent adds an event, within EventCountLimit (the oldest is dropped first) and
// AttributePerEventCountLimit.
func (s *localSpan) AddEvent(name string, opts ...trace.EventOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.addEvent(name, trace.NewEventConfig(opts...))
	}
}

// AddEventAt adds an event with no attributes at the instant at, as AddEvent with
// trace.WithTimestamp(at) does, without the option's allocation (the pipeline's recorder marks
// the first token so).
func (s *localSpan) AddEventAt(name string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.addEventAt(name, at, nil)
	}
}

func (s *localSpan) addEvent(name string, c trace.EventConfig) {
	s.addEventAt(name, c.Timestamp(), c.Attributes())
}

func (s *localSpan) addEventAt(name string, at time.Time, attrs []attribute.KeyValue) {
	lim := s.tracer.p.limits
	x := s.more()
	if lim.EventCountLimit == 0 {
		x.droppedEvents++
		return
	}
	if at.IsZero() {
		at = s.tracer.p.now()
	}
	e := sdktrace.Event{Name: name, Time: at}
	e.Attributes, e.DroppedAttributeCount = limitAttrs(attrs, lim.AttributePerEventCountLimit, lim.AttributeValueLengthLimit)
	if lim.EventCountLimit > 0 && len(x.events) >= lim.EventCountLimit {
		copy(x.events, x.events[1:])
		x.events = x.events[:len(x.events)-1]
		x.droppedEvents++
	}
	if x.events == nil {
		x.events = x.firstEvent[:0]
	}
	x.events = append(x.events, e)
}

// AddLink adds a link, within LinkCountLimit (the oldest is dropped first) and
// AttributePerLinkCountLimit.
func (s *localSpan) AddLink(link trace.Link) {
	if !link.SpanContext.IsValid() && len(link.Attributes) == 0 && link.SpanContext.TraceState().Len() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	lim := s.tracer.p.limits
	x := s.more()
	if lim.LinkCountLimit == 0 {
		x.droppedLinks++
		return
	}
	l := sdktrace.Link{SpanContext: link.SpanContext}
	l.Attributes, l.DroppedAttributeCount = limitAttrs(link.Attributes, lim.AttributePerLinkCountLimit, lim.AttributeValueLengthLimit)
	if lim.LinkCountLimit > 0 && len(x.links) >= lim.LinkCountLimit {
		copy(x.links, x.links[1:])
		x.links = x.links[:len(x.links)-1]
		x.droppedLinks++
	}
	x.links = append(x.links, l)
}

// limitAttrs returns a copy of the first limit of attrs (all for a negative limit) with their
// values cut to valueLen, and how many were dropped.
func limitAttrs(attrs []attribute.KeyValue, limit, valueLen int) ([]attribute.KeyValue, int) {
	dropped := 0
	if limit >= 0 && len(attrs) > limit {
		dropped = len(attrs) - limit
		attrs = attrs[:limit]
	}
	if len(attrs) == 0 {
		return nil, dropped
	}
	out := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		out[i] = truncateAttr(a, valueLen)
	}
	return out, dropped
}

// RecordError records err as an exception event, as the SDK does.
func (s *localSpan) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	opts = append(opts, trace.WithAttributes(semconv.ExceptionType(typeName(err)), semconv.ExceptionMessage(err.Error())))
	c := trace.NewEventConfig(opts...)
	if c.StackTrace() {
		c = trace.NewEventConfig(append(opts, trace.WithAttributes(semconv.ExceptionStacktrace(stackTrace())))...)
	}
	s.addEvent(semconv.ExceptionEventName, c)
}

// End ends the span at the option's timestamp, or now, and hands it to the ring and the other
// span processors. Called while panicking (deferred), it records the panic as an exception event
// first, as the SDK does, and lets the panic go on.
func (s *localSpan) End(opts ...trace.SpanEndOption) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	c := trace.NewSpanEndConfig(opts...)
	if recovered := recover(); recovered != nil {
		defer panic(recovered)
		eopts := []trace.EventOption{trace.WithAttributes(semconv.ExceptionType(typeName(recovered)),
			semconv.ExceptionMessage(fmt.Sprint(recovered)))}
		if c.StackTrace() {
			eopts = append(eopts, trace.WithAttributes(semconv.ExceptionStacktrace(stackTrace())))
		}
		s.addEvent(semconv.ExceptionEventName, trace.NewEventConfig(eopts...))
	}
	at := c.Timestamp()
	if at.IsZero() {
		at = s.tracer.p.now()
	}
	s.endLocked(at)
}

// EndAt ends the span at the instant at, as End with trace.WithTimestamp(at) does, without the
// option's allocation (the pipeline's recorder calls it).
func (s *localSpan) EndAt(at time.Time) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.endLocked(at)
}

// EndAtWith sets kv and ends the span at the instant at, as SetAttributes(kv...) and then
// EndAt(at) do, taking the span's lock once (the pipeline's recorder ends its spans so).
func (s *localSpan) EndAtWith(at time.Time, kv []attribute.KeyValue) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	if len(kv) > 0 {
		s.setAttributesLocked(kv)
	}
	s.endLocked(at)
}

// EndAtWithSet sets the attributes of set, then kv, and ends the span at the instant at, as
// SetAttributes(set.ToSlice()...), SetAttributes(kv...) and EndAt(at) do, taking the span's lock
// once. The set's attributes are copied in as this process encoded them the first time it saw
// the set (the pipeline's recorder passes each span's fixed attributes so).
func (s *localSpan) EndAtWithSet(at time.Time, set *attribute.Set, kv []attribute.KeyValue) {
	e := encoded(set)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	lim := s.tracer.p.limits
	switch {
	case set.Len() == 0:
	case e == nil,
		lim.AttributeCountLimit >= 0 && s.attrs.n+e.n > lim.AttributeCountLimit,
		lim.AttributeValueLengthLimit >= 0 && e.longest > lim.AttributeValueLengthLimit:
		s.setAttributesLocked(set.ToSlice())
	default:
		s.attrs.appendEncoded(e)
	}
	if len(kv) > 0 {
		s.setAttributesLocked(kv)
	}
	s.endLocked(at)
}

// endLocked ends the span at at, unlocks it, and hands it to the ring and the other span
// processors.
func (s *localSpan) endLocked(at time.Time) {
	s.end = at.UnixNano()
	s.ended = true
	s.mu.Unlock()

	p := s.tracer.p
	if p.stopped.Load() {
		return // as the SDK's: its processors are shut down
	}
	switch {
	case p.ring == nil:
	case s.local == nil:
		p.ring.add(s)
	case s.localRoot:
		p.ring.addLocalRoot(s.local, s)
	default:
		p.ring.addLocal(s.local, s)
	}
	if len(p.others) > 0 {
		snap := s.snapshot()
		for _, sp := range p.others {
			sp.OnEnd(snap)
		}
	}
}

// snapshot returns the span as the SDK's exporters take it.
func (s *localSpan) snapshot() sdktrace.ReadOnlySpan {
	return tracetest.SpanStub{
		Name: s.Name(), SpanContext: s.sc, Parent: s.Parent(), SpanKind: s.kind,
		StartTime: s.StartTime(), EndTime: s.EndTime(), Attributes: s.Attributes(), Events: s.Events(), Links: s.Links(),
		Status: s.Status(), DroppedAttributes: s.DroppedAttributes(), DroppedEvents: s.DroppedEvents(),
		DroppedLinks: s.DroppedLinks(), ChildSpanCount: s.ChildSpanCount(),
		Resource: s.tracer.p.resource, InstrumentationScope: s.tracer.scope,
	}.Snapshot()
}

func (s *localSpan) addChild() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.children++
	}
}

// The read side (SpanData).

func (s *localSpan) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

// Parent returns the parent's span context (the zero one for a root).
func (s *localSpan) Parent() trace.SpanContext {
	if !s.parentID.IsValid() {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: s.sc.TraceID(), SpanID: s.parentID,
		TraceFlags: s.parentFlags, TraceState: s.sc.TraceState(), Remote: s.parentRemote})
}

func (s *localSpan) SpanKind() trace.SpanKind { return s.kind }
func (s *localSpan) StartTime() time.Time     { return time.Unix(0, s.start) }

func (s *localSpan) EndTime() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		return time.Time{}
	}
	return time.Unix(0, s.end)
}

// Attributes decodes the span's attributes, one per key; each call returns a new slice.
func (s *localSpan) Attributes() []attribute.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return dedupe(s.attrs.decode(s.tracer.p.limits.AttributeValueLengthLimit))
}

func (s *localSpan) Links() []sdktrace.Link {
	return fromExtra(s, func(x *spanExtra) []sdktrace.Link { return slices.Clip(x.links) })
}

func (s *localSpan) Events() []sdktrace.Event {
	return fromExtra(s, func(x *spanExtra) []sdktrace.Event { return slices.Clip(x.events) })
}

func (s *localSpan) Status() sdktrace.Status {
	return fromExtra(s, func(x *spanExtra) sdktrace.Status { return x.status })
}

func (s *localSpan) InstrumentationScope() instrumentation.Scope { return s.tracer.scope }
func (s *localSpan) Resource() *resource.Resource                { return s.tracer.p.resource }

func (s *localSpan) DroppedAttributes() int {
	return fromExtra(s, func(x *spanExtra) int { return x.droppedAttrs })
}

func (s *localSpan) DroppedLinks() int {
	return fromExtra(s, func(x *spanExtra) int { return x.droppedLinks })
}

func (s *localSpan) DroppedEvents() int {
	return fromExtra(s, func(x *spanExtra) int { return x.droppedEvents })
}

// fromExtra returns f of s's rare parts, read under its lock, or the zero value when it has
// none.
func fromExtra[T any](s *localSpan, f func(*spanExtra) T) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.extra == nil {
		var zero T
		return zero
	}
	return f(s.extra)
}

func (s *localSpan) ChildSpanCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.children)
}

// attrBuf holds a span's attributes encoded in one pointer-free byte slice, in the order they
// were set (a key may come more than once; readers keep the last value). Each attribute is its
// key, its type (one byte) and its value: one byte for a bool, eight for an int64 or a float64's
// bits, uvarint length and bytes for a string. Other values (slices) go to vals, whole (decode
// cuts them to the span's value length limit), and the buffer holds their index there. A key is
// a uvarint: its number in the table of interned keys (keyTable) times two plus one, or its
// length times two followed by its bytes when the table has no room for it.
type attrBuf struct {
	b      []byte
	n      int               // attributes encoded
	vals   []attribute.Value // composite values
	inline [inlineAttrBytes]byte
}

// inlineAttrBytes is the room for attributes inside the span: with keys interned, every span of
// the pipeline's (up to about 140 bytes of attributes, the rag.pipeline span's) fits, so that it
// needs no second allocation, and the span (416 bytes) stays in the allocator's 416-byte class.
// The bytes hold no pointers, so the collector does not scan them.
const inlineAttrBytes = 176

// reset empties ab, its buffer in its inline room.
func (ab *attrBuf) reset() {
	ab.b, ab.n, ab.vals = ab.inline[:0], 0, nil
}

// append encodes kv, string values cut to valueLen characters (negative: whole; composite values
// are cut when decoded), and returns how many were invalid and dropped. It encodes in one pass,
// into a local slice (so that the compiler keeps it in registers rather than reloading ab.b
// after each append), growing the buffer past its inline room only for spans whose attributes
// outgrow it.
func (ab *attrBuf) append(kv []attribute.KeyValue, valueLen int) (dropped int) {
	keys := keyTable.Load()
	b := ab.b
	if b == nil {
		b = ab.inline[:0]
	}
	for i := range kv {
		a := &kv[i]     // not a copy: a KeyValue is 64 bytes
		if !a.Valid() { // a key; an empty value is valid
			dropped++
			continue
		}
		if num, ok := keys.number(a.Key); ok {
			b = binary.AppendUvarint(b, uint64(num)<<1|1)
		} else {
			b = binary.AppendUvarint(b, uint64(len(a.Key))<<1)
			b = append(b, a.Key...)
		}
		t := a.Value.Type()
		b = append(b, byte(t))
		switch t {
		case attribute.BOOL:
			v := byte(0)
			if a.Value.AsBool() {
				v = 1
			}
			b = append(b, v)
		case attribute.INT64:
			b = binary.LittleEndian.AppendUint64(b, uint64(a.Value.AsInt64()))
		case attribute.FLOAT64:
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.Value.AsFloat64()))
		case attribute.STRING:
			v := a.Value.AsString()
			if valueLen >= 0 {
				v = truncateString(v, valueLen)
			}
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		default:
			// Kept whole: decode cuts it to the span's limit when it is read. A slice value
			// cannot be measured without copying it out through reflection, which most spans
			// would pay for nothing: the pipeline's slices are chunk ids and finish reasons.
			b = binary.AppendUvarint(b, uint64(len(ab.vals)))
			ab.vals = append(ab.vals, a.Value)
		}
		ab.n++
	}
	ab.b = b
	return dropped
}

// decode returns the attributes in the order they were set, duplicates included, in a new
// slice, composite values cut to valueLen characters (negative: whole), as append cut strings.
func (ab *attrBuf) decode(valueLen int) []attribute.KeyValue {
	if ab.n == 0 {
		return nil
	}
	out := make([]attribute.KeyValue, 0, ab.n)
	b := ab.b
	str := func() string {
		n, k := binary.Uvarint(b)
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s
	}
	keys := keyTable.Load()
	for len(b) > 0 {
		var key attribute.Key
		x, k := binary.Uvarint(b)
		b = b[k:]
		if x&1 == 1 {
			key = keys.name(uint32(x >> 1))
		} else {
			key = attribute.Key(b[:x>>1])
			b = b[x>>1:]
		}
		t := attribute.Type(b[0])
		b = b[1:]
		var v attribute.Value
		switch t {
		case attribute.BOOL:
			v = attribute.BoolValue(b[0] == 1)
			b = b[1:]
		case attribute.INT64:
			v = attribute.Int64Value(int64(binary.LittleEndian.Uint64(b)))
			b = b[8:]
		case attribute.FLOAT64:
			v = attribute.Float64Value(math.Float64frombits(binary.LittleEndian.Uint64(b)))
			b = b[8:]
		case attribute.STRING:
			v = attribute.StringValue(str())
		default:
			i, k := binary.Uvarint(b)
			b = b[k:]
			v = ab.vals[i]
			if valueLen >= 0 {
				v = truncateValue(v, valueLen)
			}
		}
		out = append(out, attribute.KeyValue{Key: key, Value: v})
	}
	return out
}

// typeName names v's Go type as the SDK's exception.type does.
func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// stackTrace returns the calling goroutine's stack, cut at 2 KB as the SDK's is.
func stackTrace() string {
	buf := make([]byte, 2048)
	return string(buf[:runtime.Stack(buf, false)])
}

// truncateAttr cuts a's string values to limit characters (a negative limit keeps them whole),
// dropping invalid UTF-8 from a value it cuts, as the SDK's AttributeValueLengthLimit does.
func truncateAttr(a attribute.KeyValue, limit int) attribute.KeyValue {
	if limit < 0 {
		return a
	}
	a.Value = truncateValue(a.Value, limit)
	return a
}

func truncateValue(v attribute.Value, limit int) attribute.Value {
	switch v.Type() {
	case attribute.STRING:
		if s := v.AsString(); len(s) > limit {
			return attribute.StringValue(truncateString(s, limit))
		}
	case attribute.BYTESLICE:
		if b := v.AsByteSlice(); len(b) > limit {
			return attribute.ByteSliceValue(b[:limit])
		}
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice()
		for i, s := range ss {
			if len(s) > limit {
				out := make([]string, len(ss))
				copy(out, ss[:i])
				for j := i; j < len(ss); j++ {
					out[j] = truncateString(ss[j], limit)
				}
				return attribute.StringSliceValue(out)
			}
		}
	case attribute.SLICE:
		vs := slices.Clone(v.AsSlice())
		for i := range vs {
			vs[i] = truncateValue(vs[i], limit)
		}
		return attribute.SliceValue(vs...)
	case attribute.MAP:
		kvs := slices.Clone(v.AsMap())
		for i := range kvs {
			kvs[i].Value = truncateValue(kvs[i].Value, limit)
		}
		return attribute.MapValue(kvs...)
	}
	return v
}

// truncateString returns s cut to limit characters; invalid bytes are dropped from a string it
// cuts.
func truncateString(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	n := 0
	for i := range s {
		if n == limit {
			return s[:i]
		}
		n++
	}
	return s
}
