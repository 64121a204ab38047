package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func routingRequest(t *testing.T, kind string, obj client.Object) admission.Request {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "uid",
		Kind:      metav1.GroupVersionKind{Group: "kuik.enix.io", Version: "v1alpha1", Kind: kind},
		Operation: admissionv1.Create,
		UserInfo:  authenticationv1.UserInfo{Username: "carol", Groups: []string{"devs"}},
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

// The validator asks the API server exactly one SubjectAccessReview per distinct right, for the
// requesting user, in field order: get on a secretRef Secret, use on a provider (injecting or
// not), create on serviceaccounts/token for a serviceAccountRef.
func TestRoutingValidatorAsksForEachRightOnce(t *testing.T) {
	sa := &v1alpha1.ServiceAccountReference{Namespace: "ci", Name: "builder"}
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{
			{Repository: "quay.io/acme/app", Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "quay"}}},
			{Repository: "1.dkr.ecr.eu-west-1.amazonaws.com/acme/app", Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr", ServiceAccountRef: sa}, InjectPullSecret: ptr.To(true)}},
			{Repository: "2.dkr.ecr.eu-west-1.amazonaws.com/acme/app", Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr", ServiceAccountRef: sa}, InjectPullSecret: ptr.To(true)}},
			{Repository: "gcr.io/acme/app", Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "gcr"}}},
		}},
	}
	var asked []authorizationv1.SubjectAccessReviewSpec
	v := &webhook.RoutingValidator{ClusterResourceNamespace: "kuik-system", Review: func(_ context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
		asked = append(asked, sar.Spec)
		sar.Status.Allowed = true
		return sar, nil
	}}
	if resp := v.Handle(t.Context(), routingRequest(t, "ImageAlternative", ia)); !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	user := func(attrs authorizationv1.ResourceAttributes) authorizationv1.SubjectAccessReviewSpec {
		return authorizationv1.SubjectAccessReviewSpec{User: "carol", Groups: []string{"devs"}, Extra: map[string]authorizationv1.ExtraValue{}, ResourceAttributes: &attrs}
	}
	want := []authorizationv1.SubjectAccessReviewSpec{
		user(authorizationv1.ResourceAttributes{Namespace: "kuik-system", Verb: "get", Version: "v1", Resource: "secrets", Name: "quay"}),
		user(authorizationv1.ResourceAttributes{Verb: "use", Group: "kuik.enix.io", Resource: "credentialproviders", Name: "ecr"}),
		user(authorizationv1.ResourceAttributes{Namespace: "ci", Verb: "create", Version: "v1", Resource: "serviceaccounts", Subresource: "token", Name: "builder"}),
		user(authorizationv1.ResourceAttributes{Verb: "use", Group: "kuik.enix.io", Resource: "credentialproviders", Name: "gcr"}),
	}
	if diff := cmp.Diff(want, asked); diff != "" {
		t.Errorf("SubjectAccessReviews (-want +got):\n%s", diff)
	}
}

// A SubjectAccessReview that fails is an error of the webhook (500, naming what it checked),
// not a refusal of the user, as for Secrets.
func TestRoutingValidatorErrorsWhenAProviderAccessReviewFails(t *testing.T) {
	ia := providerAlternative(&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}, InjectPullSecret: ptr.To(true)})
	ia.Name = "a"
	v := &webhook.RoutingValidator{ClusterResourceNamespace: "kuik-system", Review: func(context.Context, *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
		return nil, errors.New("connection refused")
	}}
	resp := v.Handle(t.Context(), routingRequest(t, "ImageAlternative", ia))
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusInternalServerError {
		t.Fatalf("response = %+v, want a 500", resp.Result)
	}
	if want := `checking access to credential provider "ecr": connection refused`; resp.Result.Message != want {
		t.Errorf("message = %q, want %q", resp.Result.Message, want)
	}
}
