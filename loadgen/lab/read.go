package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNotLab is returned by ReadFile for a file that holds no ragtail.lab/v1 result.
var ErrNotLab = errors.New("not a ragtail.lab/v1 result")

// maxLabFile bounds the size of a lab result read back (a full `lab all` is a few MB).
const maxLabFile = 256 << 20

// ReadFile reads the results `ragtail lab --json` wrote to path: one ragtail.lab/v1 object, or
// an array of them (lab all). A file of another schema (a bench or sweep result) gives an error
// wrapping ErrNotLab.
func ReadFile(path string) ([]*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	b, err := io.ReadAll(io.LimitReader(f, maxLabFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxLabFile {
		return nil, fmt.Errorf("%s: larger than %d MB", path, maxLabFile>>20)
	}
	return Decode(b, path)
}

// Decode parses a ragtail.lab/v1 document (an object or an array of them); name is used in
// errors.
func Decode(b []byte, name string) ([]*Result, error) {
	b = bytes.TrimSpace(b)
	var raws []json.RawMessage
	if len(b) > 0 && b[0] == '[' {
		if err := json.Unmarshal(b, &raws); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	} else {
		raws = []json.RawMessage{b}
	}
	if len(raws) == 0 {
		return nil, fmt.Errorf("%s: an empty array: %w", name, ErrNotLab)
	}
	out := make([]*Result, 0, len(raws))
	for i, raw := range raws {
		var head struct {
			Schema string `json:"schema"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, fmt.Errorf("%s: result %d: %w", name, i+1, err)
		}
		if head.Schema != Schema {
			return nil, fmt.Errorf("%s: result %d has schema %.40q: %w", name, i+1, head.Schema, ErrNotLab)
		}
		var r Result
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("%s: result %d: %w", name, i+1, err)
		}
		out = append(out, &r)
	}
	return out, nil
}

// IsLabFile reports whether path holds ragtail.lab/v1 results, reading only its start: the
// first "schema" key of a lab result comes first in the file.
func IsLabFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }() // read only
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	return bytes.Contains(head[:n], []byte(`"schema": "`+Schema+`"`)) || bytes.Contains(head[:n], []byte(`"schema":"`+Schema+`"`))
}

// Render writes results as `ragtail lab` does: each one's table and, for several, the summary,
// to w (unless quiet); the HTML page to htmlPath and the JSON again to jsonPath ("-" writes
// either to w instead of the tables; empty skips it).
func Render(w io.Writer, results []*Result, jsonPath, htmlPath string, quiet bool) error {
	if htmlPath == "-" && jsonPath == "-" {
		return errors.New("--html and --json cannot both go to standard output")
	}
	toFile := func(p string) string {
		if p == "-" {
			return ""
		}
		return p
	}
	if err := WriteFiles(results, toFile(jsonPath), toFile(htmlPath)); err != nil {
		return err
	}
	switch {
	case htmlPath == "-":
		return WriteHTML(w, results)
	case jsonPath == "-":
		var v any = results
		if len(results) == 1 {
			v = results[0]
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case quiet:
		return nil
	}
	for _, r := range results {
		if err := WriteText(w, r); err != nil {
			return err
		}
	}
	if len(results) > 1 {
		return WriteSummary(w, results)
	}
	return nil
}
