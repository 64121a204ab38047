package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// asUser is a client impersonating user.
func asUser(t *testing.T, user string) client.Client {
	t.Helper()
	c, err := client.New(cp.ConfigAs(user), client.Options{Scheme: webhook.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// firstRefusal retries the admission until the validating webhook refuses it (its configuration
// may take a moment to be in force), and returns the refusal.
func firstRefusal(t *testing.T, try func(ctx context.Context) error) error {
	t.Helper()
	var refusal error
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		refusal = try(ctx)
		return refusal != nil, nil
	}); err != nil {
		t.Fatal("never refused")
	}
	return refusal
}

func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("refusal = %v, want a Forbidden containing %q", err, want)
	}
}

func providerAlternative(auth *v1alpha1.Auth) *v1alpha1.ImageAlternative {
	return &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "provider-"},
		Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{
			{Repository: "quay.io/acme/app"},
			{Repository: "123456789012.dkr.ecr.eu-west-1.amazonaws.com/acme/app", Auth: auth},
		}},
	}
}

// An entry that names a provider needs the verb use on that provider
// (credentialproviders.kuik.enix.io, named after it), granted in RBAC, whether it injects or
// not: the plugin runs with kuik's cloud identity either way.
func TestAProviderEntryNeedsUseOnTheProvider(t *testing.T) {
	w := setup(t)
	grant(t, w.cs, "provider-routing-writers", []rbacv1.PolicyRule{{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"imagealternatives", "imagemirrors"}, Verbs: []string{"create", "update", "get"}}}, "", "carol", "dave")
	grant(t, w.cs, "ecr-users", []rbacv1.PolicyRule{{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"credentialproviders"}, Verbs: []string{"use"}, ResourceNames: []string{"ecr"}}}, "", "dave")
	injecting := func() *v1alpha1.ImageAlternative {
		return providerAlternative(&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}, InjectPullSecret: ptr.To(true)})
	}

	refusal := firstRefusal(t, func(ctx context.Context) error { return asUser(t, "carol").Create(ctx, injecting(), client.DryRunAll) })
	wantRefusal(t, refusal, `spec.alternatives[1].auth.provider.name: user "carol" may not use credential provider "ecr" (verb use on credentialproviders.kuik.enix.io)`)

	if err := asUser(t, "dave").Create(t.Context(), injecting(), client.DryRunAll); err != nil {
		t.Errorf("dave, granted use on ecr, was refused: %v", err)
	}
	other := injecting()
	other.Spec.Alternatives[1].Auth.Provider.Name = "gcr"
	wantRefusal(t, asUser(t, "dave").Create(t.Context(), other, client.DryRunAll), `spec.alternatives[1].auth.provider.name: user "dave" may not use credential provider "gcr"`)

	mirror := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "provider-"},
		Spec: v1alpha1.ImageMirrorSpec{Destination: v1alpha1.MirrorDestination{
			Path: "123456789012.dkr.ecr.eu-west-1.amazonaws.com/mirror/",
			Pull: &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}, InjectPullSecret: ptr.To(true)}},
		}},
	}
	wantRefusal(t, asUser(t, "carol").Create(t.Context(), mirror.DeepCopy(), client.DryRunAll), `spec.destination.pull.auth.provider.name: user "carol" may not use credential provider "ecr"`)
	if err := asUser(t, "dave").Create(t.Context(), mirror.DeepCopy(), client.DryRunAll); err != nil {
		t.Errorf("dave's mirror was refused: %v", err)
	}

	// An entry that does not inject (the provider's default) still runs the plugin as kuik.
	for name, auth := range map[string]*v1alpha1.Auth{
		"injectPullSecret unset": {Provider: &v1alpha1.ProviderAuth{Name: "ecr"}},
		"injectPullSecret false": {Provider: &v1alpha1.ProviderAuth{Name: "ecr"}, InjectPullSecret: ptr.To(false)},
	} {
		wantRefusal(t, asUser(t, "carol").Create(t.Context(), providerAlternative(auth), client.DryRunAll), `spec.alternatives[1].auth.provider.name: user "carol" may not use credential provider "ecr"`)
		if err := asUser(t, "dave").Create(t.Context(), providerAlternative(auth), client.DryRunAll); err != nil {
			t.Errorf("%s: dave, granted use on ecr, was refused: %v", name, err)
		}
	}
}

// A provider entry naming a ServiceAccount makes the syncer obtain that ServiceAccount's tokens,
// so its author must be allowed to create them (serviceaccounts/token in its namespace).
func TestAServiceAccountRefNeedsTheRightToCreateItsTokens(t *testing.T) {
	w := setup(t)
	ns := w.namespace(t, nil)
	grant(t, w.cs, "sa-routing-writers", []rbacv1.PolicyRule{{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"imagealternatives"}, Verbs: []string{"create"}}}, "", "frank", "grace")
	grant(t, w.cs, "builder-tokens", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"builder"}}}, ns, "grace")
	// Every provider entry needs use on its provider: both have it.
	grant(t, w.cs, "sa-ecr-users", []rbacv1.PolicyRule{{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"credentialproviders"}, Verbs: []string{"use"}, ResourceNames: []string{"ecr"}}}, "", "frank", "grace")
	obj := func() *v1alpha1.ImageAlternative {
		return providerAlternative(&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{
			Name: "ecr", ServiceAccountRef: &v1alpha1.ServiceAccountReference{Namespace: ns, Name: "builder"}}})
	}

	refusal := firstRefusal(t, func(ctx context.Context) error { return asUser(t, "frank").Create(ctx, obj(), client.DryRunAll) })
	wantRefusal(t, refusal, `spec.alternatives[1].auth.provider.serviceAccountRef: user "frank" may not create a token for ServiceAccount `+ns+`/builder (verb create on serviceaccounts/token)`)

	if err := asUser(t, "grace").Create(t.Context(), obj(), client.DryRunAll); err != nil {
		t.Errorf("grace, allowed to create builder's tokens, was refused: %v", err)
	}
	// The grant is for builder in that namespace only.
	elsewhere := obj()
	elsewhere.Spec.Alternatives[1].Auth.Provider.ServiceAccountRef.Name = "deployer"
	wantRefusal(t, asUser(t, "grace").Create(t.Context(), elsewhere, client.DryRunAll), `spec.alternatives[1].auth.provider.serviceAccountRef: user "grace" may not create a token for ServiceAccount `+ns+`/deployer`)
	// Another provider needs its own use.
	other := obj()
	other.Spec.Alternatives[1].Auth.Provider.Name = "gcr"
	wantRefusal(t, asUser(t, "grace").Create(t.Context(), other, client.DryRunAll), `spec.alternatives[1].auth.provider.name: user "grace" may not use credential provider "gcr"`)
}

// Turning injectPullSecret on for an existing provider entry spreads the provider's credential
// into pods: an editor who may not use the provider is refused it, and may still change the
// resource's metadata.
func TestUpdatesThatInjectAProviderCredentialNeedUseOnIt(t *testing.T) {
	w := setup(t)
	grant(t, w.cs, "provider-routing-editors", []rbacv1.PolicyRule{{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"imagealternatives"}, Verbs: []string{"get", "update"}}}, "", "heidi")
	ia := providerAlternative(&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}, InjectPullSecret: ptr.To(false)})
	ia.GenerateName, ia.Name = "", "provider-not-injected"
	w.create(t, ia) // as the admin
	heidi := asUser(t, "heidi")
	update := func(ctx context.Context, change func(*v1alpha1.ImageAlternative)) error {
		cur := &v1alpha1.ImageAlternative{}
		if err := heidi.Get(ctx, client.ObjectKeyFromObject(ia), cur); err != nil {
			return err
		}
		change(cur)
		return heidi.Update(ctx, cur, client.DryRunAll)
	}
	refusal := firstRefusal(t, func(ctx context.Context) error {
		return update(ctx, func(o *v1alpha1.ImageAlternative) { o.Spec.Alternatives[1].Auth.InjectPullSecret = ptr.To(true) })
	})
	wantRefusal(t, refusal, `spec.alternatives[1].auth.provider.name: user "heidi" may not use credential provider "ecr"`)

	// Once the entry injects (set by the admin), any spec change needs the right, and a
	// metadata-only one does not.
	cur := &v1alpha1.ImageAlternative{}
	if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(ia), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Alternatives[1].Auth.InjectPullSecret = ptr.To(true)
	if err := w.c.Update(t.Context(), cur); err != nil {
		t.Fatal(err)
	}
	if err := update(t.Context(), func(o *v1alpha1.ImageAlternative) { o.Spec.RewritePolicy = v1alpha1.RewritePolicyAlways }); !apierrors.IsForbidden(err) {
		t.Errorf("setting rewritePolicy Always on an injecting entry: %v, want a refusal", err)
	}
	if err := update(t.Context(), func(o *v1alpha1.ImageAlternative) { o.Labels = map[string]string{"owner": "heidi"} }); err != nil {
		t.Errorf("a metadata-only update was refused: %v", err)
	}
}
