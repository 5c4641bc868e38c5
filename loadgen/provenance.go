package loadgen

import (
	"runtime/debug"
	"strings"

	"github.com/ragtail/ragtail/internal/redact"
)

// Bounds on what WithRequests and WithProvenance keep, so that a result file stays small
// whatever the command line held.
const (
	maxSettingLen  = 512
	maxCommandArgs = 128
)

// WithRequests records what every request sent beyond its prompt: the dataset it came from,
// whether responses streamed, and the temperature (nil for the server's default).
func (i RunInfo) WithRequests(dataset string, stream bool, temperature *float64) RunInfo {
	i.Dataset, i.Stream = bound(dataset), &stream
	if temperature != nil {
		t := *temperature
		i.Temperature = &t
	}
	return i
}

// WithProvenance records the version of the generator and its command line (os.Args, the
// program's name first), shell-quoted, with credentials hidden by redact.Args (the values of
// secret flags such as --api-key, --server-metrics-token and --admin-token, of --header past the
// header's name, URL passwords and secret query parameters), at most 128 arguments kept and
// each cut at 512 bytes.
func (i RunInfo) WithProvenance(version string, args []string) RunInfo {
	i.Version = bound(version)
	args = redact.Args(args[:min(len(args), maxCommandArgs)])
	for k, a := range args {
		args[k] = bound(a)
	}
	i.Command = ShellJoin(args)
	return i
}

// ShellJoin joins arguments as a POSIX shell would read them back: an argument with anything
// but letters, digits and -_=.,:/@+% is single-quoted.
func ShellJoin(args []string) string {
	var b strings.Builder
	for k, a := range args {
		if k > 0 {
			b.WriteByte(' ')
		}
		if a != "" && strings.Trim(a, shellSafe) == "" {
			b.WriteString(a)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}

const shellSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/@+%"

// bound cuts s at maxSettingLen bytes, on a rune boundary.
func bound(s string) string {
	if len(s) <= maxSettingLen {
		return s
	}
	cut := maxSettingLen
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// BuildVersion is the version of the running binary from its build information: the module
// version when it has one, else the VCS revision it was built from (12 digits, "+dirty" for a
// modified tree), else "devel".
func BuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return "devel " + rev[:min(len(rev), 12)] + dirty
}
