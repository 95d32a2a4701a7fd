package kube

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ttft-dev/ttft/internal/gateway/epp"
)

// TestShippedKubernetesManifest decodes every object of
// deploy/envoy/epp-kubernetes.yaml strictly into its Kubernetes type (a
// misspelt field fails), and checks the Role grants exactly what the
// picker's discovery and leader election call, and the probes ask the
// health services the picker serves.
func TestShippedKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "envoy", "epp-kubernetes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	var role rbacv1.Role
	var dep appsv1.Deployment
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		var obj any
		switch tm.Kind {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "Role":
			obj = &role
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "Deployment":
			obj = &dep
		case "Service":
			obj = &corev1.Service{}
		default:
			t.Fatalf("unexpected kind %q", tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Errorf("%s: %v", tm.Kind, err)
		}
		kinds[tm.Kind] = true
	}
	if len(kinds) != 5 {
		t.Errorf("kinds %v", kinds)
	}
	grants := func(group, resource string, verbs ...string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
				for _, v := range verbs {
					if !slices.Contains(r.Verbs, v) {
						return false
					}
				}
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		group, resource string
		verbs           []string
	}{
		{"", "pods", []string{"list", "watch"}},
		{Group, PoolResource.Resource, []string{"list", "watch"}},
		{"coordination.k8s.io", "leases", []string{"get", "create", "update"}},
	} {
		if !grants(c.group, c.resource, c.verbs...) {
			t.Errorf("the Role does not grant %v on %s.%s", c.verbs, c.resource, c.group)
		}
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	if rp := ctr.ReadinessProbe; rp == nil || rp.GRPC == nil || rp.GRPC.Service == nil || *rp.GRPC.Service != epp.ReadinessService {
		t.Errorf("readiness probe %+v: want gRPC health on %q", ctr.ReadinessProbe, epp.ReadinessService)
	}
	if lp := ctr.LivenessProbe; lp == nil || lp.GRPC == nil || lp.GRPC.Service == nil || *lp.GRPC.Service != epp.LivenessService {
		t.Errorf("liveness probe %+v: want gRPC health on %q", ctr.LivenessProbe, epp.LivenessService)
	}
	args := strings.Join(ctr.Args, " ")
	for _, want := range []string{"gateway epp", "--pool=vllm-llama", "--leader-elect"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
}
