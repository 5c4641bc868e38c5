package telemetry

import (
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
)

// A span's fixed attributes (the database system and collection of every Query span, the
// provider and model of every chat span) come to EndAtWithSet as an attribute.Set, encoded here
// once and copied into each span as bytes: a copy instead of a key lookup and an encoding per
// attribute. The encodings are kept by the set's attribute.Distinct, the identity the SDK's
// metrics key their series by, for at most maxEncodedSets sets; past that, a new set's
// attributes are set as any others are, so that a caller making new sets costs the table nothing
// beyond its bound.
const maxEncodedSets = 256

// encodedSet is a set's attributes as attrBuf.append encodes them, string values whole.
type encodedSet struct {
	keys    *internedKeys // the table whose numbers b holds
	b       []byte
	n       int // attributes
	longest int // the longest string value, in bytes: a span with a shorter value length limit encodes the set itself
}

// encodedSets is the process's table of encoded sets, replaced whole (copy on write) when a set
// is added, so that lookups take no lock.
var encodedSets struct {
	m  atomic.Pointer[map[attribute.Distinct]*encodedSet]
	mu sync.Mutex // serializes additions
}

// encoded returns set's encoding, making it on first use; nil when set cannot be encoded once
// (it holds a slice, whose values are kept aside rather than as bytes, or an invalid attribute)
// or the table is full and does not hold it. An encoding made with an earlier key table is
// replaced in its place.
func encoded(set *attribute.Set) *encodedSet {
	d := set.Equivalent()
	keys := keyTable.Load()
	if m := encodedSets.m.Load(); m != nil {
		if e, done := encodedIn(*m, d, keys); done {
			return e
		}
	}
	e := encode(set, keys)
	if e == nil {
		return nil
	}
	encodedSets.mu.Lock()
	defer encodedSets.mu.Unlock()
	m := map[attribute.Distinct]*encodedSet{}
	if old := encodedSets.m.Load(); old != nil {
		if have, done := encodedIn(*old, d, keys); done {
			return have
		}
		m = maps.Clone(*old)
	}
	m[d] = e
	encodedSets.m.Store(&m)
	return e
}

// encodedIn returns d's encoding in m when it was made with keys, or nil when m is full and does
// not hold d; done is false when d is still to be encoded (m has room, or its encoding is stale).
func encodedIn(m map[attribute.Distinct]*encodedSet, d attribute.Distinct, keys *internedKeys) (e *encodedSet, done bool) {
	e, ok := m[d]
	switch {
	case ok && e.keys == keys:
		return e, true
	case !ok && len(m) >= maxEncodedSets:
		return nil, true
	}
	return nil, false
}

// encode encodes set's attributes with the key table keys; nil when one is a slice or invalid.
func encode(set *attribute.Set, keys *internedKeys) *encodedSet {
	kv := set.ToSlice()
	e := &encodedSet{keys: keys, n: len(kv)}
	for _, a := range kv {
		switch a.Value.Type() {
		case attribute.BOOL, attribute.INT64, attribute.FLOAT64:
		case attribute.STRING:
			e.longest = max(e.longest, len(a.Value.AsString()))
		default:
			return nil
		}
	}
	var ab attrBuf
	if ab.append(kv, -1) > 0 || keyTable.Load() != keys {
		return nil
	}
	e.b = append([]byte(nil), ab.b...)
	return e
}

// appendEncoded adds e's attributes, as append(set.ToSlice(), -1) would.
func (ab *attrBuf) appendEncoded(e *encodedSet) {
	b := ab.b
	if b == nil {
		b = ab.inline[:0]
	}
	ab.b = append(b, e.b...)
	ab.n += e.n
}
