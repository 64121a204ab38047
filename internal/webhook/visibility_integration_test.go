package webhook_test

import (
	"fmt"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// upstreamOrPrivate is an OnFailure ImageAlternative from upstream to the private registry
// (with its credential), for the namespaces labelled trial=<trial>.
func upstreamOrPrivate(name, upstream, private, trial string) *v1alpha1.ImageAlternative {
	return &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"trial": trial}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream},
				{Repository: private, Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "private-registry"}}},
			},
		},
	}
}

// Through the API server: a dry-run resource leaves the pod's image and pull secrets as they
// are and records, on the stored pod, what it would have done.
func TestWebhookDryRunThroughTheAPIServer(t *testing.T) {
	w := setup(t)
	upstream := w.down + "/acme/app"
	private := w.registry.Host + "/acme/app"
	ns := w.namespace(t, map[string]string{"trial": "dry-run"})
	ia := upstreamOrPrivate("trial-app", upstream, private, "dry-run")
	ia.Spec.DryRun = true
	w.create(t, ia)
	got := w.createPod(t, ns, simplePod(upstream+":v1"), func(p *corev1.Pod) bool { return p.Annotations[v1alpha1.AnnotationDryRun] != "" })
	want := fmt.Sprintf(`{"app":{"image":%q,"by":"ImageAlternative/trial-app","reason":"OnFailure"}}`, private+":v1")
	if got.Annotations[v1alpha1.AnnotationDryRun] != want {
		t.Errorf("dry-run annotation %s, want %s", got.Annotations[v1alpha1.AnnotationDryRun], want)
	}
	if got.Spec.Containers[0].Image != upstream+":v1" || len(got.Spec.ImagePullSecrets) != 0 || got.Labels[v1alpha1.LabelRewritten] != "" ||
		got.Annotations[v1alpha1.AnnotationOriginalImages] != "" || got.Annotations[v1alpha1.AnnotationReason] != "" {
		t.Errorf("a dry run changed the pod: %s", podSummary(got))
	}
}

// Through the API server and a real registry: pinDigest stores the pod at the digest the
// registry answered for the tag, and the tag in the record.
func TestWebhookPinsTheProbedDigestThroughTheAPIServer(t *testing.T) {
	w := setup(t)
	upstream := w.down + "/acme/app"
	private := w.registry.Host + "/acme/app"
	ns := w.namespace(t, map[string]string{"trial": "pin"})
	ia := upstreamOrPrivate("pinned-app", upstream, private, "pin")
	ia.Spec.PinDigest = true
	w.create(t, ia)
	ref, err := name.ParseReference(private+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref, remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: w.registry.Username, Password: w.registry.Password})))
	if err != nil {
		t.Fatal(err)
	}
	got := w.createPod(t, ns, simplePod(upstream+":v1"), func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" })
	if want := private + "@" + desc.Digest.String(); got.Spec.Containers[0].Image != want {
		t.Errorf("image %s, want %s", got.Spec.Containers[0].Image, want)
	}
	if want := fmt.Sprintf(`{"app":%q}`, upstream+":v1"); got.Annotations[v1alpha1.AnnotationOriginalImages] != want {
		t.Errorf("original-images %s, want %s", got.Annotations[v1alpha1.AnnotationOriginalImages], want)
	}

	// A pod already pinned to a digest the alternative does not hold is not routed there: it
	// is probed by that digest.
	missing := upstream + "@sha256:" + fmt.Sprintf("%064x", 1)
	other, err := w.cs.CoreV1().Pods(ns).Create(t.Context(), simplePod(missing), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Spec.Containers[0].Image != missing || other.Annotations[v1alpha1.AnnotationReason] != `{"app":"NoAlternatives"}` {
		t.Errorf("a digest the alternative lacks was routed: %s", podSummary(other))
	}
}
