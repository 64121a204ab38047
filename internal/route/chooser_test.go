package route_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func secretsOf(docs map[string]map[string]string) route.SecretGetter {
	return func(_ context.Context, name string) (*corev1.Secret, error) {
		auths, ok := docs[name]
		if !ok {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
		}
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(auths)},
		}, nil
	}
}

func withProvider(repo, provider string, sa *v1alpha1.ServiceAccountReference, inject *bool) v1alpha1.Alternative {
	return v1alpha1.Alternative{Repository: repo, Auth: &v1alpha1.Auth{
		Provider: &v1alpha1.ProviderAuth{Name: provider, ServiceAccountRef: sa}, InjectPullSecret: inject}}
}

// nodeProviders is a credential-provider configuration, as the kubelet reads it, with one
// provider per matchImages entry.
func nodeProviders(t *testing.T, matchImages ...string) *credentialprovider.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n")
	for i, m := range matchImages {
		fmt.Fprintf(&b, "  - name: provider-%d\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    defaultCacheDuration: 10m\n    matchImages: [%q]\n", i, m)
	}
	path := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := credentialprovider.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Each candidate is probed with exactly the credential the kubelet will have for it, so a probe
// never finds available an image the pod cannot pull.
func TestCandidatesAreProbedWithTheCredentialThePodWillHave(t *testing.T) {
	private := testutil.NewRegistry(t, "puller", "s3cret")
	private.Push(t, "acme/app:v1")
	private.Push(t, "acme/x:v1")
	private.Push(t, "mirror/docker.io/acme/app:v1")
	public := testutil.NewRegistry(t, "", "")
	public.Push(t, "acme/app:v1")
	p := private.Host
	builder := &v1alpha1.ServiceAccountReference{Namespace: "ci", Name: "builder"}

	tests := map[string]struct {
		ias     []v1alpha1.ImageAlternative
		ims     []v1alpha1.ImageMirror
		secrets map[string]map[string]string
		image   string
		own     bool
		// nodeProviders are the matchImages of the nodes' credential providers (one provider
		// each); none: no configuration.
		nodeProviders []string
		want          string // the reference chosen, "" for none
	}{
		"an original on an entry with a credential is probed anonymously, since that credential is not injected for it": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				testutil.WithSecret(p+"/acme/app", "private"),
				v1alpha1.Alternative{Repository: public.Host + "/acme/app"})},
			secrets: map[string]map[string]string{"private": {p: "puller:s3cret"}},
			image:   p + "/acme/app:v1",
			want:    public.Host + "/acme/app:v1",
		},
		"a private original stays when the pod brings pull secrets of its own": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				testutil.WithSecret(p+"/acme/app", "private"),
				v1alpha1.Alternative{Repository: public.Host + "/acme/app"})},
			secrets: map[string]map[string]string{"private": {p: "puller:s3cret"}},
			image:   p + "/acme/app:v1",
			own:     true,
			want:    p + "/acme/app:v1",
		},
		"an injecting entry is probed with its credential": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: "quay.io/acme/app", Unavailable: true},
				testutil.WithSecret(p+"/acme/app", "private"))},
			secrets: map[string]map[string]string{"private": {p: "puller:s3cret"}},
			image:   "quay.io/acme/app:v1",
			want:    p + "/acme/app:v1",
		},
		"an entry whose credential is not injected is probed anonymously": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: "quay.io/acme/app", Unavailable: true},
				v1alpha1.Alternative{Repository: p + "/acme/app", Auth: &v1alpha1.Auth{
					SecretRef: &v1alpha1.LocalSecretReference{Name: "private"}, InjectPullSecret: ptr.To(false)}})},
			secrets: map[string]map[string]string{"private": {p: "puller:s3cret"}},
			image:   "quay.io/acme/app:v1",
			want:    "",
		},
		"a group entry is probed with the credential written for the group, not a more specific one": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("g", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{RepositoryGroup: "quay.io/acme/", Unavailable: true},
				v1alpha1.Alternative{RepositoryGroup: p + "/acme/", Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "split"}}})},
			// The syncer writes the credential matching every repository of the group (the
			// wrong one here); the key for acme/x alone is never injected.
			secrets: map[string]map[string]string{"split": {p + "/acme/x": "puller:s3cret", p + "/acme/": "puller:wrong"}},
			image:   "quay.io/acme/x:v1",
			want:    "",
		},
		"a mirror's credential keyed with the path's trailing slash is found": {
			ims: []v1alpha1.ImageMirror{{
				ObjectMeta: metav1.ObjectMeta{Name: "m"},
				Spec: v1alpha1.ImageMirrorSpec{RewritePolicy: v1alpha1.RewritePolicyAlways, Destination: v1alpha1.MirrorDestination{
					Path: p + "/mirror/", Pull: &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "mirror"}}}}},
			}},
			secrets: map[string]map[string]string{"mirror": {p + "/mirror/": "puller:s3cret"}},
			image:   "acme/app:v1",
			want:    p + "/mirror/docker.io/acme/app:v1",
		},
		"a private original the node's credential provider covers stays": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: p + "/acme/app"},
				v1alpha1.Alternative{Repository: public.Host + "/acme/app"})},
			image:         p + "/acme/app:v1",
			nodeProviders: []string{p},
			want:          p + "/acme/app:v1",
		},
		"a private original is routed away without a node credential provider for it": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: p + "/acme/app"},
				v1alpha1.Alternative{Repository: public.Host + "/acme/app"})},
			image: p + "/acme/app:v1",
			want:  public.Host + "/acme/app:v1",
		},
		"a node credential provider for another registry does not keep a private original": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: p + "/acme/app"},
				v1alpha1.Alternative{Repository: public.Host + "/acme/app"})},
			image:         p + "/acme/app:v1",
			nodeProviders: []string{"*.dkr.ecr.*.amazonaws.com", public.Host},
			want:          public.Host + "/acme/app:v1",
		},
		"a node credential provider makes only the original count on a refusal, not an alternative": {
			// kuik moves a pod only to an image a probe found: a refusal says nothing about
			// whether the alternative exists, whoever may pull it. The original is the pod
			// author's choice, kept unless proven unavailable.
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: public.Host + "/acme/gone"},
				v1alpha1.Alternative{Repository: p + "/acme/x"})},
			image:         public.Host + "/acme/gone:v1",
			nodeProviders: []string{p},
			want:          "",
		},
		"an injecting provider entry is probed with the credential of the provider's Secret": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: "quay.io/acme/app", Unavailable: true},
				withProvider(p+"/acme/app", "ecr", nil, ptr.To(true)))},
			secrets: map[string]map[string]string{credentialprovider.SecretName("ecr", nil): {p + "/acme/app": "puller:s3cret"}},
			image:   "quay.io/acme/app:v1",
			want:    p + "/acme/app:v1",
		},
		"a provider entry that does not inject is probed with the provider's Secret too": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: "quay.io/acme/app", Unavailable: true},
				withProvider(p+"/acme/app", "ecr", nil, nil))},
			secrets: map[string]map[string]string{credentialprovider.SecretName("ecr", nil): {p + "/acme/app": "puller:s3cret"}},
			image:   "quay.io/acme/app:v1",
			want:    p + "/acme/app:v1",
		},
		"a provider entry whose Secret is missing is unavailable": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: "quay.io/acme/app", Unavailable: true},
				withProvider(p+"/acme/app", "ecr", nil, ptr.To(true)))},
			image: "quay.io/acme/app:v1",
			want:  "",
		},
		"a provider entry whose Secret holds a wrong credential is unavailable": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: "quay.io/acme/app", Unavailable: true},
				withProvider(p+"/acme/app", "ecr", nil, ptr.To(true)))},
			secrets: map[string]map[string]string{credentialprovider.SecretName("ecr", nil): {p + "/acme/app": "puller:wrong"}},
			image:   "quay.io/acme/app:v1",
			want:    "",
		},
		"a provider entry with a serviceAccountRef is probed with that ServiceAccount's Secret": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: "quay.io/acme/app", Unavailable: true},
				withProvider(p+"/acme/app", "ecr", builder, ptr.To(true)))},
			secrets: map[string]map[string]string{
				credentialprovider.SecretName("ecr", nil):     {p + "/acme/app": "puller:wrong"},
				credentialprovider.SecretName("ecr", builder): {p + "/acme/app": "puller:s3cret"},
			},
			image: "quay.io/acme/app:v1",
			want:  p + "/acme/app:v1",
		},
		"a provider entry with a serviceAccountRef does not borrow the provider's credential without one": {
			ias: []v1alpha1.ImageAlternative{testutil.Alternative("a", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: "quay.io/acme/app", Unavailable: true},
				withProvider(p+"/acme/app", "ecr", builder, ptr.To(true)))},
			secrets: map[string]map[string]string{credentialprovider.SecretName("ecr", nil): {p + "/acme/app": "puller:s3cret"}},
			image:   "quay.io/acme/app:v1",
			want:    "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ix, errs := routing.NewIndex(tc.ias, tc.ims)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			cands, err := ix.Candidates(tc.image, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := &route.ProbeChooser{Prober: probe.New(probe.Options{}), Secrets: secretsOf(tc.secrets)}
			if tc.nodeProviders != nil {
				c.NodeProviders = nodeProviders(t, tc.nodeProviders...)
			}
			got := ""
			if i := c.Choose(t.Context(), [][]routing.Candidate{cands}, tc.own)[0].Index; i >= 0 {
				got = cands[i].Reference
			}
			if got != tc.want {
				t.Errorf("chose %q, want %q (candidates %v)", got, tc.want, cands)
			}
		})
	}
}
