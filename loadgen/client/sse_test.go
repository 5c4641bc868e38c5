package client

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

type sseEvent struct{ event, data string }

// readAllEvents reads every event of r with the parser under test.
func readAllEvents(tb testing.TB, r io.Reader) ([]sseEvent, error) {
	tb.Helper()
	sr := newSSEReader(r)
	var out []sseEvent
	for {
		ev, data, _, err := sr.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, sseEvent{string(ev), string(data)})
	}
}

// referenceEvents is a direct transcription of the WHATWG event-stream interpretation (plus
// the parser's one leniency: an event cut by the end of the stream is dispatched), written for
// clarity rather than speed, to check the parser against.
func referenceEvents(s string) []sseEvent {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	lines := strings.Split(s, "\n")
	var out []sseEvent
	var data []string
	event, has := "", false
	for _, line := range lines {
		switch {
		case line == "":
			if has {
				out = append(out, sseEvent{event, strings.Join(data, "\n")})
			}
			data, event, has = nil, "", false
		case line[0] == ':':
		default:
			field, value, found := strings.Cut(line, ":")
			if found {
				value = strings.TrimPrefix(value, " ")
			}
			switch field {
			case "data":
				data, has = append(data, value), true
			case "event":
				event = value
			}
		}
	}
	if has {
		out = append(out, sseEvent{event, strings.Join(data, "\n")})
	}
	return out
}

func TestSSEReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream string
		want   []sseEvent
	}{
		{"lf", "data: a\n\ndata: b\n\n", []sseEvent{{"", "a"}, {"", "b"}}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []sseEvent{{"", "a"}, {"", "b"}}},
		{"cr", "data: a\r\rdata: b\r\r", []sseEvent{{"", "a"}, {"", "b"}}},
		{"comments and keep-alives", ": ping\n\n: rag {\"stage\":\"retrieve\"}\ndata: x\n\n", []sseEvent{{"", "x"}}},
		{"multi-line data", "data: {\"a\":\ndata: 1}\n\n", []sseEvent{{"", "{\"a\":\n1}"}}},
		{"no space after colon", "data:x\n\n", []sseEvent{{"", "x"}}},
		{"only one space stripped", "data:  x\n\n", []sseEvent{{"", " x"}}},
		{"event type", "event: error\ndata: {\"message\":\"boom\"}\n\ndata: y\n\n", []sseEvent{{"error", "{\"message\":\"boom\"}"}, {"", "y"}}},
		{"event type resets after dispatch", "event: e\n\ndata: z\n\n", []sseEvent{{"", "z"}}},
		{"ignored fields", "id: 7\nretry: 10\nfoo: bar\ndata: q\n\n", []sseEvent{{"", "q"}}},
		{"cut without blank line", "data: a\n\ndata: [DONE]", []sseEvent{{"", "a"}, {"", "[DONE]"}}},
		{"empty stream", "", nil},
		{"field without colon", "data\n\n", []sseEvent{{"", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, r := range []io.Reader{strings.NewReader(tt.stream), iotest.OneByteReader(strings.NewReader(tt.stream)), iotest.DataErrReader(strings.NewReader(tt.stream))} {
				got, err := readAllEvents(t, r)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("events = %q, want %q", got, tt.want)
				}
				if ref := referenceEvents(tt.stream); !slices.Equal(ref, tt.want) {
					t.Errorf("reference disagrees with the table: %q", ref)
				}
			}
		})
	}
}

func TestSSEReaderLongLines(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100_000) // beyond the initial 8 KiB buffer
	got, err := readAllEvents(t, strings.NewReader("data: "+long+"\n\ndata: b\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].data != long || got[1].data != "b" {
		t.Fatalf("got %d events", len(got))
	}
	huge := strings.NewReader("data: " + strings.Repeat("y", maxEventBytes+10) + "\n\n")
	if _, err := readAllEvents(t, huge); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("err = %v, want errEventTooLarge", err)
	}
}

func TestSSEReaderBrokenStream(t *testing.T) {
	t.Parallel()
	broken := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(broken))
	got, err := readAllEvents(t, r)
	if !errors.Is(err, broken) {
		t.Fatalf("err = %v, want the reader's error", err)
	}
	if len(got) != 1 || got[0].data != "a" {
		t.Fatalf("events before the break = %q", got)
	}
}

// FuzzSSEReader checks the parser against the reference interpretation on any input, read in
// one piece and byte by byte (which splits CRLF pairs across reads).
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"data: a\n\n", "data: a\r\n\r\n", "data: a\r\r", ": c\ndata: x\ndata: y\n\n",
		"event: error\ndata: {}\n\n", "data: [DONE]", "data:\n\n", "\r\n\r\n", "data: a\r",
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := referenceEvents(string(b))
		for _, r := range []io.Reader{bytes.NewReader(b), iotest.OneByteReader(bytes.NewReader(b))} {
			got, err := readAllEvents(t, r)
			if err != nil {
				if errors.Is(err, errEventTooLarge) {
					return
				}
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("events = %q, reference %q", got, want)
			}
		}
	})
}
