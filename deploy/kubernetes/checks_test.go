package kubernetes_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// Defaults of the ragtail flags the checks read (cmd/ragtail: serve.go, llm_sim.go,
// service.go, ingest.go).
const (
	defaultServeAddr  = ":8080"
	defaultAdminAddr  = "127.0.0.1:9464"
	defaultLLMSimAddr = ":8000"
	defaultShards     = 4
	qdrantGRPCPort    = 6334
	qdrantP2PPort     = 6335 // Qdrant's default cluster.p2p.port
)

// workload is an object with a pod template.
type workload struct {
	kind, name, namespace string
	tmpl                  *corev1.PodTemplateSpec
	selector              *metav1.LabelSelector // nil for Jobs (the controller makes it)
	longRunning           bool                  // Deployment, StatefulSet, DaemonSet: probes required
	job                   *batchv1.Job
	sts                   *appsv1.StatefulSet
}

func (w *workload) String() string { return w.kind + " " + w.namespace + "/" + w.name }

// container is one container of a workload.
type container struct {
	w *workload
	c *corev1.Container
}

func (c container) String() string { return c.w.String() + ": container " + c.c.Name }

// stack is the objects applied together into one namespace, and what the checks found.
type stack struct {
	name          string
	namespace     string
	problems      []string
	ragtailImages map[string][]string
	usedFlags     map[string][]string // ragtail flag -> the containers that pass it
	usedEnv       map[string][]string // RAGTAIL_* variable set on ragtail -> the containers

	workloads    []*workload
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	claims       map[string]*corev1.PersistentVolumeClaim
	roles        map[string]*rbacv1.Role
	roleBindings []*rbacv1.RoleBinding

	// What the ragtail checks learnt, for the checks across containers.
	serveShards  []int
	ingestShards []int
	benches      []benchSegments
	merges       []mergeFiles
}

// benchSegments is what a load-generator Job writes: n segment files in a claim.
type benchSegments struct {
	job     string
	n       int
	claim   string
	pattern string // path in the claim, with $(JOB_COMPLETION_INDEX)
}

// mergeFiles is what a `ragtail report` container reads.
type mergeFiles struct {
	where string
	files []claimFile
}

type claimFile struct{ claim, rel string }

func (s *stack) addf(format string, args ...any) {
	s.problems = append(s.problems, fmt.Sprintf("%s: ", s.name)+fmt.Sprintf(format, args...))
}

func newStack(name string, objs []object) *stack {
	s := &stack{
		name: name, ragtailImages: map[string][]string{}, usedFlags: map[string][]string{}, usedEnv: map[string][]string{},
		services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, claims: map[string]*corev1.PersistentVolumeClaim{},
		roles: map[string]*rbacv1.Role{},
	}
	namespaces := map[string]bool{}
	for _, o := range objs {
		if m, ok := o.obj.(metav1.Object); ok && !clusterScoped[o.obj.GetObjectKind().GroupVersionKind().Kind] {
			namespaces[m.GetNamespace()] = true
			s.namespace = m.GetNamespace()
			if m.GetNamespace() == "" {
				s.addf("%s: %s %s has no namespace: kubectl would put it in the current context's namespace (set namespace: in the kustomization)", o.build, o.obj.GetObjectKind().GroupVersionKind().Kind, m.GetName())
			}
		}
		s.checkMeta(o)
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			s.workloads = append(s.workloads, &workload{kind: "Deployment", name: v.Name, namespace: v.Namespace, tmpl: &v.Spec.Template, selector: v.Spec.Selector, longRunning: true})
		case *appsv1.StatefulSet:
			s.workloads = append(s.workloads, &workload{kind: "StatefulSet", name: v.Name, namespace: v.Namespace, tmpl: &v.Spec.Template, selector: v.Spec.Selector, longRunning: true, sts: v})
		case *appsv1.DaemonSet:
			s.workloads = append(s.workloads, &workload{kind: "DaemonSet", name: v.Name, namespace: v.Namespace, tmpl: &v.Spec.Template, selector: v.Spec.Selector, longRunning: true})
		case *batchv1.Job:
			s.workloads = append(s.workloads, &workload{kind: "Job", name: v.Name, namespace: v.Namespace, tmpl: &v.Spec.Template, job: v})
		case *corev1.Service:
			s.services[v.Name] = v
		case *corev1.ConfigMap:
			s.configMaps[v.Name] = v
		case *corev1.Secret:
			s.secrets[v.Name] = v
		case *corev1.PersistentVolumeClaim:
			s.claims[v.Name] = v
		case *rbacv1.Role:
			s.roles[v.Name] = v
		case *rbacv1.RoleBinding:
			s.roleBindings = append(s.roleBindings, v)
		case *corev1.Pod, *batchv1.CronJob, *appsv1.ReplicaSet:
			s.addf("%s %s: bare pods, ReplicaSets and CronJobs are not checked: use a Deployment, StatefulSet or Job", o.obj.GetObjectKind().GroupVersionKind().Kind, objName(o.obj))
		}
	}
	if len(namespaces) != 1 {
		s.addf("objects in several namespaces %v (or none): the stack's short Service names resolve only within one", sortedKeys(namespaces))
	}
	return s
}

// checkMeta checks what the API server validates of every object's name and labels.
func (s *stack) checkMeta(o object) {
	mo, ok := o.obj.(metav1.Object)
	if !ok {
		return
	}
	kind := o.obj.GetObjectKind().GroupVersionKind().Kind
	nameErrs := validation.IsDNS1123Subdomain(mo.GetName())
	if kind == "Service" {
		nameErrs = validation.IsDNS1035Label(mo.GetName())
	}
	for _, e := range nameErrs {
		s.addf("%s: %s %s: name: %s", o.build, kind, mo.GetName(), e)
	}
	for _, e := range metav1validation.ValidateLabels(mo.GetLabels(), field.NewPath("metadata", "labels")) {
		s.addf("%s: %s %s: %v", o.build, kind, mo.GetName(), e)
	}
}

// clusterScoped are the kinds that live outside namespaces.
var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "PersistentVolume": true,
	"StorageClass": true, "CustomResourceDefinition": true, "PriorityClass": true,
}

func objName(o any) string {
	if mo, ok := o.(metav1.Object); ok {
		return mo.GetNamespace() + "/" + mo.GetName()
	}
	return "?"
}

func (s *stack) containers() []container {
	var out []container
	for _, w := range s.workloads {
		for i := range w.tmpl.Spec.Containers {
			out = append(out, container{w, &w.tmpl.Spec.Containers[i]})
		}
	}
	return out
}

func (s *stack) check(root string) {
	for _, w := range s.workloads {
		s.checkWorkload(w)
	}
	for _, name := range sortedKeys(s.services) {
		s.checkService(s.services[name])
	}
	for _, c := range s.containers() {
		if isRagtail(c.c.Image) {
			s.checkRagtail(c)
		}
		if v := envValue(c.c, "OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
			s.checkOTLP(c, v)
		}
		switch imageRepo(c.c.Image) {
		case "prom/prometheus":
			s.checkPrometheus(root, c)
		case "otel/opentelemetry-collector", "otel/opentelemetry-collector-contrib":
			s.checkCollector(c)
		case "qdrant/qdrant":
			s.checkQdrant(c)
		}
	}
	for _, sh := range s.ingestShards {
		for _, ss := range s.serveShards {
			if sh != ss {
				s.addf("ragtail ingest --shards=%d but ragtail serve --shards=%d: serve refuses collections ingested with another shard count", sh, ss)
			}
		}
	}
	s.checkMerges()
}

// checkWorkload checks what every workload needs: a selector that selects its own pods,
// containers with pinned images, resources and (for long-running ones) probes, and references
// that resolve.
func (s *stack) checkWorkload(w *workload) {
	if w.selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.tmpl.Labels)) {
			s.addf("%s: selector %v does not match its pod template's labels %v", w, w.selector.MatchLabels, w.tmpl.Labels)
		}
	}
	if w.sts != nil {
		svc := s.services[w.sts.Spec.ServiceName]
		if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !selects(svc, w) {
			s.addf("%s: serviceName %s is not a headless Service (clusterIP: None) selecting its pods: the pods get no stable DNS names", w, w.sts.Spec.ServiceName)
		}
	}
	if len(w.tmpl.Spec.InitContainers) > 0 {
		s.addf("%s: init containers are not checked", w)
	}
	for i := range w.tmpl.Spec.Containers {
		c := container{w, &w.tmpl.Spec.Containers[i]}
		s.checkContainer(c)
	}
	for _, v := range w.tmpl.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			cm := s.configMap(w.String()+": volume "+v.Name, v.ConfigMap.Name)
			if cm != nil {
				for _, it := range v.ConfigMap.Items {
					if _, ok := cm.Data[it.Key]; !ok {
						s.addf("%s: volume %s: ConfigMap %s has no key %s", w, v.Name, v.ConfigMap.Name, it.Key)
					}
				}
			}
		case v.Secret != nil:
			keys := []string{}
			for _, it := range v.Secret.Items {
				keys = append(keys, it.Key)
			}
			s.secret(w.String()+": volume "+v.Name, v.Secret.SecretName, keys...)
		case v.PersistentVolumeClaim != nil:
			s.claim(w.String()+": volume "+v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
}

func (s *stack) configMap(where, name string) *corev1.ConfigMap {
	cm := s.configMaps[name]
	if cm == nil {
		s.addf("%s: ConfigMap %q is not in the manifests", where, name)
	}
	return cm
}

func (s *stack) secret(where, name string, keys ...string) {
	if sec := s.secrets[name]; sec != nil {
		for _, k := range keys {
			if _, ok := sec.Data[k]; !ok {
				if _, ok := sec.StringData[k]; !ok {
					s.addf("%s: Secret %s has no key %s", where, name, k)
				}
			}
		}
		return
	}
	userKeys, ok := userSecrets[name]
	if !ok {
		s.addf("%s: Secret %q is neither in the manifests nor one the user creates (userSecrets, README)", where, name)
		return
	}
	for _, k := range keys {
		if !slices.Contains(userKeys, k) {
			s.addf("%s: Secret %s: key %s is not one the README creates %v", where, name, k, userKeys)
		}
	}
}

func (s *stack) claim(where, name string) *corev1.PersistentVolumeClaim {
	c := s.claims[name]
	if c == nil {
		s.addf("%s: PersistentVolumeClaim %q is not in the manifests", where, name)
	}
	return c
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// refs returns the $(VAR) references of s, as Kubernetes expands them in env values, command
// and args ($$ escapes a $).
func refs(s string) []string {
	var out []string
	for _, m := range varRef.FindAllStringSubmatch(s, -1) {
		if m[1] != "" {
			out = append(out, m[1])
		}
	}
	return out
}

func (s *stack) checkContainer(c container) {
	for _, e := range validation.IsDNS1123Label(c.c.Name) {
		s.addf("%s: name: %s", c, e)
	}
	for _, p := range c.c.Ports {
		for _, e := range validation.IsValidPortNum(int(p.ContainerPort)) {
			s.addf("%s: container port %d: %s", c, p.ContainerPort, e)
		}
		if p.Name != "" {
			for _, e := range validation.IsValidPortName(p.Name) {
				s.addf("%s: port name %q: %s", c, p.Name, e)
			}
		}
	}
	for _, e := range c.c.Env {
		for _, msg := range validation.IsEnvVarName(e.Name) {
			s.addf("%s: env %q: %s", c, e.Name, msg)
		}
	}
	if c.w.tmpl != nil {
		for _, e := range metav1validation.ValidateLabels(c.w.tmpl.Labels, field.NewPath("spec", "template", "metadata", "labels")) {
			s.addf("%s: %v", c.w, e)
		}
	}
	if !pinned(c.c.Image) {
		s.addf("%s: image %q is not pinned: give it a version tag or a digest (never latest)", c, c.c.Image)
	}
	if isRagtail(c.c.Image) {
		s.ragtailImages[c.c.Image] = append(s.ragtailImages[c.c.Image], s.name+": "+c.String())
	}
	res := c.c.Resources
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := res.Requests[r]; !ok {
			s.addf("%s: no %s request", c, r)
		}
		if _, ok := res.Limits[r]; !ok {
			s.addf("%s: no %s limit", c, r)
		}
	}
	if c.w.longRunning {
		if c.c.ReadinessProbe == nil {
			s.addf("%s: no readiness probe", c)
		}
		if c.c.LivenessProbe == nil {
			s.addf("%s: no liveness probe", c)
		}
	}
	for kind, p := range map[string]*corev1.Probe{"readiness": c.c.ReadinessProbe, "liveness": c.c.LivenessProbe, "startup": c.c.StartupProbe} {
		if p == nil {
			continue
		}
		var port *intstr.IntOrString
		switch {
		case p.HTTPGet != nil:
			port = &p.HTTPGet.Port
		case p.TCPSocket != nil:
			port = &p.TCPSocket.Port
		case p.GRPC != nil:
			port = &intstr.IntOrString{IntVal: p.GRPC.Port}
		case p.Exec != nil:
			continue
		default:
			s.addf("%s: %s probe has no handler", c, kind)
			continue
		}
		if _, ok := containerPort(c.c, *port); !ok {
			s.addf("%s: %s probe port %q is not a port of the container", c, kind, port.String())
		}
	}

	// $(VAR) references: Kubernetes leaves an undefined one as it is, silently.
	defined := map[string]bool{}
	for _, ef := range c.c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			if cm := s.configMap(c.String()+": envFrom", ef.ConfigMapRef.Name); cm != nil {
				for k := range cm.Data {
					defined[ef.Prefix+k] = true
				}
			}
		case ef.SecretRef != nil:
			s.secret(c.String()+": envFrom", ef.SecretRef.Name)
			if sec := s.secrets[ef.SecretRef.Name]; sec != nil {
				for k := range sec.Data {
					defined[ef.Prefix+k] = true
				}
			}
		}
	}
	for _, e := range c.c.Env {
		for _, r := range refs(e.Value) {
			if !defined[r] {
				s.addf("%s: env %s refers to $(%s), which is not defined before it", c, e.Name, r)
			}
		}
		if vf := e.ValueFrom; vf != nil {
			switch {
			case vf.ConfigMapKeyRef != nil:
				if cm := s.configMap(c.String()+": env "+e.Name, vf.ConfigMapKeyRef.Name); cm != nil {
					if _, ok := cm.Data[vf.ConfigMapKeyRef.Key]; !ok {
						s.addf("%s: env %s: ConfigMap %s has no key %s", c, e.Name, vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key)
					}
				}
			case vf.SecretKeyRef != nil:
				s.secret(c.String()+": env "+e.Name, vf.SecretKeyRef.Name, vf.SecretKeyRef.Key)
			}
		}
		defined[e.Name] = true
	}
	for _, a := range slices.Concat(c.c.Command, c.c.Args) {
		for _, r := range refs(a) {
			if !defined[r] {
				s.addf("%s: argument %q refers to $(%s), which is not defined in its env", c, a, r)
			}
		}
	}
	for _, vm := range c.c.VolumeMounts {
		if !slices.ContainsFunc(c.w.tmpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }) &&
			(c.w.sts == nil || !slices.ContainsFunc(c.w.sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name })) {
			s.addf("%s: volume mount %s has no volume", c, vm.Name)
		}
	}
}

// pinned reports whether an image reference names one build: a digest, or a tag with a version
// number in it (not latest, not missing).
func pinned(image string) bool {
	if _, digest, ok := strings.Cut(image, "@"); ok {
		return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(digest)
	}
	last := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(last, ":")
	return ok && tag != "latest" && regexp.MustCompile(`[0-9]`).MatchString(tag)
}

// imageRepo is the image without its tag or digest.
func imageRepo(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// isRagtail reports whether the image is the one built from the repository's Dockerfile.
func isRagtail(image string) bool {
	r := imageRepo(image)
	return r == "ragtail" || strings.HasSuffix(r, "/ragtail")
}

// containerPort finds the container port a Service target port or a probe port names.
func containerPort(c *corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func selects(svc *corev1.Service, w *workload) bool {
	return len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.tmpl.Labels))
}

func (s *stack) checkService(svc *corev1.Service) {
	where := "Service " + svc.Namespace + "/" + svc.Name
	if len(svc.Spec.Selector) == 0 {
		s.addf("%s: no selector", where)
		return
	}
	var selected []*workload
	for _, w := range s.workloads {
		if selects(svc, w) {
			selected = append(selected, w)
		}
	}
	if len(selected) == 0 {
		s.addf("%s: selector %v matches no pod template", where, svc.Spec.Selector)
		return
	}
	for _, p := range svc.Spec.Ports {
		tp := p.TargetPort
		if tp.Type == intstr.Int && tp.IntVal == 0 {
			tp = intstr.FromInt32(p.Port)
		}
		for _, w := range selected {
			if _, _, ok := podPort(w, tp); !ok {
				s.addf("%s: port %d: target port %q is not a container port of %s", where, p.Port, tp.String(), w)
			}
		}
	}
}

func podPort(w *workload, p intstr.IntOrString) (*corev1.Container, corev1.ContainerPort, bool) {
	for i := range w.tmpl.Spec.Containers {
		if cp, ok := containerPort(&w.tmpl.Spec.Containers[i], p); ok {
			return &w.tmpl.Spec.Containers[i], cp, true
		}
	}
	return nil, corev1.ContainerPort{}, false
}

// endpoint is the container port a host:port inside the namespace reaches through a Service.
type endpoint struct {
	svc  *corev1.Service
	w    *workload
	c    *corev1.Container
	port corev1.ContainerPort
}

// resolve finds where host:port leads: the Service of that name and the container port its
// target port names, in the first workload it selects.
func (s *stack) resolve(host string, port int) (endpoint, error) {
	name := host
	for _, suffix := range []string{"." + s.namespace + ".svc.cluster.local", "." + s.namespace + ".svc", "." + s.namespace} {
		name = strings.TrimSuffix(name, suffix)
	}
	svc := s.services[name]
	if svc == nil {
		return endpoint{}, fmt.Errorf("no Service %q in the manifests", name)
	}
	for _, p := range svc.Spec.Ports {
		if int(p.Port) != port {
			continue
		}
		tp := p.TargetPort
		if tp.Type == intstr.Int && tp.IntVal == 0 {
			tp = intstr.FromInt32(p.Port)
		}
		for _, w := range s.workloads {
			if selects(svc, w) {
				if c, cp, ok := podPort(w, tp); ok {
					return endpoint{svc, w, c, cp}, nil
				}
			}
		}
		return endpoint{}, fmt.Errorf("Service %s port %d leads to no container port", name, port)
	}
	return endpoint{}, fmt.Errorf("Service %s has no port %d", name, port)
}

// resolveURL resolves an http(s) URL's host and port.
func (s *stack) resolveURL(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return endpoint{}, fmt.Errorf("not a URL with a host")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return endpoint{}, fmt.Errorf("port %q", port)
	}
	return s.resolve(u.Hostname(), n)
}

func (s *stack) resolveHostPort(hp string) (endpoint, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return endpoint{}, err
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return endpoint{}, err
	}
	return s.resolve(host, n)
}

// ragtailArgs is a ragtail command line: the subcommand, its --name=value flags (a bare flag is
// a boolean) and its positional arguments.
type ragtailArgs struct {
	sub        string
	flags      map[string]string
	positional []string
}

func (a ragtailArgs) flag(name, def string) string {
	if v, ok := a.flags[name]; ok {
		return v
	}
	return def
}

// positionalOK are the subcommands that take positional arguments.
var positionalOK = map[string]bool{"report": true, "ingest": true}

func (s *stack) parseRagtail(c container) (ragtailArgs, bool) {
	if len(c.c.Command) > 0 {
		s.addf("%s: command %q replaces the image's entrypoint: give ragtail's subcommand and flags as args", c, c.c.Command)
		return ragtailArgs{}, false
	}
	if len(c.c.Args) == 0 {
		s.addf("%s: no args: name the ragtail subcommand", c)
		return ragtailArgs{}, false
	}
	a := ragtailArgs{sub: c.c.Args[0], flags: map[string]string{}}
	for _, e := range c.c.Env {
		if strings.HasPrefix(e.Name, "RAGTAIL_") {
			s.usedEnv[e.Name] = append(s.usedEnv[e.Name], c.String())
		}
	}
	for _, arg := range c.c.Args[1:] {
		if strings.HasPrefix(arg, "-") {
			name, val, ok := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if !ok {
				val = "true"
			}
			s.usedFlags[name] = append(s.usedFlags[name], c.String())
			if _, dup := a.flags[name]; dup {
				s.addf("%s: ragtail %s: --%s given twice", c, a.sub, name)
			}
			a.flags[name] = val
			continue
		}
		if !positionalOK[a.sub] {
			s.addf("%s: ragtail %s: argument %q is not a flag: write flags as --name=value", c, a.sub, arg)
			continue
		}
		a.positional = append(a.positional, arg)
	}
	return a, true
}

// listenPorts returns the ports of the addresses that listen beyond loopback, which are the
// ones a pod must declare.
func listenPorts(addrs ...string) ([]int32, error) {
	var ports []int32
	for _, addr := range addrs {
		if addr == "" {
			continue // disabled
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", addr, err)
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("address %q: port: %w", addr, err)
		}
		if isLoopback(host) {
			continue
		}
		ports = append(ports, int32(n))
	}
	slices.Sort(ports)
	return ports, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func portOf(addr string) int32 {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.ParseUint(p, 10, 16)
	return int32(n)
}

func declaredPorts(c *corev1.Container) []int32 {
	var ports []int32
	for _, p := range c.Ports {
		ports = append(ports, p.ContainerPort)
	}
	slices.Sort(ports)
	return ports
}

// checkHTTPProbe checks that probe is GET path on the container port number want.
func (s *stack) checkHTTPProbe(c container, who, kind string, probe *corev1.Probe, path string, want int32) {
	if probe == nil {
		return // reported by checkContainer for long-running workloads
	}
	if probe.HTTPGet == nil {
		s.addf("%s: %s: %s probe is not an HTTP GET, want GET %s on port %d", c, who, kind, path, want)
		return
	}
	cp, _ := containerPort(c.c, probe.HTTPGet.Port)
	if probe.HTTPGet.Path != path || cp.ContainerPort != want {
		s.addf("%s: %s: %s probe GET %s on %d, want GET %s on the API port %d", c, who, kind, probe.HTTPGet.Path, cp.ContainerPort, path, want)
	}
}

func (s *stack) checkRagtail(c container) {
	a, ok := s.parseRagtail(c)
	if !ok {
		return
	}
	switch a.sub {
	case "serve":
		api, admin := a.flag("addr", defaultServeAddr), a.flag("admin-addr", defaultAdminAddr)
		listen, err := listenPorts(api, admin)
		if err != nil {
			s.addf("%s: ragtail serve: %v", c, err)
			return
		}
		if !slices.Equal(listen, declaredPorts(c.c)) {
			s.addf("%s: ragtail serve listens on %v (--addr, --admin-addr) but declares container ports %v", c, listen, declaredPorts(c.c))
		}
		s.checkHTTPProbe(c, "ragtail serve", "readiness", c.c.ReadinessProbe, "/readyz", portOf(api))
		s.checkHTTPProbe(c, "ragtail serve", "liveness", c.c.LivenessProbe, "/healthz", portOf(api))
		if admin != "" {
			host, _, _ := net.SplitHostPort(admin)
			if !isLoopback(host) && secretEnv(c.c, "RAGTAIL_ADMIN_TOKEN") == nil {
				s.addf("%s: ragtail serve: the admin listener %s is not on loopback, so every admin route needs RAGTAIL_ADMIN_TOKEN: set it from a Secret", c, admin)
			}
		}
		s.serveShards = append(s.serveShards, s.intFlag(c, a, "shards", defaultShards))
		s.checkBackends(c, a)
	case "llm-sim":
		addr := a.flag("addr", defaultLLMSimAddr)
		listen, err := listenPorts(addr)
		if err != nil {
			s.addf("%s: ragtail llm-sim: %v", c, err)
			return
		}
		if !slices.Equal(listen, declaredPorts(c.c)) {
			s.addf("%s: ragtail llm-sim listens on %v (--addr) but declares container ports %v", c, listen, declaredPorts(c.c))
		}
		s.checkHTTPProbe(c, "ragtail llm-sim", "readiness", c.c.ReadinessProbe, "/health", portOf(addr))
		s.checkHTTPProbe(c, "ragtail llm-sim", "liveness", c.c.LivenessProbe, "/health", portOf(addr))
	case "ingest":
		s.ingestShards = append(s.ingestShards, s.intFlag(c, a, "shards", defaultShards))
		s.checkBackends(c, a)
	case "bench":
		s.checkBench(c, a)
	case "report":
		s.checkReport(c, a)
	default:
		s.addf("%s: ragtail %s is not checked: add it to checkRagtail", c, a.sub)
	}
}

func (s *stack) intFlag(c container, a ragtailArgs, name string, def int) int {
	v := a.flag(name, strconv.Itoa(def))
	n, err := strconv.Atoi(v)
	if err != nil {
		s.addf("%s: ragtail %s --%s=%s: not a number", c, a.sub, name, v)
	}
	return n
}

// checkBackends checks that the backends serve and ingest are pointed at exist.
func (s *stack) checkBackends(c container, a ragtailArgs) {
	if q := a.flag("qdrant", envValue(c.c, "RAGTAIL_QDRANT")); q != "" {
		ep, err := s.resolveHostPort(q)
		switch {
		case err != nil:
			s.addf("%s: ragtail %s --qdrant=%s: %v", c, a.sub, q, err)
		case imageRepo(ep.c.Image) != "qdrant/qdrant" || ep.port.ContainerPort != qdrantGRPCPort:
			s.addf("%s: ragtail %s --qdrant=%s: Qdrant's gRPC port is %d; this reaches port %d of %s", c, a.sub, q, qdrantGRPCPort, ep.port.ContainerPort, ep.w)
		}
	}
	for _, name := range []string{"llm-url", "embed-url"} {
		if u := a.flag(name, ""); u != "" {
			if _, err := s.resolveURL(u); err != nil {
				s.addf("%s: ragtail %s --%s=%s: %v", c, a.sub, name, u, err)
			}
		}
	}
	if v := a.flag("cache", ""); v != "" {
		if u, err := url.Parse(v); err != nil || u.Scheme != "redis" {
			s.addf("%s: ragtail %s --cache=%s: want redis://HOST:PORT/DB", c, a.sub, v)
		} else if _, err := s.resolveHostPort(u.Host); err != nil {
			s.addf("%s: ragtail %s --cache=%s: %v", c, a.sub, v, err)
		}
	}
	if v := envValue(c.c, "RAGTAIL_DOCSTORE"); v != "" {
		if u, err := url.Parse(v); err != nil || u.Scheme != "postgres" {
			s.addf("%s: RAGTAIL_DOCSTORE=%s: want postgres://USER:PASSWORD@HOST:PORT/DB", c, v)
		} else if _, err := s.resolveHostPort(u.Host); err != nil {
			s.addf("%s: RAGTAIL_DOCSTORE: %v", c, err)
		}
	}
}

const indexVar = "$(JOB_COMPLETION_INDEX)"

func (s *stack) checkBench(c container, a ragtailArgs) {
	if u := a.flag("url", ""); u == "" {
		s.addf("%s: ragtail bench: no --url", c)
	} else if _, err := s.resolveURL(u); err != nil {
		s.addf("%s: ragtail bench --url=%s: %v", c, u, err)
	}
	job := c.w.job
	if job == nil {
		s.addf("%s: ragtail bench outside a Job", c)
		return
	}
	completions, parallelism := int32(1), int32(1)
	if job.Spec.Completions != nil {
		completions = *job.Spec.Completions
	}
	if job.Spec.Parallelism != nil {
		parallelism = *job.Spec.Parallelism
	}
	segment, segmented := a.flags["segment"]
	if !segmented {
		if completions > 1 || parallelism > 1 {
			s.addf("%s: %d pods of ragtail bench without --segment send identical schedules in synchronised bursts", c.w, max(completions, parallelism))
		}
		return
	}
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion {
		s.addf("%s: ragtail bench --segment needs completionMode Indexed (JOB_COMPLETION_INDEX)", c.w)
	}
	if completions != parallelism {
		s.addf("%s: completions %d and parallelism %d differ: the segments must all run at once", c.w, completions, parallelism)
	}
	if want := fmt.Sprintf("%s/%d", indexVar, completions); segment != want {
		s.addf("%s: ragtail bench --segment=%q, want %q (one segment per completion index)", c, segment, want)
	}
	if e := envVar(c.c, "JOB_COMPLETION_INDEX"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil ||
		e.ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		s.addf("%s: declare JOB_COMPLETION_INDEX from metadata.annotations['batch.kubernetes.io/job-completion-index'] so that $(JOB_COMPLETION_INDEX) expands in args", c)
	}
	if _, ok := a.flags["start-at"]; !ok {
		s.addf("%s: ragtail bench: no --start-at: the segments would start whenever their pods do", c)
	}
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 {
		s.addf("%s: a segment retried later no longer lines up with the others: want restartPolicy Never and backoffLimit 0", c.w)
	}
	var seg benchSegments
	for _, name := range []string{"json", "save-detailed"} {
		file := a.flag(name, "")
		if file == "" {
			s.addf("%s: ragtail bench: no --%s: the segment's results would be lost with its pod", c, name)
			continue
		}
		if !strings.Contains(file, indexVar) {
			s.addf("%s: ragtail bench --%s=%s: every segment would write the same file: put %s in its name", c, name, file, indexVar)
			continue
		}
		claim, rel, ok := s.claimPath(c, file)
		if !ok {
			continue
		}
		if name == "json" {
			seg = benchSegments{job: c.w.String(), n: int(completions), claim: claim, pattern: rel}
		}
	}
	if seg.claim != "" {
		s.benches = append(s.benches, seg)
	}
}

// claimPath maps a file of a container to the claim and the path inside it where it lives, or
// reports that it lives on no persistent volume claim.
func (s *stack) claimPath(c container, file string) (string, string, bool) {
	vm, rel, ok := mountOf(c.c, file)
	var vol *corev1.Volume
	if ok {
		for i := range c.w.tmpl.Spec.Volumes {
			if c.w.tmpl.Spec.Volumes[i].Name == vm.Name {
				vol = &c.w.tmpl.Spec.Volumes[i]
			}
		}
	}
	if vol == nil || vol.PersistentVolumeClaim == nil {
		s.addf("%s: ragtail %s is not on a persistent volume claim: it would be lost with the pod", c, flagFile(c, file))
		return "", "", false
	}
	name := vol.PersistentVolumeClaim.ClaimName
	if pvc := s.claims[name]; pvc != nil && !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
		s.addf("PersistentVolumeClaim %s is not ReadWriteMany: the pods that share it run on several nodes", name)
	}
	return name, path.Join(vm.SubPath, rel), true
}

// flagFile names the argument that mentions file, for messages.
func flagFile(c container, file string) string {
	for _, a := range c.c.Args {
		if strings.HasSuffix(a, "="+file) {
			return c.c.Args[0] + " " + a
		}
	}
	return c.c.Args[0] + " " + file
}

// mountOf returns the volume mount at the longest prefix of the container path p, and p
// relative to it.
func mountOf(c *corev1.Container, p string) (corev1.VolumeMount, string, bool) {
	var best corev1.VolumeMount
	found := false
	for _, vm := range c.VolumeMounts {
		mp := path.Clean(vm.MountPath)
		if p != mp && !strings.HasPrefix(p, mp+"/") {
			continue
		}
		if !found || len(mp) > len(path.Clean(best.MountPath)) {
			best, found = vm, true
		}
	}
	if !found {
		return best, "", false
	}
	return best, strings.TrimPrefix(strings.TrimPrefix(p, path.Clean(best.MountPath)), "/"), true
}

func (s *stack) checkReport(c container, a ragtailArgs) {
	if len(a.positional) < 2 {
		return // rendering one file, not a merge
	}
	mf := mergeFiles{where: c.String()}
	for _, f := range a.positional {
		claim, rel, ok := s.claimPath(c, f)
		if !ok {
			return
		}
		mf.files = append(mf.files, claimFile{claim, rel})
	}
	s.merges = append(s.merges, mf)
}

// checkMerges: a merge reads exactly the files the segments write.
func (s *stack) checkMerges() {
	if len(s.merges) > 0 && len(s.benches) == 0 {
		s.addf("ragtail report merges files that no segmented ragtail bench Job writes")
	}
	for _, mf := range s.merges {
		for _, b := range s.benches {
			var want, got []string
			for i := range b.n {
				want = append(want, strings.ReplaceAll(b.pattern, indexVar, strconv.Itoa(i)))
			}
			ok := true
			for _, f := range mf.files {
				got = append(got, f.rel)
				ok = ok && f.claim == b.claim
			}
			sort.Strings(got)
			sort.Strings(want)
			if !ok || !slices.Equal(got, want) {
				s.addf("%s: ragtail report merges %v of claim %s, want the %d segment files %v of claim %s that %s writes", mf.where, got, mf.files[0].claim, b.n, want, b.claim, b.job)
			}
		}
	}
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func envValue(c *corev1.Container, name string) string {
	if e := envVar(c, name); e != nil {
		return e.Value
	}
	return ""
}

func secretEnv(c *corev1.Container, name string) *corev1.SecretKeySelector {
	if e := envVar(c, name); e != nil && e.ValueFrom != nil {
		return e.ValueFrom.SecretKeyRef
	}
	return nil
}

// mountedFile returns what a container finds at path p: the ConfigMap or Secret (kind) of that
// name and the key it comes from.
func mountedFile(c container, p string) (kind, name, key string, ok bool) {
	vm, rel, ok := mountOf(c.c, p)
	if !ok {
		return "", "", "", false
	}
	if vm.SubPath != "" {
		if rel != "" {
			return "", "", "", false
		}
		rel = vm.SubPath
	}
	for _, v := range c.w.tmpl.Spec.Volumes {
		if v.Name != vm.Name {
			continue
		}
		var items []corev1.KeyToPath
		switch {
		case v.ConfigMap != nil:
			kind, name, items = "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items
		case v.Secret != nil:
			kind, name, items = "Secret", v.Secret.SecretName, v.Secret.Items
		default:
			return "", "", "", false
		}
		if len(items) == 0 {
			return kind, name, rel, true
		}
		for _, it := range items {
			if path.Clean(it.Path) == rel {
				return kind, name, it.Key, true
			}
		}
	}
	return "", "", "", false
}

// configFile returns the content of a ConfigMap file the container finds at p.
func (s *stack) configFile(c container, p string) (string, bool) {
	kind, name, key, ok := mountedFile(c, p)
	if !ok || kind != "ConfigMap" || s.configMaps[name] == nil {
		s.addf("%s: %s is not a file of a ConfigMap in the manifests", c, p)
		return "", false
	}
	data, ok := s.configMaps[name].Data[key]
	if !ok {
		s.addf("%s: %s: ConfigMap %s has no key %s", c, p, name, key)
	}
	return data, ok
}

func parseYAML(data string) (map[string]any, error) {
	var out map[string]any
	err := yaml.Unmarshal([]byte(data), &out)
	return out, err
}

// dig walks a parsed YAML document by keys.
func dig(doc any, keys ...string) any {
	for _, k := range keys {
		m, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		doc = m[k]
	}
	return doc
}

func argValue(c *corev1.Container, name string) string {
	for _, a := range slices.Concat(c.Command, c.Args) {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// checkPrometheus checks the Prometheus configuration the container runs against the
// repository's prometheus.yml and against the pods it is to scrape.
func (s *stack) checkPrometheus(root string, c container) {
	configPath := argValue(c.c, "--config.file")
	data, ok := s.configFile(c, configPath)
	if !ok {
		return
	}
	cfg, err := parseYAML(data)
	if err != nil {
		s.addf("%s: %s: %v", c, configPath, err)
		return
	}
	repoFile := filepath.Join(root, "prometheus.yml")
	b, err := os.ReadFile(repoFile)
	if err != nil {
		s.addf("%v", err)
		return
	}
	repo, err := parseYAML(string(b))
	if err != nil {
		s.addf("%s: %v", repoFile, err)
		return
	}
	for _, k := range []string{"global", "storage", "rule_files"} {
		if !reflect.DeepEqual(cfg[k], repo[k]) {
			s.addf("prometheus.yml %s %v differs from the repository's prometheus.yml %v", k, cfg[k], repo[k])
		}
	}
	jobs, repoJobs := scrapeJobs(cfg), scrapeJobs(repo)
	if !slices.Equal(sortedKeys(jobs), sortedKeys(repoJobs)) {
		s.addf("prometheus jobs %v, want the repository's prometheus.yml jobs %v", sortedKeys(jobs), sortedKeys(repoJobs))
	}
	for name, j := range jobs {
		if rj, ok := repoJobs[name]; ok && metricsPath(j) != metricsPath(rj) {
			s.addf("prometheus job %s: metrics_path %s, the repository's prometheus.yml has %s", name, metricsPath(j), metricsPath(rj))
		}
		s.checkScrapeJob(c, name, j)
	}

	// Rule files are named relative to the configuration file, as in the repository.
	rules, _ := cfg["rule_files"].([]any)
	for _, r := range rules {
		rf, _ := r.(string)
		inPod := path.Join(path.Dir(configPath), rf)
		got, ok := s.configFile(c, inPod)
		want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rf)))
		if err != nil {
			s.addf("rule file %s: %v", rf, err)
			continue
		}
		if ok && got != string(want) {
			s.addf("rule file %s (%s in the pod) differs from the repository's %s: copy it (cp %s deploy/kubernetes/base/prometheus/)", rf, inPod, rf, rf)
		}
	}
	s.checkPodDiscoveryRBAC(c)
}

func scrapeJobs(cfg map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _ := cfg["scrape_configs"].([]any)
	for _, j := range list {
		job, _ := j.(map[string]any)
		name, _ := job["job_name"].(string)
		out[name] = job
	}
	return out
}

func metricsPath(job map[string]any) string {
	if p, ok := job["metrics_path"].(string); ok {
		return p
	}
	return "/metrics"
}

func (s *stack) checkScrapeJob(prom container, name string, job map[string]any) {
	sds, _ := job["kubernetes_sd_configs"].([]any)
	if len(sds) == 0 {
		s.addf("prometheus job %s: no kubernetes_sd_configs: a Service name would reach one replica per scrape", name)
		return
	}
	var portRE *regexp.Regexp
	relabels, _ := job["relabel_configs"].([]any)
	for _, r := range relabels {
		rc, _ := r.(map[string]any)
		src, _ := rc["source_labels"].([]any)
		if action, _ := rc["action"].(string); action == "keep" && len(src) == 1 && src[0] == "__meta_kubernetes_pod_container_port_name" {
			re, _ := rc["regex"].(string)
			var err error
			if portRE, err = regexp.Compile("^(?:" + re + ")$"); err != nil {
				s.addf("prometheus job %s: regex %q: %v", name, re, err)
				return
			}
		}
	}
	if portRE == nil {
		s.addf("prometheus job %s: no keep rule on __meta_kubernetes_pod_container_port_name: every container port of the pods would be scraped", name)
		return
	}
	for _, sd := range sds {
		cfg, _ := sd.(map[string]any)
		if role, _ := cfg["role"].(string); role != "pod" {
			s.addf("prometheus job %s: kubernetes_sd_configs role %q: the checks know role pod", name, role)
			continue
		}
		if own, _ := dig(cfg, "namespaces", "own_namespace").(bool); !own {
			s.addf("prometheus job %s: kubernetes_sd_configs must keep to the namespace (namespaces: {own_namespace: true}): its Role allows no more", name)
		}
		sels, _ := cfg["selectors"].([]any)
		if len(sels) == 0 {
			s.addf("prometheus job %s: no selectors: it would scrape every pod of the namespace", name)
		}
		for _, sl := range sels {
			label, _ := dig(sl, "label").(string)
			selector, err := labels.Parse(label)
			if err != nil {
				s.addf("prometheus job %s: selector %q: %v", name, label, err)
				continue
			}
			matched := 0
			for _, w := range s.workloads {
				if !w.longRunning || !selector.Matches(labels.Set(w.tmpl.Labels)) {
					continue
				}
				matched++
				s.checkScrapeTarget(prom, name, job, label, w, portRE)
			}
			if matched == 0 {
				s.addf("prometheus job %s: selector %s matches no pod template", name, label)
			}
		}
	}
}

// checkScrapeTarget: the pods have the port the job keeps, and if it is ragtail's admin
// listener off loopback, the job sends the token ragtail expects.
func (s *stack) checkScrapeTarget(prom container, name string, job map[string]any, label string, w *workload, portRE *regexp.Regexp) {
	found := false
	for i := range w.tmpl.Spec.Containers {
		c := container{w, &w.tmpl.Spec.Containers[i]}
		for _, p := range c.c.Ports {
			if !portRE.MatchString(p.Name) {
				continue
			}
			found = true
			if !isRagtail(c.c.Image) || len(c.c.Args) == 0 || c.c.Args[0] != "serve" {
				continue
			}
			want := secretEnv(c.c, "RAGTAIL_ADMIN_TOKEN")
			if want == nil {
				continue // reported by checkRagtail
			}
			file, _ := dig(job, "authorization", "credentials_file").(string)
			if file == "" {
				s.addf("prometheus job %s: the admin listener needs RAGTAIL_ADMIN_TOKEN (authorization: {type: Bearer, credentials_file: ...}): Prometheus would get 401", name)
				continue
			}
			kind, secret, key, ok := mountedFile(prom, file)
			if !ok || kind != "Secret" || secret != want.Name || key != want.Key {
				s.addf("prometheus job %s: credentials_file %s is not the Secret %s key %s that %s's RAGTAIL_ADMIN_TOKEN comes from", name, file, want.Name, want.Key, w)
			}
		}
	}
	if !found {
		s.addf("prometheus job %s: keeps container ports named %q, which pods labelled %s do not have", name, strings.TrimSuffix(strings.TrimPrefix(portRE.String(), "^(?:"), ")$"), label)
	}
}

// checkPodDiscoveryRBAC: the Prometheus pod's ServiceAccount may list and watch pods.
func (s *stack) checkPodDiscoveryRBAC(c container) {
	sa := c.w.tmpl.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	for _, rb := range s.roleBindings {
		if !slices.ContainsFunc(rb.Subjects, func(sub rbacv1.Subject) bool {
			return sub.Kind == "ServiceAccount" && sub.Name == sa && sub.Namespace == s.namespace
		}) {
			continue
		}
		role := s.roles[rb.RoleRef.Name]
		if rb.RoleRef.Kind != "Role" || role == nil {
			continue
		}
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "pods") &&
				slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
				return
			}
		}
	}
	s.addf("%s: ServiceAccount %s may not list and watch pods: kubernetes_sd_configs would find no target", c, sa)
}

// otlpProtocol is the protocol ragtail's telemetry uses: OTEL_EXPORTER_OTLP_PROTOCOL, read by
// the SDK's exporters, http/protobuf when unset, as the specification has it.
func otlpProtocol(c *corev1.Container) string {
	if p := envValue(c, "OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
		return p
	}
	return "http/protobuf"
}

// checkOTLP: the endpoint reaches a collector's otlp receiver speaking the same protocol.
func (s *stack) checkOTLP(c container, endpoint string) {
	ep, err := s.resolveURL(endpoint)
	if err != nil {
		s.addf("%s: OTEL_EXPORTER_OTLP_ENDPOINT: %v", c, err)
		return
	}
	proto := otlpProtocol(c.c)
	target := container{ep.w, ep.c}
	if r := imageRepo(ep.c.Image); r != "otel/opentelemetry-collector" && r != "otel/opentelemetry-collector-contrib" {
		return // another OTLP receiver (Jaeger, say): its configuration is its own
	}
	cfg, ok := s.collectorConfig(target)
	if !ok {
		return
	}
	takes := ""
	for _, p := range []struct{ key, proto string }{{"grpc", "grpc"}, {"http", "http/protobuf"}} {
		if addr, _ := dig(cfg, "receivers", "otlp", "protocols", p.key, "endpoint").(string); addr != "" && portOf(addr) == ep.port.ContainerPort {
			takes = p.proto
		}
	}
	switch takes {
	case "":
		s.addf("%s: OTEL_EXPORTER_OTLP_ENDPOINT %s reaches container port %d of %s, where the collector's otlp receiver does not listen", c, endpoint, ep.port.ContainerPort, ep.w.name)
	case proto:
	default:
		s.addf("%s: OTEL_EXPORTER_OTLP_ENDPOINT %s (%s) reaches container port %d of %s, where the collector's otlp receiver takes %s", c, endpoint, proto, ep.port.ContainerPort, ep.w.name, takes)
	}
}

func (s *stack) collectorConfig(c container) (map[string]any, bool) {
	p := argValue(c.c, "--config")
	data, ok := s.configFile(c, p)
	if !ok {
		return nil, false
	}
	cfg, err := parseYAML(data)
	if err != nil {
		s.addf("%s: %s: %v", c, p, err)
		return nil, false
	}
	return cfg, true
}

// checkCollector: the pipelines use components the configuration defines, receivers listen on
// declared ports, and exporters reach Services of the stack.
func (s *stack) checkCollector(c container) {
	cfg, ok := s.collectorConfig(c)
	if !ok {
		return
	}
	pipelines, _ := dig(cfg, "service", "pipelines").(map[string]any)
	if len(pipelines) == 0 {
		s.addf("%s: the collector configuration has no pipelines", c)
	}
	for pname, p := range pipelines {
		for _, kind := range []string{"receivers", "processors", "exporters"} {
			list, _ := dig(p, kind).([]any)
			for _, id := range list {
				if dig(cfg, kind, fmt.Sprint(id)) == nil && !hasKey(cfg[kind], fmt.Sprint(id)) {
					s.addf("%s: pipeline %s uses %s %v, which the configuration does not define", c, pname, kind, id)
				}
			}
		}
	}
	for _, proto := range []string{"grpc", "http"} {
		if addr, _ := dig(cfg, "receivers", "otlp", "protocols", proto, "endpoint").(string); addr != "" {
			if !slices.Contains(declaredPorts(c.c), portOf(addr)) {
				s.addf("%s: the otlp %s receiver listens on %s, not a declared container port", c, proto, addr)
			}
		}
	}
	exporters, _ := cfg["exporters"].(map[string]any)
	for id, e := range exporters {
		addr, _ := dig(e, "endpoint").(string)
		if addr == "" {
			continue
		}
		var err error
		if strings.Contains(addr, "://") {
			_, err = s.resolveURL(addr)
		} else {
			_, err = s.resolveHostPort(addr)
		}
		if err != nil {
			s.addf("otel-collector exporter %s: %v", id, err)
		}
	}
}

func hasKey(m any, k string) bool {
	mm, ok := m.(map[string]any)
	if !ok {
		return false
	}
	_, ok = mm[k]
	return ok
}

// checkQdrant: the peers of the StatefulSet form one cluster: distributed mode on, a p2p port
// that the pods declare and the headless Service publishes before they are ready, a start
// script that bootstraps every peer from peer 0 under its stable name, and storage on the
// volume claim.
func (s *stack) checkQdrant(c container) {
	sts := c.w.sts
	if sts == nil {
		s.addf("%s: Qdrant in distributed mode runs as a StatefulSet (stable names and volumes per peer)", c)
		return
	}
	cfgData, ok := s.configFile(c, "/qdrant/config/production.yaml")
	if !ok {
		return
	}
	cfg, err := parseYAML(cfgData)
	if err != nil {
		s.addf("qdrant: production.yaml: %v", err)
		return
	}
	if enabled, _ := dig(cfg, "cluster", "enabled").(bool); !enabled {
		s.addf("qdrant: cluster.enabled is not true in production.yaml: the peers would run as separate single-node databases")
	}
	p2p := int32(qdrantP2PPort)
	if v, ok := dig(cfg, "cluster", "p2p", "port").(float64); ok {
		p2p = int32(v)
	}
	for _, p := range []struct {
		name string
		key  string
		def  int32
	}{{"http", "http_port", 6333}, {"grpc", "grpc_port", qdrantGRPCPort}, {"p2p", "", p2p}} {
		want := p.def
		if v, ok := dig(cfg, "service", p.key).(float64); ok && p.key != "" {
			want = int32(v)
		}
		cp, ok := containerPort(c.c, intstr.FromString(p.name))
		if !ok || cp.ContainerPort != want {
			s.addf("qdrant: the container port named %s is %d, production.yaml says %d", p.name, cp.ContainerPort, want)
		}
	}
	headless := s.services[sts.Spec.ServiceName]
	if headless != nil {
		if !headless.Spec.PublishNotReadyAddresses {
			s.addf("qdrant: Service %s must publish not-ready addresses: a peer joins the cluster before it is ready", headless.Name)
		}
		if !slices.ContainsFunc(headless.Spec.Ports, func(sp corev1.ServicePort) bool {
			return sp.Port == p2p && (sp.TargetPort.String() == "p2p" || sp.TargetPort.IntVal == p2p)
		}) {
			s.addf("qdrant: Service %s does not publish the p2p port %d", headless.Name, p2p)
		}
	}
	if len(c.c.Command) < 2 {
		s.addf("qdrant: want command [/bin/bash, SCRIPT] starting each peer")
		return
	}
	script, ok := s.configFile(c, c.c.Command[len(c.c.Command)-1])
	if !ok {
		return
	}
	bootstrap := fmt.Sprintf("http://%s-0.%s:%d", sts.Name, sts.Spec.ServiceName, p2p)
	if !slices.ContainsFunc(strings.Split(script, "\n"), func(l string) bool {
		return strings.Contains(l, "--bootstrap") && strings.Contains(l, bootstrap)
	}) {
		s.addf("qdrant: initialize.sh does not bootstrap from %s (peer 0 under the headless Service)", bootstrap)
	}
	if self := fmt.Sprintf("${HOSTNAME}.%s:%d", sts.Spec.ServiceName, p2p); !strings.Contains(script, self) {
		s.addf("qdrant: initialize.sh does not announce each peer as %s", self)
	}
	storage, _ := dig(cfg, "storage", "storage_path").(string)
	vm, _, ok := mountOf(c.c, storage)
	if storage == "" || !ok || !slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name }) {
		s.addf("qdrant: storage_path %s is not on a volume claim template: a peer would lose its data and identity on restart", storage)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
