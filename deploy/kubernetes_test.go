package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifests decodes every document of every file in kubernetes/ strictly
// into its Kubernetes API type: an unknown or misspelled field, a field
// given twice or a value of the wrong type fails t, as kubectl apply
// --validate=strict would refuse it. Objects are keyed "Kind/name".
func manifests(t *testing.T) map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/: %v", err)
	}
	objects := map[string]any{}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if len(bytes.TrimSpace([]byte(doc))) == 0 {
				continue
			}
			var meta struct {
				metav1.TypeMeta   `json:",inline"`
				metav1.ObjectMeta `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s, document %d: %v", file, i+1, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				obj = new(appsv1.Deployment)
			case "apps/v1 StatefulSet":
				obj = new(appsv1.StatefulSet)
			case "v1 Service":
				obj = new(corev1.Service)
			case "policy/v1 PodDisruptionBudget":
				obj = new(policyv1.PodDisruptionBudget)
			default:
				t.Fatalf("%s, document %d: %s %s is no kind this test knows: add it", file, i+1, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s, document %d (%s %s): %v", file, i+1, meta.Kind, meta.Name, err)
				continue
			}
			key := meta.Kind + "/" + meta.Name
			if _, dup := objects[key]; dup {
				t.Errorf("%s: %s defined twice", file, key)
			}
			objects[key] = obj
		}
	}
	return objects
}

// TestManifests_DecodeStrictly also proves that the strict decoding
// refuses what it should, so that a pass means something.
func TestManifests_DecodeStrictly(t *testing.T) {
	if n := len(manifests(t)); n != 5 {
		t.Errorf("%d objects, want 5 (Deployment, PodDisruptionBudget and Service; StatefulSet and Service)", n)
	}
	for _, bad := range []struct {
		doc  string
		into any
	}{
		{"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {prots: []}\n", new(corev1.Service)},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n", new(corev1.Service)},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: three}\n", new(appsv1.Deployment)},
	} {
		if err := yaml.UnmarshalStrict([]byte(bad.doc), bad.into); err == nil {
			t.Errorf("strict decoding took %q", bad.doc)
		}
	}
}

func TestManifests_PostgreSQL_ThreeReplicasProbedByGRPC(t *testing.T) {
	objects := manifests(t)
	d, ok := objects["Deployment/paymentsd"].(*appsv1.Deployment)
	if !ok {
		t.Fatal("no Deployment paymentsd")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	c := checkPod(t, "Deployment/paymentsd", d.Spec.Selector, d.Spec.Template)
	db := envVar(c, "PAYMENTSD_DB")
	if db == nil || db.ValueFrom == nil || db.ValueFrom.SecretKeyRef == nil || db.ValueFrom.SecretKeyRef.Name != "paymentsd-db" || db.ValueFrom.SecretKeyRef.Key != "url" {
		t.Errorf("PAYMENTSD_DB %+v, want it from the Secret paymentsd-db, key url", db)
	}
	checkKeysFromSecret(t, c, pod)

	pdb, ok := objects["PodDisruptionBudget/paymentsd"].(*policyv1.PodDisruptionBudget)
	if !ok {
		t.Fatal("no PodDisruptionBudget paymentsd")
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1 of the Deployment's pods", pdb.Spec)
	}
	checkService(t, objects, "Service/paymentsd", d.Spec.Template.Labels)
}

func TestManifests_Bbolt_OneReplicaWithAClaim(t *testing.T) {
	objects := manifests(t)
	s, ok := objects["StatefulSet/paymentsd-bolt"].(*appsv1.StatefulSet)
	if !ok {
		t.Fatal("no StatefulSet paymentsd-bolt")
	}
	if s.Spec.Replicas == nil || *s.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1: bbolt is one process's", s.Spec.Replicas)
	}
	c := checkPod(t, "StatefulSet/paymentsd-bolt", s.Spec.Selector, s.Spec.Template)
	if envVar(c, "PAYMENTSD_DB") != nil {
		t.Error("PAYMENTSD_DB set: the image's, in /var/lib/paymentsd, is the claim's")
	}
	checkKeysFromSecret(t, c, s.Spec.Template.Spec)
	if len(s.Spec.VolumeClaimTemplates) != 1 || s.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("volume claim templates %+v, want one, data", s.Spec.VolumeClaimTemplates)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "data" && m.MountPath == "/var/lib/paymentsd" && !m.ReadOnly
	}) {
		t.Errorf("mounts %+v, want the claim data on /var/lib/paymentsd", c.VolumeMounts)
	}
	svc := checkService(t, objects, "Service/"+s.Spec.ServiceName, s.Spec.Template.Labels)
	if svc != nil && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: clusterIP %q, want None, the StatefulSet's governing Service", svc.Name, svc.Spec.ClusterIP)
	}
}

// checkPod checks what every paymentsd pod must be: selected by its
// controller, one container probed over native gRPC on its gRPC port,
// with resources, running read-only as non-root with nothing to gain. It
// returns the container.
func checkPod(t *testing.T, name string, selector *metav1.LabelSelector, tmpl corev1.PodTemplateSpec) *corev1.Container {
	t.Helper()
	if selector == nil || !selects(selector.MatchLabels, tmpl.Labels) {
		t.Errorf("%s: selector %v does not select its pods' labels %v", name, selector, tmpl.Labels)
	}
	pod := tmpl.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", name, len(pod.Containers))
	}
	c := &pod.Containers[0]
	grpcPort := int32(0)
	for _, p := range c.Ports {
		if p.Name == "grpc" {
			grpcPort = p.ContainerPort
		}
	}
	if grpcPort != 50051 {
		t.Errorf("%s: gRPC port %d, want 50051, the image's", name, grpcPort)
	}
	for probeName, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != grpcPort || p.Exec != nil || p.HTTPGet != nil || p.TCPSocket != nil {
			t.Errorf("%s: %s probe %+v, want a gRPC probe of port %d", name, probeName, p, grpcPort)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: resources %+v, want CPU and memory requested, memory limited", name, c.Resources)
	}
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatalf("%s: no security context", name)
	}
	if !isTrue(psc.RunAsNonRoot) || !isTrue(sc.RunAsNonRoot) || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: runAsNonRoot %v/%v, runAsUser %v; want non-root", name, psc.RunAsNonRoot, sc.RunAsNonRoot, psc.RunAsUser)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: readOnlyRootFilesystem %v, allowPrivilegeEscalation %v; want true, false", name, sc.ReadOnlyRootFilesystem, sc.AllowPrivilegeEscalation)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s: capabilities %+v, want ALL dropped, none added", name, sc.Capabilities)
	}
	for _, s := range []*corev1.SeccompProfile{psc.SeccompProfile, sc.SeccompProfile} {
		if s == nil || s.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccomp profile %+v, want RuntimeDefault", name, s)
		}
	}
	return c
}

// checkKeysFromSecret: --api-keys names a file mounted read-only from the
// Secret paymentsd-api-keys.
func checkKeysFromSecret(t *testing.T, c *corev1.Container, pod corev1.PodSpec) {
	t.Helper()
	keys := envVar(c, "PAYMENTSD_API_KEYS")
	if keys == nil || keys.Value == "" {
		t.Fatal("PAYMENTSD_API_KEYS not set: dev mode, any token accepted")
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly || filepath.Dir(keys.Value) != m.MountPath {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "paymentsd-api-keys" &&
				v.Secret.DefaultMode != nil && *v.Secret.DefaultMode&0o022 == 0 {
				return
			}
		}
	}
	t.Errorf("PAYMENTSD_API_KEYS %s is no file of the Secret paymentsd-api-keys mounted read-only, writable by its owner alone", keys.Value)
}

// checkService: the Service name selects the pods labelled labels and
// exposes their gRPC and HTTP ports by name.
func checkService(t *testing.T, objects map[string]any, name string, labels map[string]string) *corev1.Service {
	t.Helper()
	svc, ok := objects[name].(*corev1.Service)
	if !ok {
		t.Errorf("no %s", name)
		return nil
	}
	if len(svc.Spec.Selector) == 0 || !selects(svc.Spec.Selector, labels) {
		t.Errorf("%s: selector %v does not select the pods %v", name, svc.Spec.Selector, labels)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Name+"="+p.TargetPort.String())
	}
	if !slices.Equal(ports, []string{"grpc=grpc", "http=http"}) {
		t.Errorf("%s: ports %q, want grpc and http to the pods' ports of those names", name, ports)
	}
	return svc
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// selects reports whether every label of selector is among labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func isTrue(b *bool) bool { return b != nil && *b }
