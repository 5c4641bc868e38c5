package telemetry

import (
	"fmt"
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// TestEncodedSets: a set is encoded once and found again by its identity, whatever variable
// holds it; its encoding decodes to the set's attributes; sets that cannot be encoded as bytes
// (a slice, an invalid attribute) are not; past maxEncodedSets, new sets are neither encoded
// nor kept, and the kept ones are still found; an encoding made with another key table is not
// reused.
func TestEncodedSets(t *testing.T) {
	old := keyTable.Load()
	oldSets := encodedSets.m.Swap(nil)
	t.Cleanup(func() {
		keyTable.Store(old)
		encodedSets.m.Store(oldSets)
	})

	kv := []attribute.KeyValue{attribute.String("db.system.name", "ragtail.memory"), attribute.Int("rag.shard", 2),
		attribute.Bool("ok", true), attribute.Float64("w", 0.25)}
	a, b := attribute.NewSet(kv...), attribute.NewSet(kv[3], kv[2], kv[1], kv[0])
	ea := encoded(&a)
	if ea == nil || encoded(&b) != ea {
		t.Fatalf("the same set made twice: encodings %p and %p, want one", ea, encoded(&b))
	}
	var ab attrBuf
	ab.appendEncoded(ea)
	if got := ab.decode(-1); !reflect.DeepEqual(got, a.ToSlice()) {
		t.Errorf("decoded %v, want %v", got, a.ToSlice())
	}
	if ea.longest != len("ragtail.memory") || ea.n != 4 {
		t.Errorf("longest %d, n %d; want %d, 4", ea.longest, ea.n, len("ragtail.memory"))
	}

	slice := attribute.NewSet(attribute.StringSlice("ids", []string{"a"}))
	invalid := attribute.NewSet(attribute.KeyValue{Key: "k"})
	if encoded(&slice) != nil || encoded(&invalid) != nil {
		t.Error("a set holding a slice or an invalid attribute was encoded as bytes")
	}

	for i := range maxEncodedSets + 10 {
		s := attribute.NewSet(attribute.Int(fmt.Sprintf("k%d", i), i))
		e := encoded(&s)
		// a is kept already: the table takes maxEncodedSets-1 of these.
		if past := i >= maxEncodedSets-1; past != (e == nil) || (e != nil && e.n != 1) {
			t.Fatalf("set %d (past the bound: %v): encoding %v", i, past, e)
		}
	}
	if n := len(*encodedSets.m.Load()); n != maxEncodedSets {
		t.Errorf("%d sets kept, want the bound %d", n, maxEncodedSets)
	}
	if encoded(&a) != ea {
		t.Error("a set kept before the bound was reached is not found again")
	}

	keyTable.Store(new(internedKeys))
	if e := encoded(&a); e == nil || e == ea || e.keys != keyTable.Load() {
		t.Errorf("after the key table changed: encoding %p (before %p), want a new one with the new table's numbers", e, ea)
	}
}
