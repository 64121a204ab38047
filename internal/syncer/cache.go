package syncer

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// TransformPod keeps of a pod only what the syncer reads: name, namespace, labels, kuik's
// annotations, container names and images, phase, creationTimestamp (which dates a live
// fallback) and deletionTimestamp.
func TransformPod(in any) (any, error) {
	p, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			Namespace:         p.Namespace,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp,
			Labels:            p.Labels,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, "kuik.enix.io/") {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	out.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	out.Spec.Containers = slimContainers(p.Spec.Containers)
	if len(p.Spec.EphemeralContainers) > 0 {
		out.Spec.EphemeralContainers = make([]corev1.EphemeralContainer, len(p.Spec.EphemeralContainers))
		for i, c := range p.Spec.EphemeralContainers {
			out.Spec.EphemeralContainers[i].Name = c.Name
			out.Spec.EphemeralContainers[i].Image = c.Image
		}
	}
	return out, nil
}

func slimContainers(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name, Image: c.Image}
	}
	return out
}

// podSourceValues is the index function of sourceIndex.
func podSourceValues(o client.Object) []string {
	var out []string
	for _, s := range PodSources(o.GetAnnotations()) {
		out = append(out, s.String())
	}
	return out
}
