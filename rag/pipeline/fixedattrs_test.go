package pipeline

import (
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// TestFixedAttrsBefore: a span's fixed attributes go before its others, in place when their
// array has room (no allocation), in a new array when it has not, and never into the fixed
// list's own array.
func TestFixedAttrsBefore(t *testing.T) {
	f := newFixedAttrs(attribute.String("rag.stage", "retrieve"), attribute.String("db.system.name", "ragtail.memory"))
	fixed := slices.Clone(f.kv)
	want := append(slices.Clone(f.kv), attribute.Int("rag.shard", 1), attribute.Int("rows", 5))

	var scratch [8]attribute.KeyValue
	got := f.before(append(scratch[:0], attribute.Int("rag.shard", 1), attribute.Int("rows", 5)))
	if !slices.Equal(got, want) || &got[0] != &scratch[0] {
		t.Errorf("with room: %v (in the scratch array: %v), want %v in place", got, &got[0] == &scratch[0], want)
	}
	if n := testing.AllocsPerRun(100, func() { f.before(append(scratch[:0], attribute.Int("rows", 5))) }); n != 0 {
		t.Errorf("with room: %v allocations, want 0", n)
	}

	tight := []attribute.KeyValue{attribute.Int("rag.shard", 1), attribute.Int("rows", 5)}
	if got := f.before(tight); !slices.Equal(got, want) {
		t.Errorf("without room: %v, want %v", got, want)
	}
	if got := (*fixedAttrs)(nil).before(tight); !slices.Equal(got, tight) {
		t.Errorf("no fixed attributes: %v, want %v", got, tight)
	}
	if !slices.Equal(f.kv, fixed) {
		t.Errorf("the fixed list changed: %v, want %v", f.kv, fixed)
	}
}
