package telemetry

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
)

// TestInternedKeysBounded checks the key table: a key gets one number whatever string holds it,
// numbers name their keys, and past maxInternedKeys keys new ones are refused (and encoded whole
// by attrBuf) while the ones in the table keep their numbers.
func TestInternedKeysBounded(t *testing.T) {
	var tab internedKeys
	num, ok := tab.number("rag.stage")
	if !ok || tab.name(num) != "rag.stage" {
		t.Fatalf("rag.stage: %d %v %q", num, ok, tab.name(num))
	}
	built := attribute.Key(strings.Join([]string{"rag", "stage"}, ".")) // the same key in other bytes
	if again, ok := tab.number(built); !ok || again != num {
		t.Errorf("the same key in another string: %d %v, want %d", again, ok, num)
	}
	if _, ok := tab.number(""); ok {
		t.Error("the empty key interned")
	}
	for i := range maxInternedKeys + 10 {
		tab.number(attribute.Key(fmt.Sprintf("k%d", i)))
	}
	if n := tab.n.Load(); n != maxInternedKeys {
		t.Errorf("%d keys interned, want the bound %d", n, maxInternedKeys)
	}
	if _, ok := tab.number("past.the.bound"); ok {
		t.Error("a key interned past the bound")
	}
	if again, ok := tab.number("rag.stage"); !ok || again != num {
		t.Errorf("rag.stage after the bound: %d %v, want %d", again, ok, num)
	}
	if got := tab.name(maxInternedKeys + 5); got != "" {
		t.Errorf("a number never handed out names %q", got)
	}
}

// TestAttrBufKeys round-trips attributes whose keys are interned, built at run time, and many
// more than the table holds, from several goroutines at once (on a table of the test's own).
func TestAttrBufKeys(t *testing.T) {
	old := keyTable.Swap(new(internedKeys))
	defer keyTable.Store(old)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2 * maxInternedKeys / 4 {
				kv := []attribute.KeyValue{
					attribute.String("rag.stage", "retrieve"),
					attribute.Int(fmt.Sprintf("dyn.%d.%d", g, i), i),
					attribute.StringSlice(strings.Repeat("x", 200), []string{"a", "b"}),
					attribute.Bool("rag.ok", true),
				}
				var ab attrBuf
				if dropped := ab.append(kv, -1); dropped != 0 {
					t.Errorf("dropped %d", dropped)
					return
				}
				got := ab.decode(-1)
				if len(got) != len(kv) {
					t.Errorf("decoded %d attributes, want %d", len(got), len(kv))
					return
				}
				for j := range kv {
					if got[j].Key != kv[j].Key || got[j].Value.String() != kv[j].Value.String() {
						t.Errorf("attribute %d: %v, want %v", j, got[j], kv[j])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if n := keyTable.Load().n.Load(); n != maxInternedKeys {
		t.Errorf("%d keys interned, want the table full (%d): the keys past it were not encoded whole", n, maxInternedKeys)
	}
}

// TestInternedKeysPinNothing checks that interning a key cut from a large buffer does not keep
// the buffer alive: the table keeps a copy of the key, and its cache no pointer.
func TestInternedKeysPinNothing(t *testing.T) {
	var tab internedKeys
	freed := make(chan struct{}, 1)
	func() {
		buf := new([1 << 20]byte)
		n := copy(buf[:], "rag.pinned")
		runtime.AddCleanup(buf, func(struct{}) { freed <- struct{}{} }, struct{}{})
		if _, ok := tab.number(attribute.Key(unsafe.String(&buf[0], n))); !ok {
			t.Fatal("not interned")
		}
	}()
	deadline := time.After(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			if num, ok := tab.number("rag.pinned"); !ok || tab.name(num) != "rag.pinned" {
				t.Errorf("the key after its buffer went: %d %v", num, ok)
			}
			return
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatal("the buffer a key was cut from is still alive: the table pins it")
		}
	}
}
