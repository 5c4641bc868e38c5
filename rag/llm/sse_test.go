package llm

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAllSmall reads r a few bytes at a time, as the SDK's scanner may.
func readAllSmall(r io.Reader) ([]byte, error) {
	return io.ReadAll(iotest.OneByteReader(r))
}

func TestSSENormalizer(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"data lines pass", "data: {\"a\":1}\n\ndata: [DONE]\n\n", "data: {\"a\":1}\n\ndata: [DONE]\n\n"},
		{"event lines pass", "event: error\ndata: {\"x\":1}\n\n", "event: error\ndata: {\"x\":1}\n\n"},
		{"comments pass", ": keep-alive\n\n", ": keep-alive\n\n"},
		{"llama.cpp error line", "data: {}\n\nerror: {\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}\n\n",
			"data: {}\n\ndata: {\"error\":{\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}}\n\n"},
		{"error line without json", "error: the slot died\n\n", "data: {\"error\":{\"message\":\"the slot died\"}}\n\n"},
		{"error line at the end without newline", "error: {\"message\":\"x\"}", "data: {\"error\":{\"message\":\"x\"}}\n"},
		{"error inside a line is data", "data: error: {}\n\n", "data: error: {}\n\n"},
		{"almost error", "erro\n\nerrors: x\n\n", "erro\n\nerrors: x\n\n"},
		{"crlf", "data: {}\r\n\r\n", "data: {}\r\n\r\n"},
		{"line longer than the buffer", "data: \"" + strings.Repeat("x", 20000) + "\"\n\n", "data: \"" + strings.Repeat("x", 20000) + "\"\n\n"},
		{"long error line", "error: {\"message\":\"" + strings.Repeat("y", 20000) + "\"}\n\n",
			"data: {\"error\":{\"message\":\"" + strings.Repeat("y", 20000) + "\"}}\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAllSmall(newSSENormalizer(io.NopCloser(strings.NewReader(tt.in))))
			if err != nil || string(got) != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestSSENormalizerDoesNotWait: an event is passed on as soon as its blank line arrives, even if
// nothing follows yet; holding it back would delay every token by one inter-token gap.
func TestSSENormalizerDoesNotWait(t *testing.T) {
	pr, pw := io.Pipe()
	n := newSSENormalizer(pr)
	go func() { _, _ = pw.Write([]byte("data: {\"t\":1}\n\n")) }() // and then nothing, for now
	buf := make([]byte, 64)
	var got []byte
	for !bytes.HasSuffix(got, []byte("\n\n")) {
		k, err := n.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:k]...)
	}
	if string(got) != "data: {\"t\":1}\n\n" {
		t.Errorf("got %q", got)
	}
	_ = pw.Close()
	_ = n.Close()
}

// FuzzSSENormalizer: a stream without llama.cpp error lines passes through byte for byte, and
// one with them keeps every other line.
func FuzzSSENormalizer(f *testing.F) {
	f.Add([]byte("data: {}\n\nerror: {\"message\":\"x\"}\n\n"))
	f.Add([]byte("event: e\ndata: 1\n\n: c\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := readAllSmall(newSSENormalizer(io.NopCloser(bytes.NewReader(in))))
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.SplitAfter(in, []byte("\n"))
		var want []byte
		for _, l := range lines {
			if bytes.HasPrefix(l, []byte("error:")) {
				want = append(want, rewriteErrorLine(l)...)
				continue
			}
			want = append(want, l...)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("normalized %q to %q, want %q", in, got, want)
		}
	})
}
