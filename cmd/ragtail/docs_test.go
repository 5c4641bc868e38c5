package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docFiles are the documents whose relative links TestDocLinks checks, relative to the
// repository root; a pattern may match several.
var docFiles = []string{"README.md", "PITFALLS.md", "docs/*.md", "telemetry/COST.md"}

// TestDocLinks: every relative link in the repository's documentation points at a file or
// directory that exists, and every #anchor at a heading of the file it names.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	var files []string
	for _, pattern := range docFiles {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		if len(matches) == 0 {
			t.Errorf("no document matches %s", pattern)
		}
		files = append(files, matches...)
	}
	problems, checked := brokenDocLinks(t, files)
	for _, problem := range problems {
		t.Error(problem)
	}
	if checked < len(files) {
		t.Errorf("%d relative links in %d documents: the link pattern no longer matches them", checked, len(files))
	}
}

// TestBrokenDocLinks: the check finds a missing file, a missing anchor in another file and in
// the same file, and leaves alone what is not a relative link.
func TestBrokenDocLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("docs/other.md", "# Other page\n\n## Side by side: `vegeta` & wrk\n")
	tests := []struct {
		name string
		text string
		want string // a problem containing this, or "" for none
	}{
		{"file exists", "[other](docs/other.md)", ""},
		{"directory exists", "[docs](docs/)", ""},
		{"anchor in another file", "[x](docs/other.md#side-by-side-vegeta--wrk)", ""},
		{"anchor in this file", "## A heading\n\n[x](#a-heading)", ""},
		{"image", "![figure](docs/other.md)", ""},
		{"absolute URL", "[x](https://example.com/missing.md)", ""},
		{"inside a code block", "```\n[x](missing.md)\n```", ""},
		{"inside inline code", "`[x](missing.md)`", ""},
		{"missing file", "see [x](missing.md) here", "missing.md: no such file"},
		{"missing image", "![figure](figures/none.png)", "figures/none.png: no such file"},
		{"missing anchor in another file", "[x](docs/other.md#no-such-heading)", `no heading with anchor "no-such-heading"`},
		{"missing anchor in this file", "# Title\n\n[x](#nowhere)", `no heading with anchor "nowhere"`},
		{"link with a title", `[x](missing.md "title")`, "missing.md: no such file"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := write(fmt.Sprintf("page%d.md", i), tt.text+"\n")
			problems, _ := brokenDocLinks(t, []string{path})
			switch {
			case tt.want == "" && len(problems) > 0:
				t.Errorf("problems %q, want none", problems)
			case tt.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], tt.want)):
				t.Errorf("problems %q, want one containing %q", problems, tt.want)
			}
		})
	}
}

// TestGitHubAnchor: headings become the anchors GitHub gives them.
func TestGitHubAnchor(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"The compose stack", "the-compose-stack"},
		{"What `make test` checks, and what it does not", "what-make-test-checks-and-what-it-does-not"},
		{"Reasoning, priority, memory", "reasoning-priority-memory"},
		{"At run time: /admin/config", "at-run-time-adminconfig"},
		{"1. What a benchmark of a generative service must report", "1-what-a-benchmark-of-a-generative-service-must-report"},
		{"Side by side: vegeta & wrk", "side-by-side-vegeta--wrk"},
		{"The pitfall lab: `ragtail lab`", "the-pitfall-lab-ragtail-lab"},
		{"snake_case and *emphasis*", "snake_case-and-emphasis"},
	}
	for _, tt := range tests {
		if got := githubAnchor(tt.heading); got != tt.want {
			t.Errorf("githubAnchor(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

var (
	// mdLink matches an inline link or image: [text](target) or [text](target "title").
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// mdCodeSpan matches an inline code span, whose text is not markup.
	mdCodeSpan = regexp.MustCompile("`[^`\n]*`")
	// mdHeading matches an ATX heading.
	mdHeading = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	// mdScheme matches a link with a URL scheme (https:, mailto:, ...): not a relative link.
	mdScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// brokenDocLinks returns one problem for every relative link in files whose target does not
// exist, or whose #anchor names no heading of the target, and the number of relative links.
func brokenDocLinks(t *testing.T, files []string) (problems []string, checked int) {
	t.Helper()
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range proseLines(string(b)) {
			if line == "" {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(mdCodeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if mdScheme.MatchString(target) {
					continue
				}
				checked++
				where := fmt.Sprintf("%s:%d: link %s", file, n+1, target)
				ref, anchor, _ := strings.Cut(target, "#")
				path := filepath.Clean(file)
				if ref != "" {
					path = filepath.Join(filepath.Dir(file), filepath.FromSlash(ref))
					info, err := os.Stat(path)
					if err != nil {
						problems = append(problems, fmt.Sprintf("%s: %s: no such file", where, ref))
						continue
					}
					if info.IsDir() || !strings.HasSuffix(path, ".md") {
						if anchor != "" {
							problems = append(problems, fmt.Sprintf("%s: an anchor into %s, which is not a Markdown file", where, ref))
						}
						continue
					}
				}
				if anchor != "" && !anchorsOf(path)[anchor] {
					problems = append(problems, fmt.Sprintf("%s: no heading with anchor %q in %s", where, anchor, path))
				}
			}
		}
	}
	return problems, checked
}

// proseLines returns text's lines with those of fenced code blocks blanked, so that line
// numbers stay those of the file.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors of text's headings, as GitHub makes them: a repeated
// anchor gets -1, -2, ... appended.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := githubAnchor(m[1])
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// githubAnchor is the anchor GitHub gives a heading: lower case, letters, digits, spaces,
// hyphens and underscores kept, spaces turned into hyphens, everything else dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
