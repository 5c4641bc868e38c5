package retrieve

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"

	"github.com/ragtail/ragtail/rag"
)

// Snapshot is an embedded corpus on disk: chunks with their vectors and the embedder that made
// them, written by `ragtail ingest --snapshot` and loaded by `ragtail serve --snapshot` instead of
// the built-in corpus, so that a directory is chunked and embedded once.
//
// The file is binary, little-endian, and self-checking:
//
//	magic    "RGTSNAP\x01" (the last byte is the format version)
//	header   uvarint length, then JSON {"dim":D,"embedder":"...","chunks":N}
//	N times  uvarint length, then the chunk as JSON (rag.Chunk's fields),
//	         then D float32 vector components
//	trailer  CRC-32C of every byte before it, 4 bytes
type Snapshot struct {
	Dim      int         // vector length
	Embedder string      // what made the vectors, e.g. "hash dim=384 seed=1"
	Chunks   []rag.Chunk // the chunks, in ingest order
	Vectors  [][]float32 // Vectors[i] embeds Chunks[i]
}

// ErrBadSnapshot means a snapshot file is truncated, corrupt or of another format.
var ErrBadSnapshot = errors.New("not a valid ragtail snapshot")

const snapshotMagic = "RGTSNAP\x01"

// Bounds on what ReadSnapshot accepts, so a corrupt length cannot make it allocate gigabytes.
const (
	maxSnapshotHeader = 64 << 10
	maxSnapshotChunk  = 64 << 20
	maxSnapshotDim    = 65536
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type snapshotHeader struct {
	Dim      int    `json:"dim"`
	Embedder string `json:"embedder"`
	Chunks   int    `json:"chunks"`
}

// WriteSnapshot writes s to w. Every vector must have s.Dim components.
func WriteSnapshot(w io.Writer, s *Snapshot) error {
	if s.Dim < 1 || s.Dim > maxSnapshotDim {
		return fmt.Errorf("%w: snapshot dimension %d: want 1 to %d", rag.ErrInvalidRequest, s.Dim, maxSnapshotDim)
	}
	if len(s.Chunks) != len(s.Vectors) {
		return fmt.Errorf("%w: snapshot has %d chunks but %d vectors", rag.ErrInvalidRequest, len(s.Chunks), len(s.Vectors))
	}
	for i, v := range s.Vectors {
		if len(v) != s.Dim {
			return fmt.Errorf("%w: snapshot vector of %q has %d components, want %d", rag.ErrInvalidRequest, s.Chunks[i].ID, len(v), s.Dim)
		}
	}
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriter(io.MultiWriter(w, crc))
	header, err := json.Marshal(snapshotHeader{Dim: s.Dim, Embedder: s.Embedder, Chunks: len(s.Chunks)})
	if err != nil {
		return fmt.Errorf("encode snapshot header: %w", err)
	}
	_, _ = bw.WriteString(snapshotMagic) // a bufio.Writer keeps its first error for Flush
	writeBlock(bw, header)
	buf := make([]byte, 4*s.Dim)
	for i, c := range s.Chunks {
		b, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("encode chunk %q: %w", c.ID, err)
		}
		writeBlock(bw, b)
		for j, x := range s.Vectors[i] {
			binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(x))
		}
		_, _ = bw.Write(buf)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc.Sum32())
	if _, err := w.Write(sum[:]); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

// writeBlock writes a length-prefixed block; w keeps its first error for Flush.
func writeBlock(w *bufio.Writer, b []byte) {
	var n [binary.MaxVarintLen64]byte
	_, _ = w.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	_, _ = w.Write(b)
}

// checkedReader reads through a bufio.Reader and hashes what it reads.
type checkedReader struct {
	r   *bufio.Reader
	crc hash.Hash32
}

func (c *checkedReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.crc.Write([]byte{b})
	}
	return b, err
}

func (c *checkedReader) full(p []byte) error {
	if _, err := io.ReadFull(c.r, p); err != nil {
		return err
	}
	c.crc.Write(p)
	return nil
}

func (c *checkedReader) block(limit int, what string) ([]byte, error) {
	n, err := binary.ReadUvarint(c)
	if err != nil {
		return nil, fmt.Errorf("%s length: %w", what, err)
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("%s of %d bytes is over the limit of %d", what, n, limit)
	}
	b := make([]byte, n)
	if err := c.full(b); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}

// ReadSnapshot reads a snapshot written by WriteSnapshot. A file that is truncated, corrupt
// (checksum mismatch) or not a snapshot returns an error matching ErrBadSnapshot.
func ReadSnapshot(r io.Reader) (*Snapshot, error) {
	s, err := readSnapshot(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	return s, nil
}

func readSnapshot(r io.Reader) (*Snapshot, error) {
	cr := &checkedReader{r: bufio.NewReaderSize(r, 1<<16), crc: crc32.New(castagnoli)}
	magic := make([]byte, len(snapshotMagic))
	if err := cr.full(magic); err != nil {
		return nil, fmt.Errorf("magic: %w", err)
	}
	if string(magic) != snapshotMagic {
		return nil, errors.New("wrong magic bytes (not written by ragtail ingest --snapshot, or another format version)")
	}
	raw, err := cr.block(maxSnapshotHeader, "header")
	if err != nil {
		return nil, err
	}
	var h snapshotHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if h.Dim < 1 || h.Dim > maxSnapshotDim || h.Chunks < 0 {
		return nil, fmt.Errorf("header: dimension %d and %d chunks out of range", h.Dim, h.Chunks)
	}
	// Grow as the data arrives rather than trusting the count with one allocation.
	s := &Snapshot{Dim: h.Dim, Embedder: h.Embedder, Chunks: make([]rag.Chunk, 0, min(h.Chunks, 1<<12)), Vectors: make([][]float32, 0, min(h.Chunks, 1<<12))}
	buf := make([]byte, 4*h.Dim)
	for i := range h.Chunks {
		raw, err := cr.block(maxSnapshotChunk, fmt.Sprintf("chunk %d", i))
		if err != nil {
			return nil, err
		}
		var c rag.Chunk
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		if err := cr.full(buf); err != nil {
			return nil, fmt.Errorf("vector %d: %w", i, err)
		}
		v := make([]float32, h.Dim)
		for j := range v {
			v[j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:]))
		}
		s.Chunks, s.Vectors = append(s.Chunks, c), append(s.Vectors, v)
	}
	want := cr.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(cr.r, sum[:]); err != nil {
		return nil, fmt.Errorf("checksum: %w", err)
	}
	if got := binary.LittleEndian.Uint32(sum[:]); got != want {
		return nil, fmt.Errorf("checksum %08x, want %08x: the file is corrupt", got, want)
	}
	if _, err := cr.r.ReadByte(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the checksum")
	}
	return s, nil
}

// AddTo inserts the snapshot's vectors into m under their chunk ids. m must have the snapshot's
// dimension.
func (s *Snapshot) AddTo(m *Memory) error {
	if m.Dimension() != s.Dim {
		return fmt.Errorf("%w: snapshot vectors have %d dimensions, index has %d", rag.ErrInvalidRequest, s.Dim, m.Dimension())
	}
	ids := make([]string, len(s.Chunks))
	for i, c := range s.Chunks {
		ids[i] = c.ID
	}
	return m.AddBatch(ids, s.Vectors)
}
