package syncer

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// World is a snapshot of what the syncer watches, for [Render].
type World struct {
	Resources []*Resource
	// Secrets of the cluster resource namespace, by name.
	Secrets map[string]*corev1.Secret
	// Namespaces by name with their labels; nil stands for the namespaces of Pods, unlabelled.
	Namespaces map[string]labels.Set
	// Pods are the rewritten pods.
	Pods []Pod
}

// Render returns the Secrets the syncer would apply for a world, sorted by namespace then
// name, and every injecting entry left out, by resource then entry. It uses the decisions of
// the controller, from a fresh start: no retention history, so OnFailure Secrets hold what live
// pods use.
func Render(w World) ([]*corev1.Secret, []LeftOut, error) {
	namespaces := w.Namespaces
	if namespaces == nil {
		namespaces = map[string]labels.Set{}
		for _, p := range w.Pods {
			namespaces[p.Namespace] = labels.Set{}
		}
	}
	podsByNamespace := map[string][]Pod{}
	for _, p := range w.Pods {
		podsByNamespace[p.Namespace] = append(podsByNamespace[p.Namespace], p)
	}
	lookup := func(name string) (*corev1.Secret, bool) {
		s, ok := w.Secrets[name]
		return s, ok
	}
	resources := slices.Clone(w.Resources)
	slices.SortFunc(resources, func(a, b *Resource) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})

	var secrets []*corev1.Secret
	var leftOut []LeftOut
	for _, r := range resources {
		if !r.Injecting() {
			continue
		}
		res := Resolve(r, lookup)
		leftOut = append(leftOut, res.LeftOut...)
		for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
			d, err := DecidePair(PairInput{
				Resource:        r,
				Resolution:      res,
				Namespace:       ns,
				NamespaceLabels: namespaces[ns],
				Pods:            podsByNamespace[ns],
			})
			if err != nil {
				return nil, nil, err
			}
			if d.Needed {
				secrets = append(secrets, d.Secret)
			}
		}
	}
	slices.SortFunc(secrets, func(a, b *corev1.Secret) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return secrets, leftOut, nil
}
