package charts_test

import (
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/enix/kuik/charts"
)

// `helm install` with keeper.enabled into a real API server, as a second release of its own
// namespace: PodSecurity (restricted) has nothing to say about the keeper, and the API server
// grants its ServiceAccount what it needs and nothing more.
func TestKeeperInstall(t *testing.T) {
	if cp == nil {
		t.Skip("needs a control plane (not under -short)")
	}
	const keeperNS, release = "kuik-keeper", "kk"
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: keeperNS, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	warn := &warnings{}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = ptr(cp.Kubeconfig)
	flags.Namespace = ptr(keeperNS)
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.WarningHandler = warn
		return c
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, keeperNS, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	c, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Timeout = release, keeperNS, time.Minute
	if _, err := install.RunWithContext(t.Context(), c, map[string]any{"keeper": map[string]any{"enabled": true}, "clusterID": "prod-a"}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Cleanup(func() {
		if _, err := action.NewUninstall(cfg).Run(release); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	for _, w := range warn.msgs {
		t.Errorf("API server warning during install: %s", w)
	}
	d, err := cs.AppsV1().Deployments(keeperNS).Get(t.Context(), "kk-kuik-keeper", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Template.Spec.ServiceAccountName != "kk-kuik-keeper" {
		t.Errorf("keeper ServiceAccount %s", d.Spec.Template.Spec.ServiceAccountName)
	}

	keeper := "system:serviceaccount:" + keeperNS + ":kk-kuik-keeper"
	for _, c := range []struct {
		verb, group, resource, in string
		want                      bool
	}{
		{"watch", "", "pods", "", true},
		{"get", "", "pods", "team-a", true},
		{"delete", "", "pods", "team-a", false},
		{"create", "", "pods/eviction", "team-a", false},
		{"list", "", "namespaces", "", true},
		{"watch", "apps", "replicasets", "", true},
		{"list", "apps", "statefulsets", "", true},
		{"list", "apps", "daemonsets", "", true},
		{"list", "apps", "deployments", "", false},
		{"watch", "batch", "jobs", "", true},
		{"watch", "batch", "cronjobs", "", true},
		{"watch", "kuik.enix.io", "imagemirrors", "", true},
		{"watch", "kuik.enix.io", "imagealternatives", "", true},
		{"patch", "kuik.enix.io", "imagemirrors/status", "", true},
		{"patch", "kuik.enix.io", "imagealternatives/status", "", false},
		{"update", "kuik.enix.io", "imagemirrors", "", false},
		{"create", "", "events", "team-a", true},
		{"patch", "", "events", "default", true},
		{"list", "", "events", "team-a", false},
		{"get", "", "secrets", keeperNS, true},
		{"watch", "", "secrets", keeperNS, true},
		{"get", "", "secrets", "default", false},
		{"list", "", "secrets", "", false},
		{"create", "", "secrets", keeperNS, false},
		{"patch", "", "secrets", keeperNS, false},
		{"delete", "", "secrets", keeperNS, false},
		{"create", "", "configmaps", keeperNS, true},
		{"delete", "", "configmaps", keeperNS, true},
		{"create", "", "configmaps", "default", false},
		{"get", "", "configmaps", "default", false},
		{"update", "coordination.k8s.io", "leases", keeperNS, true},
		{"update", "coordination.k8s.io", "leases", "default", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               keeper,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + keeperNS, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: c.resource, Namespace: c.in},
		}}
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != c.want {
			t.Errorf("the keeper %s %s %q in %q: allowed = %v, want %v", c.verb, c.resource, c.group, c.in, got.Status.Allowed, c.want)
		}
	}
}
