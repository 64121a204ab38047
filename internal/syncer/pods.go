package syncer

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
)

// What the syncer reads of the pods kuik rewrote, and which entries they really use.

// Pod is what the syncer reads of a rewritten pod. Its labels and kuik's annotations are the pod
// author's to write (at creation and at any later update, which the webhook never sees): they
// are claims, which [UsedEntries] checks against the routing core before they count.
type Pod struct {
	Namespace string
	Name      string
	// Labels are the pod's labels, for the resources' podSelector.
	Labels labels.Set
	// Live: not terminating and not finished, so its containers may still pull.
	Live bool
	// Images maps every container (init, regular, ephemeral) to its current image.
	Images map[string]string
	// Originals maps a rewritten container to the image it was rewritten from
	// (kuik.enix.io/original-images).
	Originals map[string]string
	// RewrittenBy maps a rewritten container to the resource whose entry it was rewritten to
	// (kuik.enix.io/rewritten-by).
	RewrittenBy map[string]routing.Source
}

// PodFromObject reads a pod. An annotation that does not parse counts as no rewrite: the webhook
// writes valid JSON, so only someone else's edit yields one.
func PodFromObject(p *corev1.Pod) Pod {
	out := Pod{
		Namespace: p.Namespace,
		Name:      p.Name,
		Labels:    p.Labels,
		Live: p.DeletionTimestamp == nil &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed,
		Images: make(map[string]string, len(p.Spec.InitContainers)+len(p.Spec.Containers)+len(p.Spec.EphemeralContainers)),
	}
	for i := range p.Spec.InitContainers {
		out.Images[p.Spec.InitContainers[i].Name] = p.Spec.InitContainers[i].Image
	}
	for i := range p.Spec.Containers {
		out.Images[p.Spec.Containers[i].Name] = p.Spec.Containers[i].Image
	}
	for i := range p.Spec.EphemeralContainers {
		out.Images[p.Spec.EphemeralContainers[i].Name] = p.Spec.EphemeralContainers[i].Image
	}
	out.Originals = route.OriginalImages(p.Annotations)
	out.RewrittenBy = route.RewrittenBy(p.Annotations)
	return out
}

// PodSources lists the resources that rewrote at least one container of the pod, sorted.
func PodSources(annotations map[string]string) []routing.Source {
	var out []routing.Source
	for _, s := range route.RewrittenBy(annotations) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b routing.Source) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// UsedEntries returns the auths keys of the injecting entries of r that serve live pods of a
// namespace with these labels, counting only the records the webhook could have written: for
// each container the pod's rewritten-by annotation attributes to r, r must select the pod and
// the namespace and have, for the container's recorded original image, an injecting candidate
// whose reference is the container's current image — the routing core's own matching, selectors
// and order decide (routing.Index.Candidates). A forged record (any pod author can label a pod
// kuik.enix.io/rewritten=true and write kuik's annotations, at creation or later) counts for
// nothing, so it cannot bring a credential into a namespace or for a pod the resource does not
// route, nor one of an entry the pod's image could not have been routed to. Sorted, without
// duplicates.
func UsedEntries(r *Resource, pods []Pod, namespaceLabels labels.Set) []string {
	src := r.Source()
	var keys []string
	for i := range pods {
		p := &pods[i]
		if !p.Live {
			continue
		}
		for container, s := range p.RewrittenBy {
			if s != src {
				continue
			}
			for _, k := range r.recordedKeys(p.Originals[container], p.Images[container], p.Labels, namespaceLabels) {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
	}
	slices.Sort(keys)
	return keys
}
