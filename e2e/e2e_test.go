package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func (w *world) secretRef() *v1alpha1.Auth {
	return &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: registrySecret}}
}

func (w *world) credential() string { return registryUser + ":" + registryPassword }

// OnFailure: the upstream does not answer, the pod goes to the private registry, the syncer
// writes the credential in the pod's namespace, and the kubelet's choice of credential among the
// pod's pull Secrets pulls the image; without kuik's Secret the registry says 401. Deleting the
// resource collects its Secret.
func TestOnFailureRoutesToThePrivateRegistryAndThePodCanPull(t *testing.T) {
	w := env(t)
	tok := token(t)
	w.registry.Push(t, "acme/onfailure:v1")
	upstream := w.down + "/acme/onfailure"
	private := w.registry.Host + "/acme/onfailure"
	ns := w.namespace(t, map[string]string{"e2e": tok})
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "onfailure"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": tok}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream},
				{Repository: private, Insecure: true, Auth: w.secretRef()},
			},
		},
	}
	w.create(t, ia)
	secretName := "kuik-inject-imagealternative-onfailure"

	pod := w.createPod(t, ns, upstream+":v1", rewritten)
	checkRouted(t, pod, upstream+":v1", private+":v1", "ImageAlternative/onfailure", "OnFailure", secretName)
	w.waitSecret(t, ns, secretName, ia, map[string]string{private: w.credential()})
	w.checkPulls(t, pod)

	t.Run("deleting the resource collects its Secret", func(t *testing.T) {
		if err := w.c.Delete(t.Context(), ia); err != nil {
			t.Fatal(err)
		}
		w.waitGone(t, ns, secretName)
	})
}

// Always: the Secret lands in every namespace the namespaceSelector selects before any pod
// exists there, and nowhere else; a pod is routed to the mirror even though its original would
// be tried after it, and pulls through that Secret. Deleting the mirror garbage-collects its
// Secrets in every namespace.
func TestAlwaysMirrorPlacesItsSecretBeforeAnyPod(t *testing.T) {
	w := env(t)
	tok := token(t)
	// A mirror cannot hold images of a registry with a port (host:port is no path segment):
	// the original is localhost/…, where nothing listens.
	original := "localhost/acme/always:v1"
	w.registry.Push(t, "mirror/"+original)
	selected := []string{w.namespace(t, map[string]string{"e2e": tok}), w.namespace(t, map[string]string{"e2e": tok})}
	outside := w.namespace(t, nil)
	im := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: "always"},
		Spec: v1alpha1.ImageMirrorSpec{
			RewritePolicy:     v1alpha1.RewritePolicyAlways,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": tok}},
			Destination: v1alpha1.MirrorDestination{
				Path: w.registry.Host + "/mirror/", Insecure: true,
				Pull: &v1alpha1.MirrorPull{Auth: w.secretRef()},
			},
		},
	}
	w.create(t, im)
	secretName := "kuik-inject-imagemirror-always"
	// The auths key is the destination path without its trailing slash.
	want := map[string]string{w.registry.Host + "/mirror": w.credential()}

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

	t.Run("a pod is routed to the mirror and pulls through the Secret", func(t *testing.T) {
		pod := w.createPod(t, selected[0], original, rewritten)
		checkRouted(t, pod, original, w.registry.Host+"/mirror/"+original, "ImageMirror/always", "Always", secretName)
		w.checkPulls(t, pod)
	})

	t.Run("deleting the mirror collects its Secrets in every namespace", func(t *testing.T) {
		if err := w.c.Delete(t.Context(), im); err != nil {
			t.Fatal(err)
		}
		for _, ns := range selected {
			w.waitGone(t, ns, secretName)
		}
	})
}

// A registry that hangs costs the webhook one probe timeout, which the chart keeps below the
// API server's webhook timeout: the pod is admitted and routed past it (with failurePolicy
// Ignore, a webhook timing out would admit it unrouted).
func TestHangingUpstreamIsRoutedAroundWithinTheWebhookTimeout(t *testing.T) {
	w := env(t)
	if w.webhookTimeout < w.probeTimeout+time.Second {
		t.Fatalf("the chart's pod webhook timeoutSeconds %s is below its probe timeout %s + 1s", w.webhookTimeout, w.probeTimeout)
	}
	tok := token(t)
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	w.registry.Push(t, "acme/slow:v1")
	upstream := hanging.Host + "/acme/slow"
	private := w.registry.Host + "/acme/slow"
	ns := w.namespace(t, map[string]string{"e2e": tok})
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "slow"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": tok}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream, Insecure: true},
				{Repository: private, Insecure: true, Auth: w.secretRef()},
			},
		},
	}
	w.create(t, ia)
	secretName := "kuik-inject-imagealternative-slow"

	pod := w.createPod(t, ns, upstream+":v1", rewritten)
	checkRouted(t, pod, upstream+":v1", private+":v1", "ImageAlternative/slow", "OnFailure", secretName)
	if hanging.Hung() == 0 {
		t.Error("the hanging registry was never probed")
	}
	w.waitSecret(t, ns, secretName, ia, map[string]string{private: w.credential()})
	w.checkPulls(t, pod)
}

// Delegated write access to routing resources cannot spray a Secret one cannot read: the
// validating webhook asks the API server (SubjectAccessReview) whether the requesting user may
// get every referenced Secret.
func TestRoutingResourceNeedsReadAccessToItsSecretRef(t *testing.T) {
	w := env(t)
	w.grant(t, "e2e-routing-writers", []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"imagealternatives"}, Verbs: []string{"create", "get", "delete"}}}, "", "e2e-alice", "e2e-bob")
	w.grant(t, "e2e-secret-reader", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{registrySecret}}}, crns, "e2e-bob")
	as := func(user string) client.Client {
		c, err := client.New(cp.ConfigAs(user), client.Options{Scheme: w.c.Scheme()})
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
	wantRefusal := `spec.alternatives[1].auth.secretRef.name: user "e2e-alice" may not get Secret ` + crns + "/" + registrySecret

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
		if err := w.c.Get(t.Context(), key(obj("e2e-bob")), &got); err != nil {
			t.Fatalf("bob's resource: %v", err)
		}
	})
}

// The chart's ValidatingAdmissionPolicy is in force: the syncer's own identity is bounded to its
// Secrets, and its Secrets are reserved to it. (The full matrix is policies/'s test.)
func TestSecretWritesAreBoundedByThePolicy(t *testing.T) {
	w := env(t)
	ns := w.namespace(t, nil)
	sa, err := w.chart.ServiceAccount(kuikenv.ComponentSyncer)
	if err != nil {
		t.Fatal(err)
	}
	syncerCS, err := kubernetes.NewForConfig(cp.ConfigAsServiceAccount(crns, sa))
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

// After a restart the syncer rebuilds from its informers and applies every pair once: a Secret
// deleted while it was down is back, one that did not change keeps its resourceVersion (the
// API server makes an identical apply a no-op).
func TestSyncerRestartRestoresADeletedSecret(t *testing.T) {
	w := env(t)
	tok := token(t)
	private := w.registry.Host + "/acme/restart"
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "restart"},
		Spec: v1alpha1.ImageAlternativeSpec{
			RewritePolicy:     v1alpha1.RewritePolicyAlways,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": tok}},
			Alternatives:      []v1alpha1.Alternative{{Repository: private, Insecure: true, Auth: w.secretRef()}},
		},
	}
	deleted, kept := w.namespace(t, map[string]string{"e2e": tok}), w.namespace(t, map[string]string{"e2e": tok})
	w.create(t, ia)
	secretName := "kuik-inject-imagealternative-restart"
	want := map[string]string{private: w.credential()}
	w.waitSecret(t, deleted, secretName, ia, want)
	keptVersion := w.waitSecret(t, kept, secretName, ia, want).ResourceVersion

	var before float64
	w.restartSyncer(t, func() {
		// The policy does not check deletes: an admin may delete a kuik Secret.
		if err := w.cs.CoreV1().Secrets(deleted).Delete(t.Context(), secretName, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting %s/%s as admin: %v", deleted, secretName, err)
		}
		before = counter(t, metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess))
	})
	w.waitSecret(t, deleted, secretName, ia, want)
	eventually(t, "every pair applied once since the restart", func(context.Context) error {
		applied := counter(t, metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess)) - before
		pairs := gauge(t, metrics.SyncerPairs)
		if pairs < 2 || applied < pairs || gauge(t, metrics.SyncerQueueDepth) != 0 {
			return fmt.Errorf("%v applies for %v pairs", applied, pairs)
		}
		return nil
	})
	s, err := w.cs.CoreV1().Secrets(kept).Get(t.Context(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.ResourceVersion != keptVersion {
		t.Errorf("secret %s/%s: resourceVersion %s → %s, want unchanged", kept, secretName, keptVersion, s.ResourceVersion)
	}
}

type metric interface{ Write(*dto.Metric) error }

func counter(t *testing.T, c metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func gauge(t *testing.T, g metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
