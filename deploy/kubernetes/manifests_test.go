package kubernetes_test

// The Kubernetes manifests checked without a cluster: every kustomization is built with
// kustomize's own API (what `kubectl apply -k` runs), every object is decoded strictly with
// client-go's scheme (an unknown or misspelt field fails, as `kubectl apply` with server-side
// field validation would), and the built objects are checked for the mistakes that only show
// once pods run: Services that select no pod or a port no container has, ports and probes that
// do not match the flags ragtail listens on, $(VAR) references that Kubernetes would leave
// unexpanded, references to ConfigMaps, Secrets and claims that do not exist, unpinned images,
// containers without probes or resources, Prometheus jobs that find no target or get a 401,
// OTLP sent to a port nobody receives on, a Qdrant cluster whose peers cannot find each other,
// and a load-generator Job whose segments, files and merge step disagree.
// TestBrokenManifests breaks a copy of the manifests in each of those ways and requires the
// checks to say so.

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// stacks are what a user applies together into one namespace: a service topology, then the
// load generator, then its merge step. Every kustomization under deploy/kubernetes is built
// in at least one of them (TestEveryKustomizationBuilt).
var stacks = []struct {
	name   string
	builds []string // kustomization directories, relative to deploy/kubernetes
}{
	{name: "base", builds: []string{"base", "loadgen", "loadgen/merge"}},
	{name: "docstore", builds: []string{"overlays/docstore", "loadgen", "loadgen/merge"}},
}

// userSecrets are the Secrets the manifests use but do not ship (a token or password in the
// repository would be everyone's): the user creates them, as the README shows, with these keys.
var userSecrets = map[string][]string{
	"ragtail-admin":    {"token"},
	"ragtail-postgres": {"password"},
}

// repoRoot is the repository (this package is deploy/kubernetes).
func repoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		tb.Fatal(err)
	}
	return root
}

// object is one decoded object of a build.
type object struct {
	build string
	obj   runtime.Object
}

// build is one kustomization built and decoded, with the files kustomize read for it.
type build struct {
	objs []object
	read map[string]bool // absolute paths
	err  error
}

// readingFS is the disk as kustomize sees it, recording every file it reads.
type readingFS struct {
	filesys.FileSystem
	mu   sync.Mutex
	read map[string]bool
}

func (f *readingFS) note(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if abs, err := filepath.Abs(p); err == nil {
		f.read[abs] = true
	}
}

func (f *readingFS) ReadFile(p string) ([]byte, error) { f.note(p); return f.FileSystem.ReadFile(p) }

func (f *readingFS) Open(p string) (filesys.File, error) { f.note(p); return f.FileSystem.Open(p) }

// buildDir builds the kustomization in dir as `kubectl apply -k dir` would (files only from
// inside it, no plugins) and decodes every object strictly.
func buildDir(dir, label string) build {
	fsys := &readingFS{FileSystem: filesys.MakeFsOnDisk(), read: map[string]bool{}}
	b := build{read: fsys.read}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		b.err = fmt.Errorf("kustomize build %s: %w", label, err)
		return b
	}
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	for _, r := range rm.Resources() {
		j, err := r.MarshalJSON()
		if err != nil {
			b.err = fmt.Errorf("%s: %s: %w", label, r.CurId(), err)
			return b
		}
		obj, _, err := decoder.Decode(j, nil, nil)
		if err != nil {
			b.err = fmt.Errorf("%s: %s: %w", label, r.CurId(), err)
			return b
		}
		b.objs = append(b.objs, object{build: label, obj: obj})
	}
	if len(b.objs) == 0 {
		b.err = fmt.Errorf("kustomize build %s: no objects", label)
	}
	return b
}

// builder builds kustomizations, reusing a build of the repository's manifests for a copy in
// which none of the files that build read have changed (TestBrokenManifests breaks one file at
// a time: only the builds that read it are built again).
type builder struct {
	deployDir string
	changed   string            // the one file that differs from the repository's, relative; "" for none
	original  map[string]*build // the repository's builds by label, or nil
	memo      map[string]build  // builds of the copy, each built once; nil: no memo
	// firstAffected checks only the first stack that a changed build is part of (the others
	// are the repository's, which TestManifests checks).
	firstAffected bool
}

func (bl builder) build(label string) build {
	if o := bl.original[label]; o != nil && !bl.affects(label) {
		return *o
	}
	if b, ok := bl.memo[label]; ok {
		return b
	}
	b := buildDir(filepath.Join(bl.deployDir, filepath.FromSlash(label)), label)
	if bl.memo != nil {
		bl.memo[label] = b
	}
	return b
}

// affects reports whether the changed file is one the repository's build of label read.
func (bl builder) affects(label string) bool {
	o := bl.original[label]
	return bl.changed != "" && (o == nil || o.read[filepath.Join(repoDeployDir, filepath.FromSlash(bl.changed))])
}

// repoDeployDir is the repository's deploy/kubernetes, absolute.
var repoDeployDir = func() string {
	d, err := filepath.Abs(".")
	if err != nil {
		panic(err)
	}
	return d
}()

// originalBuilds builds the repository's manifests once for all tests.
var originalBuilds = sync.OnceValue(func() map[string]*build {
	out := map[string]*build{}
	for _, s := range stacks {
		for _, label := range s.builds {
			if out[label] == nil {
				b := buildDir(filepath.Join(repoDeployDir, filepath.FromSlash(label)), label)
				out[label] = &b
			}
		}
	}
	return out
})

// checkManifests builds every stack of the manifests with bl and returns every problem found;
// root is the repository whose prometheus.yml, rules and flags the manifests must agree with.
// tb, if not nil, logs what is not a problem yet.
func checkManifests(tb testing.TB, root string, bl builder) []string {
	var problems []string
	images := map[string][]string{} // ragtail image -> where
	flags := map[string][]string{}  // ragtail flag -> where
	env := map[string][]string{}    // RAGTAIL_* variable -> where
	for _, s := range stacks {
		if bl.firstAffected && !slices.ContainsFunc(s.builds, bl.affects) {
			continue
		}
		var objs []object
		failed := false
		for _, label := range s.builds {
			b := bl.build(label)
			if b.err != nil {
				problems = append(problems, b.err.Error())
				failed = true
				continue
			}
			objs = append(objs, b.objs...)
		}
		if failed {
			if bl.firstAffected {
				break
			}
			continue
		}
		st := newStack(s.name, objs)
		st.check(root)
		problems = append(problems, st.problems...)
		for img, where := range st.ragtailImages {
			images[img] = append(images[img], where...)
		}
		for f, where := range st.usedFlags {
			flags[f] = append(flags[f], where...)
		}
		for e, where := range st.usedEnv {
			env[e] = append(env[e], where...)
		}
		if bl.firstAffected {
			break
		}
	}
	problems = append(problems, checkFlags(root, flags)...)
	problems = append(problems, checkEnv(root, env)...)
	if len(images) > 1 {
		problems = append(problems, fmt.Sprintf("the ragtail containers run different images %v: bench, report and serve must be one build (set the same image in every kustomization)", images))
	}
	return problems
}

func TestManifests(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	bl := builder{deployDir: repoDeployDir, original: originalBuilds()}
	for _, p := range checkManifests(t, root, bl) {
		t.Error(p)
	}
}

// TestEveryKustomizationBuilt: a kustomization that no stack builds is never validated.
func TestEveryKustomizationBuilt(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(repoRoot(t), "deploy", "kubernetes")
	built := map[string]bool{}
	var components []string // referenced by a built kustomization
	for _, s := range stacks {
		for _, b := range s.builds {
			built[b] = true
		}
	}
	for b := range built {
		k := readKustomization(t, filepath.Join(dir, filepath.FromSlash(b)))
		for _, c := range k.Components {
			rel, err := filepath.Rel(dir, filepath.Join(dir, filepath.FromSlash(b), filepath.FromSlash(c)))
			if err != nil {
				t.Fatal(err)
			}
			components = append(components, filepath.ToSlash(rel))
		}
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		rel, err := filepath.Rel(dir, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		k := readKustomization(t, filepath.Dir(path))
		switch {
		case k.Kind == "Component" && !slices.Contains(components, rel):
			t.Errorf("component %s is used by no kustomization that the test builds: add one to stacks", rel)
		case k.Kind != "Component" && !built[rel]:
			t.Errorf("kustomization %s is built by no stack of the test: add it to stacks", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type kustomization struct {
	Kind       string   `json:"kind"`
	Components []string `json:"components"`
}

func readKustomization(tb testing.TB, dir string) kustomization {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		tb.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return k
}

// TestReadmeCreatesSecrets: the Secrets the manifests leave to the user are the ones the README
// tells them to create.
func TestReadmeCreatesSecrets(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, keys := range userSecrets {
		for _, key := range keys {
			want := fmt.Sprintf("create secret generic %s --from-literal=%s=", name, key)
			if !strings.Contains(string(b), want) {
				t.Errorf("README.md does not show how to create the Secret %s (want %q)", name, want)
			}
		}
	}
}

// TestBrokenManifests breaks a copy of the manifests one way at a time: each must be caught.
func TestBrokenManifests(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	src := filepath.Join(root, "deploy", "kubernetes")
	tests := []struct {
		name     string
		file     string // relative to deploy/kubernetes
		old, new string // old must occur exactly once in file
		want     string // in one of the problems; "" when the change must leave no problem
	}{
		{"unknown field", "base/ragtail.yaml",
			"          readinessProbe:\n            httpGet:\n              path: /readyz",
			"          readinesProbe:\n            httpGet:\n              path: /readyz",
			`unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"wrong field type", "base/llm-sim.yaml", "  replicas: 1", "  replicas: one",
			"Deployment.v1.apps/llm-sim.ragtail: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"},
		{"service selects no pod", "base/llm-sim.yaml",
			"spec:\n  selector:\n    app.kubernetes.io/name: llm-sim",
			"spec:\n  selector:\n    app.kubernetes.io/name: llm-simulator",
			"Service ragtail/llm-sim: selector map[app.kubernetes.io/name:llm-simulator] matches no pod template"},
		{"deployment selector misses its template", "base/jaeger.yaml",
			"    matchLabels:\n      app.kubernetes.io/name: jaeger",
			"    matchLabels:\n      app.kubernetes.io/name: tracing",
			"Deployment ragtail/jaeger: selector"},
		{"service target port no container has", "base/ragtail.yaml",
			"      port: 9464\n      targetPort: admin", "      port: 9464\n      targetPort: metrics",
			`Service ragtail/ragtail-admin: port 9464: target port "metrics"`},
		{"api flag and container port disagree", "base/ragtail.yaml", "--addr=:8080", "--addr=:8081",
			"ragtail serve listens on [8081 9464] (--addr, --admin-addr) but declares container ports [8080 9464]"},
		{"admin on loopback but declared", "base/ragtail.yaml", "--admin-addr=:9464", "--admin-addr=127.0.0.1:9464",
			"ragtail serve listens on [8080] (--addr, --admin-addr) but declares container ports [8080 9464]"},
		{"engine on its default port", "base/llm-sim.yaml", `"--addr=:8000", `, "", ""}, // the default is :8000: still right
		{"flag with a space", "base/llm-sim.yaml", `"--addr=:8000"`, `"--addr", ":8000"`,
			`ragtail llm-sim: argument ":8000" is not a flag: write flags as --name=value`},
		{"readiness not on /readyz", "base/ragtail.yaml", "path: /readyz", "path: /healthz",
			"ragtail serve: readiness probe GET /healthz on 8080, want GET /readyz on the API port 8080"},
		{"probe on an undeclared port", "base/otel-collector.yaml",
			"          readinessProbe:\n            httpGet:\n              path: /\n              port: health",
			"          readinessProbe:\n            httpGet:\n              path: /\n              port: healthz",
			`container otel-collector: readiness probe port "healthz" is not a port of the container`},
		{"port name too long", "base/otel-collector.yaml",
			"            - name: otlp-grpc\n              containerPort: 4317", "            - name: otlp-grpc-receiver\n              containerPort: 4317",
			`container otel-collector: port name "otlp-grpc-receiver": must be no more than 15 characters`},
		{"invalid label value", "base/jaeger.yaml", "    app.kubernetes.io/component: tracing\nspec:\n  replicas: 1",
			"    app.kubernetes.io/component: tracing/v2\nspec:\n  replicas: 1", "Deployment jaeger: metadata.labels: Invalid value: \"tracing/v2\""},
		{"service name not a DNS label", "base/llm-sim.yaml", "kind: Service\nmetadata:\n  name: llm-sim", "kind: Service\nmetadata:\n  name: llm.sim",
			"Service llm.sim: name: a DNS-1035 label"},
		{"no liveness probe", "base/prometheus.yaml",
			"          livenessProbe:\n            httpGet:\n              path: /-/healthy\n              port: http\n            initialDelaySeconds: 10\n            periodSeconds: 10\n",
			"", "Deployment ragtail/prometheus: container prometheus: no liveness probe"},
		{"no memory limit", "components/docstore/redis.yaml", "              memory: 512Mi\n", "",
			"Deployment ragtail/redis: container redis: no memory limit"},
		{"image latest", "base/qdrant.yaml", "qdrant/qdrant:v1.17.0", "qdrant/qdrant:latest",
			`image "qdrant/qdrant:latest" is not pinned`},
		{"image untagged", "base/jaeger.yaml", "jaegertracing/jaeger:2.15.0", "jaegertracing/jaeger",
			`image "cr.jaegertracing.io/jaegertracing/jaeger" is not pinned`},
		{"ragtail image unpinned", "loadgen/kustomization.yaml", "    newTag: \"0.1.0\"\n", "",
			`image "ghcr.io/ragtail/ragtail" is not pinned`},
		{"ragtail images differ", "loadgen/merge/kustomization.yaml", `newTag: "0.1.0"`, `newTag: "0.1.1"`,
			"the ragtail containers run different images"},
		{"admin token not from a secret", "base/ragtail.yaml",
			"            - name: RAGTAIL_ADMIN_TOKEN\n              valueFrom:\n                secretKeyRef:\n                  name: ragtail-admin\n                  key: token\n",
			"", "ragtail serve: the admin listener :9464 is not on loopback, so every admin route needs RAGTAIL_ADMIN_TOKEN: set it from a Secret"},
		{"undefined variable in env", "base/ragtail.yaml", "k8s.pod.name=$(POD_NAME)", "k8s.pod.name=$(POD)",
			"container ragtail: env OTEL_RESOURCE_ATTRIBUTES refers to $(POD)"},
		{"missing secret", "base/prometheus.yaml", "            secretName: ragtail-admin", "            secretName: ragtail-token",
			`Secret "ragtail-token" is neither in the manifests nor one the user creates`},
		{"missing configmap", "base/otel-collector.yaml", "            name: otel-collector-config", "            name: collector-config",
			`ConfigMap "collector-config" is not in the manifests`},
		{"prometheus scrapes a port name the pods lack", "base/prometheus/prometheus.yml",
			"        regex: admin\n", "        regex: metrics\n",
			`prometheus job ragtail: keeps container ports named "metrics", which pods labelled app.kubernetes.io/name=ragtail do not have`},
		{"prometheus selects no pod", "base/prometheus/prometheus.yml",
			"label: app.kubernetes.io/name=qdrant", "label: app=qdrant",
			"prometheus job qdrant: selector app=qdrant matches no pod template"},
		{"prometheus lacks the admin token", "base/prometheus/prometheus.yml",
			"    authorization:\n      type: Bearer\n      credentials_file: /etc/prometheus/secrets/ragtail-admin/token\n", "",
			"prometheus job ragtail: the admin listener needs RAGTAIL_ADMIN_TOKEN"},
		{"prometheus token file not mounted", "base/prometheus/prometheus.yml",
			"credentials_file: /etc/prometheus/secrets/ragtail-admin/token", "credentials_file: /etc/prometheus/token",
			"prometheus job ragtail: credentials_file /etc/prometheus/token is not the Secret ragtail-admin key token"},
		{"prometheus job missing", "base/prometheus/prometheus.yml",
			"  - job_name: llm-sim\n", "  - job_name: engine\n",
			"prometheus jobs [engine qdrant ragtail], want the repository's prometheus.yml jobs [llm-sim qdrant ragtail]"},
		{"prometheus interval drift", "base/prometheus/prometheus.yml", "  scrape_interval: 5s", "  scrape_interval: 15s",
			"prometheus.yml global"},
		{"prometheus cluster-wide discovery", "base/prometheus/prometheus.yml",
			"    kubernetes_sd_configs:\n      - role: pod\n        namespaces:\n          own_namespace: true\n        selectors:\n          - role: pod\n            label: app.kubernetes.io/name=llm-sim",
			"    kubernetes_sd_configs:\n      - role: pod\n        selectors:\n          - role: pod\n            label: app.kubernetes.io/name=llm-sim",
			"prometheus job llm-sim: kubernetes_sd_configs must keep to the namespace (namespaces: {own_namespace: true})"},
		{"prometheus may not list pods", "base/prometheus.yaml", `    verbs: ["get", "list", "watch"]`, `    verbs: ["get"]`,
			"ServiceAccount prometheus may not list and watch pods"},
		{"rules drift from the repository's", "base/prometheus/rules.yml", "job:rag_cache_hit_ratio:rate1m", "job:rag_cache_hit_ratio:rate5m",
			"prometheus/rules.yml"},
		{"otlp to a port nobody receives on", "base/ragtail.yaml", "http://otel-collector:4317", "http://otel-collector:4318",
			"OTEL_EXPORTER_OTLP_ENDPOINT http://otel-collector:4318 (grpc) reaches container port 4318 of otel-collector, where the collector's otlp receiver takes http/protobuf"},
		{"otlp to a missing service", "base/ragtail.yaml", "http://otel-collector:4317", "http://collector:4317",
			`OTEL_EXPORTER_OTLP_ENDPOINT: no Service "collector"`},
		{"collector exports to nothing", "base/otel-collector/config.yaml", "    endpoint: jaeger:4317", "    endpoint: tempo:4317",
			`otel-collector exporter otlp_grpc/jaeger: no Service "tempo"`},
		{"qdrant flag to a wrong port", "base/ragtail.yaml", "--qdrant=qdrant:6334", "--qdrant=qdrant:6333",
			"--qdrant=qdrant:6333: Qdrant's gRPC port is 6334"},
		{"qdrant cluster disabled", "base/qdrant/production.yaml", "cluster:\n  enabled: true", "cluster:\n  enabled: false",
			"qdrant: cluster.enabled is not true"},
		{"qdrant peers cannot find each other", "base/qdrant.yaml", "  serviceName: qdrant-headless", "  serviceName: qdrant",
			"StatefulSet ragtail/qdrant: serviceName qdrant is not a headless Service"},
		{"qdrant bootstrap address wrong", "base/qdrant/initialize.sh", `--bootstrap "http://qdrant-0.qdrant-headless:6335"`, `--bootstrap "http://qdrant-0.qdrant:6335"`,
			"qdrant: initialize.sh does not bootstrap from http://qdrant-0.qdrant-headless:6335"},
		{"qdrant storage not on its volume", "base/qdrant/production.yaml", "storage_path: /qdrant/storage", "storage_path: /qdrant/data",
			"qdrant: storage_path /qdrant/data is not on a volume claim template"},
		{"ingest and serve shards differ", "base/ingest.yaml", `"--shards=4"`, `"--shards=2"`,
			"ragtail ingest --shards=2 but ragtail serve --shards=4"},
		{"job not indexed", "loadgen/bench-job.yaml", "  completionMode: Indexed", "  completionMode: NonIndexed",
			"Job ragtail/ragtail-bench: ragtail bench --segment needs completionMode Indexed"},
		{"completions and parallelism differ", "loadgen/bench-job.yaml", "  parallelism: 4", "  parallelism: 2",
			"Job ragtail/ragtail-bench: completions 4 and parallelism 2 differ"},
		{"segment count and completions differ", "loadgen/bench-job.yaml", "--segment=$(JOB_COMPLETION_INDEX)/4", "--segment=$(JOB_COMPLETION_INDEX)/3",
			`--segment="$(JOB_COMPLETION_INDEX)/3", want "$(JOB_COMPLETION_INDEX)/4"`},
		{"segment not from the index", "loadgen/bench-job.yaml", "--segment=$(JOB_COMPLETION_INDEX)/4", "--segment=0/4",
			`--segment="0/4", want "$(JOB_COMPLETION_INDEX)/4"`},
		{"no start instant", "loadgen/bench-job.yaml", "            - --start-at=$(START_AT)\n", "",
			"ragtail bench: no --start-at"},
		{"index variable not declared", "loadgen/bench-job.yaml",
			"            - name: JOB_COMPLETION_INDEX\n              valueFrom:\n                fieldRef:\n                  fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']\n",
			"", "refers to $(JOB_COMPLETION_INDEX)"},
		{"segments overwrite one file", "loadgen/bench-job.yaml", "--json=/results/bench-$(JOB_COMPLETION_INDEX).json", "--json=/results/bench.json",
			"ragtail bench --json=/results/bench.json: every segment would write the same file"},
		{"results not on the shared volume", "loadgen/bench-job.yaml", "              mountPath: /results", "              mountPath: /data",
			"ragtail bench --json=/results/bench-$(JOB_COMPLETION_INDEX).json is not on a persistent volume claim"},
		{"results volume not shared", "loadgen/results-pvc.yaml", `["ReadWriteMany"]`, `["ReadWriteOnce"]`,
			"PersistentVolumeClaim ragtail-bench-results is not ReadWriteMany"},
		{"merge misses a segment", "loadgen/merge/merge-job.yaml", "            - /results/bench-3.json\n", "",
			"ragtail report merges [bench-0.json bench-1.json bench-2.json] of claim ragtail-bench-results, want the 4 segment files [bench-0.json bench-1.json bench-2.json bench-3.json]"},
		{"merge reads another claim", "loadgen/merge/merge-job.yaml", "            claimName: ragtail-bench-results", "            claimName: results",
			`PersistentVolumeClaim "results" is not in the manifests`},
		{"misspelt flag", "loadgen/bench-job.yaml", "--max-tokens=128", "--max-token=128",
			"ragtail flag --max-token (Job ragtail/ragtail-bench: container bench) is defined nowhere in cmd/ragtail"},
		{"misspelt variable", "base/ragtail.yaml", "            - name: RAGTAIL_ADMIN_TOKEN\n", "            - name: RAGTAIL_ADMIN_TOKENS\n",
			"RAGTAIL_ADMIN_TOKENS (Deployment ragtail/ragtail: container ragtail): ragtail reads no such variable"},
		{"bench url to a missing port", "loadgen/bench-job.yaml", "--url=http://ragtail:8080/", "--url=http://ragtail:8000/",
			"--url=http://ragtail:8000/v1/chat/completions: Service ragtail has no port 8000"},
		{"namespaces differ", "loadgen/merge/kustomization.yaml", "namespace: ragtail", "namespace: loadgen",
			"objects in several namespaces"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if !slices.ContainsFunc(sortedKeys(originalBuilds()), func(label string) bool {
				return originalBuilds()[label].read[filepath.Join(src, filepath.FromSlash(tc.file))]
			}) {
				t.Fatalf("no build reads %s: breaking it tests nothing", tc.file)
			}
			dir := copyTree(t, src)
			breakFile(t, filepath.Join(dir, filepath.FromSlash(tc.file)), tc.old, tc.new)
			problems := checkManifests(nil, root, builder{deployDir: dir, changed: tc.file, original: originalBuilds(),
				memo: map[string]build{}, firstAffected: true})
			if tc.want == "" {
				if len(problems) > 0 {
					t.Errorf("%s: %q -> %q: want no problem, got:\n%s", tc.file, tc.old, tc.new, strings.Join(problems, "\n"))
				}
				return
			}
			for _, p := range problems {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Errorf("%s: %q -> %q: no problem mentions %q; got %d:\n%s", tc.file, tc.old, tc.new, tc.want, len(problems), strings.Join(problems, "\n"))
		})
	}
}

// copyTree copies the directory src into a new temporary directory and returns its path.
func copyTree(tb testing.TB, src string) string {
	tb.Helper()
	dst := filepath.Join(tb.TempDir(), "kubernetes")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		tb.Fatal(err)
	}
	return dst
}

// breakFile replaces the one occurrence of old in file by new.
func breakFile(tb testing.TB, file, old, new string) {
	tb.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	if n := strings.Count(string(b), old); n != 1 {
		tb.Fatalf("%s: %q occurs %d times, want once (the broken copy must differ where the test says)", file, old, n)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		tb.Fatal(err)
	}
}
