package webhook_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Under reinvocationPolicy IfNeeded kuik sees the pod again after a later webhook changed it.
// An image-pinning webhook (Kyverno's mutateDigest, sigstore's policy-controller) turns
// alt:v1 into alt:v1@sha256:…: still the entry kuik routed to, still needing its credential.
// Dropping kuik's own record there leaves the pod on a private registry with no entry in its
// Secret under OnFailure.
func TestReinvocationAfterADigestIsPinnedKeepsKuiksRecord(t *testing.T) {
	const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	acme := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		testutil.WithSecret("registry.local:5000/acme/foo", "local"))
	p := pod(corev1.Container{Name: "c", Image: "registry.local:5000/acme/foo:v1" + digest})
	p.Labels = map[string]string{v1alpha1.LabelRewritten: "true"}
	p.Annotations = map[string]string{
		v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1"}`,
		v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
		v1alpha1.AnnotationReason:         `{"c":"OnFailure"}`,
	}
	p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "kuik-inject-imagealternative-acme"}}
	a := &availability{available: map[string]bool{}}
	resp := mutator(t, a, []v1alpha1.ImageAlternative{acme}, nil).Handle(t.Context(), createRequest(t, p))
	if diff := cmp.Diff([]jsonpatch.JsonPatchOperation(nil), patches(t, resp)); diff != "" {
		t.Errorf("reinvocation changed kuik's own record (-want +got):\n%s", diff)
	}
}

// A malformed kuik annotation is not one kuik wrote: it reads as empty, so it cannot make the
// webhook admit the pod unchanged and shield forged records on the same pod.
func TestAMalformedKuikAnnotationDoesNotShieldForgedRecords(t *testing.T) {
	acme := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		testutil.WithSecret("registry.local:5000/acme/foo", "local"))
	p := pod(corev1.Container{Name: "c", Image: "ghcr.io/evil/app:v1"})
	p.Labels = map[string]string{v1alpha1.LabelRewritten: "true"}
	p.Annotations = map[string]string{
		v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1"}`,
		v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
		v1alpha1.AnnotationReason:         `not json`,
	}
	resp := mutator(t, &availability{}, []v1alpha1.ImageAlternative{acme}, nil).Handle(t.Context(), createRequest(t, p))
	removed := map[string]bool{}
	for _, op := range patches(t, resp) {
		if op.Operation == "remove" {
			removed[op.Path] = true
		}
	}
	for _, path := range []string{
		"/metadata/annotations/kuik.enix.io~1original-images",
		"/metadata/annotations/kuik.enix.io~1rewritten-by",
		"/metadata/labels/kuik.enix.io~1rewritten",
	} {
		if !removed[path] {
			t.Errorf("forged %s kept (patches %v, warnings %v)", path, resp.Patch, resp.Warnings)
		}
	}
}
