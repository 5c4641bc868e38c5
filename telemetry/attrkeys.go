package telemetry

import (
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
)

// Attribute keys are interned: a span's encoded attributes (attrBuf) hold a key seen before as
// its number in a process-wide table, one or two bytes, instead of its bytes, which are most of
// an attribute (rag.shards, gen_ai.request.max_tokens, db.response.returned_rows). The table is
// bounded (maxInternedKeys); past it, new keys are encoded whole, as every key was before.
// Instrumentation's keys are constants, so a table of a few hundred covers every one a service
// sets, and a hostile or unbounded source of keys costs the table nothing beyond its bound.
const (
	maxInternedKeys = 1024
	// keyCacheSlots is the size of the direct-mapped cache in front of the table, indexed by
	// the address of a key's bytes: a constant key is found there with one load and two
	// comparisons, without hashing its bytes.
	keyCacheSlots = 1024
)

// keyTable is the process's table of interned attribute keys (a pointer, which tests replace).
var keyTable atomic.Pointer[internedKeys]

func init() { keyTable.Store(new(internedKeys)) }

type internedKeys struct {
	cache [keyCacheSlots]keyCacheSlot
	// index maps each key to its number; it is replaced whole (copy on write) when a key is
	// added, so that lookups take no lock.
	index atomic.Pointer[map[attribute.Key]uint32]
	// names holds the keys by number; its first n are set, and never change once n covers them.
	names [maxInternedKeys]attribute.Key
	n     atomic.Uint32
	mu    sync.Mutex // serializes additions
}

// keyCacheSlot is a key's number, for keys whose bytes were at addr. It keeps no pointer, so it
// pins nothing (a key cut from a large buffer does not keep the buffer alive); a hit is checked
// against the table's key, since other bytes may come to live at that address later. A slot is
// filled once and never changes: state goes from empty to filling to filled, and a reader that
// sees it filled reads the rest without a lock. The slots live in the cache itself, so that a
// lookup follows no pointer to reach one.
type keyCacheSlot struct {
	state atomic.Uint32 // slotEmpty, slotFilling or slotFilled
	num   uint32
	len   int
	addr  uintptr
}

const (
	slotEmpty = iota
	slotFilling
	slotFilled
)

// number returns key's number in the table, adding it while there is room; false when the table
// is full and key is not in it.
func (t *internedKeys) number(key attribute.Key) (uint32, bool) {
	if len(key) == 0 {
		return 0, false
	}
	addr := uintptr(unsafe.Pointer(unsafe.StringData(string(key))))
	slot := &t.cache[(addr>>3^uintptr(len(key)))%keyCacheSlots]
	if slot.state.Load() == slotFilled && slot.addr == addr && slot.len == len(key) && t.names[slot.num] == key {
		return slot.num, true
	}
	num, ok := t.lookup(key)
	if !ok {
		if num, ok = t.add(key); !ok {
			return 0, false
		}
	}
	if slot.state.CompareAndSwap(slotEmpty, slotFilling) {
		slot.num, slot.len, slot.addr = num, len(key), addr
		slot.state.Store(slotFilled)
	}
	return num, true
}

func (t *internedKeys) lookup(key attribute.Key) (uint32, bool) {
	m := t.index.Load()
	if m == nil {
		return 0, false
	}
	num, ok := (*m)[key]
	return num, ok
}

// add adds key to the table, unless it is full.
func (t *internedKeys) add(key attribute.Key) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if num, ok := t.lookup(key); ok {
		return num, true
	}
	n := t.n.Load()
	if n >= maxInternedKeys {
		return 0, false
	}
	key = attribute.Key(strings.Clone(string(key))) // the table outlives the caller's string
	t.names[n] = key
	m := make(map[attribute.Key]uint32, n+1)
	if old := t.index.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[key] = n
	t.index.Store(&m)
	t.n.Store(n + 1)
	return n, true
}

// name returns the key of number num.
func (t *internedKeys) name(num uint32) attribute.Key {
	if num >= t.n.Load() {
		return "" // not a number the table handed out
	}
	return t.names[num]
}
