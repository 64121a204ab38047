package syncer

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// fbPod is a live pod of namespace ns created at t0+age, whose containers are routed by by:
// container -> {original, current}.
func fbPod(name string, age time.Duration, by string, containers map[string][2]string) FallbackPod {
	src, err := routing.ParseSource(by)
	if err != nil {
		panic(err)
	}
	p := FallbackPod{
		Pod: Pod{
			Namespace: "ns", Name: name, Live: true,
			Images: map[string]string{}, Originals: map[string]string{}, RewrittenBy: map[string]routing.Source{},
		},
		Created: metav1.NewTime(t0.Add(age)),
	}
	for c, oc := range containers {
		p.Originals[c], p.Images[c], p.RewrittenBy[c] = oc[0], oc[1], src
	}
	return p
}

func anyNamespace(string) (labels.Set, bool) { return labels.Set{}, true }

func TestDecideFallbacks(t *testing.T) {
	alt := mustAlternative(t, testutil.NewImageAlternative("alt").Repository("quay.io/acme/foo").Repository("registry.local/acme/foo"))
	group := mustAlternative(t, testutil.NewImageAlternative("grp").Group("quay.io/acme/").Group("registry.local/acme/"))
	mirror := mustMirror(t, testutil.NewImageMirror("mir", "registry.local/mirror/"))
	const byAlt, byGroup, byMirror = "ImageAlternative/alt", "ImageAlternative/grp", "ImageMirror/mir"
	fb := func(original, routedTo string, pods int32, age time.Duration) v1alpha1.ActiveFallback {
		return v1alpha1.ActiveFallback{Original: original, RoutedTo: routedTo, Pods: pods, Since: metav1.NewTime(t0.Add(age))}
	}
	for name, tc := range map[string]struct {
		r    *Resource
		pods []FallbackPod
		want Fallbacks
	}{
		"a tag and a digest of one repository make one pair, dated by its oldest pod": {
			r: alt,
			pods: []FallbackPod{
				fbPod("new", time.Hour, byAlt, map[string][2]string{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1"}}),
				fbPod("old", time.Minute, byAlt, map[string][2]string{"c": {"quay.io/acme/foo@" + testDigest, "registry.local/acme/foo@" + testDigest}}),
			},
			want: Fallbacks{Active: []v1alpha1.ActiveFallback{fb("quay.io/acme/foo", "registry.local/acme/foo", 2, time.Minute)}, Total: 1, Pods: 2},
		},
		"a digest pinned after the rewrite still counts": {
			r:    alt,
			pods: []FallbackPod{fbPod("p", 0, byAlt, map[string][2]string{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1@" + testDigest}})},
			want: Fallbacks{Active: []v1alpha1.ActiveFallback{fb("quay.io/acme/foo", "registry.local/acme/foo", 1, 0)}, Total: 1, Pods: 1},
		},
		"two containers of a pod on one pair count the pod once": {
			r: alt,
			pods: []FallbackPod{fbPod("p", 0, byAlt, map[string][2]string{
				"a": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1"},
				"b": {"quay.io/acme/foo:v2", "registry.local/acme/foo:v2"},
			})},
			want: Fallbacks{Active: []v1alpha1.ActiveFallback{fb("quay.io/acme/foo", "registry.local/acme/foo", 1, 0)}, Total: 1, Pods: 1},
		},
		"most pods first, then original, then routedTo": {
			r: group,
			pods: []FallbackPod{
				fbPod("a", 3*time.Second, byGroup, map[string][2]string{"c": {"quay.io/acme/b:1", "registry.local/acme/b:1"}, "d": {"quay.io/acme/z:1", "registry.local/acme/z:1"}}),
				fbPod("b", 2*time.Second, byGroup, map[string][2]string{"c": {"quay.io/acme/a:1", "registry.local/acme/a:1"}}),
				fbPod("c", 1*time.Second, byGroup, map[string][2]string{"c": {"quay.io/acme/z:1", "registry.local/acme/z:1"}}),
			},
			want: Fallbacks{Active: []v1alpha1.ActiveFallback{
				fb("quay.io/acme/z", "registry.local/acme/z", 2, time.Second),
				fb("quay.io/acme/a", "registry.local/acme/a", 1, 2*time.Second),
				fb("quay.io/acme/b", "registry.local/acme/b", 1, 3*time.Second),
			}, Total: 3, Pods: 3},
		},
		"a mirror's routedTo is under its destination": {
			r:    mirror,
			pods: []FallbackPod{fbPod("p", 0, byMirror, map[string][2]string{"c": {"nginx", "registry.local/mirror/docker.io/library/nginx:latest"}})},
			want: Fallbacks{Active: []v1alpha1.ActiveFallback{fb("docker.io/library/nginx", "registry.local/mirror/docker.io/library/nginx", 1, 0)}, Total: 1, Pods: 1},
		},
		"forged records count for nothing": {
			r: alt,
			pods: []FallbackPod{
				// An original the resource does not cover.
				fbPod("uncovered", 0, byAlt, map[string][2]string{"c": {"docker.io/library/nginx:1", "registry.local/acme/foo:v1"}}),
				// An image that is no candidate of the original.
				fbPod("elsewhere", 0, byAlt, map[string][2]string{"c": {"quay.io/acme/foo:v1", "evil.example/acme/foo:v1"}}),
				// Not rewritten at all: the image is the original.
				fbPod("same", 0, byAlt, map[string][2]string{"c": {"quay.io/acme/foo:v1", "quay.io/acme/foo:v1"}}),
				// Another resource's name.
				fbPod("other", 0, "ImageAlternative/other", map[string][2]string{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1"}}),
				// Garbage.
				fbPod("garbage", 0, byAlt, map[string][2]string{"c": {"::", "registry.local/acme/foo:v1"}}),
			},
			want: Fallbacks{},
		},
		"a record naming a container the pod does not have counts for nothing": {
			r: alt,
			pods: func() []FallbackPod {
				p := fbPod("p", 0, byAlt, nil)
				p.Originals["ghost"], p.RewrittenBy["ghost"] = "quay.io/acme/foo:v1", alt.Source()
				return []FallbackPod{p}
			}(),
			want: Fallbacks{},
		},
		"pods that finished or are being deleted do not count": {
			r: alt,
			pods: func() []FallbackPod {
				p := fbPod("p", 0, byAlt, map[string][2]string{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1"}})
				p.Live = false
				return []FallbackPod{p}
			}(),
			want: Fallbacks{},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := DecideFallbacks(tc.r, tc.pods, anyNamespace)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Fallbacks{}, "Ahead")); diff != "" {
				t.Errorf("fallbacks (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideFallbacksHonoursSelectors(t *testing.T) {
	r := mustAlternative(t, testutil.NewImageAlternative("alt").NamespaceSelector(map[string]string{"team": "a"}).PodSelector(map[string]string{"app": "x"}).
		Repository("quay.io/acme/foo").Repository("registry.local/acme/foo"))
	pod := fbPod("p", 0, "ImageAlternative/alt", map[string][2]string{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1"}})
	pod.Labels = labels.Set{"app": "x"}
	other := pod
	other.Labels = labels.Set{"app": "y"}
	ns := func(l labels.Set) func(string) (labels.Set, bool) {
		return func(string) (labels.Set, bool) { return l, true }
	}
	if got := DecideFallbacks(r, []FallbackPod{pod}, ns(labels.Set{"team": "a"})); got.Pods != 1 {
		t.Errorf("selected pod in a selected namespace: %+v, want 1 pod", got)
	}
	if got := DecideFallbacks(r, []FallbackPod{pod}, ns(labels.Set{"team": "b"})); got.Pods != 0 {
		t.Errorf("a namespace the resource does not select: %+v, want none", got)
	}
	if got := DecideFallbacks(r, []FallbackPod{other}, ns(labels.Set{"team": "a"})); got.Pods != 0 {
		t.Errorf("a pod the resource does not select: %+v, want none", got)
	}
	if got := DecideFallbacks(r, []FallbackPod{pod}, func(string) (labels.Set, bool) { return nil, false }); got.Pods != 0 {
		t.Errorf("a namespace not in the cache: %+v, want none", got)
	}
}

func TestDecideFallbacksNoneForDryRunAndPolicyNone(t *testing.T) {
	alt := mustAlternative(t, testutil.NewImageAlternative("alt").DryRun().Repository("quay.io/acme/foo").Repository("registry.local/acme/foo"))
	pod := fbPod("p", 0, "ImageAlternative/alt", map[string][2]string{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1"}})
	if got := DecideFallbacks(alt, []FallbackPod{pod}, anyNamespace); got.Pods != 0 || got.Total != 0 {
		t.Errorf("dry run: %+v, want none", got)
	}
	none := mustMirror(t, testutil.NewImageMirror("mir", "registry.local/mirror/").Policy(v1alpha1.RewritePolicyNone))
	mp := fbPod("p", 0, "ImageMirror/mir", map[string][2]string{"c": {"nginx", "registry.local/mirror/docker.io/library/nginx:latest"}})
	if got := DecideFallbacks(none, []FallbackPod{mp}, anyNamespace); got.Pods != 0 || got.Total != 0 {
		t.Errorf("policy None: %+v, want none", got)
	}
}

func TestDecideFallbacksKeepsTheTop32AndCountsAll(t *testing.T) {
	r := mustAlternative(t, testutil.NewImageAlternative("grp").Group("quay.io/acme/").Group("registry.local/acme/"))
	containers := map[string][2]string{}
	for i := range 50 {
		img := fmt.Sprintf("x%02d", i)
		containers[img] = [2]string{"quay.io/acme/" + img + ":1", "registry.local/acme/" + img + ":1"}
	}
	pods := []FallbackPod{
		fbPod("all", 0, "ImageAlternative/grp", containers),
		fbPod("x49", time.Second, "ImageAlternative/grp", map[string][2]string{"c": containers["x49"]}),
	}
	got := DecideFallbacks(r, pods, anyNamespace)
	if got.Total != 50 || got.Pods != 2 || len(got.Active) != MaxActiveFallbacks {
		t.Fatalf("total %d, pods %d, %d items; want 50, 2, %d", got.Total, got.Pods, len(got.Active), MaxActiveFallbacks)
	}
	if a := got.Active[0]; a.Original != "quay.io/acme/x49" || a.Pods != 2 {
		t.Errorf("first item %+v, want quay.io/acme/x49 with 2 pods", a)
	}
	for i, a := range got.Active[1:] {
		if want := fmt.Sprintf("quay.io/acme/x%02d", i); a.Original != want || a.Pods != 1 {
			t.Errorf("item %d: %+v, want %s with 1 pod", i+1, a, want)
		}
	}
}

func TestFallbacksMergePatchTouchesOnlyItsFields(t *testing.T) {
	f := Fallbacks{Active: []v1alpha1.ActiveFallback{{Original: "a/b", RoutedTo: "c/d", Pods: 1, Since: metav1.NewTime(t0)}}, Total: 1, Pods: 1}
	b, err := f.MergePatch()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":{"activeFallbacks":[{"original":"a/b","routedTo":"c/d","pods":1,"since":"2026-12-01T10:00:00Z"}],"fallbackPods":1,"fallbacks":1}}`
	if string(b) != want {
		t.Errorf("patch\n%s\nwant\n%s", b, want)
	}
	empty := Fallbacks{}
	b, err = empty.MergePatch()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]map[string]any{"status": {"activeFallbacks": nil, "fallbacks": nil, "fallbackPods": nil}}, doc); diff != "" {
		t.Errorf("empty patch removes the three fields (-want +got):\n%s", diff)
	}
}

func TestFallbacksHolds(t *testing.T) {
	f := Fallbacks{Active: []v1alpha1.ActiveFallback{{Original: "a/b", RoutedTo: "c/d", Pods: 1, Since: metav1.NewTime(t0)}}, Total: 3, Pods: 1}
	same := v1alpha1.RoutingStatus{ActiveFallbacks: []v1alpha1.ActiveFallback{{Original: "a/b", RoutedTo: "c/d", Pods: 1, Since: metav1.NewTime(t0.Local())}}, Fallbacks: 3, FallbackPods: 1}
	if !f.Holds(&same) {
		t.Error("the same fallbacks (a time in another zone) do not hold")
	}
	for name, mutate := range map[string]func(s *v1alpha1.RoutingStatus){
		"total":  func(s *v1alpha1.RoutingStatus) { s.Fallbacks = 2 },
		"pods":   func(s *v1alpha1.RoutingStatus) { s.FallbackPods = 2 },
		"since":  func(s *v1alpha1.RoutingStatus) { s.ActiveFallbacks[0].Since = metav1.NewTime(t0.Add(time.Second)) },
		"count":  func(s *v1alpha1.RoutingStatus) { s.ActiveFallbacks[0].Pods = 2 },
		"target": func(s *v1alpha1.RoutingStatus) { s.ActiveFallbacks[0].RoutedTo = "e/f" },
		"items":  func(s *v1alpha1.RoutingStatus) { s.ActiveFallbacks = nil },
	} {
		s := *same.DeepCopy()
		mutate(&s)
		if f.Holds(&s) {
			t.Errorf("%s differs, yet the fallbacks hold", name)
		}
	}
}

// The status writer patches with a merge patch computed from the whole status: it must carry
// the live fallbacks over unchanged, or its patch would erase them.
func TestDesiredStatusKeepsTheLiveFallbacks(t *testing.T) {
	r := mustAlternative(t, testutil.NewImageAlternative("alt").Repository("quay.io/acme/foo").Repository("registry.local/acme/foo"))
	current := v1alpha1.RoutingStatus{
		ActiveFallbacks: []v1alpha1.ActiveFallback{{Original: "quay.io/acme/foo", RoutedTo: "registry.local/acme/foo", Pods: 4, Since: metav1.NewTime(t0)}},
		Fallbacks:       1,
		FallbackPods:    4,
	}
	next, changed := DesiredStatus(r, Resolve(r, lookupIn(), nil), 0, &current, metav1.NewTime(t0))
	if !changed {
		t.Fatal("the first status is no change")
	}
	if diff := cmp.Diff(current.ActiveFallbacks, next.ActiveFallbacks); diff != "" || next.Fallbacks != 1 || next.FallbackPods != 4 {
		t.Errorf("DesiredStatus changed the live fallbacks: fallbacks %d, pods %d (-want +got):\n%s", next.Fallbacks, next.FallbackPods, diff)
	}
}

// BenchmarkDecideFallbacks is one computation for a resource with 5,000 live pods of two
// routed containers each, over 100 images of a group (what one tick costs, and allocates, for
// a large resource).
func BenchmarkDecideFallbacks(b *testing.B) {
	obj := testutil.NewImageAlternative("grp").Group("quay.io/acme/").Group("registry.local/acme/").Build()
	r, err := FromImageAlternative(&obj)
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]FallbackPod, 5000)
	for i := range pods {
		a, c := fmt.Sprintf("x%02d", i%100), fmt.Sprintf("y%02d", i%37)
		pods[i] = fbPod(fmt.Sprintf("p%d", i), time.Duration(i)*time.Second, "ImageAlternative/grp", map[string][2]string{
			"a": {"quay.io/acme/" + a + ":1", "registry.local/acme/" + a + ":1"},
			"c": {"quay.io/acme/" + c + "@" + testDigest, "registry.local/acme/" + c + "@" + testDigest},
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		if f := DecideFallbacks(r, pods, anyNamespace); f.Pods != 5000 || f.Total != 137 {
			b.Fatalf("%+v", f)
		}
	}
}

// What is ahead of a pair: the candidates before the one its pods were routed to, the
// original first, each repository once; nothing for a pair routed to the first candidate.
func TestDecideFallbacksAhead(t *testing.T) {
	alt := mustAlternative(t, testutil.NewImageAlternative("alt").Repository("quay.io/acme/foo").Repository("hanging.local/acme/foo").Repository("registry.local/acme/foo"))
	const byAlt = "ImageAlternative/alt"
	got := DecideFallbacks(alt, []FallbackPod{
		fbPod("a", 0, byAlt, map[string][2]string{"c": {"quay.io/acme/foo:v1", "registry.local/acme/foo:v1"}}),
		fbPod("b", time.Minute, byAlt, map[string][2]string{"c": {"quay.io/acme/foo@" + testDigest, "registry.local/acme/foo@" + testDigest}}),
		fbPod("c", time.Minute, byAlt, map[string][2]string{"c": {"quay.io/acme/foo:v2", "hanging.local/acme/foo:v2"}}),
	}, anyNamespace)
	want := []CheckTarget{
		{Repository: "hanging.local/acme/foo", Reference: "hanging.local/acme/foo:v1", Host: "hanging.local"},
		{Repository: "quay.io/acme/foo", Reference: "quay.io/acme/foo:v1", Host: "quay.io"},
	}
	if diff := cmp.Diff(want, got.Ahead); diff != "" {
		t.Errorf("ahead (-want +got):\n%s", diff)
	}
}

// Past MaxUnavailable repositories, the pairs of the most namespaces keep theirs, then those
// of the most pods: a flood of pairs one namespace forges (many pods, many containers each)
// does not crowd out what the pods of several namespaces wait on.
func TestDecideFallbacksAheadKeepsThePairsOfTheMostNamespaces(t *testing.T) {
	group := mustAlternative(t, testutil.NewImageAlternative("grp").Group("quay.io/acme/").Group("registry.local/acme/"))
	const by = "ImageAlternative/grp"
	var pods []FallbackPod
	// One namespace: 3 pods, each with 1,000 containers of forged pairs.
	for p := range 3 {
		containers := map[string][2]string{}
		for i := range 1000 {
			img := fmt.Sprintf("acme/a%03d:v1", i)
			containers[fmt.Sprintf("c%d", i)] = [2]string{"quay.io/" + img, "registry.local/" + img}
		}
		pods = append(pods, fbPod(fmt.Sprintf("forged%d", p), 0, by, containers))
	}
	// Two namespaces, one pod each, on zzz; one pod on yyy in a third namespace.
	for i, ns := range []string{"a", "b"} {
		p := fbPod(fmt.Sprintf("z%d", i), 0, by, map[string][2]string{"c": {"quay.io/acme/zzz:v1", "registry.local/acme/zzz:v1"}})
		p.Namespace = ns
		pods = append(pods, p)
	}
	got := DecideFallbacks(group, pods, anyNamespace).Ahead
	if len(got) != MaxUnavailable {
		t.Fatalf("%d repositories ahead, want the bound %d", len(got), MaxUnavailable)
	}
	if !slices.ContainsFunc(got, func(c CheckTarget) bool { return c.Repository == "quay.io/acme/zzz" }) {
		t.Error("the pair of two namespaces lost its repository to one namespace's forged pairs")
	}
	// Among the forged pairs (one namespace, 3 pods each), the order is by name: a000 to a254.
	if !slices.ContainsFunc(got, func(c CheckTarget) bool { return c.Repository == "quay.io/acme/a254" }) ||
		slices.ContainsFunc(got, func(c CheckTarget) bool { return c.Repository == "quay.io/acme/a255" }) {
		t.Error("the cut among equal pairs is not by name")
	}
}
