package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ragtail/ragtail/loadgen/report"
)

// WriteOutputs writes the JSON and HTML files asked for, then prints the text report (or the
// JSON, for --json -): files first, so that a closed stdout cannot lose them.
func WriteOutputs(stdout io.Writer, v report.Document, jsonOut, htmlOut string) error {
	if jsonOut != "" && jsonOut != "-" {
		if err := WriteOutput(jsonOut, stdout, func(w io.Writer) error { return report.WriteJSON(w, v) }); err != nil {
			return err
		}
	}
	if htmlOut != "" {
		if err := WriteOutput(htmlOut, stdout, func(w io.Writer) error { return report.WriteHTML(w, v) }); err != nil {
			return err
		}
	}
	if jsonOut == "-" {
		return report.WriteJSON(stdout, v)
	}
	return writeText(stdout, v)
}

// WriteOutput writes a file through a temporary file renamed into place, so a failed or
// interrupted write never leaves half a report; "-" writes to stdout.
func WriteOutput(path string, stdout io.Writer, write func(io.Writer) error) error {
	f, err := createOutput(path, stdout)
	if err != nil {
		return err
	}
	defer f.abort()
	if err := write(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.commit()
}

// outputFile is a result file being written: a temporary file beside it, renamed into place by
// commit, or stdout for "-".
type outputFile struct {
	io.Writer
	path   string
	tmp    *os.File // nil for stdout, and once committed or aborted
	direct *os.File // a path that is not a regular file (/dev/null, a FIFO), written in place
}

func createOutput(path string, stdout io.Writer) (*outputFile, error) {
	if path == "-" {
		return &outputFile{Writer: stdout, path: path}, nil
	}
	// A device or a pipe is written in place: renaming a file over it would replace it (as
	// root, --json /dev/null would leave a regular file where the null device was).
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, fmt.Errorf("create %s: it is a directory; name a file", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		return &outputFile{Writer: f, path: path, direct: f}, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &outputFile{Writer: tmp, path: path, tmp: tmp}, nil
}

// commit puts the file in place.
func (f *outputFile) commit() error {
	if f.direct != nil {
		err := f.direct.Close()
		f.direct = nil
		if err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
		return nil
	}
	if f.tmp == nil {
		return nil
	}
	tmp := f.tmp
	f.tmp = nil
	err := tmp.Chmod(0o644)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	return nil
}

// abort removes the temporary file unless it was committed.
func (f *outputFile) abort() {
	if f.direct != nil {
		_ = f.direct.Close()
		f.direct = nil
	}
	if f.tmp != nil {
		_ = f.tmp.Close()
		_ = os.Remove(f.tmp.Name())
		f.tmp = nil
	}
}
