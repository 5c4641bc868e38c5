package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// sseNormalizer passes an event stream through unchanged except for llama.cpp's error lines.
// llama.cpp's server reports a failure inside a stream as a line "error: {json}", a field name
// the SSE specification does not have and the SDK's decoder ignores, so the stream would just
// end without saying why. The normalizer rewrites such a line into the OpenAI form
// "data: {"error": {json}}", which the SDK reports as a stream error.
//
// It forwards every other byte as soon as it has it: it never holds back a line it has not yet
// decided about, except the few bytes of a line that starts like "error:".
type sseNormalizer struct {
	src       *bufio.Reader
	body      io.Closer
	out       []byte // bytes ready for Read
	lineStart bool
	err       error
}

// maxErrorLine bounds an error line kept in memory.
const maxErrorLine = 64 << 10

func newSSENormalizer(body io.ReadCloser) *sseNormalizer {
	// Lines longer than the buffer pass through in pieces; only error lines are kept whole.
	return &sseNormalizer{src: bufio.NewReaderSize(body, 8<<10), body: body, lineStart: true}
}

func (n *sseNormalizer) Read(p []byte) (int, error) {
	for len(n.out) == 0 {
		if n.err != nil {
			return 0, n.err
		}
		n.fill()
	}
	k := copy(p, n.out)
	n.out = n.out[k:]
	return k, nil
}

func (n *sseNormalizer) Close() error { return n.body.Close() }

func (n *sseNormalizer) fill() {
	if n.lineStart && n.startsErrorLine() {
		line, err := readLine(n.src, maxErrorLine)
		n.out = rewriteErrorLine(line)
		n.lineStart = true
		if err != nil {
			n.err = err
		}
		return
	}
	b, err := n.src.ReadSlice('\n')
	n.out = append(n.out[:0], b...)
	if len(b) > 0 {
		n.lineStart = b[len(b)-1] == '\n'
	}
	if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
		n.err = err
	}
}

// startsErrorLine reports whether the next line starts with "error:". It looks at one byte more
// only while the bytes so far match, so an ordinary line is never waited on.
func (n *sseNormalizer) startsErrorLine() bool {
	const prefix = "error:"
	for k := 1; k <= len(prefix); k++ {
		b, _ := n.src.Peek(k)
		if len(b) < k || b[k-1] != prefix[k-1] {
			return false
		}
	}
	return true
}

// readLine reads up to and including '\n', keeping at most limit bytes of the line.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		b, err := r.ReadSlice('\n')
		if len(line) < limit {
			line = append(line, b[:min(len(b), limit-len(line))]...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// rewriteErrorLine turns "error: VALUE\n" into "data: {"error":VALUE}\n", quoting VALUE when it
// is not a JSON object.
func rewriteErrorLine(line []byte) []byte {
	value := bytes.TrimSpace(bytes.TrimPrefix(line, []byte("error:")))
	if !json.Valid(value) || len(value) == 0 || value[0] != '{' {
		quoted, _ := json.Marshal(map[string]string{"message": string(value)})
		value = quoted
	}
	out := make([]byte, 0, len(value)+20)
	out = append(out, `data: {"error":`...)
	out = append(out, value...)
	return append(out, "}\n"...)
}
