// Command testsum runs `go test -json ...` and prints what a reader of a CI log needs: the
// output of every test that failed, each package's ok/FAIL line, build errors, and at the end
// the count of tests that passed, failed and were skipped, with each skip's reason. With -v it
// prints the output of every test that ran (the timing tests' measured figures), not only of
// the failed ones. It exits non-zero when the command does, or when any test failed.
//
//	go run ./tools/testsum -- go test -race -json ./...
//	go run ./tools/testsum -v -- go test -json -run 'TestSheddingAtOverload' ./rag/service/
//
// make test and make test-timing run the tests through it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	verbose := flag.Bool("v", false, "print the output of every test that ran, not only of those that failed")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testsum [-v] -- go test -json [flags] [packages]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	signal.Ignore(syscall.SIGINT) // the child gets the terminal's Ctrl-C and ends the stream
	os.Exit(run(context.Background(), flag.Args(), *verbose, os.Stdout, os.Stderr))
}

// run runs argv, summarises its test2json stream on stdout and returns the exit status.
func run(ctx context.Context, argv []string, verbose bool, stdout, stderr io.Writer) int {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testsum: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testsum: start %s: %v\n", argv[0], err)
		return 2
	}
	s := newSummary(stdout, verbose)
	if err := s.read(out); err != nil {
		fmt.Fprintf(stderr, "testsum: read the test output: %v\n", err)
	}
	werr := cmd.Wait()
	s.report()
	var exit *exec.ExitError
	switch {
	case errors.As(werr, &exit):
		return max(exit.ExitCode(), 1)
	case werr != nil:
		fmt.Fprintf(stderr, "testsum: %v\n", werr)
		return 2
	case s.failed > 0:
		return 1
	}
	return 0
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output and build-fail events
}

// summary follows the tests of a run.
type summary struct {
	w       io.Writer
	verbose bool
	tree    map[string][]string // top-level test key -> output of it and its subtests, in order
	own     map[string][]string // test key -> its own output, for a skip's reason
	skips   []string            // "pkg TestName: reason"

	passed, failed, skipped int
}

func newSummary(w io.Writer, verbose bool) *summary {
	return &summary{w: w, verbose: verbose, tree: map[string][]string{}, own: map[string][]string{}}
}

// maxLine bounds one line of test output: a test that prints a huge line does not take the
// summariser's memory with it.
const maxLine = 16 << 20

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(s.w, "%s\n", line) // not an event: pass it on as it is
			continue
		}
		s.event(e)
	}
	return sc.Err()
}

// noise is output that says nothing a summary needs: go test -v's progress markers.
func noise(line string) bool {
	t := strings.TrimSpace(line)
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return t == "PASS" || t == ""
}

func (s *summary) event(e event) {
	key := e.Package + " " + e.Test
	top, _, sub := strings.Cut(e.Test, "/")
	topKey := e.Package + " " + top
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.w, e.Output)
	case e.Action == "build-fail":
		s.failed++
	case e.Test == "" && e.Action == "output":
		if !noise(e.Output) {
			fmt.Fprint(s.w, e.Output)
		}
	case e.Test == "" && e.Action == "fail":
		// Tests that never ended (a panic, a timeout): their output says why.
		for k := range s.tree {
			if strings.HasPrefix(k, e.Package+" ") {
				s.print(k)
			}
		}
	case e.Test == "":
	case e.Action == "output":
		if !noise(e.Output) {
			s.tree[topKey] = append(s.tree[topKey], e.Output)
			s.own[key] = append(s.own[key], e.Output)
		}
	case e.Action == "pass":
		s.passed++
		delete(s.own, key)
		if !sub {
			if s.verbose {
				s.print(topKey)
			}
			delete(s.tree, topKey)
		}
	case e.Action == "fail":
		s.failed++
		delete(s.own, key)
		if !sub {
			s.print(topKey)
		}
	case e.Action == "skip":
		s.skipped++
		s.skips = append(s.skips, fmt.Sprintf("%s %s: %s", e.Package, e.Test, reason(s.own[key])))
		delete(s.own, key)
		if !sub {
			if s.verbose {
				s.print(topKey)
			}
			delete(s.tree, topKey)
		}
	}
}

// print prints the output of a top-level test and its subtests, and forgets it.
func (s *summary) print(topKey string) {
	for _, l := range s.tree[topKey] {
		fmt.Fprint(s.w, l)
	}
	delete(s.tree, topKey)
}

// reason is what a skipped test said before its --- SKIP line: the message of t.Skip.
func reason(lines []string) string {
	var msg []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		msg = append(msg, t)
	}
	if len(msg) == 0 {
		return "(no reason given)"
	}
	return strings.Join(msg, " ")
}

// report prints the counts, and every skip with its reason.
func (s *summary) report() {
	fmt.Fprintf(s.w, "\ntests: %d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
	for _, sk := range s.skips {
		fmt.Fprintf(s.w, "skipped: %s\n", sk)
	}
}
