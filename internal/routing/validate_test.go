package routing_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// errorStrings shows each error as "<field path>: <what is wrong>".
func errorStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func TestValidateImageAlternative(t *testing.T) {
	valid := func() *testutil.ImageAlternativeBuilder {
		return testutil.NewImageAlternative("a").Repository("quay.io/acme/foo")
	}
	withSpec := func(mutate func(*v1alpha1.ImageAlternativeSpec)) v1alpha1.ImageAlternative {
		obj := valid().Build()
		mutate(&obj.Spec)
		return obj
	}
	var many []v1alpha1.Alternative
	for range 33 {
		many = append(many, v1alpha1.Alternative{Repository: "quay.io/acme/foo"})
	}

	tests := map[string]struct {
		obj  v1alpha1.ImageAlternative
		want []string
	}{
		"repositories of every shape are accepted": {
			obj: testutil.NewImageAlternative("a").Policy(v1alpha1.RewritePolicyAlways).
				Repository("nginx").Repository("acme/foo").Repository("quay.io/acme/foo").
				Repository("registry.local:5000/a/b/c").SecretRef("creds").Inject(false).
				Repository("localhost/foo").Provider("ecr").Build(),
		},
		"groups of every shape are accepted": {
			obj: testutil.NewImageAlternative("a").
				Group("quay.io/acme/").Group("registry.local:5000/acme").Group("library/").Group("quay.io/").Build(),
		},
		"selectors are accepted": {
			obj: valid().PodSelector(map[string]string{"app": "web"}).NamespaceSelector(map[string]string{"env": "prod"}).Build(),
		},
		"a repository with a tag": {
			obj:  testutil.NewImageAlternative("a").Repository("quay.io/acme/foo:v1").Build(),
			want: []string{`spec.alternatives[0].repository: Invalid value: "quay.io/acme/foo:v1": must not contain a tag (tags and digests are carried over from the pod's image)`},
		},
		"a repository with a digest": {
			obj:  testutil.NewImageAlternative("a").Repository("quay.io/acme/foo@" + digest).Build(),
			want: []string{`spec.alternatives[0].repository: Invalid value: "quay.io/acme/foo@` + digest + `": must not contain a digest (tags and digests are carried over from the pod's image)`},
		},
		"a repository ending with a colon": {
			obj:  testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").Repository("quay.io/acme/bar:").Build(),
			want: []string{`spec.alternatives[1].repository: Invalid value: "quay.io/acme/bar:": must not end with ':'`},
		},
		"a repository that does not parse": {
			obj:  testutil.NewImageAlternative("a").Repository("quay.io/acme//foo").Build(),
			want: []string{`spec.alternatives[0].repository: Invalid value: "quay.io/acme//foo": not a valid image repository reference: invalid reference format`},
		},
		"a repository in upper case": {
			obj:  testutil.NewImageAlternative("a").Repository("quay.io/Acme/foo").Build(),
			want: []string{`spec.alternatives[0].repository: Invalid value: "quay.io/Acme/foo": not a valid image repository reference: invalid reference format: repository name (Acme/foo) must be lowercase`},
		},
		"a repository on an IPv6 host, which the CRD's pattern refuses": {
			obj:  testutil.NewImageAlternative("a").Repository("[::1]:5000/acme/foo").Build(),
			want: []string{`spec.alternatives[0].repository: Invalid value: "[::1]:5000/acme/foo": not a valid image repository reference`},
		},
		"a repository too long": {
			obj:  testutil.NewImageAlternative("a").Repository("quay.io/" + strings.Repeat("a", 250)).Build(),
			want: []string{`spec.alternatives[0].repository: Too long: may not be more than 255 bytes`},
		},
		"a group with a tag": {
			obj:  testutil.NewImageAlternative("a").Group("quay.io/acme:v1").Build(),
			want: []string{`spec.alternatives[0].repositoryGroup: Invalid value: "quay.io/acme:v1": must not contain a tag (tags and digests are carried over from the pod's image)`},
		},
		"a group with a digest": {
			obj:  testutil.NewImageAlternative("a").Group("quay.io/acme@" + digest).Build(),
			want: []string{`spec.alternatives[0].repositoryGroup: Invalid value: "quay.io/acme@` + digest + `": must not contain a digest (tags and digests are carried over from the pod's image)`},
		},
		"a group ending with a colon": {
			obj:  testutil.NewImageAlternative("a").Group("quay.io/acme:").Build(),
			want: []string{`spec.alternatives[0].repositoryGroup: Invalid value: "quay.io/acme:": must not end with ':'`},
		},
		"a group that does not parse": {
			obj:  testutil.NewImageAlternative("a").Group("quay.io/acme//").Build(),
			want: []string{`spec.alternatives[0].repositoryGroup: Invalid value: "quay.io/acme//": not a valid repository path: invalid reference format`},
		},
		"a group that is only a slash": {
			obj:  testutil.NewImageAlternative("a").Group("/").Build(),
			want: []string{`spec.alternatives[0].repositoryGroup: Invalid value: "/": not a valid repository path: empty`},
		},
		"mixed forms in one list": {
			obj:  testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").Group("registry.local/acme/").Repository("x.local/foo").Build(),
			want: []string{`spec.alternatives[1].repositoryGroup: Invalid value: "registry.local/acme/": every entry must use the same form: spec.alternatives[0] uses repository`},
		},
		"both repository and repositoryGroup in one entry": {
			obj:  testutil.NewImageAlternative("a").Entry(v1alpha1.Alternative{Repository: "quay.io/acme/foo", RepositoryGroup: "quay.io/acme/"}).Build(),
			want: []string{`spec.alternatives[0]: Forbidden: exactly one of repository or repositoryGroup must be set, not both`},
		},
		"neither repository nor repositoryGroup in an entry": {
			obj:  testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").Entry(v1alpha1.Alternative{Insecure: true}).Build(),
			want: []string{`spec.alternatives[1]: Required value: exactly one of repository or repositoryGroup must be set`},
		},
		"no entry": {
			obj:  testutil.NewImageAlternative("a").Build(),
			want: []string{`spec.alternatives: Required value: at least one entry is required`},
		},
		"more than 32 entries": {
			obj:  withSpec(func(s *v1alpha1.ImageAlternativeSpec) { s.Alternatives = many }),
			want: []string{`spec.alternatives: Too many: 33: must have at most 32 items`},
		},
		"rewritePolicy None": {
			obj:  valid().Policy(v1alpha1.RewritePolicyNone).Build(),
			want: []string{`spec.rewritePolicy: Invalid value: "None": None is only valid for ImageMirror`},
		},
		"an unknown rewritePolicy": {
			obj:  valid().Policy("Sometimes").Build(),
			want: []string{`spec.rewritePolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure"`},
		},
		"an auth with both secretRef and provider": {
			obj: withSpec(func(s *v1alpha1.ImageAlternativeSpec) {
				s.Alternatives[0].Auth = &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "s"}, Provider: &v1alpha1.ProviderAuth{Name: "p"}}
			}),
			want: []string{`spec.alternatives[0].auth: Forbidden: exactly one of secretRef or provider must be set, not both`},
		},
		"an auth with neither secretRef nor provider": {
			obj: withSpec(func(s *v1alpha1.ImageAlternativeSpec) {
				s.Alternatives[0].Auth = &v1alpha1.Auth{InjectPullSecret: ptr(true)}
			}),
			want: []string{`spec.alternatives[0].auth: Required value: exactly one of secretRef or provider must be set`},
		},
		"a secretRef without name": {
			obj:  valid().SecretRef("").Build(),
			want: []string{`spec.alternatives[0].auth.secretRef.name: Required value: must not be empty`},
		},
		"a secretRef name no Secret can have": {
			obj:  valid().SecretRef("Not_A_Name").Build(),
			want: []string{`spec.alternatives[0].auth.secretRef.name: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
		"a service account in a namespace that cannot exist": {
			obj: withSpec(func(s *v1alpha1.ImageAlternativeSpec) {
				s.Alternatives[0].Auth = &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr", ServiceAccountRef: &v1alpha1.ServiceAccountReference{Namespace: "team.a", Name: "puller"}}}
			}),
			want: []string{`spec.alternatives[0].auth.provider.serviceAccountRef.namespace: Invalid value: "team.a": must not contain dots`},
		},
		"a provider without name and a service account without namespace": {
			obj: withSpec(func(s *v1alpha1.ImageAlternativeSpec) {
				s.Alternatives[0].Auth = &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{ServiceAccountRef: &v1alpha1.ServiceAccountReference{Name: "sa"}}}
			}),
			want: []string{
				`spec.alternatives[0].auth.provider.name: Required value: must not be empty`,
				`spec.alternatives[0].auth.provider.serviceAccountRef.namespace: Required value: must not be empty`,
			},
		},
		"an invalid pod selector": {
			obj: withSpec(func(s *v1alpha1.ImageAlternativeSpec) {
				s.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
			}),
			want: []string{`spec.podSelector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator`},
		},
		"an invalid namespace selector": {
			obj: withSpec(func(s *v1alpha1.ImageAlternativeSpec) {
				s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}
			}),
			want: []string{`spec.namespaceSelector.matchLabels: Invalid value: "bad key!": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := errorStrings(routing.ValidateImageAlternative(&tc.obj))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateImageMirror(t *testing.T) {
	valid := func() *testutil.ImageMirrorBuilder { return testutil.NewImageMirror("m", "registry.tld/mirror/") }
	var tooMany []string
	for i := range 65 {
		tooMany = append(tooMany, "quay.io/"+strings.Repeat("a", i+1))
	}

	tests := map[string]struct {
		obj  v1alpha1.ImageMirror
		want []string
	}{
		"a mirror with every field set is accepted": {
			obj: valid().Policy(v1alpha1.RewritePolicyAlways).Insecure().SecretRef("mirror-read").
				Exclude("ghcr.io/huge/**", "nginx", "**:latest", "quay.io/acme/foo@sha256:*", "registry.local:5000/*").
				PodSelector(map[string]string{"app": "web"}).Build(),
		},
		"rewritePolicy None is accepted": {
			obj: valid().Policy(v1alpha1.RewritePolicyNone).Build(),
		},
		"a destination on a bare host is accepted": {
			obj: testutil.NewImageMirror("m", "registry.tld").Build(),
		},
		"a nested destination is accepted": {
			obj: testutil.NewImageMirror("m", "localhost/a/b-c/d_e/").Build(),
		},
		"a destination on a bare host with a port is accepted": {
			obj: testutil.NewImageMirror("m", "registry.tld:5000/").Build(),
		},
		"a bare host with a port and no trailing slash is refused for the missing slash, as in the CRD": {
			obj:  testutil.NewImageMirror("m", "registry.tld:5000").Build(),
			want: []string{`spec.destination.path: Invalid value: "registry.tld:5000": a registry host with a port must end with '/' to name its root, e.g. registry.tld:5000/`},
		},
		"a bare host with a port and a path is accepted": {
			obj: testutil.NewImageMirror("m", "localhost:5000/mirror").Build(),
		},
		"a tag after a host with a port is still a tag": {
			obj:  testutil.NewImageMirror("m", "registry.tld:5000/mirror:v1").Build(),
			want: []string{`spec.destination.path: Invalid value: "registry.tld:5000/mirror:v1": must not contain a tag (tags and digests are carried over from the pod's image)`},
		},
		"an unknown rewritePolicy": {
			obj:  valid().Policy("Never").Build(),
			want: []string{`spec.rewritePolicy: Unsupported value: "Never": supported values: "Always", "OnFailure", "None"`},
		},
		"a glob that does not parse": {
			obj: valid().Exclude("ghcr.io/[abc").Build(),
			want: []string{
				`spec.excludeImages[0]: Invalid value: "ghcr.io/[abc": not a valid glob`,
				`spec.excludeImages[0]: Invalid value: "ghcr.io/[abc": a glob may only hold letters, digits, '.', '_', '-', '/', ':', '@', '*' and '?'`,
			},
		},
		"a glob with characters the CRD refuses": {
			obj:  valid().Exclude("ghcr.io/{a,b}/**").Build(),
			want: []string{`spec.excludeImages[0]: Invalid value: "ghcr.io/{a,b}/**": a glob may only hold letters, digits, '.', '_', '-', '/', ':', '@', '*' and '?'`},
		},
		"a glob with three stars": {
			obj:  valid().Exclude("ghcr.io/***").Build(),
			want: []string{`spec.excludeImages[0]: Invalid value: "ghcr.io/***": '***' is not a valid glob`},
		},
		"an empty glob": {
			obj:  valid().Exclude("").Build(),
			want: []string{`spec.excludeImages[0]: Required value: a glob must not be empty`},
		},
		"a glob listed twice": {
			obj:  valid().Exclude("ghcr.io/**", "quay.io/**", "ghcr.io/**").Build(),
			want: []string{`spec.excludeImages[2]: Duplicate value: "ghcr.io/**"`},
		},
		"a glob too long": {
			obj:  valid().Exclude(strings.Repeat("a", 513)).Build(),
			want: []string{`spec.excludeImages[0]: Too long: may not be more than 512 bytes`},
		},
		"more than 64 globs": {
			obj:  valid().Exclude(tooMany...).Build(),
			want: []string{`spec.excludeImages: Too many: 65: must have at most 64 items`},
		},
		"no destination path": {
			obj:  testutil.NewImageMirror("m", "").Build(),
			want: []string{`spec.destination.path: Required value: the mirror's registry path is required`},
		},
		"a destination path with a tag": {
			obj:  testutil.NewImageMirror("m", "registry.tld/mirror:v1").Build(),
			want: []string{`spec.destination.path: Invalid value: "registry.tld/mirror:v1": must not contain a tag (tags and digests are carried over from the pod's image)`},
		},
		"a destination path with a digest": {
			obj:  testutil.NewImageMirror("m", "registry.tld/mirror@"+digest).Build(),
			want: []string{`spec.destination.path: Invalid value: "registry.tld/mirror@` + digest + `": must not contain a digest (tags and digests are carried over from the pod's image)`},
		},
		"a destination path ending with a colon": {
			obj:  testutil.NewImageMirror("m", "registry.tld:").Build(),
			want: []string{`spec.destination.path: Invalid value: "registry.tld:": must not end with ':'`},
		},
		"a destination path that does not parse": {
			obj:  testutil.NewImageMirror("m", "registry.tld/Mirror/").Build(),
			want: []string{`spec.destination.path: Invalid value: "registry.tld/Mirror/": not a valid registry path: invalid reference format: repository name (Mirror) must be lowercase`},
		},
		"a destination path too long": {
			obj:  testutil.NewImageMirror("m", "registry.tld/"+strings.Repeat("a", 250)).Build(),
			want: []string{`spec.destination.path: Too long: may not be more than 255 bytes`},
		},
		"a pull auth with both secretRef and provider": {
			obj: func() v1alpha1.ImageMirror {
				obj := valid().SecretRef("s").Build()
				obj.Spec.Destination.Pull.Auth.Provider = &v1alpha1.ProviderAuth{Name: "p"}
				return obj
			}(),
			want: []string{`spec.destination.pull.auth: Forbidden: exactly one of secretRef or provider must be set, not both`},
		},
		"an invalid pod selector": {
			obj: func() v1alpha1.ImageMirror {
				obj := valid().Build()
				obj.Spec.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}}
				return obj
			}(),
			want: []string{`spec.podSelector.matchExpressions[0].values: Required value: must be specified when ` + "`operator`" + ` is 'In' or 'NotIn'`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := errorStrings(routing.ValidateImageMirror(&tc.obj))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewIndexLeavesInvalidResourcesOut(t *testing.T) {
	alts := []v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("bad").Repository("quay.io/acme/foo:v1").Repository("bad.local/foo").Build(),
		testutil.NewImageAlternative("good").Repository("quay.io/acme/foo").Repository("good.local/foo").Build(),
	}
	mirrors := []v1alpha1.ImageMirror{
		testutil.NewImageMirror("bad-mirror", "registry.tld/mirror@"+digest).Build(),
		testutil.NewImageMirror("none", "none.tld/").Policy(v1alpha1.RewritePolicyNone).Build(),
	}
	ix, errs := routing.NewIndex(alts, mirrors)

	var gotErrs []string
	for _, err := range errs {
		gotErrs = append(gotErrs, err.Error())
	}
	wantErrs := []string{
		`ImageAlternative "bad": spec.alternatives[0].repository: Invalid value: "quay.io/acme/foo:v1": must not contain a tag (tags and digests are carried over from the pod's image)`,
		`ImageMirror "bad-mirror": spec.destination.path: Invalid value: "registry.tld/mirror@` + digest + `": must not contain a digest (tags and digests are carried over from the pod's image)`,
	}
	if diff := cmp.Diff(wantErrs, gotErrs); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	if got := ix.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1 (the valid alternative; a None mirror cannot route)", got)
	}
	got, err := ix.Candidates("quay.io/acme/foo:v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"original quay.io/acme/foo:v1", "ImageAlternative/good good.local/foo:v1"}
	if diff := cmp.Diff(want, summary(got)); diff != "" {
		t.Errorf("candidates (-want +got):\n%s", diff)
	}
}
