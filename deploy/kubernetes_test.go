package deploy

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	kustomize "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifests are the objects one kustomization builds, decoded strictly
// into their API types.
type manifests struct {
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	monitors     []*monitoringv1.ServiceMonitor
	rules        []*monitoringv1.PrometheusRule
	netpols      []*networkingv1.NetworkPolicy
}

// workload is a StatefulSet or Deployment, as the checks see it.
type workload struct {
	name     string
	selector *metav1.LabelSelector
	template corev1.PodTemplateSpec
	claims   []string // volumeClaimTemplates
}

func (m *manifests) workloads() []workload {
	var out []workload
	for _, s := range m.statefulSets {
		w := workload{name: "StatefulSet/" + s.Name, selector: s.Spec.Selector, template: s.Spec.Template}
		for _, c := range s.Spec.VolumeClaimTemplates {
			w.claims = append(w.claims, c.Name)
		}
		out = append(out, w)
	}
	for _, d := range m.deployments {
		out = append(out, workload{name: "Deployment/" + d.Name, selector: d.Spec.Selector, template: d.Spec.Template})
	}
	return out
}

// decodeDoc decodes one YAML document strictly (unknown and duplicate
// fields refused) into the API type its apiVersion and kind name.
func decodeDoc(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		obj = new(kustomize.Kustomization)
	case "apps/v1 StatefulSet":
		obj = new(appsv1.StatefulSet)
	case "apps/v1 Deployment":
		obj = new(appsv1.Deployment)
	case "v1 Service":
		obj = new(corev1.Service)
	case "policy/v1 PodDisruptionBudget":
		obj = new(policyv1.PodDisruptionBudget)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		obj = new(monitoringv1.ServiceMonitor)
	case "networking.k8s.io/v1 NetworkPolicy":
		obj = new(networkingv1.NetworkPolicy)
	case "monitoring.coreos.com/v1 PrometheusRule":
		obj = new(monitoringv1.PrometheusRule)
	default:
		return nil, fmt.Errorf("unexpected %s %s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// kustomizations are the base and every overlay.
var kustomizations = []string{"kubernetes/base", "kubernetes/overlays/small", "kubernetes/overlays/production"}

// render runs kustomize on dir and returns its output.
func render(t *testing.T, dir string) []byte {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// build runs kustomize on dir and decodes every object it outputs.
func build(t *testing.T, dir string) *manifests {
	t.Helper()
	out := render(t, dir)
	m := &manifests{}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		obj, err := decodeDoc(doc)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			m.statefulSets = append(m.statefulSets, o)
		case *appsv1.Deployment:
			m.deployments = append(m.deployments, o)
		case *corev1.Service:
			m.services = append(m.services, o)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, o)
		case *monitoringv1.ServiceMonitor:
			m.monitors = append(m.monitors, o)
		case *networkingv1.NetworkPolicy:
			m.netpols = append(m.netpols, o)
		case *monitoringv1.PrometheusRule:
			m.rules = append(m.rules, o)
		default:
			t.Fatalf("%s: a %T among the built objects", dir, obj)
		}
	}
	return m
}

// TestSourceFilesDecodeStrictly reads every manifest file, patches
// included, into its API type: a misspelt field fails here even where
// kustomize would pass it on.
func TestSourceFilesDecodeStrictly(t *testing.T) {
	err := filepath.WalkDir("kubernetes", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range bytes.Split(b, []byte("\n---\n")) {
			if bytes.Contains(doc, []byte("$patch: delete")) {
				continue // a deletion names its target only
			}
			if _, err := decodeDoc(doc); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOverlaysAreWiredTogether(t *testing.T) {
	flags := map[string]map[string]bool{
		"node":    commandFlags(t, "node.go"),
		"control": commandFlags(t, "control.go"),
	}
	for _, dir := range kustomizations {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m := build(t, dir)
			ws := m.workloads()
			checkWorkloads(t, ws)
			checkServices(t, m, ws)
			checkDisruptionBudgets(t, m, ws)
			checkMonitors(t, m)
			node := find(t, ws, "StatefulSet/shardcache-node")
			control := find(t, ws, "Deployment/shardcache-control")
			checkNode(t, m, node, flags["node"])
			checkControl(t, m, control, flags["control"], strings.HasSuffix(dir, "production"))
			checkSecurity(t, m, ws, node, control, flags)
			checkPodSecurity(t, ws)
		})
	}
}

func find(t *testing.T, ws []workload, name string) workload {
	t.Helper()
	for _, w := range ws {
		if w.name == name {
			return w
		}
	}
	t.Fatalf("no %s", name)
	return workload{}
}

// selects reports whether sel matches the labels.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

func checkWorkloads(t *testing.T, ws []workload) {
	for _, w := range ws {
		if !selects(t, w.selector, w.template.Labels) {
			t.Errorf("%s: its selector does not match its pods' labels", w.name)
		}
		spec := w.template.Spec
		for _, c := range spec.Containers {
			ports := map[string]bool{}
			for _, p := range c.Ports {
				ports[p.Name] = true
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s/%s: no CPU and memory requests", w.name, c.Name)
			}
			for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil || !ports[p.HTTPGet.Port.StrVal] {
					t.Errorf("%s/%s: %s probe missing or on no named container port", w.name, c.Name, kind)
				}
			}
			for _, vm := range c.VolumeMounts {
				if !slices.Contains(w.claims, vm.Name) && !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }) {
					t.Errorf("%s/%s: mounts %q, which is no volume or claim template", w.name, c.Name, vm.Name)
				}
			}
			env := map[string]bool{}
			for _, e := range c.Env {
				env[e.Name] = true
			}
			for _, a := range append(slices.Clone(c.Command), c.Args...) {
				for _, v := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(a, -1) {
					if !env[v[1]] {
						t.Errorf("%s/%s: argument %q uses $(%s), which is not in its env", w.name, c.Name, a, v[1])
					}
				}
			}
		}
		for _, claim := range w.claims {
			if !slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool {
				return slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == claim })
			}) {
				t.Errorf("%s: claim template %q is mounted nowhere", w.name, claim)
			}
		}
	}
}

// selected returns the workloads whose pods s selects.
func selected(t *testing.T, s *corev1.Service, ws []workload) []workload {
	var out []workload
	for _, w := range ws {
		if selects(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, w.template.Labels) {
			out = append(out, w)
		}
	}
	return out
}

func checkServices(t *testing.T, m *manifests, ws []workload) {
	for _, s := range m.services {
		sel := selected(t, s, ws)
		if len(sel) != 1 {
			t.Errorf("Service %s selects %d workloads, want 1", s.Name, len(sel))
			continue
		}
		for _, p := range s.Spec.Ports {
			if !slices.ContainsFunc(sel[0].template.Spec.Containers, func(c corev1.Container) bool {
				return slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.StrVal })
			}) {
				t.Errorf("Service %s port %s targets %q, which %s does not expose", s.Name, p.Name, p.TargetPort.String(), sel[0].name)
			}
		}
	}
	for _, st := range m.statefulSets {
		i := slices.IndexFunc(m.services, func(s *corev1.Service) bool { return s.Name == st.Spec.ServiceName })
		if i < 0 || m.services[i].Spec.ClusterIP != corev1.ClusterIPNone || len(selected(t, m.services[i], ws)) != 1 ||
			selected(t, m.services[i], ws)[0].name != "StatefulSet/"+st.Name {
			t.Errorf("StatefulSet %s: serviceName %q is not a headless Service selecting it", st.Name, st.Spec.ServiceName)
		}
	}
}

func checkDisruptionBudgets(t *testing.T, m *manifests, ws []workload) {
	for _, w := range ws {
		n := 0
		for _, p := range m.pdbs {
			if selects(t, p.Spec.Selector, w.template.Labels) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s has %d PodDisruptionBudgets, want 1", w.name, n)
		}
	}
}

func checkMonitors(t *testing.T, m *manifests) {
	if len(m.monitors) == 0 {
		t.Error("no ServiceMonitor")
	}
	for _, mon := range m.monitors {
		var names []string
		for _, s := range m.services {
			if !selects(t, &mon.Spec.Selector, s.Labels) {
				continue
			}
			names = append(names, s.Name)
			for _, ep := range mon.Spec.Endpoints {
				if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					t.Errorf("ServiceMonitor %s scrapes port %q of Service %s, which has none", mon.Name, ep.Port, s.Name)
				}
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"shardcache-control", "shardcache-metrics"}) {
			t.Errorf("ServiceMonitor %s scrapes %v, want the node and control-plane Services", mon.Name, names)
		}
	}
}

// commandFlags are the flag names a cmd/shardcache source file (and the
// shared ones) registers.
func commandFlags(t *testing.T, file string) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?:Var|VarP)\([^"\n]*"([a-z][a-z0-9-]*)"`)
	out := map[string]bool{}
	for _, f := range []string{file, "main.go"} { // main.go: the flags every command shares
		b, err := os.ReadFile(filepath.Join("..", "cmd", "shardcache", f))
		if err != nil {
			continue
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			out[string(m[1])] = true
		}
	}
	if !out["listen"] && !out["client"] {
		t.Fatalf("found no flags in cmd/shardcache/%s", file)
	}
	return out
}

// args reads --name=value arguments after the subcommand, checking each
// flag exists.
func args(t *testing.T, w workload, flags map[string]bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	c := w.template.Spec.Containers[0]
	for _, a := range c.Args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Errorf("%s: argument %q: want --name=value", w.name, a)
			continue
		}
		if !flags[name] {
			t.Errorf("%s: shardcache %s has no flag --%s", w.name, c.Args[0], name)
		}
		out[name] = value
	}
	return out
}

func containerPort(t *testing.T, w workload, name string) int32 {
	t.Helper()
	for _, p := range w.template.Spec.Containers[0].Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("%s has no port %q", w.name, name)
	return 0
}

func servicePort(t *testing.T, m *manifests, service, port string) int32 {
	t.Helper()
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			if s.Name == service && p.Name == port {
				return p.Port
			}
		}
	}
	t.Fatalf("no Service %s with port %s", service, port)
	return 0
}

// listensOn checks that a listen address flag binds every interface on the
// container port named port.
func listensOn(t *testing.T, w workload, a map[string]string, flag, port string) {
	t.Helper()
	host, p, err := net.SplitHostPort(a[flag])
	if err != nil || host != "0.0.0.0" || p != strconv.Itoa(int(containerPort(t, w, port))) {
		t.Errorf("%s: --%s=%s, want 0.0.0.0:%d (its %s port)", w.name, flag, a[flag], containerPort(t, w, port), port)
	}
}

func checkNode(t *testing.T, m *manifests, node workload, flags map[string]bool) {
	a := args(t, node, flags)
	listensOn(t, node, a, "client", "client")
	listensOn(t, node, a, "peer", "peer")
	listensOn(t, node, a, "ops", "ops")
	if want := fmt.Sprintf("shardcache-control:%d", servicePort(t, m, "shardcache-control", "grpc")); a["control-plane"] != want {
		t.Errorf("node: --control-plane=%s, want %s", a["control-plane"], want)
	}
	if want := fmt.Sprintf(".shardcache-peers.$(POD_NAMESPACE).svc:%d", containerPort(t, node, "peer")); !strings.HasPrefix(a["advertise-peer"], "$(POD_NAME)") ||
		!strings.HasSuffix(a["advertise-peer"], want) {
		t.Errorf("node: --advertise-peer=%s, want $(POD_NAME)%s", a["advertise-peer"], want)
	}
	if _, ok := a["id"]; ok {
		t.Error("node: --id set; the pod's stable name (the default) is what keeps its keys across restarts")
	}
	c := node.template.Spec.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("node: probes on %s and %s, want /readyz and /healthz", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	// The drain runs inside the pod, with the admin token the pod mounts:
	// /drain is a POST the ops listener takes with that token only, and a
	// kubelet's httpGet can send neither.
	if want := []string{"/usr/local/bin/shardcache", "drain", "--ops=127.0.0.1:" + strconv.Itoa(int(containerPort(t, node, "ops"))),
		"--admin-token-file=" + a["admin-token-file"]}; c.Lifecycle == nil ||
		c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil || !slices.Equal(c.Lifecycle.PreStop.Exec.Command, want) {
		t.Errorf("node: no preStop %v", want)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.MountPath == a["data-dir"] && slices.Contains(node.claims, vm.Name)
	}) {
		t.Errorf("node: --data-dir=%s is not a mounted PersistentVolumeClaim", a["data-dir"])
	}
	checkNodeMemory(t, node, a["memory"])
	// The grace period covers the preStop hook and the stop that follows:
	// /drain waits up to drainOutWait for the epoch without the node, then
	// serves handoffs for up to --drain-grace; SIGTERM drains again (up to
	// --drain-grace more while peers still ask), then shuts the listeners
	// down (up to shutdownGrace) and closes the store, which writes out
	// its buffers, its probation objects and its index checkpoint. A node
	// killed before that loses them.
	grace, err := time.ParseDuration(a["drain-grace"])
	need := dataplaneConst(t, "ops.go", "drainOutWait") + 2*grace + dataplaneConst(t, "node.go", "shutdownGrace")
	if err != nil || node.template.Spec.TerminationGracePeriodSeconds == nil ||
		time.Duration(*node.template.Spec.TerminationGracePeriodSeconds)*time.Second <= need {
		t.Errorf("node: terminationGracePeriodSeconds must exceed %s (drainOutWait, twice --drain-grace=%s, shutdownGrace)", need, a["drain-grace"])
	}
}

func checkControl(t *testing.T, m *manifests, control workload, flags map[string]bool, external bool) {
	a := args(t, control, flags)
	listensOn(t, control, a, "listen", "grpc")
	listensOn(t, control, a, "ops", "ops")
	if *findDeployment(m, "shardcache-control").Spec.Replicas < 2 {
		t.Error("control plane: fewer than 2 replicas")
	}
	endpoints := strings.Split(a["etcd-endpoints"], ",")
	bundled := slices.ContainsFunc(m.statefulSets, func(s *appsv1.StatefulSet) bool { return s.Name == "etcd" })
	if external {
		if bundled || slices.ContainsFunc(endpoints, func(e string) bool { return strings.Contains(e, ".etcd:") }) {
			t.Errorf("production: the bundled etcd is still there or used (%v)", endpoints)
		}
		return
	}
	etcd := slices.IndexFunc(m.statefulSets, func(s *appsv1.StatefulSet) bool { return s.Name == "etcd" })
	if etcd < 0 {
		t.Fatal("no etcd StatefulSet")
	}
	checkEtcdCompaction(t, m.statefulSets[etcd])
	var want []string
	for i := range int(*m.statefulSets[etcd].Spec.Replicas) {
		want = append(want, fmt.Sprintf("http://etcd-%d.%s:%d", i, m.statefulSets[etcd].Spec.ServiceName, servicePort(t, m, "etcd", "client")))
	}
	if !slices.Equal(endpoints, want) || len(want) != 3 {
		t.Errorf("control plane: --etcd-endpoints=%v, want the 3 etcd members %v", endpoints, want)
	}
}

func findDeployment(m *manifests, name string) *appsv1.Deployment {
	for _, d := range m.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// checkSecurity: the peer hop is mutual TLS, joins and admin calls need
// tokens read from mounted secrets, the CA key is sealed, no address is
// trusted by default, the ops port is not on the client Service, and
// NetworkPolicies keep the peer and control-plane ports to their callers.
func checkSecurity(t *testing.T, m *manifests, ws []workload, node, control workload, flags map[string]map[string]bool) {
	na := args(t, node, flags["node"])
	if na["peer-certs-from-control-plane"] != "true" {
		t.Error("node: the peer hop is not mutual TLS (--peer-certs-from-control-plane=true)")
	}
	if na["disk-sync"] != "data" {
		t.Error("node: disk records are not fsynced (--disk-sync=data): a power failure loses the last seconds' objects")
	}
	for _, f := range []string{"insecure-peer-hop", "insecure-control-plane", "trusted-proxies", "join-token", "admin-token"} {
		if _, ok := na[f]; ok {
			t.Errorf("node: --%s set; insecure, or a secret on the command line", f)
		}
	}
	for _, f := range []string{"join-token-file", "admin-token-file", "control-plane-ca"} {
		secretFile(t, node, na, f)
	}
	ca := args(t, control, flags["control"])
	if ca["ca"] != "true" || ca["ca-seal-key-file"] == "" {
		t.Error("control plane: no certificate authority (--ca=true) with its key sealed (--ca-seal-key-file)")
	}
	for _, f := range []string{"insecure-open-join", "insecure-plaintext", "join-token", "admin-token"} {
		if _, ok := ca[f]; ok {
			t.Errorf("control plane: --%s set; insecure, or a secret on the command line", f)
		}
	}
	// The control plane's gRPC is TLS: tokens never cross the pod network
	// in the clear, and nodes verify whom they give them to.
	for _, f := range []string{"join-token-file", "admin-token-file", "ca-seal-key-file", "tls-cert", "tls-key"} {
		secretFile(t, control, ca, f)
	}
	// An etcd outside the cluster is reached over TLS, with a client
	// certificate from a Secret.
	for _, e := range strings.Split(ca["etcd-endpoints"], ",") {
		if strings.Contains(e, ".etcd:") {
			continue // the bundled etcd, which only the control plane may reach (its NetworkPolicy)
		}
		if !strings.HasPrefix(e, "https://") {
			t.Errorf("control plane: etcd endpoint %s is not TLS", e)
		}
		for _, f := range []string{"etcd-ca", "etcd-cert", "etcd-key"} {
			secretFile(t, control, ca, f)
		}
	}
	for _, s := range m.services {
		if len(selected(t, s, []workload{node})) == 0 {
			continue
		}
		for _, p := range s.Spec.Ports {
			if s.Spec.ClusterIP != corev1.ClusterIPNone && p.TargetPort.StrVal != "client" {
				t.Errorf("Service %s (not headless) exposes the nodes' %s port", s.Name, p.TargetPort.StrVal)
			}
		}
	}
	// policy finds the NetworkPolicy selecting w's pods and the peers its
	// rules let reach port.
	policy := func(w workload, port string) (found bool, from []networkingv1.NetworkPolicyPeer, open bool) {
		for _, np := range m.netpols {
			if !selects(t, &np.Spec.PodSelector, w.template.Labels) {
				continue
			}
			found = true
			for _, r := range np.Spec.Ingress {
				if !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.StrVal == port }) {
					continue
				}
				if len(r.From) == 0 {
					open = true
				}
				from = append(from, r.From...)
			}
		}
		return found, from, open
	}
	fromOnly := func(w workload, port string, allowed ...map[string]string) {
		t.Helper()
		found, from, open := policy(w, port)
		if !found || open || len(from) == 0 {
			t.Errorf("%s: no NetworkPolicy limits who reaches its %s port", w.name, port)
			return
		}
		for _, f := range from {
			if f.PodSelector == nil || f.NamespaceSelector != nil || f.IPBlock != nil ||
				!slices.ContainsFunc(allowed, func(l map[string]string) bool { return selects(t, f.PodSelector, l) }) {
				t.Errorf("%s: its %s port admits %+v, beyond %v", w.name, port, f, allowed)
			}
		}
	}
	fromOnly(node, "peer", node.template.Labels)
	fromOnly(control, "grpc", node.template.Labels, map[string]string{"shardcache.io/operator": "true"})
	for _, np := range m.netpols {
		if !slices.ContainsFunc(ws, func(w workload) bool { return selects(t, &np.Spec.PodSelector, w.template.Labels) }) {
			t.Errorf("NetworkPolicy %s selects no workload's pods", np.Name)
		}
	}
}
