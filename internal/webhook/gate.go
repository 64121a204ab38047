package webhook

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// gate is --match-conditions-gate: it passes a routing resource to the index only at a
// generation the secret-syncer's leader marked PodsSent (the pod webhook's matchConditions
// send its pods, and have been in effect for the settle time). A newer generation not yet
// marked is replaced by the latest marked one this process saw of the same object, or left
// out when there is none (a new resource, or a webhook started since the edit). So no pod is
// routed with a generation whose pods the API server may still leave out: a resource covers
// its pods from the first pod it routes on.
//
// Only the index builder calls it: it is not safe for concurrent use.
type gate struct {
	alternatives map[string]v1alpha1.ImageAlternative
	mirrors      map[string]v1alpha1.ImageMirror
}

func newGate() *gate {
	return &gate{alternatives: map[string]v1alpha1.ImageAlternative{}, mirrors: map[string]v1alpha1.ImageMirror{}}
}

// filter returns the resources to index, and how many of the listed ones are waiting (their
// latest generation is not marked).
func (g *gate) filter(alts []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) ([]v1alpha1.ImageAlternative, []v1alpha1.ImageMirror, int) {
	a, wa := pass(g.alternatives, alts, func(o *v1alpha1.ImageAlternative) (*metav1.ObjectMeta, []metav1.Condition) {
		return &o.ObjectMeta, o.Status.Conditions
	})
	m, wm := pass(g.mirrors, mirrors, func(o *v1alpha1.ImageMirror) (*metav1.ObjectMeta, []metav1.Condition) {
		return &o.ObjectMeta, o.Status.Conditions
	})
	return a, m, wa + wm
}

func pass[T any](seen map[string]T, items []T, parts func(*T) (*metav1.ObjectMeta, []metav1.Condition)) ([]T, int) {
	out := make([]T, 0, len(items))
	waiting := 0
	listed := make(map[string]bool, len(items))
	for i := range items {
		om, conds := parts(&items[i])
		listed[om.Name] = true
		if podsSent(om.Generation, conds) {
			seen[om.Name] = items[i]
			out = append(out, items[i])
			continue
		}
		waiting++
		if prev, ok := seen[om.Name]; ok {
			if pm, _ := parts(&prev); pm.UID == om.UID {
				out = append(out, prev)
				continue
			}
			delete(seen, om.Name) // deleted and made again: the old one's spec is not this one's
		}
	}
	for name := range seen {
		if !listed[name] {
			delete(seen, name) // deleted
		}
	}
	return out, waiting
}

// podsSent reports whether conds hold PodsSent True at generation gen.
func podsSent(gen int64, conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, v1alpha1.ConditionPodsSent)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen
}
