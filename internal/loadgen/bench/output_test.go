package bench

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteOutputIntoAPipe: a path that is not a regular file is written in place, not replaced
// by a file renamed over it (as root, --json /dev/null replaced the null device).
func TestWriteOutputIntoAPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "out.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- "open: " + err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	if err := WriteOutput(fifo, io.Discard, func(w io.Writer) error { _, err := io.WriteString(w, "{}\n"); return err }); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "{}\n" {
		t.Errorf("the reader got %q", s)
	}
	fi, err := os.Stat(fifo)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v, %v", fi.Mode(), err)
	}
	if err := WriteOutput(t.TempDir(), io.Discard, func(io.Writer) error { return nil }); err == nil {
		t.Error("a directory was accepted as the output")
	}
}
