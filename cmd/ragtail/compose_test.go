package main

// The compose stack (docker-compose.yml, prometheus.yml and its rules) checked without a Docker
// engine: the compose file is loaded with compose-go, the loader `docker compose` itself uses,
// and every name, port, path, command and flag it mentions is checked against what exists: the
// repository's files, the ragtail binary's subcommands and flags, and the other services.
// prometheus.yml is checked against the compose services, then by promtool when it is installed.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/ragtail/ragtail/internal/testci"
	"github.com/ragtail/ragtail/rag/service"
)

// imageBinary is where the Dockerfile installs ragtail.
const imageBinary = "/usr/local/bin/ragtail"

// stackRoot returns the absolute path of the repository (this package is cmd/ragtail).
func stackRoot(tb testing.TB) string {
	tb.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		tb.Fatal(err)
	}
	return root
}

// loadCompose loads docker-compose.yml as `docker compose --profile '*'` would, with an empty
// environment so that every ${VAR:-default} takes its default.
func loadCompose(tb testing.TB) *types.Project {
	tb.Helper()
	root := stackRoot(tb)
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yml")}},
		Environment: types.Mapping{},
	}, loader.WithProfiles([]string{"*"}))
	if err != nil {
		tb.Fatalf("load docker-compose.yml: %v", err)
	}
	return p
}

// readYAML parses a YAML file into maps and slices. go.mod has no YAML module of its own, so it
// borrows compose-go's loader with everything compose-specific switched off (validation,
// interpolation, normalization, path resolution, extends, include): what is left is its YAML
// decoder. TestPromtool cross-checks what it reads of prometheus.yml against promtool.
func readYAML(tb testing.TB, file string) map[string]any {
	tb.Helper()
	m, err := loader.LoadModelWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(file),
		ConfigFiles: []types.ConfigFile{{Filename: file}},
	}, func(o *loader.Options) {
		o.SkipValidation, o.SkipInterpolation, o.SkipNormalization, o.ResolvePaths = true, true, true, false
		o.SkipConsistencyCheck, o.SkipExtends, o.SkipInclude = true, true, true
		o.SkipResolveEnvironment, o.SkipDefaultValues = true, true
		o.SetProjectName("yaml", true)
	})
	if err != nil {
		tb.Fatalf("read %s: %v", file, err)
	}
	return m
}

// scrapeTarget is one static target of prometheus.yml.
type scrapeTarget struct {
	Job, Host, MetricsPath string
	Port                   uint32
}

// prometheusConfig is what the tests read of prometheus.yml.
type prometheusConfig struct {
	RuleFiles []string
	Targets   []scrapeTarget
}

func readPrometheusConfig(tb testing.TB, file string) prometheusConfig {
	tb.Helper()
	m := readYAML(tb, file)
	var cfg prometheusConfig
	rules, _ := m["rule_files"].([]any)
	for _, r := range rules {
		s, ok := r.(string)
		if !ok {
			tb.Fatalf("%s: rule_files holds %v, want file names", file, r)
		}
		cfg.RuleFiles = append(cfg.RuleFiles, s)
	}
	jobs, _ := m["scrape_configs"].([]any)
	for _, j := range jobs {
		job, _ := j.(map[string]any)
		name, _ := job["job_name"].(string)
		metricsPath, _ := job["metrics_path"].(string)
		if metricsPath == "" {
			metricsPath = "/metrics"
		}
		statics, _ := job["static_configs"].([]any)
		if name == "" || len(statics) == 0 {
			tb.Fatalf("%s: scrape config %v: want a job_name and static_configs (the stack has no service discovery)", file, job)
		}
		for _, s := range statics {
			sc, _ := s.(map[string]any)
			targets, _ := sc["targets"].([]any)
			for _, t := range targets {
				addr, _ := t.(string)
				host, port, err := splitTarget(addr)
				if err != nil {
					tb.Fatalf("%s: job %s: target %v: %v", file, name, t, err)
				}
				cfg.Targets = append(cfg.Targets, scrapeTarget{Job: name, Host: host, Port: port, MetricsPath: metricsPath})
			}
		}
	}
	if len(cfg.Targets) == 0 {
		tb.Fatalf("%s: no scrape targets found", file)
	}
	return cfg
}

func splitTarget(addr string) (string, uint32, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, uint32(port), nil
}

// ragtailFlags returns the flags of ragtail subcommand name, read from its --help, and whether
// the subcommand exists.
func ragtailFlags(tb testing.TB, name string) (map[string]bool, bool) {
	tb.Helper()
	if !slices.ContainsFunc(commands(), func(c command) bool { return c.name == name }) {
		return nil, false
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{name, "--help"}, &out, io.Discard); !errors.Is(err, flag.ErrHelp) {
		tb.Fatalf("ragtail %s --help: %v", name, err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([A-Za-z0-9][\w.-]*)`).FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	return flags, true
}

// commandFlags returns the flags of a command line with their values: the part after "=", or
// else the next argument unless it is a flag itself ("" for a flag that takes no value).
func commandFlags(args []string) map[string]string {
	out := map[string]string{}
	for i, a := range args {
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			val = args[i+1]
		}
		out[name] = val
	}
	return out
}

// declaredPorts are the container ports a service publishes or exposes.
func declaredPorts(s types.ServiceConfig) []uint32 {
	var ports []uint32
	for _, p := range s.Ports {
		ports = append(ports, p.Target)
	}
	for _, e := range s.Expose {
		if n, err := strconv.ParseUint(e, 10, 16); err == nil {
			ports = append(ports, uint32(n))
		}
	}
	return ports
}

// isRagtailImage reports whether the service runs the image built from the Dockerfile.
func isRagtailImage(s types.ServiceConfig) bool { return s.Build != nil }

// mountOf returns the volume mounted at the longest prefix of the container path p, and p
// relative to it.
func mountOf(s types.ServiceConfig, p string) (types.ServiceVolumeConfig, string, bool) {
	var best types.ServiceVolumeConfig
	var rel string
	found := false
	for _, v := range s.Volumes {
		t := path.Clean(v.Target)
		if p != t && !strings.HasPrefix(p, t+"/") {
			continue
		}
		if !found || len(t) > len(path.Clean(best.Target)) {
			best, rel, found = v, strings.TrimPrefix(strings.TrimPrefix(p, t), "/"), true
		}
	}
	return best, rel, found
}

// hostPath maps a container path of s to the host file a bind mount puts there.
func hostPath(s types.ServiceConfig, p string) (string, bool) {
	v, rel, ok := mountOf(s, p)
	if !ok || v.Type != types.VolumeTypeBind {
		return "", false
	}
	return filepath.Join(v.Source, filepath.FromSlash(rel)), true
}

// The services of the stack and what the issue asks of each.
var wantServices = []struct {
	name        string
	image       string // image repository; "" for the ragtail image built from the Dockerfile
	profile     string // "" when it starts with a plain `docker compose up`
	healthcheck bool   // it must have one
	oneShot     bool   // runs to completion (restart "no")
}{
	{name: "ragtail"},
	{name: "llm-sim"},
	{name: "ingest", oneShot: true},
	{name: "wait-ready", image: "busybox", oneShot: true},
	{name: "qdrant", image: "qdrant/qdrant", healthcheck: true},
	{name: "postgres", image: "postgres", healthcheck: true},
	{name: "redis", image: "redis", healthcheck: true},
	{name: "jaeger", image: "cr.jaegertracing.io/jaegertracing/jaeger"},
	{name: "pyroscope", image: "grafana/pyroscope"},
	{name: "prometheus", image: "prom/prometheus", healthcheck: true},
	{name: "jupyter", image: "quay.io/jupyter/scipy-notebook"},
	{name: "load", profile: "load", oneShot: true},
	{name: "lab", profile: "lab", oneShot: true},
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	var want []string
	for _, w := range wantServices {
		want = append(want, w.name)
		t.Run(w.name, func(t *testing.T) {
			s, err := p.GetService(w.name)
			if err != nil {
				t.Fatalf("no service %s: %v", w.name, err)
			}
			if w.image == "" {
				if !isRagtailImage(s) {
					t.Errorf("image %q: want the ragtail image built from the Dockerfile", s.Image)
				}
			} else {
				repo, tag, ok := strings.Cut(s.Image, ":")
				if repo != w.image {
					t.Errorf("image %q: want %s", s.Image, w.image)
				}
				if !ok || tag == "" || tag == "latest" || !regexp.MustCompile(`\d`).MatchString(tag) {
					t.Errorf("image %q is not pinned to a version tag", s.Image)
				}
			}
			if got := strings.Join(s.Profiles, ","); got != w.profile {
				t.Errorf("profiles %q, want %q", got, w.profile)
			}
			if hc := s.HealthCheck; w.healthcheck && (hc == nil || hc.Disable || len(hc.Test) == 0) {
				t.Error("no healthcheck")
			}
			if w.oneShot && s.Restart != "" && s.Restart != types.RestartPolicyNo {
				t.Errorf("restart %q on a one-shot service", s.Restart)
			}
		})
	}
	if got := p.ServiceNames(); !slices.Equal(got, sortedNames(want)) {
		t.Errorf("services %v, want %v", got, sortedNames(want))
	}
}

func sortedNames(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func TestComposeFilesExist(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	root := stackRoot(t)
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if b := s.Build; b != nil {
			df := b.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			if !filepath.IsAbs(df) {
				df = filepath.Join(b.Context, df)
			}
			if _, err := os.Stat(df); err != nil {
				t.Errorf("%s: build: %v", name, err)
			}
		}
		for _, v := range s.Volumes {
			switch v.Type {
			case types.VolumeTypeBind:
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s: bind mount %s: %v", name, v.Target, err)
				} else if !strings.HasPrefix(v.Source, root+string(filepath.Separator)) {
					t.Errorf("%s: bind mount source %s is outside the repository", name, v.Source)
				}
			case types.VolumeTypeVolume:
				if _, ok := p.Volumes[v.Source]; !ok {
					t.Errorf("%s: volume %q is not declared under volumes:", name, v.Source)
				}
			}
		}
	}

	// Prometheus reads the mounted prometheus.yml, and the rule files it names relative to
	// itself must be mounted too.
	prom := p.Services["prometheus"]
	configPath := commandFlags(prom.Command)["config.file"]
	host, ok := hostPath(prom, configPath)
	if !ok || host != filepath.Join(root, "prometheus.yml") {
		t.Fatalf("prometheus --config.file=%s is %q on the host, want the repository's prometheus.yml", configPath, host)
	}
	for _, rf := range readPrometheusConfig(t, host).RuleFiles {
		inContainer := path.Join(path.Dir(configPath), rf)
		h, ok := hostPath(prom, inContainer)
		if !ok {
			t.Errorf("rule file %s (%s in the container) is not mounted", rf, inContainer)
			continue
		}
		if _, err := os.Stat(h); err != nil {
			t.Errorf("rule file %s: %v", rf, err)
		}
	}

	// Jupyter gets the notebooks.
	jup := p.Services["jupyter"]
	var nbDir string
	for _, v := range jup.Volumes {
		if v.Type == types.VolumeTypeBind && v.Source == filepath.Join(root, "notebooks") {
			nbDir = v.Source
		}
	}
	if nbDir == "" {
		t.Fatal("jupyter does not mount notebooks/")
	}
	for _, nb := range []string{"diagnosis.ipynb", "coupling.ipynb"} {
		checkStoredNotebook(t, filepath.Join(nbDir, nb))
	}
}

// checkStoredNotebook checks that a notebook is nbformat 4 JSON stored with its outputs cleared
// (outputs belong to a run, not to the source; make e2e executes the notebooks).
func checkStoredNotebook(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	var nb struct {
		NBFormat int `json:"nbformat"`
		Cells    []struct {
			CellType       string            `json:"cell_type"`
			Outputs        []json.RawMessage `json:"outputs"`
			ExecutionCount *int              `json:"execution_count"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(b, &nb); err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if nb.NBFormat != 4 || len(nb.Cells) == 0 {
		t.Errorf("%s: nbformat %d with %d cells, want nbformat 4", path, nb.NBFormat, len(nb.Cells))
	}
	for i, c := range nb.Cells {
		if len(c.Outputs) > 0 || c.ExecutionCount != nil {
			t.Errorf("%s: cell %d is stored with outputs; clear them (jupyter nbconvert --clear-output --inplace)", path, i)
		}
	}
}

func TestComposeRagtailCommands(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if !isRagtailImage(s) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			if len(s.Entrypoint) > 0 {
				t.Fatalf("entrypoint %v: the image's entrypoint is the ragtail binary; give a command", s.Entrypoint)
			}
			check := func(what string, args []string) {
				if len(args) == 0 {
					t.Errorf("%s: empty", what)
					return
				}
				flags, ok := ragtailFlags(t, args[0])
				if !ok {
					t.Errorf("%s: ragtail has no subcommand %q", what, args[0])
					return
				}
				for f := range commandFlags(args[1:]) {
					if !flags[f] {
						t.Errorf("%s: ragtail %s has no flag -%s", what, args[0], f)
					}
				}
			}
			check("command", s.Command)
			// The image is distroless: a healthcheck can only run the ragtail binary itself.
			if hc := s.HealthCheck; hc != nil && !hc.Disable && len(hc.Test) > 0 {
				test := hc.Test
				if test[0] != "CMD" || len(test) < 3 || test[1] != imageBinary {
					t.Errorf("healthcheck %q: the image has no shell; want [CMD, %s, SUBCOMMAND, ...]", test, imageBinary)
				} else {
					check("healthcheck", test[2:])
				}
			}
		})
	}
}

func TestComposeDependencies(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	for _, name := range p.ServiceNames() {
		for dep, d := range p.Services[name].DependsOn {
			target, ok := p.Services[dep]
			if !ok {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
				continue
			}
			switch d.Condition {
			case types.ServiceConditionHealthy:
				if hc := target.HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 {
					t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
				}
			case types.ServiceConditionCompletedSuccessfully:
				if target.Restart != "" && target.Restart != types.RestartPolicyNo {
					t.Errorf("%s waits for %s to complete, but %s restarts (%s)", name, dep, dep, target.Restart)
				}
			}
		}
	}
	// The order the stack needs: Qdrant ready -> ingest done -> ragtail; the load only once
	// ragtail and the engine answer.
	for _, w := range []struct{ service, dep, cond string }{
		{"ingest", "qdrant", types.ServiceConditionHealthy},
		{"ingest", "postgres", types.ServiceConditionHealthy},
		{"ragtail", "postgres", types.ServiceConditionHealthy},
		{"ragtail", "redis", types.ServiceConditionHealthy},
		{"ragtail", "ingest", types.ServiceConditionCompletedSuccessfully},
		{"load", "wait-ready", types.ServiceConditionCompletedSuccessfully},
		{"jupyter", "prometheus", types.ServiceConditionHealthy},
	} {
		if got := p.Services[w.service].DependsOn[w.dep].Condition; got != w.cond {
			t.Errorf("%s depends on %s with condition %q, want %q", w.service, w.dep, got, w.cond)
		}
	}
}

// TestComposeRealParts checks the doc store and cache wiring: the ingest job writes chunk
// payloads into the postgres service and ragtail reads them from there behind the redis
// service, each through the environment variable of its flag (the URL holds a password, which
// the environment keeps out of the command line), naming a port the target declares, with the
// credentials the postgres service is started with.
func TestComposeRealParts(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	pg := p.Services["postgres"]
	env := func(s types.ServiceConfig, k string) string {
		if v := s.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	tests := []struct {
		service, variable, flag, scheme, host string
		port                                  uint32
	}{
		{"ingest", service.EnvDocStore, "docstore", "postgres", "postgres", 5432},
		{"ragtail", service.EnvDocStore, "docstore", "postgres", "postgres", 5432},
		{"ragtail", service.EnvCache, "cache", "redis", "redis", 6379},
	}
	for _, tt := range tests {
		t.Run(tt.service+" "+tt.variable, func(t *testing.T) {
			s := p.Services[tt.service]
			if len(s.Command) == 0 {
				t.Fatalf("%s has no command", tt.service)
			}
			if _, ok := commandFlags(s.Command)[tt.flag]; ok {
				t.Errorf("%s passes --%s on the command line; want %s (the URL may hold a password)", tt.service, tt.flag, tt.variable)
			}
			if flags, _ := ragtailFlags(t, s.Command[0]); !flags[tt.flag] {
				t.Fatalf("ragtail %s has no --%s, which %s configures", s.Command[0], tt.flag, tt.variable)
			}
			raw := env(s, tt.variable)
			u, err := url.Parse(raw)
			if err != nil || u.Scheme != tt.scheme || u.Hostname() != tt.host {
				t.Fatalf("%s=%q: want a %s:// URL of the %s service (%v)", tt.variable, raw, tt.scheme, tt.host, err)
			}
			port, _ := strconv.ParseUint(u.Port(), 10, 16)
			if target := p.Services[tt.host]; uint32(port) != tt.port || !slices.Contains(declaredPorts(target), tt.port) {
				t.Errorf("%s=%q: port %s, want %d, declared by %s (%v)", tt.variable, raw, u.Port(), tt.port, tt.host, declaredPorts(target))
			}
			if tt.scheme != "postgres" {
				return
			}
			pass, _ := u.User.Password()
			if u.User.Username() != env(pg, "POSTGRES_USER") || pass != env(pg, "POSTGRES_PASSWORD") || strings.TrimPrefix(u.Path, "/") != env(pg, "POSTGRES_DB") {
				t.Errorf("%s=%q: user, password or database differ from the postgres service's POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB", tt.variable, raw)
			}
		})
	}
}

// hostPortRef matches host:port, with or without a URL scheme.
var hostPortRef = regexp.MustCompile(`(?:^|[/=\s])([a-z][a-z0-9-]*):(\d{2,5})\b`)

func TestComposeAddresses(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		var texts []string
		texts = append(texts, s.Command...)
		for k, v := range s.Environment {
			if v != nil {
				texts = append(texts, k+"="+*v)
			}
		}
		// Every host:port naming a service must name a port that service declares.
		for _, text := range texts {
			for _, m := range hostPortRef.FindAllStringSubmatch(text, -1) {
				target, ok := p.Services[m[1]]
				if !ok {
					continue // not a compose service: a loopback address, an image, a URL scheme
				}
				port, _ := strconv.ParseUint(m[2], 10, 16)
				if !slices.Contains(declaredPorts(target), uint32(port)) {
					t.Errorf("%s: %q points at %s:%s, but %s declares ports %v", name, text, m[1], m[2], m[1], declaredPorts(target))
				}
			}
		}
		// What a ragtail service listens on must be what it declares.
		if isRagtailImage(s) {
			for f, v := range commandFlags(s.Command) {
				if f != "addr" && f != "admin-addr" {
					continue
				}
				_, port, err := splitTarget(v)
				if err != nil {
					t.Errorf("%s: -%s=%q: %v", name, f, v, err)
					continue
				}
				if !slices.Contains(declaredPorts(s), port) {
					t.Errorf("%s listens on %d (-%s) but declares ports %v", name, port, f, declaredPorts(s))
				}
			}
		}
		// Published ports face the host's loopback only: the admin API and Jupyter run what
		// they are asked to.
		for _, port := range s.Ports {
			if port.Published != "" && port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %s on %q, want 127.0.0.1", name, port.Published, port.HostIP)
			}
		}
	}
}

// TestComposeResults checks that the notebooks read what the load and lab profiles write: each
// result file lands in a named volume, at the same place, as the Jupyter variable that names it.
func TestComposeResults(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	jup := p.Services["jupyter"]
	for _, w := range []struct{ writer, flag, env string }{
		{"load", "json", "RAGTAIL_RESULTS"},
		{"load", "save-detailed", ""}, // read beside bench.json
		{"lab", "json", "RAGTAIL_LAB_RESULTS"},
	} {
		svc := p.Services[w.writer]
		written := commandFlags(svc.Command)[w.flag]
		wv, wrel, ok := mountOf(svc, written)
		if !ok || wv.Type != types.VolumeTypeVolume {
			t.Errorf("%s writes --%s=%q outside a named volume", w.writer, w.flag, written)
			continue
		}
		if w.env == "" {
			continue
		}
		env := jup.Environment[w.env]
		if env == nil {
			t.Errorf("jupyter has no %s", w.env)
			continue
		}
		if w.writer == "load" {
			// The notebooks find the per-request records beside the summary, by extension.
			if d := commandFlags(svc.Command)["save-detailed"]; d != strings.TrimSuffix(written, ".json")+".jsonl" {
				t.Errorf("load writes --save-detailed=%s, want it beside --json=%s as .jsonl", d, written)
			}
		}
		rv, rrel, ok := mountOf(jup, *env)
		if !ok || rv.Source != wv.Source || rrel != wrel {
			t.Errorf("jupyter reads %s=%s (volume %q, %q); %s writes %s (volume %q, %q)",
				w.env, *env, rv.Source, rrel, w.writer, written, wv.Source, wrel)
		}
	}
	for _, k := range []string{"PROMETHEUS_URL", "RAGTAIL_ADMIN_URL", "JAEGER_URL", "PYROSCOPE_URL"} {
		v := jup.Environment[k]
		if v == nil {
			t.Errorf("jupyter has no %s", k)
			continue
		}
		u, err := url.Parse(*v)
		if err != nil || u.Scheme != "http" || !hasService(p, u.Hostname()) {
			t.Errorf("jupyter %s=%q: want http://SERVICE:PORT", k, *v)
		}
	}
}

func TestPrometheusTargets(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	cfg := readPrometheusConfig(t, filepath.Join(stackRoot(t), "prometheus.yml"))
	jobs := map[string]bool{}
	for _, tg := range cfg.Targets {
		jobs[tg.Job] = true
		s, ok := p.Services[tg.Host]
		if !ok {
			t.Errorf("job %s scrapes %s:%d, which is not a compose service", tg.Job, tg.Host, tg.Port)
			continue
		}
		if !slices.Contains(declaredPorts(s), tg.Port) {
			t.Errorf("job %s scrapes %s:%d, but %s declares ports %v", tg.Job, tg.Host, tg.Port, tg.Host, declaredPorts(s))
		}
	}
	for _, want := range []string{"ragtail", "llm-sim"} {
		if !jobs[want] {
			t.Errorf("prometheus.yml has no job %s", want)
		}
	}
	// ragtail's metrics are on its admin listener.
	for _, tg := range cfg.Targets {
		if tg.Host != "ragtail" {
			continue
		}
		_, port, err := splitTarget(commandFlags(p.Services["ragtail"].Command)["admin-addr"])
		if err != nil || port != tg.Port {
			t.Errorf("job %s scrapes ragtail:%d, but ragtail's --admin-addr is on port %d", tg.Job, tg.Port, port)
		}
	}
	prom := p.Services["prometheus"]
	if !slices.Contains(prom.Command, "--enable-feature=exemplar-storage") {
		t.Errorf("prometheus command %v: want --enable-feature=exemplar-storage", prom.Command)
	}
}

// TestPromtool runs Prometheus's own checks: the configuration and its rule files, the rules'
// unit tests, and, job by job, the targets promtool discovers against what readYAML read.
func TestPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testci.Skip(t, "promtool is not installed (Debian: apt-get install prometheus); prometheus.yml not checked by Prometheus")
	}
	// promtool checks that the admin token file prometheus.yml names exists; compose mounts it
	// at run time, so the check runs on a copy of the stack's Prometheus files beside a token.
	root := promtoolStack(t, stackRoot(t))
	cfgFile := filepath.Join(root, "prometheus.yml")
	promtoolRun := func(t *testing.T, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, promtool, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Run("check config", func(t *testing.T) {
		t.Parallel()
		promtoolRun(t, "check", "config", cfgFile)
	})
	t.Run("test rules", func(t *testing.T) {
		t.Parallel()
		promtoolRun(t, "test", "rules", filepath.Join(root, "prometheus", "rules_test.yml"))
	})
	byJob := map[string][]string{}
	for _, tg := range readPrometheusConfig(t, cfgFile).Targets {
		byJob[tg.Job] = append(byJob[tg.Job], net.JoinHostPort(tg.Host, strconv.Itoa(int(tg.Port))))
	}
	for job, want := range byJob {
		t.Run("targets of "+job, func(t *testing.T) {
			t.Parallel()
			// Static targets need no discovery: a short timeout only bounds the wait.
			out := promtoolRun(t, "check", "service-discovery", "--timeout=1s", cfgFile, job)
			got := regexp.MustCompile(`"__address__":\s*"([^"]+)"`).FindAllStringSubmatch(out, -1)
			var addrs []string
			for _, m := range got {
				if !slices.Contains(addrs, m[1]) {
					addrs = append(addrs, m[1])
				}
			}
			if !slices.Equal(sortedNames(addrs), sortedNames(want)) {
				t.Errorf("promtool discovers %v for job %s, readYAML read %v", addrs, job, want)
			}
		})
	}
}

func hasService(p *types.Project, name string) bool {
	_, ok := p.Services[name]
	return ok
}

// promtoolStack copies prometheus.yml and prometheus/ from root into a temporary directory and
// writes the admin token file compose mounts, returning the directory.
func promtoolStack(tb testing.TB, root string) string {
	tb.Helper()
	dir := tb.TempDir()
	err := os.CopyFS(filepath.Join(dir, "prometheus"), os.DirFS(filepath.Join(root, "prometheus")))
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(filepath.Join(root, "prometheus.yml")); err == nil {
			err = os.WriteFile(filepath.Join(dir, "prometheus.yml"), b, 0o644)
		}
	}
	if err == nil {
		err = os.MkdirAll(filepath.Join(dir, "secrets"), 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "secrets", "ragtail-admin-token"), []byte("test-token\n"), 0o600)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}
