package syncer

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// dockerSecret is a kubernetes.io/dockerconfigjson Secret with auths key -> "user:password".
func dockerSecret(name string, auths map[string]string) *corev1.Secret {
	doc := map[string]map[string]map[string]string{"auths": {}}
	for k, up := range auths {
		doc["auths"][k] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(up))}
	}
	b, _ := json.Marshal(doc)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kuik-system"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: b},
	}
}

func lookupIn(secrets ...*corev1.Secret) SecretLookup {
	return func(name string) (*corev1.Secret, bool) {
		for _, s := range secrets {
			if s.Name == name {
				return s, true
			}
		}
		return nil, false
	}
}

func mustAlternative(t *testing.T, b *testutil.ImageAlternativeBuilder) *Resource {
	t.Helper()
	obj := b.Build()
	obj.UID = types.UID("uid-" + obj.Name)
	r, err := FromImageAlternative(&obj)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustMirror(t *testing.T, b *testutil.ImageMirrorBuilder) *Resource {
	t.Helper()
	obj := b.Build()
	obj.UID = types.UID("uid-" + obj.Name)
	r, err := FromImageMirror(&obj, "")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// auths decodes a .dockerconfigjson into auths key -> "user:password".
func auths(t *testing.T, data []byte) map[string]string {
	t.Helper()
	var doc struct {
		Auths map[string]struct {
			Username, Password, Auth string
		} `json:"auths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
	if doc.Auths == nil {
		t.Fatalf("%s has no auths object", data)
	}
	out := map[string]string{}
	for k, v := range doc.Auths {
		out[k] = v.Username + ":" + v.Password
	}
	return out
}

func TestEntryKeys(t *testing.T) {
	tests := map[string]struct {
		res  *Resource
		want []string
	}{
		"repository kept as written": {
			res:  mustAlternative(t, testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").Repository("registry.local:5000/acme/foo")),
			want: []string{"quay.io/acme/foo", "registry.local:5000/acme/foo"},
		},
		"Docker Hub short form normalized so the kubelet reads it": {
			res:  mustAlternative(t, testutil.NewImageAlternative("a").Repository("nginx").Repository("acme/foo").Repository("docker.io/acme/bar")),
			want: []string{"docker.io/library/nginx", "docker.io/acme/foo", "docker.io/acme/bar"},
		},
		"repositoryGroup kept as written with its slash": {
			res:  mustAlternative(t, testutil.NewImageAlternative("a").Group("quay.io/acme/").Group("ghcr.io/acme")),
			want: []string{"quay.io/acme/", "ghcr.io/acme"},
		},
		"mirror destination without its trailing slash": {
			res:  mustMirror(t, testutil.NewImageMirror("m", "registry.tld/mirror/")),
			want: []string{"registry.tld/mirror"},
		},
		"mirror at a registry root": {
			res:  mustMirror(t, testutil.NewImageMirror("m", "registry.local:5000/")),
			want: []string{"registry.local:5000"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, e := range tc.res.Entries {
				got = append(got, e.Key)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		})
	}
}

// A record counts only when the webhook could have written it for the resource: the pod and
// its namespace selected, and the container's current image an injecting candidate of the
// resource for its recorded original. Pod authors write labels and annotations at will.
func TestUsedEntriesCountsOnlyTrueRecords(t *testing.T) {
	repos := mustAlternative(t, testutil.NewImageAlternative("a").
		NamespaceSelector(map[string]string{"team": "a"}).PodSelector(map[string]string{"app": "web"}).
		Repository("quay.io/acme/foo").
		Repository("registry.local/acme/foo").SecretRef("creds").
		Repository("registry.other/acme/foo").SecretRef("creds").
		Repository("registry.anon/acme/foo"))
	shared := mustAlternative(t, testutil.NewImageAlternative("shared").
		Repository("quay.io/acme/foo").
		Repository("registry.local/acme/foo").
		Repository("registry.local/acme/foo").SecretRef("creds"))
	groups := mustAlternative(t, testutil.NewImageAlternative("g").Group("quay.io/acme/").Group("registry.local/acme/").SecretRef("creds"))
	mirror := mustMirror(t, testutil.NewImageMirror("m", "registry.tld/mirror/").SecretRef("creds").Exclude("ghcr.io/huge/**"))
	selected := labels.Set{"team": "a"}
	web := map[string]string{"app": "web"}
	type container struct{ original, current, by string }
	tests := map[string]struct {
		res        *Resource
		podLabels  map[string]string
		nsLabels   labels.Set
		containers map[string]container
		raw        map[string]string // annotations written as is, replacing the recorded ones
		want       []string
	}{
		"a true record": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1", "ImageAlternative/a"}},
			want:       []string{"registry.local/acme/foo"},
		},
		"a true record, the current image written in short form": {
			res:        groups,
			containers: map[string]container{"c": {"quay.io/acme/x", "registry.local/acme/x:latest", "ImageAlternative/g"}},
			want:       []string{"registry.local/acme/"},
		},
		"a true mirror record": {
			res:        mirror,
			containers: map[string]container{"c": {"nginx:1", "registry.tld/mirror/docker.io/library/nginx:1", "ImageMirror/m"}},
			want:       []string{"registry.tld/mirror"},
		},
		"a namespace the resource does not select": {
			res: repos, podLabels: web, nsLabels: labels.Set{"team": "b"},
			containers: map[string]container{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1", "ImageAlternative/a"}},
		},
		"a pod the resource does not select": {
			res: repos, podLabels: map[string]string{"app": "db"}, nsLabels: selected,
			containers: map[string]container{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1", "ImageAlternative/a"}},
		},
		"an original the resource does not cover": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"docker.io/evil/x:v1", "registry.local/acme/foo:v1", "ImageAlternative/a"}},
		},
		"the original recorded as its own rewrite": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"registry.local/acme/foo:v1", "registry.local/acme/foo:v1", "ImageAlternative/a"}},
		},
		// The entry's credential does not depend on the tag, and a later webhook may pin a
		// digest between kuik's invocations: the record still counts (routing.Candidate.Explains).
		"the entry's repository with another tag or a pinned digest": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{
				"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v2", "ImageAlternative/a"},
				"d": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "ImageAlternative/a"},
			},
			want: []string{"registry.local/acme/foo"},
		},
		"a repository that merely starts like the entry's": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo-bar:v1", "ImageAlternative/a"}},
		},
		"an entry that does not inject": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"quay.io/acme/foo:v1", "registry.anon/acme/foo:v1", "ImageAlternative/a"}},
		},
		"a candidate of another resource": {
			res:        mirror,
			containers: map[string]container{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1", "ImageMirror/m"}},
		},
		"a mirror record for an excluded image": {
			res:        mirror,
			containers: map[string]container{"c": {"ghcr.io/huge/model:1", "registry.tld/mirror/ghcr.io/huge/model:1", "ImageMirror/m"}},
		},
		"a record attributed to another resource": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1", "ImageAlternative/other"}},
		},
		"a record of a container that does not exist": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"", "registry.local/acme/foo:v1", ""}},
			raw: map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"ghost":"quay.io/acme/foo:v1"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"ghost":"ImageAlternative/a"}`,
			},
		},
		"no recorded original": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"", "registry.local/acme/foo:v1", ""}},
			raw:        map[string]string{v1alpha1.AnnotationRewrittenBy: `{"c":"ImageAlternative/a"}`},
		},
		"annotations that are not JSON maps of strings": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"", "registry.local/acme/foo:v1", ""}},
			raw: map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"c":["quay.io/acme/foo:v1"]}`,
				v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/a"}`,
			},
		},
		"null annotations": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{"c": {"", "registry.local/acme/foo:v1", ""}},
			raw:        map[string]string{v1alpha1.AnnotationOriginalImages: "null", v1alpha1.AnnotationRewrittenBy: "null"},
		},
		"several containers, each judged on its own": {
			res: repos, podLabels: web, nsLabels: selected,
			containers: map[string]container{
				"true":   {"quay.io/acme/foo:v1", "registry.other/acme/foo:v1", "ImageAlternative/a"},
				"forged": {"docker.io/evil/x:v1", "registry.local/acme/foo:v1", "ImageAlternative/a"},
			},
			want: []string{"registry.other/acme/foo"},
		},
		"entries sharing a path: the injecting one counts": {
			res:        shared,
			containers: map[string]container{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1", "ImageAlternative/shared"}},
			want:       []string{"registry.local/acme/foo"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: tc.podLabels, Annotations: map[string]string{}}}
			originals, by := map[string]string{}, map[string]string{}
			for _, c := range slices.Sorted(maps.Keys(tc.containers)) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: tc.containers[c].current})
				if tc.containers[c].by != "" {
					originals[c], by[c] = tc.containers[c].original, tc.containers[c].by
				}
			}
			p.Annotations[v1alpha1.AnnotationOriginalImages] = string(mustJSON(t, originals))
			p.Annotations[v1alpha1.AnnotationRewrittenBy] = string(mustJSON(t, by))
			maps.Copy(p.Annotations, tc.raw)
			got := UsedEntries(tc.res, []Pod{PodFromObject(p)}, tc.nsLabels)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("used entries (-want +got):\n%s", diff)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestResolve(t *testing.T) {
	good := dockerSecret("good", map[string]string{
		"quay.io":                     "host:pw",
		"quay.io/acme":                "acme:pw",
		"registry.local:5000":         "local:pw",
		"https://index.docker.io/v1/": "hub:pw",
	})
	opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "opaque"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("y")}}
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":`)}}
	tests := map[string]struct {
		res         *Resource
		secrets     []*corev1.Secret
		wantCreds   map[string]string
		wantLeftOut []LeftOut
		wantInject  int
	}{
		"most specific key of the secret wins": {
			res:        mustAlternative(t, testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").SecretRef("good").Repository("quay.io/other/foo").SecretRef("good")),
			secrets:    []*corev1.Secret{good},
			wantCreds:  map[string]string{"quay.io/acme/foo": "acme:pw", "quay.io/other/foo": "host:pw"},
			wantInject: 2,
		},
		"port must match": {
			res:         mustAlternative(t, testutil.NewImageAlternative("a").Repository("registry.local:5000/x").SecretRef("good").Repository("registry.local/x").SecretRef("good")),
			secrets:     []*corev1.Secret{good},
			wantCreds:   map[string]string{"registry.local:5000/x": "local:pw"},
			wantLeftOut: []LeftOut{{Resource: ResourceKey{routing.KindImageAlternative, "a"}, Entry: "spec.alternatives[1]", Path: "registry.local/x", Reason: v1alpha1.ReasonNoCredentialForPath}},
			wantInject:  2,
		},
		"Docker Hub falls back to index.docker.io": {
			res:        mustAlternative(t, testutil.NewImageAlternative("a").Repository("acme/foo").SecretRef("good")),
			secrets:    []*corev1.Secret{good},
			wantCreds:  map[string]string{"docker.io/acme/foo": "hub:pw"},
			wantInject: 1,
		},
		"each bad secretRef is left out with its reason, the rest written": {
			res: mustAlternative(t, testutil.NewImageAlternative("a").
				Repository("quay.io/acme/a").SecretRef("missing").
				Repository("quay.io/acme/b").SecretRef("opaque").
				Repository("quay.io/acme/c").SecretRef("broken").
				Repository("ghcr.io/acme/d").SecretRef("good").
				Repository("quay.io/acme/e").SecretRef("good").
				Repository("quay.io/acme/f").Provider("ecr").Inject(true)),
			secrets:   []*corev1.Secret{good, opaque, broken},
			wantCreds: map[string]string{"quay.io/acme/e": "acme:pw"},
			wantLeftOut: []LeftOut{
				{Resource: ResourceKey{routing.KindImageAlternative, "a"}, Entry: "spec.alternatives[0]", Path: "quay.io/acme/a", Reason: v1alpha1.ReasonSecretNotFound},
				{Resource: ResourceKey{routing.KindImageAlternative, "a"}, Entry: "spec.alternatives[1]", Path: "quay.io/acme/b", Reason: v1alpha1.ReasonNotDockerConfig},
				{Resource: ResourceKey{routing.KindImageAlternative, "a"}, Entry: "spec.alternatives[2]", Path: "quay.io/acme/c", Reason: v1alpha1.ReasonInvalidDockerConfig},
				{Resource: ResourceKey{routing.KindImageAlternative, "a"}, Entry: "spec.alternatives[3]", Path: "ghcr.io/acme/d", Reason: v1alpha1.ReasonNoCredentialForPath},
				{Resource: ResourceKey{routing.KindImageAlternative, "a"}, Entry: "spec.alternatives[5]", Path: "quay.io/acme/f", Reason: v1alpha1.ReasonProviderNotConfigured},
			},
			wantInject: 6,
		},
		"entries that do not inject are not resolved": {
			res: mustAlternative(t, testutil.NewImageAlternative("a").
				Repository("quay.io/acme/a").SecretRef("missing").Inject(false).
				Repository("quay.io/acme/b").Provider("ecr").
				Repository("quay.io/acme/c")),
			wantCreds: map[string]string{},
		},
		"mirror destination matched by its registry's key": {
			res:        mustMirror(t, testutil.NewImageMirror("m", "registry.local:5000/mirror/").SecretRef("good")),
			secrets:    []*corev1.Secret{good},
			wantCreds:  map[string]string{"registry.local:5000/mirror": "local:pw"},
			wantInject: 1,
		},
		"group path matched by the namespace key": {
			res:        mustAlternative(t, testutil.NewImageAlternative("a").Group("quay.io/acme/").SecretRef("good")),
			secrets:    []*corev1.Secret{good},
			wantCreds:  map[string]string{"quay.io/acme/": "acme:pw"},
			wantInject: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Resolve(tc.res, lookupIn(tc.secrets...), nil)
			creds := map[string]string{}
			for k, a := range got.Credentials {
				creds[k] = a.Username + ":" + a.Password
			}
			if diff := cmp.Diff(tc.wantCreds, creds); diff != "" {
				t.Errorf("credentials (-want +got):\n%s", diff)
			}
			for i := range got.LeftOut {
				if got.LeftOut[i].Message == "" {
					t.Errorf("left out %v has no message", got.LeftOut[i])
				}
				got.LeftOut[i].Message = ""
			}
			if diff := cmp.Diff(tc.wantLeftOut, got.LeftOut); diff != "" {
				t.Errorf("left out (-want +got):\n%s", diff)
			}
			if got.Injecting != tc.wantInject {
				t.Errorf("injecting = %d, want %d", got.Injecting, tc.wantInject)
			}
		})
	}
}

func TestResolveReadsEachSecretOnce(t *testing.T) {
	res := mustAlternative(t, testutil.NewImageAlternative("a").
		Repository("quay.io/acme/a").SecretRef("good").
		Repository("quay.io/acme/b").SecretRef("good").
		Repository("quay.io/acme/c").SecretRef("good"))
	calls := 0
	good := dockerSecret("good", map[string]string{"quay.io": "u:p"})
	Resolve(res, func(name string) (*corev1.Secret, bool) {
		calls++
		return good, true
	}, nil)
	if calls != 1 {
		t.Errorf("the secret was looked up %d times, want once", calls)
	}
}

func TestRetain(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	now := clk.Now()
	const retention = 15 * time.Minute
	tests := map[string]struct {
		live       []string
		prev       Usage
		wantKeep   []string
		wantNext   Usage
		wantExpiry time.Time
	}{
		"live entries are kept and stamped now": {
			live:     []string{"b", "a"},
			wantKeep: []string{"a", "b"},
			wantNext: Usage{"a": {Live: true, LastUsed: now}, "b": {Live: true, LastUsed: now}},
		},
		"an entry whose pods just went away is kept from now": {
			prev:       Usage{"a": {Live: true, LastUsed: now.Add(-time.Hour)}},
			wantKeep:   []string{"a"},
			wantNext:   Usage{"a": {LastUsed: now}},
			wantExpiry: now.Add(retention),
		},
		"an unused entry stays within the retention": {
			prev:       Usage{"a": {LastUsed: now.Add(-14 * time.Minute)}, "b": {LastUsed: now.Add(-time.Minute)}},
			wantKeep:   []string{"a", "b"},
			wantNext:   Usage{"a": {LastUsed: now.Add(-14 * time.Minute)}, "b": {LastUsed: now.Add(-time.Minute)}},
			wantExpiry: now.Add(time.Minute),
		},
		"an unused entry goes at the end of the retention": {
			prev:     Usage{"a": {LastUsed: now.Add(-retention)}},
			wantNext: Usage{},
		},
		"a retained entry used again is live": {
			live:     []string{"a"},
			prev:     Usage{"a": {LastUsed: now.Add(-10 * time.Minute)}},
			wantKeep: []string{"a"},
			wantNext: Usage{"a": {Live: true, LastUsed: now}},
		},
		// A restored record is a ConfigMap others may write, or one a leader with a clock
		// ahead wrote: a use in the future counts as a use now, so it never outlasts the
		// retention.
		"a use in the future counts from now": {
			prev:       Usage{"a": {LastUsed: now.AddDate(100, 0, 0)}},
			wantKeep:   []string{"a"},
			wantNext:   Usage{"a": {LastUsed: now}},
			wantExpiry: now.Add(retention),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			keep, next, expiry := Retain(now, retention, tc.live, tc.prev)
			if diff := cmp.Diff(tc.wantKeep, keep); diff != "" {
				t.Errorf("keep (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNext, next); diff != "" {
				t.Errorf("next (-want +got):\n%s", diff)
			}
			if !expiry.Equal(tc.wantExpiry) {
				t.Errorf("expiry = %v, want %v", expiry, tc.wantExpiry)
			}
		})
	}
}

// rewrittenPod is a pod as the webhook admits it: images maps each container to its current
// image, rewrites each rewritten container to its original image and the resource that
// rewrote it.
func rewrittenPod(ns, name string, images map[string]string, rewrites map[string][2]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.LabelRewritten: "true"}}}
	originals, by := map[string]string{}, map[string]string{}
	for c, r := range rewrites {
		originals[c], by[c] = r[0], r[1]
	}
	o, _ := json.Marshal(originals)
	b, _ := json.Marshal(by)
	p.Annotations = map[string]string{v1alpha1.AnnotationOriginalImages: string(o), v1alpha1.AnnotationRewrittenBy: string(b)}
	for c, img := range images {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: img})
	}
	return p
}

func TestDecidePair(t *testing.T) {
	secret := dockerSecret("creds", map[string]string{"quay.io": "q:pw", "registry.tld": "m:pw"})
	always := mustAlternative(t, testutil.NewImageAlternative("always").Policy(v1alpha1.RewritePolicyAlways).
		NamespaceSelector(map[string]string{"team": "a"}).PodSelector(map[string]string{"app": "x"}).
		Repository("quay.io/acme/foo").SecretRef("creds").
		Repository("quay.io/acme/bar").SecretRef("creds").
		Repository("docker.io/acme/foo"))
	onFailure := mustAlternative(t, testutil.NewImageAlternative("onfailure").
		Repository("quay.io/acme/foo").SecretRef("creds").
		Repository("quay.io/acme/bar").SecretRef("creds").
		Repository("quay.io/acme/missing").SecretRef("nope").
		Repository("docker.io/acme/foo"))
	onFailureScoped := mustAlternative(t, testutil.NewImageAlternative("scoped").NamespaceSelector(map[string]string{"team": "a"}).
		Repository("docker.io/acme/foo").
		Repository("quay.io/acme/foo").SecretRef("creds"))
	mirror := mustMirror(t, testutil.NewImageMirror("mirror", "registry.tld/mirror/").SecretRef("creds"))
	none := mustMirror(t, testutil.NewImageMirror("none", "registry.tld/mirror/").SecretRef("creds").Policy(v1alpha1.RewritePolicyNone))
	noInject := mustAlternative(t, testutil.NewImageAlternative("noinject").Policy(v1alpha1.RewritePolicyAlways).
		Repository("quay.io/acme/foo").SecretRef("creds").Inject(false))

	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	pod := func(name string, mutate func(*corev1.Pod), images map[string]string, rewrites map[string][2]string) Pod {
		p := rewrittenPod("ns", name, images, rewrites)
		if mutate != nil {
			mutate(p)
		}
		return PodFromObject(p)
	}
	tests := map[string]struct {
		res        *Resource
		nsLabels   labels.Set
		pods       []Pod
		usage      Usage
		wantNeeded bool
		wantAuths  map[string]string
	}{
		"Always: a selected namespace gets every injecting entry, before any pod": {
			res: always, nsLabels: labels.Set{"team": "a"}, wantNeeded: true,
			wantAuths: map[string]string{"quay.io/acme/foo": "q:pw", "quay.io/acme/bar": "q:pw"},
		},
		"Always: a namespace out of scope gets an empty Secret, written only if it was before": {
			res: always, nsLabels: labels.Set{"team": "b"}, wantAuths: map[string]string{},
		},
		"ImageMirror None writes nothing": {
			res: none, wantAuths: map[string]string{},
		},
		"a resource none of whose entries injects writes nothing": {
			res: noInject, wantAuths: map[string]string{},
		},
		"OnFailure: nothing before a rewritten pod": {
			res: onFailure, wantAuths: map[string]string{},
		},
		"OnFailure: the entries serving live pods": {
			res: onFailure, wantNeeded: true,
			pods: []Pod{
				pod("p1", nil, map[string]string{"c": "quay.io/acme/bar:v1", "d": "nginx"}, map[string][2]string{"c": {"quay.io/acme/foo:v1", "ImageAlternative/onfailure"}}),
				pod("p2", nil, map[string]string{"c": "quay.io/acme/bar:v2"}, map[string][2]string{"c": {"quay.io/acme/foo:v2", "ImageAlternative/onfailure"}}),
			},
			wantAuths: map[string]string{"quay.io/acme/bar": "q:pw"},
		},
		"OnFailure: finished, terminating and other resources' pods do not count": {
			res: onFailure,
			pods: []Pod{
				pod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, map[string]string{"c": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"docker.io/acme/foo:v1", "ImageAlternative/onfailure"}}),
				pod("failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, map[string]string{"c": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"docker.io/acme/foo:v1", "ImageAlternative/onfailure"}}),
				pod("gone", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }, map[string]string{"c": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"docker.io/acme/foo:v1", "ImageAlternative/onfailure"}}),
				pod("other", nil, map[string]string{"c": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"docker.io/acme/foo:v1", "ImageAlternative/other"}}),
			},
			wantAuths: map[string]string{},
		},
		"OnFailure: an entry that did not resolve is wanted but left out": {
			res: onFailure, wantNeeded: true,
			pods: []Pod{
				pod("p", nil, map[string]string{"c": "quay.io/acme/missing:v1", "d": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"docker.io/acme/foo:v1", "ImageAlternative/onfailure"}, "d": {"docker.io/acme/foo:v1", "ImageAlternative/onfailure"}}),
			},
			wantAuths: map[string]string{"quay.io/acme/foo": "q:pw"},
		},
		"OnFailure: an entry that does not inject is not wanted": {
			res: onFailure,
			pods: []Pod{
				pod("p", nil, map[string]string{"c": "acme/foo:v1"}, map[string][2]string{"c": {"quay.io/acme/foo:v1", "ImageAlternative/onfailure"}}),
			},
			wantAuths: map[string]string{},
		},
		"OnFailure: retained entries stay": {
			res: onFailure, wantNeeded: true,
			usage:     Usage{"quay.io/acme/foo": {LastUsed: now.Add(-time.Minute)}, "quay.io/acme/gone-from-spec": {LastUsed: now}},
			wantAuths: map[string]string{"quay.io/acme/foo": "q:pw"},
		},
		"OnFailure: forged records bring nothing": {
			res: onFailure,
			pods: []Pod{
				pod("not-a-candidate", nil, map[string]string{"c": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"docker.io/evil/x:v1", "ImageAlternative/onfailure"}}),
				pod("own-original", nil, map[string]string{"c": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"quay.io/acme/foo:v1", "ImageAlternative/onfailure"}}),
			},
			wantAuths: map[string]string{},
		},
		"OnFailure: a namespace out of scope gets nothing, retained entries included": {
			res: onFailureScoped, nsLabels: labels.Set{"team": "b"},
			pods: []Pod{
				pod("p", nil, map[string]string{"c": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"docker.io/acme/foo:v1", "ImageAlternative/scoped"}}),
			},
			usage:     Usage{"quay.io/acme/foo": {LastUsed: now.Add(-time.Minute)}},
			wantAuths: map[string]string{},
		},
		"OnFailure: a namespace in scope": {
			res: onFailureScoped, nsLabels: labels.Set{"team": "a"}, wantNeeded: true,
			pods: []Pod{
				pod("p", nil, map[string]string{"c": "quay.io/acme/foo:v1"}, map[string][2]string{"c": {"docker.io/acme/foo:v1", "ImageAlternative/scoped"}}),
			},
			wantAuths: map[string]string{"quay.io/acme/foo": "q:pw"},
		},
		"OnFailure mirror: a pod pulled from under the destination": {
			res: mirror, wantNeeded: true,
			pods: []Pod{
				pod("p", nil, map[string]string{"c": "registry.tld/mirror/docker.io/library/nginx:1"}, map[string][2]string{"c": {"nginx:1", "ImageMirror/mirror"}}),
			},
			wantAuths: map[string]string{"registry.tld/mirror": "m:pw"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := DecidePair(PairInput{
				Resource:        tc.res,
				Resolution:      Resolve(tc.res, lookupIn(secret), nil),
				Namespace:       "ns",
				NamespaceLabels: tc.nsLabels,
				Pods:            tc.pods,
				Usage:           tc.usage,
				Now:             now,
				Retention:       15 * time.Minute,
			})
			if err != nil {
				t.Fatal(err)
			}
			if d.Needed != tc.wantNeeded {
				t.Errorf("needed = %v, want %v", d.Needed, tc.wantNeeded)
			}
			if diff := cmp.Diff(tc.wantAuths, auths(t, d.Secret.Data[corev1.DockerConfigJsonKey])); diff != "" {
				t.Errorf("auths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDesiredSecret(t *testing.T) {
	r := mustAlternative(t, testutil.NewImageAlternative("foo").Repository("quay.io/acme/foo").SecretRef("creds"))
	got := DesiredSecret(r, "team-a", []byte(`{"auths":{}}`))
	want := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "kuik-inject-imagealternative-foo",
			Namespace: "team-a",
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "kuik-secret-syncer"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "kuik.enix.io/v1alpha1", Kind: "ImageAlternative", Name: "foo", UID: "uid-foo", Controller: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{".dockerconfigjson": []byte(`{"auths":{}}`)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("secret (-want +got):\n%s", diff)
	}
	h1, err := Hash(ApplyConfiguration(got))
	if err != nil {
		t.Fatal(err)
	}
	got.Data[".dockerconfigjson"] = []byte(`{"auths":{"x":{}}}`)
	h2, _ := Hash(ApplyConfiguration(got))
	if h1 == h2 {
		t.Error("the hash does not change with the data")
	}
}

func TestEmptiedSecretHoldsEmptyAuths(t *testing.T) {
	r := mustAlternative(t, testutil.NewImageAlternative("foo").Repository("quay.io/acme/foo").SecretRef("creds"))
	d, err := DecidePair(PairInput{Resource: r, Resolution: Resolve(r, lookupIn(), nil), Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(d.Secret.Data[corev1.DockerConfigJsonKey]); got != `{"auths":{}}` {
		t.Errorf("emptied secret holds %s, want {\"auths\":{}}", got)
	}
}

func TestDesiredStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	later := metav1.NewTime(now.Add(time.Hour))
	r := mustAlternative(t, testutil.NewImageAlternative("foo").
		Repository("quay.io/acme/foo").SecretRef("creds").
		Repository("quay.io/acme/bar").SecretRef("missing"))
	r.Generation = 3
	ok := dockerSecret("creds", map[string]string{"quay.io": "u:p"})

	st, changed := DesiredStatus(r, Resolve(r, lookupIn(ok), nil), 7, &v1alpha1.RoutingStatus{}, now)
	if !changed {
		t.Fatal("a new status is a change")
	}
	if st.ObservedGeneration != 3 || st.Entries != 2 || st.Namespaces != 7 || len(st.Conditions) != 1 {
		t.Fatalf("status = %+v", st)
	}
	c := st.Conditions[0]
	if c.Type != v1alpha1.ConditionReady || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonSecretNotFound {
		t.Errorf("condition = %+v, want Ready False SecretNotFound", c)
	}

	again, changed := DesiredStatus(r, Resolve(r, lookupIn(ok), nil), 7, &st, later)
	if changed {
		t.Errorf("the same status is reported as a change: %+v", again)
	}

	fixed := mustAlternative(t, testutil.NewImageAlternative("foo").Repository("quay.io/acme/foo").SecretRef("creds"))
	fixed.Generation = 4
	st2, changed := DesiredStatus(fixed, Resolve(fixed, lookupIn(ok), nil), 7, &st, later)
	if !changed || st2.Conditions[0].Status != metav1.ConditionTrue || st2.Conditions[0].Reason != v1alpha1.ReasonSynced ||
		!st2.Conditions[0].LastTransitionTime.Equal(&later) {
		t.Errorf("fixed status = %+v, want Ready True Synced since later", st2)
	}

	nothing := mustMirror(t, testutil.NewImageMirror("m", "registry.tld/").Policy(v1alpha1.RewritePolicyNone).SecretRef("creds"))
	st3, _ := DesiredStatus(nothing, Resolve(nothing, lookupIn(ok), nil), 0, &v1alpha1.RoutingStatus{}, now)
	if st3.Conditions[0].Reason != v1alpha1.ReasonNothingToInject || st3.Entries != 1 {
		t.Errorf("status of a None mirror = %+v", st3)
	}
}

func TestRender(t *testing.T) {
	always := mustAlternative(t, testutil.NewImageAlternative("always").Policy(v1alpha1.RewritePolicyAlways).
		NamespaceSelector(map[string]string{"kuik": "yes"}).
		Repository("quay.io/acme/foo").SecretRef("creds").
		Repository("quay.io/acme/bar").SecretRef("missing"))
	onFailure := mustMirror(t, testutil.NewImageMirror("mirror", "registry.tld/mirror/").SecretRef("creds"))
	w := World{
		Resources: []*Resource{onFailure, always},
		Secrets:   map[string]*corev1.Secret{"creds": dockerSecret("creds", map[string]string{"quay.io": "q:pw", "registry.tld": "m:pw"})},
		Namespaces: map[string]labels.Set{
			"b": {"kuik": "yes"}, "a": {"kuik": "yes"}, "c": {}, "d": {},
		},
		Pods: []Pod{PodFromObject(rewrittenPod("d", "p", map[string]string{"c": "registry.tld/mirror/docker.io/library/nginx:1"}, map[string][2]string{"c": {"nginx:1", "ImageMirror/mirror"}}))},
	}
	secrets, leftOut, err := Render(w)
	if err != nil {
		t.Fatal(err)
	}
	type placed struct{ Namespace, Name string }
	var got []placed
	for _, s := range secrets {
		got = append(got, placed{s.Namespace, s.Name})
	}
	want := []placed{
		{"a", "kuik-inject-imagealternative-always"},
		{"b", "kuik-inject-imagealternative-always"},
		{"d", "kuik-inject-imagemirror-mirror"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rendered secrets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"quay.io/acme/foo": "q:pw"}, auths(t, secrets[0].Data[corev1.DockerConfigJsonKey])); diff != "" {
		t.Errorf("auths (-want +got):\n%s", diff)
	}
	if len(leftOut) != 1 || leftOut[0].Reason != v1alpha1.ReasonSecretNotFound || leftOut[0].Entry != "spec.alternatives[1]" {
		t.Errorf("left out = %+v, want spec.alternatives[1] SecretNotFound", leftOut)
	}
}

func TestTransformPod(t *testing.T) {
	honest := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "7",
				Labels: map[string]string{"kuik.enix.io/rewritten": "true", "app": "a"},
				Annotations: map[string]string{
					"kuik.enix.io/rewritten-by":                        `{"c":"ImageMirror/m"}`,
					"kuik.enix.io/original-images":                     `{"c":"nginx"}`,
					"kuik.enix.io/reason":                              `{"c":"OnFailure"}`,
					"kubectl.kubernetes.io/last-applied-configuration": "{...big...}",
				},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}},
			},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "i", Image: "busybox", Command: []string{"sh"}}},
				Containers:     []corev1.Container{{Name: "c", Image: "mirror.local/docker.io/library/nginx:latest", Env: []corev1.EnvVar{{Name: "A", Value: "B"}}}},
				NodeName:       "node",
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
		}
	}
	kept := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", ResourceVersion: "7",
			Labels:      map[string]string{"kuik.enix.io/rewritten": "true", "app": "a"},
			Annotations: map[string]string{"kuik.enix.io/rewritten-by": `{"c":"ImageMirror/m"}`, "kuik.enix.io/original-images": `{"c":"nginx"}`},
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "mirror.local/docker.io/library/nginx:latest"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	stub := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", ResourceVersion: "7"}}
	manyLabels := map[string]string{}
	for i := range routing.MaxPodLabels + 1 {
		manyLabels[fmt.Sprintf("l%d", i)] = ""
	}
	// With "app", MaxPodLabels labels besides kuik's.
	atBound := map[string]string{}
	for i := range routing.MaxPodLabels - 1 {
		atBound[fmt.Sprintf("l%d", i)] = ""
	}
	for name, tc := range map[string]struct {
		edit func(p *corev1.Pod)
		want *corev1.Pod
	}{
		"keeps the recorded containers, their records, labels, phase; nothing else": {edit: func(*corev1.Pod) {}, want: kept},
		"drops the record of a container the pod lacks": {
			edit: func(p *corev1.Pod) {
				p.Annotations["kuik.enix.io/rewritten-by"] = `{"c":"ImageMirror/m","ghost":"ImageAlternative/x"}`
				p.Annotations["kuik.enix.io/original-images"] = `{"c":"nginx","ghost":"busybox"}`
			},
			want: kept,
		},
		"drops a record naming no resource": {
			edit: func(p *corev1.Pod) {
				p.Annotations["kuik.enix.io/rewritten-by"] = `{"c":"ImageMirror/m","i":"original"}`
				p.Annotations["kuik.enix.io/original-images"] = `{"c":"nginx","i":"busybox"}`
			},
			want: kept,
		},
		"keeps an ephemeral container's record among the containers": {
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].Name = "app"
				p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "c", Image: "mirror.local/docker.io/library/nginx:latest"}}}
			},
			want: kept,
		},
		"a huge image of a container kuik did not record costs nothing": {
			edit: func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = strings.Repeat("x", 512<<10) },
			want: kept,
		},
		"a huge image of a recorded container makes a stub": {
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].Image = "mirror.local/" + strings.Repeat("x", routing.MaxRecordBytes)
			},
			want: stub,
		},
		"a huge kuik annotation makes a stub": {
			edit: func(p *corev1.Pod) {
				p.Annotations["kuik.enix.io/original-images"] = `{"c":"nginx","x":"` + strings.Repeat("x", 250<<10) + `"}`
			},
			want: stub,
		},
		"another huge kuik.enix.io annotation is dropped": {
			edit: func(p *corev1.Pod) { p.Annotations["kuik.enix.io/junk"] = strings.Repeat("x", 250<<10) },
			want: kept,
		},
		"too many labels make a stub": {
			edit: func(p *corev1.Pod) { maps.Copy(p.Labels, manyLabels) },
			want: stub,
		},
		"kuik's own label does not count against the bound (the webhook checked before adding it)": {
			edit: func(p *corev1.Pod) { maps.Copy(p.Labels, atBound) },
			want: func() *corev1.Pod {
				k := kept.DeepCopy()
				maps.Copy(k.Labels, atBound)
				return k
			}(),
		},
		"too large labels make a stub": {
			edit: func(p *corev1.Pod) {
				p.Labels["big"] = strings.Repeat("v", 63)
				p.Labels[strings.Repeat("k", routing.MaxPodLabelBytes)] = ""
			},
			want: stub,
		},
		"a pod without records keeps no container": {
			edit: func(p *corev1.Pod) { delete(p.Annotations, "kuik.enix.io/rewritten-by") },
			want: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", ResourceVersion: "7", Labels: kept.Labels},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			in := honest()
			tc.edit(in)
			out, err := TransformPod(in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("transformed pod (-want +got):\n%s", diff)
			}
		})
	}
}
