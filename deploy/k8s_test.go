package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/target"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// strictDecode decodes one YAML document into v as the API server would
// refuse it: duplicate keys (YAMLToJSONStrict), unknown fields and
// trailing data are errors.
func strictDecode(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the object")
	}
	return nil
}

// kustomization is the part of kustomize's file that deploy/k8s uses.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// k8sObjects are the manifests of k8s/, strictly decoded.
type k8sObjects struct {
	namespaces []corev1.Namespace
	configMaps []corev1.ConfigMap
	daemonSets []appsv1.DaemonSet
	kustomize  *kustomization
	files      []string // the manifest files, not kustomization.yaml
}

func loadK8s(t *testing.T) *k8sObjects {
	t.Helper()
	paths, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in k8s/ (%v)", err)
	}
	o := &k8sObjects{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(p) == "kustomization.yaml" {
			o.kustomize = &kustomization{}
			if err := strictDecode(data, o.kustomize); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			continue
		}
		o.files = append(o.files, filepath.Base(p))
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var tm struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s document %d: %v", p, i, err)
			}
			where := fmt.Sprintf("%s document %d (%s %s)", p, i, tm.APIVersion, tm.Kind)
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				var v corev1.Namespace
				err = strictDecode(doc, &v)
				o.namespaces = append(o.namespaces, v)
			case "v1 ConfigMap":
				var v corev1.ConfigMap
				err = strictDecode(doc, &v)
				o.configMaps = append(o.configMaps, v)
			case "apps/v1 DaemonSet":
				var v appsv1.DaemonSet
				err = strictDecode(doc, &v)
				o.daemonSets = append(o.daemonSets, v)
			default:
				t.Fatalf("%s: a kind the test does not check", where)
			}
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		}
	}
	return o
}

// TestDeployK8sManifests strictly decodes every manifest of k8s/ into its
// k8s.io/api type and checks that the pieces fit: the kustomization lists
// every manifest, the objects share the Namespace, the DaemonSet's
// ConfigMap exists and carries a target.json that target.Parse accepts
// (and that is config/all.json), and the DaemonSet runs the target as
// deploy/README.md says.
func TestDeployK8sManifests(t *testing.T) {
	t.Parallel()
	o := loadK8s(t)
	if o.kustomize == nil {
		t.Fatal("no k8s/kustomization.yaml")
	}
	if o.kustomize.Kind != "Kustomization" || !strings.HasPrefix(o.kustomize.APIVersion, "kustomize.config.k8s.io/") {
		t.Errorf("kustomization.yaml: %s %s", o.kustomize.APIVersion, o.kustomize.Kind)
	}
	if res := slices.Sorted(slices.Values(o.kustomize.Resources)); !slices.Equal(res, o.files) {
		t.Errorf("kustomization.yaml lists %v, k8s/ holds %v", res, o.files)
	}
	if len(o.namespaces) != 1 || len(o.configMaps) != 1 || len(o.daemonSets) != 1 {
		t.Fatalf("want one Namespace, ConfigMap and DaemonSet; have %d, %d, %d", len(o.namespaces), len(o.configMaps), len(o.daemonSets))
	}
	ns, cm, ds := o.namespaces[0], o.configMaps[0], o.daemonSets[0]
	if cm.Namespace != ns.Name || ds.Namespace != ns.Name {
		t.Errorf("ConfigMap in %q, DaemonSet in %q, Namespace %q", cm.Namespace, ds.Namespace, ns.Name)
	}
	// hostNetwork and hostPath need the privileged Pod Security level.
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("Namespace %s: pod-security.kubernetes.io/enforce = %q, want privileged", ns.Name, got)
	}

	// The ConfigMap: target.json parses, and is config/all.json.
	tj, ok := cm.Data["target.json"]
	if !ok {
		t.Fatalf("ConfigMap %s has no target.json", cm.Name)
	}
	if _, err := target.Parse(strings.NewReader(tj)); err != nil {
		t.Errorf("ConfigMap %s target.json: target.Parse: %v", cm.Name, err)
	}
	all, err := os.ReadFile("config/all.json")
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal([]byte(tj), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(all, &b); err != nil {
		t.Fatal(err)
	}
	if ja, _ := json.Marshal(a); !bytes.Equal(ja, mustJSON(t, b)) {
		t.Errorf("ConfigMap %s target.json differs from config/all.json", cm.Name)
	}

	checkDaemonSet(t, &ds, cm.Name)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, configMap string) {
	t.Helper()
	spec := &ds.Spec.Template.Spec
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if !spec.HostNetwork {
		t.Error("not hostNetwork: initiators reach the node's addresses, RDMA NICs are the node's")
	}
	if spec.HostNetwork && spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy %q with hostNetwork, want ClusterFirstWithHostNet", spec.DNSPolicy)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v: want above the target's 30 s drain", g)
	}
	if len(spec.NodeSelector) == 0 || len(spec.Tolerations) == 0 {
		t.Error("no nodeSelector or tolerations example")
	}
	for _, tol := range spec.Tolerations {
		if _, ok := spec.NodeSelector[tol.Key]; !ok {
			t.Errorf("toleration %s matches no nodeSelector key %v", tol.Key, spec.NodeSelector)
		}
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := &spec.Containers[0]
	cmd := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
	for _, want := range []string{"/rdisk target ", "--config /etc/rdisk/target.json", "--metrics-listen :9400"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("container runs %q, want %q in it", cmd, want)
		}
	}

	// Probes: GET /metrics on the metrics port 9400.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("no %s httpGet probe", name)
			continue
		}
		port := pr.HTTPGet.Port.IntVal
		if pr.HTTPGet.Port.StrVal != "" {
			port = ports[pr.HTTPGet.Port.StrVal]
		}
		if pr.HTTPGet.Path != "/metrics" || port != 9400 {
			t.Errorf("%s probe: GET %s on port %v (= %d), want /metrics on 9400", name, pr.HTTPGet.Path, pr.HTTPGet.Port.String(), port)
		}
	}

	// Privileged only as far as needed: not privileged, no escalation,
	// every capability dropped but those the comment explains.
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation not false")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("capabilities: ALL not dropped")
	} else {
		for _, add := range sc.Capabilities.Add {
			if add != "NET_BIND_SERVICE" && add != "IPC_LOCK" && add != "SYS_NICE" {
				t.Errorf("capability %s added", add)
			}
		}
	}

	// Volumes: the ConfigMap at /etc/rdisk/target.json (a directory
	// mount: a subPath never sees updates), /var/lib/rdisk and
	// /dev/infiniband from the node, the latter created empty where the
	// node has no RDMA device.
	vols := map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		vols[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		if v == nil {
			t.Errorf("volumeMount %s names no volume", m.Name)
			continue
		}
		mounted[m.Name] = true
		switch {
		case v.ConfigMap != nil:
			if v.ConfigMap.Name != configMap {
				t.Errorf("volume %s: ConfigMap %q, the manifest defines %q", m.Name, v.ConfigMap.Name, configMap)
			}
			if m.SubPath != "" {
				t.Errorf("ConfigMap volume %s mounted with subPath: it would never see updates", m.Name)
			}
			file := ""
			for _, it := range v.ConfigMap.Items {
				if it.Key == "target.json" {
					file = filepath.Join(m.MountPath, it.Path)
				}
			}
			if len(v.ConfigMap.Items) == 0 {
				file = filepath.Join(m.MountPath, "target.json")
			}
			if file != "/etc/rdisk/target.json" {
				t.Errorf("the ConfigMap's target.json is at %q, want /etc/rdisk/target.json", file)
			}
			mounted["config"] = true
		case v.HostPath != nil:
			if m.MountPath != v.HostPath.Path {
				t.Errorf("hostPath %s mounted at %s", v.HostPath.Path, m.MountPath)
			}
			if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
				t.Errorf("hostPath %s: type %v, want DirectoryOrCreate", v.HostPath.Path, v.HostPath.Type)
			}
			mounted[v.HostPath.Path] = true
		}
	}
	for _, want := range []string{"config", "/var/lib/rdisk", "/dev/infiniband"} {
		if !mounted[want] {
			t.Errorf("%s is not mounted", want)
		}
	}
	for name := range vols {
		if !mounted[name] {
			t.Errorf("volume %s is not mounted", name)
		}
	}
}
