package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A pod whose three containers (one init, two regular) all sit on an upstream that accepts
// connections and never answers gets every container routed by its first admission: their
// probes run together, so the pod costs one probe timeout, not three.
func TestEveryContainerIsRoutedWithinOneProbeTimeout(t *testing.T) {
	w := setup(t)
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	for _, repo := range []string{"acme/init", "acme/a", "acme/b", "acme/warm"} {
		w.registry.Push(t, repo+":v1")
	}
	ns := w.namespace(t, map[string]string{"containers": "three"})
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"containers": "three"}}
	private := &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "private-registry"}}
	w.create(t, &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "three-hanging"},
		Spec: v1alpha1.ImageAlternativeSpec{NamespaceSelector: selector, Alternatives: []v1alpha1.Alternative{
			{RepositoryGroup: hanging.Host + "/acme/"},
			{RepositoryGroup: w.registry.Host + "/acme/", Insecure: true, Auth: private},
		}},
	})
	// Created second: once it routes, the webhook's index holds the first one too. Its upstream
	// refuses connections, so the warm-up costs nothing.
	w.create(t, &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "three-warm"},
		Spec: v1alpha1.ImageAlternativeSpec{NamespaceSelector: selector, Alternatives: []v1alpha1.Alternative{
			{Repository: w.down + "/acme/warm"},
			{Repository: w.registry.Host + "/acme/warm", Insecure: true, Auth: private},
		}},
	})
	w.createPod(t, ns, simplePod(w.down+"/acme/warm:v1"), func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" })

	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "three-"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: hanging.Host + "/acme/init:v1"}},
			Containers: []corev1.Container{
				{Name: "a", Image: hanging.Host + "/acme/a:v1"},
				{Name: "b", Image: hanging.Host + "/acme/b:v1"},
			},
		},
	}
	got, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{"init": got.Spec.InitContainers[0].Image}
	for _, c := range got.Spec.Containers {
		images[c.Name] = c.Image
	}
	for name, repo := range map[string]string{"init": "acme/init", "a": "acme/a", "b": "acme/b"} {
		if want := w.registry.Host + "/" + repo + ":v1"; images[name] != want {
			t.Errorf("container %s: image %s, want %s (reason %s)", name, images[name], want, got.Annotations[v1alpha1.AnnotationReason])
		}
	}
	if hanging.Hung() < 3 {
		t.Errorf("the hanging registry held %d requests, want the 3 probes", hanging.Hung())
	}
}

// Changing where a credential lands needs the right to read it: a user who may update routing
// resources but not get the Secret cannot widen an existing resource's policy or selectors, and
// can still change its metadata.
func TestUpdatesThatMoveACredentialNeedAccessToIt(t *testing.T) {
	w := setup(t)
	grant(t, w.cs, "routing-editors", []rbacv1.PolicyRule{{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"imagealternatives"}, Verbs: []string{"get", "update", "patch"}}}, "", "eve")
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "narrow"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "trusted"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: "quay.io/acme/narrow"},
				{Repository: "registry.local/acme/narrow", Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "private-registry"}}},
			},
		},
	}
	w.create(t, ia) // as the admin, who may read the Secret
	eve, err := client.New(cp.ConfigAs("eve"), client.Options{Scheme: webhook.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	update := func(ctx context.Context, change func(*v1alpha1.ImageAlternative)) error {
		cur := &v1alpha1.ImageAlternative{}
		if err := eve.Get(ctx, client.ObjectKeyFromObject(ia), cur); err != nil {
			return err
		}
		change(cur)
		return eve.Update(ctx, cur, client.DryRunAll)
	}
	widen := func(o *v1alpha1.ImageAlternative) {
		o.Spec.RewritePolicy = v1alpha1.RewritePolicyAlways
		o.Spec.NamespaceSelector = nil
	}
	// The validating webhook configuration may take a moment to be in force.
	var refusal error
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		refusal = update(ctx, widen)
		return refusal != nil, nil
	}); err != nil {
		t.Fatal("eve was never refused spraying the credential everywhere")
	}
	if !apierrors.IsForbidden(refusal) || !strings.Contains(refusal.Error(), `spec.alternatives[1].auth.secretRef.name: user "eve" may not get Secret kuik-system/private-registry`) {
		t.Errorf("refusal = %v, want one naming the field and the Secret", refusal)
	}
	for name, change := range map[string]func(*v1alpha1.ImageAlternative){
		"dropping the namespaceSelector": func(o *v1alpha1.ImageAlternative) { o.Spec.NamespaceSelector = nil },
		"setting rewritePolicy Always":   func(o *v1alpha1.ImageAlternative) { o.Spec.RewritePolicy = v1alpha1.RewritePolicyAlways },
		"adding an entry under the same credential": func(o *v1alpha1.ImageAlternative) {
			o.Spec.Alternatives = append(o.Spec.Alternatives, v1alpha1.Alternative{Repository: "ghcr.io/eve/narrow", Auth: o.Spec.Alternatives[1].Auth})
		},
	} {
		if err := update(t.Context(), change); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	if err := update(t.Context(), func(o *v1alpha1.ImageAlternative) { o.Labels = map[string]string{"owner": "eve"} }); err != nil {
		t.Errorf("a metadata-only update was refused: %v", err)
	}
}

// The webhook reads a namespace it has not cached yet from the API server, under the chart's
// RBAC: the pods of a namespace created a moment before them are routed too.
func TestNamespaceMissingFromTheCacheIsReadUnderTheChartsRBAC(t *testing.T) {
	w := setup(t)
	ns := w.namespace(t, map[string]string{"fresh": "yes"})
	chart, err := kuikenv.Render(crns)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := chart.ServiceAccount(kuikenv.ComponentWebhook)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cp.ConfigAsServiceAccount(crns, sa))
	if err != nil {
		t.Fatal(err)
	}
	// A cache that has seen nothing yet.
	empty, err := client.New(cp.Config(), client.Options{Scheme: webhook.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	missing := client.Reader(notCached{empty})
	got, err := webhook.NamespaceLabelsFrom(missing, cs)(t.Context(), ns)
	if err != nil {
		t.Fatalf("reading namespace %s as the webhook: %v", ns, err)
	}
	if want := (labels.Set{"fresh": "yes", "kubernetes.io/metadata.name": ns}); !labels.Equals(got, want) {
		t.Errorf("labels = %v, want %v", got, want)
	}
}

// notCached answers every read with NotFound, like an informer cache that has not caught up.
type notCached struct{ client.Reader }

func (notCached) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(corev1.Resource("namespaces"), key.Name)
}
