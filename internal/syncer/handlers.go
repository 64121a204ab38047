package syncer

import (
	"context"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// objectMeta reads the metadata of an informer object, tombstones included.
func objectMeta(obj any) metav1.Object {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	return m
}

// resourceHandler re-decides every pair of a resource whose spec changed (a status write, ours
// included, does not change the generation and only re-checks the status), and forgets a
// deleted resource: the garbage collector deletes its Secrets.
func (c *Controller) resourceHandler(ctx context.Context, kind routing.Kind) toolscache.ResourceEventHandler {
	key := func(m metav1.Object) ResourceKey { return ResourceKey{Kind: kind, Name: m.GetName()} }
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m := objectMeta(obj); m != nil {
				c.enqueueResource(ctx, key(m))
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, n := objectMeta(oldObj), objectMeta(newObj)
			if o == nil || n == nil {
				return
			}
			if o.GetGeneration() != n.GetGeneration() || o.GetUID() != n.GetUID() ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) {
				c.enqueueResource(ctx, key(n))
				return
			}
			c.statusQueue.AddAfter(key(n), c.cfg.StatusDelay)
		},
		DeleteFunc: func(obj any) {
			if m := objectMeta(obj); m != nil {
				c.forgetResource(key(m))
			}
		},
	}
}

// namespaceHandler re-decides the pairs of a namespace that appears or whose labels changed (it
// may enter or leave a resource's namespaceSelector), and forgets the pairs of a deleted
// namespace.
func (c *Controller) namespaceHandler(ctx context.Context) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m := objectMeta(obj); m != nil {
				c.enqueueNamespace(ctx, m.GetName())
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, n := objectMeta(oldObj), objectMeta(newObj)
			if o == nil || n == nil {
				return
			}
			if !labels.Equals(o.GetLabels(), n.GetLabels()) ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) {
				c.enqueueNamespace(ctx, n.GetName())
			}
		},
		DeleteFunc: func(obj any) {
			if m := objectMeta(obj); m != nil {
				c.forgetNamespace(m.GetName())
			}
		},
	}
}

// enqueueNamespace queues, for one namespace, the pair of every Always resource and of every
// OnFailure resource that rewrote a pod there or has a pair there.
func (c *Controller) enqueueNamespace(ctx context.Context, ns string) {
	present := map[ResourceKey]struct{}{}
	var pods corev1.PodList
	if err := c.cache.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "listing pods from the cache")
	}
	for i := range pods.Items {
		for _, s := range PodSources(pods.Items[i].Annotations) {
			present[ResourceKey{Kind: s.Kind, Name: s.Name}] = struct{}{}
		}
	}
	c.mu.Lock()
	for k := range c.pairs {
		if k.Namespace == ns {
			present[k.resource()] = struct{}{}
		}
	}
	c.mu.Unlock()
	for _, rk := range c.resourceKeys(ctx) {
		_, here := present[rk]
		if !here {
			r, _, err := c.resource(ctx, rk)
			if err != nil || r == nil || r.Policy != v1alpha1.RewritePolicyAlways {
				continue
			}
		}
		c.enqueuePair(PairKey{Kind: rk.Kind, Name: rk.Name, Namespace: ns})
	}
}

// podHandler re-decides the pairs of the resources that rewrote a pod, before and after the
// change. Only resources that exist: a pod naming invented ones queues nothing (a resource
// created later finds its pods through the index).
func (c *Controller) podHandler(ctx context.Context) toolscache.ResourceEventHandler {
	enqueue := func(obj any) {
		m := objectMeta(obj)
		if m == nil {
			return
		}
		for _, s := range c.existingSources(ctx, m.GetAnnotations()) {
			c.enqueuePair(PairKey{Kind: s.Kind, Name: s.Name, Namespace: m.GetNamespace()})
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			enqueue(oldObj)
			enqueue(newObj)
		},
		DeleteFunc: enqueue,
	}
}

// secretHandler re-decides every pair of the resources whose secretRef names a Secret of the
// cluster resource namespace that changed.
func (c *Controller) secretHandler(ctx context.Context) toolscache.ResourceEventHandler {
	changed := func(obj any) {
		m := objectMeta(obj)
		if m == nil {
			return
		}
		if strings.HasPrefix(m.GetName(), v1alpha1.ProviderSecretPrefix) {
			c.providers.repair(m.GetName())
		}
		for _, rk := range c.resourceKeys(ctx) {
			if c.references(ctx, rk, m.GetName()) {
				c.enqueueResource(ctx, rk)
			}
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, newObj any) { changed(newObj) },
		DeleteFunc: changed,
	}
}

// references reports whether an injecting entry of the resource names the Secret.
func (c *Controller) references(ctx context.Context, rk ResourceKey, secret string) bool {
	r, _, err := c.resource(ctx, rk)
	if err != nil || r == nil {
		return false
	}
	for i := range r.Entries {
		if e := &r.Entries[i]; e.Injects && e.Auth.SecretRef != nil && e.Auth.SecretRef.Name == secret {
			return true
		}
	}
	return false
}

// existingSources is PodSources without the resources absent from the cache.
func (c *Controller) existingSources(ctx context.Context, annotations map[string]string) []routing.Source {
	sources := PodSources(annotations)
	return slices.DeleteFunc(sources, func(s routing.Source) bool { return !c.exists(ctx, s) })
}

// exists reports whether the cache holds the routing resource.
func (c *Controller) exists(ctx context.Context, s routing.Source) bool {
	var obj client.Object
	switch s.Kind {
	case routing.KindImageAlternative:
		obj = &v1alpha1.ImageAlternative{}
	case routing.KindImageMirror:
		obj = &v1alpha1.ImageMirror{}
	default:
		return false
	}
	return c.cache.Get(ctx, client.ObjectKey{Name: s.Name}, obj) == nil
}
