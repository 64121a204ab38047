package node_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// pollTimeout bounds the waits for the API server and kuik's controllers (not the kubelet).
const pollTimeout = 30 * time.Second

// eventually is testutil.Eventually with this package's pollTimeout.
func eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	testutil.Eventually(t, pollTimeout, what, check)
}

func (w *world) secretRef() *v1alpha1.Auth {
	return &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: registrySecret}}
}

func credential() string { return registryUser + ":" + registryPassword }

// waitSecret waits until the syncer's Secret exists in ns with exactly these auths (key ->
// "user:password"), and checks the rest of its contract: type, label, controller owner.
func (w *world) waitSecret(t *testing.T, ns, name string, owner client.Object, want map[string]string) *corev1.Secret {
	t.Helper()
	var got *corev1.Secret
	eventually(t, fmt.Sprintf("secret %s/%s holds %v", ns, name, want), func(ctx context.Context) error {
		s, err := w.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a, err := authsOf(s)
		if err != nil {
			return err
		}
		if !cmp.Equal(a, want) {
			return fmt.Errorf("holds %v", a)
		}
		got = s
		return nil
	})
	if got.Type != corev1.SecretTypeDockerConfigJson {
		t.Errorf("secret type %q, want %q", got.Type, corev1.SecretTypeDockerConfigJson)
	}
	if diff := cmp.Diff(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}, got.Labels); diff != "" {
		t.Errorf("secret labels (-want +got):\n%s", diff)
	}
	gvk, err := w.c.GroupVersionKindFor(owner)
	if err != nil {
		t.Fatal(err)
	}
	wantOwner := []metav1.OwnerReference{{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true),
	}}
	if diff := cmp.Diff(wantOwner, got.OwnerReferences); diff != "" {
		t.Errorf("secret ownerReferences (-want +got):\n%s", diff)
	}
	return got
}

// authsOf decodes a .dockerconfigjson into auths key -> "user:password" (from username and
// password, or auth).
func authsOf(s *corev1.Secret) (map[string]string, error) {
	var doc struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &doc); err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	out := map[string]string{}
	for k, v := range doc.Auths {
		up := v.Username + ":" + v.Password
		if v.Username == "" {
			b, err := base64.StdEncoding.DecodeString(v.Auth)
			if err != nil {
				return nil, fmt.Errorf("secret %s/%s, auths %s: %w", s.Namespace, s.Name, k, err)
			}
			up = string(b)
		}
		out[k] = up
	}
	return out, nil
}

// waitGone waits until the Secret no longer exists.
func (w *world) waitGone(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, fmt.Sprintf("secret %s/%s collected", ns, name), func(ctx context.Context) error {
		_, err := w.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("still there")
	})
}

// checkRouted asserts what the webhook wrote on a single-container pod it routed.
func checkRouted(t *testing.T, p *corev1.Pod, original, image, by, reason, pullSecret string) {
	t.Helper()
	if diff := cmp.Diff(image, p.Spec.Containers[0].Image); diff != "" {
		t.Errorf("image (-want +got): %s", diff)
	}
	wantAnn := map[string]string{
		v1alpha1.AnnotationOriginalImages: fmt.Sprintf(`{"app":%q}`, original),
		v1alpha1.AnnotationRewrittenBy:    fmt.Sprintf(`{"app":%q}`, by),
		v1alpha1.AnnotationReason:         fmt.Sprintf(`{"app":%q}`, reason),
	}
	if diff := cmp.Diff(wantAnn, p.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: pullSecret}}, p.Spec.ImagePullSecrets); diff != "" {
		t.Errorf("imagePullSecrets (-want +got):\n%s", diff)
	}
}

// runsFromRegistry creates the pod until the webhook routes it, and waits until the kubelet
// runs it with an image the private registry served (pulled again, through the pod's pull
// Secrets, even if the node holds it already).
func (w *world) runsFromRegistry(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	pulls := w.registry.ManifestRequests()
	got, created := w.createPodUntil(t, ns, p, rewritten)
	took := w.waitRunning(t, ns, got.Name, created)
	if w.registry.ManifestRequests() == pulls {
		t.Error("the private registry served no manifest: the image did not come from it")
	}
	t.Logf("pod %s/%s routed to %s and Running %.2fs after its creation", ns, got.Name, got.Spec.Containers[0].Image, took.Seconds())
	return got
}

// Always: the mirror's Secret lands in every namespace the namespaceSelector selects before
// any pod exists there, and nowhere else; a pod of an image its upstream cannot serve is routed
// to the mirror and the kubelet runs it through that Secret (the same pod outside the selector
// fails to pull). Deleting the mirror garbage-collects its Secrets in every namespace
// (kube-controller-manager's garbage collector, through their ownerReferences), and a new pod
// is then left alone.
func TestAlwaysMirrorPodRunsFromTheMirrorAndDeletionCollectsItsSecrets(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	// A mirror cannot hold images of a registry with a port (host:port is no path segment):
	// the original is localhost/…, where nothing listens on the node.
	original := "localhost/acme/always:v1"
	mirrored := w.n.PushGuest(t, w.registry, "mirror/"+original)
	if mirrored != w.registry.Host+"/mirror/"+original {
		t.Fatalf("pushed %s", mirrored)
	}
	selected := []string{w.namespace(t, map[string]string{"e2e": "always"}), w.namespace(t, map[string]string{"e2e": "always"})}
	outside := w.namespace(t, nil)
	im := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: "always"},
		Spec: v1alpha1.ImageMirrorSpec{
			RewritePolicy:     v1alpha1.RewritePolicyAlways,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": "always"}},
			Destination: v1alpha1.MirrorDestination{
				Path: w.registry.Host + "/mirror/", Insecure: true,
				Pull: &v1alpha1.MirrorPull{Auth: w.secretRef()},
			},
		},
	}
	w.create(t, im)
	secretName := "kuik-inject-imagemirror-always"
	// The auths key is the destination path without its trailing slash.
	want := map[string]string{w.registry.Host + "/mirror": credential()}

	t.Run("its Secret is in every selected namespace before any pod", func(t *testing.T) {
		for _, ns := range selected {
			w.waitSecret(t, ns, secretName, im, want)
			pods, err := w.cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 0 {
				t.Errorf("namespace %s holds %d pods, want none yet", ns, len(pods.Items))
			}
		}
		if _, err := w.cs.CoreV1().Secrets(outside).Get(t.Context(), secretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace %s, outside the selector: get %s = %v, want NotFound", outside, secretName, err)
		}
	})

	t.Run("a pod runs from the mirror through the Secret", func(t *testing.T) {
		got := w.runsFromRegistry(t, selected[0], pod("app", original))
		checkRouted(t, got, original, mirrored, "ImageMirror/always", "Always", secretName)
	})

	t.Run("outside the selector the upstream cannot serve the pod", func(t *testing.T) {
		got, err := w.cs.CoreV1().Pods(outside).Create(t.Context(), pod("app", original), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rewritten(got) || got.Spec.Containers[0].Image != original {
			t.Fatalf("pod outside the selector was changed: %s", podSummary(got))
		}
		t.Logf("unrouted pod: %s", firstLine(w.waitPullRefused(t, outside, "app")))
	})

	t.Run("deleting the mirror collects its Secrets and stops the routing", func(t *testing.T) {
		if err := w.c.Delete(t.Context(), im); err != nil {
			t.Fatal(err)
		}
		for _, ns := range selected {
			w.waitGone(t, ns, secretName)
		}
		// The webhook forgets the mirror through its informer, a moment after the delete.
		var got *corev1.Pod
		eventually(t, "a new pod left alone", func(ctx context.Context) error {
			var err error
			got, err = w.cs.CoreV1().Pods(selected[1]).Create(ctx, pod("after", original), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return err
			}
			if rewritten(got) {
				return fmt.Errorf("admitted as %s", podSummary(got))
			}
			return nil
		})
		if got.Spec.Containers[0].Image != original || len(got.Spec.ImagePullSecrets) != 0 || len(got.Annotations) != 0 {
			t.Errorf("pod after the mirror's deletion: %s", podSummary(got))
		}
	})
}

// The secret-syncer's pod is deleted and its Deployment recreates it: the new pod takes the
// leader election Lease, the Secret it finds is still correct and untouched (an identical
// apply is a no-op), a namespace created after the restart gets its Secret, and routed pods
// still run. A Secret deleted while no syncer runs (scaled to zero) is back when it returns.
func TestSyncerRestartKeepsSecretsRightAndPodsRunning(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	image := w.n.PushGuest(t, w.registry, "acme/restart:v1")
	private := w.registry.Host + "/acme/restart"
	upstream := w.down + "/acme/restart"
	labels := map[string]string{"e2e": "restart"}
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "restart"},
		Spec: v1alpha1.ImageAlternativeSpec{
			// Always: its Secret is in every selected namespace, pods or not (an OnFailure
			// resource's only follows its routed pods).
			RewritePolicy:     v1alpha1.RewritePolicyAlways,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: labels},
			Alternatives: []v1alpha1.Alternative{
				{Repository: private, Insecure: true, Auth: w.secretRef()},
				{Repository: upstream, Insecure: true},
			},
		},
	}
	kept, deleted := w.namespace(t, labels), w.namespace(t, labels)
	w.create(t, ia)
	secretName := "kuik-inject-imagealternative-restart"
	want := map[string]string{private: credential()}
	keptVersion := w.waitSecret(t, kept, secretName, ia, want).ResourceVersion
	w.waitSecret(t, deleted, secretName, ia, want)

	t.Run("deleting the syncer's pod", func(t *testing.T) {
		holder, err := w.kuik.LeaseHolder(t.Context(), w.cs)
		if err != nil {
			t.Fatal(err)
		}
		// The holder identity is <pod>_<uid>.
		old, _, _ := strings.Cut(holder, "_")
		if err := w.cs.CoreV1().Pods(w.kuik.Namespace).Delete(t.Context(), old, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting the syncer's pod %s: %v", old, err)
		}
		if err := w.waitPodGone(t.Context(), w.kuik.Namespace, old); err != nil {
			t.Fatalf("syncer pod %s not gone: %v", old, err)
		}
		if err := w.kuik.WaitAvailable(t.Context(), w.cs, waitTimeout); err != nil {
			t.Fatal(err)
		}
		holder, err = w.kuik.LeaseHolder(t.Context(), w.cs)
		if err != nil || strings.HasPrefix(holder, old+"_") {
			t.Fatalf("lease held by %q (%v), want another pod than %s", holder, err, old)
		}
		t.Logf("syncer pod %s deleted, %s holds the lease", old, holder)
		s := w.waitSecret(t, kept, secretName, ia, want)
		if s.ResourceVersion != keptVersion {
			t.Errorf("secret %s/%s: resourceVersion %s → %s, want unchanged", kept, secretName, keptVersion, s.ResourceVersion)
		}
		fresh := w.namespace(t, labels)
		w.waitSecret(t, fresh, secretName, ia, want)
		got := w.runsFromRegistry(t, fresh, pod("app", upstream+":v1"))
		checkRouted(t, got, upstream+":v1", image, "ImageAlternative/restart", "Always", secretName)
	})

	t.Run("a Secret deleted while the syncer is down is back when it returns", func(t *testing.T) {
		w.scaleSyncer(t, 0)
		t.Cleanup(func() { w.scaleSyncer(t, 1) })
		eventually(t, "no syncer pod", func(ctx context.Context) error {
			pods, err := w.cs.CoreV1().Pods(w.kuik.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=secret-syncer"})
			if err != nil {
				return err
			}
			if len(pods.Items) != 0 {
				return fmt.Errorf("%d syncer pods", len(pods.Items))
			}
			return nil
		})
		// The policy does not check deletes: an admin may delete a kuik Secret.
		if err := w.cs.CoreV1().Secrets(deleted).Delete(t.Context(), secretName, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting %s/%s as admin: %v", deleted, secretName, err)
		}
		w.scaleSyncer(t, 1)
		if err := w.kuik.WaitAvailable(t.Context(), w.cs, waitTimeout); err != nil {
			t.Fatal(err)
		}
		w.waitSecret(t, deleted, secretName, ia, want)
		s := w.waitSecret(t, kept, secretName, ia, want)
		if s.ResourceVersion != keptVersion {
			t.Errorf("secret %s/%s: resourceVersion %s → %s, want unchanged", kept, secretName, keptVersion, s.ResourceVersion)
		}
		w.runsFromRegistry(t, deleted, pod("app", upstream+":v1"))
	})
}

// scaleSyncer sets the syncer Deployment's replicas.
func (w *world) scaleSyncer(t *testing.T, replicas int32) {
	t.Helper()
	s, err := w.cs.AppsV1().Deployments(w.kuik.Namespace).GetScale(context.Background(), w.kuik.Syncer, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("scale of %s: %v", w.kuik.Syncer, err)
	}
	s.Spec.Replicas = replicas
	if _, err := w.cs.AppsV1().Deployments(w.kuik.Namespace).UpdateScale(context.Background(), w.kuik.Syncer, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scaling %s to %d: %v", w.kuik.Syncer, replicas, err)
	}
}

// An upstream that accepts connections and never answers costs the webhook one probe
// timeout, which the chart keeps below the API server's webhook timeout: the pod is admitted
// routed (with failurePolicy Ignore, a webhook timing out would admit it unrouted) and the
// kubelet runs it from the alternative.
func TestHangingUpstreamPodIsRoutedWithinTheWebhookTimeoutAndRuns(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	hookTimeout, probeTimeout := w.timeouts(t)
	if hookTimeout < probeTimeout+time.Second {
		t.Fatalf("the pod webhook's timeoutSeconds %s is below the probe timeout %s + 1s", hookTimeout, probeTimeout)
	}
	// On the node's address, so that the webhook's pods reach it.
	hanging := testutil.NewRegistryAt(t, testnode.NodeIP+":0", "", "")
	hanging.SetBehavior(testutil.Hang)
	image := w.n.PushGuest(t, w.registry, "acme/slow:v1")
	upstream := hanging.Host + "/acme/slow"
	ns := w.namespace(t, map[string]string{"e2e": "slow"})
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "slow"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": "slow"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream, Insecure: true},
				{Repository: w.registry.Host + "/acme/slow", Insecure: true, Auth: w.secretRef()},
			},
		},
	}
	w.create(t, ia)
	got := w.runsFromRegistry(t, ns, pod("app", upstream+":v1"))
	checkRouted(t, got, upstream+":v1", image, "ImageAlternative/slow", "OnFailure", "kuik-inject-imagealternative-slow")
	if hanging.Hung() == 0 {
		t.Error("the hanging registry was never probed")
	}
	t.Logf("webhook timeoutSeconds %s, probe timeout %s, requests held by the hanging upstream: %d", hookTimeout, probeTimeout, hanging.Hung())
}

// timeouts reads, from the cluster, the pod webhook's timeoutSeconds and the webhook's
// --probe-timeout.
func (w *world) timeouts(t *testing.T) (hook, probe time.Duration) {
	t.Helper()
	hooks, err := w.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range hooks.Items {
		for _, h := range c.Webhooks {
			if h.ClientConfig.Service == nil || h.ClientConfig.Service.Namespace != w.kuik.Namespace || h.TimeoutSeconds == nil {
				continue
			}
			for _, r := range h.Rules {
				if contains(r.Resources, "pods") {
					hook = time.Duration(*h.TimeoutSeconds) * time.Second
				}
			}
		}
	}
	d, err := w.cs.AppsV1().Deployments(w.kuik.Namespace).Get(t.Context(), w.kuik.Webhook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--probe-timeout="); ok {
			if probe, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if hook == 0 || probe == 0 {
		t.Fatalf("pod webhook timeout %s, probe timeout %s: not found in the release", hook, probe)
	}
	return hook, probe
}

// Delegated write access to routing resources cannot spray a Secret one cannot read: the
// chart's validating webhook, called through its Service, asks the API server
// (SubjectAccessReview) whether the requesting user may get every referenced Secret.
func TestRoutingResourceNeedsReadAccessToItsSecretRef(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	w.grant(t, "e2e-routing-writers", []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"imagealternatives"}, Verbs: []string{"create", "get", "delete"}}}, "", "e2e-alice", "e2e-bob")
	w.grant(t, "e2e-secret-reader", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{registrySecret}}}, w.kuik.Namespace, "e2e-bob")
	as := func(user string) client.Client {
		c, err := client.New(w.n.ConfigAs(user), client.Options{Scheme: w.c.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	obj := func(name string) *v1alpha1.ImageAlternative {
		return &v1alpha1.ImageAlternative{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{
				{Repository: "quay.io/acme/sar"},
				{Repository: w.registry.Host + "/acme/sar", Insecure: true, Auth: w.secretRef()},
			}},
		}
	}
	wantRefusal := `spec.alternatives[1].auth.secretRef.name: user "e2e-alice" may not get Secret ` + w.kuik.Namespace + "/" + registrySecret

	t.Run("a user who may not get the Secret is refused, naming it", func(t *testing.T) {
		alice := as("e2e-alice")
		// RBAC reaches the authorizer's cache a moment after the grant: until then alice is
		// refused by RBAC itself, without the webhook's message.
		var err error
		eventually(t, "alice refused by the webhook", func(ctx context.Context) error {
			err = alice.Create(ctx, obj("e2e-alice"))
			if err == nil {
				_ = w.c.Delete(context.Background(), obj("e2e-alice"))
				return errors.New("alice's resource was admitted")
			}
			if !strings.Contains(err.Error(), "may not get Secret") {
				return err
			}
			return nil
		})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), wantRefusal) {
			t.Errorf("alice's refusal = %v, want Forbidden with %q", err, wantRefusal)
		}
	})

	t.Run("a user who may get the Secret is admitted", func(t *testing.T) {
		bob := as("e2e-bob")
		eventually(t, "bob admitted", func(ctx context.Context) error {
			return bob.Create(ctx, obj("e2e-bob"))
		})
		t.Cleanup(func() { _ = w.c.Delete(context.Background(), obj("e2e-bob")) })
		var got v1alpha1.ImageAlternative
		if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(obj("e2e-bob")), &got); err != nil {
			t.Fatalf("bob's resource: %v", err)
		}
	})
}

// The chart's ValidatingAdmissionPolicy is in force on the node: the syncer's own identity
// (its ServiceAccount in the release) is bounded to its Secrets, and its Secrets are reserved
// to it. (The full matrix is policies/'s test.)
func TestSecretWritesAreBoundedByThePolicy(t *testing.T) {
	w := env(t)
	ns := w.namespace(t, nil)
	d, err := w.cs.AppsV1().Deployments(w.kuik.Namespace).Get(t.Context(), w.kuik.Syncer, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syncerCS, err := kubernetes.NewForConfig(w.n.ConfigAsServiceAccount(w.kuik.Namespace, d.Spec.Template.Spec.ServiceAccountName))
	if err != nil {
		t.Fatal(err)
	}
	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
		}
	}
	refused := func(t *testing.T, cs kubernetes.Interface, s *corev1.Secret, message string) {
		t.Helper()
		_, err := cs.CoreV1().Secrets(ns).Create(t.Context(), s, metav1.CreateOptions{})
		want := fmt.Sprintf("ValidatingAdmissionPolicy 'kuik-secret-writes' with binding 'kuik-secret-writes' denied request: %s", message)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("creating Secret %s/%s = %v, want Forbidden with %q", ns, s.Name, err, want)
		}
	}

	t.Run("the syncer's identity cannot write a Secret that is not a kuik one", func(t *testing.T) {
		refused(t, syncerCS, secret("not-kuik"), "the kuik secret-syncer may only write Secrets named kuik-inject-* or kuik-provider-*")
		// The same Secret under a kuik-inject name goes through: RBAC let the first one
		// through, the policy refused it.
		if _, err := syncerCS.CoreV1().Secrets(ns).Create(t.Context(), secret("kuik-inject-imagealternative-e2e"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("the syncer's own kind of write was refused: %v", err)
		}
	})

	t.Run("another identity cannot create a kuik-inject Secret", func(t *testing.T) {
		refused(t, w.cs, secret("kuik-inject-imagealternative-forged"), "Secrets named kuik-inject-* and kuik-provider-* are reserved to the kuik secret-syncer")
	})
}

// grant gives users a ClusterRole (namespace "") or a Role in namespace with these rules.
func (w *world) grant(t *testing.T, name string, rules []rbacv1.PolicyRule, namespace string, users ...string) {
	t.Helper()
	var subjects []rbacv1.Subject
	for _, u := range users {
		subjects = append(subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: u})
	}
	if namespace == "" {
		w.create(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules})
		w.create(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subjects})
		return
	}
	w.create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rules})
	w.create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subjects})
}
