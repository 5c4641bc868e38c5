package corpus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/ragtail/ragtail/rag"
)

// ChunkOptions controls how documents are split into chunks.
type ChunkOptions struct {
	// Tokens is the target chunk length in tokens (rag.CountTokens); 0 means 256.
	Tokens int
	// Overlap is how many tokens of the end of one chunk start the next; 0 means 32 and a
	// negative value means none. It must be smaller than Tokens.
	Overlap int
	// MaxFileBytes skips files larger than this; 0 means 16 MiB.
	MaxFileBytes int64
}

func (o ChunkOptions) withDefaults() (ChunkOptions, error) {
	if o.Tokens == 0 {
		o.Tokens = 256
	}
	switch {
	case o.Overlap == 0:
		o.Overlap = 32
	case o.Overlap < 0:
		o.Overlap = 0
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = 16 << 20
	}
	if o.Tokens < 8 || o.Overlap >= o.Tokens {
		return o, fmt.Errorf("%w: chunk of %d tokens with %d of overlap: want at least 8 tokens and overlap below that", rag.ErrInvalidRequest, o.Tokens, o.Overlap)
	}
	return o, nil
}

// Skipped is a file LoadDir passed over, with why.
type Skipped struct {
	Path   string
	Reason string
}

// LoadDir reads every .md, .markdown and .txt file under dir (recursively, in lexical order,
// ignoring hidden files and directories) and splits each into chunks. Chunk ids are the file's
// slash-separated path relative to dir plus "#" and the chunk's index, so loading the same tree
// again yields the same ids (ingestion is idempotent). The title of a chunk is the file's first
// Markdown heading, or its name. Files that are not UTF-8 text or are too large are skipped and
// reported.
func LoadDir(dir string, o ChunkOptions) ([]rag.Chunk, []Skipped, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read corpus directory: %w", err)
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("read corpus directory: %s is not a directory", dir)
	}
	var chunks []rag.Chunk
	var skipped []Skipped
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if path != dir && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isText(name) {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Size() > o.MaxFileBytes {
			skipped = append(skipped, Skipped{rel, fmt.Sprintf("larger than %d bytes", o.MaxFileBytes)})
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !utf8.Valid(b) {
			skipped = append(skipped, Skipped{rel, "not UTF-8 text"})
			return nil
		}
		chunks = append(chunks, Split(rel, titleOf(string(b), name), string(b), o)...)
		return nil
	})
	if err != nil {
		return nil, skipped, fmt.Errorf("read corpus directory: %w", err)
	}
	if len(chunks) == 0 {
		return nil, skipped, fmt.Errorf("read corpus directory %s: %w", dir, ErrEmpty)
	}
	return chunks, skipped, nil
}

func isText(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".md" || ext == ".markdown" || ext == ".txt"
}

// titleOf returns the first ATX heading ("# Title", up to six #s and a space) outside fenced
// code blocks, or the file name without its extension.
func titleOf(text, name string) string {
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "```") || strings.HasPrefix(line, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		if hashes >= 1 && hashes <= 6 && strings.HasPrefix(line[hashes:], " ") {
			if t := strings.TrimSpace(strings.TrimRight(line[hashes:], "# ")); t != "" {
				return t
			}
		}
	}
	return strings.TrimSuffix(name, filepath.Ext(name))
}

// Split cuts text into chunks of about o.Tokens tokens, each starting with the last o.Overlap
// tokens of the previous one. It cuts between words and prefers to end a chunk at a paragraph or
// sentence end within the last quarter of the chunk. docID names the document in chunk ids.
func Split(docID, title, text string, o ChunkOptions) []rag.Chunk {
	o, err := o.withDefaults()
	if err != nil {
		return nil
	}
	words := splitKeep(text)
	if len(words) == 0 {
		return nil
	}
	cost := make([]int, len(words))
	for i, w := range words {
		cost[i] = rag.CountTokens(w.text)
	}
	var chunks []rag.Chunk
	start := 0
	for start < len(words) {
		end, tokens := start, 0
		for end < len(words) && (tokens+cost[end] <= o.Tokens || end == start) {
			tokens += cost[end]
			end++
		}
		if end < len(words) {
			// Prefer a natural break in the last quarter of the chunk.
			best, run := -1, 0
			for i := end - 1; i > start; i-- {
				run += cost[i]
				if run > o.Tokens/4 {
					break
				}
				if words[i].breakAfter > 0 && (best < 0 || words[i].breakAfter > words[best].breakAfter) {
					best = i
				}
			}
			if best >= 0 {
				end = best + 1
			}
		}
		var sb strings.Builder
		for i := start; i < end; i++ {
			if i > start {
				sb.WriteString(words[i].sep)
			}
			sb.WriteString(words[i].text)
		}
		body := sb.String()
		chunks = append(chunks, rag.Chunk{ID: fmt.Sprintf("%s#%d", docID, len(chunks)), DocID: docID, Title: title,
			Text: body, Tokens: rag.CountTokens(body)})
		if end >= len(words) {
			break
		}
		// Step back Overlap tokens for the next chunk, but always move forward.
		next, back := end, 0
		for next > start+1 && back+cost[next-1] <= o.Overlap {
			next--
			back += cost[next]
		}
		start = next
	}
	return chunks
}

// word is a white-space separated piece of text with the separator before it and how good a
// place it is to end a chunk after it (2 paragraph end, 1 sentence end, 0 neither).
type word struct {
	text, sep  string
	breakAfter int
}

func splitKeep(text string) []word {
	var out []word
	fields := strings.Fields(text)
	pos := 0
	for _, f := range fields {
		i := strings.Index(text[pos:], f)
		sep := text[pos : pos+i]
		pos += i + len(f)
		w := word{text: f, sep: " "}
		if strings.Contains(sep, "\n\n") {
			w.sep = "\n\n"
			if len(out) > 0 {
				out[len(out)-1].breakAfter = 2
			}
		} else if strings.Contains(sep, "\n") {
			w.sep = "\n"
		}
		if last := f[len(f)-1]; last == '.' || last == '?' || last == '!' {
			w.breakAfter = 1
		}
		out = append(out, w)
	}
	if len(out) > 0 {
		out[0].sep = ""
	}
	return out
}

// ErrEmpty reports a corpus directory with no text files.
var ErrEmpty = errors.New("no .md or .txt files found")
