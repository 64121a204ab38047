package webhook_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const crns = "kuik-system"

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{CRDs: true}, &cp))
}

// world is the webhook running in-process under the chart's ServiceAccount, RBAC and webhook
// configurations (pointed at 127.0.0.1), with a private registry holding acme/app:v1, and
// another one that the nodes' credential providers cover (--image-credential-provider-config).
type world struct {
	cs       kubernetes.Interface
	c        client.Client
	registry *testutil.Registry
	// nodeRegistry holds acme/app:v1 behind a credential kuik never sees, which the nodes get
	// from their credential provider.
	nodeRegistry *testutil.Registry
	// down is a registry address where nothing listens: the failing upstream.
	down string
}

var (
	setupOnce sync.Once
	shared    *world
	setupErr  error
)

func setup(t *testing.T) *world {
	t.Helper()
	setupOnce.Do(func() { shared, setupErr = start() })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return shared
}

func start() (*world, error) {
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		return nil, err
	}
	c, err := client.New(cp.Config(), client.Options{Scheme: webhook.Scheme()})
	if err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}

	reg := testutil.NewRegistry(&noopTB{}, "puller", "s3cret")
	reg.Push(&noopTB{}, "acme/app:v1")
	dockerconfig := testutil.DockerConfigJSON(map[string]string{reg.Host: "puller:s3cret"})
	_, err = cs.CoreV1().Secrets(crns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "private-registry"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerconfig},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}

	nodeReg := testutil.NewRegistry(&noopTB{}, "node", "from-the-plugin")
	nodeReg.Push(&noopTB{}, "acme/app:v1")
	providers, err := nodeCredentialProviders(nodeReg.Host)
	if err != nil {
		return nil, err
	}

	webhookPort, err := kuikenv.FreePort()
	if err != nil {
		return nil, err
	}
	down, err := kuikenv.FreeAddr()
	if err != nil {
		return nil, err
	}

	// The chart's webhook identity (ServiceAccount, RBAC) and webhook configurations, pointed
	// at this process.
	chart, err := kuikenv.Render(crns)
	if err != nil {
		return nil, err
	}
	hooks, err := chart.WebhookConfigurations(webhookPort, cp.CA.PEM)
	if err != nil {
		return nil, err
	}
	if err := testenv.Apply(ctx, cp.Config(), append(chart.Identity(kuikenv.ComponentWebhook), hooks...)); err != nil {
		return nil, err
	}
	_, err = kuikenv.StartWebhook(ctx, cp, chart, webhookPort, webhook.Config{
		ProbeTimeout:        time.Second,
		CacheTTL:            10 * time.Second,
		CredentialProviders: providers,
	})
	if err != nil {
		return nil, err
	}
	return &world{cs: cs, c: c, registry: reg, nodeRegistry: nodeReg, down: down}, nil
}

// nodeCredentialProviders is a kubelet credential-provider configuration whose one provider
// matches host, loaded as the webhook's --image-credential-provider-config is.
func nodeCredentialProviders(host string) (*credentialprovider.Config, error) {
	dir, err := os.MkdirTemp("", "kuik-webhook-providers-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "providers.yaml")
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: node-registry
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    defaultCacheDuration: 10m
    matchImages: [%q]
`, host)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	return credentialprovider.LoadConfig(path)
}

func (w *world) namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns, err := w.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "wh-", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func (w *world) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := w.c.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T: %v", obj, err)
	}
	t.Cleanup(func() { _ = w.c.Delete(context.Background(), obj) })
}

// waitRouted creates pods until the webhook has seen the routing resource (its index is
// rebuilt asynchronously), then returns the admitted pod.
func (w *world) createPod(t *testing.T, ns string, pod *corev1.Pod, until func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		p := pod.DeepCopy()
		p.Name = ""
		p.GenerateName = "p-"
		var err error
		got, err = w.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return until(got), nil
	})
	if err != nil {
		t.Fatalf("pod never admitted as expected (last: %s): %v", podSummary(got), err)
	}
	return got
}

func podSummary(p *corev1.Pod) string {
	if p == nil {
		return "none"
	}
	var images []string
	for _, c := range p.Spec.Containers {
		images = append(images, c.Image)
	}
	return fmt.Sprintf("images=%v annotations=%v labels=%v pullSecrets=%v", images, p.Annotations, p.Labels, p.Spec.ImagePullSecrets)
}

func simplePod(image string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
}

func TestWebhookRoutesPodsThroughTheAPIServer(t *testing.T) {
	w := setup(t)
	upstream := w.down + "/acme/app"
	private := w.registry.Host + "/acme/app"
	ns := w.namespace(t, map[string]string{"team": "payments"})
	w.create(t, &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "acme-app"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream},
				{Repository: private, Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "private-registry"}}},
			},
		},
	})

	t.Run("an unreachable upstream is replaced by the private registry, with its pull secret", func(t *testing.T) {
		got := w.createPod(t, ns, simplePod(upstream+":v1"), func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" })
		if diff := cmp.Diff(private+":v1", got.Spec.Containers[0].Image); diff != "" {
			t.Errorf("image (-want +got): %s", diff)
		}
		wantAnn := map[string]string{
			v1alpha1.AnnotationOriginalImages: fmt.Sprintf(`{"app":%q}`, upstream+":v1"),
			v1alpha1.AnnotationRewrittenBy:    `{"app":"ImageAlternative/acme-app"}`,
			v1alpha1.AnnotationReason:         `{"app":"OnFailure"}`,
		}
		if diff := cmp.Diff(wantAnn, got.Annotations); diff != "" {
			t.Errorf("annotations (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: "kuik-inject-imagealternative-acme-app"}}, got.Spec.ImagePullSecrets); diff != "" {
			t.Errorf("imagePullSecrets (-want +got):\n%s", diff)
		}
	})

	t.Run("a private original the pod carries its own pull secret for is kept", func(t *testing.T) {
		p := simplePod(private + ":v1")
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "own"}}
		got, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Containers[0].Image != private+":v1" || len(got.Annotations) != 0 || len(got.Spec.ImagePullSecrets) != 1 {
			t.Errorf("pod on an available original was changed: %s", podSummary(got))
		}
	})

	t.Run("a private original the pod has no credential for is not available", func(t *testing.T) {
		// The entry's credential is never injected for the original, so the kubelet would pull
		// it anonymously and get a 401: kuik probes it the same way.
		got, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), simplePod(private+":v1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Containers[0].Image != private+":v1" || got.Annotations[v1alpha1.AnnotationReason] != `{"app":"NoAlternatives"}` {
			t.Errorf("pod on a private original without a credential: %s", podSummary(got))
		}
	})

	t.Run("a namespace outside the selector is not routed", func(t *testing.T) {
		other := w.namespace(t, nil)
		got, err := w.cs.CoreV1().Pods(other).Create(t.Context(), simplePod(upstream+":v1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Containers[0].Image != upstream+":v1" || len(got.Annotations) != 0 {
			t.Errorf("pod outside the namespaceSelector was changed: %s", podSummary(got))
		}
	})

	t.Run("an image nobody routes is admitted untouched", func(t *testing.T) {
		got, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), simplePod("ghcr.io/other/thing:v1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Containers[0].Image != "ghcr.io/other/thing:v1" || len(got.Annotations) != 0 || len(got.Labels) != 0 {
			t.Errorf("uncovered pod was changed: %s", podSummary(got))
		}
	})

	t.Run("the opt-out label skips the webhook", func(t *testing.T) {
		p := simplePod(upstream + ":v1")
		p.Labels = map[string]string{v1alpha1.LabelSkip: "true"}
		got, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Containers[0].Image != upstream+":v1" {
			t.Errorf("opted-out pod was rewritten: %s", podSummary(got))
		}
	})

	t.Run("a malformed kuik annotation is not kuik's and is replaced by kuik's record", func(t *testing.T) {
		// kuik never writes a malformed annotation, so it reads as empty instead of shielding
		// the pod's other records from verification. (Fail-open on real internal errors is
		// TestPodMutatorAdmitsUnchangedOnInternalErrors.)
		p := simplePod(upstream + ":v1")
		p.GenerateName = "broken-"
		p.Annotations = map[string]string{v1alpha1.AnnotationReason: "not json"}
		var warnings []string
		cfg := cp.Config()
		cfg.WarningHandler = warningCollector(&warnings)
		wcs := kubernetes.NewForConfigOrDie(cfg)
		got, err := wcs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod refused: %v", err)
		}
		if got.Spec.Containers[0].Image != w.registry.Host+"/acme/app:v1" || got.Annotations[v1alpha1.AnnotationReason] != `{"app":"OnFailure"}` {
			t.Errorf("pod not routed: %s", podSummary(got))
		}
		if len(warnings) != 0 {
			t.Errorf("warnings = %q", warnings)
		}
	})
}

// A mirror cannot hold images of a registry with a port (host:port is no path segment), so the
// original here is localhost/…: nothing listens on localhost's HTTPS or HTTP port, and every
// probe stays on the loopback interface.
func TestWebhookRoutesToAnAlwaysMirror(t *testing.T) {
	w := setup(t)
	original := "localhost/acme/app:v1"
	w.registry.Push(t, "mirror/"+original)
	ns := w.namespace(t, map[string]string{"mirror": "yes"})
	w.create(t, &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: "local-mirror"},
		Spec: v1alpha1.ImageMirrorSpec{
			RewritePolicy:     v1alpha1.RewritePolicyAlways,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"mirror": "yes"}},
			ExcludeImages:     []string{"localhost/excluded/**"},
			Destination: v1alpha1.MirrorDestination{
				Path: w.registry.Host + "/mirror/", Insecure: true,
				Pull: &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "private-registry"}}},
			},
		},
	})
	got := w.createPod(t, ns, simplePod(original), func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" })
	if want := w.registry.Host + "/mirror/" + original; got.Spec.Containers[0].Image != want {
		t.Errorf("image = %s, want the Always mirror %s", got.Spec.Containers[0].Image, want)
	}
	if got.Annotations[v1alpha1.AnnotationReason] != `{"app":"Always"}` || got.Annotations[v1alpha1.AnnotationRewrittenBy] != `{"app":"ImageMirror/local-mirror"}` {
		t.Errorf("annotations = %v", got.Annotations)
	}
	if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: "kuik-inject-imagemirror-local-mirror"}}, got.Spec.ImagePullSecrets); diff != "" {
		t.Errorf("imagePullSecrets (-want +got):\n%s", diff)
	}

	excluded, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), simplePod("localhost/excluded/app:v1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if excluded.Spec.Containers[0].Image != "localhost/excluded/app:v1" || len(excluded.Annotations) != 0 {
		t.Errorf("an excluded image was routed: %s", podSummary(excluded))
	}
}

func TestValidatingWebhookChecksAccessToReferencedSecrets(t *testing.T) {
	w := setup(t)
	// Both users may write routing resources; only bob may read the Secret.
	grant(t, w.cs, "routing-writers", []rbacv1.PolicyRule{{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"imagealternatives", "imagemirrors"}, Verbs: []string{"create", "update", "get"}}}, "", "alice", "bob")
	grant(t, w.cs, "secret-readers", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"private-registry"}}}, crns, "bob")

	as := func(user string) client.Client {
		c, err := client.New(cp.ConfigAs(user), client.Options{Scheme: webhook.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	obj := func() *v1alpha1.ImageAlternative {
		return &v1alpha1.ImageAlternative{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "sar-"},
			Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{
				{Repository: "quay.io/acme/sar"},
				{Repository: "registry.local/acme/sar", Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "private-registry"}}},
			}},
		}
	}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		err := as("alice").Create(ctx, obj(), client.DryRunAll)
		return err != nil, nil
	})
	if err != nil {
		t.Fatal("alice was never refused")
	}
	err = as("alice").Create(t.Context(), obj(), client.DryRunAll)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `spec.alternatives[1].auth.secretRef.name: user "alice" may not get Secret kuik-system/private-registry`) {
		t.Errorf("alice's refusal = %v", err)
	}
	if err := as("bob").Create(t.Context(), obj(), client.DryRunAll); err != nil {
		t.Errorf("bob was refused: %v", err)
	}
}

func grant(t *testing.T, cs kubernetes.Interface, name string, rules []rbacv1.PolicyRule, namespace string, users ...string) {
	t.Helper()
	var subjects []rbacv1.Subject
	for _, u := range users {
		subjects = append(subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: u})
	}
	if namespace == "" {
		if _, err := cs.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(t.Context(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := cs.RbacV1().Roles(namespace).Create(t.Context(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(namespace).Create(t.Context(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

type warnings struct{ into *[]string }

func (w warnings) HandleWarningHeader(_ int, _ string, text string) {
	*w.into = append(*w.into, text)
}

func warningCollector(into *[]string) rest.WarningHandler { return warnings{into} }

// noopTB lets the shared registry be built outside a test; it fails loudly instead.
type noopTB struct{ testing.TB }

func (noopTB) Helper()                   {}
func (noopTB) Cleanup(func())            {}
func (noopTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (noopTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// A hanging upstream costs one probe timeout, after which the pod is routed: the API server's
// webhook timeout (the chart's, ≥ probe timeout + 1s) is never reached.
func TestWebhookRoutesAroundAHangingRegistry(t *testing.T) {
	w := setup(t)
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	ns := w.namespace(t, map[string]string{"hang": "yes"})
	upstream := hanging.Host + "/acme/app"
	w.create(t, &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "hanging"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"hang": "yes"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream},
				{Repository: w.registry.Host + "/acme/app", Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "private-registry"}}},
			},
		},
	})
	got := w.createPod(t, ns, simplePod(upstream+":v1"), func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" })
	if want := w.registry.Host + "/acme/app:v1"; got.Spec.Containers[0].Image != want {
		t.Errorf("image = %s, want %s", got.Spec.Containers[0].Image, want)
	}
	if hanging.Hung() == 0 {
		t.Error("the hanging registry was never probed")
	}
}

// kubectl debug adds ephemeral containers through the pods/ephemeralcontainers subresource,
// which lets nothing else change: the new container is routed, to an entry needing no secret.
// (And every review the API server sends, of a pod's creation, a dry-run one, or an update of
// its ephemeral containers, is read by kuik's decoder, not controller-runtime's.)
func TestWebhookRoutesNewEphemeralContainers(t *testing.T) {
	w := setup(t)
	reviews := func() (kuik, cr float64) {
		return promtest.ToFloat64(metrics.PodReviews.WithLabelValues("kuik")), promtest.ToFloat64(metrics.PodReviews.WithLabelValues("controller-runtime"))
	}
	kuik0, cr0 := reviews()
	w.registry.Push(t, "public/debug:v1")
	open := testutil.NewRegistry(t, "", "")
	open.Push(t, "acme/debug:v1")
	ns := w.namespace(t, map[string]string{"debug": "yes"})
	upstream := w.down + "/acme/debug"
	w.create(t, &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "debug"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"debug": "yes"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream},
				{Repository: w.registry.Host + "/public/debug", Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "private-registry"}}},
				{Repository: open.Host + "/acme/debug", Insecure: true},
			},
		},
	})
	// Wait until the webhook knows the resource, with an ordinary pod.
	w.createPod(t, ns, simplePod(upstream+":v1"), func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" })

	target, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), simplePod("ghcr.io/other/app:v1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target.Spec.EphemeralContainers = append(target.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: upstream + ":v1", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent},
	})
	got, err := w.cs.CoreV1().Pods(ns).UpdateEphemeralContainers(t.Context(), target.Name, target, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := open.Host + "/acme/debug:v1"; got.Spec.EphemeralContainers[0].Image != want {
		t.Errorf("ephemeral image = %s, want %s (the entry that needs no injected secret)", got.Spec.EphemeralContainers[0].Image, want)
	}
	dry, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), simplePod(upstream+":v1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Labels[v1alpha1.LabelRewritten] != "true" {
		t.Errorf("a dry-run creation was not routed: %s", podSummary(dry))
	}
	// Three at least: the pods created, the update of the ephemeral containers, the dry run.
	if kuik, cr := reviews(); kuik-kuik0 < 3 || cr != cr0 {
		t.Errorf("reviews read by kuik %v, by controller-runtime %v; want 3 or more and 0", kuik-kuik0, cr-cr0)
	}
}

// A rotated secretRef Secret is used from its next resourceVersion on: a wrong password makes
// the private entry unavailable, the fixed one makes it win.
func TestWebhookUsesARotatedCredential(t *testing.T) {
	w := setup(t)
	ns := w.namespace(t, map[string]string{"rotation": "yes"})
	upstream := w.down + "/acme/app"
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rotating", Namespace: crns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{w.registry.Host: "puller:wrong"})},
	}
	w.create(t, secret)
	w.create(t, &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "rotation"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rotation": "yes"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream},
				{Repository: w.registry.Host + "/acme/app", Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "rotating"}}},
			},
		},
	})
	w.createPod(t, ns, simplePod(upstream+":v1"), func(p *corev1.Pod) bool {
		return p.Annotations[v1alpha1.AnnotationReason] == `{"app":"NoAlternatives"}`
	})

	secret.Data[corev1.DockerConfigJsonKey] = testutil.DockerConfigJSON(map[string]string{w.registry.Host: "puller:s3cret"})
	if err := w.c.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	got := w.createPod(t, ns, simplePod(upstream+":v1"), func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" })
	if want := w.registry.Host + "/acme/app:v1"; got.Spec.Containers[0].Image != want {
		t.Errorf("image = %s, want %s", got.Spec.Containers[0].Image, want)
	}
}

// An original on a registry the nodes' credential providers cover is pulled with the node's
// own credential: its anonymous probe's 401 does not move the pod, while a registry no
// provider covers does (the subtest above, "a private original the pod has no credential for
// is not available").
func TestWebhookKeepsAnOriginalTheNodesCredentialProviderCovers(t *testing.T) {
	w := setup(t)
	open := testutil.NewRegistry(t, "", "")
	open.Push(t, "acme/app:v1")
	original := w.nodeRegistry.Host + "/acme/app"
	ns := w.namespace(t, map[string]string{"node-provider": "yes"})
	w.create(t, &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "node-provider"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"node-provider": "yes"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: original},
				{Repository: open.Host + "/acme/app", Insecure: true},
			},
		},
	})
	// Until the webhook knows the resource, the image has no other candidate and is not probed.
	got := w.createPod(t, ns, simplePod(original+":v1"), func(*corev1.Pod) bool { return w.nodeRegistry.Unauthorized() > 0 })
	if got.Spec.Containers[0].Image != original+":v1" || len(got.Annotations) != 0 || len(got.Spec.ImagePullSecrets) != 0 {
		t.Errorf("a pod on an original the node can pull was changed: %s", podSummary(got))
	}
	if w.nodeRegistry.Unauthorized() == 0 {
		t.Error("the original was never probed")
	}
}
