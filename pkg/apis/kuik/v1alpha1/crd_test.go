package v1alpha1_test

import (
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{CRDs: true}, &cp))
}

func newClient(t *testing.T) client.Client {
	t.Helper()
	s := testenvScheme(t)
	c, err := client.New(cp.Config(), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ia(entries ...v1alpha1.Alternative) *v1alpha1.ImageAlternative {
	return &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ia-"},
		Spec:       v1alpha1.ImageAlternativeSpec{Alternatives: entries},
	}
}

func repo(r string) v1alpha1.Alternative  { return v1alpha1.Alternative{Repository: r} }
func group(g string) v1alpha1.Alternative { return v1alpha1.Alternative{RepositoryGroup: g} }

func im(path string, excludes ...string) *v1alpha1.ImageMirror {
	return &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "im-"},
		Spec:       v1alpha1.ImageMirrorSpec{ExcludeImages: excludes, Destination: v1alpha1.MirrorDestination{Path: path}},
	}
}

// Every refusal is decided by the real API server from the generated CRD (OpenAPI schema and
// CEL); each must name the field.
func TestCRDRefusesInvalidRoutingResources(t *testing.T) {
	secret := &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "s"}}
	tooMany := make([]v1alpha1.Alternative, 33)
	for i := range tooMany {
		tooMany[i] = repo("quay.io/acme/foo")
	}
	tests := map[string]struct {
		obj  client.Object
		want []string
	}{
		"entry with a tag": {ia(repo("quay.io/acme/foo:v1")),
			[]string{"spec.alternatives[0].repository", "must not contain a tag"}},
		"entry with a digest": {ia(repo("quay.io/acme/foo@sha256:" + strings.Repeat("a", 64))),
			[]string{"spec.alternatives[0].repository", "must not contain a digest"}},
		"entry ending in a colon": {ia(repo("quay.io/acme/foo:")),
			[]string{"spec.alternatives[0].repository", "must not end with ':'"}},
		"group ending in a colon": {ia(group("quay.io/acme:")),
			[]string{"spec.alternatives[0].repositoryGroup", "must not end with ':'"}},
		"invalid reference": {ia(repo("quay.io/Acme/foo")),
			[]string{"spec.alternatives[0].repository", "not a valid image repository"}},
		"mixed forms": {ia(repo("quay.io/acme/foo"), group("registry.local/acme/")),
			[]string{"spec.alternatives", "every entry must use the same form"}},
		"both repository and repositoryGroup": {ia(v1alpha1.Alternative{Repository: "quay.io/acme/foo", RepositoryGroup: "quay.io/acme/"}),
			[]string{"spec.alternatives[0]", "exactly one of repository or repositoryGroup"}},
		"neither repository nor repositoryGroup": {ia(v1alpha1.Alternative{Insecure: true}),
			[]string{"spec.alternatives[0]", "exactly one of repository or repositoryGroup"}},
		"both secretRef and provider": {ia(v1alpha1.Alternative{Repository: "quay.io/acme/foo", Auth: &v1alpha1.Auth{SecretRef: secret.SecretRef, Provider: &v1alpha1.ProviderAuth{Name: "ecr"}}}),
			[]string{"spec.alternatives[0].auth", "exactly one of secretRef or provider"}},
		"neither secretRef nor provider": {ia(v1alpha1.Alternative{Repository: "quay.io/acme/foo", Auth: &v1alpha1.Auth{}}),
			[]string{"spec.alternatives[0].auth", "exactly one of secretRef or provider"}},
		"more than 32 entries": {ia(tooMany...),
			[]string{"spec.alternatives", "must have at most 32 items"}},
		"no entry": {ia(),
			[]string{"spec.alternatives"}},
		"rewritePolicy None on an ImageAlternative": {func() client.Object {
			o := ia(repo("quay.io/acme/foo"))
			o.Spec.RewritePolicy = v1alpha1.RewritePolicyNone
			return o
		}(), []string{"spec.rewritePolicy", "None is only valid for ImageMirror"}},
		"mirror path with a tag": {im("registry.tld/mirror:v1"),
			[]string{"spec.destination.path", "must not contain a tag"}},
		"mirror glob that does not parse": {im("registry.tld/mirror/", "ghcr.io/[huge/**"),
			[]string{"spec.excludeImages", "a glob may only hold"}},
		"mirror glob with three stars": {im("registry.tld/mirror/", "ghcr.io/***"),
			[]string{"spec.excludeImages", "'***' is not a valid glob"}},
	}
	c := newClient(t)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := c.Create(t.Context(), tc.obj, client.DryRunAll)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create = %v, want Invalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestCRDAdmitsValidRoutingResourcesWithDefaults(t *testing.T) {
	c := newClient(t)
	tests := map[string]client.Object{
		"repositories with a port and credentials": ia(repo("quay.io/acme/foo"), v1alpha1.Alternative{
			Repository: "registry.local:5000/acme/foo", Insecure: true,
			Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "local"}},
		}),
		"groups with and without a trailing slash": ia(group("quay.io/acme/"), group("registry.local:5000/acme")),
		"docker hub short name":                    ia(repo("nginx"), repo("mirror.local/library/nginx")),
		"mirror with globs":                        im("registry.tld/mirror/", "ghcr.io/huge/**", "docker.io/library/*:latest"),
	}
	for name, obj := range tests {
		t.Run(name, func(t *testing.T) {
			if err := c.Create(t.Context(), obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			var policy v1alpha1.RewritePolicy
			switch o := obj.(type) {
			case *v1alpha1.ImageAlternative:
				policy = o.Spec.RewritePolicy
			case *v1alpha1.ImageMirror:
				policy = o.Spec.RewritePolicy
			}
			if policy != v1alpha1.RewritePolicyOnFailure {
				t.Errorf("rewritePolicy defaulted to %q, want OnFailure", policy)
			}
		})
	}
}

// A mirror destination that is a registry host with a port and nothing after it is refused for
// what it lacks, the trailing '/' (not as a tag); with the '/' it is the registry's root. The
// webhook's validation (routing.ValidateImageMirror, also used by `webhook candidates`) gives
// the same verdict with the same words.
func TestCRDMirrorDestinationOnAHostWithAPort(t *testing.T) {
	const noSlash = "a registry host with a port must end with '/' to name its root, e.g. registry.tld:5000/"
	const tag = "must not contain a tag"
	c := newClient(t)
	for path, want := range map[string]string{
		"registry.tld:5000":           noSlash,
		"localhost:5000":              noSlash,
		"10.0.0.1:5000":               noSlash,
		"registry.tld:5000/":          "",
		"localhost:5000/mirror/":      "",
		"registry.tld:5000/mirror":    "",
		"registry.tld:5000/mirror:v1": tag,
		"registry.tld/mirror:5000":    tag,
		"registry.tld":                "",
	} {
		t.Run(path, func(t *testing.T) {
			obj := im(path)
			err := c.Create(t.Context(), obj, client.DryRunAll)
			switch {
			case want == "" && err != nil:
				t.Errorf("the API server refused destination.path %q: %v", path, err)
			case want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.destination.path") || !strings.Contains(err.Error(), "destination.path: "+want)):
				t.Errorf("the API server's answer to destination.path %q = %v, want Invalid naming spec.destination.path with %q", path, err, want)
			case want == noSlash && strings.Contains(err.Error(), tag):
				t.Errorf("the API server calls %q a tag: %v", path, err)
			}

			errs := routing.ValidateImageMirror(obj)
			switch {
			case want == "" && len(errs) != 0:
				t.Errorf("the webhook refuses destination.path %q: %v", path, errs.ToAggregate())
			case want != "" && (len(errs) != 1 || errs[0].Field != "spec.destination.path" || !strings.HasPrefix(errs[0].Detail, want)):
				t.Errorf("the webhook's answer to destination.path %q = %v, want one error on spec.destination.path starting with %q", path, errs.ToAggregate(), want)
			}
		})
	}
}
