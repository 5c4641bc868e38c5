package dataset

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// ReadKeys reads keys, one per line; blank lines are skipped and surrounding space trimmed.
func ReadKeys(r io.Reader) ([]string, error) {
	var keys []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if k := strings.TrimSpace(sc.Text()); k != "" {
			keys = append(keys, k)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	if len(keys) == 0 {
		return nil, errors.New("read keys: no keys")
	}
	return keys, nil
}

// DefaultKeyPath is where ragtail serves documents: GET /v1/documents/{id}. A sessions file's
// {"key": id} step is a GET of DefaultKeyPath + EscapeKey(id).
const DefaultKeyPath = "/v1/documents/"

// EscapeKey escapes a document key for a URL path, keeping its slashes (ids of ingested files
// hold them) and escaping everything else, '#' included.
func EscapeKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}
