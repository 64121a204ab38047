package charts_test

import (
	"context"
	"flag"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

var cp *testenv.ControlPlane

// The rendering tests need no control plane and also run under -short; the install test
// needs one.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(testenv.Run(m, testenv.Options{}, &cp))
}

// warnings collects the API server's warnings (PodSecurity's among them).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func helmConfig(t *testing.T, warn *warnings) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = ptr(cp.Kubeconfig)
	flags.Namespace = ptr(ns)
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.WarningHandler = warn
		return c
	}
	cfg := new(action.Configuration)
	// Helm's debug log is one line per object: keep it out of the test output.
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// `helm install` of the chart into a real API server: everything it renders is accepted, the
// CRDs are established, the webhook configurations are in force, the policy binds, the RBAC
// grants what the components need and nothing more, PodSecurity (restricted) has nothing to
// say, and an upgrade keeps the generated certificate.
func TestInstall(t *testing.T) {
	if cp == nil {
		t.Skip("needs a control plane (not under -short)")
	}
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	// The release namespace enforces the restricted Pod Security Standard and warns about it.
	_, err = cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	c, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	warn := &warnings{}
	install := action.NewInstall(helmConfig(t, warn))
	install.ReleaseName = "kuik"
	install.Namespace = ns
	install.Timeout = time.Minute
	rel, err := install.RunWithContext(t.Context(), c, nil)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	for _, w := range warn.msgs {
		t.Errorf("API server warning during install: %s", w)
	}

	t.Run("every rendered object exists", func(t *testing.T) {
		objs, err := charts.Decode([]byte(rel.Manifest))
		if err != nil {
			t.Fatal(err)
		}
		dyn, err := dynamic.NewForConfig(cp.Config())
		if err != nil {
			t.Fatal(err)
		}
		mapper := restMapper(t)
		for _, o := range objs {
			m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
			if err != nil {
				t.Fatal(err)
			}
			res := m.Resource
			if o.GetNamespace() != "" {
				_, err = dyn.Resource(res).Namespace(o.GetNamespace()).Get(t.Context(), o.GetName(), metav1.GetOptions{})
			} else {
				_, err = dyn.Resource(res).Get(t.Context(), o.GetName(), metav1.GetOptions{})
			}
			if err != nil {
				t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
		if len(objs) < 20 {
			t.Errorf("only %d objects in the release manifest", len(objs))
		}
	})

	t.Run("CRDs established and served", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(cp.Config())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []string{"imagealternatives", "imagemirrors"} {
			if _, err := dyn.Resource(v1alpha1.GroupVersion.WithResource(r)).List(t.Context(), metav1.ListOptions{}); err != nil {
				t.Errorf("listing %s: %v", r, err)
			}
		}
	})

	t.Run("policy binds to the chart's secret-syncer", func(t *testing.T) {
		syncer, err := kubernetes.NewForConfig(cp.ConfigAsServiceAccount(ns, "kuik-secret-syncer"))
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-kuiks"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}}
		var last error
		err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, last = syncer.CoreV1().Secrets("default").Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return last != nil && strings.Contains(last.Error(), "ValidatingAdmissionPolicy 'kuik-secret-writes'"), nil
		})
		if err != nil {
			t.Fatalf("the chart's policy never refused its secret-syncer (last: %v): %v", last, err)
		}
		// With the chart's own RBAC, the syncer's legitimate write goes through.
		ok := s.DeepCopy()
		ok.Name = "kuik-inject-imagealternative-x"
		ok.Labels = map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}
		if _, err := syncer.CoreV1().Secrets("default").Create(t.Context(), ok, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("the secret-syncer's own write was refused: %v", err)
		}
	})

	t.Run("RBAC as the API server decides it", func(t *testing.T) {
		syncer := "system:serviceaccount:" + ns + ":kuik-secret-syncer"
		webhook := "system:serviceaccount:" + ns + ":kuik-webhook"
		for _, c := range []struct {
			user                      string
			verb, group, resource, in string
			want                      bool
		}{
			{syncer, "create", "", "secrets", "default", true},
			{syncer, "patch", "", "secrets", "team-a", true},
			{syncer, "get", "", "secrets", "default", false},
			{syncer, "list", "", "secrets", "", false},
			{syncer, "watch", "", "secrets", "team-a", false},
			{syncer, "delete", "", "secrets", "team-a", false},
			{syncer, "update", "", "secrets", "team-a", false},
			{syncer, "list", "", "secrets", ns, true},
			{syncer, "watch", "", "secrets", ns, true},
			{syncer, "watch", "", "pods", "", true},
			// Missed pulls are off by default: no pod read by name, no event read.
			{syncer, "get", "", "pods", "default", false},
			{syncer, "delete", "", "pods", "default", false},
			{syncer, "update", "", "pods", "default", false},
			{syncer, "watch", "", "events", "", false},
			{syncer, "list", "", "events", "team-a", false},
			{syncer, "watch", "kuik.enix.io", "imagealternatives", "", true},
			{syncer, "update", "kuik.enix.io", "imagealternatives", "", false},
			{syncer, "patch", "", "events", "default", true},
			{syncer, "update", "coordination.k8s.io", "leases", ns, true},
			{syncer, "update", "coordination.k8s.io", "leases", "default", false},
			{webhook, "get", "", "secrets", ns, true},
			{webhook, "get", "", "secrets", "default", false},
			{webhook, "create", "", "secrets", ns, false},
			{webhook, "list", "", "namespaces", "", true},
			{webhook, "watch", "kuik.enix.io", "imagemirrors", "", true},
			{webhook, "create", "authorization.k8s.io", "subjectaccessreviews", "", true},
			{webhook, "patch", "", "pods", "default", false},
		} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   c.user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: c.verb, Group: c.group, Resource: c.resource, Namespace: c.in,
				},
			}}
			got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != c.want {
				t.Errorf("%s %s %s in %q: allowed = %v, want %v", c.user, c.verb, c.resource, c.in, got.Status.Allowed, c.want)
			}
		}
	})

	t.Run("the webhook reads a namespace directly", func(t *testing.T) {
		// A namespace created a moment ago may not be in the webhook's cache: it then reads it
		// with a GET, under the chart's RBAC, as its ServiceAccount.
		n, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			GenerateName: "fresh-", Labels: map[string]string{"team": "a"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		webhook, err := kubernetes.NewForConfig(cp.ConfigAsServiceAccount(ns, "kuik-webhook"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := webhook.CoreV1().Namespaces().Get(t.Context(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the webhook's ServiceAccount cannot get namespace %s: %v", n.Name, err)
		}
		if got.Labels["team"] != "a" {
			t.Errorf("namespace labels read by the webhook = %v", got.Labels)
		}
		// Reading is all it may do to namespaces.
		for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:" + ns + ":kuik-webhook",
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "namespaces", Name: n.Name},
			}}
			res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status.Allowed {
				t.Errorf("the webhook may %s namespaces", verb)
			}
		}
		if err := webhook.CoreV1().Namespaces().Delete(t.Context(), n.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
			t.Errorf("the webhook deleting a namespace (dry run) = %v, want Forbidden", err)
		}
	})

	t.Run("the optional NetworkPolicy is valid", func(t *testing.T) {
		// Nothing here enforces NetworkPolicies (no network plugin): the API server only
		// validates it.
		r, err := charts.Render(charts.Release{Name: "kuik", Namespace: ns, Values: map[string]any{"webhook": map[string]any{"networkPolicy": map[string]any{
			"enabled": true,
			"from": []any{
				map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}},
				map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "kube-system"}},
					"podSelector": map[string]any{"matchLabels": map[string]any{"k8s-app": "konnectivity-agent"}}},
			},
			"extraIngress": []any{map[string]any{"ports": []any{map[string]any{"port": "metrics"}}}},
		}}}})
		if err != nil {
			t.Fatal(err)
		}
		nps := r.OfKind("NetworkPolicy")
		if len(nps) != 1 {
			t.Fatalf("%d NetworkPolicies rendered, want 1", len(nps))
		}
		dyn, err := dynamic.NewForConfig(cp.Config())
		if err != nil {
			t.Fatal(err)
		}
		res := schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
		if _, err := dyn.Resource(res).Namespace(ns).Create(t.Context(), nps[0], metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("the API server refuses the chart's NetworkPolicy: %v", err)
		}
	})

	t.Run("validating webhook fails closed", func(t *testing.T) {
		// No webhook pod runs here, so the API server cannot reach the Service: routing
		// resources are refused (failurePolicy Fail)...
		dyn, err := dynamic.NewForConfig(cp.Config())
		if err != nil {
			t.Fatal(err)
		}
		ia := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ImageAlternative",
			"metadata": map[string]any{"name": "example"},
			"spec":     map[string]any{"alternatives": []any{map[string]any{"repository": "quay.io/acme/foo"}}},
		}}
		var last error
		err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, last = dyn.Resource(v1alpha1.GroupVersion.WithResource("imagealternatives")).Create(ctx, ia, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return last != nil && strings.Contains(last.Error(), "routing.kuik.enix.io"), nil
		})
		if err != nil {
			t.Errorf("an ImageAlternative was not refused by the unreachable webhook (last: %v): %v", last, err)
		}
	})

	t.Run("mutating webhook fails open", func(t *testing.T) {
		// ...while pods are admitted (failurePolicy Ignore), in a namespace the webhook covers.
		n, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "app-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
		if _, err := cs.CoreV1().Pods(n.Name).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Errorf("a pod was refused while the webhook is down: %v", err)
		}
	})

	t.Run("upgrade keeps the generated certificate", func(t *testing.T) {
		before, err := cs.CoreV1().Secrets(ns).Get(t.Context(), "kuik-webhook-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		upgrade := action.NewUpgrade(helmConfig(t, &warnings{}))
		upgrade.Namespace = ns
		if _, err := upgrade.RunWithContext(t.Context(), "kuik", c, map[string]any{"webhook": map[string]any{"probeTimeoutSeconds": 4}}); err != nil {
			t.Fatalf("helm upgrade: %v", err)
		}
		after, err := cs.CoreV1().Secrets(ns).Get(t.Context(), "kuik-webhook-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
			if string(before.Data[k]) != string(after.Data[k]) {
				t.Errorf("upgrade changed %s", k)
			}
		}
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "kuik-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Webhooks[0].ClientConfig.CABundle) != string(after.Data["ca.crt"]) {
			t.Error("after upgrade, the caBundle is not the kept CA")
		}
		if *m.Webhooks[0].TimeoutSeconds != 5 {
			t.Errorf("after upgrade, timeoutSeconds = %d, want 5", *m.Webhooks[0].TimeoutSeconds)
		}
	})

	t.Run("upgrade with credential providers", func(t *testing.T) {
		// An inline configuration, plugins from an image volume, token rights: accepted as
		// rendered (the image volume kept, not dropped), PodSecurity (restricted) silent, the
		// rights in force; and a node hostPath, which the API server warns restricted forbids.
		values := providerValues(imageVolumeBinDir)
		values["credentialProviders"].(map[string]any)["serviceAccountTokens"] = map[string]any{"enabled": true}
		warn := &warnings{}
		upgrade := action.NewUpgrade(helmConfig(t, warn))
		upgrade.Namespace = ns
		if _, err := upgrade.RunWithContext(t.Context(), "kuik", c, values); err != nil {
			t.Fatalf("helm upgrade: %v", err)
		}
		for _, w := range warn.msgs {
			t.Errorf("API server warning during the upgrade: %s", w)
		}
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), providersConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		decodeProviderConfig(t, cm.Data["config.yaml"])
		d, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "kuik-secret-syncer", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var image *corev1.ImageVolumeSource
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Image != nil {
				image = v.Image
			}
		}
		if image == nil || !strings.HasPrefix(image.Reference, "registry.example.com/plugins:v1@sha256:") {
			t.Errorf("the stored secret-syncer Deployment has image volume %+v", image)
		}
		syncer := "system:serviceaccount:" + ns + ":kuik-secret-syncer"
		for _, c := range []struct {
			verb, resource, sub, in string
			want                    bool
		}{
			{"create", "serviceaccounts", "token", "team-a", true},
			{"get", "serviceaccounts", "", "team-a", true},
			{"list", "serviceaccounts", "", "team-a", false},
			{"create", "serviceaccounts", "", "team-a", false},
		} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               syncer,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Resource: c.resource, Subresource: c.sub, Namespace: c.in, Name: "app"},
			}}
			got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != c.want {
				t.Errorf("secret-syncer %s %s/%s in %s: allowed = %v, want %v", c.verb, c.resource, c.sub, c.in, got.Status.Allowed, c.want)
			}
		}

		r, err := charts.Render(charts.Release{Name: "kuik", Namespace: ns, Values: providerValues(hostPathBinDir)})
		if err != nil {
			t.Fatal(err)
		}
		hostPath := r.Find("Deployment", "kuik-secret-syncer")
		warn = &warnings{}
		cfg := cp.Config()
		cfg.WarningHandler = warn
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
		if _, err := dyn.Resource(res).Namespace(ns).Update(t.Context(), hostPath, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Fatalf("the API server refuses the hostPath Deployment: %v", err)
		}
		if len(warn.msgs) != 1 || !strings.Contains(warn.msgs[0], "restricted") || !strings.Contains(warn.msgs[0], "hostPath") {
			t.Errorf("warnings on the hostPath Deployment = %q, want PodSecurity's restricted warning about hostPath", warn.msgs)
		}
	})

	t.Run("uninstall", func(t *testing.T) {
		if _, err := action.NewUninstall(helmConfig(t, &warnings{})).Run("kuik"); err != nil {
			t.Fatalf("helm uninstall: %v", err)
		}
		_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(t.Context(), "kuik-secret-writes", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the policy outlived the release: %v", err)
		}
		_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "kuik-webhook", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the webhook configuration outlived the release: %v", err)
		}
	})
}

func restMapper(t *testing.T) meta.RESTMapper {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	return restmapper.NewDiscoveryRESTMapper(groups)
}
