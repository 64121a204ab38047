package webhook_test

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The keeper writes and deletes tags with spec.keep.push's Secret, under a destination the
// author chooses: referencing it takes get on it, as for the pull Secret.
func TestRoutingValidatorChecksThePushSecret(t *testing.T) {
	im := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Spec: v1alpha1.ImageMirrorSpec{
			Destination: v1alpha1.MirrorDestination{Path: "registry.tld/mirror/",
				Pull: &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "pull"}}}},
			Keep: &v1alpha1.MirrorKeep{Push: &v1alpha1.KeepPush{Auth: &v1alpha1.KeepPushAuth{SecretRef: v1alpha1.LocalSecretReference{Name: "push"}}}},
		},
	}
	var asked []string
	v := &webhook.RoutingValidator{ClusterResourceNamespace: "kuik-system", Review: func(_ context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
		a := sar.Spec.ResourceAttributes
		asked = append(asked, a.Verb+" "+a.Resource+" "+a.Namespace+"/"+a.Name)
		sar.Status.Allowed = a.Name != "push"
		return sar, nil
	}}
	resp := v.Handle(t.Context(), routingRequest(t, "ImageMirror", im))
	if resp.Allowed {
		t.Fatal("allowed a push Secret the user may not get")
	}
	if want := "spec.keep.push.auth.secretRef.name"; !strings.Contains(resp.Result.Message, want) {
		t.Errorf("refusal %q does not name %s", resp.Result.Message, want)
	}
	if want := []string{"get secrets kuik-system/pull", "get secrets kuik-system/push"}; strings.Join(asked, ",") != strings.Join(want, ",") {
		t.Errorf("asked %q, want %q", asked, want)
	}
}
