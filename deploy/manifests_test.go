package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/offload-dev/offload/pkg/natsjs"
)

// The Kubernetes manifests (deploy/kubernetes) and the Dockerfile cannot be
// applied or built on the test machine (no cluster, no Docker); these tests
// check what can be checked without them: every file parses, the nats-server
// configuration loads with nats-server's own parser, and the names, ports,
// flags and environment variables agree with each other and with the
// binaries (their flag sets are read from their -h output).

const k8sDir = "kubernetes"

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []envVar `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe   *probe `yaml:"livenessProbe"`
	ReadinessProbe  *probe `yaml:"readinessProbe"`
	StartupProbe    *probe `yaml:"startupProbe"`
	SecurityContext *struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
	} `yaml:"securityContext"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               *struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
}

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		// Deployment, StatefulSet, Job
		Replicas    *int   `yaml:"replicas"`
		ServiceName string `yaml:"serviceName"`
		Template    struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		// Service
		ClusterIP string `yaml:"clusterIP"`
		Ports     []struct {
			Name string `yaml:"name"`
			Port int    `yaml:"port"`
		} `yaml:"ports"`
		// ScaledObject
		ScaleTargetRef struct {
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicaCount *int `yaml:"minReplicaCount"`
		Triggers        []struct {
			Type     string            `yaml:"type"`
			Metadata map[string]string `yaml:"metadata"`
		} `yaml:"triggers"`
		// NetworkPolicy
		Ingress []struct {
			From []struct {
				NamespaceSelector *struct {
					MatchLabels map[string]string `yaml:"matchLabels"`
				} `yaml:"namespaceSelector"`
			} `yaml:"from"`
			Ports []struct {
				Port int `yaml:"port"`
			} `yaml:"ports"`
		} `yaml:"ingress"`
	} `yaml:"spec"`
}

type kustomization struct {
	APIVersion         string   `yaml:"apiVersion"`
	Kind               string   `yaml:"kind"`
	Namespace          string   `yaml:"namespace"`
	Resources          []string `yaml:"resources"`
	ConfigMapGenerator []struct {
		Name  string   `yaml:"name"`
		Files []string `yaml:"files"`
	} `yaml:"configMapGenerator"`
	SecretGenerator []struct {
		Name string   `yaml:"name"`
		Envs []string `yaml:"envs"`
	} `yaml:"secretGenerator"`
}

// manifests reads the kustomization and every resource it lists, by
// "Kind/name".
func manifests(t *testing.T) (kustomization, map[string]k8sObject) {
	t.Helper()
	var k kustomization
	data, err := os.ReadFile(filepath.Join(k8sDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	objs := map[string]k8sObject{}
	for _, res := range k.Resources {
		data, err := os.ReadFile(filepath.Join(k8sDir, res))
		if err != nil {
			t.Fatalf("kustomization resource: %v", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or name: %+v", res, o)
			}
			key := o.Kind + "/" + o.Metadata.Name
			if _, dup := objs[key]; dup {
				t.Fatalf("%s: %s twice", res, key)
			}
			objs[key] = o
		}
	}
	return k, objs
}

func object(t *testing.T, objs map[string]k8sObject, key string) k8sObject {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		t.Fatalf("no %s in the manifests", key)
	}
	return o
}

// helpFlags returns the flags and the "(env NAME)" variables an -h or
// --help output lists.
func helpFlags(t *testing.T, bin string, args ...string) (flags, envs map[string]bool) {
	t.Helper()
	out, _ := exec.Command(bin, args...).CombinedOutput() // flag's -h exits 0, cobra's --help too
	flags, envs = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--?([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`env ([A-Z_][A-Z0-9_]*)`).FindAllStringSubmatch(string(out), -1) {
		envs[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("%s %v: no flags in its help:\n%s", bin, args, out)
	}
	return flags, envs
}

// parseArgs reads --name=value and --name value (and -name) arguments;
// flags without a value (booleans) map to "true".
func parseArgs(t *testing.T, args []string, known map[string]bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Fatalf("argument %q is not a flag", a)
		}
		name, value, has := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			t.Errorf("flag --%s is not a flag of the binary", name)
		}
		if !has {
			value = "true"
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				value = args[i+1]
				i++
			}
		}
		out[name] = value
	}
	return out
}

// expandEnv resolves an env list the way Kubernetes does: $(NAME) refers
// to a variable defined earlier in the list; secrets become "secret_KEY".
func expandEnv(t *testing.T, env []envVar) map[string]string {
	t.Helper()
	vals := map[string]string{}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, e := range env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			vals[e.Name] = "secret_" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			vals[e.Name] = "<field:" + e.ValueFrom.FieldRef.FieldPath + ">"
		default:
			vals[e.Name] = ref.ReplaceAllStringFunc(e.Value, func(m string) string {
				name := ref.FindStringSubmatch(m)[1]
				v, ok := vals[name]
				if !ok {
					t.Errorf("env %s refers to $(%s), not defined before it", e.Name, name)
				}
				return v
			})
		}
	}
	return vals
}

// moduleVersion returns the version go.mod requires of module path ("go":
// its go directive), without the leading v.
func moduleVersion(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(path) + ` v?(\S+)`)
	m := re.FindSubmatch(data)
	if m == nil {
		t.Fatalf("go.mod requires no %s", path)
	}
	return string(m[1])
}

// deref shows an optional number.
func deref(p *int) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(*p)
}

func portOf(t *testing.T, c container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

// checkProbe checks that p is an HTTP GET of path on the container port
// named portName (by name or number).
func checkProbe(t *testing.T, c container, what string, p *probe, path, portName string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP %s probe", c.Name, what)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: %s probe on %q, want %q", c.Name, what, p.HTTPGet.Path, path)
	}
	if p.HTTPGet.Port != portName && p.HTTPGet.Port != portOf(t, c, portName) {
		t.Errorf("%s: %s probe on port %v, want %s", c.Name, what, p.HTTPGet.Port, portName)
	}
}

func checkHardened(t *testing.T, name string, spec podSpec) {
	t.Helper()
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || (sc.RunAsUser != nil && *sc.RunAsUser == 0) {
		t.Errorf("%s: the pod does not run as non-root", name)
	}
	for _, c := range spec.Containers {
		if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem {
			t.Errorf("%s/%s: privilege escalation allowed or a writable root file system", name, c.Name)
		}
	}
}

// checkNATSURL checks a client URL list: the role's user in the first
// URL (with its password from the Secret), every node of the StatefulSet,
// each on the client port.
func checkNATSURL(t *testing.T, what, list, role string, nodes []string, port int) {
	t.Helper()
	var hosts []string
	for i, raw := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			t.Errorf("%s: %q: %v", what, raw, err)
			continue
		}
		pw, _ := u.User.Password()
		if i == 0 && (u.User.Username() != role || pw != "secret_"+passwordEnv(role)) {
			t.Errorf("%s: first URL's user %q password %q, want %s with $(%s) from the Secret", what, u.User.Username(), pw, role, passwordEnv(role))
		}
		if u.Scheme != "nats" || u.Port() != strconv.Itoa(port) {
			t.Errorf("%s: %s, want nats:// on port %d", what, u.Redacted(), port)
		}
		hosts = append(hosts, u.Hostname())
	}
	if !slices.Equal(hosts, nodes) {
		t.Errorf("%s: hosts %v, want the nodes %v", what, hosts, nodes)
	}
}

// TestKubernetesManifests cross-checks deploy/kubernetes: the NATS
// StatefulSet and its configuration, the provision Job, the toolworker
// Deployment, the KEDA ScaledObject and the NetworkPolicy.
func TestKubernetesManifests(t *testing.T) {
	agentBin, workerBin := binaries(t)
	k, objs := manifests(t)

	// auth.conf is the one of deploy/nats.
	a, _ := os.ReadFile("nats/auth.conf")
	b, err := os.ReadFile(filepath.Join(k8sDir, "auth.conf"))
	if err != nil || !bytes.Equal(a, b) {
		t.Errorf("kubernetes/auth.conf differs from nats/auth.conf (copy it): %v", err)
	}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			if _, err := os.Stat(filepath.Join(k8sDir, f)); err != nil {
				t.Errorf("configMapGenerator %s: %v", g.Name, err)
			}
		}
	}
	if len(k.SecretGenerator) != 1 || !slices.Equal(k.SecretGenerator[0].Envs, []string{"passwords.env"}) {
		t.Fatalf("secretGenerator %+v, want one Secret from passwords.env", k.SecretGenerator)
	}
	if ignore, _ := os.ReadFile("../.gitignore"); !strings.Contains(string(ignore), "/deploy/kubernetes/passwords.env") {
		t.Errorf(".gitignore does not keep deploy/kubernetes/passwords.env out of git")
	}
	secret := k.SecretGenerator[0].Name
	secretKeys := map[string]bool{"OFFLOAD_ROUTE_PASSWORD": true}
	for _, r := range roles {
		secretKeys[passwordEnv(r)] = true
	}
	for key, o := range objs {
		for _, c := range o.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					if ref := e.ValueFrom.SecretKeyRef; ref.Name != secret || !secretKeys[ref.Key] || ref.Key != e.Name {
						t.Errorf("%s: env %s from secret %s key %s; want %s, a key of passwords.env named as the variable", key, e.Name, ref.Name, ref.Key, secret)
					}
				}
			}
		}
	}

	// NATS: the StatefulSet, its headless Service, its configuration.
	sts := object(t, objs, "StatefulSet/offload-nats")
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("the NATS StatefulSet has %s replicas, want 3", deref(sts.Spec.Replicas))
	}
	checkHardened(t, "StatefulSet/offload-nats", sts.Spec.Template.Spec)
	headless := object(t, objs, "Service/"+sts.Spec.ServiceName)
	if headless.Spec.ClusterIP != "None" {
		t.Errorf("service %s of the StatefulSet is not headless", sts.Spec.ServiceName)
	}
	natsC := sts.Spec.Template.Spec.Containers[0]
	clientPort, clusterPort, monitorPort := portOf(t, natsC, "client"), portOf(t, natsC, "cluster"), portOf(t, natsC, "monitor")
	var nodes []string
	for i := range *sts.Spec.Replicas {
		nodes = append(nodes, fmt.Sprintf("%s-%d.%s", sts.Metadata.Name, i, sts.Spec.ServiceName))
	}
	checkProbe(t, natsC, "startup", natsC.StartupProbe, "/healthz", "monitor")
	if want := "nats:" + moduleVersion(t, "github.com/nats-io/nats-server/v2"); natsC.Image != want {
		t.Errorf("NATS image %q, want %s (the nats-server the tests run)", natsC.Image, want)
	}
	if !slices.Equal(natsC.Args, []string{"--config", "/etc/nats/nats.conf"}) {
		t.Errorf("nats args %v", natsC.Args)
	}
	env := expandEnv(t, natsC.Env)
	dir := t.TempDir()
	for _, f := range []string{"nats.conf", "auth.conf"} {
		data, err := os.ReadFile(filepath.Join(k8sDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("POD_NAME", "offload-nats-1")
	t.Setenv("OFFLOAD_ROUTE_PASSWORD", routePassword)
	t.Setenv("OFFLOAD_NATS_ROUTES", strings.ReplaceAll(env["OFFLOAD_NATS_ROUTES"], "secret_OFFLOAD_ROUTE_PASSWORD", routePassword))
	for name := range env {
		if !strings.HasPrefix(name, "OFFLOAD_") && name != "POD_NAME" && name != "GOMEMLIMIT" {
			t.Errorf("nats env %s is read by nothing", name)
		}
	}
	for _, r := range roles {
		if _, ok := env[passwordEnv(r)]; !ok {
			t.Errorf("nats env lacks %s: auth.conf reads it, and a missing one stops the server", passwordEnv(r))
		}
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("kubernetes/nats.conf: %v", err)
	}
	if opts.ServerName != "offload-nats-1" || opts.Port != clientPort || opts.HTTPPort != monitorPort || opts.Cluster.Port != clusterPort ||
		!opts.JetStream || len(opts.Users) != len(roles) || opts.Cluster.Username != "route" || opts.Cluster.Password != routePassword {
		t.Errorf("nats.conf: name %q ports %d/%d/%d (want the container's %d/%d/%d), jetstream %v, %d users, route user %q",
			opts.ServerName, opts.Port, opts.HTTPPort, opts.Cluster.Port, clientPort, monitorPort, clusterPort, opts.JetStream, len(opts.Users), opts.Cluster.Username)
	}
	var routeHosts []string
	for _, r := range opts.Routes {
		pw, _ := r.User.Password()
		if r.User.Username() != "route" || pw != routePassword || r.Port() != strconv.Itoa(clusterPort) {
			t.Errorf("route %s: want route:$(OFFLOAD_ROUTE_PASSWORD) on port %d", r.Redacted(), clusterPort)
		}
		routeHosts = append(routeHosts, r.Hostname())
	}
	if !slices.Equal(routeHosts, nodes) {
		t.Errorf("routes to %v, want the nodes %v", routeHosts, nodes)
	}
	for _, svc := range []string{"Service/offload-nats", "Service/" + sts.Spec.ServiceName} {
		for _, p := range object(t, objs, svc).Spec.Ports {
			if want := map[string]int{"client": clientPort, "cluster": clusterPort, "monitor": monitorPort}[p.Name]; p.Port != want {
				t.Errorf("%s port %s is %d, want %d", svc, p.Name, p.Port, want)
			}
		}
	}

	// The toolworker Deployment.
	workerFlags, workerEnvs := helpFlags(t, workerBin, "-h")
	dep := object(t, objs, "Deployment/offload-toolworker")
	checkHardened(t, "Deployment/offload-toolworker", dep.Spec.Template.Spec)
	wc := dep.Spec.Template.Spec.Containers[0]
	if wc.Image != "offload-toolworker:dev" {
		t.Errorf("toolworker image %q, want offload-toolworker:dev (deploy/README.md builds it)", wc.Image)
	}
	wargs := parseArgs(t, wc.Args, workerFlags)
	grace, err := time.ParseDuration(wargs["grace"])
	if err != nil {
		t.Errorf("toolworker --grace %q: %v", wargs["grace"], err)
	}
	// The worker may take its grace period plus 15 s (its stop margin) to
	// stop.
	if tg := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= grace+15*time.Second {
		t.Errorf("terminationGracePeriodSeconds %s, want above --grace %v + 15 s", deref(tg), grace)
	}
	_, metricsPort, _ := strings.Cut(wargs["metrics"], ":")
	if metricsPort != strconv.Itoa(portOf(t, wc, "metrics")) {
		t.Errorf("toolworker --metrics %q, container port metrics %d", wargs["metrics"], portOf(t, wc, "metrics"))
	}
	checkProbe(t, wc, "liveness", wc.LivenessProbe, "/healthz", "metrics")
	checkProbe(t, wc, "readiness", wc.ReadinessProbe, "/readyz", "metrics")
	wenv := expandEnv(t, wc.Env)
	for _, e := range wc.Env {
		if e.ValueFrom == nil && !workerEnvs[e.Name] {
			t.Errorf("toolworker env %s: the binary reads no such variable (its help names %v)", e.Name, workerEnvs)
		}
	}
	checkNATSURL(t, "toolworker NATS_URL", wenv["NATS_URL"], "worker_http", nodes, clientPort)
	if r, err := strconv.Atoi(wenv["OFFLOAD_REPLICAS"]); err != nil || r < 1 || r > *sts.Spec.Replicas {
		t.Errorf("toolworker OFFLOAD_REPLICAS %q: want 1 to the %d nodes", wenv["OFFLOAD_REPLICAS"], *sts.Spec.Replicas)
	}
	tools := strings.Split(wargs["tools"], ",")

	// The provision Job, with the agent image.
	provFlags, provEnvs := helpFlags(t, agentBin, "provision", "--help")
	job := object(t, objs, "Job/offload-provision")
	checkHardened(t, "Job/offload-provision", job.Spec.Template.Spec)
	jc := job.Spec.Template.Spec.Containers[0]
	if jc.Image != "offload-agent:dev" || len(jc.Args) == 0 || jc.Args[0] != "provision" {
		t.Fatalf("provision Job: image %q args %v, want offload-agent:dev provision …", jc.Image, jc.Args)
	}
	jargs := parseArgs(t, jc.Args[1:], provFlags)
	if !slices.Equal(strings.Split(jargs["tools"], ","), tools) {
		t.Errorf("provision --tools %q, the workers serve %v", jargs["tools"], tools)
	}
	jenv := expandEnv(t, jc.Env)
	for _, e := range jc.Env {
		if e.ValueFrom == nil && !provEnvs[e.Name] {
			t.Errorf("provision env %s: agent provision reads no such variable (its help names %v)", e.Name, provEnvs)
		}
	}
	checkNATSURL(t, "provision NATS_URL", jenv["NATS_URL"], "admin", nodes, clientPort)
	if jenv["OFFLOAD_REPLICAS"] != wenv["OFFLOAD_REPLICAS"] {
		t.Errorf("provision OFFLOAD_REPLICAS %q, workers %q", jenv["OFFLOAD_REPLICAS"], wenv["OFFLOAD_REPLICAS"])
	}

	// The agent serve Deployment, with the agent image, as the serve user.
	serveFlags, serveEnvs := helpFlags(t, agentBin, "serve", "--help")
	sd := object(t, objs, "Deployment/offload-agent-serve")
	checkHardened(t, "Deployment/offload-agent-serve", sd.Spec.Template.Spec)
	sc := sd.Spec.Template.Spec.Containers[0]
	if sc.Image != "offload-agent:dev" || len(sc.Args) == 0 || sc.Args[0] != "serve" {
		t.Fatalf("agent serve: image %q args %v, want offload-agent:dev serve …", sc.Image, sc.Args)
	}
	sargs := parseArgs(t, sc.Args[1:], serveFlags)
	if _, port, _ := strings.Cut(sargs["http"], ":"); port != strconv.Itoa(portOf(t, sc, "http")) {
		t.Errorf("agent serve --http %q, container port http %d", sargs["http"], portOf(t, sc, "http"))
	}
	// serve stops within 30 s (its runs suspended and handed over).
	if tg := sd.Spec.Template.Spec.TerminationGracePeriodSeconds; tg == nil || *tg <= 30 {
		t.Errorf("agent serve terminationGracePeriodSeconds %s, want above its 30 s stop", deref(tg))
	}
	checkProbe(t, sc, "liveness", sc.LivenessProbe, "/healthz", "http")
	checkProbe(t, sc, "readiness", sc.ReadinessProbe, "/readyz", "http")
	senv := expandEnv(t, sc.Env)
	for _, e := range sc.Env {
		if e.ValueFrom == nil && !serveEnvs[e.Name] {
			t.Errorf("agent serve env %s: the binary reads no such variable (its help names %v)", e.Name, serveEnvs)
		}
	}
	checkNATSURL(t, "agent serve NATS_URL", senv["NATS_URL"], "serve", nodes, clientPort)

	// KEDA: one nats-jetstream trigger per served tool, on its consumer's
	// lag, read from the monitoring port through the headless Service;
	// never scaled to zero.
	so := object(t, objs, "ScaledObject/offload-toolworker")
	if so.Spec.ScaleTargetRef.Name != dep.Metadata.Name {
		t.Errorf("ScaledObject scales %q, want %s", so.Spec.ScaleTargetRef.Name, dep.Metadata.Name)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
		t.Errorf("minReplicaCount %s: the registry is the tools' only advertisement, never scale to zero", deref(so.Spec.MinReplicaCount))
	}
	var consumers []string
	endpoint := fmt.Sprintf("%s.%s.svc.cluster.local:%d", sts.Spec.ServiceName, k.Namespace, monitorPort)
	for _, tr := range so.Spec.Triggers {
		m := tr.Metadata
		if tr.Type != "nats-jetstream" || m["natsServerMonitoringEndpoint"] != endpoint || m["account"] != "$G" || m["stream"] != natsjs.NamesFor("").Tasks {
			t.Errorf("trigger %s %v: want nats-jetstream on %s, account $G, stream %s", tr.Type, m, endpoint, natsjs.NamesFor("").Tasks)
		}
		if n, err := strconv.Atoi(m["lagThreshold"]); err != nil || n < 1 {
			t.Errorf("trigger on %s: lagThreshold %q", m["consumer"], m["lagThreshold"])
		}
		consumers = append(consumers, m["consumer"])
	}
	var want []string
	for _, tool := range tools {
		want = append(want, natsjs.TaskConsumerName(tool))
	}
	if !slices.Equal(consumers, want) {
		t.Errorf("triggers on the consumers %v, want those of the served tools %v", consumers, want)
	}

	// The scaler reaches the monitoring port from KEDA's namespace.
	np := object(t, objs, "NetworkPolicy/offload-nats")
	reachable := false
	for _, in := range np.Spec.Ingress {
		for _, from := range in.From {
			if from.NamespaceSelector != nil && from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "keda" &&
				slices.ContainsFunc(in.Ports, func(p struct {
					Port int `yaml:"port"`
				}) bool {
					return p.Port == monitorPort
				}) {
				reachable = true
			}
		}
	}
	if !reachable {
		t.Errorf("the NetworkPolicy lets KEDA's namespace not reach the monitoring port %d", monitorPort)
	}
}
