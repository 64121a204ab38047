package routing_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// validationCase is a routing resource, and the field both the CRD (on the API server) and
// routing.Validate* refuse it for ("" for a valid one).
type validationCase struct {
	obj   client.Object
	field string
	// goOnly, when not empty, is why only the Go validation refuses it (the API server admits
	// it): a rule the CRD does not express. The webhook's validating handler, and the index,
	// refuse it still.
	goOnly string
}

// The rules written twice, in the CRD (OpenAPI schema and CEL, from the markers of
// pkg/apis/kuik/v1alpha1) and in Go (routing.ValidateImageAlternative, ValidateImageMirror:
// the webhook's validating handler, `webhook candidates` and the index): one table drives both.
// The API server (CRDs installed, no webhook) and the Go validation must agree on each resource,
// and both must name the case's field (or fields below it). Both copies are needed: the CRD
// refuses while the webhook is down, Go refuses what an older CRD let in before the index reads
// it, and words the rules the CRD cannot express.
func TestValidationCasesAgreeWithTheCRD(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane")
	}
	cp, err := testenv.Start(t.Context(), testenv.Options{CRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	ia := func(mutate func(*v1alpha1.ImageAlternativeSpec), alts ...v1alpha1.Alternative) *v1alpha1.ImageAlternative {
		o := &v1alpha1.ImageAlternative{ObjectMeta: metav1.ObjectMeta{GenerateName: "ia-"}, Spec: v1alpha1.ImageAlternativeSpec{Alternatives: alts}}
		if mutate != nil {
			mutate(&o.Spec)
		}
		return o
	}
	im := func(mutate func(*v1alpha1.ImageMirrorSpec), path string, excludes ...string) *v1alpha1.ImageMirror {
		o := &v1alpha1.ImageMirror{ObjectMeta: metav1.ObjectMeta{GenerateName: "im-"},
			Spec: v1alpha1.ImageMirrorSpec{ExcludeImages: excludes, Destination: v1alpha1.MirrorDestination{Path: path}}}
		if mutate != nil {
			mutate(&o.Spec)
		}
		return o
	}
	repo := func(r string) v1alpha1.Alternative { return v1alpha1.Alternative{Repository: r} }
	group := func(g string) v1alpha1.Alternative { return v1alpha1.Alternative{RepositoryGroup: g} }
	authed := func(a v1alpha1.Auth) v1alpha1.Alternative {
		return v1alpha1.Alternative{Repository: "quay.io/acme/foo", Auth: &a}
	}
	secret := func(name string) *v1alpha1.LocalSecretReference { return &v1alpha1.LocalSecretReference{Name: name} }
	provider := func(name, saNamespace, saName string) *v1alpha1.ProviderAuth {
		p := &v1alpha1.ProviderAuth{Name: name}
		if saNamespace != "" || saName != "" {
			p.ServiceAccountRef = &v1alpha1.ServiceAccountReference{Namespace: saNamespace, Name: saName}
		}
		return p
	}
	policy := func(p v1alpha1.RewritePolicy) func(*v1alpha1.ImageAlternativeSpec) {
		return func(s *v1alpha1.ImageAlternativeSpec) { s.RewritePolicy = p }
	}
	selector := func(sel *metav1.LabelSelector) func(*v1alpha1.ImageAlternativeSpec) {
		return func(s *v1alpha1.ImageAlternativeSpec) { s.PodSelector = sel }
	}
	pullAuth := func(a v1alpha1.Auth) func(*v1alpha1.ImageMirrorSpec) {
		return func(s *v1alpha1.ImageMirrorSpec) { s.Destination.Pull = &v1alpha1.MirrorPull{Auth: &a} }
	}
	keep := func(k v1alpha1.MirrorKeep) func(*v1alpha1.ImageMirrorSpec) {
		return func(s *v1alpha1.ImageMirrorSpec) { s.Keep = &k }
	}
	push := func(name string) *v1alpha1.KeepPush {
		return &v1alpha1.KeepPush{Auth: &v1alpha1.KeepPushAuth{SecretRef: v1alpha1.LocalSecretReference{Name: name}}}
	}
	retention := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	no := false
	many := func(n int, entry v1alpha1.Alternative) []v1alpha1.Alternative {
		out := make([]v1alpha1.Alternative, n)
		for i := range out {
			out[i] = entry
		}
		return out
	}
	globs := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "ghcr.io/acme/" + strings.Repeat("a", i+1)
		}
		return out
	}
	const (
		alt0   = "spec.alternatives[0]"
		path   = "spec.destination.path"
		notDNS = "the CRD checks a name's length only; Go checks it is a name the API server gives an object (a reference that can never resolve)"
	)
	long := "quay.io/" + strings.Repeat("a", 248) // 256 bytes

	cases := map[string]validationCase{
		// ImageAlternative.
		"a repository":                           {obj: ia(nil, repo("quay.io/acme/foo"))},
		"a Docker Hub short name":                {obj: ia(nil, repo("nginx"))},
		"a repository with a port":               {obj: ia(nil, repo("registry.local:5000/acme/foo"))},
		"groups with and without a slash":        {obj: ia(nil, group("quay.io/acme/"), group("registry.local:5000/acme"))},
		"no entry":                               {obj: ia(nil), field: "spec.alternatives"},
		"33 entries":                             {obj: ia(nil, many(33, repo("quay.io/acme/foo"))...), field: "spec.alternatives"},
		"32 entries":                             {obj: ia(nil, many(32, repo("quay.io/acme/foo"))...)},
		"a repository with a tag":                {obj: ia(nil, repo("quay.io/acme/foo:v1")), field: alt0 + ".repository"},
		"a repository with a digest":             {obj: ia(nil, repo("quay.io/acme/foo@"+digest)), field: alt0 + ".repository"},
		"a repository ending in ':'":             {obj: ia(nil, repo("quay.io/acme/foo:")), field: alt0 + ".repository"},
		"a repository in upper case":             {obj: ia(nil, repo("quay.io/Acme/foo")), field: alt0 + ".repository"},
		"a repository of 256 bytes":              {obj: ia(nil, repo(long)), field: alt0 + ".repository"},
		"a repository with a leading '-' host":   {obj: ia(nil, repo("-quay.io/acme/foo")), field: alt0 + ".repository"},
		"a group with a tag":                     {obj: ia(nil, group("quay.io/acme:v1")), field: alt0 + ".repositoryGroup"},
		"a group with a digest":                  {obj: ia(nil, group("quay.io/acme@"+digest)), field: alt0 + ".repositoryGroup"},
		"a group ending in ':'":                  {obj: ia(nil, group("quay.io/acme:")), field: alt0 + ".repositoryGroup"},
		"a group of 256 bytes":                   {obj: ia(nil, group(long)), field: alt0 + ".repositoryGroup"},
		"both repository and repositoryGroup":    {obj: ia(nil, v1alpha1.Alternative{Repository: "quay.io/acme/foo", RepositoryGroup: "quay.io/acme/"}), field: alt0},
		"neither repository nor repositoryGroup": {obj: ia(nil, v1alpha1.Alternative{Insecure: true}), field: alt0},
		"mixed forms":                            {obj: ia(nil, repo("quay.io/acme/foo"), group("registry.local/acme/")), field: "spec.alternatives"},
		"rewritePolicy Always":                   {obj: ia(policy(v1alpha1.RewritePolicyAlways), repo("quay.io/acme/foo"))},
		"rewritePolicy None":                     {obj: ia(policy(v1alpha1.RewritePolicyNone), repo("quay.io/acme/foo")), field: "spec.rewritePolicy"},
		"rewritePolicy Sometimes":                {obj: ia(policy("Sometimes"), repo("quay.io/acme/foo")), field: "spec.rewritePolicy"},
		"a secretRef":                            {obj: ia(nil, authed(v1alpha1.Auth{SecretRef: secret("pull")}))},
		"a provider with a ServiceAccount":       {obj: ia(nil, authed(v1alpha1.Auth{Provider: provider("ecr", "team-a", "puller")}))},
		"both secretRef and provider":            {obj: ia(nil, authed(v1alpha1.Auth{SecretRef: secret("pull"), Provider: provider("ecr", "", "")})), field: alt0 + ".auth"},
		"neither secretRef nor provider":         {obj: ia(nil, authed(v1alpha1.Auth{})), field: alt0 + ".auth"},
		"an empty secretRef name":                {obj: ia(nil, authed(v1alpha1.Auth{SecretRef: secret("")})), field: alt0 + ".auth.secretRef.name"},
		"a secretRef name of 254 bytes":          {obj: ia(nil, authed(v1alpha1.Auth{SecretRef: secret(strings.Repeat("a", 254))})), field: alt0 + ".auth.secretRef.name"},
		"a secretRef name that is no DNS name":   {obj: ia(nil, authed(v1alpha1.Auth{SecretRef: secret("Pull_Secret")})), field: alt0 + ".auth.secretRef.name", goOnly: notDNS},
		"an empty provider name":                 {obj: ia(nil, authed(v1alpha1.Auth{Provider: provider("", "", "")})), field: alt0 + ".auth.provider.name"},
		"a ServiceAccount namespace of 64 bytes": {obj: ia(nil, authed(v1alpha1.Auth{Provider: provider("ecr", strings.Repeat("a", 64), "puller")})),
			field: alt0 + ".auth.provider.serviceAccountRef.namespace"},
		"an empty ServiceAccount name": {obj: ia(nil, authed(v1alpha1.Auth{Provider: provider("ecr", "team-a", "")})),
			field: alt0 + ".auth.provider.serviceAccountRef.name"},
		"a ServiceAccount namespace that is no DNS label": {obj: ia(nil, authed(v1alpha1.Auth{Provider: provider("ecr", "team.a", "puller")})),
			field: alt0 + ".auth.provider.serviceAccountRef.namespace", goOnly: notDNS},
		"a pod selector": {obj: ia(selector(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}), repo("quay.io/acme/foo"))},
		"a pod selector with an unknown operator": {obj: ia(selector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}), repo("quay.io/acme/foo")),
			field: "spec.podSelector", goOnly: "the CRD holds the LabelSelector schema without its validation (metav1validation.ValidateLabelSelector)"},
		"a pod selector with an invalid label": {obj: ia(selector(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "not a value"}}), repo("quay.io/acme/foo")),
			field: "spec.podSelector", goOnly: "the CRD holds the LabelSelector schema without its validation (metav1validation.ValidateLabelSelector)"},

		// ImageMirror.
		"a mirror":                              {obj: im(nil, "registry.tld/mirror/")},
		"a mirror on a host with a port":        {obj: im(nil, "registry.tld:5000/")},
		"a mirror with rewritePolicy None":      {obj: im(func(s *v1alpha1.ImageMirrorSpec) { s.RewritePolicy = v1alpha1.RewritePolicyNone }, "registry.tld/mirror/")},
		"a mirror with rewritePolicy Sometimes": {obj: im(func(s *v1alpha1.ImageMirrorSpec) { s.RewritePolicy = "Sometimes" }, "registry.tld/mirror/"), field: "spec.rewritePolicy"},
		"a mirror with globs":                   {obj: im(nil, "registry.tld/mirror/", "ghcr.io/huge/**", "docker.io/library/*:latest", "quay.io/acme/x@sha256:*")},
		"no destination path":                   {obj: im(nil, ""), field: path},
		"a destination with a tag":              {obj: im(nil, "registry.tld/mirror:v1"), field: path},
		"a destination with a digest":           {obj: im(nil, "registry.tld/mirror@"+digest), field: path},
		"a destination ending in ':'":           {obj: im(nil, "registry.tld/mirror:"), field: path},
		"a destination host and port only":      {obj: im(nil, "registry.tld:5000"), field: path},
		"a destination in upper case":           {obj: im(nil, "registry.tld/Mirror/"), field: path},
		"a destination of 256 bytes":            {obj: im(nil, long), field: path},
		"64 globs":                              {obj: im(nil, "registry.tld/mirror/", globs(64)...)},
		"65 globs":                              {obj: im(nil, "registry.tld/mirror/", globs(65)...), field: "spec.excludeImages"},
		"an empty glob":                         {obj: im(nil, "registry.tld/mirror/", ""), field: "spec.excludeImages"},
		"a glob of 513 bytes":                   {obj: im(nil, "registry.tld/mirror/", "ghcr.io/"+strings.Repeat("a", 505)), field: "spec.excludeImages"},
		"a glob with a bracket":                 {obj: im(nil, "registry.tld/mirror/", "ghcr.io/[huge/**"), field: "spec.excludeImages"},
		"a glob with a space":                   {obj: im(nil, "registry.tld/mirror/", "ghcr.io/huge /**"), field: "spec.excludeImages"},
		"a glob with three stars":               {obj: im(nil, "registry.tld/mirror/", "ghcr.io/***"), field: "spec.excludeImages"},
		"a glob twice":                          {obj: im(nil, "registry.tld/mirror/", "ghcr.io/huge/**", "ghcr.io/huge/**"), field: "spec.excludeImages[1]"},
		"a pull secretRef":                      {obj: im(pullAuth(v1alpha1.Auth{SecretRef: secret("pull")}), "registry.tld/mirror/")},
		"a pull auth without a credential":      {obj: im(pullAuth(v1alpha1.Auth{}), "registry.tld/mirror/"), field: "spec.destination.pull.auth"},
		"a pull secretRef that is no DNS name": {obj: im(pullAuth(v1alpha1.Auth{SecretRef: secret("Pull_Secret")}), "registry.tld/mirror/"),
			field: "spec.destination.pull.auth.secretRef.name", goOnly: notDNS},

		// ImageMirror spec.keep.
		"a mirror keeping with the defaults": {obj: im(keep(v1alpha1.MirrorKeep{}), "registry.tld/mirror/")},
		"a mirror keeping with every field": {obj: im(keep(v1alpha1.MirrorKeep{
			Push: push("push"), Retention: retention(720 * time.Hour),
			CountTemplates: &no, PrivateSources: v1alpha1.PrivateSourcesAllow, Referrers: &no,
		}), "registry.tld/mirror/")},
		// The host with a port that a mirror cannot name is the image's, not the destination's:
		// the keeper reports such an image in status (Unnameable).
		"a mirror keeping on a host with a port": {obj: im(keep(v1alpha1.MirrorKeep{Push: push("push")}), "registry.tld:5000/")},
		"a mirror keeping with rewritePolicy None": {obj: im(func(s *v1alpha1.ImageMirrorSpec) {
			s.RewritePolicy, s.Keep = v1alpha1.RewritePolicyNone, &v1alpha1.MirrorKeep{}
		}, "registry.tld/mirror/")},
		"a keep retention of 1h":     {obj: im(keep(v1alpha1.MirrorKeep{Retention: retention(time.Hour)}), "registry.tld/mirror/")},
		"a keep retention of 8760h":  {obj: im(keep(v1alpha1.MirrorKeep{Retention: retention(8760 * time.Hour)}), "registry.tld/mirror/")},
		"a keep retention of 59m59s": {obj: im(keep(v1alpha1.MirrorKeep{Retention: retention(time.Hour - time.Second)}), "registry.tld/mirror/"), field: "spec.keep.retention"},
		"a keep retention of 0s":     {obj: im(keep(v1alpha1.MirrorKeep{Retention: retention(0)}), "registry.tld/mirror/"), field: "spec.keep.retention"},
		"a keep retention of 8761h":  {obj: im(keep(v1alpha1.MirrorKeep{Retention: retention(8761 * time.Hour)}), "registry.tld/mirror/"), field: "spec.keep.retention"},
		"a negative keep retention":  {obj: im(keep(v1alpha1.MirrorKeep{Retention: retention(-time.Hour)}), "registry.tld/mirror/"), field: "spec.keep.retention"},
		"keep privateSources Sometimes": {obj: im(keep(v1alpha1.MirrorKeep{PrivateSources: "Sometimes"}), "registry.tld/mirror/"),
			field: "spec.keep.privateSources"},
		"a push without auth (anonymous)": {obj: im(keep(v1alpha1.MirrorKeep{Push: &v1alpha1.KeepPush{}}), "registry.tld/mirror/")},
		"an empty push secretRef name": {obj: im(keep(v1alpha1.MirrorKeep{Push: push("")}), "registry.tld/mirror/"),
			field: "spec.keep.push.auth.secretRef.name"},
		"a push secretRef name of 254 bytes": {obj: im(keep(v1alpha1.MirrorKeep{Push: push(strings.Repeat("a", 254))}), "registry.tld/mirror/"),
			field: "spec.keep.push.auth.secretRef.name"},
		"a push secretRef that is no DNS name": {obj: im(keep(v1alpha1.MirrorKeep{Push: push("Push_Secret")}), "registry.tld/mirror/"),
			field: "spec.keep.push.auth.secretRef.name", goOnly: notDNS},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var goErrs field.ErrorList
			switch o := tc.obj.(type) {
			case *v1alpha1.ImageAlternative:
				goErrs = routing.ValidateImageAlternative(o)
			case *v1alpha1.ImageMirror:
				goErrs = routing.ValidateImageMirror(o)
			}
			var goFields []string
			for _, e := range goErrs {
				goFields = append(goFields, e.Field)
			}
			crdFields, err := crdRefusal(t, c, tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			crdWant := tc.field
			if tc.goOnly != "" {
				crdWant = ""
			}
			// Each side must name want or a field below it, and may name too a field want is
			// below (a rule on the list an entry breaks as well), nothing else.
			check := func(who string, fields []string, want string) {
				t.Helper()
				if want == "" {
					if len(fields) > 0 {
						t.Errorf("%s refuses it (%q), want admitted", who, fields)
					}
					return
				}
				named := false
				for _, f := range fields {
					switch {
					case below(f, want):
						named = true
					case !below(want, f):
						t.Errorf("%s refuses it for %s, want %s or a field below it", who, f, want)
					}
				}
				if !named {
					t.Errorf("%s does not refuse it for %s (%q)", who, want, fields)
				}
			}
			check("the API server (CRD)", crdFields, crdWant)
			check("routing.Validate*", goFields, tc.field)
			if t.Failed() {
				t.Logf("Go: %v", goErrs.ToAggregate())
			}
		})
	}
}

// below reports whether field f is p or lies below it.
func below(f, p string) bool {
	return f == p || strings.HasPrefix(f, p+".") || strings.HasPrefix(f, p+"[")
}

// crdRefusal is the fields the API server's refusal of a dry-run create of obj names (none when
// admitted); an error that is no validation refusal is returned.
func crdRefusal(t *testing.T, c client.Client, obj client.Object) ([]string, error) {
	t.Helper()
	err := c.Create(t.Context(), obj.DeepCopyObject().(client.Object), client.DryRunAll)
	if err == nil {
		return nil, nil
	}
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return nil, err
	}
	var fields []string
	for _, cause := range status.Status().Details.Causes {
		// The API server's note that the CEL rules were not all run names no field.
		if cause.Field != "<nil>" {
			fields = append(fields, cause.Field)
		}
	}
	if len(fields) == 0 {
		return nil, err
	}
	return fields, nil
}
