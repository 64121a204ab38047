package syncer

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// sourceIndex indexes the cached pods by the values of their rewritten-by annotation
// ("ImageAlternative/<name>"), so a resource finds its pods without a scan.
const sourceIndex = "kuik.enix.io/rewritten-by"

// namespaceMeta is the cache key of Namespaces, watched as metadata only.
func namespaceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

func namespaceMetaList() *metav1.PartialObjectMetadataList {
	m := &metav1.PartialObjectMetadataList{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	return m
}

// CacheOptions narrows what the syncer caches: the routing resources; Namespaces as metadata;
// only the Pods labelled kuik.enix.io/rewritten=true, trimmed by [TransformPod]; Secrets of the
// cluster resource namespace only. A read of anything else fails instead of starting a new
// informer, so no code path can list or watch Secrets cluster-wide. Cached objects are shared,
// never copied on read: callers treat them as read-only.
func CacheOptions(clusterResourceNamespace string) cache.Options {
	shared := ptr.To(true)
	return cache.Options{
		ReaderFailOnMissingInformer: true,
		DefaultTransform:            cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.ImageAlternative{}: {UnsafeDisableDeepCopy: shared},
			&v1alpha1.ImageMirror{}:      {UnsafeDisableDeepCopy: shared},
			namespaceMeta():              {UnsafeDisableDeepCopy: shared},
			&corev1.Pod{}: {
				Label:                 labels.SelectorFromSet(labels.Set{v1alpha1.LabelRewritten: "true"}),
				Transform:             TransformPod,
				UnsafeDisableDeepCopy: shared,
			},
			&corev1.Secret{}: {
				Namespaces:            map[string]cache.Config{clusterResourceNamespace: {}},
				UnsafeDisableDeepCopy: shared,
			},
		},
	}
}

// TransformPod keeps of a pod only what the syncer's decisions read (PodFromObject: the
// pair's used entries, the live fallbacks), bounded whatever the pod's author wrote: name,
// namespace, resource version, creationTimestamp (which dates a live fallback),
// deletionTimestamp, phase, labels (podSelector), and kuik's records (original-images and
// rewritten-by) of the containers that exist and name a resource, with those containers' names
// and images, all as spec.containers. Nothing else: no other annotation, no container kuik
// did not record (the missed-pull watcher reads pods from the API server, not from here).
//
// A pod over what kuik could have written (routing.LabelsWithinBounds, routing.MaxRecordBytes:
// the webhook leaves such a pod as it is) counts as not rewritten: it is kept as a stub of name,
// namespace and resource version, which the informer needs to follow it, and no labels, records
// or containers, so it is in no pair's pods and no index entry. A stub costs the same for a
// 1 MiB pod as for a small one.
func TransformPod(in any) (any, error) {
	p, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            p.Name,
			Namespace:       p.Namespace,
			ResourceVersion: p.ResourceVersion,
		},
	}
	if !routing.LabelsWithinBounds(p.Labels) {
		return out, nil
	}
	containers, originals, by, ok := podRecords(p)
	if !ok {
		return out, nil
	}
	out.CreationTimestamp = p.CreationTimestamp
	out.DeletionTimestamp = p.DeletionTimestamp
	out.Labels = p.Labels
	out.Status.Phase = p.Status.Phase
	out.Spec.Containers = containers
	if len(containers) > 0 {
		o, err := json.Marshal(originals)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", v1alpha1.AnnotationOriginalImages, err)
		}
		b, err := json.Marshal(by)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", v1alpha1.AnnotationRewrittenBy, err)
		}
		out.Annotations = map[string]string{v1alpha1.AnnotationOriginalImages: string(o), v1alpha1.AnnotationRewrittenBy: string(b)}
	}
	return out, nil
}

// podRecords returns kuik's records of a pod that a decision may count: for each container
// that exists (init, regular or ephemeral), has a recorded original and names a resource in
// rewritten-by (route.RewrittenContainers, the webhook's reader), the container with its
// current image, the original and the resource. A record of a container the pod lacks, or
// naming no resource, counts for nothing and is dropped. ok is false when what remains is more
// than the webhook writes (routing.MaxRecordBytes).
func podRecords(p *corev1.Pod) (containers []corev1.Container, originals, by map[string]string, ok bool) {
	raw := p.Annotations[v1alpha1.AnnotationRewrittenBy]
	if raw == "" {
		return nil, nil, nil, true
	}
	if len(raw) > routing.MaxRecordBytes || len(p.Annotations[v1alpha1.AnnotationOriginalImages]) > routing.MaxRecordBytes {
		return nil, nil, nil, false // more than the webhook writes, whatever it names
	}
	size := 0
	for r := range route.RewrittenContainers(p) {
		if _, twice := by[r.Container]; twice {
			continue // the API server refuses two containers of one name; a stale read at most
		}
		if size += routing.RecordBytes(r.Container, r.Original, r.Image, r.By); size > routing.MaxRecordBytes {
			return nil, nil, nil, false
		}
		if by == nil {
			originals, by = map[string]string{}, map[string]string{}
		}
		containers = append(containers, corev1.Container{Name: r.Container, Image: r.Image})
		originals[r.Container] = r.Original
		by[r.Container] = r.By.String()
	}
	return containers, originals, by, true
}

// podSourceValues is the index function of sourceIndex.
func podSourceValues(o client.Object) []string {
	var out []string
	for _, s := range PodSources(o.GetAnnotations()) {
		out = append(out, s.String())
	}
	return out
}
