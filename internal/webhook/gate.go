package webhook

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// gate is --match-conditions-gate: it passes a routing resource to the index only at a
// generation the secret-syncer's leader marked PodsSent (the pod webhook's matchConditions
// send its pods, and have been in effect for the settle time). While a newer generation
// waits for its mark, the leader may have applied conditions for it or not yet, so the gate
// routes with a spec both cover: the newer one if it covers no more than the latest marked
// one this process saw of the same object (or nothing), the marked one if the newer only
// widens it, and neither otherwise (or with no marked one: a new resource, or a webhook
// started since the edit). So no pod is routed with a spec whose pods the API server may
// leave out: a resource covers its pods from the first pod it routes on.
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
		prev, ok := seen[om.Name]
		if ok {
			if pm, _ := parts(&prev); pm.UID != om.UID {
				delete(seen, om.Name) // deleted and made again: the old one's spec is not this one's
				ok = false
			}
		}
		cur := coverageOf(&items[i])
		var marked routing.Coverage
		if ok {
			marked = coverageOf(&prev)
		}
		switch {
		case ok && within(cur, marked), within(cur, routing.Coverage{}):
			// It covers no more than the marked generation (a mirror added to a list, an
			// entry removed), or nothing (dryRun is covered; rewritePolicy None, or invalid):
			// whether the conditions still cover the marked generation or already this one,
			// they cover it.
			out = append(out, items[i])
		case ok && within(marked, cur):
			// Widened: the conditions cover the marked generation until they cover this one.
			out = append(out, prev)
		}
		// Otherwise changed both ways: neither spec is sure to be covered. Left out until
		// marked.
	}
	for name := range seen {
		if !listed[name] {
			delete(seen, name) // deleted
		}
	}
	return out, waiting
}

// coverageOf is what one routing resource can cover (routing.Index.Coverage); an invalid
// one covers nothing (the index leaves it out).
func coverageOf[T any](obj *T) routing.Coverage {
	switch o := any(obj).(type) {
	case *v1alpha1.ImageAlternative:
		ix, _ := routing.NewIndex([]v1alpha1.ImageAlternative{*o}, nil)
		return ix.Coverage()
	case *v1alpha1.ImageMirror:
		ix, _ := routing.NewIndex(nil, []v1alpha1.ImageMirror{*o})
		return ix.Coverage()
	}
	return routing.Coverage{}
}

// within reports whether a covers no image b does not: its repositories and groups are
// among b's, and its mirrors are b's (same destination and exclusions).
func within(a, b routing.Coverage) bool {
	for _, r := range a.Repositories {
		if !slices.Contains(b.Repositories, r) {
			return false
		}
	}
	for _, g := range a.Groups {
		if !slices.Contains(b.Groups, g) {
			return false
		}
	}
	for _, m := range a.Mirrors {
		if !slices.ContainsFunc(b.Mirrors, func(n routing.MirrorCoverage) bool {
			return n.Destination == m.Destination && slices.Equal(n.ExcludeImages, m.ExcludeImages)
		}) {
			return false
		}
	}
	return true
}

// podsSent reports whether conds hold PodsSent True at generation gen.
func podsSent(gen int64, conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, v1alpha1.ConditionPodsSent)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen
}
