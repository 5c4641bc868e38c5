package kubernetes_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/internal/loadgen/bench"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/service"
)

// flagDef is one flag definition found in cmd/ragtail's source.
type flagDef struct {
	file string // base name
	def  string // the default as written, when it is a literal
}

// definers are the flag.FlagSet methods that define a flag, with the position of the name
// argument.
var definers = map[string]int{
	"StringVar": 1, "IntVar": 1, "BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "Uint64Var": 1,
	"Int64Var": 1, "UintVar": 1, "TextVar": 1, "Var": 1,
	"String": 0, "Int": 0, "Bool": 0, "Duration": 0, "Float64": 0, "Uint64": 0, "Int64": 0,
	"Uint": 0, "Func": 0, "BoolFunc": 0,
}

// sourceFlags reads the flags cmd/ragtail defines, by name, from its source: every call of a
// FlagSet method that defines a flag with a literal name. The ragtail binary is a main package,
// which a test elsewhere cannot import; reading its source keeps this test from building it.
func sourceFlags(root string) (map[string][]flagDef, error) {
	files, err := filepath.Glob(filepath.Join(root, "cmd", "ragtail", "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string][]flagDef{}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pos, ok := definers[sel.Sel.Name]
			if !ok || len(call.Args) <= pos+1 {
				return true
			}
			lit, ok := call.Args[pos].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, err := strconv.Unquote(lit.Value)
			if err != nil || name == "" {
				return true
			}
			d := flagDef{file: filepath.Base(file)}
			if def, ok := call.Args[pos+1].(*ast.BasicLit); ok {
				d.def = def.Value
				if s, err := strconv.Unquote(def.Value); err == nil {
					d.def = s
				}
			}
			out[name] = append(out[name], d)
			return true
		})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("found no flag definitions in %s/cmd/ragtail: the flags moved; teach sourceFlags where", root)
	}
	for name, defs := range libraryFlags() {
		out[name] = append(out[name], defs...)
	}
	return out, nil
}

// libraryFlags returns the flags the subcommands register through the packages that own them
// (cmd/ragtail calls these RegisterFlags methods), by name, each with the subcommand as its file
// and its real default.
func libraryFlags() map[string][]flagDef {
	getenv := func(string) string { return "" } // the defaults, not this machine's environment
	sets := []struct {
		file     string
		register func(*flag.FlagSet)
	}{
		{"serve", func(fs *flag.FlagSet) {
			c := service.DefaultConfig()
			c.RegisterFlags(fs)
			c.Backends.RegisterFlags(fs, getenv)
		}},
		{"ingest", func(fs *flag.FlagSet) {
			c := service.DefaultIngestConfig()
			c.RegisterFlags(fs, getenv)
		}},
		{"llm-sim", func(fs *flag.FlagSet) {
			var c llmsim.ServerConfig
			c.RegisterFlags(fs)
		}},
		{"bench", func(fs *flag.FlagSet) {
			var o bench.Options
			o.RegisterFlags(fs)
		}},
		{"sweep", func(fs *flag.FlagSet) {
			var o bench.SweepOptions
			o.RegisterFlags(fs)
		}},
	}
	out := map[string][]flagDef{}
	for _, set := range sets {
		fs := flag.NewFlagSet(set.file, flag.ContinueOnError)
		set.register(fs)
		fs.VisitAll(func(f *flag.Flag) {
			out[f.Name] = append(out[f.Name], flagDef{file: set.file, def: f.DefValue})
		})
	}
	return out
}

// sourceEnvNames returns the RAGTAIL_* names that appear as string literals in the service's
// source (cmd, rag, telemetry): the environment variables ragtail reads.
func sourceEnvNames(root string) (map[string]bool, error) {
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{"cmd", "rag", "telemetry"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(v, "RAGTAIL_") {
						out[v] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkEnv returns a problem for every RAGTAIL_* variable the manifests set on ragtail that its
// source never names (an ignored setting).
func checkEnv(root string, used map[string][]string) []string {
	known, err := sourceEnvNames(root)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, name := range sortedKeys(used) {
		switch {
		case known[name]:
		default:
			problems = append(problems, fmt.Sprintf("%s (%s): ragtail reads no such variable: the setting would be ignored", name, used[name][0]))
		}
	}
	return problems
}

// checkFlags returns a problem for every flag the manifests pass that cmd/ragtail does not
// define.
func checkFlags(root string, used map[string][]string) []string {
	defs, err := sourceFlags(root)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := defs[name]; ok {
			continue
		}
		problems = append(problems, fmt.Sprintf("ragtail flag --%s (%s) is defined nowhere in cmd/ragtail: the container would exit at start with \"flag provided but not defined\"", name, used[name][0]))
	}
	return problems
}

// TestFlagDefaults: the defaults the checks assume for flags the manifests may leave out are
// the ones cmd/ragtail defines.
func TestFlagDefaults(t *testing.T) {
	t.Parallel()
	defs, err := sourceFlags(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	// serve's service flags default to the service's own defaults, not to literals.
	if got := service.DefaultConfig().Shards; got != defaultShards {
		t.Errorf("serve --shards defaults to service.DefaultConfig().Shards = %d, the checks assume %d: update the constants in checks_test.go", got, defaultShards)
	}
	for _, tc := range []struct{ file, flag, want string }{
		{"serve.go", "addr", defaultServeAddr},
		{"serve.go", "admin-addr", defaultAdminAddr},
		{"llm-sim", "addr", defaultLLMSimAddr},
		{"ingest", "shards", strconv.Itoa(defaultShards)},
	} {
		found := false
		for _, d := range defs[tc.flag] {
			if d.file != tc.file {
				continue
			}
			found = true
			if d.def != tc.want {
				t.Errorf("%s: --%s defaults to %s, the checks assume %s: update the constants in checks_test.go", tc.file, tc.flag, d.def, tc.want)
			}
		}
		if !found {
			t.Errorf("%s defines no --%s with a literal default: update TestFlagDefaults and the checks", tc.file, tc.flag)
		}
	}
}
