package routing_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestCandidatesOrder(t *testing.T) {
	const (
		always    = v1alpha1.RewritePolicyAlways
		onFailure = v1alpha1.RewritePolicyOnFailure
	)
	alt := func(name string, p v1alpha1.RewritePolicy) v1alpha1.ImageAlternative {
		return testutil.NewImageAlternative(name).Policy(p).
			Repository("quay.io/acme/foo").Repository("registry.local/" + name + "/foo").Build()
	}
	mirror := func(name string, p v1alpha1.RewritePolicy) v1alpha1.ImageMirror {
		return testutil.NewImageMirror(name, name+".local/").Policy(p).Build()
	}

	tests := map[string]struct {
		alternatives []v1alpha1.ImageAlternative
		mirrors      []v1alpha1.ImageMirror
		image        string
		want         []string
	}{
		"Always mirror and Always alternative both come before the original, mirror first": {
			alternatives: []v1alpha1.ImageAlternative{alt("a", always)},
			mirrors:      []v1alpha1.ImageMirror{mirror("m", always)},
			want: []string{
				"ImageMirror/m m.local/quay.io/acme/foo:v1",
				"ImageAlternative/a registry.local/a/foo:v1",
				"original quay.io/acme/foo:v1",
			},
		},
		"Always mirror before the original, OnFailure alternative after it": {
			alternatives: []v1alpha1.ImageAlternative{alt("a", onFailure)},
			mirrors:      []v1alpha1.ImageMirror{mirror("m", always)},
			want: []string{
				"ImageMirror/m m.local/quay.io/acme/foo:v1",
				"original quay.io/acme/foo:v1",
				"ImageAlternative/a registry.local/a/foo:v1",
			},
		},
		"Always alternative before the original, OnFailure mirror after it": {
			alternatives: []v1alpha1.ImageAlternative{alt("a", always)},
			mirrors:      []v1alpha1.ImageMirror{mirror("m", onFailure)},
			want: []string{
				"ImageAlternative/a registry.local/a/foo:v1",
				"original quay.io/acme/foo:v1",
				"ImageMirror/m m.local/quay.io/acme/foo:v1",
			},
		},
		"OnFailure alternative and OnFailure mirror both come after the original, mirror last": {
			alternatives: []v1alpha1.ImageAlternative{alt("a", onFailure)},
			mirrors:      []v1alpha1.ImageMirror{mirror("m", onFailure)},
			want: []string{
				"original quay.io/acme/foo:v1",
				"ImageAlternative/a registry.local/a/foo:v1",
				"ImageMirror/m m.local/quay.io/acme/foo:v1",
			},
		},
		"empty policy is OnFailure": {
			alternatives: []v1alpha1.ImageAlternative{alt("a", "")},
			mirrors:      []v1alpha1.ImageMirror{mirror("m", "")},
			want: []string{
				"original quay.io/acme/foo:v1",
				"ImageAlternative/a registry.local/a/foo:v1",
				"ImageMirror/m m.local/quay.io/acme/foo:v1",
			},
		},
		"every band at once": {
			alternatives: []v1alpha1.ImageAlternative{alt("a2", onFailure), alt("a1", always)},
			mirrors:      []v1alpha1.ImageMirror{mirror("m2", onFailure), mirror("m1", always)},
			want: []string{
				"ImageMirror/m1 m1.local/quay.io/acme/foo:v1",
				"ImageAlternative/a1 registry.local/a1/foo:v1",
				"original quay.io/acme/foo:v1",
				"ImageAlternative/a2 registry.local/a2/foo:v1",
				"ImageMirror/m2 m2.local/quay.io/acme/foo:v1",
			},
		},
		"resources are sorted by name inside a band, whatever the input order": {
			alternatives: []v1alpha1.ImageAlternative{alt("c", onFailure), alt("a", onFailure), alt("b", onFailure)},
			mirrors:      []v1alpha1.ImageMirror{mirror("n", always), mirror("m", always)},
			want: []string{
				"ImageMirror/m m.local/quay.io/acme/foo:v1",
				"ImageMirror/n n.local/quay.io/acme/foo:v1",
				"original quay.io/acme/foo:v1",
				"ImageAlternative/a registry.local/a/foo:v1",
				"ImageAlternative/b registry.local/b/foo:v1",
				"ImageAlternative/c registry.local/c/foo:v1",
			},
		},
		"entries keep their declared order": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").
				Repository("z.local/foo").Repository("quay.io/acme/foo").Repository("b.local/foo").Repository("a.local/foo").Build()},
			want: []string{
				"original quay.io/acme/foo:v1",
				"ImageAlternative/a z.local/foo:v1",
				"ImageAlternative/a b.local/foo:v1",
				"ImageAlternative/a a.local/foo:v1",
			},
		},
		"the entry equal to the original appears once, as the original, in its band's place": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").Policy(always).
				Repository("first.local/foo").Repository("quay.io/acme/foo").Repository("last.local/foo").Build()},
			want: []string{
				"ImageAlternative/a first.local/foo:v1",
				"ImageAlternative/a last.local/foo:v1",
				"original quay.io/acme/foo:v1",
			},
		},
		"an entry listed twice appears once": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").
				Repository("quay.io/acme/foo").Repository("other.local/foo").Repository("other.local/foo").Repository("quay.io/acme/foo").Build()},
			want: []string{
				"original quay.io/acme/foo:v1",
				"ImageAlternative/a other.local/foo:v1",
			},
		},
		"a reference offered by two resources keeps the first": {
			alternatives: []v1alpha1.ImageAlternative{
				testutil.NewImageAlternative("b").Policy(always).Repository("quay.io/acme/foo").Repository("shared.local/foo").Build(),
				testutil.NewImageAlternative("a").Policy(onFailure).Repository("quay.io/acme/foo").Repository("shared.local/foo").Build(),
			},
			want: []string{
				"ImageAlternative/b shared.local/foo:v1",
				"original quay.io/acme/foo:v1",
			},
		},
		"a reference with two credentials is kept twice": {
			alternatives: []v1alpha1.ImageAlternative{
				testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").Repository("shared.local/foo").SecretRef("one").Build(),
				testutil.NewImageAlternative("b").Repository("quay.io/acme/foo").Repository("shared.local/foo").SecretRef("two").Build(),
				testutil.NewImageAlternative("c").Repository("quay.io/acme/foo").Repository("shared.local/foo").SecretRef("one").Build(),
			},
			want: []string{
				"original quay.io/acme/foo:v1",
				"ImageAlternative/a shared.local/foo:v1",
				"ImageAlternative/b shared.local/foo:v1",
			},
		},
		"a mirror and an alternative landing on one reference keep the first": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").
				Repository("quay.io/acme/foo").Repository("m.local/quay.io/acme/foo").Build()},
			mirrors: []v1alpha1.ImageMirror{mirror("m", always)},
			want: []string{
				"ImageMirror/m m.local/quay.io/acme/foo:v1",
				"original quay.io/acme/foo:v1",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ix := mustIndex(t, tc.alternatives, tc.mirrors)
			got, err := ix.Candidates("quay.io/acme/foo:v1", nil, nil)
			if err != nil {
				t.Fatalf("Candidates: %v", err)
			}
			if diff := cmp.Diff(tc.want, summary(got)); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCandidatesManyResourcesOnOneImage(t *testing.T) {
	// Past 16 candidates the list is deduplicated through a map; it must keep the
	// same first-wins behaviour.
	var alts []v1alpha1.ImageAlternative
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		alts = append(alts, testutil.NewImageAlternative(name).
			Repository("quay.io/acme/foo").Repository("shared.local/foo").Repository(name+".local/foo").Build())
	}
	want := []string{"original quay.io/acme/foo:v1", "ImageAlternative/a shared.local/foo:v1"}
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		want = append(want, "ImageAlternative/"+name+" "+name+".local/foo:v1")
	}
	ix := mustIndex(t, alts, nil)
	got, err := ix.Candidates("quay.io/acme/foo:v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, summary(got)); diff != "" {
		t.Errorf("candidates (-want +got):\n%s", diff)
	}
}

func TestCandidateFields(t *testing.T) {
	secret := &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "registry-creds"}}
	secretNoInject := &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "registry-creds"}, InjectPullSecret: ptr(false)}
	provider := &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}}
	providerInject := &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}, InjectPullSecret: ptr(true)}
	mirrorAuth := &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "mirror-read"}}

	tests := map[string]struct {
		alternatives []v1alpha1.ImageAlternative
		mirrors      []v1alpha1.ImageMirror
		image        string
		want         []routing.Candidate
	}{
		"each entry brings its credential, its insecure flag and its path as written": {
			alternatives: []v1alpha1.ImageAlternative{{
				ObjectMeta: metaName("a"),
				Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{
					{Repository: "quay.io/acme/foo"},
					{Repository: "registry.local:5000/acme/foo", Insecure: true, Auth: secret},
					{Repository: "acme/foo", Auth: secretNoInject},
					{Repository: "ecr.local/acme/foo", Auth: provider},
					{Repository: "ecr2.local/acme/foo", Auth: providerInject},
				}},
			}},
			image: "quay.io/acme/foo:v1",
			want: []routing.Candidate{
				{Reference: "quay.io/acme/foo:v1", Entry: 0, AuthPath: "quay.io/acme/foo", LookupPath: "quay.io/acme/foo"},
				{Reference: "registry.local:5000/acme/foo:v1", Source: src(routing.KindImageAlternative, "a"), Policy: v1alpha1.RewritePolicyOnFailure,
					Entry: 1, AuthPath: "registry.local:5000/acme/foo", LookupPath: "registry.local:5000/acme/foo", Insecure: true, Auth: secret, Inject: true},
				{Reference: "docker.io/acme/foo:v1", Source: src(routing.KindImageAlternative, "a"), Policy: v1alpha1.RewritePolicyOnFailure,
					Entry: 2, AuthPath: "acme/foo", LookupPath: "acme/foo", Auth: secretNoInject},
				{Reference: "ecr.local/acme/foo:v1", Source: src(routing.KindImageAlternative, "a"), Policy: v1alpha1.RewritePolicyOnFailure,
					Entry: 3, AuthPath: "ecr.local/acme/foo", LookupPath: "ecr.local/acme/foo", Auth: provider},
				{Reference: "ecr2.local/acme/foo:v1", Source: src(routing.KindImageAlternative, "a"), Policy: v1alpha1.RewritePolicyOnFailure,
					Entry: 4, AuthPath: "ecr2.local/acme/foo", LookupPath: "ecr2.local/acme/foo", Auth: providerInject, Inject: true},
			},
		},
		"the original carries the credential of the entry it equals, but is never injected": {
			alternatives: []v1alpha1.ImageAlternative{{
				ObjectMeta: metaName("a"),
				Spec: v1alpha1.ImageAlternativeSpec{RewritePolicy: v1alpha1.RewritePolicyAlways, Alternatives: []v1alpha1.Alternative{
					{RepositoryGroup: "other.local/acme"},
					{RepositoryGroup: "registry.local:5000/acme/", Insecure: true, Auth: secret},
				}},
			}},
			image: "registry.local:5000/acme/foo:v1",
			want: []routing.Candidate{
				{Reference: "other.local/acme/foo:v1", Source: src(routing.KindImageAlternative, "a"), Policy: v1alpha1.RewritePolicyAlways,
					Entry: 0, AuthPath: "other.local/acme", LookupPath: "other.local/acme/"},
				{Reference: "registry.local:5000/acme/foo:v1", Entry: 1, AuthPath: "registry.local:5000/acme/", LookupPath: "registry.local:5000/acme/", Insecure: true, Auth: secret},
			},
		},
		"a mirror brings its credential and its path without the trailing slash": {
			mirrors: []v1alpha1.ImageMirror{{
				ObjectMeta: metaName("m"),
				Spec: v1alpha1.ImageMirrorSpec{Destination: v1alpha1.MirrorDestination{
					Path: "registry.tld/mirror/", Insecure: true, Pull: &v1alpha1.MirrorPull{Auth: mirrorAuth},
				}},
			}},
			image: "nginx",
			want: []routing.Candidate{
				{Reference: "docker.io/library/nginx:latest", Entry: -1},
				{Reference: "registry.tld/mirror/docker.io/library/nginx:latest", Source: src(routing.KindImageMirror, "m"),
					Policy: v1alpha1.RewritePolicyOnFailure, Entry: 0, AuthPath: "registry.tld/mirror", LookupPath: "registry.tld/mirror/", Insecure: true, Auth: mirrorAuth, Inject: true},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ix := mustIndex(t, tc.alternatives, tc.mirrors)
			got, err := ix.Candidates(tc.image, nil, nil)
			if err != nil {
				t.Fatalf("Candidates: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIndexDoesNotAliasItsInput(t *testing.T) {
	alts := []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").
		Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").SecretRef("before").Build()}
	ix := mustIndex(t, alts, nil)
	alts[0].Spec.Alternatives[1].Auth.SecretRef.Name = "after"
	got, err := ix.Candidates("quay.io/acme/foo", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if name := got[1].Auth.SecretRef.Name; name != "before" {
		t.Errorf("candidate secretRef = %q after the input changed, want %q", name, "before")
	}
}
