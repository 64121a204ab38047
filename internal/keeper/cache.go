package keeper

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unique"
	"weak"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// What the keeper caches. Pods, Namespaces and the workload kinds are held as compact values
// of the keeper's own (cachedPod, cachedNamespace, cachedTemplate), read from the informers'
// stores by Gather: 50,000 corev1.Pods, even trimmed, would not fit the keeper's memory budget
// (a Pod is 1.2 KB before any field is set). The client's reader cannot list them: only Gather
// reads them.

// kuikAnnotationPrefix starts every annotation kuik writes; a pod's other annotations are not
// cached.
const kuikAnnotationPrefix = "kuik.enix.io/"

// templateObjects are the workload kinds whose pod templates count (keep.Template).
var templateObjects = map[keep.TemplateKind]client.Object{
	keep.KindReplicaSet:  &appsv1.ReplicaSet{},
	keep.KindStatefulSet: &appsv1.StatefulSet{},
	keep.KindDaemonSet:   &appsv1.DaemonSet{},
	keep.KindJob:         &batchv1.Job{},
	keep.KindCronJob:     &batchv1.CronJob{},
}

// CacheOptions narrows what the keeper caches: the routing resources; every pod, namespace and
// workload template, each trimmed to what a keep.Snapshot holds; Secrets and ConfigMaps of
// namespace (the release namespace) only. A read of anything else fails instead of starting a
// new informer, so no code path lists or watches Secrets cluster-wide. Cached objects are
// shared, never copied on read: callers treat them as read-only.
func CacheOptions(namespace string) cache.Options {
	shared := ptr.To(true)
	only := map[string]cache.Config{namespace: {}}
	byObject := map[client.Object]cache.ByObject{
		&v1alpha1.ImageAlternative{}: {UnsafeDisableDeepCopy: shared},
		&v1alpha1.ImageMirror{}:      {UnsafeDisableDeepCopy: shared},
		&corev1.Namespace{}:          {Transform: TransformNamespace, UnsafeDisableDeepCopy: shared},
		&corev1.Pod{}:                {Transform: TransformPod, UnsafeDisableDeepCopy: shared},
		&corev1.Secret{}:             {Namespaces: only, UnsafeDisableDeepCopy: shared},
		&corev1.ConfigMap{}:          {Namespaces: only, UnsafeDisableDeepCopy: shared},
	}
	for kind, obj := range templateObjects {
		byObject[obj] = cache.ByObject{Transform: transformTemplate(kind), UnsafeDisableDeepCopy: shared}
	}
	return cache.Options{
		ReaderFailOnMissingInformer: true,
		DefaultTransform:            cache.TransformStripManagedFields(),
		ByObject:                    byObject,
	}
}

// watchedObjects are the informers the keeper starts, and reads through Gather or the client.
func watchedObjects() []client.Object {
	objs := []client.Object{&v1alpha1.ImageAlternative{}, &v1alpha1.ImageMirror{}, &corev1.Namespace{}, &corev1.Pod{}, &corev1.Secret{}, &corev1.ConfigMap{}}
	for _, kind := range slices.Sorted(maps.Keys(templateObjects)) {
		objs = append(objs, templateObjects[kind])
	}
	return objs
}

// cachedMeta is the metadata a compact cache value keeps: what the informer's store keys and
// indexes by (namespace/name), and the resource version.
type cachedMeta struct {
	Name, Namespace, ResourceVersion string
}

// GetObjectMeta makes the value a metav1.Object for meta.Accessor, which the informer's key and
// namespace index functions call.
func (m *cachedMeta) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, ResourceVersion: m.ResourceVersion}
}

func (*cachedMeta) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func metaOf(o *metav1.ObjectMeta) cachedMeta {
	return cachedMeta{Name: o.Name, Namespace: o.Namespace, ResourceVersion: o.ResourceVersion}
}

// cachedPod is what the keeper caches of a pod: keep.Pod's fields, whether it is live, and its
// containers with their status images.
type cachedPod struct {
	cachedMeta
	Labels *stringMap
	// Annotations are kuik's only (kuik.enix.io/…), each at most routing.MaxRecordBytes:
	// keep reads its records, nothing else.
	Annotations *stringMap
	Deleting    bool
	Phase       corev1.PodPhase
	// Containers are the init, regular and ephemeral containers, in that order.
	Containers []cachedContainer
}

// cachedContainer is keep.Container with its images interned: 50,000 pods run a few thousand
// images.
type cachedContainer struct {
	Name                        string
	Image, ImageID, StatusImage unique.Handle[string]
}

func (c *cachedContainer) container() keep.Container {
	return keep.Container{Name: c.Name, Image: handleValue(c.Image), ImageID: handleValue(c.ImageID), StatusImage: handleValue(c.StatusImage)}
}

// handleValue is h's string, "" for the zero Handle (a container with no status yet).
func handleValue(h unique.Handle[string]) string {
	if h == (unique.Handle[string]{}) {
		return ""
	}
	return h.Value()
}

// live reports whether the pod counts: not being deleted, not Succeeded nor Failed.
func (p *cachedPod) live() bool {
	return !p.Deleting && p.Phase != corev1.PodSucceeded && p.Phase != corev1.PodFailed
}

func (p *cachedPod) DeepCopyObject() k8sruntime.Object {
	out := *p // the shared maps are immutable
	out.Containers = slices.Clone(p.Containers)
	return &out
}

// cachedNamespace is a namespace's name and labels.
type cachedNamespace struct {
	cachedMeta
	Labels map[string]string
}

func (n *cachedNamespace) DeepCopyObject() k8sruntime.Object {
	out := *n
	out.Labels = maps.Clone(n.Labels)
	return &out
}

// cachedTemplate is keep.Template: a workload's pod template labels and images.
type cachedTemplate struct {
	cachedMeta
	Kind   keep.TemplateKind
	Labels *stringMap
	Images []unique.Handle[string]
}

func (t *cachedTemplate) DeepCopyObject() k8sruntime.Object {
	out := *t // the shared map is immutable
	out.Images = slices.Clone(t.Images)
	return &out
}

func (t *cachedTemplate) template() keep.Template {
	images := make([]string, len(t.Images))
	for i, h := range t.Images {
		images[i] = handleValue(h)
	}
	return keep.Template{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name, Labels: t.Labels.get(), Images: images}
}

// stringMap is an immutable string map shared by every cached object that holds the same
// one: the pods of a ReplicaSet carry the same labels, and often the same records.
type stringMap struct{ m map[string]string }

// get is the map; nil for none.
func (s *stringMap) get() map[string]string {
	if s == nil {
		return nil
	}
	return s.m
}

// sharedMaps hands out one stringMap per distinct content, forgotten once no cached object
// holds it.
type sharedMaps struct {
	mu    sync.Mutex
	byKey map[string]weak.Pointer[stringMap]
}

var stringMaps = &sharedMaps{byKey: map[string]weak.Pointer[stringMap]{}}

// share returns the stringMap holding m's content; nil for an empty m.
func (s *sharedMaps) share(m map[string]string) *stringMap {
	if len(m) == 0 {
		return nil
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	key := b.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.byKey[key].Value(); v != nil {
		return v
	}
	v := &stringMap{m: maps.Clone(m)}
	s.byKey[key] = weak.Make(v)
	runtime.AddCleanup(v, s.forget, key)
	return v
}

// forget drops key once its map is gone, unless a new one took its place.
func (s *sharedMaps) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey[key].Value() == nil {
		delete(s.byKey, key)
	}
}

// TransformPod turns a pod into the cachedPod the keeper keeps of it. The informer may hand it
// its own output again: that is returned as is.
func TransformPod(in any) (any, error) {
	switch p := in.(type) {
	case *cachedPod:
		return p, nil
	case *corev1.Pod:
		return podOf(p), nil
	default:
		return nil, fmt.Errorf("caching a pod: unexpected %T", in)
	}
}

func podOf(p *corev1.Pod) *cachedPod {
	out := &cachedPod{
		cachedMeta: metaOf(&p.ObjectMeta),
		Labels:     stringMaps.share(p.Labels),
		Deleting:   p.DeletionTimestamp != nil,
		Phase:      p.Status.Phase,
	}
	var kuik map[string]string
	for k, v := range p.Annotations {
		// A value over what the webhook writes is the pod author's: left out, as if absent.
		if strings.HasPrefix(k, kuikAnnotationPrefix) && len(v) <= routing.MaxRecordBytes {
			if kuik == nil {
				kuik = map[string]string{}
			}
			kuik[k] = v
		}
	}
	out.Annotations = stringMaps.share(kuik)
	n := len(p.Spec.InitContainers) + len(p.Spec.Containers) + len(p.Spec.EphemeralContainers)
	if n == 0 {
		return out
	}
	out.Containers = make([]cachedContainer, 0, n)
	add := func(name, image string, statuses []corev1.ContainerStatus) {
		c := cachedContainer{Name: name, Image: unique.Make(image)}
		for i := range statuses {
			if statuses[i].Name == name {
				c.ImageID, c.StatusImage = unique.Make(statuses[i].ImageID), unique.Make(statuses[i].Image)
				break
			}
		}
		out.Containers = append(out.Containers, c)
	}
	for i := range p.Spec.InitContainers {
		add(p.Spec.InitContainers[i].Name, p.Spec.InitContainers[i].Image, p.Status.InitContainerStatuses)
	}
	for i := range p.Spec.Containers {
		add(p.Spec.Containers[i].Name, p.Spec.Containers[i].Image, p.Status.ContainerStatuses)
	}
	for i := range p.Spec.EphemeralContainers {
		add(p.Spec.EphemeralContainers[i].Name, p.Spec.EphemeralContainers[i].Image, p.Status.EphemeralContainerStatuses)
	}
	return out
}

// TransformNamespace keeps a namespace's name and labels.
func TransformNamespace(in any) (any, error) {
	switch n := in.(type) {
	case *cachedNamespace:
		return n, nil
	case *corev1.Namespace:
		return &cachedNamespace{cachedMeta: metaOf(&n.ObjectMeta), Labels: n.Labels}, nil
	default:
		return nil, fmt.Errorf("caching a namespace: unexpected %T", in)
	}
}

// transformTemplate keeps of a workload of kind its pod template's labels and its init and
// regular containers' images.
func transformTemplate(kind keep.TemplateKind) toolscache.TransformFunc {
	return func(in any) (any, error) {
		var (
			meta *metav1.ObjectMeta
			tmpl *corev1.PodTemplateSpec
		)
		switch o := in.(type) {
		case *cachedTemplate:
			return o, nil
		case *appsv1.ReplicaSet:
			meta, tmpl = &o.ObjectMeta, &o.Spec.Template
		case *appsv1.StatefulSet:
			meta, tmpl = &o.ObjectMeta, &o.Spec.Template
		case *appsv1.DaemonSet:
			meta, tmpl = &o.ObjectMeta, &o.Spec.Template
		case *batchv1.Job:
			meta, tmpl = &o.ObjectMeta, &o.Spec.Template
		case *batchv1.CronJob:
			meta, tmpl = &o.ObjectMeta, &o.Spec.JobTemplate.Spec.Template
		default:
			return nil, fmt.Errorf("caching a %s: unexpected %T", kind, in)
		}
		out := &cachedTemplate{cachedMeta: metaOf(meta), Kind: kind, Labels: stringMaps.share(tmpl.Labels)}
		for _, cs := range [][]corev1.Container{tmpl.Spec.InitContainers, tmpl.Spec.Containers} {
			for i := range cs {
				out.Images = append(out.Images, unique.Make(cs[i].Image))
			}
		}
		return out, nil
	}
}
