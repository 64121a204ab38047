package route_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Route writes kuik's records and nothing else of a pod's metadata: the webhook's patch
// compares only route.RecordAnnotations and route.RecordLabels, so a member Route changed
// outside them would be left out of it.
func TestRouteChangesNoMetadataButItsRecords(t *testing.T) {
	acme := testutil.NewImageAlternative("acme").Repository("quay.io/acme/app").Repository("mirror.up/acme/app").SecretRef("creds").Build()
	down := testutil.NewImageAlternative("down").Repository("quay.io/acme/down").Repository("nowhere.local/acme/down").Build()
	trial := testutil.NewImageAlternative("trial").Policy(v1alpha1.RewritePolicyAlways).DryRun().Repository("quay.io/acme/trial").Repository("trial.up/acme/trial").Build()
	ix, errs := routing.NewIndex([]v1alpha1.ImageAlternative{acme, down, trial}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// The first candidate on a host ending in ".up".
	choose := func(_ context.Context, lists [][]routing.Candidate, _ bool) []route.Choice {
		out := make([]route.Choice, len(lists))
		for l, cands := range lists {
			out[l] = route.Choice{Index: -1}
			for i, c := range cands {
				if host, _, _ := strings.Cut(c.Reference, "/"); strings.HasSuffix(host, ".up") {
					out[l] = route.Choice{Index: i, Digest: "sha256:" + strings.Repeat("ab", 32)}
					break
				}
			}
		}
		return out
	}
	foreign := func() (map[string]string, map[string]string) {
		return map[string]string{"example.com/note": "kept", "kuik.enix.io/other": "kept"},
			map[string]string{"app": "web", "kuik.enix.io/other": "kept"}
	}
	tests := map[string]func(p *corev1.Pod){
		"routed":         func(*corev1.Pod) {},
		"no alternative": func(p *corev1.Pod) { p.Spec.Containers[0].Image = "quay.io/acme/down:v1" },
		"dry run":        func(p *corev1.Pod) { p.Spec.Containers[0].Image = "quay.io/acme/trial:v1" },
		"forged records": func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "ghcr.io/evil/app:v1"
			p.Labels[v1alpha1.LabelRewritten] = "true"
			p.Annotations[v1alpha1.AnnotationOriginalImages] = `{"c":"quay.io/acme/app:v1"}`
			p.Annotations[v1alpha1.AnnotationRewrittenBy] = `{"c":"ImageAlternative/acme"}`
			p.Annotations[v1alpha1.AnnotationReason] = `not json`
			p.Annotations[v1alpha1.AnnotationDryRun] = `{"gone":{}}`
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "quay.io/acme/app:v1"}}},
			}
			p.Annotations, p.Labels = foreign()
			mutate(p)
			annotations, podLabels := maps.Clone(p.Annotations), maps.Clone(p.Labels)
			if _, err := route.Route(t.Context(), p, labels.Set{}, ix, choose, route.Scope{}); err != nil {
				t.Fatal(err)
			}
			if n := changedOutside(annotations, p.Annotations, route.RecordAnnotations[:]); n != nil {
				t.Errorf("annotations changed outside kuik's records: %q", n)
			}
			if n := changedOutside(podLabels, p.Labels, route.RecordLabels[:]); n != nil {
				t.Errorf("labels changed outside kuik's records: %q", n)
			}
			if maps.Equal(annotations, p.Annotations) {
				t.Errorf("no record changed: the case proves nothing")
			}
		})
	}
}

// changedOutside is the keys outside records whose presence or value differ from old to cur.
func changedOutside(old, cur map[string]string, records []string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(mergeKeys(old, cur))) {
		ov, oldOK := old[k]
		cv, curOK := cur[k]
		if (oldOK != curOK || ov != cv) && !slices.Contains(records, k) {
			out = append(out, k)
		}
	}
	return out
}

func mergeKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
