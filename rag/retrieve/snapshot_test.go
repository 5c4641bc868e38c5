package retrieve_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/retrieve"
)

func testSnapshot() *retrieve.Snapshot {
	chunks, vecs := testCorpus(30, 6, 12)
	chunks[3].Topic = "grpc"
	chunks[4].Text = "unicode: é 漢字 \u2028 and \"quotes\""
	return &retrieve.Snapshot{Dim: 6, Embedder: "hash dim=6 seed=1", Chunks: chunks, Vectors: vecs}
}

func encodeSnapshot(tb testing.TB, s *retrieve.Snapshot) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := retrieve.WriteSnapshot(&buf, s); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		snap *retrieve.Snapshot
	}{
		{"corpus", testSnapshot()},
		{"empty", &retrieve.Snapshot{Dim: 3, Embedder: "x", Chunks: []rag.Chunk{}, Vectors: [][]float32{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := retrieve.ReadSnapshot(bytes.NewReader(encodeSnapshot(t, tt.snap)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.snap) {
				t.Errorf("read back %+v, want %+v", got, tt.snap)
			}
		})
	}
}

func TestSnapshotRejectsDamage(t *testing.T) {
	good := encodeSnapshot(t, testSnapshot())
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 0x10; return b }
	tests := []struct {
		name string
		data []byte
	}{
		{"empty file", nil},
		{"other format", []byte("PK\x03\x04 a zip file")},
		{"truncated in the header", good[:12]},
		{"truncated in a vector", good[:len(good)/2]},
		{"checksum missing", good[:len(good)-4]},
		{"flipped byte in a chunk", flip(len(good) / 3)},
		{"flipped byte in a vector", flip(len(good) - 10)},
		{"flipped checksum", flip(len(good) - 1)},
		{"trailing data", append(bytes.Clone(good), 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := retrieve.ReadSnapshot(bytes.NewReader(tt.data)); !errors.Is(err, retrieve.ErrBadSnapshot) {
				t.Errorf("ReadSnapshot: %v, want ErrBadSnapshot", err)
			}
		})
	}
}

func TestWriteSnapshotValidates(t *testing.T) {
	tests := []struct {
		name string
		snap *retrieve.Snapshot
	}{
		{"no dimension", &retrieve.Snapshot{}},
		{"count mismatch", &retrieve.Snapshot{Dim: 2, Chunks: []rag.Chunk{{ID: "a"}}}},
		{"short vector", &retrieve.Snapshot{Dim: 2, Chunks: []rag.Chunk{{ID: "a"}}, Vectors: [][]float32{{1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := retrieve.WriteSnapshot(&buf, tt.snap); !errors.Is(err, rag.ErrInvalidRequest) || buf.Len() != 0 {
				t.Errorf("WriteSnapshot: %v after %d bytes; want rag.ErrInvalidRequest and nothing written", err, buf.Len())
			}
		})
	}
}

func TestSnapshotAddTo(t *testing.T) {
	snap := testSnapshot()
	m, err := retrieve.NewMemory(snap.Dim, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.AddTo(m); err != nil {
		t.Fatal(err)
	}
	if m.Len() != len(snap.Chunks) {
		t.Fatalf("index holds %d vectors, want %d", m.Len(), len(snap.Chunks))
	}
	hits, err := m.SearchAll(context.Background(), snap.Vectors[7], 1)
	if err != nil || len(hits) != 1 || hits[0].ChunkID != snap.Chunks[7].ID {
		t.Errorf("searching a stored vector found %v, %v; want %s", hits, err, snap.Chunks[7].ID)
	}
	other, _ := retrieve.NewMemory(snap.Dim+1, 1)
	if err := snap.AddTo(other); !errors.Is(err, rag.ErrInvalidRequest) {
		t.Errorf("AddTo an index of another dimension: %v", err)
	}
}

// FuzzReadSnapshot: arbitrary files never panic the reader, and whatever it accepts writes back
// to the same bytes.
func FuzzReadSnapshot(f *testing.F) {
	f.Add(encodeSnapshot(f, testSnapshot()))
	f.Add(encodeSnapshot(f, &retrieve.Snapshot{Dim: 1, Chunks: []rag.Chunk{{ID: "a"}}, Vectors: [][]float32{{1}}}))
	f.Add([]byte("RGTSNAP\x01\x02{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := retrieve.ReadSnapshot(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, retrieve.ErrBadSnapshot) {
				t.Fatalf("error %v does not match ErrBadSnapshot", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := retrieve.WriteSnapshot(&buf, s); err != nil {
			t.Fatalf("cannot write back an accepted snapshot: %v", err)
		}
		again, err := retrieve.ReadSnapshot(&buf)
		if err != nil || len(again.Chunks) != len(s.Chunks) || again.Embedder != s.Embedder {
			t.Fatalf("accepted snapshot does not survive a round trip: %v", err)
		}
	})
}

func BenchmarkReadSnapshot(b *testing.B) {
	chunks, vecs := testCorpus(2000, 384, 13)
	data := encodeSnapshot(b, &retrieve.Snapshot{Dim: 384, Embedder: "hash", Chunks: chunks, Vectors: vecs})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := retrieve.ReadSnapshot(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
