package client

import (
	"bytes"
	"errors"
	"io"
	"time"
)

// maxEventBytes bounds one event (and one line): a server that never ends a line cannot make the
// generator buffer without limit.
const maxEventBytes = 4 << 20

// errEventTooLarge is returned for an event or line over maxEventBytes.
var errEventTooLarge = errors.New("server-sent event larger than 4 MiB")

// sseReader reads server-sent events as the WHATWG specification defines them: lines end in
// CRLF, LF or CR; "data" lines of one event are joined by LF; "event" sets the type; lines
// starting with ':' are comments; a blank line dispatches the event. Unlike a browser it also
// dispatches an event the stream ended in the middle of, so a last "data: [DONE]" without its
// blank line still counts. It records when each read returned, so that an event's arrival time
// is when its bytes came off the connection, not when it was parsed.
type sseReader struct {
	r        io.Reader
	buf      []byte
	pos, end int
	err      error // sticky error of r
	skipLF   bool  // the previous line ended in CR: a following LF belongs to it
	readAt   time.Time

	data    []byte
	event   []byte
	hasData bool
}

// newSSEReader returns a reader of the events in r.
func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: r, buf: make([]byte, 8<<10)}
}

// reset points s at a new stream, keeping its buffers.
func (s *sseReader) reset(r io.Reader) {
	s.r, s.pos, s.end, s.err, s.skipLF, s.readAt = r, 0, 0, nil, false, time.Time{}
	s.data, s.event, s.hasData = s.data[:0], s.event[:0], false
}

// next returns the next event's type and data, valid until the next call, and when the read
// that completed it returned. It returns io.EOF at the end of the stream and the reader's
// error if the stream broke.
func (s *sseReader) next() (event, data []byte, at time.Time, err error) {
	s.data, s.event, s.hasData = s.data[:0], s.event[:0], false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && s.hasData {
				return s.event, s.data, s.readAt, nil
			}
			return nil, nil, s.readAt, err
		}
		if len(line) == 0 {
			if s.hasData {
				return s.event, s.data, s.readAt, nil
			}
			s.event = s.event[:0]
			continue
		}
		if line[0] == ':' {
			continue // a comment: keep-alives, ragtail's retrieval progress
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if s.hasData {
				s.data = append(s.data, '\n')
			}
			if len(s.data)+len(value) > maxEventBytes {
				return nil, nil, s.readAt, errEventTooLarge
			}
			s.data = append(s.data, value...)
			s.hasData = true
		case "event":
			s.event = append(s.event[:0], value...)
		}
		// id and retry do not matter to a benchmark; unknown fields are ignored, as specified.
	}
}

// readLine returns the next line without its terminator; the slice is valid until the next call.
func (s *sseReader) readLine() ([]byte, error) {
	scanned := 0 // bytes of buf[pos:end] known to hold no terminator
	for {
		if s.skipLF && s.pos < s.end {
			if s.buf[s.pos] == '\n' {
				s.pos++
			}
			s.skipLF = false
		}
		if i := indexEOL(s.buf[s.pos+scanned : s.end]); i >= 0 {
			i += scanned
			line := s.buf[s.pos : s.pos+i]
			if s.buf[s.pos+i] == '\r' {
				s.skipLF = true
			}
			s.pos += i + 1
			return line, nil
		}
		scanned = s.end - s.pos
		if s.err != nil {
			if s.pos < s.end {
				line := s.buf[s.pos:s.end]
				s.pos = s.end
				return line, nil
			}
			return nil, s.err
		}
		if err := s.fill(); err != nil {
			return nil, err
		}
	}
}

// fill reads more of the stream into buf, compacting or growing it as needed.
func (s *sseReader) fill() error {
	if s.pos > 0 && s.pos == s.end {
		s.pos, s.end = 0, 0
	}
	if s.end == len(s.buf) {
		if s.pos > 0 {
			n := copy(s.buf, s.buf[s.pos:s.end])
			s.pos, s.end = 0, n
		} else {
			if len(s.buf) >= maxEventBytes {
				return errEventTooLarge
			}
			nb := make([]byte, min(2*len(s.buf), maxEventBytes))
			copy(nb, s.buf[:s.end])
			s.buf = nb
		}
	}
	for range 100 { // io.Reader allows empty reads; bufio gives up after 100 in a row too
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		if n > 0 {
			s.readAt = time.Now()
		}
		if err != nil {
			s.err = err
			return nil
		}
		if n > 0 {
			return nil
		}
	}
	s.err = io.ErrNoProgress
	return nil
}

// indexEOL returns the index of the first CR or LF in b, or -1. Both searches are vectorised;
// lone CRs are rare, so the second one usually scans a short prefix.
func indexEOL(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	limit := b
	if lf >= 0 {
		limit = b[:lf]
	}
	if cr := bytes.IndexByte(limit, '\r'); cr >= 0 {
		return cr
	}
	return lf
}
