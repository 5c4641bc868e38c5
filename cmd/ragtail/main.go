// Command ragtail is an OpenTelemetry-instrumented RAG reference service with a built-in
// profiler and an embedded load generator. Each subcommand lives in its own file; run
// `ragtail help` for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/ragtail/ragtail/internal/redact"
	"github.com/ragtail/ragtail/loadgen/report"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one subcommand: its name, a one-line summary, and the function that runs it.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the RAG service (API on --addr, admin on --admin-addr)", runServe},
		{"llm-sim", "run the simulated inference engine alone as an OpenAI-compatible server", runLLMSim},
		{"bench", "drive an OpenAI-compatible endpoint with an open-loop load; report latencies with intervals", runBench},
		{"sweep", "run a ladder of rates or concurrencies; find the knee and the max RPS under an SLO", runSweep},
		{"demo", "serve + drive a short load in each coupling mode on the embedded default; print percentiles", runDemo},
		{"ingest", "chunk and embed .md/.txt files (or the built-in corpus) into Qdrant or a snapshot file", runIngest},
		{"lab", "run a pitfall experiment A/B and print measured vs claimed figures", runLab},
		{"report", "render or merge result files (text, --html, --json)", runReport},
		{"healthcheck", "probe a URL and exit 0 on 2xx (container healthchecks)", runHealthcheck},
		{"version", "print the version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	status := exitStatus(err)
	if status != 0 && status != 2 {
		fmt.Fprintln(os.Stderr, errorLine(err))
	}
	os.Exit(status)
}

// exitStatus is the status the program exits with after err: 0 for none (or --help), 2 for a
// command line that could not be parsed (its usage is printed), report.GateExitStatus (99) for
// a gate that failed on results that were written (bench --fail-on, report
// --fail-on-regression), so that CI tells a breached threshold from a run that could not be
// made, and 1 for any other error.
func exitStatus(err error) int {
	var gate *report.GateError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &gate):
		return report.GateExitStatus
	}
	return 1
}

// errorLine is the line a command's error ends the program with, credentials hidden
// (redact.String): an error may quote a flag's URL.
func errorLine(err error) string { return "ragtail: " + redact.String(err.Error()) }

// errUsage marks a command line that could not be parsed; the usage has already been printed.
var errUsage = errors.New("usage")

// run dispatches args to a subcommand. It holds all the wiring so tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "ragtail: unknown command %q\n\n", args[0])
	usage(stderr)
	return errUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `ragtail: a RAG reference service for reproducing and diagnosing tail latency.

Usage:
  ragtail COMMAND [flags]

Commands:
`)
	cmds := commands()
	width := 0
	for _, c := range cmds {
		width = max(width, len(c.name))
	}
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, `
Run "ragtail COMMAND --help" for the flags of a command.
Start with "ragtail demo": it needs nothing else running.
`)
}

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(version, info))
	return nil
}

// versionLine describes the build: the version set at link time or else the module's (from
// the build info: "(devel)" for a build of a checkout, the tag for go install module@tag), the
// VCS revision, its time and whether the tree had changes, and the Go version.
func versionLine(linked string, info *debug.BuildInfo) string {
	v := linked
	if info == nil {
		return "ragtail " + v
	}
	if v == "dev" && info.Main.Version != "" {
		v = info.Main.Version
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	rev := "unknown revision"
	if r := settings["vcs.revision"]; r != "" {
		rev = "revision " + r
		if t := settings["vcs.time"]; t != "" {
			rev += " of " + t
		}
		if settings["vcs.modified"] == "true" {
			rev += ", with local changes"
		}
	}
	return fmt.Sprintf("ragtail %s (%s), %s", v, rev, info.GoVersion)
}

// parseFlags parses args with fs, printing usage to stderr; --help returns flag.ErrHelp after
// printing to stdout.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(stderr)
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return flag.ErrHelp
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ragtail %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// newFlagSet returns a FlagSet whose usage prints summary, then the flags.
func newFlagSet(name, synopsis, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: ragtail %s %s\n\n%s\n\nFlags:\n", name, synopsis, summary)
		fs.PrintDefaults()
	}
	return fs
}

// listen listens on the TCP address addr; ctx bounds the setup only, not the listener.
func listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}
